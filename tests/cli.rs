//! The `translate` and `evaluate` binaries as a user runs them: line count preserved, empty
//! lines, hostile input, invalid UTF-8, JSON output, broken bundles, engines and threads, and
//! sacreBLEU agreement.
#![cfg(feature = "cli")]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const TINY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/tiny/bundle");
const SACREBLEU: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/sacrebleu");

fn bin(name: &str) -> Command {
    let mut c = Command::new(match name {
        "translate" => env!("CARGO_BIN_EXE_translate"),
        _ => env!("CARGO_BIN_EXE_evaluate"),
    });
    if std::env::var_os("XDG_RUNTIME_DIR").is_none() {
        c.env("XDG_RUNTIME_DIR", std::env::temp_dir());
    }
    c
}

/// Runs `translate` with `args` on `input`, on the GPU engine (lavapipe in CI) unless `args`
/// name an engine.
fn translate(args: &[&str], input: &[u8]) -> Output {
    let engine: &[&str] = if args.contains(&"--engine") {
        &[]
    } else {
        &["--engine", "gpu"]
    };
    translate_with(&[engine, args].concat(), input)
}

/// Runs `translate` with exactly `args` on `input`.
fn translate_with(args: &[&str], input: &[u8]) -> Output {
    let mut child = bin("translate")
        .args(["--model", TINY])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("translate starts");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input)
        .expect("write stdin");
    child.wait_with_output().expect("translate runs")
}

fn stdout_lines(out: &Output) -> Vec<String> {
    String::from_utf8(out.stdout.clone())
        .expect("UTF-8 output")
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn one_line_out_per_line_in_whatever_the_line_holds() {
    let long_sentence = "ein Mann ".repeat(300); // 2,700 characters, no punctuation
    let paragraph = "Ein Hund rennt über die Wiese. Zwei Kinder spielen im Sand! ".repeat(330);
    let input = format!(
        "Ein Mann fährt Fahrrad.\n\n   \t \n<script>alert(1)</script> <b>fett</b>\n{long_sentence}\n\
         Emoji 😀🚲 und عربي שלום 中文\nKontroll\u{7}zeichen\r\n{paragraph}\nletzte Zeile ohne Umbruch"
    );
    let out = translate(&["--beam", "2", "--groups", "1"], input.as_bytes());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let lines = stdout_lines(&out);
    assert_eq!(lines.len(), 9, "line count must be preserved");
    assert_eq!(lines[1], "", "an empty line gives an empty line");
    assert_eq!(lines[2], "", "a blank line gives an empty line");
    for i in [0, 3, 4, 5, 6, 7, 8] {
        assert!(!lines[i].trim().is_empty(), "line {i} has a translation");
    }
    assert!(
        stderr.contains("sentences in"),
        "summary on stderr: {stderr}"
    );
    // The paragraph's 660 sentences are 2 distinct ones: the other 658 are counted as repeats.
    let repeats = stderr
        .lines()
        .find_map(|l| {
            l.strip_suffix(" repeated sentences (or chunks of long ones) not searched again")
        })
        .and_then(|n| n.parse::<usize>().ok());
    assert!(repeats.is_some_and(|n| n >= 658), "{repeats:?}: {stderr}");
}

#[test]
fn a_sentence_longer_than_the_model_is_chunked_not_cut() {
    let long_sentence = "ein Mann ".repeat(300);
    let out = translate(&["--greedy", "--json"], long_sentence.as_bytes());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    let chunks = json["sentences"][0]["chunks"].as_u64().expect("chunks");
    assert!(
        chunks >= 2,
        "600 tokens must be translated in pieces, got {chunks}"
    );
}

#[test]
fn json_has_n_best_scores_timings_and_heatmaps() {
    let out = translate(
        &[
            "--beam",
            "4",
            "--groups",
            "2",
            "--n-best",
            "3",
            "--json",
            "--attention",
        ],
        "Ein Mann schläft. Eine Frau liest ein Buch.\n".as_bytes(),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    let sentences = json["sentences"].as_array().expect("sentences");
    assert_eq!(sentences.len(), 2);
    for s in sentences {
        let n_best = s["hypotheses"].as_array().expect("hypotheses");
        // At most 3; diverse groups that end on the same tokens are listed once.
        assert!((1..=3).contains(&n_best.len()), "{n_best:?}");
        let tokens: Vec<&serde_json::Value> = n_best.iter().map(|h| &h["tokens"]).collect();
        for (i, t) in tokens.iter().enumerate() {
            assert!(!tokens[..i].contains(t), "duplicate hypothesis {t}");
        }
        let scores: Vec<f64> = n_best.iter().filter_map(|h| h["score"].as_f64()).collect();
        assert!(
            scores.windows(2).all(|w| w[0] >= w[1]),
            "sorted: {scores:?}"
        );
        let map = &s["attention"];
        let (rows, cols) = (
            map["target_tokens"].as_array().expect("targets").len(),
            map["source_tokens"].as_array().expect("sources").len(),
        );
        let weights = map["weights"].as_array().expect("weights");
        assert_eq!(weights.len(), rows * cols);
        for r in 0..rows {
            let sum: f64 = weights[r * cols..][..cols]
                .iter()
                .filter_map(|w| w.as_f64())
                .sum();
            assert!((sum - 1.0).abs() < 1e-3, "row {r} sums to {sum}");
        }
    }
    let t = &json["timings"];
    assert!(t["steps"].as_u64().expect("steps") > 0);
    assert!(t["gpu"]["submits"].as_u64().expect("submits") > 0);
}

#[test]
fn the_default_engine_skips_a_cpu_emulated_adapter() {
    let out = translate_with(&["--greedy"], b"Ein Hund.\n");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(stdout_lines(&out).len(), 1);
    let gpu_line = stderr
        .lines()
        .find(|l| l.starts_with("model loaded") && !l.contains("on the CPU"));
    match gpu_line {
        // A hardware adapter (a developer's machine): the GPU engine, never an emulation.
        Some(line) => assert!(!line.ends_with(", Cpu)"), "{stderr}"),
        // None (CI: lavapipe only, or no adapter): the CPU engine, after a one-line notice.
        None => {
            assert!(stderr.contains("on the CPU (int8"), "{stderr}");
            // Where CI requires an adapter (lavapipe), the notice is the emulation's, not "no GPU".
            if std::env::var_os("REQUIRE_GPU").is_some_and(|v| v == "1") {
                assert!(stderr.contains("is a CPU emulation"), "{stderr}");
            }
            let notes = stderr.lines().filter(|l| l.starts_with("note: ")).count();
            assert_eq!(notes, 1, "one notice: {stderr}");
        }
    }
}

#[test]
fn invalid_utf8_names_the_line() {
    let out = translate(&["--greedy"], b"Ein Hund.\nkaputt \xff\xfe hier\n");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("line 2 is not valid UTF-8"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    // Every line before the bad one is still translated and written.
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(stdout.lines().count(), 1, "{stdout}");
    assert!(!stdout.trim().is_empty(), "{stdout}");
}

#[test]
fn a_broken_bundle_is_one_clear_error_before_the_gpu() {
    let dir = std::env::temp_dir().join(format!("webnmt-cli-broken-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    for f in [
        "manifest.json",
        "model.safetensors",
        "source.tokenizer.json",
        "target.tokenizer.json",
    ] {
        std::fs::copy(Path::new(TINY).join(f), dir.join(f)).expect("copy");
    }
    let weights = dir.join("model.safetensors");
    let mut bytes = std::fs::read(&weights).expect("read");
    let last = bytes.len() - 1;
    bytes[last] ^= 0x55;
    std::fs::write(&weights, bytes).expect("write");
    let out = bin("translate")
        .args(["--model", &dir.to_string_lossy()])
        .stdin(Stdio::null())
        .output()
        .expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    assert!(stderr.contains("model.safetensors is damaged"), "{stderr}");
    // It names the folder and the way out.
    assert!(stderr.contains(&*dir.to_string_lossy()), "{stderr}");
    assert!(stderr.contains("--export-only"), "{stderr}");
    assert!(
        !stderr.contains("model loaded"),
        "no GPU work before validation: {stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_options_are_refused_with_the_reason() {
    for (args, says) in [
        (["--beam", "6", "--groups", "4"], "divide"),
        (["--beam", "16", "--groups", "1"], "at most 8"),
    ] {
        // No input: refused before any is read (writing some could race the exit).
        let out = bin("translate")
            .args(["--model", TINY, "--engine", "gpu"])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("translate runs");
        assert!(!out.status.success());
        assert!(String::from_utf8_lossy(&out.stderr).contains(says));
    }
}

#[test]
fn length_options_beyond_the_sentence_are_harmless_on_both_engines() {
    let input = "Ein Mann fährt Fahrrad.\nHund\n".as_bytes();
    for engine in ["gpu", "cpu"] {
        let run = |args: &[&str]| {
            let out = translate(&[&["--engine", engine], args].concat(), input);
            let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
            assert!(out.status.success(), "{engine} {args:?}: {stderr}");
            stdout_lines(&out)
        };
        // A window longer than any target sees every generated token either way; the GPU
        // session once sized its history buffer by the window (2^62 overflowed it).
        assert_eq!(
            run(&["--repetition-window", "4611686018427387904"]),
            run(&["--repetition-window", "1000"]),
            "{engine}"
        );
        // floor(0.1 · source) + 0 is 0 for these short sources: each still gets its one token
        // (it once failed the whole batch).
        assert_eq!(
            run(&["--max-len-a", "0.1", "--max-len-b", "0"]).len(),
            2,
            "{engine}"
        );
    }
}

/// `evaluate --model TINY` on the fixture corpus's 50 dev lines with `engine_args`: the
/// translations and the JSON report.
fn evaluate_dev(engine_args: &[&str], dir: &Path, name: &str) -> (String, serde_json::Value) {
    let corpus = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/corpus/de-en");
    let (output, json) = (
        dir.join(format!("{name}.txt")),
        dir.join(format!("{name}.json")),
    );
    let out = bin("evaluate")
        .args(["--model", TINY, "--src", &format!("{corpus}/dev.de")])
        .args(["--ref", &format!("{corpus}/dev.en")])
        .args(engine_args)
        .arg("--output")
        .arg(&output)
        .arg("--json")
        .arg(&json)
        .output()
        .expect("evaluate runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report = std::fs::read_to_string(&json).expect("report written");
    (
        std::fs::read_to_string(&output).expect("translations written"),
        serde_json::from_str(&report).expect("report is JSON"),
    )
}

#[test]
fn evaluate_runs_the_cpu_engine_with_threads_and_agrees_with_the_gpu_engine() {
    let dir = std::env::temp_dir().join(format!("webnmt-cli-evaluate-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let (one, one_report) = evaluate_dev(&["--engine", "cpu"], &dir, "cpu1");
    let (two, two_report) = evaluate_dev(&["--engine", "cpu", "--threads", "2"], &dir, "cpu2");
    let (gpu, gpu_report) = evaluate_dev(&["--engine", "gpu"], &dir, "gpu");
    for (report, starts, ends) in [
        (&one_report, "CPU engine int8", ", 1 thread(s))"),
        (&two_report, "CPU engine int8", ", 2 thread(s))"),
        (&gpu_report, "GPU engine int8", ""),
    ] {
        let engine = report["engine"].as_str().expect("engine");
        assert!(
            engine.starts_with(starts) && engine.ends_with(ends),
            "{engine}"
        );
    }
    assert_eq!(one.lines().count(), 50);
    // Threads split the products' rows, never a sum: the same translations, bit for bit.
    assert_eq!(one, two);
    assert_eq!(one_report["report"]["bleu"], two_report["report"]["bleu"]);
    // The same int8 weights on both engines, but the CPU engine quantizes activations too
    // (its default products): near-ties of the tiny model flip on a few sentences, as in
    // tests/cpu.rs (`cpu_beam_search_equals_burn_beam_search` allows 12 of 50).
    let differ = one.lines().zip(gpu.lines()).filter(|(a, b)| a != b).count();
    assert_eq!(gpu.lines().count(), 50);
    assert!(
        differ <= 12,
        "{differ} of 50 translations differ:\n{one}\n{gpu}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn threads_are_refused_where_they_would_do_nothing() {
    let corpus = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/corpus/de-en");
    let (src, reference) = (format!("{corpus}/dev.de"), format!("{corpus}/dev.en"));
    let unused = "would not run the CPU engine";
    for (name, args, says) in [
        (
            "translate",
            &["--engine", "gpu", "--threads", "2"][..],
            unused,
        ),
        (
            "translate",
            &["--engine", "cpu", "--threads", "0"],
            "0 is not in 1..=256",
        ),
        ("evaluate", &["--threads", "2"], unused),
        ("evaluate", &["--engine", "gpu", "--threads", "2"], unused),
        (
            "evaluate",
            &["--cpu", "--engine", "cpu", "--threads", "2"],
            unused,
        ),
    ] {
        let mut cmd = bin(name);
        cmd.args(["--model", TINY]);
        if name == "evaluate" {
            cmd.args(["--src", &src, "--ref", &reference]);
        }
        // No input: the process exits before it reads any (writing some could race its exit).
        let out = cmd.args(args).stdin(Stdio::null()).output().expect("runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{name} {args:?}: {stderr}");
        assert!(stderr.contains(says), "{name} {args:?}: {stderr}");
        assert!(out.stdout.is_empty(), "{name} {args:?}");
    }
}

#[test]
fn evaluate_agrees_with_sacrebleu_on_the_fixtures() {
    let expected: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(Path::new(SACREBLEU).join("expected.json")).expect("fixtures"),
    )
    .expect("json");
    let pairs = expected["pairs"].as_array().expect("pairs");
    assert!(pairs.len() >= 3);
    for pair in pairs {
        let path = |f: &serde_json::Value| PathBuf::from(SACREBLEU).join(f.as_str().expect("name"));
        let mut cmd = bin("evaluate");
        cmd.arg("--hyp").arg(path(&pair["hyp"]));
        for r in pair["refs"].as_array().expect("refs") {
            cmd.arg("--ref").arg(path(r));
        }
        let out = cmd.output().expect("evaluate runs");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let figure = |prefix: &str| -> f64 {
            stdout
                .lines()
                .find_map(|l| l.strip_prefix(prefix))
                .and_then(|rest| rest.split_whitespace().next())
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("no `{prefix}` line in {stdout}"))
        };
        let bleu = pair["bleu"]["score"].as_f64().expect("bleu");
        let chrf = pair["chrf"]["score"].as_f64().expect("chrf");
        assert!(
            (figure("BLEU = ") - bleu).abs() <= 0.01,
            "{}: {stdout}",
            pair["name"]
        );
        assert!(
            (figure("chrF2 = ") - chrf).abs() <= 0.01,
            "{}: {stdout}",
            pair["name"]
        );
    }
}
