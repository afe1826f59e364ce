//! `translate`: translates stdin line by line with the GPU engine (wgpu: Vulkan, Metal, DX12)
//! or, with `--engine cpu`, when no GPU adapter is found, or when the only one is a CPU
//! emulation such as lavapipe (unless `--engine gpu` asks for it), with the int8 CPU engine.
//! One line in, one line out, always: an empty line gives an empty line. Lines are read ahead
//! and translated together (`--batch` sentences per decoder step, repeated sentences once);
//! each line is written and flushed as soon as it and every line before it are translated, so
//! interactive use answers line by line. Decoding defaults are the reference implementation's
//! (beam 8 in 4 diverse groups, diversity 0.5, length penalty 0.6, repetition penalty 1.5 over
//! 30 tokens) plus our repeat block of 4 tokens.

use clap::Parser;
use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use webnmt::cli::{CliResult, EngineArgs, EngineKind, SearchArgs, load_bundle, run_main};
use webnmt::cpu::CpuEngine;
use webnmt::gpu::Gpu;
use webnmt::infer::Engine;
use webnmt::translate::{
    TranslateOptions, Translation, TranslationCache, TranslationEngine, translate_texts,
};

/// Translate text from stdin with a webnmt model bundle on the GPU (or the CPU).
#[derive(Parser, Debug)]
#[command(name = "translate", version, about)]
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
    #[arg(long, requires = "json")]
    attention: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let gpu_only = args.engine.engine == Some(EngineKind::Gpu);
    args.engine
        .refuse_unused_threads::<Args>(!gpu_only, "use --engine cpu");
    run_main(|| pollster::block_on(run(args)))
}

async fn run(args: Args) -> CliResult {
    let options = args.search.translate_options(args.attention);
    let bundle = load_bundle(&args.model)?;
    let chosen = args.engine.engine;
    if chosen.unwrap_or_default() == EngineKind::Gpu {
        match Gpu::new().await {
            // By default a CPU-emulated adapter is not worth it: the CPU engine is far faster.
            Ok(gpu) if chosen.is_none() && gpu.adapter().is_cpu_emulation() => eprintln!(
                "note: the only GPU adapter, {}, is a CPU emulation; translating on the CPU \
                 engine instead (--engine gpu to use the adapter)",
                gpu.adapter().name
            ),
            Ok(gpu) => {
                let adapter = gpu.adapter().clone();
                if args.engine.threads.is_some() {
                    eprintln!(
                        "note: translating on {}; --threads applies to the CPU engine only \
                         (--engine cpu to use it)",
                        adapter.name
                    );
                }
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

/// Lines translated in one call at most: enough to fill several decoder batches.
const LINES_PER_CALL: usize = 256;

/// Translates stdin to stdout line by line with `engine`, then prints the summary on stderr.
/// A reader thread reads ahead; each call translates the lines read so far (at least one, at
/// most [`LINES_PER_CALL`]), so a file is translated in big batches and a person typing gets
/// each line back at once.
async fn translate_stdin<E: TranslationEngine>(
    engine: &E,
    options: &TranslateOptions,
    json: bool,
) -> CliResult {
    let (send, lines) = std::sync::mpsc::sync_channel::<Result<String, String>>(4 * LINES_PER_CALL);
    std::thread::spawn(move || {
        let stdin = std::io::stdin().lock();
        for (n, line) in stdin.split(b'\n').enumerate() {
            let line = line
                .map_err(|e| format!("reading stdin: {e}"))
                .and_then(|line| {
                    String::from_utf8(line).map_err(|e| {
                        format!(
                            "stdin line {} is not valid UTF-8 (byte {}); convert the input to UTF-8",
                            n + 1,
                            e.utf8_error().valid_up_to()
                        )
                    })
                })
                .map(|line| line.strip_suffix('\r').unwrap_or(&line).to_string());
            let failed = line.is_err();
            if send.send(line).is_err() || failed {
                return;
            }
        }
    });
    let mut stdout = std::io::BufWriter::new(std::io::stdout().lock());
    let mut total = Summary::default();
    // Heatmaps are large; a run that asks for them keeps no cache.
    let mut cache = TranslationCache::default();
    let mut cache = (!options.attention).then_some(&mut cache);
    let mut first_line = 1;
    // A bad input line ends the run after every line before it is written.
    let mut bad_line = None;
    // Blocks for the first line of each call, then takes what is already there.
    while let Ok(line) = lines.recv() {
        let mut chunk = Vec::new();
        let mut next = Some(line);
        while let Some(line) = next.take() {
            match line {
                Ok(line) => chunk.push(line),
                Err(e) => {
                    bad_line = Some(e);
                    break;
                }
            }
            if chunk.len() < LINES_PER_CALL {
                next = lines.try_recv().ok();
            }
        }
        if chunk.is_empty() {
            break;
        }
        let texts: Vec<&str> = chunk.iter().map(String::as_str).collect();
        let mut written = Ok(());
        translate_texts(
            engine,
            &texts,
            options,
            &|| false,
            cache.as_deref_mut(),
            &mut |_, translation| {
                total.add(&translation);
                let out = if json {
                    serde_json::to_string(&translation).map_err(|e| e.to_string())
                } else {
                    Ok(translation.text.replace(['\n', '\r'], " "))
                };
                if written.is_ok() {
                    written = out.and_then(|out| {
                        writeln!(stdout, "{out}")
                            .and_then(|()| stdout.flush())
                            .map_err(|e| format!("writing stdout: {e}"))
                    });
                }
            },
        )
        .await
        .map_err(|e| format!("lines {first_line}..={}: {e}", first_line + chunk.len() - 1))?;
        written?;
        first_line += chunk.len();
        if bad_line.is_some() {
            break;
        }
    }
    if let Some(e) = bad_line {
        return Err(e.into());
    }
    total.cached = cache.map_or(0, |c| c.hits);
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
    /// Sentences (pieces) answered from the cache: repeated ones.
    cached: usize,
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
        // Lines that arrive together are translated as one batch, so the step count depends on
        // how stdin was read; the GPU counts are only there for the GPU engine.
        let gpu = if self.dispatches == 0 {
            String::new()
        } else {
            format!(
                ": {:.1} dispatches, {:.2} submits, {:.0} bytes read back per step (encoder passes \
                 included)",
                self.dispatches as f64 / steps,
                self.submits as f64 / steps,
                self.bytes_read as f64 / steps,
            )
        };
        eprintln!(
            "{} sentences in {:.0} ms ({:.1} ms per sentence); {} decoder steps{gpu}",
            self.sentences,
            self.ms,
            self.ms / self.sentences as f64,
            self.steps,
        );
        if self.cached > 0 {
            eprintln!(
                "{} repeated sentences (or chunks of long ones) not searched again",
                self.cached
            );
        }
    }
}
