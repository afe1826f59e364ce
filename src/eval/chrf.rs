//! Corpus chrF exactly as sacreBLEU 2.x's default `CHRF()` computes it.
//!
//! Defaults reproduced: character n-grams of orders 1–6, no word n-grams (chrF, not chrF++),
//! β = 2, case-sensitive, whitespace removed before counting (Python's `str.split()` notion of
//! whitespace), no epsilon smoothing.
//!
//! Per segment and order the statistics are `[hyp n-grams, ref n-grams, matches]`, where the
//! hypothesis count is recorded as 0 when the reference has no n-gram of that order. With
//! several references, each segment keeps the statistics of the reference with the best segment
//! chrF (the first one on a tie). The corpus statistics are the sums over segments; from them,
//! precision and recall are averaged over the orders where both the hypothesis and reference
//! counts are non-zero ("effective order"), and chrF is `100 · (1+β²)·P·R / (β²·P + R)` of those
//! averages.

use std::collections::HashMap;
use std::fmt;

use serde::Serialize;

use super::SACREBLEU_VERSION;
use super::errors::{EvalError, check_streams};
use super::tokenize::is_python_whitespace;

/// Highest character n-gram order (sacreBLEU's `CHRF.CHAR_ORDER`).
pub const CHAR_ORDER: usize = 6;

/// Weight of recall relative to precision (sacreBLEU's `CHRF.BETA`).
pub const BETA: u32 = 2;

/// `[hyp, ref, match]` counts for each order 1–6.
type Stats = [[u64; 3]; CHAR_ORDER];

/// A corpus chrF score.
///
/// [`fmt::Display`] prints sacreBLEU's line, e.g. `chrF2 = 70.12`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChrfScore {
    /// chrF in 0–100.
    pub score: f64,
    /// Character n-gram order (6).
    pub char_order: usize,
    /// β (2).
    pub beta: u32,
    /// sacreBLEU-style signature, see [`chrf_signature`].
    pub signature: String,
}

impl fmt::Display for ChrfScore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "chrF{} = {:.2}", self.beta, self.score)
    }
}

/// The signature sacreBLEU prints for its default chrF with `n_refs` references per segment:
/// `nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:2.6.0`.
pub fn chrf_signature(n_refs: usize) -> String {
    format!(
        "nrefs:{n_refs}|case:mixed|eff:yes|nc:{CHAR_ORDER}|nw:0|space:no|\
         version:{SACREBLEU_VERSION}"
    )
}

/// Corpus chrF of `hyps` against one or more reference streams, as `sacrebleu.CHRF()` computes
/// it.
///
/// `refs[k][i]` is the k-th reference of segment `i`; every stream must have one line per
/// hypothesis.
///
/// # Errors
/// [`EvalError::EmptyHypotheses`], [`EvalError::NoReferences`], or
/// [`EvalError::LineCountMismatch`] naming the stream and both line counts.
pub fn corpus_chrf<H, R, S>(hyps: &[H], refs: &[R]) -> Result<ChrfScore, EvalError>
where
    H: AsRef<str>,
    R: AsRef<[S]>,
    S: AsRef<str>,
{
    check_streams(hyps, refs)?;

    let mut corpus: Stats = [[0; 3]; CHAR_ORDER];
    for (i, hyp) in hyps.iter().enumerate() {
        let hyp_chars = without_whitespace(hyp.as_ref());
        let hyp_ngrams = char_ngrams(&hyp_chars);

        let mut best: Option<(f64, Stats)> = None;
        for stream in refs {
            let ref_chars = without_whitespace(stream.as_ref()[i].as_ref());
            let stats = match_stats(&hyp_ngrams, &char_ngrams(&ref_chars));
            let f = f_score(&stats);
            if best.as_ref().is_none_or(|(best_f, _)| f > *best_f) {
                best = Some((f, stats));
            }
        }
        if let Some((_, stats)) = best {
            for (sum, seg) in corpus.iter_mut().zip(stats) {
                for k in 0..3 {
                    sum[k] += seg[k];
                }
            }
        }
    }

    Ok(ChrfScore {
        score: f_score(&corpus),
        char_order: CHAR_ORDER,
        beta: BETA,
        signature: chrf_signature(refs.len()),
    })
}

/// The line's characters with all (Python) whitespace removed.
fn without_whitespace(line: &str) -> Vec<char> {
    line.chars().filter(|&c| !is_python_whitespace(c)).collect()
}

/// Counts of character n-grams for each order 1–6 (index 0 holds unigrams).
fn char_ngrams(chars: &[char]) -> Vec<HashMap<&[char], u64>> {
    (1..=CHAR_ORDER)
        .map(|n| {
            let mut counts = HashMap::new();
            for ngram in chars.windows(n) {
                *counts.entry(ngram).or_insert(0) += 1;
            }
            counts
        })
        .collect()
}

/// sacreBLEU's `CHRF._get_match_statistics` for every order.
fn match_stats(hyp: &[HashMap<&[char], u64>], reference: &[HashMap<&[char], u64>]) -> Stats {
    let mut stats: Stats = [[0; 3]; CHAR_ORDER];
    for (n, (h, r)) in hyp.iter().zip(reference).enumerate() {
        let mut hyp_count = 0;
        let mut matches = 0;
        for (ngram, &count) in h {
            hyp_count += count;
            if let Some(&in_ref) = r.get(ngram) {
                matches += count.min(in_ref);
            }
        }
        // Hypothesis n-grams count only where the reference has n-grams of this order.
        let hyp_count = if r.is_empty() { 0 } else { hyp_count };
        stats[n] = [hyp_count, r.values().sum(), matches];
    }
    stats
}

/// sacreBLEU's `CHRF._compute_f_score` with `eps_smoothing=False`, operations in the same order.
fn f_score(stats: &Stats) -> f64 {
    let factor = f64::from(BETA * BETA);
    let mut avg_prec = 0.0f64;
    let mut avg_rec = 0.0f64;
    let mut effective_order = 0u32;
    for &[n_hyp, n_ref, n_match] in stats {
        if n_hyp > 0 && n_ref > 0 {
            avg_prec += n_match as f64 / n_hyp as f64;
            avg_rec += n_match as f64 / n_ref as f64;
            effective_order += 1;
        }
    }
    if effective_order == 0 {
        return 0.0;
    }
    avg_prec /= f64::from(effective_order);
    avg_rec /= f64::from(effective_order);
    if avg_prec + avg_rec == 0.0 {
        return 0.0;
    }
    let mut score = (1.0 + factor) * avg_prec * avg_rec;
    score /= factor * avg_prec + avg_rec;
    100.0 * score
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identical_lines_score_100_and_whitespace_is_ignored() {
        let chrf = corpus_chrf(&["a cat\u{3000}sat"], &[["acat sat"]]).expect("valid input");
        assert!((chrf.score - 100.0).abs() < 1e-12, "{chrf}");
    }

    #[test]
    fn orders_missing_from_the_reference_are_left_out_of_the_average() {
        // Reference "ab" has only orders 1 and 2; hypothesis "abc" has 3, 2, 1 n-grams.
        let stats = match_stats(&char_ngrams(&['a', 'b', 'c']), &char_ngrams(&['a', 'b']));
        assert_eq!(stats[0], [3, 2, 2]);
        assert_eq!(stats[1], [2, 1, 1]);
        assert_eq!(stats[2], [0, 0, 0]);
        // P = (2/3 + 1/2) / 2, R = 1; chrF = 5PR / (4P + R).
        let p = (2.0 / 3.0 + 0.5) / 2.0;
        let expected = 100.0 * 5.0 * p / (4.0 * p + 1.0);
        assert!((f_score(&stats) - expected).abs() < 1e-12);
    }

    #[test]
    fn best_reference_is_chosen_per_segment() {
        let one = corpus_chrf(&["kitten"], &[["dog"]]).expect("valid");
        let two = corpus_chrf(&["kitten"], &[["dog"], ["kitten"]]).expect("valid");
        assert_eq!(one.score, 0.0);
        assert!((two.score - 100.0).abs() < 1e-12);
        assert!(two.signature.starts_with("nrefs:2|"));
    }

    #[test]
    fn line_count_mismatch_is_an_error() {
        let err = corpus_chrf(&["a"], &[vec!["a", "b"]]).expect_err("mismatch");
        assert!(matches!(
            err,
            EvalError::LineCountMismatch {
                hypotheses: 1,
                lines: 2,
                ..
            }
        ));
    }
}
