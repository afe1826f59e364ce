//! The one error type of the data subsystem.
//!
//! Every message names the file (and the 1-based line where one is to blame) and says what to
//! do, so the `train` binary can print it as one line and exit.

use std::io;
use std::path::PathBuf;

use thiserror::Error;

use super::clean::CleanReport;

/// Why a corpus could not be read, cleaned, split or batched.
#[derive(Debug, Error)]
pub enum DataError {
    /// A file could not be opened or read (missing, a directory, no permission…).
    #[error("cannot read {}: {cause}; check the path in the corpus settings", .path.display())]
    Open {
        /// The file.
        path: PathBuf,
        /// What the operating system said.
        cause: io::Error,
    },

    /// A line is not valid UTF-8.
    #[error(
        "{}:{line}: not valid UTF-8 (bad byte at column {column} of the line); convert the \
         file to UTF-8, e.g. `iconv -f cp949 -t utf-8` for Korean text in the old Windows encoding",
        .path.display()
    )]
    InvalidUtf8 {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// 1-based byte column of the first invalid byte.
        column: usize,
    },

    /// Two files that must be line-aligned have different numbers of lines.
    #[error(
        "{} has {first_lines} lines but {} has {second_lines}; line i of one file must belong \
         to line i of the other, so look for a missing or extra line (often a blank line at the \
         end) or a file from another corpus",
        .first.display(), .second.display()
    )]
    LineCountMismatch {
        /// The first file (the source side).
        first: PathBuf,
        /// Its line count.
        first_lines: usize,
        /// The file that disagrees (the target side or the tag file).
        second: PathBuf,
        /// Its line count.
        second_lines: usize,
    },

    /// The files hold no lines at all.
    #[error(
        "{corpus} holds no sentence pairs; check that the path names the corpus and not an empty file"
    )]
    EmptyCorpus {
        /// The corpus, as its file names (`a.ko + a.en` or `a.tsv`).
        corpus: String,
    },

    /// Cleaning removed every pair.
    #[error(
        "all {pairs} pairs of {corpus} were removed by cleaning: {}; loosen the clean settings \
         (min_chars, max_chars, max_ratio) or check that source and target are the right files",
        .report.summary()
    )]
    AllRemoved {
        /// The corpus, as its file names.
        corpus: String,
        /// How many pairs went in.
        pairs: usize,
        /// What each rule removed.
        report: Box<CleanReport>,
    },

    /// A TSV line holds text but no tab.
    #[error(
        "{}:{line}: no tab; every line of a TSV corpus must be source<TAB>target (optionally \
         <TAB>tag)",
        .path.display()
    )]
    TsvNoTab {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
    },

    /// A TSV line has more than three columns.
    #[error(
        "{}:{line}: {columns} tab-separated columns, at most 3 are allowed (source, target, \
         tag); replace tabs inside a segment by spaces",
        .path.display()
    )]
    TsvTooManyColumns {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// Columns found on that line.
        columns: usize,
    },

    /// TSV lines disagree on whether there is a tag column.
    #[error(
        "{}:{line}: {columns} tab-separated columns, but line {first_line} has {expected}; \
         every line must have the same columns (source, target and, if any line has one, a tag)",
        .path.display()
    )]
    TsvColumnCount {
        /// The file.
        path: PathBuf,
        /// 1-based line number of the disagreeing line.
        line: usize,
        /// Columns found on that line.
        columns: usize,
        /// 1-based line number of the first line with text, which set the column count.
        first_line: usize,
        /// Columns on that first line.
        expected: usize,
    },

    /// A tag file line or a TSV tag column is blank.
    #[error(
        "{}:{line}: empty tag; every pair needs a tag (e.g. its source corpus) when tags are given",
        .path.display()
    )]
    EmptyTag {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
    },

    /// The corpus files setting names an impossible combination.
    #[error(
        "corpus files: {problem}; give either `source` and `target` (and optionally `tags`) or \
         one `tsv` file"
    )]
    CorpusFiles {
        /// What is wrong.
        problem: String,
    },

    /// A setting has a value that cannot work.
    #[error("data setting `{setting}` = {value} is invalid: {expected}")]
    InvalidConfig {
        /// The setting, as written in the config file (`clean.max_ratio`).
        setting: &'static str,
        /// The value given.
        value: String,
        /// What the value must be.
        expected: &'static str,
    },

    /// Dev, test and held-out sets would leave nothing to train on.
    #[error(
        "cannot carve {dev} dev + {test} test + {held_out} held-out pairs out of the {distinct} \
         distinct pairs of {corpus} and keep any for training; lower split.dev, split.test or \
         split.held_out_per_tag, or give dev/test files"
    )]
    SplitTooLarge {
        /// The corpus, as its file names.
        corpus: String,
        /// Distinct (source, target) pairs available.
        distinct: usize,
        /// Dev pairs asked for.
        dev: usize,
        /// Test pairs asked for.
        test: usize,
        /// Held-out pairs asked for, all tags together.
        held_out: usize,
    },

    /// Every tokenized pair was dropped before batching.
    #[error(
        "none of the {pairs} tokenized pairs can be batched: {too_long} are longer than \
         max_seq_len = {max_seq_len} tokens and {empty} have an empty side; raise \
         model.max_seq_len or set batch.overlong = \"truncate\""
    )]
    NothingToBatch {
        /// Pairs given.
        pairs: usize,
        /// Pairs longer than `max_seq_len`.
        too_long: usize,
        /// Pairs with no source or no target tokens.
        empty: usize,
        /// The limit in force.
        max_seq_len: usize,
    },
}
