//! A CPU [`StepModel`] over a hand-made score table: the oracle for search tests.
//!
//! The table is a function from a row's generated history (no BOS) to logits over the
//! vocabulary. [`TableModel`] log-softmaxes them, applies the repetition penalty, and returns
//! the top-k, exactly as the engine must. It also keeps the history of every row it scored, and
//! checks that each new row's history is its parent's plus its last token: the invariant an
//! engine that reorders KV caches by parent index relies on.

use super::{Candidate, StepModel, StepRequest, apply_repetition_penalty, log_softmax, top_k};

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
    /// Step 0 must be the single BOS row with no history.
    #[error("step 0 must be one row with input BOS and no history; got {rows} rows")]
    BadFirstStep {
        /// Rows in the request.
        rows: usize,
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

/// A model whose logits come from `table(history)`.
pub struct TableModel<F> {
    vocab: usize,
    bos: u32,
    eos: u32,
    max_len_cap: usize,
    table: F,
    /// Histories of the rows of the previous step, to check parents.
    previous: Vec<Vec<u32>>,
    next_step: usize,
}

impl<F: FnMut(&[u32]) -> Vec<f32>> TableModel<F> {
    /// A model over `vocab` tokens; `table(history)` must return `vocab` logits.
    pub fn new(vocab: usize, bos: u32, eos: u32, max_len_cap: usize, table: F) -> Self {
        Self {
            vocab,
            bos,
            eos,
            max_len_cap,
            table,
            previous: Vec::new(),
            next_step: 0,
        }
    }

    /// The full next-token distribution after `history`: log-softmax, then the repetition
    /// penalty.
    pub fn logprobs(
        &mut self,
        history: &[u32],
        penalty: f32,
        window: usize,
    ) -> Result<Vec<f32>, TableError> {
        let mut logits = (self.table)(history);
        if logits.len() != self.vocab {
            return Err(TableError::WrongVocab {
                history: history.to_vec(),
                got: logits.len(),
                vocab: self.vocab,
            });
        }
        log_softmax(&mut logits);
        apply_repetition_penalty(&mut logits, history, penalty, window);
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
            let ok = matches!(request.rows.as_slice(), [row] if row.last_token == self.bos && row.history.is_empty());
            return if ok {
                Ok(())
            } else {
                Err(TableError::BadFirstStep {
                    rows: request.rows.len(),
                })
            };
        }
        for (i, row) in request.rows.iter().enumerate() {
            let parent = self
                .previous
                .get(row.parent)
                .ok_or(TableError::ParentOutOfRange {
                    step: request.step,
                    row: i,
                    parent: row.parent,
                    rows: self.previous.len(),
                })?;
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
            let logprobs = self.logprobs(
                row.history,
                request.repetition_penalty,
                request.repetition_window,
            )?;
            out.push(top_k(&logprobs, request.k));
        }
        self.previous = request.rows.iter().map(|r| r.history.to_vec()).collect();
        self.next_step += 1;
        Ok(out)
    }
}
