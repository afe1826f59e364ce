//! `translate`: translates stdin line by line with the GPU engine (wgpu: Vulkan, Metal, DX12;
//! lavapipe on a machine without a GPU) or, with `--engine cpu` or when no GPU adapter is found,
//! with the int8 CPU engine. One line in, one line out, always: an empty line gives
//! an empty line. Decoding defaults are the reference implementation's (beam 8 in 4 diverse
//! groups, diversity 0.5, length penalty 0.6, repetition penalty 1.5 over 30 tokens).

use clap::Parser;
use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use webnmt::cli::{CliResult, EngineArgs, EngineKind, SearchArgs, run_main};
use webnmt::cpu::CpuEngine;
use webnmt::gpu::Gpu;
use webnmt::infer::Engine;
use webnmt::translate::{TranslateOptions, Translation, TranslationEngine, translate};
use webnmt::weights::Bundle;

/// Translate text from stdin with a webnmt model bundle on the GPU (or the CPU).
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// The model bundle directory (manifest.json, model.safetensors, tokenizers).
    #[arg(long)]
    model: PathBuf,
    #[command(flatten)]
    engine: EngineArgs,
    #[command(flatten)]
    search: SearchArgs,
    /// One JSON object per line: n-best with scores, sentences, timings.
    #[arg(long)]
    json: bool,
    /// With --json: the cross-attention heatmap of each sentence's best translation.
    #[arg(long)]
    attention: bool,
}

fn main() -> ExitCode {
    run_main(|| pollster::block_on(run(Args::parse())))
}

async fn run(args: Args) -> CliResult {
    let options = TranslateOptions {
        search: args.search.options(),
        attention: args.attention,
    };
    let bundle = Bundle::from_dir(&args.model)?;
    if args.engine.engine == EngineKind::Gpu {
        match Gpu::new().await {
            Ok(gpu) => {
                let adapter = gpu.adapter().clone();
                let engine = Engine::new(gpu, bundle).await?;
                engine.check_options(&options.search)?;
                eprintln!(
                    "model loaded in {:.0} ms on {} ({}, {})",
                    engine.load_ms, adapter.name, adapter.backend, adapter.device_type
                );
                return translate_stdin(&engine, &options, args.json).await;
            }
            Err(e) => eprintln!("note: no GPU ({e}); translating on the CPU instead"),
        }
    }
    let cpu = args.engine.cpu_options();
    let engine = CpuEngine::with_options(bundle, cpu)?;
    engine.check_options(&options.search)?;
    eprintln!(
        "model loaded in {:.0} ms on the CPU (int8, {:?} products, {} kernels, {} thread(s))",
        engine.load_ms,
        cpu.matmul,
        webnmt::cpu::matmul::simd_name(),
        cpu.threads
    );
    translate_stdin(&engine, &options, args.json).await
}

/// Translates stdin to stdout line by line with `engine`, then prints the summary on stderr.
async fn translate_stdin<E: TranslationEngine>(
    engine: &E,
    options: &TranslateOptions,
    json: bool,
) -> CliResult {
    let stdin = std::io::stdin().lock();
    let mut stdout = std::io::BufWriter::new(std::io::stdout().lock());
    let mut total = Summary::default();
    for (n, line) in stdin.split(b'\n').enumerate() {
        let line = line.map_err(|e| format!("reading stdin: {e}"))?;
        let line = String::from_utf8(line).map_err(|e| {
            format!(
                "stdin line {} is not valid UTF-8 (byte {}); convert the input to UTF-8",
                n + 1,
                e.utf8_error().valid_up_to()
            )
        })?;
        let line = line.strip_suffix('\r').unwrap_or(&line);
        let translation = translate(engine, line, options, &|| false)
            .await
            .map_err(|e| format!("line {}: {e}", n + 1))?;
        total.add(&translation);
        let out = if json {
            serde_json::to_string(&translation)?
        } else {
            translation.text.replace(['\n', '\r'], " ")
        };
        writeln!(stdout, "{out}")
            .and_then(|()| stdout.flush())
            .map_err(|e| format!("writing stdout: {e}"))?;
    }
    total.report();
    Ok(())
}

/// Totals for the summary line on stderr.
#[derive(Default)]
struct Summary {
    sentences: usize,
    ms: f64,
    steps: usize,
    dispatches: u64,
    submits: u64,
    bytes_read: u64,
}

impl Summary {
    fn add(&mut self, t: &Translation) {
        self.sentences += t.sentences.len();
        self.ms += t.timings.total_ms;
        self.steps += t.timings.steps;
        self.dispatches += t.timings.gpu.dispatches;
        self.submits += t.timings.gpu.submits;
        self.bytes_read += t.timings.gpu.bytes_read;
    }

    fn report(&self) {
        if self.sentences == 0 {
            return;
        }
        let steps = self.steps.max(1) as f64;
        eprintln!(
            "{} sentences in {:.0} ms ({:.1} ms per sentence); {} decoder steps: {:.1} dispatches, \
             {:.2} submits, {:.0} bytes read back per step (encoder passes included)",
            self.sentences,
            self.ms,
            self.ms / self.sentences as f64,
            self.steps,
            self.dispatches as f64 / steps,
            self.submits as f64 / steps,
            self.bytes_read as f64 / steps,
        );
    }
}
