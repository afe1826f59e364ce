//! Agreement with sacreBLEU on the committed fixtures, and whole-module tests.
//!
//! `tests/fixtures/sacrebleu/expected.json` holds what sacreBLEU (the version in
//! [`SACREBLEU_VERSION`]) computed for each hypothesis/reference file pair there, and its 13a
//! tokenization of tricky strings; `scripts/sacrebleu_fixtures.py` wrote it.

use std::fs;
use std::path::PathBuf;

use serde::Deserialize;

use super::*;

/// The bar: our scores must be within 0.01 of sacreBLEU's.
const TOLERANCE: f64 = 0.01;

#[derive(Deserialize)]
struct Expected {
    sacrebleu_version: String,
    pairs: Vec<Pair>,
    tokenize_13a: Vec<TokenizeCase>,
}

#[derive(Deserialize)]
struct Pair {
    name: String,
    hyp: String,
    refs: Vec<String>,
    lines: usize,
    bleu: ExpectedBleu,
    chrf: ExpectedChrf,
}

#[derive(Deserialize)]
struct ExpectedBleu {
    score: f64,
    counts: [u64; 4],
    totals: [u64; 4],
    precisions: [f64; 4],
    bp: f64,
    ratio: f64,
    sys_len: u64,
    ref_len: u64,
    signature: String,
    formatted: String,
}

#[derive(Deserialize)]
struct ExpectedChrf {
    score: f64,
    signature: String,
    formatted: String,
}

#[derive(Deserialize)]
struct TokenizeCase {
    input: String,
    output: String,
}

fn fixture_dir() -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/sacrebleu"
    ))
}

fn read(name: &str) -> String {
    let path = fixture_dir().join(name);
    fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// A fixture file's lines exactly as the Python script reads them: split on `\n`, the file's
/// final `\n` removed, nothing stripped.
fn raw_lines(name: &str) -> Vec<String> {
    let text = read(name);
    let body = text
        .strip_suffix('\n')
        .unwrap_or_else(|| panic!("{name} must end with a newline"));
    body.split('\n').map(str::to_string).collect()
}

fn expected() -> Expected {
    serde_json::from_str(&read("expected.json")).expect("expected.json parses")
}

#[test]
fn fixtures_come_from_the_pinned_sacrebleu() {
    let exp = expected();
    assert_eq!(exp.sacrebleu_version, SACREBLEU_VERSION);
    assert!(exp.pairs.len() >= 3, "need at least three file pairs");
}

#[test]
fn bleu_and_chrf_match_sacrebleu() {
    let exp = expected();
    let mut worst_bleu = (0.0f64, String::new());
    let mut worst_chrf = (0.0f64, String::new());
    let mut failures = Vec::new();

    for pair in &exp.pairs {
        let hyps = raw_lines(&pair.hyp);
        let refs: Vec<Vec<String>> = pair.refs.iter().map(|r| raw_lines(r)).collect();
        assert_eq!(hyps.len(), pair.lines, "{}: line count", pair.name);

        let bleu = corpus_bleu(&hyps, &refs).expect("fixture input is valid");
        let chrf = corpus_chrf(&hyps, &refs).expect("fixture input is valid");
        let e = &pair.bleu;

        let d_bleu = (bleu.score - e.score).abs();
        let d_chrf = (chrf.score - pair.chrf.score).abs();
        if d_bleu >= worst_bleu.0 {
            worst_bleu = (d_bleu, pair.name.clone());
        }
        if d_chrf >= worst_chrf.0 {
            worst_chrf = (d_chrf, pair.name.clone());
        }

        let name = &pair.name;
        let mut check = |ok: bool, what: String| {
            if !ok {
                failures.push(format!("{name}: {what}"));
            }
        };
        check(
            d_bleu <= TOLERANCE,
            format!("BLEU {} vs sacreBLEU {}", bleu.score, e.score),
        );
        check(
            d_chrf <= TOLERANCE,
            format!("chrF {} vs sacreBLEU {}", chrf.score, pair.chrf.score),
        );
        check(
            bleu.counts == e.counts,
            format!("counts {:?} vs {:?}", bleu.counts, e.counts),
        );
        check(
            bleu.totals == e.totals,
            format!("totals {:?} vs {:?}", bleu.totals, e.totals),
        );
        check(
            (bleu.sys_len, bleu.ref_len) == (e.sys_len, e.ref_len),
            format!(
                "lengths {} {} vs {} {}",
                bleu.sys_len, bleu.ref_len, e.sys_len, e.ref_len
            ),
        );
        let d_prec = bleu
            .precisions
            .iter()
            .zip(e.precisions)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f64::max);
        check(
            d_prec <= 1e-9,
            format!("precisions {:?} vs {:?}", bleu.precisions, e.precisions),
        );
        check(
            (bleu.bp - e.bp).abs() <= 1e-12,
            format!("BP {} vs {}", bleu.bp, e.bp),
        );
        check(
            (bleu.ratio - e.ratio).abs() <= 1e-12,
            format!("ratio {} vs {}", bleu.ratio, e.ratio),
        );
        check(
            bleu.signature == e.signature,
            format!("signature {}", bleu.signature),
        );
        check(
            bleu.to_string() == e.formatted,
            format!("display {bleu} vs {}", e.formatted),
        );
        check(
            chrf.signature == pair.chrf.signature,
            format!("signature {}", chrf.signature),
        );
        check(
            chrf.to_string() == pair.chrf.formatted,
            format!("display {chrf} vs {}", pair.chrf.formatted),
        );
    }

    println!(
        "max |ours - sacreBLEU|: BLEU {:.3e} ({}), chrF {:.3e} ({}) over {} pairs",
        worst_bleu.0,
        worst_bleu.1,
        worst_chrf.0,
        worst_chrf.1,
        exp.pairs.len()
    );
    assert!(
        failures.is_empty(),
        "{} disagreements:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn tokenize_13a_matches_sacrebleu() {
    let exp = expected();
    assert!(!exp.tokenize_13a.is_empty());
    let bad: Vec<String> = exp
        .tokenize_13a
        .iter()
        .filter_map(|case| {
            let ours = tokenize_13a(&case.input);
            (ours != case.output).then(|| {
                format!(
                    "{:?}: ours {ours:?}, sacreBLEU {:?}",
                    case.input, case.output
                )
            })
        })
        .collect();
    assert!(
        bad.is_empty(),
        "13a tokenization differs:\n{}",
        bad.join("\n")
    );
}

#[test]
fn lines_of_reads_files_like_sacrebleu() {
    assert_eq!(lines_of(""), Vec::<&str>::new());
    assert_eq!(lines_of("a\n"), ["a"]);
    assert_eq!(lines_of("a"), ["a"]);
    assert_eq!(lines_of("a \r\n\nb\u{3000}\n"), ["a", "", "b"]);
    assert_eq!(lines_of("\n"), [""]);
    // Reading a fixture with `lines_of` (which strips trailing whitespace) scores the same.
    let hyps = raw_lines("unicode.hyp");
    let refs = raw_lines("unicode.ref");
    let text_hyps = read("unicode.hyp");
    let text_refs = read("unicode.ref");
    let stripped = (lines_of(&text_hyps), lines_of(&text_refs));
    assert_ne!(
        stripped.1, refs,
        "the fixture has a line with trailing whitespace"
    );
    assert_eq!(
        corpus_bleu(&hyps, &[&refs]).expect("valid"),
        corpus_bleu(&stripped.0, &[&stripped.1]).expect("valid")
    );
}

#[test]
fn evaluate_reports_all_metrics() {
    let sources = ["Er kaufte 3 Äpfel.", "Sie lacht."];
    let hyps = ["He bought 3 apples.", "She she she laughs."];
    let refs = [vec!["He bought three apples.", "She laughs."]];
    let report = evaluate(&sources, &hyps, &refs).expect("valid input");
    assert_eq!(report.errors.repetition_lines, [1]);
    assert_eq!(report.errors.number_mismatch_lines, Vec::<usize>::new());
    assert!(report.bleu.score > 0.0 && report.bleu.score < 100.0);
    let json = serde_json::to_value(&report).expect("serializable");
    assert_eq!(json["errors"]["repetition_pct"], 50.0);
    let text = report.to_string();
    assert!(text.contains("BLEU signature: nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:"));
    assert!(text.ends_with("Length ratio: 1.50 ± 0.50"), "{text}");

    let err = evaluate(&["x"], &hyps, &refs).expect_err("one source line for two hypotheses");
    assert!(err.to_string().contains("the source has 1"), "{err}");
}
