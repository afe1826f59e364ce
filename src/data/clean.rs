//! Cleaning a corpus the way the reference implementation did, with a count per rule.
//!
//! Order of work, each pair judged on its trimmed text:
//! 1. both sides are trimmed of leading and trailing whitespace (`char::is_whitespace`);
//! 2. **too short**: a side has fewer than `min_chars` characters (default 1: empty sides);
//! 3. **too long**: a side has more than `max_chars` characters (default 200);
//! 4. **length ratio**: [`length_ratio`] of the two sides exceeds `max_ratio` (default 3.5);
//! 5. **identical**: source and target are the same string (untranslated copies);
//! 6. **duplicate**: the (source, target) pair already occurred earlier among the pairs kept so
//!    far; the first occurrence stays. Tags do not take part: the same pair from two sources is
//!    a duplicate.
//!
//! A pair removed by several rules is counted once, by the first of them in that order.
//! Characters are Unicode scalar values (`str::chars`), not bytes and not grapheme clusters.
//! Surviving pairs keep their order, tag and line number.

use std::collections::HashSet;
use std::fmt;

use serde::{Deserialize, Serialize};

use super::error::DataError;
use super::read::Corpus;

/// Cleaning rules. Defaults are the reference implementation's (1–200 characters, ratio 3.5,
/// duplicate removal) plus dropping pairs whose sides are identical.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CleanConfig {
    /// Fewest characters a side may have after trimming (default 1).
    pub min_chars: usize,
    /// Most characters a side may have after trimming (default 200).
    pub max_chars: usize,
    /// Largest allowed [`length_ratio`] (default 3.5; `inf` turns the rule off).
    pub max_ratio: f64,
    /// Drop pairs whose source equals their target (default true).
    pub drop_identical: bool,
    /// Drop exact duplicate pairs, keeping the first (default true).
    pub dedup: bool,
}

impl Default for CleanConfig {
    fn default() -> Self {
        Self {
            min_chars: 1,
            max_chars: 200,
            max_ratio: 3.5,
            drop_identical: true,
            dedup: true,
        }
    }
}

impl CleanConfig {
    /// Checks that the settings can be met by some pair.
    ///
    /// # Errors
    /// [`DataError::InvalidConfig`] when `max_chars` is 0 or below `min_chars`, or `max_ratio`
    /// is NaN or below 1.
    pub fn validate(&self) -> Result<(), DataError> {
        if self.max_chars == 0 || self.max_chars < self.min_chars {
            return Err(DataError::InvalidConfig {
                setting: "clean.max_chars",
                value: self.max_chars.to_string(),
                expected: "at least 1 and at least clean.min_chars",
            });
        }
        if self.max_ratio.is_nan() || self.max_ratio < 1.0 {
            return Err(DataError::InvalidConfig {
                setting: "clean.max_ratio",
                value: self.max_ratio.to_string(),
                expected: "a number ≥ 1 (the ratio is longer side / shorter side)",
            });
        }
        Ok(())
    }
}

/// How many pairs each rule removed, in the order the rules are applied.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct CleanReport {
    /// Pairs that went in.
    pub input: usize,
    /// Removed: a side shorter than `min_chars`.
    pub too_short: usize,
    /// Removed: a side longer than `max_chars`.
    pub too_long: usize,
    /// Removed: length ratio above `max_ratio`.
    pub ratio: usize,
    /// Removed: source identical to target.
    pub identical: usize,
    /// Removed: an exact repeat of an earlier kept pair.
    pub duplicate: usize,
    /// Pairs that came out.
    pub kept: usize,
    /// The settings the counts were made with.
    pub config: CleanConfig,
}

impl CleanReport {
    /// Pairs removed by all rules together.
    pub fn removed(&self) -> usize {
        self.input - self.kept
    }

    /// The counts on one line (`too short 3, too long 0, …`), for error messages and logs.
    pub fn summary(&self) -> String {
        format!(
            "too short {}, too long {}, length ratio {}, identical sides {}, duplicates {}",
            self.too_short, self.too_long, self.ratio, self.identical, self.duplicate
        )
    }
}

/// One line per rule in the order applied, then the pairs kept.
impl fmt::Display for CleanReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = &self.config;
        let off = |on: bool| if on { "" } else { " (off)" };
        let rows = [
            ("pairs read".to_string(), self.input),
            (
                format!("too short (< {} chars on a side)", c.min_chars),
                self.too_short,
            ),
            (
                format!("too long (> {} chars on a side)", c.max_chars),
                self.too_long,
            ),
            (format!("length ratio > {}", c.max_ratio), self.ratio),
            (
                format!("source == target{}", off(c.drop_identical)),
                self.identical,
            ),
            (format!("duplicate pair{}", off(c.dedup)), self.duplicate),
            ("kept".to_string(), self.kept),
        ];
        let rows: Vec<(&str, usize)> = rows.iter().map(|(l, n)| (l.as_str(), *n)).collect();
        super::write_rows(f, &rows)?;
        let pct = if self.input == 0 {
            0.0
        } else {
            100.0 * self.kept as f64 / self.input as f64
        };
        write!(f, " ({pct:.1}%)")
    }
}

/// `max(len_s, len_t) / min(len_s, len_t)` for side lengths in characters; 1 when both are 0
/// and infinite when only one is.
pub fn length_ratio(len_s: usize, len_t: usize) -> f64 {
    let (lo, hi) = (len_s.min(len_t), len_s.max(len_t));
    match (lo, hi) {
        (0, 0) => 1.0,
        (0, _) => f64::INFINITY,
        _ => hi as f64 / lo as f64,
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Keep,
    TooShort,
    TooLong,
    Ratio,
    Identical,
    Duplicate,
}

/// Trims both sides of every pair and removes pairs by the rules in the module documentation.
///
/// # Errors
/// [`DataError::InvalidConfig`] for impossible settings, [`DataError::EmptyCorpus`] for an
/// empty input, and [`DataError::AllRemoved`] (with the per-rule counts) when no pair survives.
pub fn clean(mut corpus: Corpus, config: &CleanConfig) -> Result<(Corpus, CleanReport), DataError> {
    config.validate()?;
    if corpus.is_empty() {
        return Err(DataError::EmptyCorpus {
            corpus: corpus.name,
        });
    }
    for pair in &mut corpus.pairs {
        trim_in_place(&mut pair.source);
        trim_in_place(&mut pair.target);
    }

    let mut report = CleanReport {
        input: corpus.len(),
        config: config.clone(),
        ..CleanReport::default()
    };
    let verdicts: Vec<Verdict> = {
        let mut seen: HashSet<(&str, &str)> = HashSet::new();
        corpus
            .pairs
            .iter()
            .map(|p| {
                let (ls, lt) = (p.source.chars().count(), p.target.chars().count());
                if ls < config.min_chars || lt < config.min_chars {
                    Verdict::TooShort
                } else if ls > config.max_chars || lt > config.max_chars {
                    Verdict::TooLong
                } else if length_ratio(ls, lt) > config.max_ratio {
                    Verdict::Ratio
                } else if config.drop_identical && p.source == p.target {
                    Verdict::Identical
                } else if config.dedup && !seen.insert((&p.source, &p.target)) {
                    Verdict::Duplicate
                } else {
                    Verdict::Keep
                }
            })
            .collect()
    };
    for v in &verdicts {
        match v {
            Verdict::Keep => report.kept += 1,
            Verdict::TooShort => report.too_short += 1,
            Verdict::TooLong => report.too_long += 1,
            Verdict::Ratio => report.ratio += 1,
            Verdict::Identical => report.identical += 1,
            Verdict::Duplicate => report.duplicate += 1,
        }
    }
    if report.kept == 0 {
        return Err(DataError::AllRemoved {
            corpus: corpus.name,
            pairs: report.input,
            report: Box::new(report),
        });
    }
    let pairs = corpus
        .pairs
        .into_iter()
        .zip(verdicts)
        .filter(|(_, v)| *v == Verdict::Keep)
        .map(|(p, _)| p)
        .collect();
    Ok((Corpus::new(corpus.name, pairs), report))
}

/// Trims `s` without reallocating when there is nothing to trim.
fn trim_in_place(s: &mut String) {
    let trimmed = s.trim();
    if trimmed.len() != s.len() {
        *s = trimmed.to_string();
    }
}
