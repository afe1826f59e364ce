//! Beam search on the CPU: the bookkeeping half of decoding, independent of the engine.
//!
//! The engine (the WebGPU decoder, or a CPU model in tests) implements [`StepModel`]: given the
//! live rows of one decoder step it returns, per row, the top-`k` next tokens with their
//! log-probabilities *after* the repetition penalty ([`apply_repetition_penalty`], which the
//! GPU kernel mirrors). Everything else happens here, on at most `beam × k` candidates per
//! step, so the GPU only ever reads back `rows × k` (token, log-prob) pairs.
//!
//! # Semantics
//! - **Rows.** Step 0 scores one row (BOS). Each later step scores the live hypotheses of the
//!   previous step, ordered by group and, within a group, by selection order. A row names the
//!   row of the previous step it extends (`parent`), so the engine can follow (or reorder) its
//!   KV caches by it.
//! - **Groups (diverse beam search, Vijayakumar et al. 2018, Hamming diversity).** The beam is
//!   split into `groups` groups of `beam / groups` hypotheses. At each step the groups choose
//!   in order 0, 1, …; when group `g` chooses, a candidate token chosen `c` times at this step
//!   by groups `< g` (whether it continued or finished a hypothesis) is ranked by
//!   `sum + logprob − diversity · c`. The diversity term only ranks: the stored score stays the
//!   model's log-probability. At step 0 every group chooses from the single BOS row.
//! - **Shrinking beam.** A group with `n` live hypotheses chooses its best `n` candidates. A
//!   candidate that is EOS, or that reaches the maximum length, becomes a finished hypothesis
//!   and its slot is gone; the rest continue. So at most `beam` hypotheses ever finish.
//! - **Length penalty.** A finished hypothesis of `len` generated tokens (EOS included; a
//!   hypothesis cut at the maximum length has `len = max_len`) and log-prob sum `s` scores
//!   `s / len^α` ([`length_normalized`]). α = 0 ranks by total log-prob, α = 1 by mean.
//! - **Early termination (exact).** Candidate log-probs are ≤ 0, so a live hypothesis with sum
//!   `s` ends with a sum `≤ s` and a length `≤ max_len`; for α ≥ 0 and `s ≤ 0`, `s / L^α` is
//!   largest at the largest `L`, so its final score is at most `s / max_len^α`. Once
//!   `n_best` hypotheses have finished and every live bound is at or below the `n_best`-th
//!   best finished score, nothing that could still finish would enter the output (a later tie
//!   ranks after the hypotheses already finished), and the search stops. f32 addition and
//!   division are monotone (and `powf` is, in every libm we target), so the bound also holds
//!   for the rounded values.
//! - **Output.** Finished hypotheses sorted by score, descending; ties keep the order in which
//!   hypotheses finished (earlier step first, then lower group, then selection order); the
//!   first `n_best` are returned.

use serde::{Deserialize, Serialize};

pub mod testing;
#[cfg(test)]
mod tests;

/// The largest beam [`SearchOptions::validate`] accepts; beyond it the per-step bookkeeping and
/// the GPU's top-k buffers grow for no gain in translation quality.
pub const MAX_BEAM: usize = 256;

/// What the search does: beam size, diversity, penalties and output size.
///
/// Deserializing fills missing fields from [`SearchOptions::default`] and rejects unknown ones,
/// so a typo in a settings file is an error rather than a silently ignored option.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SearchOptions {
    /// Hypotheses kept per step, all groups together. 1 with one group is greedy decoding.
    pub beam: usize,
    /// Diverse beam groups; must divide `beam`.
    pub groups: usize,
    /// Hamming diversity penalty λ ≥ 0 subtracted per earlier-group use of a token at a step.
    pub diversity: f32,
    /// Length penalty α ≥ 0: a finished hypothesis scores `logprob_sum / len^α`.
    pub length_penalty: f32,
    /// Repetition penalty ≥ 1 that multiplies the log-prob of recently generated tokens; 1 is
    /// off. See [`apply_repetition_penalty`].
    pub repetition_penalty: f32,
    /// How many of the most recent generated tokens the repetition penalty looks at; 0 is off.
    pub repetition_window: usize,
    /// How many hypotheses to return, `1..=beam`.
    pub n_best: usize,
    /// Maximum target length per source token: `max_len = floor(a · source_len) + b`, capped by
    /// the model's [`StepModel::max_len_cap`].
    pub max_len_a: f32,
    /// Constant part `b` of the maximum target length.
    pub max_len_b: usize,
}

impl Default for SearchOptions {
    /// The reference implementation's settings: beam 8 in 4 groups, diversity 0.5, α 0.6,
    /// repetition penalty 1.5 over 30 tokens. It does not fix n-best or the length limit; we
    /// return one hypothesis and allow `2 · source_len + 10` tokens (within the model's cap).
    fn default() -> Self {
        Self {
            beam: 8,
            groups: 4,
            diversity: 0.5,
            length_penalty: 0.6,
            repetition_penalty: 1.5,
            repetition_window: 30,
            n_best: 1,
            max_len_a: 2.0,
            max_len_b: 10,
        }
    }
}

impl SearchOptions {
    /// Greedy decoding: beam 1, one group and no repetition penalty, so every engine follows
    /// the plain argmax chain (burn's `greedy_decode` too). The length limit and α keep their
    /// defaults (α does not change what beam 1 finds, only its score).
    pub fn greedy() -> Self {
        Self {
            beam: 1,
            groups: 1,
            repetition_penalty: 1.0,
            ..Self::default()
        }
    }

    /// Checks that the options describe a search that can run.
    pub fn validate(&self) -> Result<(), OptionsError> {
        let non_negative = |v: f32| v.is_finite() && v >= 0.0;
        if self.beam == 0 {
            return Err(OptionsError::ZeroBeam);
        }
        if self.beam > MAX_BEAM {
            return Err(OptionsError::BeamTooLarge { beam: self.beam });
        }
        if self.groups == 0 {
            return Err(OptionsError::ZeroGroups);
        }
        if !self.beam.is_multiple_of(self.groups) {
            return Err(OptionsError::BeamNotDivisible {
                beam: self.beam,
                groups: self.groups,
            });
        }
        if !non_negative(self.diversity) {
            return Err(OptionsError::BadDiversity {
                value: self.diversity,
            });
        }
        if !non_negative(self.length_penalty) {
            return Err(OptionsError::BadLengthPenalty {
                value: self.length_penalty,
            });
        }
        if !(self.repetition_penalty.is_finite() && self.repetition_penalty >= 1.0) {
            return Err(OptionsError::BadRepetitionPenalty {
                value: self.repetition_penalty,
            });
        }
        if self.n_best == 0 {
            return Err(OptionsError::ZeroNBest);
        }
        if self.n_best > self.beam {
            return Err(OptionsError::NBestAboveBeam {
                n_best: self.n_best,
                beam: self.beam,
            });
        }
        if !non_negative(self.max_len_a) {
            return Err(OptionsError::BadMaxLenA {
                value: self.max_len_a,
            });
        }
        if self.max_len_a == 0.0 && self.max_len_b == 0 {
            return Err(OptionsError::ZeroMaxLen);
        }
        Ok(())
    }

    /// The maximum number of generated tokens (EOS included) for a source of `source_len`
    /// tokens: `min(floor(max_len_a · source_len) + max_len_b, cap)`.
    pub fn max_target_len(&self, source_len: usize, cap: usize) -> usize {
        let scaled = (f64::from(self.max_len_a) * source_len as f64).floor();
        // `as` saturates (and maps NaN to 0), so absurd values end at the cap, not in a panic.
        (scaled as usize).saturating_add(self.max_len_b).min(cap)
    }

    /// How many candidates per row the search asks the model for (the `k` of the GPU's top-k).
    ///
    /// `beam / groups` without diversity (or with one group), `beam` with it; so at most `beam`
    /// (8 for the default beam of 8: the GPU reads back `rows × 8` pairs per step).
    ///
    /// This is exact: the search chooses exactly what it would choose from the full
    /// distributions. A group with `n ≤ beam / groups` live rows keeps its best `n` candidates,
    /// and the best `n` of a union lie within the best `n` of each row. With diversity, at most
    /// `P ≤ beam − beam / groups` tokens (those chosen by earlier groups at this step) are
    /// pushed down, so a row's best `n` after the penalty lie within its best `n + P ≤ beam`
    /// before it; a candidate ranked lower is beaten by `n` unpenalized candidates of its own
    /// row, which also win ties (lower rank first). This assumes the model's top-k orders ties
    /// the way [`top_k`] does (lower token id first).
    pub fn candidates_per_beam(&self) -> usize {
        let groups = self.groups.max(1);
        if groups > 1 && self.diversity > 0.0 {
            self.beam
        } else {
            self.beam / groups
        }
    }
}

/// Why search options are impossible.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum OptionsError {
    /// A beam of 0 keeps no hypothesis.
    #[error("beam size is 0; use 1 for greedy decoding or more (e.g. 8) for beam search")]
    ZeroBeam,
    /// The beam is above [`MAX_BEAM`].
    #[error("beam size {beam} is above the limit of {MAX_BEAM}; use a beam of at most {MAX_BEAM}")]
    BeamTooLarge {
        /// The requested beam.
        beam: usize,
    },
    /// No groups at all.
    #[error("groups is 0; use 1 for plain beam search, or a divisor of the beam for diversity")]
    ZeroGroups,
    /// Groups must all have the same size.
    #[error(
        "beam size {beam} is not divisible by {groups} groups; choose groups that divide the \
         beam (beam 8: 1, 2, 4 or 8 groups)"
    )]
    BeamNotDivisible {
        /// The requested beam.
        beam: usize,
        /// The requested number of groups.
        groups: usize,
    },
    /// The diversity penalty is negative, NaN or infinite.
    #[error("diversity penalty {value} must be a finite number ≥ 0; use 0 to turn it off")]
    BadDiversity {
        /// The requested penalty.
        value: f32,
    },
    /// The length penalty α is negative, NaN or infinite.
    #[error(
        "length penalty α = {value} must be a finite number ≥ 0; 0 ranks by total \
         log-probability, 1 by mean log-probability per token"
    )]
    BadLengthPenalty {
        /// The requested α.
        value: f32,
    },
    /// The repetition penalty is below 1, NaN or infinite.
    #[error(
        "repetition penalty {value} must be a finite number ≥ 1; 1 turns it off, and values \
         below 1 would reward repetition"
    )]
    BadRepetitionPenalty {
        /// The requested penalty.
        value: f32,
    },
    /// No output requested.
    #[error("n_best is 0; ask for at least one translation")]
    ZeroNBest,
    /// More outputs requested than the beam can hold.
    #[error(
        "n_best {n_best} is larger than the beam {beam}; at most `beam` hypotheses finish, so \
         raise the beam or lower n_best"
    )]
    NBestAboveBeam {
        /// The requested number of outputs.
        n_best: usize,
        /// The requested beam.
        beam: usize,
    },
    /// The per-source-token length factor is negative, NaN or infinite.
    #[error("max_len_a = {value} must be a finite number ≥ 0 (target tokens per source token)")]
    BadMaxLenA {
        /// The requested factor.
        value: f32,
    },
    /// `max_len_a` and `max_len_b` are both 0.
    #[error(
        "max_len_a and max_len_b are both 0, so no token could ever be generated; try \
         max_len_a = 2, max_len_b = 10"
    )]
    ZeroMaxLen,
}

/// Why a search failed.
#[derive(Debug, thiserror::Error)]
pub enum SearchError<E> {
    /// The options are impossible.
    #[error(transparent)]
    Options(#[from] OptionsError),
    /// The maximum target length came out as 0.
    #[error(
        "the maximum target length is 0 for a source of {source_len} tokens (model cap {cap}); \
         skip empty sources before searching, or raise max_len_b"
    )]
    ZeroMaxLen {
        /// Source tokens.
        source_len: usize,
        /// The model's cap.
        cap: usize,
    },
    /// The model's own error.
    #[error("the model failed at decoder step {step}: {source}")]
    Model {
        /// The decoder step (0 = the BOS row).
        step: usize,
        /// What the model reported.
        source: E,
    },
    /// The model did not answer every row.
    #[error(
        "at step {step} the model returned {got} candidate lists for {expected} rows; it must \
         return one list per request row, in request order"
    )]
    RowCount {
        /// The decoder step.
        step: usize,
        /// Rows in the request.
        expected: usize,
        /// Lists returned.
        got: usize,
    },
    /// A row has no candidates or more than `k`.
    #[error(
        "at step {step} the model returned {got} candidates for row {row}; it must return \
         between 1 and k = {k} (fewer only when the vocabulary is smaller than k)"
    )]
    CandidateCount {
        /// The decoder step.
        step: usize,
        /// The row.
        row: usize,
        /// Candidates returned.
        got: usize,
        /// Candidates requested.
        k: usize,
    },
    /// A log-prob is NaN or positive.
    #[error(
        "at step {step}, row {row}, token {token} has log-prob {logprob}; log-probs must be ≤ 0 \
         and not NaN (check the log-softmax and the repetition penalty)"
    )]
    BadLogprob {
        /// The decoder step.
        step: usize,
        /// The row.
        row: usize,
        /// The token.
        token: u32,
        /// The offending value.
        logprob: f32,
    },
    /// Candidates are not in descending order of log-prob.
    #[error(
        "at step {step} the candidates of row {row} rise at position {index}; top-k must sort \
         them by descending log-prob"
    )]
    Unsorted {
        /// The decoder step.
        step: usize,
        /// The row.
        row: usize,
        /// Position of the first candidate above its predecessor.
        index: usize,
    },
    /// A token is listed twice for one row.
    #[error(
        "at step {step} token {token} appears twice among the candidates of row {row}; top-k \
         must return distinct tokens"
    )]
    DuplicateToken {
        /// The decoder step.
        step: usize,
        /// The row.
        row: usize,
        /// The repeated token.
        token: u32,
    },
}

/// One next-token candidate of a row.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Candidate {
    /// Token id.
    pub token: u32,
    /// Log-probability after the repetition penalty, ≤ 0.
    pub logprob: f32,
}

/// One row to score at a decoder step.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepRow<'a> {
    /// The row of the previous step this one extends (its KV-cache history). 0 at
    /// step 0, where there is no previous step.
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
    /// The decoder step, from 0; every row has `step` generated tokens.
    pub step: usize,
    /// Candidates wanted per row.
    pub k: usize,
    /// Passed to [`apply_repetition_penalty`].
    pub repetition_penalty: f32,
    /// Passed to [`apply_repetition_penalty`].
    pub repetition_window: usize,
    /// The rows to score, in the order the answer must follow.
    pub rows: Vec<StepRow<'a>>,
}

/// A decoder that scores one step for several rows: the interface between the search and an
/// engine.
pub trait StepModel {
    /// What can go wrong inside the model.
    type Error: std::error::Error + 'static;

    /// The token fed at step 0.
    fn bos(&self) -> u32;

    /// The token that ends a hypothesis.
    fn eos(&self) -> u32;

    /// The longest target the model supports (its positional table), in generated tokens.
    fn max_len_cap(&self) -> usize;

    /// Scores `request.rows`: one list per row, in order, of at most `request.k` distinct
    /// tokens (exactly `k` unless the vocabulary is smaller) with their log-probabilities after
    /// [`apply_repetition_penalty`], sorted by descending log-prob, ties by ascending token id
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

/// The `k` best entries of `logprobs` (token id = index), by descending log-prob, ties by
/// ascending token id. Returns `min(k, logprobs.len())` candidates.
pub fn top_k(logprobs: &[f32], k: usize) -> Vec<Candidate> {
    let order = |a: &usize, b: &usize| logprobs[*b].total_cmp(&logprobs[*a]).then(a.cmp(b));
    let mut ids: Vec<usize> = (0..logprobs.len()).collect();
    if k == 0 {
        return Vec::new();
    }
    if k < ids.len() {
        ids.select_nth_unstable_by(k - 1, order);
        ids.truncate(k);
    }
    ids.sort_unstable_by(order);
    ids.into_iter()
        .map(|i| Candidate {
            token: i as u32,
            logprob: logprobs[i],
        })
        .collect()
}

/// The score of a finished hypothesis: `logprob_sum / len^alpha`, `len` its generated tokens
/// (EOS included). A sum of `-inf` stays `-inf`.
pub fn length_normalized(logprob_sum: f32, len: usize, alpha: f32) -> f32 {
    if logprob_sum == f32::NEG_INFINITY {
        return logprob_sum;
    }
    logprob_sum / (len as f32).powf(alpha)
}

/// How a hypothesis ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Finish {
    /// The model chose EOS.
    Eos,
    /// It reached the maximum target length without EOS.
    MaxLen,
}

/// One finished translation.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Hypothesis {
    /// Generated tokens without BOS and EOS.
    pub tokens: Vec<u32>,
    /// Length-normalized score, `logprob / rows.len()^α`; the output is sorted by it.
    pub score: f32,
    /// Sum of the log-probs of every generated token, EOS included (after the repetition
    /// penalty, without the diversity penalty).
    pub logprob: f32,
    /// How it ended.
    pub finish: Finish,
    /// The diverse beam group it came from.
    pub group: usize,
    /// `rows[t]` is the row of step `t` whose candidates produced generated token `t` (EOS
    /// included, so `rows.len()` is the length used by the length penalty): pick this
    /// hypothesis' cross-attention at step `t` from that row.
    pub rows: Vec<usize>,
}

/// The rows scored at one step: how to trace any row back to BOS.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StepTrace {
    /// `parents[i]`: the row of the previous step that row `i` extends (0 at step 0).
    pub parents: Vec<usize>,
    /// `tokens[i]`: the decoder input of row `i`, i.e. the token its parent chose (BOS at
    /// step 0).
    pub tokens: Vec<u32>,
}

/// The outcome of a search.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SearchResult {
    /// Up to `n_best` hypotheses, best first. Fewer only when fewer finished (a vocabulary
    /// smaller than the beam).
    pub hypotheses: Vec<Hypothesis>,
    /// One entry per decoder step run.
    pub steps: Vec<StepTrace>,
    /// The maximum target length used.
    pub max_len: usize,
    /// Candidates requested per row.
    pub k: usize,
    /// Whether early termination ended the search while hypotheses were still live.
    pub stopped_early: bool,
}

impl SearchResult {
    /// The best hypothesis.
    pub fn best(&self) -> Option<&Hypothesis> {
        self.hypotheses.first()
    }

    /// Decoder steps run (each one model call).
    pub fn steps_taken(&self) -> usize {
        self.steps.len()
    }

    /// Rows scored at each step.
    pub fn rows_per_step(&self) -> Vec<usize> {
        self.steps.iter().map(|s| s.parents.len()).collect()
    }
}

/// Runs beam search (greedy when `beam` is 1) for a source of `source_len` tokens, whose
/// encoder output the model already holds. See the module docs for the exact semantics.
pub async fn beam_search<M: StepModel>(
    model: &mut M,
    options: &SearchOptions,
    source_len: usize,
) -> Result<SearchResult, SearchError<M::Error>> {
    search(
        model,
        options,
        source_len,
        options.candidates_per_beam(),
        true,
    )
    .await
}

/// A hypothesis still being extended.
struct Live {
    group: usize,
    /// Its row at the previous step.
    parent: usize,
    sum: f32,
    tokens: Vec<u32>,
    rows: Vec<usize>,
}

/// A candidate continuation considered by a group.
struct Pick {
    row: usize,
    rank: usize,
    token: u32,
    /// `sum + logprob`: the hypothesis' log-prob if chosen.
    sum: f32,
    /// `sum` minus the diversity penalty: what the group ranks by.
    key: f32,
}

/// [`beam_search`] with `k` and early termination chosen by the caller (tests compare both
/// against the defaults).
async fn search<M: StepModel>(
    model: &mut M,
    options: &SearchOptions,
    source_len: usize,
    k: usize,
    early_termination: bool,
) -> Result<SearchResult, SearchError<M::Error>> {
    options.validate()?;
    let cap = model.max_len_cap();
    let max_len = options.max_target_len(source_len, cap);
    if max_len == 0 {
        return Err(SearchError::ZeroMaxLen { source_len, cap });
    }
    let (bos, eos) = (model.bos(), model.eos());
    let per_group = options.beam / options.groups;
    let alpha = options.length_penalty;

    let mut live = vec![Live {
        group: 0,
        parent: 0,
        sum: 0.0,
        tokens: Vec::new(),
        rows: Vec::new(),
    }];
    let mut finished: Vec<Hypothesis> = Vec::new();
    let mut steps = Vec::new();
    let mut stopped_early = false;

    for step in 0..max_len {
        if live.is_empty() {
            break;
        }
        let request = StepRequest {
            step,
            k,
            repetition_penalty: options.repetition_penalty,
            repetition_window: options.repetition_window,
            rows: live
                .iter()
                .map(|h| StepRow {
                    parent: h.parent,
                    last_token: h.tokens.last().copied().unwrap_or(bos),
                    history: &h.tokens,
                })
                .collect(),
        };
        let candidates = model
            .step(&request)
            .await
            .map_err(|source| SearchError::Model { step, source })?;
        check_candidates(step, k, live.len(), &candidates)?;
        steps.push(StepTrace {
            parents: request.rows.iter().map(|r| r.parent).collect(),
            tokens: request.rows.iter().map(|r| r.last_token).collect(),
        });

        let mut next = Vec::with_capacity(options.beam);
        // Tokens chosen at this step by the groups already processed (diversity).
        let mut chosen: Vec<u32> = Vec::with_capacity(options.beam);
        for group in 0..options.groups {
            // At step 0 every group extends the single BOS row, with a full set of slots.
            let (group_rows, slots): (Vec<usize>, usize) = if step == 0 {
                (vec![0], per_group)
            } else {
                let group_rows: Vec<usize> = (0..live.len())
                    .filter(|&i| live[i].group == group)
                    .collect();
                let slots = group_rows.len();
                (group_rows, slots)
            };
            let mut pool = Vec::with_capacity(group_rows.len() * k);
            for &row in &group_rows {
                for (rank, c) in candidates[row].iter().enumerate() {
                    let sum = live[row].sum + c.logprob;
                    let key = if options.diversity > 0.0 {
                        let uses = chosen.iter().filter(|&&t| t == c.token).count();
                        sum - options.diversity * uses as f32
                    } else {
                        sum
                    };
                    pool.push(Pick {
                        row,
                        rank,
                        token: c.token,
                        sum,
                        key,
                    });
                }
            }
            pool.sort_by(|a, b| {
                b.key
                    .total_cmp(&a.key)
                    .then(a.row.cmp(&b.row))
                    .then(a.rank.cmp(&b.rank))
            });
            pool.truncate(slots);

            for pick in pool {
                chosen.push(pick.token);
                let from = &live[pick.row];
                let mut rows = from.rows.clone();
                rows.push(pick.row);
                let mut tokens = from.tokens.clone();
                if pick.token != eos {
                    tokens.push(pick.token);
                }
                let finish = if pick.token == eos {
                    Finish::Eos
                } else if step + 1 == max_len {
                    Finish::MaxLen
                } else {
                    next.push(Live {
                        group,
                        parent: pick.row,
                        sum: pick.sum,
                        tokens,
                        rows,
                    });
                    continue;
                };
                finished.push(Hypothesis {
                    score: length_normalized(pick.sum, rows.len(), alpha),
                    tokens,
                    logprob: pick.sum,
                    finish,
                    group,
                    rows,
                });
            }
        }
        live = next;

        if early_termination
            && !live.is_empty()
            && cannot_improve(&live, &finished, options, max_len)
        {
            stopped_early = true;
            break;
        }
    }

    // Stable: equal scores keep their finishing order.
    finished.sort_by(|a, b| b.score.total_cmp(&a.score));
    finished.truncate(options.n_best);
    Ok(SearchResult {
        hypotheses: finished,
        steps,
        max_len,
        k,
        stopped_early,
    })
}

/// Whether no live hypothesis can finish with a score that would enter the `n_best` output:
/// each one's final score is at most `sum / max_len^α` (see the module docs).
fn cannot_improve(
    live: &[Live],
    finished: &[Hypothesis],
    options: &SearchOptions,
    max_len: usize,
) -> bool {
    if finished.len() < options.n_best {
        return false;
    }
    let mut scores: Vec<f32> = finished.iter().map(|h| h.score).collect();
    scores.sort_by(|a, b| b.total_cmp(a));
    let threshold = scores[options.n_best - 1];
    live.iter()
        .all(|h| length_normalized(h.sum, max_len, options.length_penalty) <= threshold)
}

/// Checks the model's answer against the [`StepModel::step`] contract, so that a broken engine
/// gives an error instead of a wrong translation.
fn check_candidates<E>(
    step: usize,
    k: usize,
    rows: usize,
    candidates: &[Vec<Candidate>],
) -> Result<(), SearchError<E>> {
    if candidates.len() != rows {
        return Err(SearchError::RowCount {
            step,
            expected: rows,
            got: candidates.len(),
        });
    }
    for (row, list) in candidates.iter().enumerate() {
        if list.is_empty() || list.len() > k {
            return Err(SearchError::CandidateCount {
                step,
                row,
                got: list.len(),
                k,
            });
        }
        for (index, c) in list.iter().enumerate() {
            if c.logprob.is_nan() || c.logprob > 0.0 {
                return Err(SearchError::BadLogprob {
                    step,
                    row,
                    token: c.token,
                    logprob: c.logprob,
                });
            }
            if index > 0 && c.logprob > list[index - 1].logprob {
                return Err(SearchError::Unsorted { step, row, index });
            }
            if list[..index].iter().any(|d| d.token == c.token) {
                return Err(SearchError::DuplicateToken {
                    step,
                    row,
                    token: c.token,
                });
            }
        }
    }
    Ok(())
}
