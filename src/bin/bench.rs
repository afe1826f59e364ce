//! `bench`: our GPU engine beside its peers on the same weights and sentences, in one run.
//!
//! Rows: the engine natively (greedy, beam 4, beam 8), our int8 CPU engine on 1 and 2 threads
//! (greedy, beam 4; `--skip-cpu` leaves them out), the burn model on burn's flex CPU backend
//! (greedy), optionally the burn model on burn-wgpu on the same adapter as the engine (greedy;
//! `--burn-wgpu`, its shader compilation is excluded from the timing: one untimed warm-up sentence
//! first) and optionally CTranslate2 int8 on the CPU (`--ctranslate2`, via
//! `scripts/ctranslate2_bench.py`; `--ctranslate2-device cuda` runs it on the GPU of a GPU machine,
//! to compare with our engine on that GPU's Vulkan driver) and optionally our page in headless
//! Chromium with SwiftShader WebGPU, greedy and beam 4 with the native rows' options (`--browser`,
//! via `scripts/page_bench.mjs`: the trunk build in `dist/` loads `--model` through its own model
//! picker and worker; model load and one untimed warm-up sentence are excluded; the time per line
//! is the page's round trip to its worker; peak memory is Chromium's GPU process plus the page's
//! renderer, from /proc). With `--browser`, our engine also runs natively on the same SwiftShader
//! Vulkan driver the page uses (Chromium's `vk_swiftshader_icd.json`, in a child process of bench),
//! so that page / native on one driver shows the wasm and WebGPU overhead apart from the difference
//! between CPU drivers. With `--browser` (and without `--skip-cpu`) the page also runs in
//! Chromium without WebGPU, on its int8 CPU engine in wasm (greedy and beam 4), with ratios to our
//! native CPU engine at 1 thread and to the page on WebGPU. Every row translates the same lines, one line at a time; greedy rows use no
//! repetition penalty so that all engines compute the same thing. Document rows
//! (`--document-lines`, default 200): the first lines of `--src` as one request, `--batch`
//! sentences per decoder step, against the same lines one at a time, greedy and beam 4, on our GPU
//! and CPU engines, with the speed-up, the time to the first line and whether the output is
//! identical. Prints a table and the ratios,
//! and writes JSON with `--json`. Target tokens are counted without EOS. This is a measurement, not
//! a test: figures vary with the load of the machine, so compare rows of one run.

use clap::Parser;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use webnmt::cli::{CliResult, load_bundle, run_main};
use webnmt::cpu::{CpuEngine, CpuOptions};
use webnmt::gpu::{Gpu, GpuCounts};
use webnmt::infer::Engine;
use webnmt::model::{BurnEngine, Transformer};
use webnmt::search::SearchOptions;
use webnmt::translate::{TranslateOptions, TranslationEngine, now_ms, translate, translate_texts};
use webnmt::weights::Bundle;

/// Benchmark the GPU engine against burn (flex CPU, wgpu), CTranslate2 and our page in
/// Chromium on one test file.
#[derive(Parser, Debug)]
#[command(name = "bench", version, about)]
struct Args {
    /// The model bundle.
    #[arg(long)]
    model: PathBuf,
    /// Source sentences, one per line.
    #[arg(long)]
    src: PathBuf,
    /// How many lines (from the top).
    #[arg(long, default_value_t = 100)]
    limit: usize,
    /// Also run the burn model on burn-wgpu (slow to compile shaders on lavapipe).
    #[arg(long)]
    burn_wgpu: bool,
    /// Skip the rows of our int8 CPU engine.
    #[arg(long)]
    skip_cpu: bool,
    /// Skip the burn flex row.
    #[arg(long)]
    skip_burn_flex: bool,
    /// Also run CTranslate2 (needs the venv of `scripts/ctranslate2_bench.py --setup`).
    #[arg(long)]
    ctranslate2: bool,
    /// CTranslate2's device: `cpu`, or `cuda` to compare with our engine on a GPU machine.
    #[arg(long, default_value = "cpu", value_parser = ["cpu", "cuda"])]
    ctranslate2_device: String,
    /// Also run our page (`dist/`, from `trunk build --config trunk.toml`) in headless Chromium
    /// with SwiftShader WebGPU, greedy and beam 4 (needs node and `npm ci` in `tests/`).
    #[arg(long)]
    browser: bool,
    /// Internal, for `--browser`: print only our engine's greedy and beam-4 rows, as JSON on
    /// stdout (bench runs itself so on SwiftShader's Vulkan driver).
    #[arg(long, hide = true)]
    engine_rows_json: bool,
    /// Document rows: the first N lines of `--src` as one request (`--batch` sentences per
    /// decoder step) against the same lines one request and one sentence at a time, greedy and
    /// beam 4, on our GPU engine and our CPU engine (1 thread). 0 skips them.
    #[arg(long, default_value_t = 200)]
    document_lines: usize,
    /// Sentences per decoder step in the document rows.
    #[arg(long, default_value_t = webnmt::translate::DEFAULT_BATCH,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new()
              .range(1..=webnmt::translate::MAX_BATCH as u64))]
    batch: usize,
    /// Write every row as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

/// One engine and setting, measured. `scripts/page_bench.mjs` writes the same fields.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
struct Row {
    name: String,
    sentences: usize,
    seconds: f64,
    sentences_per_sec: f64,
    target_tokens_per_sec: f64,
    p50_ms: f64,
    p95_ms: f64,
    /// Peak resident memory after this row (cumulative over the run), MiB: of this process,
    /// of CTranslate2's, or for the page Chromium's GPU process plus the page's renderer; `None`
    /// where it was not measured.
    peak_rss_mib: Option<f64>,
    /// Our engine only (natively and in the page): per decoder step.
    steps: usize,
    dispatches_per_step: Option<f64>,
    submits_per_step: Option<f64>,
    bytes_read_per_step: Option<f64>,
    encoder_ms: Option<f64>,
    decoder_ms: Option<f64>,
    bookkeeping_ms: Option<f64>,
}

fn main() -> ExitCode {
    run_main(|| pollster::block_on(run(Args::parse())))
}

fn peak_rss_mib() -> Option<f64> {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        })
        .map(|kb| kb / 1024.0)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i]
}

/// A row from per-line milliseconds, one line after the other.
fn row(name: &str, ms: Vec<f64>, target_tokens: usize) -> Row {
    let seconds = ms.iter().sum::<f64>() / 1000.0;
    timed_row(name, ms, seconds, target_tokens)
}

/// A row of `ms.len()` lines done in `seconds`; `ms` gives the percentiles.
fn timed_row(name: &str, ms: Vec<f64>, seconds: f64, target_tokens: usize) -> Row {
    let mut sorted = ms;
    sorted.sort_by(f64::total_cmp);
    Row {
        name: name.to_string(),
        sentences: sorted.len(),
        seconds,
        sentences_per_sec: sorted.len() as f64 / seconds.max(1e-9),
        target_tokens_per_sec: target_tokens as f64 / seconds.max(1e-9),
        p50_ms: percentile(&sorted, 0.5),
        p95_ms: percentile(&sorted, 0.95),
        peak_rss_mib: peak_rss_mib(),
        ..Default::default()
    }
}

/// Our engine's settings, by label: its native rows run all three, the page the first two.
fn settings() -> [(&'static str, SearchOptions); 3] {
    [
        ("greedy", SearchOptions::greedy()),
        (
            "beam 4",
            SearchOptions {
                beam: 4,
                groups: 1,
                ..SearchOptions::default()
            },
        ),
        ("beam 8 (4 groups)", SearchOptions::default()),
    ]
}

async fn engine_row<E: TranslationEngine>(
    engine: &E,
    lines: &[String],
    name: &str,
    search: SearchOptions,
) -> CliResult<Row> {
    let options = TranslateOptions {
        search,
        ..TranslateOptions::default()
    };
    let (mut ms, mut tokens, mut steps) = (Vec::new(), 0, 0);
    let (mut enc, mut dec, mut book) = (0.0, 0.0, 0.0);
    let mut gpu = GpuCounts::default();
    for line in lines {
        let t = translate(engine, line, &options, &|| false).await?;
        ms.push(t.timings.total_ms);
        tokens += t.target_tokens();
        steps += t.timings.steps;
        enc += t.timings.encoder_ms;
        dec += t.timings.decoder_ms;
        book += t.timings.bookkeeping_ms;
        gpu.dispatches += t.timings.gpu.dispatches;
        gpu.submits += t.timings.gpu.submits;
        gpu.bytes_read += t.timings.gpu.bytes_read;
    }
    let per_step = |x: u64| Some(x as f64 / steps.max(1) as f64);
    Ok(Row {
        steps,
        dispatches_per_step: per_step(gpu.dispatches),
        submits_per_step: per_step(gpu.submits),
        bytes_read_per_step: per_step(gpu.bytes_read),
        encoder_ms: Some(enc),
        decoder_ms: Some(dec),
        bookkeeping_ms: Some(book),
        ..row(name, ms, tokens)
    })
}

/// One engine and setting on a document: the two ways of translating it.
struct DocumentRun {
    /// One request per line, one sentence at a time (`batch` 1).
    alone: Row,
    /// One request for all lines; its p50/p95 are the times at which lines came out.
    document: Row,
    /// Milliseconds until the document's first line came out.
    first_ms: f64,
    /// Whether every line came out the same both ways.
    same: bool,
}

/// `lines` translated one request per line, one sentence at a time, then as one request with
/// `batch` sentences per decoder step.
async fn document_rows<E: TranslationEngine>(
    engine: &E,
    lines: &[String],
    name: &str,
    search: SearchOptions,
    batch: usize,
) -> CliResult<DocumentRun> {
    let alone = TranslateOptions {
        search: search.clone(),
        batch: 1,
        ..TranslateOptions::default()
    };
    let (mut ms, mut tokens, mut texts) = (Vec::new(), 0, Vec::new());
    for line in lines {
        let t = translate(engine, line, &alone, &|| false).await?;
        ms.push(t.timings.total_ms);
        tokens += t.target_tokens();
        texts.push(t.text);
    }
    let one_by_one = row(&format!("{name}, one at a time"), ms, tokens);
    let together = TranslateOptions {
        search,
        batch,
        ..TranslateOptions::default()
    };
    let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
    let (mut done_at, mut doc_tokens, mut same) = (Vec::new(), 0, true);
    let start = now_ms();
    translate_texts(engine, &refs, &together, &|| false, None, &mut |i, t| {
        done_at.push(now_ms() - start);
        doc_tokens += t.target_tokens();
        same &= texts.get(i) == Some(&t.text);
    })
    .await?;
    let seconds = (now_ms() - start) / 1000.0;
    let (first_ms, lines_out) = (done_at.first().copied().unwrap_or(0.0), done_at.len());
    let name = format!("{name}, document (batch {batch})");
    let document = timed_row(&name, done_at, seconds, doc_tokens);
    Ok(DocumentRun {
        alone: one_by_one,
        first_ms,
        document,
        same: same && lines_out == lines.len(),
    })
}

/// Greedy decoding of every line with the burn model on `device`, through the same pipeline
/// as the engine; the first `warm_up` lines are run once untimed.
async fn burn_row(
    name: &str,
    bundle: &Bundle,
    device: &burn::tensor::Device,
    lines: &[String],
    warm_up: usize,
) -> CliResult<Row> {
    let model = Transformer::from_bundle(bundle, device)?;
    let engine = BurnEngine::new(model, bundle, device);
    let options = TranslateOptions {
        search: SearchOptions::greedy(),
        ..TranslateOptions::default()
    };
    for line in lines.iter().take(warm_up) {
        translate(&engine, line, &options, &|| false).await?;
    }
    let (mut ms, mut tokens) = (Vec::new(), 0);
    for line in lines {
        let start = now_ms();
        let t = translate(&engine, line, &options, &|| false).await?;
        ms.push(now_ms() - start);
        tokens += t.target_tokens();
    }
    Ok(row(name, ms, tokens))
}

/// Runs `scripts/ctranslate2_bench.py` and reads its rows: on the CPU once per thread count of
/// our CPU engine's rows (1 and 2, `intra_threads`), so equal threads compare; on CUDA once.
fn ctranslate2_rows(args: &Args) -> CliResult<Vec<Row>> {
    let python = PathBuf::from("target/ctranslate2-venv/bin/python3");
    if !python.exists() {
        return Err(format!(
            "{} is missing: run `python3 scripts/ctranslate2_bench.py --setup` first",
            python.display()
        )
        .into());
    }
    let device = args.ctranslate2_device.to_uppercase();
    let thread_counts: &[usize] = if args.ctranslate2_device == "cpu" {
        &[1, 2]
    } else {
        &[2]
    };
    let mut rows = Vec::new();
    for &threads in thread_counts {
        let out = std::env::temp_dir().join(format!("webnmt-ct2-{}.json", std::process::id()));
        let status = std::process::Command::new(&python)
            .arg("scripts/ctranslate2_bench.py")
            .arg("--model")
            .arg(&args.model)
            .arg("--src")
            .arg(&args.src)
            .arg("--limit")
            .arg(args.limit.to_string())
            .arg("--device")
            .arg(&args.ctranslate2_device)
            .arg("--threads")
            .arg(threads.to_string())
            .arg("--json")
            .arg(&out)
            .status()
            .map_err(|e| format!("cannot run {}: {e}", python.display()))?;
        if !status.success() {
            return Err(format!("scripts/ctranslate2_bench.py failed ({status})").into());
        }
        let script_output = |what: String| {
            format!(
                "{} written by scripts/ctranslate2_bench.py: {what}; run the script by hand \
                 (`{} scripts/ctranslate2_bench.py --help`) to see what went wrong",
                out.display(),
                python.display()
            )
        };
        let text = std::fs::read_to_string(&out)
            .map_err(|e| script_output(format!("cannot read it ({e})")))?;
        let json: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| script_output(format!("not JSON ({e})")))?;
        let runs = json["runs"]
            .as_object()
            .filter(|runs| !runs.is_empty())
            .ok_or_else(|| script_output("no \"runs\" in it".to_string()))?;
        let on = if args.ctranslate2_device == "cpu" {
            format!(
                "CPU, {threads} thread{}",
                if threads == 1 { "" } else { "s" }
            )
        } else {
            device.clone()
        };
        for (name, r) in runs {
            let field = |k: &str| {
                r[k].as_f64()
                    .ok_or_else(|| script_output(format!("run {name} has no number \"{k}\"")))
            };
            let (beam, sentences, seconds) =
                (field("beam")?, field("sentences")?, field("total_s")?);
            let (sentences_per_sec, target_tokens_per_sec) =
                (field("sentences_per_s")?, field("target_tokens_per_s")?);
            let (p50_ms, p95_ms) = (field("p50_ms")?, field("p95_ms")?);
            let beam = beam as usize;
            rows.push(Row {
                name: if beam == 1 {
                    format!("CTranslate2 int8 {on}, greedy")
                } else {
                    format!("CTranslate2 int8 {on}, beam {beam}")
                },
                sentences: sentences as usize,
                seconds,
                sentences_per_sec,
                target_tokens_per_sec,
                p50_ms,
                p95_ms,
                peak_rss_mib: r["peak_rss_mib"].as_f64(),
                ..Default::default()
            });
        }
    }
    Ok(rows)
}

/// What `scripts/page_bench.mjs` prints: the browser, its WebGPU adapter and one row per setting.
#[derive(Debug, Deserialize)]
struct PageRun {
    /// Chromium's version.
    browser: String,
    /// The page's `GPUAdapterInfo` (vendor, architecture, device, description).
    adapter: serde_json::Value,
    lines: usize,
    rows: Vec<Row>,
}

/// Runs `node scripts/page_bench.mjs` with `script_args` and returns its stdout; its progress
/// and errors go straight to our stderr.
fn page_bench(script_args: &[&std::ffi::OsStr]) -> CliResult<Vec<u8>> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/page_bench.mjs");
    let output = std::process::Command::new("node")
        .arg(&script)
        .args(script_args)
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                "node is not installed (--browser runs scripts/page_bench.mjs with it): install \
                 Node.js 20 or later (Debian: apt-get install nodejs npm), then run \
                 `scripts/setup.sh test` for Chromium and playwright-core"
                    .to_string()
            } else {
                format!("cannot run node: {e}")
            }
        })?;
    if !output.status.success() {
        return Err(format!(
            "{} failed ({}); its message is above",
            script.display(),
            output.status
        )
        .into());
    }
    Ok(output.stdout)
}

/// Our page in headless Chromium (SwiftShader WebGPU) with `settings`, through
/// `scripts/page_bench.mjs`.
/// `wasm`: `auto` (what the worker picks), `simd128` or `relaxed` (that build, forced).
fn page_rows(
    args: &Args,
    settings: &[(&str, SearchOptions)],
    engine: &str,
    wasm: &str,
) -> CliResult<PageRun> {
    let rows: Vec<_> = settings
        .iter()
        .map(|(label, search)| serde_json::json!({ "label": label, "search": search }))
        .collect();
    let (limit, rows) = (
        args.limit.to_string(),
        serde_json::Value::from(rows).to_string(),
    );
    let stdout = page_bench(&[
        "--model".as_ref(),
        args.model.as_os_str(),
        "--src".as_ref(),
        args.src.as_os_str(),
        "--limit".as_ref(),
        limit.as_ref(),
        "--rows".as_ref(),
        rows.as_ref(),
        "--engine".as_ref(),
        engine.as_ref(),
        "--wasm".as_ref(),
        wasm.as_ref(),
    ])?;
    let run = serde_json::from_slice(&stdout)
        .map_err(|e| format!("cannot read the rows of scripts/page_bench.mjs: {e}"))?;
    Ok(run)
}

/// Chromium's SwiftShader Vulkan driver: `SWIFTSHADER_ICD`, else Debian's chromium's.
fn swiftshader_icd() -> PathBuf {
    std::env::var_os("SWIFTSHADER_ICD").map_or_else(
        || PathBuf::from("/usr/lib/chromium/vk_swiftshader_icd.json"),
        PathBuf::from,
    )
}

/// Our engine's greedy and beam-4 rows on SwiftShader's Vulkan driver (the page's), from a
/// child process of this binary with the Vulkan loader pointed at that driver. None when the
/// driver is not there (said on stderr).
fn swiftshader_rows(args: &Args) -> CliResult<Vec<Row>> {
    let icd = swiftshader_icd();
    if !icd.is_file() {
        eprintln!(
            "note: {} is missing (set SWIFTSHADER_ICD to Chromium's vk_swiftshader_icd.json): \
             no native rows on the page's driver",
            icd.display()
        );
        return Ok(Vec::new());
    }
    eprintln!("our engine natively on SwiftShader ({}) …", icd.display());
    let exe = std::env::current_exe().map_err(|e| format!("cannot find bench itself: {e}"))?;
    let output = std::process::Command::new(exe)
        .args(["--model".as_ref(), args.model.as_os_str()])
        .args(["--src".as_ref(), args.src.as_os_str()])
        .args(["--limit", &args.limit.to_string(), "--engine-rows-json"])
        .env("VK_DRIVER_FILES", &icd)
        .env("VK_ICD_FILENAMES", &icd)
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run bench on SwiftShader: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "bench on SwiftShader failed ({}); its message is above",
            output.status
        )
        .into());
    }
    #[derive(Deserialize)]
    struct Child {
        adapter: String,
        rows: Vec<Row>,
    }
    let child: Child = serde_json::from_slice(&output.stdout)
        .map_err(|e| format!("cannot read the rows of bench on SwiftShader: {e}"))?;
    eprintln!("(native on SwiftShader: {})", child.adapter);
    Ok(child
        .rows
        .into_iter()
        .map(|r| Row {
            name: r.name.replacen("ours,", "ours native on SwiftShader,", 1),
            ..r
        })
        .collect())
}

fn print_table(rows: &[Row]) {
    println!(
        "{:<34} {:>8} {:>9} {:>8} {:>8} {:>8} {:>7} {:>7} {:>7} {:>9} {:>9} {:>8}",
        "engine",
        "sent/s",
        "tok/s",
        "p50 ms",
        "p95 ms",
        "RSS MiB",
        "disp/st",
        "subm/st",
        "B/step",
        "enc ms",
        "dec ms",
        "cpu ms"
    );
    let opt = |v: Option<f64>, prec: usize| v.map_or("-".into(), |x| format!("{x:.prec$}"));
    for r in rows {
        println!(
            "{:<34} {:>8.2} {:>9.1} {:>8.1} {:>8.1} {:>8} {:>7} {:>7} {:>7} {:>9} {:>9} {:>8}",
            r.name,
            r.sentences_per_sec,
            r.target_tokens_per_sec,
            r.p50_ms,
            r.p95_ms,
            opt(r.peak_rss_mib, 0),
            opt(r.dispatches_per_step, 1),
            opt(r.submits_per_step, 2),
            opt(r.bytes_read_per_step, 0),
            opt(r.encoder_ms, 0),
            opt(r.decoder_ms, 0),
            opt(r.bookkeeping_ms, 0),
        );
    }
}

async fn run(args: Args) -> CliResult {
    let text = std::fs::read_to_string(&args.src)
        .map_err(|e| format!("cannot read {}: {e}", args.src.display()))?;
    let lines: Vec<String> = text.lines().take(args.limit).map(str::to_string).collect();
    let bundle = load_bundle(&args.model)?;
    if args.browser {
        // Node, Chromium, playwright-core and dist/ before the native rows, not after them.
        page_bench(&[
            "--check".as_ref(),
            "--model".as_ref(),
            args.model.as_os_str(),
        ])?;
    }
    let gpu = Gpu::new().await?;
    let adapter = gpu.adapter().name.clone();
    eprintln!("{} lines; our engine on {adapter}", lines.len());
    // The burn rows use the same bundle: read and verified once.
    let engine = Engine::new(gpu, bundle.clone()).await?;
    // Warm-up: pipelines are compiled at load; one sentence fills caches of the driver.
    if let Some(first) = lines.first() {
        translate(&engine, first, &TranslateOptions::default(), &|| false).await?;
    }
    let mut rows = Vec::new();
    let settings = settings();
    if args.engine_rows_json {
        for (label, search) in settings[..2].iter().cloned() {
            rows.push(engine_row(&engine, &lines, &format!("ours, {label}"), search).await?);
        }
        println!(
            "{}",
            serde_json::json!({ "adapter": adapter, "rows": rows })
        );
        return Ok(());
    }
    for (label, search) in settings.clone() {
        let name = format!("ours, {label}");
        eprintln!("{name} …");
        rows.push(engine_row(&engine, &lines, &name, search).await?);
    }
    if !args.skip_cpu {
        for threads in [1, 2] {
            let options = CpuOptions {
                threads,
                ..CpuOptions::default()
            };
            let cpu = CpuEngine::with_options(bundle.clone(), options)?;
            let plural = if threads == 1 { "" } else { "s" };
            for (label, search) in settings[..2].iter().cloned() {
                let name = format!("ours CPU int8, {threads} thread{plural}, {label}");
                eprintln!("{name} ({}) …", webnmt::cpu::matmul::simd_name());
                rows.push(Row {
                    dispatches_per_step: None,
                    submits_per_step: None,
                    bytes_read_per_step: None,
                    ..engine_row(&cpu, &lines, &name, search).await?
                });
            }
        }
    }
    if !args.skip_burn_flex {
        eprintln!("burn flex (CPU), greedy …");
        let device = burn::tensor::Device::flex();
        rows.push(burn_row("burn flex CPU, greedy", &bundle, &device, &lines, 0).await?);
    }
    if args.burn_wgpu {
        eprintln!("burn-wgpu, greedy (one untimed warm-up sentence first) …");
        let device = burn::tensor::Device::wgpu(burn::tensor::DeviceKind::DefaultDevice);
        let name = format!("burn-wgpu ({adapter}), greedy");
        rows.push(burn_row(&name, &bundle, &device, &lines, 1).await?);
    }
    if args.ctranslate2 {
        eprintln!("CTranslate2 …");
        rows.extend(ctranslate2_rows(&args)?);
    }
    let page_run = |engine: &str, wasm: &str| -> CliResult<PageRun> {
        let page = page_rows(&args, &settings[..2], engine, wasm)?;
        if page.lines != lines.len() {
            return Err(format!(
                "scripts/page_bench.mjs read {} lines of {}, bench {}",
                page.lines,
                args.src.display(),
                lines.len()
            )
            .into());
        }
        Ok(page)
    };
    let page = if args.browser {
        eprintln!("our page in headless Chromium (SwiftShader WebGPU) …");
        Some(page_run("gpu", "auto")?)
    } else {
        None
    };
    // The page without WebGPU, on its int8 CPU engine in wasm, beside the native CPU rows:
    // both wasm builds, forced (the worker keeps the faster of the two where the browser has
    // relaxed SIMD, the simd128 one elsewhere).
    let mut page_cpu = Vec::new();
    if args.browser && !args.skip_cpu {
        for wasm in ["relaxed", "simd128"] {
            eprintln!("our page in headless Chromium without WebGPU (CPU engine, wasm {wasm}) …");
            page_cpu.push(page_run("cpu", wasm)?);
        }
    }
    let same_driver = if args.browser {
        swiftshader_rows(&args)?
    } else {
        Vec::new()
    };
    let mut documents = Vec::new();
    if args.document_lines > 0 {
        let doc_lines: Vec<String> = text
            .lines()
            .take(args.document_lines)
            .map(str::to_string)
            .collect();
        let cpu = CpuEngine::with_options(bundle.clone(), CpuOptions::default())?;
        for (label, search) in settings[..2].iter().cloned() {
            let name = format!("ours, {label}, {} lines", doc_lines.len());
            eprintln!("{name}: one at a time, then as one document …");
            documents
                .push(document_rows(&engine, &doc_lines, &name, search.clone(), args.batch).await?);
            let name = format!(
                "ours CPU int8, 1 thread, {label}, {} lines",
                doc_lines.len()
            );
            eprintln!("{name}: one at a time, then as one document …");
            documents.push(document_rows(&cpu, &doc_lines, &name, search, args.batch).await?);
        }
    }
    let others = rows.len();
    rows.extend(page.iter().flat_map(|p| p.rows.iter().cloned()));
    let pages = rows.len();
    let same_driver_rows = same_driver.len();
    rows.extend(same_driver);
    let page_cpu_rows: Vec<Row> = page_cpu.iter().flat_map(|p| p.rows.clone()).collect();
    rows.extend(page_cpu_rows.iter().cloned());
    rows.extend(
        documents
            .iter()
            .flat_map(|d| [d.alone.clone(), d.document.clone()]),
    );
    print_table(&rows);
    let ours = rows[0].sentences_per_sec;
    for r in rows[3..others]
        .iter()
        .filter(|r| !r.name.starts_with("ours CPU"))
    {
        println!(
            "ours greedy / {}: {:.2}× (sentences per second)",
            r.name,
            ours / r.sentences_per_sec.max(1e-9)
        );
    }
    // Our CPU engine beside CTranslate2 int8 at the same threads and search (issue #17's ratio).
    for ct2 in &rows[3..others] {
        let Some(rest) = ct2.name.strip_prefix("CTranslate2 int8 CPU, ") else {
            continue;
        };
        let name = format!("ours CPU int8, {rest}");
        if let Some(cpu) = rows[3..others].iter().find(|r| r.name == name) {
            println!(
                "{name} / {}: {:.2}× (target tokens per second)",
                ct2.name,
                cpu.target_tokens_per_sec / ct2.target_tokens_per_sec.max(1e-9)
            );
        }
    }
    // The page beside the same setting of our engine natively (rows[i] is settings[i]) and,
    // where it ran, natively on the page's driver (rows[pages + i]).
    for (i, r) in rows[others..pages].iter().enumerate() {
        // (Without SwiftShader there are no such rows, and rows[pages + i] is another table's.)
        let on_driver = (i < same_driver_rows).then(|| &rows[pages + i]);
        for native in [Some(&rows[i]), on_driver].into_iter().flatten() {
            println!(
                "{} / {}: {:.2}× (sentences per second)",
                r.name,
                native.name,
                r.sentences_per_sec / native.sentences_per_sec.max(1e-9)
            );
        }
    }
    // The page on the CPU beside our native CPU engine at 1 thread and the page on WebGPU.
    for (i, r) in page_cpu_rows.iter().enumerate() {
        let label = settings[i % 2].0;
        let native = rows
            .iter()
            .find(|n| n.name == format!("ours CPU int8, 1 thread, {label}"));
        let webgpu = rows[others..pages].get(i % 2);
        for other in [native, webgpu].into_iter().flatten() {
            println!(
                "{} / {}: {:.2}× (sentences per second)",
                r.name,
                other.name,
                r.sentences_per_sec / other.sentences_per_sec.max(1e-9)
            );
        }
    }
    for d in &documents {
        println!(
            "{} / one at a time: {:.2}× (sentences per second); first line out after {:.0} ms; \
             output {}",
            d.document.name,
            d.document.sentences_per_sec / d.alone.sentences_per_sec.max(1e-9),
            d.first_ms,
            if d.same { "identical" } else { "DIFFERENT" }
        );
    }
    if let Some(path) = &args.json {
        let json = serde_json::json!({
            "model": args.model,
            "src": args.src,
            "lines": lines.len(),
            "adapter": adapter,
            "browser": page.as_ref().map(|p| serde_json::json!({
                "chromium": p.browser,
                "adapter": p.adapter,
            })),
            "rows": rows,
            "documents": documents.iter().map(|d| serde_json::json!({
                "name": d.document.name,
                "speedup": d.document.sentences_per_sec / d.alone.sentences_per_sec.max(1e-9),
                "first_line_ms": d.first_ms,
                "identical": d.same,
            })).collect::<Vec<_>>(),
        });
        std::fs::write(path, serde_json::to_string_pretty(&json)?)
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    Ok(())
}
