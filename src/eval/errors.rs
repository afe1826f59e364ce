//! The one error type of the evaluation subsystem, and the input checks every metric shares.

use thiserror::Error;

/// Why an evaluation could not run. Each message names the offending counts and says what to fix.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum EvalError {
    /// No hypothesis lines were given: there is nothing to score.
    #[error("no hypothesis lines to score; pass a hypothesis file with one translation per line")]
    EmptyHypotheses,

    /// No reference stream was given: BLEU and chrF need at least one.
    #[error(
        "no reference was given; pass at least one reference file with one line per hypothesis line"
    )]
    NoReferences,

    /// A reference (or source) stream does not have one line per hypothesis line.
    #[error(
        "the hypotheses have {hypotheses} lines but {stream} has {lines}; every file must have \
         exactly one line per segment (look for a missing or extra line, often at the end)"
    )]
    LineCountMismatch {
        /// Number of hypothesis lines.
        hypotheses: usize,
        /// Which stream disagrees, e.g. `reference 2` or `the source`.
        stream: String,
        /// Number of lines in that stream.
        lines: usize,
    },
}

/// Checks that there is at least one hypothesis and at least one reference stream, and that every
/// reference stream has exactly one line per hypothesis.
pub(crate) fn check_streams<H, R, S>(hyps: &[H], refs: &[R]) -> Result<(), EvalError>
where
    R: AsRef<[S]>,
{
    if hyps.is_empty() {
        return Err(EvalError::EmptyHypotheses);
    }
    if refs.is_empty() {
        return Err(EvalError::NoReferences);
    }
    for (i, stream) in refs.iter().enumerate() {
        check_len(
            hyps.len(),
            &format!("reference {}", i + 1),
            stream.as_ref().len(),
        )?;
    }
    Ok(())
}

/// Checks that `stream` (named for the message) has `hypotheses` lines.
pub(crate) fn check_len(hypotheses: usize, stream: &str, lines: usize) -> Result<(), EvalError> {
    if lines == hypotheses {
        Ok(())
    } else {
        Err(EvalError::LineCountMismatch {
            hypotheses,
            stream: stream.to_string(),
            lines,
        })
    }
}
