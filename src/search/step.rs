//! The contract between the search and an engine: what the search asks at one decoder step
//! ([`StepRequest`]), what the engine answers ([`Candidate`]s), and the scoring every engine
//! must apply the same way (log-softmax, the repetition penalty, the repeat block, top-k
//! order). The GPU kernel `logits_topk` mirrors these functions, and `reference` builds its
//! oracle from them.

use serde::{Deserialize, Serialize};

/// One next-token candidate of a row.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Candidate {
    /// Token id.
    pub token: u32,
    /// Log-probability after the repetition penalty and the repeat block, ≤ 0.
    pub logprob: f32,
}

/// One row to score at a decoder step.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepRow<'a> {
    /// The sentence of the batch this row belongs to: its index in the `source_lens` of
    /// [`super::beam_search_batch`] (0 for [`super::beam_search`]); the engine attends to that
    /// sentence's source.
    pub sentence: usize,
    /// The row of the previous step this one extends (its KV-cache history), an index into
    /// the previous request's rows (of the whole batch). 0 at step 0, where there is no
    /// previous step.
    pub parent: usize,
    /// The decoder input: the last generated token, or BOS at step 0.
    pub last_token: u32,
    /// Every token generated so far (no BOS); its last `repetition_window` tokens are
    /// penalized.
    pub history: &'a [u32],
}

/// What the search asks of the model at one decoder step.
#[derive(Clone, Debug, PartialEq)]
pub struct StepRequest<'a> {
    /// The decoder step, from 0; every row has `step` generated tokens (the sentences of a
    /// batch advance together).
    pub step: usize,
    /// Candidates wanted per row.
    pub k: usize,
    /// Passed to [`apply_repetition_penalty`].
    pub repetition_penalty: f32,
    /// Passed to [`apply_repetition_penalty`].
    pub repetition_window: usize,
    /// Passed to [`repeat_bans`]: the longest phrase, in tokens, that may not follow itself.
    pub block_repeats: usize,
    /// Passed to [`repeat_bans`]: by token id, the tokens it never bans (the target
    /// vocabulary's [`crate::tokenizer::Tokenizer::repeatable`]; ids past its end are not).
    pub repeatable: &'a [bool],
    /// The rows to score, in the order the answer must follow: the live rows of each sentence
    /// still searching, sentence by sentence (so a row's parent belongs to its own sentence).
    pub rows: Vec<StepRow<'a>>,
}

impl StepRequest<'_> {
    /// Applies to one row's log-probs (after the log-softmax) everything the request adds to
    /// the model: [`apply_repetition_penalty`], then the [`repeat_bans`] of the row's history
    /// set to `-inf`. Every engine calls this (the GPU kernel mirrors it).
    pub fn penalize(&self, logprobs: &mut [f32], history: &[u32]) {
        apply_repetition_penalty(
            logprobs,
            history,
            self.repetition_penalty,
            self.repetition_window,
        );
        for token in repeat_bans(history, self.block_repeats, self.repeatable) {
            if let Some(lp) = logprobs.get_mut(token as usize) {
                *lp = f32::NEG_INFINITY;
            }
        }
    }
}

/// A decoder that scores one step for several rows: the interface between the search and an
/// engine.
pub trait StepModel {
    /// What can go wrong inside the model.
    type Error: std::error::Error + 'static;

    /// The token fed at step 0 (the models' `<s>`).
    fn bos(&self) -> u32 {
        crate::config::BOS_ID
    }

    /// The token that ends a hypothesis (the models' `</s>`).
    fn eos(&self) -> u32 {
        crate::config::EOS_ID
    }

    /// By token id, the tokens the repeat block never bans ([`StepRequest::repeatable`]): the
    /// engine's target vocabulary's [`crate::tokenizer::Tokenizer::repeatable`]. None by default.
    fn repeatable(&self) -> std::sync::Arc<[bool]> {
        std::sync::Arc::from(Vec::new())
    }

    /// The longest target the model supports (its positional table, or the positions its
    /// caches hold for the longest sentence of the batch), in generated tokens.
    fn max_len_cap(&self) -> usize;

    /// Scores `request.rows`: one list per row, in order, of at most `request.k` distinct
    /// tokens (exactly `k` unless the vocabulary is smaller) with their log-probabilities after
    /// [`StepRequest::penalize`], sorted by descending log-prob, ties by ascending token id
    /// (as [`top_k`]).
    /// Async so the GPU engine can await its readback in the browser as natively.
    fn step(
        &mut self,
        request: &StepRequest<'_>,
    ) -> impl Future<Output = Result<Vec<Vec<Candidate>>, Self::Error>>;
}

/// Replaces `logits` by their log-softmax, in place.
///
/// All `-inf` (or any NaN) input gives NaN output, which the search rejects.
pub fn log_softmax(logits: &mut [f32]) {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f32 = logits.iter().map(|&x| (x - max).exp()).sum();
    let log_sum = max + sum.ln();
    for x in logits {
        *x -= log_sum;
    }
}

/// The repetition penalty, exactly as every model must apply it (the GPU kernel mirrors this).
///
/// Every distinct token among the last `window` entries of `history` (the generated tokens,
/// no BOS) has its log-prob multiplied by `penalty`, once, however often it occurs. Log-probs
/// are ≤ 0, so a penalty above 1 lowers them; a log-prob of 0 (a certain token) or `-inf` is
/// unchanged. `penalty == 1` or `window == 0` does nothing; tokens outside `logprobs` are
/// ignored. The result is no longer normalized, and is not meant to be.
pub fn apply_repetition_penalty(
    logprobs: &mut [f32],
    history: &[u32],
    penalty: f32,
    window: usize,
) {
    if penalty == 1.0 || window == 0 {
        return;
    }
    let mut recent = history[history.len().saturating_sub(window)..].to_vec();
    recent.sort_unstable();
    recent.dedup();
    for token in recent {
        if let Some(lp) = logprobs.get_mut(token as usize) {
            *lp *= penalty;
        }
    }
}

/// The tokens that may not come next after `history` (the generated tokens, no BOS), so that
/// no phrase of up to `span` tokens repeats in a loop: a token that would be the third of the
/// same token in a row, and, for every `n` in `2..=span`, the token that would complete an
/// `n`-token phrase followed immediately by itself (`a b c a b` bans `c` for `n = 3`). The
/// rule of the error analysis' repetition errors ([`crate::eval::has_repetition`]: a word three
/// times in a row, a phrase of 2 to 4 words twice), on tokens. At most `span` distinct tokens,
/// in the order found; `span == 0` bans nothing, `span == 1` only the third of a run.
///
/// A token marked in `repeatable` (by id) is never banned: the pieces inside a word that hold
/// no letter, so that `1,000,000` (`▁1 , 000 , 000`) and `...` (`. . .`) can still be written.
pub fn repeat_bans(history: &[u32], span: usize, repeatable: &[bool]) -> Vec<u32> {
    let mut bans = Vec::new();
    let len = history.len();
    if span == 0 {
        return bans;
    }
    let mut ban = |token: u32| {
        if !bans.contains(&token) && !repeatable.get(token as usize).copied().unwrap_or(false) {
            bans.push(token);
        }
    };
    if len >= 2 && history[len - 1] == history[len - 2] {
        ban(history[len - 1]);
    }
    // The next token t completes `history[len+1-2n..len+1-n] == history[len+1-n..len] ++ [t]`:
    // the first n-1 tokens of the two copies agree and t is the first copy's last token.
    for n in 2..=span {
        if 2 * n - 1 > len {
            break;
        }
        let first = &history[len + 1 - 2 * n..len + 1 - n];
        if first[..n - 1] == history[len + 1 - n..] {
            ban(first[n - 1]);
        }
    }
    bans
}

/// The `k` best entries of `logprobs` (token id = index), by descending log-prob, ties by
/// ascending token id (`f32::total_cmp` order). Returns `min(k, logprobs.len())` candidates.
///
/// One pass that keeps the best `k` so far in order (an insertion into a short sorted list,
/// only for an entry that beats the current `k`-th): a search asks for k ≤ 8 of a vocabulary
/// of thousands, where a selection over every index cost several times more.
pub fn top_k(logprobs: &[f32], k: usize) -> Vec<Candidate> {
    /// `f32::total_cmp`'s order as an integer: the same comparisons, and a max that vectorizes.
    fn key(v: f32) -> i32 {
        let b = v.to_bits() as i32;
        b ^ (((b >> 31) as u32) >> 1) as i32
    }
    const CHUNK: usize = 16;
    let k = k.min(logprobs.len());
    let mut best: Vec<Candidate> = Vec::with_capacity(k + 1);
    if k == 0 {
        return best;
    }
    // The k-th's key once there are k; an entry must be strictly larger to get in.
    let mut threshold = None;
    for (c, chunk) in logprobs.chunks(CHUNK).enumerate() {
        // Most chunks hold nothing better than the k-th: one vectorized max skips them.
        if let Some(t) = threshold
            && chunk.iter().map(|&v| key(v)).fold(i32::MIN, i32::max) <= t
        {
            continue;
        }
        for (j, &lp) in chunk.iter().enumerate() {
            // Ids ascend, so an entry equal to the k-th ranks after it: only a strictly
            // larger one gets in.
            if threshold.is_some_and(|t| key(lp) <= t) {
                continue;
            }
            let at = best.partition_point(|b| b.logprob.total_cmp(&lp).is_ge());
            let token = (c * CHUNK + j) as u32;
            best.insert(at, Candidate { token, logprob: lp });
            best.truncate(k);
            if best.len() == k {
                threshold = Some(key(best[k - 1].logprob));
            }
        }
    }
    best
}
