//! Corpus BLEU exactly as sacreBLEU 2.x's default `BLEU()` computes it.
//!
//! Defaults reproduced: `13a` tokenizer, case-sensitive, n-grams up to order 4, `exp` smoothing
//! (mteval-v13a's: the k-th order with no match gets precision `100 / (2^k · total)`), no
//! effective order, brevity penalty `exp(1 − ref_len / sys_len)` when the output is shorter.
//! With several references per segment, n-gram counts are clipped by the maximum count over the
//! references, and the reference length is the one closest to the hypothesis length (the
//! shorter one on a tie). All statistics are summed over the corpus before the score is formed.

use std::collections::HashMap;
use std::fmt;

use serde::Serialize;

use super::SACREBLEU_VERSION;
use super::errors::{EvalError, check_streams};
use super::tokenize::{rstrip_python, tokenize_13a};

/// Highest n-gram order BLEU counts (sacreBLEU's `MAX_NGRAM_ORDER`).
pub const MAX_NGRAM_ORDER: usize = 4;

/// sacreBLEU's `my_log(0)`: the log of a zero precision, floored so the score becomes 0.
const LOG_ZERO: f64 = -9_999_999_999.0;

/// A corpus BLEU score with the statistics sacreBLEU reports beside it.
///
/// [`fmt::Display`] prints sacreBLEU's line, e.g.
/// `BLEU = 38.02 95.2/50.0/26.3/16.7 (BP = 1.000 ratio = 1.000 hyp_len = 21 ref_len = 21)`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BleuScore {
    /// BLEU in 0–100.
    pub score: f64,
    /// Matched (clipped) n-grams for orders 1–4, summed over the corpus.
    pub counts: [u64; MAX_NGRAM_ORDER],
    /// Hypothesis n-grams for orders 1–4, summed over the corpus.
    pub totals: [u64; MAX_NGRAM_ORDER],
    /// n-gram precisions in percent (smoothed where a count is 0).
    pub precisions: [f64; MAX_NGRAM_ORDER],
    /// Brevity penalty.
    pub bp: f64,
    /// `sys_len / ref_len` (0 when `ref_len` is 0).
    pub ratio: f64,
    /// Hypothesis length in 13a tokens.
    pub sys_len: u64,
    /// Reference length in 13a tokens (closest reference per segment).
    pub ref_len: u64,
    /// sacreBLEU-style signature, see [`bleu_signature`].
    pub signature: String,
}

impl fmt::Display for BleuScore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [p1, p2, p3, p4] = self.precisions;
        write!(
            f,
            "BLEU = {:.2} {p1:.1}/{p2:.1}/{p3:.1}/{p4:.1} \
             (BP = {:.3} ratio = {:.3} hyp_len = {} ref_len = {})",
            self.score, self.bp, self.ratio, self.sys_len, self.ref_len
        )
    }
}

/// The signature sacreBLEU prints for its default BLEU with `n_refs` references per segment:
/// `nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0`.
pub fn bleu_signature(n_refs: usize) -> String {
    format!("nrefs:{n_refs}|case:mixed|eff:no|tok:13a|smooth:exp|version:{SACREBLEU_VERSION}")
}

/// Corpus BLEU of `hyps` against one or more reference streams, as `sacrebleu.BLEU()` computes
/// it.
///
/// `refs[k][i]` is the k-th reference of segment `i`; every stream must have one line per
/// hypothesis. Lines must not contain their line terminator (a trailing `\r` is harmless: it is
/// stripped like other trailing whitespace).
///
/// # Errors
/// [`EvalError::EmptyHypotheses`], [`EvalError::NoReferences`], or
/// [`EvalError::LineCountMismatch`] naming the stream and both line counts.
pub fn corpus_bleu<H, R, S>(hyps: &[H], refs: &[R]) -> Result<BleuScore, EvalError>
where
    H: AsRef<str>,
    R: AsRef<[S]>,
    S: AsRef<str>,
{
    check_streams(hyps, refs)?;

    let mut sys_len = 0u64;
    let mut ref_len = 0u64;
    let mut counts = [0u64; MAX_NGRAM_ORDER];
    let mut totals = [0u64; MAX_NGRAM_ORDER];

    for (i, hyp) in hyps.iter().enumerate() {
        let hyp_tok = tokenize_13a(rstrip_python(hyp.as_ref()));
        let ref_toks: Vec<String> = refs
            .iter()
            .map(|stream| tokenize_13a(rstrip_python(stream.as_ref()[i].as_ref())))
            .collect();

        let hyp_words = words(&hyp_tok);
        let ref_words: Vec<Vec<&str>> = ref_toks.iter().map(|r| words(r)).collect();

        // Clip counts: for each n-gram, the highest count in any one reference.
        let mut ref_ngrams: HashMap<&[&str], u64> = HashMap::new();
        for rw in &ref_words {
            for (ngram, count) in ngram_counts(rw) {
                let best = ref_ngrams.entry(ngram).or_insert(0);
                *best = (*best).max(count);
            }
        }

        for (ngram, count) in ngram_counts(&hyp_words) {
            let n = ngram.len() - 1;
            totals[n] += count;
            if let Some(&in_ref) = ref_ngrams.get(ngram) {
                counts[n] += count.min(in_ref);
            }
        }

        let hyp_len = hyp_words.len();
        sys_len += hyp_len as u64;
        ref_len += closest_ref_len(hyp_len, ref_words.iter().map(Vec::len)) as u64;
    }

    Ok(compute_bleu(counts, totals, sys_len, ref_len, refs.len()))
}

/// The words of a 13a-tokenized line (already single-space separated).
fn words(tokenized: &str) -> Vec<&str> {
    tokenized.split(' ').filter(|w| !w.is_empty()).collect()
}

/// Counts of all n-grams of orders 1–4 in `words`, keyed by the word slice.
fn ngram_counts<'a>(words: &'a [&'a str]) -> HashMap<&'a [&'a str], u64> {
    let mut counts = HashMap::new();
    for n in 1..=MAX_NGRAM_ORDER {
        for ngram in words.windows(n) {
            *counts.entry(ngram).or_insert(0) += 1;
        }
    }
    counts
}

/// The reference length closest to `hyp_len`; on a tie the shorter one (sacreBLEU's rule).
fn closest_ref_len(hyp_len: usize, ref_lens: impl Iterator<Item = usize>) -> usize {
    let mut best: Option<(usize, usize)> = None; // (diff, len)
    for len in ref_lens {
        let diff = hyp_len.abs_diff(len);
        best = match best {
            Some((best_diff, best_len))
                if diff > best_diff || (diff == best_diff && len >= best_len) =>
            {
                Some((best_diff, best_len))
            }
            _ => Some((diff, len)),
        };
    }
    best.map_or(0, |(_, len)| len)
}

/// sacreBLEU's `BLEU.compute_bleu` with `smooth_method='exp'` and `effective_order=False`, with
/// the floating-point operations in the same order (results agree to about 1e-13).
fn compute_bleu(
    counts: [u64; MAX_NGRAM_ORDER],
    totals: [u64; MAX_NGRAM_ORDER],
    sys_len: u64,
    ref_len: u64,
    n_refs: usize,
) -> BleuScore {
    let bp = if sys_len < ref_len {
        if sys_len > 0 {
            (1.0 - ref_len as f64 / sys_len as f64).exp()
        } else {
            0.0
        }
    } else {
        1.0
    };
    let ratio = if ref_len > 0 {
        sys_len as f64 / ref_len as f64
    } else {
        0.0
    };

    let mut precisions = [0.0f64; MAX_NGRAM_ORDER];
    let mut score = 0.0;
    // No match at any order: sacreBLEU returns 0 with all precisions 0 (its issue #141).
    if counts.iter().any(|&c| c > 0) {
        let mut smooth = 1.0f64;
        for n in 0..MAX_NGRAM_ORDER {
            if totals[n] == 0 {
                break; // higher orders keep precision 0, so the score is 0
            }
            precisions[n] = if counts[n] == 0 {
                smooth *= 2.0;
                100.0 / (smooth * totals[n] as f64)
            } else {
                100.0 * counts[n] as f64 / totals[n] as f64
            };
        }
        let log_sum: f64 = precisions
            .iter()
            .map(|&p| if p == 0.0 { LOG_ZERO } else { p.ln() })
            .sum();
        score = bp * (log_sum / MAX_NGRAM_ORDER as f64).exp();
    }

    BleuScore {
        score,
        counts,
        totals,
        precisions,
        bp,
        ratio,
        sys_len,
        ref_len,
        signature: bleu_signature(n_refs),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn closest_reference_length_prefers_the_shorter_on_a_tie() {
        assert_eq!(closest_ref_len(5, [7, 3, 4].into_iter()), 4);
        assert_eq!(closest_ref_len(5, [6, 4].into_iter()), 4);
        assert_eq!(closest_ref_len(5, [4, 6].into_iter()), 4);
        assert_eq!(closest_ref_len(5, [9].into_iter()), 9);
    }

    #[test]
    fn identical_corpus_scores_100() {
        let lines = [
            "The cat sat on the mat.",
            "It was 3.5 metres long, they said.",
        ];
        let bleu = corpus_bleu(&lines, &[lines]).expect("valid input");
        assert!((bleu.score - 100.0).abs() < 1e-9, "{bleu}");
        assert_eq!(bleu.counts, bleu.totals);
        assert_eq!(bleu.sys_len, 16); // 7 + 9 tokens: "." and "," are split off
    }

    #[test]
    fn exp_smoothing_halves_again_for_each_unmatched_order() {
        // 4 hypothesis tokens; unigrams match, nothing longer does.
        let bleu = corpus_bleu(&["d c b a"], &[["a b c d"]]).expect("valid input");
        assert_eq!(bleu.counts, [4, 0, 0, 0]);
        assert_eq!(bleu.totals, [4, 3, 2, 1]);
        assert_eq!(
            bleu.precisions,
            [100.0, 100.0 / 6.0, 100.0 / 8.0, 100.0 / 8.0]
        );
    }

    #[test]
    fn clipping_uses_the_best_reference_per_ngram() {
        let bleu = corpus_bleu(&["the the the"], &[["the cat"], ["the the dog"]]).expect("valid");
        assert_eq!(bleu.counts[0], 2);
        assert_eq!(bleu.ref_len, 3);
        assert!(bleu.signature.starts_with("nrefs:2|"));
    }

    #[test]
    fn errors_name_both_line_counts() {
        let err = corpus_bleu(&["a", "b"], &[vec!["a"]]).expect_err("mismatch");
        assert_eq!(
            err,
            EvalError::LineCountMismatch {
                hypotheses: 2,
                stream: "reference 1".into(),
                lines: 1
            }
        );
        let msg = err.to_string();
        assert!(msg.contains("2 lines") && msg.contains("has 1"), "{msg}");
        let no_hyps: [&str; 0] = [];
        assert_eq!(
            corpus_bleu(&no_hyps, &[no_hyps]),
            Err(EvalError::EmptyHypotheses)
        );
        let no_refs: [[&str; 1]; 0] = [];
        assert_eq!(corpus_bleu(&["a"], &no_refs), Err(EvalError::NoReferences));
    }
}
