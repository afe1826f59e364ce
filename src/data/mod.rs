//! Parallel text for training: read aligned files, clean them, split off held-out sets, and
//! batch tokenized pairs by token budget.
//!
//! The flow the `train` binary follows:
//!
//! ```text
//! read_aligned / read_tsv ─► clean ─► split ─► (tokenize, elsewhere) ─► Batcher ─► Batch
//!   Corpus of Pair         CleanReport  Split{train, dev, test, held_out per tag}
//! ```
//!
//! - [`read_aligned`] reads two line-aligned files (`train.ko` / `train.en`) and optionally a
//!   third file with one tag per line (`train.origin`); [`read_tsv`] reads `source<TAB>target`
//!   (or `source<TAB>target<TAB>tag`) lines. Both accept `\n` or `\r\n` line ends, a missing
//!   final newline and a UTF-8 byte-order mark, and report problems with the file and 1-based
//!   line ([`DataError`]).
//! - [`clean`] applies the reference implementation's rules (whitespace trimmed first, then
//!   1–200 characters per side, length ratio ≤ 3.5, pairs whose sides are identical, exact
//!   duplicates) and counts what each rule removed in a [`CleanReport`].
//! - [`split`] carves dev and test sets and per-tag held-out sets off a cleaned corpus with a
//!   seeded shuffle; no carved pair is left in train, even as a duplicate copy.
//! - [`Batcher`] groups tokenized pairs into padded [`Batch`]es under a token budget, with
//!   length bucketing inside large shuffled chunks. The order of an epoch is a pure function of
//!   `(seed, epoch)`, so a resumed run regenerates it exactly.
//!
//! Lengths in cleaning are Unicode scalar values (`str::chars`), not bytes: a Hangul syllable is
//! one character. Randomness comes from SplitMix64 (the private `rng` module), written out here
//! so that orders do not change with a dependency update or across platforms.

mod batch;
mod clean;
mod error;
mod read;
mod rng;
mod split;

#[cfg(test)]
mod tests;

pub use batch::{
    Batch, BatchConfig, BatchStats, Batcher, Overlong, PaddingStats, SpecialIds, TokenPair,
};
pub use clean::{CleanConfig, CleanReport, clean, length_ratio};
pub use error::DataError;
pub use read::{Corpus, CorpusFiles, Pair, read_aligned, read_tsv};
pub(crate) use rng::SplitMix64;
pub use split::{Split, SplitConfig, SplitReport, SplitSize, remove_overlap, split};

/// Writes `label  count` rows, one per line, the counts right-aligned in one column, for the
/// reports' `Display`; no newline after the last row.
fn write_rows(f: &mut std::fmt::Formatter<'_>, rows: &[(&str, usize)]) -> std::fmt::Result {
    let width = rows
        .iter()
        .map(|(l, _)| l.chars().count())
        .max()
        .unwrap_or(0);
    for (i, (label, n)) in rows.iter().enumerate() {
        if i > 0 {
            writeln!(f)?;
        }
        write!(f, "{label:<width$} {n:>9}")?;
    }
    Ok(())
}
