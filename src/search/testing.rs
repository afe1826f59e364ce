//! A CPU [`StepModel`] over a hand-made score table: the oracle for search tests.
//!
//! The table is a function from a row's generated history (no BOS) to logits over the
//! vocabulary. [`TableModel`] log-softmaxes them, applies the request's penalties, and returns
//! the top-k, exactly as the engine must. It also keeps the history of every row it scored, and
//! checks that each new row's history is its parent's plus its last token: the invariant an
//! engine that reorders KV caches by parent index relies on.

use super::{Candidate, StepModel, StepRequest, log_softmax, top_k};

/// Why [`TableModel`] refused a request.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum TableError {
    /// The table returned the wrong number of logits.
    #[error(
        "the table returned {got} logits for history {history:?}; it must return one per \
         vocabulary entry ({vocab})"
    )]
    WrongVocab {
        /// The history asked about.
        history: Vec<u32>,
        /// Logits returned.
        got: usize,
        /// The vocabulary size.
        vocab: usize,
    },
    /// Steps came out of order.
    #[error("expected decoder step {expected}, got step {got}; steps must run 0, 1, 2, …")]
    StepOrder {
        /// The next step.
        expected: usize,
        /// The step requested.
        got: usize,
    },
    /// Step 0 must be one BOS row with no history per sentence, sentences in order.
    #[error(
        "step 0 must be one row per sentence (0, 1, … of {sentences}), with input BOS and no \
         history; got {rows} rows"
    )]
    BadFirstStep {
        /// Rows in the request.
        rows: usize,
        /// Sentences the model has tables for.
        sentences: usize,
    },
    /// A row extends a row of another sentence.
    #[error("row {row} at step {step} of sentence {sentence} extends a row of sentence {other}")]
    WrongSentence {
        /// The step.
        step: usize,
        /// The row.
        row: usize,
        /// Its sentence.
        sentence: usize,
        /// Its parent's sentence.
        other: usize,
    },
    /// A parent index points past the previous step.
    #[error("row {row} at step {step} extends row {parent}, but the previous step had {rows} rows")]
    ParentOutOfRange {
        /// The step.
        step: usize,
        /// The row.
        row: usize,
        /// Its parent.
        parent: usize,
        /// Rows of the previous step.
        rows: usize,
    },
    /// A row's history is not its parent's history plus its input token.
    #[error(
        "row {row} at step {step}: history {history:?} is not the history of parent row \
         {parent} plus token {last_token}; the parent bookkeeping is wrong"
    )]
    HistoryMismatch {
        /// The step.
        step: usize,
        /// The row.
        row: usize,
        /// Its parent.
        parent: usize,
        /// Its input token.
        last_token: u32,
        /// Its history.
        history: Vec<u32>,
    },
}

/// A model whose logits come from `table(history)`; for a batch of sentences, sentence `s`
/// has its own table.
pub struct TableModel<F> {
    vocab: usize,
    bos: u32,
    eos: u32,
    max_len_cap: usize,
    tables: Vec<F>,
    /// Sentence and history of the rows of the previous step, to check parents.
    previous: Vec<(usize, Vec<u32>)>,
    next_step: usize,
}

impl<F: FnMut(&[u32]) -> Vec<f32>> TableModel<F> {
    /// A model over `vocab` tokens for one sentence; `table(history)` must return `vocab`
    /// logits.
    pub fn new(vocab: usize, bos: u32, eos: u32, max_len_cap: usize, table: F) -> Self {
        Self::batch(vocab, bos, eos, max_len_cap, vec![table])
    }

    /// A model for a batch of sentences, `tables[s]` the table of sentence `s`.
    pub fn batch(vocab: usize, bos: u32, eos: u32, max_len_cap: usize, tables: Vec<F>) -> Self {
        Self {
            vocab,
            bos,
            eos,
            max_len_cap,
            tables,
            previous: Vec::new(),
            next_step: 0,
        }
    }

    /// The next-token distribution of sentence `sentence` after `history`: log-softmax, then
    /// what the request adds ([`StepRequest::penalize`]).
    fn sentence_logprobs(
        &mut self,
        sentence: usize,
        history: &[u32],
        request: &StepRequest<'_>,
    ) -> Result<Vec<f32>, TableError> {
        let sentences = self.tables.len();
        let table = self
            .tables
            .get_mut(sentence)
            .ok_or(TableError::BadFirstStep {
                rows: sentence + 1,
                sentences,
            })?;
        let mut logits = table(history);
        if logits.len() != self.vocab {
            return Err(TableError::WrongVocab {
                history: history.to_vec(),
                got: logits.len(),
                vocab: self.vocab,
            });
        }
        log_softmax(&mut logits);
        request.penalize(&mut logits, history);
        Ok(logits)
    }

    fn check_rows(&self, request: &StepRequest<'_>) -> Result<(), TableError> {
        if request.step != self.next_step {
            return Err(TableError::StepOrder {
                expected: self.next_step,
                got: request.step,
            });
        }
        if request.step == 0 {
            // Every sentence starts at step 0 (a single search: one row).
            let n = request.rows.len();
            let ok = n >= 1
                && n <= self.tables.len()
                && request.rows.iter().enumerate().all(|(s, row)| {
                    row.sentence == s && row.last_token == self.bos && row.history.is_empty()
                });
            return if ok {
                Ok(())
            } else {
                Err(TableError::BadFirstStep {
                    rows: n,
                    sentences: self.tables.len(),
                })
            };
        }
        for (i, row) in request.rows.iter().enumerate() {
            let (sentence, parent) =
                self.previous
                    .get(row.parent)
                    .ok_or(TableError::ParentOutOfRange {
                        step: request.step,
                        row: i,
                        parent: row.parent,
                        rows: self.previous.len(),
                    })?;
            if *sentence != row.sentence {
                return Err(TableError::WrongSentence {
                    step: request.step,
                    row: i,
                    sentence: row.sentence,
                    other: *sentence,
                });
            }
            let extends = row.history.len() == parent.len() + 1
                && row.history.starts_with(parent)
                && row.history.last() == Some(&row.last_token);
            if !extends {
                return Err(TableError::HistoryMismatch {
                    step: request.step,
                    row: i,
                    parent: row.parent,
                    last_token: row.last_token,
                    history: row.history.to_vec(),
                });
            }
        }
        Ok(())
    }
}

impl<F: FnMut(&[u32]) -> Vec<f32>> StepModel for TableModel<F> {
    type Error = TableError;

    fn bos(&self) -> u32 {
        self.bos
    }

    fn eos(&self) -> u32 {
        self.eos
    }

    fn max_len_cap(&self) -> usize {
        self.max_len_cap
    }

    async fn step(&mut self, request: &StepRequest<'_>) -> Result<Vec<Vec<Candidate>>, TableError> {
        self.check_rows(request)?;
        let mut out = Vec::with_capacity(request.rows.len());
        for row in &request.rows {
            let logprobs = self.sentence_logprobs(row.sentence, row.history, request)?;
            out.push(top_k(&logprobs, request.k));
        }
        self.previous = request
            .rows
            .iter()
            .map(|r| (r.sentence, r.history.to_vec()))
            .collect();
        self.next_step += 1;
        Ok(out)
    }
}
