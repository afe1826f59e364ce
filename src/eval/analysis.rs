//! Error analysis of a test set's translations, as the reference implementation reports it:
//!
//! ```text
//! Repetition errors: 0.16%
//! Number mismatches: 13.49%
//! Unknown tokens: 0.00%
//! Length ratio: 1.00 ± 0.33
//! ```
//!
//! The rules, precisely:
//! - **Words** are the hypothesis split on whitespace. For the repetition rule each word is
//!   lowercased and stripped of leading and trailing non-alphanumeric characters; a word made only
//!   of such characters (`—`, `...`) is kept as it is.
//! - **Repetition error** (per line): the words contain one word [`WORD_RUN`] (3) or more times
//!   in a row (`the the the`), or a phrase of 2 to [`MAX_PHRASE_LEN`] (4) words followed
//!   immediately by itself (`of the of the`). A word said twice (`very very`) is not an error.
//!   Rate: percent of lines.
//! - **Number mismatch** (per line): the multiset of numbers in the source differs from the
//!   multiset of numbers in the hypothesis (see [`extract_numbers`]; numbers written as words
//!   or in another unit, such as Korean `1,000만` for "10 million", count as mismatches). Lines
//!   with no number on either side match. Rate: percent of lines.
//! - **Unknown tokens**: occurrences of any of [`UNKNOWN_MARKERS`] (`<unk>` and U+FFFD, the
//!   replacement character a byte-level decoder emits) in the hypotheses, also inside words.
//!   Rate: percent of hypothesis words.
//! - **Length ratio** (per line): hypothesis words / reference words; lines whose reference has
//!   no word are left out. Reported as mean ± population standard deviation.

use std::fmt;

use serde::Serialize;

use super::errors::{EvalError, check_len};

/// A word repeated this many times in a row makes a repetition error.
pub const WORD_RUN: usize = 3;

/// Longest phrase (in words) whose immediate repetition makes a repetition error.
pub const MAX_PHRASE_LEN: usize = 4;

/// Strings counted as unknown tokens in a hypothesis.
pub const UNKNOWN_MARKERS: [&str; 2] = ["<unk>", "\u{FFFD}"];

/// The error analysis of a set of (source, hypothesis, reference) lines.
///
/// [`fmt::Display`] prints the four lines of the reference implementation's report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ErrorAnalysis {
    /// Number of segments analysed.
    pub lines: usize,
    /// 0-based indices of the hypotheses with a repetition error.
    pub repetition_lines: Vec<usize>,
    /// Repetition errors in percent of lines.
    pub repetition_pct: f64,
    /// 0-based indices of the lines whose numbers differ between source and hypothesis.
    pub number_mismatch_lines: Vec<usize>,
    /// Number mismatches in percent of lines.
    pub number_mismatch_pct: f64,
    /// Occurrences of [`UNKNOWN_MARKERS`] in all hypotheses.
    pub unknown_tokens: usize,
    /// Whitespace-separated words in all hypotheses.
    pub hypothesis_words: usize,
    /// Unknown tokens in percent of hypothesis words.
    pub unknown_pct: f64,
    /// Mean of the per-line ratio hypothesis words / reference words.
    pub length_ratio_mean: f64,
    /// Population standard deviation of that ratio.
    pub length_ratio_sd: f64,
    /// Lines that entered the length ratio (their reference has at least one word).
    pub length_ratio_lines: usize,
}

impl fmt::Display for ErrorAnalysis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "Repetition errors: {:.2}%", self.repetition_pct)?;
        writeln!(f, "Number mismatches: {:.2}%", self.number_mismatch_pct)?;
        writeln!(f, "Unknown tokens: {:.2}%", self.unknown_pct)?;
        write!(
            f,
            "Length ratio: {:.2} ± {:.2}",
            self.length_ratio_mean, self.length_ratio_sd
        )
    }
}

/// Analyses the translations `hyps` of `sources` against one reference per line `refs`.
///
/// # Errors
/// [`EvalError::EmptyHypotheses`] when there is no line, or [`EvalError::LineCountMismatch`]
/// when the sources or references do not have one line per hypothesis.
pub fn analyze_errors<S, H, R>(
    sources: &[S],
    hyps: &[H],
    refs: &[R],
) -> Result<ErrorAnalysis, EvalError>
where
    S: AsRef<str>,
    H: AsRef<str>,
    R: AsRef<str>,
{
    if hyps.is_empty() {
        return Err(EvalError::EmptyHypotheses);
    }
    check_len(hyps.len(), "the source", sources.len())?;
    check_len(hyps.len(), "the reference", refs.len())?;

    let mut repetition_lines = Vec::new();
    let mut number_mismatch_lines = Vec::new();
    let mut unknown_tokens = 0;
    let mut hypothesis_words = 0;
    let mut ratios = Vec::with_capacity(hyps.len());

    for (i, ((src, hyp), reference)) in sources.iter().zip(hyps).zip(refs).enumerate() {
        let (src, hyp, reference) = (src.as_ref(), hyp.as_ref(), reference.as_ref());
        if has_repetition(hyp) {
            repetition_lines.push(i);
        }
        if numbers_differ(src, hyp) {
            number_mismatch_lines.push(i);
        }
        unknown_tokens += count_unknown(hyp);
        let hyp_len = hyp.split_whitespace().count();
        hypothesis_words += hyp_len;
        let ref_len = reference.split_whitespace().count();
        if ref_len > 0 {
            ratios.push(hyp_len as f64 / ref_len as f64);
        }
    }

    let (length_ratio_mean, length_ratio_sd) = mean_and_sd(&ratios);
    let lines = hyps.len();
    Ok(ErrorAnalysis {
        lines,
        repetition_pct: percent(repetition_lines.len(), lines),
        repetition_lines,
        number_mismatch_pct: percent(number_mismatch_lines.len(), lines),
        number_mismatch_lines,
        unknown_tokens,
        hypothesis_words,
        unknown_pct: percent(unknown_tokens, hypothesis_words),
        length_ratio_mean,
        length_ratio_sd,
        length_ratio_lines: ratios.len(),
    })
}

/// True when `hyp` has a repetition error (see the module documentation for the rule).
pub fn has_repetition(hyp: &str) -> bool {
    let words: Vec<String> = hyp.split_whitespace().map(normalize_word).collect();
    let word_run = words
        .windows(WORD_RUN)
        .any(|w| w.iter().all(|x| *x == w[0]));
    let phrase_repeat =
        (2..=MAX_PHRASE_LEN).any(|n| words.windows(2 * n).any(|w| w[..n] == w[n..]));
    word_run || phrase_repeat
}

/// Lowercases `word` and trims non-alphanumeric characters from both ends; a word with no
/// alphanumeric character is returned unchanged.
fn normalize_word(word: &str) -> String {
    let trimmed = word.trim_matches(|c: char| !c.is_alphanumeric());
    if trimmed.is_empty() {
        word.to_string()
    } else {
        trimmed.to_lowercase()
    }
}

/// The numbers in `text`, in a canonical form so that the same number written in English or
/// German style compares equal.
///
/// A number is a maximal run of digits (ASCII or full-width `０`–`９`) in which a single `.` or
/// `,` (or its full-width form) between two digits also belongs to the number: `1,000.50`,
/// `3,5`, `1.2.3`. A separator followed by exactly three digits is a digit-group separator and
/// is dropped
/// (`1,000` = `1.000` = `1000`); any other separator is a decimal mark, written `.`
/// (`3,5` = `3.5`). Leading zeros are removed (`07` = `7`). Signs are ignored. Known
/// limitation: a decimal with exactly three decimals (`3.141`) reads as a grouped integer, on
/// both sides alike.
pub fn extract_numbers(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().map(fold_full_width).collect();
    let mut numbers = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        if !chars[i].is_ascii_digit() {
            i += 1;
            continue;
        }
        // Collect digit groups and the separators between them.
        let mut groups: Vec<String> = Vec::new();
        let mut group = String::new();
        while i < chars.len() {
            let c = chars[i];
            if c.is_ascii_digit() {
                group.push(c);
                i += 1;
            } else if (c == '.' || c == ',') && chars.get(i + 1).is_some_and(char::is_ascii_digit) {
                groups.push(std::mem::take(&mut group));
                i += 1;
            } else {
                break;
            }
        }
        groups.push(group);
        numbers.push(canonical_number(&groups));
    }
    numbers
}

/// Full-width digits, comma and full stop as their ASCII forms; other characters unchanged.
fn fold_full_width(c: char) -> char {
    match c {
        '０'..='９' | '，' | '．' => char::from_u32(u32::from(c) - 0xFEE0).unwrap_or(c),
        _ => c,
    }
}

/// Joins digit groups: a group of exactly three digits after the first continues the integer
/// part (digit grouping); any other group starts a new decimal part.
fn canonical_number(groups: &[String]) -> String {
    let mut out = String::new();
    for (k, g) in groups.iter().enumerate() {
        if k > 0 && g.len() != 3 {
            out.push('.');
        }
        out.push_str(g);
    }
    let int_end = out.find('.').unwrap_or(out.len());
    let zeros = out[..int_end].len() - out[..int_end].trim_start_matches('0').len();
    // Keep one digit of an all-zero integer part: "000" -> "0", "00.5" -> "0.5".
    let zeros = if zeros == int_end {
        zeros.saturating_sub(1)
    } else {
        zeros
    };
    out.split_off(zeros)
}

/// True when the multisets of numbers of `source` and `hyp` differ.
pub fn numbers_differ(source: &str, hyp: &str) -> bool {
    let mut a = extract_numbers(source);
    let mut b = extract_numbers(hyp);
    a.sort_unstable();
    b.sort_unstable();
    a != b
}

/// Occurrences of [`UNKNOWN_MARKERS`] in `hyp`.
pub fn count_unknown(hyp: &str) -> usize {
    UNKNOWN_MARKERS
        .iter()
        .map(|marker| hyp.matches(marker).count())
        .sum()
}

/// `100 · part / whole`, or 0 when `whole` is 0.
fn percent(part: usize, whole: usize) -> f64 {
    if whole == 0 {
        0.0
    } else {
        100.0 * part as f64 / whole as f64
    }
}

/// Mean and population standard deviation; (0, 0) for no values.
fn mean_and_sd(values: &[f64]) -> (f64, f64) {
    if values.is_empty() {
        return (0.0, 0.0);
    }
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    let var = values.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n;
    (mean, var.sqrt())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repetition_needs_three_words_or_a_repeated_phrase() {
        assert!(has_repetition("the the the cat"));
        assert!(has_repetition("The, the THE cat")); // case and punctuation ignored
        assert!(has_repetition("he went to the to the market"));
        assert!(has_repetition("a b c d a b c d"));
        assert!(!has_repetition("a b c d e a b c d e")); // a 5-word phrase is not checked
        assert!(!has_repetition("it was very very good"));
        assert!(!has_repetition("the cat sat on the mat"));
        assert!(!has_repetition(""));
        assert!(has_repetition("no — no — no"));
    }

    #[test]
    fn numbers_are_canonical_across_conventions() {
        assert_eq!(
            extract_numbers("1,000 and 1.000 and 3,5 and 3.5 and 07:30"),
            ["1000", "1000", "3.5", "3.5", "7", "30"]
        );
        assert_eq!(extract_numbers("$1,234.56, in 1998."), ["1234.56", "1998"]);
        assert_eq!(
            extract_numbers("v1.2.3 and １，０００ and 0.5 and 000"),
            ["1.2.3", "1000", "0.5", "0"]
        );
        assert_eq!(extract_numbers("no digits, .5 -> 5"), ["5", "5"]);
    }

    #[test]
    fn number_mismatch_compares_multisets() {
        assert!(!numbers_differ("3,000명 중 25명", "25 of the 3,000 people"));
        assert!(numbers_differ("3,000명", "3,001 people"));
        assert!(numbers_differ("2 and 2", "2"));
        assert!(!numbers_differ("no numbers", "none here"));
        assert!(numbers_differ("1,000만", "10 million"));
    }

    #[test]
    fn unknown_tokens_are_counted_inside_words() {
        assert_eq!(count_unknown("a <unk> b foo<unk>bar \u{FFFD}x"), 3);
        assert_eq!(count_unknown("unknown <UNK>"), 0);
    }

    #[test]
    fn report_rates_and_length_ratio() {
        let sources = ["3 cats", "ein Hund", "zwei", "leer"];
        let hyps = ["3 cats", "a dog dog dog", "two <unk>", "x"];
        let refs = ["three cats", "a dog", "two", ""];
        let report = analyze_errors(&sources, &hyps, &refs).expect("valid input");
        assert_eq!(report.lines, 4);
        assert_eq!(report.repetition_lines, [1]);
        assert_eq!(report.repetition_pct, 25.0);
        assert_eq!(report.number_mismatch_lines, Vec::<usize>::new());
        assert_eq!(report.unknown_tokens, 1);
        assert_eq!(report.hypothesis_words, 9);
        assert!((report.unknown_pct - 100.0 / 9.0).abs() < 1e-12);
        // Ratios 2/2, 4/2, 2/1; the empty reference is left out.
        assert_eq!(report.length_ratio_lines, 3);
        let mean = 5.0 / 3.0;
        let sd =
            (((1.0 - mean) * (1.0 - mean) + 2.0 * (2.0 - mean) * (2.0 - mean)) / 3.0_f64).sqrt();
        assert!((report.length_ratio_mean - mean).abs() < 1e-12);
        assert!((report.length_ratio_sd - sd).abs() < 1e-12);
        assert_eq!(
            report.to_string(),
            "Repetition errors: 25.00%\nNumber mismatches: 0.00%\nUnknown tokens: 11.11%\n\
             Length ratio: 1.67 ± 0.47"
        );
    }

    #[test]
    fn number_mismatch_rate_is_per_line() {
        let report = analyze_errors(
            &["5", "6", "7", "8"],
            &["5", "six", "7", "9"],
            &["", "", "", ""],
        )
        .expect("valid input");
        assert_eq!(report.number_mismatch_lines, [1, 3]);
        assert_eq!(report.number_mismatch_pct, 50.0);
        assert_eq!(report.length_ratio_lines, 0);
        assert_eq!(
            (report.length_ratio_mean, report.length_ratio_sd),
            (0.0, 0.0)
        );
    }

    #[test]
    fn analysis_input_errors_name_the_stream() {
        let err = analyze_errors(&["a"], &["a", "b"], &["a", "b"]).expect_err("mismatch");
        assert_eq!(
            err,
            EvalError::LineCountMismatch {
                hypotheses: 2,
                stream: "the source".into(),
                lines: 1
            }
        );
        let none: [&str; 0] = [];
        assert_eq!(
            analyze_errors(&none, &none, &none),
            Err(EvalError::EmptyHypotheses)
        );
    }
}
