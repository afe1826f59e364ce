//! Beam search on the CPU: the bookkeeping half of decoding, independent of the engine.
//!
//! The engine (the WebGPU decoder, or a CPU model in tests) implements [`StepModel`]: given the
//! live rows of one decoder step it returns, per row, the top-`k` next tokens with their
//! log-probabilities *after* the repetition penalty and the repeat block
//! ([`StepRequest::penalize`], which the GPU kernel mirrors). Everything else happens here, on
//! at most `beam × k` candidates per step, so the GPU only ever reads back `rows × k` (token,
//! log-prob) pairs.
//!
//! Files: `options.rs` ([`SearchOptions`] and their validation), `step.rs` (the contract with
//! the engine: [`StepModel`], [`Candidate`] and the scoring functions it must share), this file
//! (the search and its result), `testing.rs` (a table-driven [`StepModel`] for tests).
//!
//! # Semantics
//! - **Rows.** Step 0 scores one row (BOS). Each later step scores the live hypotheses of the
//!   previous step, ordered by group and, within a group, by selection order. A row names the
//!   row of the previous step it extends (`parent`), so the engine can follow (or reorder) its
//!   KV caches by it.
//! - **Batches** ([`beam_search_batch`]). Several sentences search in lockstep: a step's
//!   request holds the rows of every sentence still searching, sentence after sentence, each
//!   marked with its sentence; a parent is an index into the previous request's rows. A
//!   sentence leaves when it has no live hypothesis or stops early. Everything below holds per
//!   sentence, so a sentence's result does not depend on the others (as long as the engine
//!   scores each row on its own).
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
//! - **Penalties and bans** ([`StepRequest::penalize`], applied by the engine before its top-k,
//!   so the search stays exact). The repetition penalty multiplies the log-probs of the tokens
//!   among a row's last `repetition_window`; the repeat block ([`repeat_bans`]) sets to `-inf`
//!   each token that would be the third of a run or complete a phrase of 2..=`block_repeats`
//!   tokens followed by itself, except the model's [`StepModel::repeatable`] tokens (pieces
//!   inside a word without letters: digits, punctuation); at most `block_repeats` tokens per
//!   row.

mod options;
mod step;
pub mod testing;
#[cfg(test)]
mod tests;

pub use options::{MAX_BEAM, MAX_BLOCK_REPEATS, OptionsError, SearchOptions};
pub use step::{
    Candidate, StepModel, StepRequest, StepRow, apply_repetition_penalty, log_softmax, repeat_bans,
    top_k,
};

use serde::{Deserialize, Serialize};

/// Why a search failed.
#[derive(Debug, thiserror::Error)]
pub enum SearchError<E> {
    /// The options are impossible.
    #[error(transparent)]
    Options(#[from] OptionsError),
    /// The model's length cap ([`StepModel::max_len_cap`]) is 0: the only way the maximum
    /// target length comes out as 0, since [`SearchOptions::max_target_len`] leaves at least 1.
    #[error("the model allows no target tokens (its length cap is 0), so nothing can be generated")]
    ZeroCap,
    /// The caller's `cancelled` answered true.
    #[error("the search was cancelled before decoder step {step}")]
    Cancelled {
        /// The step that did not run.
        step: usize,
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
}

/// Runs beam search (greedy when `beam` is 1) for a source of `source_len` tokens, whose
/// encoder output the model already holds. See the module docs for the exact semantics.
pub async fn beam_search<M: StepModel>(
    model: &mut M,
    options: &SearchOptions,
    source_len: usize,
) -> Result<SearchResult, SearchError<M::Error>> {
    let mut results = beam_search_batch(model, options, &[source_len], &|| false).await?;
    Ok(results.remove(0))
}

/// [`beam_search`] for several sentences at once (`source_lens[s]`: sentence `s`'s source
/// tokens): each decoder step asks the model for the live rows of every sentence still
/// searching, in one request ([`StepRow::sentence`] says whose row it is). A sentence that
/// finishes leaves the batch. Each sentence's result is exactly what [`beam_search`] gives
/// for it alone, as long as the model scores a row the same whatever else is in the request.
/// `cancelled` is asked before every step after the first; once it answers true the search
/// stops with [`SearchError::Cancelled`].
pub async fn beam_search_batch<M: StepModel>(
    model: &mut M,
    options: &SearchOptions,
    source_lens: &[usize],
    cancelled: &dyn Fn() -> bool,
) -> Result<Vec<SearchResult>, SearchError<M::Error>> {
    search(
        model,
        options,
        source_lens,
        options.candidates_per_beam(),
        true,
        cancelled,
    )
    .await
}

/// A hypothesis still being extended.
struct Live {
    group: usize,
    /// Its row at the previous step (among its sentence's rows).
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

/// The search of one sentence, advanced one decoder step at a time.
struct Beam<'o> {
    options: &'o SearchOptions,
    max_len: usize,
    eos: u32,
    live: Vec<Live>,
    finished: Vec<Hypothesis>,
    steps: Vec<StepTrace>,
    stopped_early: bool,
}

impl<'o> Beam<'o> {
    fn new(options: &'o SearchOptions, max_len: usize, eos: u32) -> Self {
        Self {
            options,
            max_len,
            eos,
            live: vec![Live {
                group: 0,
                parent: 0,
                sum: 0.0,
                tokens: Vec::new(),
                rows: Vec::new(),
            }],
            finished: Vec::new(),
            steps: Vec::new(),
            stopped_early: false,
        }
    }

    /// Whether the sentence still has rows to score.
    fn searching(&self) -> bool {
        !self.live.is_empty() && !self.stopped_early
    }

    /// This step's rows of sentence `sentence`, whose previous rows started at `parent_base`
    /// in the previous request.
    fn rows(&self, sentence: usize, parent_base: usize, bos: u32) -> Vec<StepRow<'_>> {
        self.live
            .iter()
            .map(|h| StepRow {
                sentence,
                parent: parent_base + h.parent,
                last_token: h.tokens.last().copied().unwrap_or(bos),
                history: &h.tokens,
            })
            .collect()
    }

    /// Chooses the next hypotheses from this step's candidates (one list per live row).
    fn advance(
        &mut self,
        step: usize,
        bos: u32,
        candidates: &[Vec<Candidate>],
        early_termination: bool,
    ) {
        let options = self.options;
        let (eos, max_len) = (self.eos, self.max_len);
        let per_group = options.beam / options.groups;
        let live = &self.live;
        self.steps.push(StepTrace {
            parents: live.iter().map(|h| h.parent).collect(),
            tokens: live
                .iter()
                .map(|h| h.tokens.last().copied().unwrap_or(bos))
                .collect(),
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
            let mut pool = Vec::with_capacity(group_rows.len() * candidates.len());
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
                self.finished.push(Hypothesis {
                    score: length_normalized(pick.sum, rows.len(), options.length_penalty),
                    tokens,
                    logprob: pick.sum,
                    finish,
                    group,
                    rows,
                });
            }
        }
        self.live = next;

        if early_termination
            && !self.live.is_empty()
            && cannot_improve(&self.live, &self.finished, options, max_len)
        {
            self.stopped_early = true;
        }
    }

    fn result(mut self, k: usize) -> SearchResult {
        // Stable: equal scores keep their finishing order.
        self.finished.sort_by(|a, b| b.score.total_cmp(&a.score));
        self.finished.truncate(self.options.n_best);
        SearchResult {
            hypotheses: self.finished,
            steps: self.steps,
            max_len: self.max_len,
            k,
            stopped_early: self.stopped_early,
        }
    }
}

/// [`beam_search_batch`] with `k` and early termination chosen by the caller (tests compare
/// both against the defaults).
async fn search<M: StepModel>(
    model: &mut M,
    options: &SearchOptions,
    source_lens: &[usize],
    k: usize,
    early_termination: bool,
    cancelled: &dyn Fn() -> bool,
) -> Result<Vec<SearchResult>, SearchError<M::Error>> {
    options.validate()?;
    let cap = model.max_len_cap();
    let (bos, eos) = (model.bos(), model.eos());
    let mut beams = Vec::with_capacity(source_lens.len());
    for &source_len in source_lens {
        if cap == 0 {
            return Err(SearchError::ZeroCap);
        }
        beams.push(Beam::new(
            options,
            options.max_target_len(source_len, cap),
            eos,
        ));
    }
    // Where each sentence's rows started in the previous request.
    let mut bases = vec![0; beams.len()];
    let repeatable = model.repeatable();
    for step in 0.. {
        let mut rows = Vec::new();
        let mut spans = Vec::new(); // (sentence, first row, rows)
        for (s, beam) in beams.iter().enumerate() {
            if beam.searching() {
                let mine = beam.rows(s, bases[s], bos);
                spans.push((s, rows.len(), mine.len()));
                rows.extend(mine);
            }
        }
        if rows.is_empty() {
            break;
        }
        if step > 0 && cancelled() {
            return Err(SearchError::Cancelled { step });
        }
        let expected = rows.len();
        let request = StepRequest {
            step,
            k,
            repetition_penalty: options.repetition_penalty,
            repetition_window: options.repetition_window,
            block_repeats: options.block_repeats,
            repeatable: &repeatable,
            rows,
        };
        let candidates = model
            .step(&request)
            .await
            .map_err(|source| SearchError::Model { step, source })?;
        drop(request);
        if candidates.len() != expected {
            return Err(SearchError::RowCount {
                step,
                expected,
                got: candidates.len(),
            });
        }
        for &(s, first, n) in &spans {
            let mine = &candidates[first..first + n];
            check_candidates(step, k, first, mine)?;
            beams[s].advance(step, bos, mine, early_termination);
            bases[s] = first;
        }
    }
    Ok(beams.into_iter().map(|b| b.result(k)).collect())
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
    first_row: usize,
    candidates: &[Vec<Candidate>],
) -> Result<(), SearchError<E>> {
    for (row, list) in candidates.iter().enumerate() {
        let row = first_row + row;
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
