//! End-to-end tests of the `train` binary and library on the committed fixture corpus (the
//! `tiny` preset on burn's flex CPU backend): the loss falls, the bundle loads back within the
//! int8 error bound, a killed run resumes, and bad inputs give one clear error line.
#![cfg(feature = "train")]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use webnmt::weights::{Bundle, tensor_specs};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/corpus");

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("webnmt-train-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

/// A tiny de→en run on the fixture corpus, `steps` optimizer steps long.
fn write_config(dir: &Path, steps: usize, eval_every: usize, corpus: (&str, &str)) -> PathBuf {
    let config = format!(
        r#"
run_dir = "run"
source_lang = "de"
target_lang = "en"

[corpus]
source = "{corpus_src}"
target = "{corpus_tgt}"

[dev]
source = "{f}/de-en/dev.de"
target = "{f}/de-en/dev.en"

[split]
test = 20

[source_tokenizer]
vocab_size = 400

[target_tokenizer]
vocab_size = 400

[model]
preset = "tiny"

[batch]
max_tokens = 600

[training]
max_steps = {steps}
accum_steps = 1
warmup_steps = 100
lr_factor = 1.0
log_every = 10
eval_every = {eval_every}
bleu_sentences = 20
patience = 0
"#,
        corpus_src = corpus.0,
        corpus_tgt = corpus.1,
        f = FIXTURES,
    );
    let path = dir.join("tiny.toml");
    std::fs::write(&path, config).expect("config");
    path
}

fn fixture_corpus() -> (String, String) {
    (
        format!("{FIXTURES}/de-en/train.de"),
        format!("{FIXTURES}/de-en/train.en"),
    )
}

fn train_cmd(config: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_train"));
    cmd.arg("--config").arg(config).arg("--device").arg("cpu");
    cmd
}

/// Runs `train --config CONFIG ARGS…` on the CPU to success; returns its stderr.
fn train_ok(config: &Path, args: &[&str]) -> String {
    let out = train_cmd(config).args(args).output().expect("train runs");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    stderr
}

/// The metrics rows as (step, train loss, validation loss) where a validation ran.
fn losses(run: &Path) -> Vec<(usize, f64, Option<f64>)> {
    let csv = std::fs::read_to_string(run.join("metrics.csv")).expect("metrics.csv");
    csv.lines()
        .skip(1)
        .map(|l| {
            let cols: Vec<&str> = l.split(',').collect();
            (
                cols[0].parse().expect("step"),
                cols[3].parse().expect("loss"),
                cols[5].parse().ok(),
            )
        })
        .collect()
}

#[test]
fn tiny_training_reduces_the_loss_and_exports_a_valid_bundle() {
    let dir = scratch("loss");
    let (src, tgt) = fixture_corpus();
    let config_path = write_config(&dir, 400, 100, (&src, &tgt));
    let out = train_cmd(&config_path).output().expect("train runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "train failed:\n{stderr}");

    let run = dir.join("run");
    let rows = losses(&run);
    let first = rows.first().expect("a first row").1;
    let last = rows.last().expect("a last row").1;
    assert_eq!(rows.last().map(|r| r.0), Some(400));
    assert!(last < 0.6 * first, "loss went from {first} to {last}");
    assert!(run.join("metrics.svg").exists());

    let bundle = Bundle::from_dir(&run.join("bundle")).expect("the exported bundle loads");
    // Exporting the finished run again gives the same bytes.
    let weights = std::fs::read(run.join("bundle/model.safetensors")).expect("weights");
    std::fs::remove_dir_all(run.join("bundle")).expect("rm bundle");
    let out = train_cmd(&config_path)
        .arg("--export-only")
        .output()
        .expect("export runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let again = std::fs::read(run.join("bundle/model.safetensors")).expect("weights again");
    assert!(weights == again, "re-export changed the weights");
    let config = bundle.config().clone();
    assert_eq!(config.d_model, 32);
    // int8 weights dequantize to within half a quantization step of the fp32 checkpoint.
    let device = burn::tensor::Device::flex();
    let model = webnmt::model::Transformer::new(&config, &device)
        .load_file_checked(&run.join("best/model.bpk"));
    let fp32 = webnmt::export::named_weights(&model).expect("readable weights");
    let mut matrices = 0;
    for spec in tensor_specs(&config) {
        let Some(name) = spec.name.strip_suffix(".weight") else {
            continue;
        };
        let q = bundle.matrix(name).expect("matrix");
        let original = &fp32[&spec.name];
        for (i, (d, w)) in q.dequantize().iter().zip(original).enumerate() {
            let bound = q.scale[i / q.k] / 2.0 + 1e-7;
            assert!((d - w).abs() <= bound, "{} [{i}]: {d} vs {w}", spec.name);
        }
        matrices += 1;
    }
    assert_eq!(matrices, 2 + 2 * (4 + 2) + 2 * (8 + 2));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Loads a checkpoint, panicking with the path on failure (test helper).
trait LoadChecked {
    fn load_file_checked(self, path: &Path) -> Self;
}

impl LoadChecked for webnmt::model::Transformer {
    fn load_file_checked(self, path: &Path) -> Self {
        use burn::module::Module;
        self.try_load_file(path)
            .unwrap_or_else(|e| panic!("cannot load {}: {e:?}", path.display()))
    }
}

#[test]
fn a_killed_run_resumes_from_its_last_checkpoint() {
    let dir = scratch("resume");
    let (src, tgt) = fixture_corpus();
    let config = write_config(&dir, 240, 40, (&src, &tgt));
    let run = dir.join("run");
    let checkpoints = run.join("checkpoints");
    // SIGKILL it five times: as soon as a checkpoint of at least the given step exists (so often
    // while the next steps are computed), or earlier, the moment a checkpoint is being written
    // (a `.partial` directory exists) once the previous target is passed.
    let mut caught_partial = 0;
    for wait_for in [40usize, 80, 120, 160, 200] {
        let mut child = train_cmd(&config)
            .arg("--resume")
            .stderr(Stdio::null())
            .spawn()
            .expect("train starts");
        let deadline = Instant::now() + Duration::from_secs(300);
        loop {
            let names: Vec<String> = std::fs::read_dir(&checkpoints)
                .into_iter()
                .flatten()
                .flatten()
                .filter_map(|e| e.file_name().to_str().map(str::to_string))
                .collect();
            let newest = names
                .iter()
                .filter_map(|n| n.strip_prefix("step-")?.parse::<usize>().ok())
                .max();
            let writing = names.iter().any(|n| n.ends_with(".partial"));
            if newest.is_some_and(|s| s >= wait_for)
                || (writing && newest.is_some_and(|s| s + 40 >= wait_for))
            {
                caught_partial += usize::from(writing);
                break;
            }
            assert!(
                Instant::now() < deadline,
                "no checkpoint {wait_for} after 300 s"
            );
            assert!(
                child.try_wait().expect("wait").is_none(),
                "train ended early"
            );
            std::thread::sleep(Duration::from_millis(2));
        }
        child.kill().expect("SIGKILL");
        child.wait().expect("reaped");
    }
    let out = train_cmd(&config)
        .arg("--resume")
        .output()
        .expect("resume runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let rows = losses(&run);
    let steps: Vec<usize> = rows.iter().map(|r| r.0).collect();
    let expected: Vec<usize> = (1..=24).map(|i| i * 10).collect();
    assert_eq!(steps, expected, "every logged step exactly once, in order");
    // No jump at the resume points: each logged loss is close to its neighbours.
    for w in rows.windows(2) {
        assert!(
            w[1].1 < w[0].1 * 1.5,
            "loss jumped from {} to {} at step {}",
            w[0].1,
            w[1].1,
            w[1].0
        );
    }
    eprintln!("{caught_partial} of 5 kills hit a checkpoint being written");
    let kept: Vec<String> = std::fs::read_dir(&checkpoints)
        .expect("dir")
        .flatten()
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .collect();
    assert!(kept.len() <= 3, "{kept:?} on disk");
    assert!(
        kept.iter().all(|n| !n.ends_with(".partial")),
        "a half-written checkpoint was left: {kept:?}"
    );
    assert!(Bundle::from_dir(&run.join("bundle")).is_ok());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_corpora_stop_with_one_clear_error_line() {
    let dir = scratch("bad");
    for (name, src, tgt, expect) in [
        ("mismatch", "bad/mismatch.ko", "bad/mismatch.en", "lines"),
        (
            "utf8",
            "bad/invalid_utf8.ko",
            "bad/invalid_utf8.en",
            "UTF-8",
        ),
        ("empty", "bad/empty.ko", "bad/empty.en", "empty"),
        ("missing", "bad/nope.ko", "bad/nope.en", "nope.ko"),
    ] {
        let sub = dir.join(name);
        std::fs::create_dir_all(&sub).expect("dir");
        let config = write_config(
            &sub,
            10,
            10,
            (&format!("{FIXTURES}/{src}"), &format!("{FIXTURES}/{tgt}")),
        );
        let out = train_cmd(&config).output().expect("train runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{name}: must fail");
        let errors: Vec<&str> = stderr
            .lines()
            .filter(|l| l.starts_with("error: "))
            .collect();
        assert_eq!(errors.len(), 1, "{name}: {stderr}");
        assert!(errors[0].contains(expect), "{name}: {}", errors[0]);
        assert!(!stderr.contains("panicked"), "{name}: {stderr}");
    }
    // A config with an unknown key or impossible sizes is refused before any data is read.
    let config = write_config(&dir, 10, 10, (&fixture_corpus().0, &fixture_corpus().1));
    let text = std::fs::read_to_string(&config).expect("config");
    for (bad, expect) in [
        (
            text.replace("preset = \"tiny\"", "preset = \"tiny\"\nn_layers = 3"),
            "n_layers",
        ),
        (
            text.replace("preset = \"tiny\"", "preset = \"tiny\"\nn_heads = 3"),
            "divisible",
        ),
    ] {
        std::fs::write(&config, bad).expect("config");
        let out = train_cmd(&config).output().expect("train runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success());
        assert!(stderr.contains(expect), "{stderr}");
    }
    // No [dev] files and no dev split: an empty dev set is named, with what to set.
    let dev_section = format!(
        "[dev]\nsource = \"{FIXTURES}/de-en/dev.de\"\ntarget = \"{FIXTURES}/de-en/dev.en\"\n"
    );
    assert!(text.contains(&dev_section), "the fixture config changed");
    let no_dev = text
        .replace(&dev_section, "")
        .replace("[split]\n", "[split]\ndev = 0\n");
    std::fs::write(&config, no_dev).expect("config");
    let out = train_cmd(&config).output().expect("train runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("the dev set is empty: [split] dev is 0")
            && stderr.contains("set [split] dev"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn pairs_too_long_for_the_model_are_counted_on_stderr() {
    let dir = scratch("overlong");
    let (src, tgt) = fixture_corpus();
    let config = write_config(&dir, 2, 10, (&src, &tgt));
    let text = std::fs::read_to_string(&config).expect("config");
    let short = text.replace("preset = \"tiny\"", "preset = \"tiny\"\nmax_seq_len = 16");
    std::fs::write(&config, short).expect("config");
    let stderr = train_ok(&config, &[]);
    let line = |label: &str| {
        stderr
            .lines()
            .skip_while(|l| !l.starts_with("training pairs, tokenized:"))
            .find_map(|l| l.strip_prefix(label))
            .and_then(|n| n.trim().parse::<usize>().ok())
    };
    let dropped = line("too long (dropped)");
    assert!(dropped.is_some_and(|n| n > 0), "{dropped:?}: {stderr}");
    assert!(line("batched").is_some_and(|n| n > 0), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn split_only_writes_the_same_held_out_files_every_time_and_trains_nothing() {
    let dir = scratch("split-only");
    let (src, tgt) = fixture_corpus();
    let config = write_config(&dir, 10, 10, (&src, &tgt));
    let run = dir.join("run");
    let read = |name: &str| std::fs::read(run.join(name)).expect(name);
    let out = train_cmd(&config)
        .arg("--split-only")
        .output()
        .expect("runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let first = (
        read("heldout.test.de"),
        read("heldout.dev.en"),
        read("data.txt"),
    );
    assert!(!first.0.is_empty());
    assert!(!run.join("checkpoints").exists() && !run.join("bundle").exists());
    let out = train_cmd(&config)
        .arg("--split-only")
        .output()
        .expect("runs");
    assert!(out.status.success());
    assert_eq!(
        first,
        (
            read("heldout.test.de"),
            read("heldout.dev.en"),
            read("data.txt")
        )
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A scratch directory and a `steps`-step tiny config without dropout for a GPU training test,
/// with `edits` applied; `None` (after printing why) when there is no adapter and `REQUIRE_GPU`
/// is not `1`.
fn gpu_test_config(test: &str, steps: usize, edits: &[(&str, &str)]) -> Option<(PathBuf, PathBuf)> {
    webnmt::gpu::testing::gpu_or_skip(test)?;
    let no_dropout = ("preset = \"tiny\"", "preset = \"tiny\"\ndropout = 0.0");
    let edits: Vec<_> = [no_dropout].iter().chain(edits).copied().collect();
    Some(edited_config(test, steps, steps, &edits))
}

/// A scratch directory named `name` and the fixture config (`write_config`) with `edits`
/// (text replacements) applied.
fn edited_config(
    name: &str,
    steps: usize,
    eval_every: usize,
    edits: &[(&str, &str)],
) -> (PathBuf, PathBuf) {
    let dir = scratch(name);
    let (src, tgt) = fixture_corpus();
    let config = write_config(&dir, steps, eval_every, (&src, &tgt));
    let mut text = std::fs::read_to_string(&config).expect("config");
    for (from, to) in edits {
        text = text.replace(from, to);
    }
    std::fs::write(&config, text).expect("config");
    (dir, config)
}

/// Runs `train --config CONFIG --run-dir DIR/RUN_DIR ARGS…` to success; returns its loss rows
/// and stderr. burn-wgpu's autotuning is kept minimal: in full it takes minutes on a CPU adapter.
fn train_rows(
    config: &Path,
    dir: &Path,
    run_dir: &str,
    args: &[&str],
) -> (Vec<(usize, f64, Option<f64>)>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_train"))
        .arg("--config")
        .arg(config)
        .arg("--run-dir")
        .arg(dir.join(run_dir))
        .args(args)
        .env("CUBECL_AUTOTUNE_LEVEL", "minimal")
        .output()
        .expect("train runs");
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "train {args:?}:\n{stderr}");
    (losses(&dir.join(run_dir)), stderr)
}

/// `--devices cpu,wgpu-cpu`: burn flex and burn-wgpu on the machine's adapter (lavapipe in CI)
/// train data-parallel, one batch each per step, their gradients summed on the main device.
/// Without dropout that must follow the curve of one device accumulating the same two batches
/// per step, and each device must have trained on its half of the batches.
#[test]
fn two_devices_train_like_one_device_accumulating_their_batches() {
    let test = "two_devices_train_like_one_device_accumulating_their_batches";
    let Some((dir, config)) = gpu_test_config(test, 4, &[("log_every = 10", "log_every = 2")])
    else {
        return;
    };
    let (two, stderr) = train_rows(
        &config,
        &dir,
        "two",
        &["--devices", "cpu,wgpu-cpu", "--accum-steps", "1"],
    );
    let (one, _) = train_rows(
        &config,
        &dir,
        "one",
        &["--devices", "cpu", "--accum-steps", "2"],
    );
    let counts = stderr
        .lines()
        .find(|l| l.starts_with("batches per device: "))
        .unwrap_or_else(|| panic!("no per-device count in:\n{stderr}"));
    assert!(
        counts.contains("Flex") && counts.contains("Wgpu") && counts.matches(" 4").count() == 2,
        "{counts}"
    );
    assert_eq!(two.len(), 2, "{two:?}");
    // eval_every = steps = 4: the last row of each run carries a validation loss to compare.
    assert!(
        two[1].2.is_some() && one.last().is_some_and(|r| r.2.is_some()),
        "{one:?} {two:?}"
    );
    assert_eq!(
        one.iter().map(|r| r.0).collect::<Vec<_>>(),
        two.iter().map(|r| r.0).collect::<Vec<_>>()
    );
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-4 * a.abs().max(1.0);
    for (a, b) in one.iter().zip(&two) {
        assert!(
            close(a.1, b.1),
            "train loss at step {}: {} vs {}",
            a.0,
            a.1,
            b.1
        );
        match (a.2, b.2) {
            (None, None) => {}
            (Some(x), Some(y)) => assert!(close(x, y), "val loss at step {}: {x} vs {y}", a.0),
            other => panic!("validation rows differ at step {}: {other:?}", a.0),
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--precision auto` on a GPU backend (burn-wgpu on lavapipe in CI) trains in f16 mixed
/// precision: the loss is finite, falls, and follows the f32 run of the same seed on the same
/// device to 1e-3; the f32 weights checkpoint and export as usual.
#[test]
fn a_gpu_backend_trains_in_f16_mixed_precision_by_default_and_follows_f32() {
    let test = "a_gpu_backend_trains_in_f16_mixed_precision_by_default_and_follows_f32";
    let edits = [
        ("log_every = 10", "log_every = 1"),
        ("lr_factor = 1.0", "lr_factor = 5.0"),
    ];
    let Some((dir, config)) = gpu_test_config(test, 3, &edits) else {
        return;
    };
    let run = |precision: &str| {
        let args = ["--devices", "wgpu-cpu", "--precision", precision];
        train_rows(&config, &dir, precision, &args)
    };
    let (half, stderr) = run("auto");
    assert!(
        stderr.contains("mixed precision: forward and backward in F16"),
        "{stderr}"
    );
    assert_eq!(half.iter().map(|r| r.0).collect::<Vec<_>>(), [1, 2, 3]);
    assert!(
        half.iter().all(|r| r.1.is_finite()) && half[2].1 < half[0].1,
        "{half:?}"
    );
    assert!(Bundle::from_dir(&dir.join("auto/bundle")).is_ok());
    let (full, stderr) = run("f32");
    assert!(!stderr.contains("mixed precision"), "{stderr}");
    assert_eq!(full.iter().map(|r| r.0).collect::<Vec<_>>(), [1, 2, 3]);
    for (h, f) in half.iter().zip(&full) {
        assert!(
            (h.1 - f.1).abs() < 1e-3 * f.1,
            "step {}: f16 loss {} vs f32 {}",
            h.0,
            h.1,
            f.1
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// How a run stops, and the `--resume` flags that let it go on.
struct Stop {
    name: &'static str,
    steps: usize,
    edits: &'static [(&'static str, &'static str)],
    refused: &'static str,
    go_on: &'static [&'static str],
    continuing: &'static str,
    last: usize,
}

/// A stopped run stays stopped on a plain `--resume` and says which flag goes on; with that flag
/// it continues from its checkpoint to the step limit. Both ways a run stops: early stopping, and
/// its step limit (so a long run that reached `max_epochs` is not stuck either).
#[test]
fn a_stopped_run_continues_when_its_flags_allow() {
    let stops = [
        // No validation after the first counts as an improvement: the second one (step 20)
        // stops it.
        Stop {
            name: "early-stop",
            steps: 60,
            edits: &[("patience = 0", "patience = 1\nmin_delta = 100.0")],
            refused: "nothing to resume; --patience 0 (or more than 1) continues it",
            go_on: &["--patience", "0"],
            continuing: "continuing a run that had stopped (early stopping",
            last: 60,
        },
        Stop {
            name: "limit",
            steps: 20,
            edits: &[],
            refused: "(reached 20 steps); nothing to resume; --max-steps above 20 continues it",
            go_on: &["--max-steps", "40"],
            continuing: "continuing a run that had stopped (reached 20 steps)",
            last: 40,
        },
    ];
    for stop in stops {
        let name = stop.name;
        let (dir, config) = edited_config(name, stop.steps, 10, stop.edits);
        let run = dir.join("run");
        let stderr = train_ok(&config, &[]);
        assert!(stderr.contains("done: 20 steps"), "{name}: {stderr}");

        let stderr = train_ok(&config, &["--resume"]);
        assert!(stderr.contains(stop.refused), "{name}: {stderr}");
        assert_eq!(losses(&run).last().map(|r| r.0), Some(20), "{name}");

        let stderr = train_ok(&config, &[&["--resume"][..], stop.go_on].concat());
        assert!(stderr.contains(stop.continuing), "{name}: {stderr}");
        let done = format!("done: {} steps", stop.last);
        assert!(stderr.contains(&done), "{name}: {stderr}");
        let steps: Vec<usize> = losses(&run).iter().map(|r| r.0).collect();
        let expected: Vec<usize> = (1..=stop.last / 10).map(|i| i * 10).collect();
        assert_eq!(steps, expected, "{name}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// The learning rate is a function of the step and the schedule (`lr_factor`, `warmup_steps`):
/// `--resume` with another schedule is refused with the run's values, and changes nothing, as is
/// `--resume` with another model; a start without `--resume` on the run is refused too.
#[test]
fn a_resume_with_another_schedule_or_model_or_a_fresh_start_on_a_run_is_refused() {
    let (dir, config) = edited_config("schedule", 20, 10, &[]);
    let run = dir.join("run");
    let train = |args: &[&str]| {
        let out = train_cmd(&config).args(args).output().expect("train runs");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (ok, stderr) = train(&[]);
    assert!(ok, "{stderr}");
    let state = std::fs::read_to_string(run.join("checkpoints/step-00000020/state.json"))
        .expect("state.json");
    assert!(state.contains(r#""lr_factor": 1.0"#), "{state}");

    for args in [
        &["--resume", "--lr-factor", "0.5"][..],
        &["--resume", "--warmup-steps", "50"],
    ] {
        let (ok, stderr) = train(args);
        assert!(!ok, "{args:?} was accepted:\n{stderr}");
        assert!(
            stderr.contains("trained with --lr-factor 1 --warmup-steps 100, not")
                && stderr.contains("resume with the run's values"),
            "{stderr}"
        );
    }
    // Another model is refused before its checkpoint is loaded, naming the run's model.
    let (ok, stderr) = train(&["--resume", "--preset", "small"]);
    assert!(!ok, "another model was accepted:\n{stderr}");
    assert!(
        stderr.contains("this run's checkpoints hold the model")
            && stderr.contains("d_model: 32")
            && stderr.contains("resume with the run's model settings"),
        "{stderr}"
    );
    assert_eq!(losses(&run).last().map(|r| r.0), Some(20));
    // The same schedule resumes (this run had reached its step limit).
    let (ok, stderr) = train(&["--resume", "--lr-factor", "1.0"]);
    assert!(ok && stderr.contains("nothing to resume"), "{stderr}");
    // Without --resume no new run starts on top of this one, and nothing of it is rewritten.
    let written = |name: &str| {
        std::fs::metadata(run.join(name))
            .and_then(|m| m.modified())
            .expect(name)
    };
    let before = (written("target.tokenizer.json"), written("data.txt"));
    let (ok, stderr) = train(&[]);
    assert!(!ok, "a fresh start was accepted:\n{stderr}");
    assert!(
        stderr.contains("already holds checkpoints of a run (the newest at step 20): add --resume"),
        "{stderr}"
    );
    assert_eq!(
        (written("target.tokenizer.json"), written("data.txt")),
        before
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--anneal`: the logged learning rate is the Noam rate times a ramp that falls linearly from 1
/// to 0 at the run's step limit, so the last step trains at rate 0.
#[test]
fn an_annealed_run_ends_at_learning_rate_zero() {
    let (dir, config) = edited_config("anneal", 40, 20, &[]);
    let out = train_cmd(&config)
        .arg("--anneal")
        .output()
        .expect("train runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let csv = std::fs::read_to_string(dir.join("run/metrics.csv")).expect("metrics.csv");
    let rates: Vec<(usize, f64)> = csv
        .lines()
        .skip(1)
        .map(|l| {
            let cols: Vec<&str> = l.split(',').collect();
            (cols[0].parse().expect("step"), cols[2].parse().expect("lr"))
        })
        .collect();
    assert_eq!(
        rates.iter().map(|r| r.0).collect::<Vec<_>>(),
        [10, 20, 30, 40]
    );
    for (step, lr) in rates {
        // The fixture config: tiny preset (d_model 32), lr_factor 1.0, 100 warm-up steps.
        let noam = webnmt::train::schedule::noam(step, 32, 1.0, 100);
        let expected = noam * (1.0 - step as f64 / 40.0);
        // metrics.csv writes the rate with 8 decimals.
        assert!(
            (lr - expected).abs() <= 1e-8,
            "step {step}: lr {lr}, expected {expected}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A run that ends at its epoch limit validates, checkpoints and exports at its last step even
/// when that step is not a validation step, and when the epoch's last batches make no full step.
#[test]
fn the_epoch_limit_ends_with_a_validation_and_an_export() {
    let edits = [
        ("max_steps = 0", "max_steps = 0\nmax_epochs = 1"),
        ("accum_steps = 1", "accum_steps = 3"),
    ];
    let (dir, config) = edited_config("epochs", 0, 1000, &edits);
    let out = train_cmd(&config).output().expect("train runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    // The fixture makes 10 batches: 3 steps of 3, one batch left over.
    assert!(stderr.contains("done: 3 steps, 1 epochs"), "{stderr}");
    let rows = losses(&dir.join("run"));
    assert!(
        rows.last().is_some_and(|r| r.0 == 3 && r.2.is_some()),
        "{rows:?}"
    );
    assert!(Bundle::from_dir(&dir.join("run/bundle")).is_ok());
    let _ = std::fs::remove_dir_all(&dir);
}

/// Per-epoch sampling (subword regularization and origin weights, `[sampling]`) is a function
/// of the seed and the epoch: two runs with it train on the same batches and log the same
/// losses, which differ from a run without it. A misspelt origin tag is one error line.
#[test]
fn sampled_epochs_are_reproducible_and_a_misspelt_origin_is_one_error_line() {
    let ko = |f: &str| format!("{FIXTURES}/ko-en/{f}");
    let dir = scratch("sampling");
    let config = write_config(&dir, 0, 1000, (&ko("train.ko"), &ko("train.en")));
    let text = std::fs::read_to_string(&config)
        .expect("config")
        .replace(
            &format!("target = \"{}\"", ko("train.en")),
            &format!(
                "target = \"{}\"\ntags = \"{}\"",
                ko("train.en"),
                ko("train.origin")
            ),
        )
        .replace("de-en/dev.de", "ko-en/dev.ko")
        .replace("de-en/dev.en", "ko-en/dev.en")
        .replace("max_steps = 0", "max_steps = 0\nmax_epochs = 3")
        .replace("log_every = 10", "log_every = 1");
    std::fs::write(&config, text).expect("config");
    // Korean needs a larger alphabet than the fixture config's 400 (the flag overrides it).
    let sampling = [
        "--src-vocab",
        "800",
        "--subword-alpha",
        "0.2",
        "--origin-weights",
        "python-docs-ko-3.13=0.3,tatoeba-manythings-kor=2",
    ];
    let (a, stderr) = train_rows(&config, &dir, "a", &sampling);
    assert!(stderr.contains("3 epochs"), "{stderr}");
    let (b, _) = train_rows(&config, &dir, "b", &sampling);
    assert!(a.len() >= 3, "{a:?}");
    assert_eq!(a, b, "the same sampled epochs");
    let (plain, _) = train_rows(&config, &dir, "plain", &sampling[..2]);
    assert_ne!(a, plain, "sampling changed nothing");

    let out = train_cmd(&config)
        .args(["--run-dir", &dir.join("typo").display().to_string()])
        .args(["--src-vocab", "800", "--origin-weights", "pythn-docs=2"])
        .output()
        .expect("train runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let last = stderr.lines().last().unwrap_or_default();
    assert!(!out.status.success());
    assert!(
        last.starts_with("error: ")
            && last.contains("pythn-docs")
            && last.contains("gnome-help-ko"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
