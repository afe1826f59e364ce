//! `evaluate`: BLEU and chrF exactly as sacreBLEU 2.6.0 computes them by default (BLEU: 13a
//! tokenizer, exponential smoothing; chrF: n = 6, β = 2), corpus-level, plus the reference
//! implementation's error analysis (repetitions, number mismatches, unknown tokens, length
//! ratio).
//!
//! Either translates a test set first (`--model` with the GPU engine, or with the int8 CPU
//! engine with `--engine cpu`; `--cpu`: the bundle's weights in the burn model on the CPU;
//! `--checkpoint` with the fp32 burn weights of a run, for the int8-vs-fp32 comparison) or
//! scores existing translations (`--hyp`).

use clap::Parser;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use webnmt::cli::{CliResult, EngineArgs, EngineKind, SearchArgs, load_bundle, run_main};
use webnmt::cpu::CpuEngine;
use webnmt::eval::{self, EvalReport};
use webnmt::gpu::Gpu;
use webnmt::infer::Engine;
use webnmt::translate::{TranslateOptions, TranslationEngine, now_ms, translate_texts};
use webnmt::weights::Bundle;

/// Score translations with sacreBLEU-compatible BLEU / chrF and an error analysis.
#[derive(Parser, Debug)]
#[command(name = "evaluate", version, about)]
struct Args {
    /// Source sentences, one per line (translated with --model, or used by the error analysis).
    #[arg(long)]
    src: Option<PathBuf>,
    /// Reference translations, one per line; repeat for several reference streams.
    #[arg(long = "ref", required = true)]
    refs: Vec<PathBuf>,
    /// Existing translations to score (instead of translating --src).
    #[arg(long, conflicts_with = "model")]
    hyp: Option<PathBuf>,
    /// A model bundle: translate --src with the engine of --engine (GPU by default).
    #[arg(long)]
    model: Option<PathBuf>,
    /// With --model: translate with the fp32 burn weights of this checkpoint (`best/model.bpk`
    /// of the run that exported the bundle) on the CPU instead of the int8 GPU engine.
    #[arg(long, requires = "model")]
    checkpoint: Option<PathBuf>,
    /// With --model: translate with the bundle's int8 weights dequantized into the burn model on
    /// the CPU (flex): the GPU engine's numbers up to float rounding (the engine tests check
    /// that), many times faster than the engine on a CPU-emulated GPU such as lavapipe. Not the
    /// int8 CPU engine: that is `--engine cpu`.
    #[arg(long, requires = "model", conflicts_with = "checkpoint")]
    cpu: bool,
    #[command(flatten)]
    engine: EngineArgs,
    #[command(flatten)]
    search: SearchArgs,
    /// Only the first N lines.
    #[arg(long)]
    limit: Option<usize>,
    /// Write the translations here, one per line.
    #[arg(long)]
    output: Option<PathBuf>,
    /// Write the report (scores, signatures, analysis, options, timing) as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let cpu_engine = args.engine.engine == Some(EngineKind::Cpu)
        && args.model.is_some()
        && args.checkpoint.is_none()
        && !args.cpu;
    args.engine.refuse_unused_threads::<Args>(
        cpu_engine,
        "use --model with --engine cpu (without --cpu or --checkpoint)",
    );
    run_main(|| pollster::block_on(run(args)))
}

fn read_lines(path: &Path, limit: Option<usize>) -> CliResult<Vec<String>> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let text = String::from_utf8(bytes).map_err(|e| {
        let line = e.as_bytes()[..e.utf8_error().valid_up_to()]
            .iter()
            .filter(|&&b| b == b'\n')
            .count()
            + 1;
        format!("{} line {line} is not valid UTF-8", path.display())
    })?;
    let lines = eval::lines_of(&text);
    let n = limit.unwrap_or(lines.len()).min(lines.len());
    Ok(lines[..n].iter().map(|l| l.to_string()).collect())
}

async fn run(args: Args) -> CliResult {
    let options = args.search.translate_options(false);
    let sources = match &args.src {
        Some(p) => Some(read_lines(p, args.limit)?),
        None => None,
    };
    let refs: Vec<Vec<String>> = args
        .refs
        .iter()
        .map(|p| read_lines(p, args.limit))
        .collect::<Result<_, _>>()?;
    let start = now_ms();
    let (hyps, engine_name) = match (&args.hyp, &args.model, &sources) {
        (Some(hyp), _, _) => (read_lines(hyp, args.limit)?, "file".to_string()),
        (None, Some(model), Some(sources)) => {
            let bundle = load_bundle(model)?;
            match (&args.checkpoint, args.cpu) {
                (Some(bpk), _) => (
                    burn_cpu(bundle, Some(bpk), sources, &options).await?,
                    "burn fp32 checkpoint (CPU)".into(),
                ),
                (None, true) => (
                    burn_cpu(bundle, None, sources, &options).await?,
                    "burn with the int8 bundle weights (CPU)".into(),
                ),
                (None, false) => match args.engine.engine.unwrap_or_default() {
                    EngineKind::Gpu => gpu_int8(bundle, sources, &options).await?,
                    EngineKind::Cpu => cpu_int8(bundle, &args.engine, sources, &options).await?,
                },
            }
        }
        _ => return Err("give --hyp FILE, or --model DIR with --src FILE".into()),
    };
    let secs = (now_ms() - start) / 1000.0;
    if let Some(out) = &args.output {
        std::fs::write(out, hyps.join("\n") + "\n")
            .map_err(|e| format!("cannot write {}: {e}", out.display()))?;
    }
    let no_sources = vec![String::new(); hyps.len()];
    let report: EvalReport =
        eval::evaluate(sources.as_deref().unwrap_or(&no_sources), &hyps, &refs)?;
    println!("{report}");
    println!(
        "{} lines translated by {engine_name} in {secs:.1} s ({:.1} lines/s)",
        hyps.len(),
        hyps.len() as f64 / secs.max(1e-9)
    );
    if let Some(path) = &args.json {
        let json = serde_json::json!({
            "report": report,
            "lines": hyps.len(),
            "engine": engine_name,
            "seconds": secs,
            "options": options.search,
        });
        let text = serde_json::to_string_pretty(&json)?;
        std::fs::write(path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    Ok(())
}

/// Prints `done / total` on stderr: on a terminal in place, at most once per percent; into a log
/// (stderr redirected) one line per tenth, so the log stays readable.
fn progress(done: usize, total: usize) {
    use std::io::IsTerminal;
    let terminal = std::io::stderr().is_terminal();
    let parts = if terminal { 100 } else { 10 };
    let part = |n: usize| n * parts / total.max(1);
    if done == total || part(done) != part(done - 1) {
        if terminal {
            eprint!("\rtranslated {done}/{total}");
            if done == total {
                eprintln!();
            }
        } else {
            eprintln!("translated {done}/{total}");
        }
    }
}

async fn gpu_int8(
    bundle: Bundle,
    sources: &[String],
    options: &TranslateOptions,
) -> CliResult<(Vec<String>, String)> {
    let gpu = Gpu::new().await?;
    let name = format!("GPU engine int8 on {}", gpu.adapter().name);
    let engine = Engine::new(gpu, bundle).await?;
    Ok((translate_lines(&engine, sources, options).await?, name))
}

/// Translates each line with `engine` through the shared pipeline, with progress on stderr; an
/// error names its line.
async fn translate_lines<E: TranslationEngine>(
    engine: &E,
    sources: &[String],
    options: &TranslateOptions,
) -> CliResult<Vec<String>> {
    let mut hyps = vec![String::new(); sources.len()];
    let texts: Vec<&str> = sources.iter().map(String::as_str).collect();
    translate_texts(engine, &texts, options, &|| false, None, &mut |i, t| {
        hyps[i] = t.text;
        progress(i + 1, sources.len());
    })
    .await
    .map_err(|e| format!("translating {} lines: {e}", sources.len()))?;
    Ok(hyps)
}

async fn cpu_int8(
    bundle: Bundle,
    engine: &EngineArgs,
    sources: &[String],
    options: &TranslateOptions,
) -> CliResult<(Vec<String>, String)> {
    let cpu = engine.cpu_options();
    let name = format!(
        "CPU engine int8 ({:?} products, {}, {} thread(s))",
        cpu.matmul,
        webnmt::cpu::matmul::simd_name(),
        cpu.threads
    );
    let engine = CpuEngine::with_options(bundle, cpu)?;
    Ok((translate_lines(&engine, sources, options).await?, name))
}

#[cfg(feature = "train")]
async fn burn_cpu(
    bundle: Bundle,
    checkpoint: Option<&PathBuf>,
    sources: &[String],
    options: &TranslateOptions,
) -> CliResult<Vec<String>> {
    use burn::module::Module;
    use webnmt::model::{BurnEngine, Transformer};
    let device = burn::tensor::Device::flex();
    let model = match checkpoint {
        Some(path) => Transformer::new(bundle.config(), &device)
            .try_load_file(path)
            .map_err(|e| format!("cannot load {}: {e:?}", path.display()))?,
        None => Transformer::from_bundle(&bundle, &device)?,
    };
    let engine = BurnEngine::new(model, &bundle, &device);
    translate_lines(&engine, sources, options).await
}

#[cfg(not(feature = "train"))]
async fn burn_cpu(
    _: Bundle,
    _: Option<&PathBuf>,
    _: &[String],
    _: &TranslateOptions,
) -> CliResult<Vec<String>> {
    Err("--checkpoint and --cpu need the burn model: build with --features train".into())
}
