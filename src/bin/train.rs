//! `train`: trains a translation model from parallel text and exports it as an int8 bundle.
//!
//! Everything is in the TOML config (see `configs/`); the flags override it. Defaults are the
//! reference implementation's (Adam 0.9/0.98/1e-9, Noam factor 2.0 with 8000 warm-up steps,
//! label smoothing 0.05, clipping 1.0, 2-step accumulation, early stopping 10 / 0.001,
//! 16k Unigram vocabularies, 1–200 characters, length ratio ≤ 3.5).

use clap::{Parser, ValueEnum};
use std::path::PathBuf;
use std::process::ExitCode;
use webnmt::cli::{CliResult, run_main};
use webnmt::train::devices::parse_devices;
use webnmt::train::precision::Precision;
use webnmt::train::run::{RunConfig, export_only, prepare_data, run};

#[derive(Clone, Copy, Debug, ValueEnum)]
enum DeviceChoice {
    /// A GPU when one exists (not a CPU-emulated one), else the CPU.
    Auto,
    /// burn's flex backend on the CPU.
    Cpu,
    /// burn-wgpu on the default GPU (see --precision).
    Gpu,
}

/// Train a Transformer translation model and export it as an int8 bundle.
#[derive(Parser, Debug)]
#[command(name = "train", version, about)]
struct Args {
    /// The run's TOML config (corpus files, tokenizers, model, training settings).
    #[arg(long)]
    config: PathBuf,
    /// Continue the run in the config's run_dir from its newest complete checkpoint.
    #[arg(long)]
    resume: bool,
    /// Only write run_dir/bundle again from the run's best weights; no training.
    #[arg(long)]
    export_only: bool,
    /// Only clean and split the corpus: write run_dir/data.txt and the dev, test and held-out
    /// files (`heldout.<split>.<lang>`, deterministic), for evaluation without training.
    #[arg(long, conflicts_with_all = ["export_only", "resume"])]
    split_only: bool,
    /// Where to train.
    #[arg(long, value_enum, default_value = "auto")]
    device: DeviceChoice,
    /// Data-parallel training on several devices, comma-separated, the first one main
    /// (optimizer, validation, checkpoints): cpu, gpu, gpu:N (N-th discrete GPU), igpu:N,
    /// wgpu-cpu (a CPU-emulated adapter, for tests). Each optimizer step then takes
    /// accum_steps batches per device, run at once, with their gradients summed on the main
    /// device (burn's multi-device scheme). Replaces --device.
    #[arg(long, conflicts_with = "device")]
    devices: Option<String>,
    /// Override run_dir.
    #[arg(long)]
    run_dir: Option<PathBuf>,
    /// Override the model preset (tiny, small, base).
    #[arg(long)]
    preset: Option<String>,
    /// Override the optimizer-step limit (0: none).
    #[arg(long)]
    max_steps: Option<usize>,
    /// Wall-clock budget of this invocation in minutes, then validate, checkpoint and export
    /// (default 0: none). `--resume` continues the run.
    #[arg(long)]
    max_minutes: Option<f64>,
    /// Override the epoch limit (default 50).
    #[arg(long)]
    max_epochs: Option<usize>,
    /// Override the padded tokens per batch (default 4096).
    #[arg(long)]
    max_tokens: Option<usize>,
    /// Override the gradient-accumulation steps (default 2).
    #[arg(long)]
    accum_steps: Option<usize>,
    /// Override the Noam factor (default 2.0).
    #[arg(long)]
    lr_factor: Option<f64>,
    /// Override the Noam warm-up steps (default 8000).
    #[arg(long)]
    warmup_steps: Option<usize>,
    /// Anneal: the learning rate falls linearly to 0 at the run's step limit or at the end of
    /// --max-minutes, whichever comes first (`--anneal` or `--anneal false`; default off).
    #[arg(long, num_args = 0..=1, default_missing_value = "true")]
    anneal: Option<bool>,
    /// Override label smoothing (default 0.05).
    #[arg(long)]
    label_smoothing: Option<f64>,
    /// Override dropout on attention weights, sublayer outputs, the FFN's ReLU and embeddings
    /// (the preset's: small 0.1, base 0.3).
    #[arg(long)]
    dropout: Option<f64>,
    /// Override the global gradient-norm clip (default 1.0; 0 disables).
    #[arg(long)]
    clip_norm: Option<f64>,
    /// Override the source vocabulary size (default 16000); the tokenizer is trained anew.
    #[arg(long)]
    src_vocab: Option<u32>,
    /// Override the target vocabulary size (default 16000).
    #[arg(long)]
    tgt_vocab: Option<u32>,
    /// Subword regularization: sample a segmentation of every pair each epoch with this
    /// smoothing alpha (0: off; 0.1-0.5 usual). Overrides sampling.subword_alpha.
    #[arg(long)]
    subword_alpha: Option<f64>,
    /// Copies per epoch of each origin tag's pairs, `tag=weight,...` (fractions are sampled
    /// anew each epoch, 0 leaves an origin out, at most 100). Replaces sampling.origin_weights.
    #[arg(long)]
    origin_weights: Option<String>,
    /// Override the cleaning rule's longest side in characters (default 200).
    #[arg(long)]
    max_chars: Option<usize>,
    /// Override the cleaning rule's largest length ratio between the sides (default 3.5).
    #[arg(long)]
    max_ratio: Option<f64>,
    /// Export the mean of the newest N checkpoints' weights instead of the best weights
    /// (checkpoint averaging; N at most keep_checkpoints, whose default is 3; the ko-en
    /// configs set 3, default 0: the best weights). Works with --export-only.
    #[arg(long)]
    average_checkpoints: Option<usize>,
    /// Override the interval of training-loss rows in metrics.csv, in steps (default 50).
    #[arg(long)]
    log_every: Option<usize>,
    /// Override the validation / checkpoint interval in steps (default 1000).
    #[arg(long)]
    eval_every: Option<usize>,
    /// Override early-stopping patience in validations (default 10; 0 disables).
    #[arg(long)]
    patience: Option<usize>,
    /// Start from this bundle's weights and tokenizers (fresh optimizer; use a short warm-up).
    #[arg(long)]
    init_from: Option<PathBuf>,
    /// Forward/backward precision: auto (f16 mixed precision on GPU backends that support it,
    /// f32 on the CPU; the reference trained with AMP), f32, f16 (dynamic loss scaling) or bf16.
    /// Weights and optimizer state stay f32.
    #[arg(long)]
    precision: Option<Precision>,
    /// Override the seed (default 1).
    #[arg(long)]
    seed: Option<u64>,
}

fn main() -> ExitCode {
    keep_freed_memory();
    let args = Args::parse();
    run_main(|| train(args))
}

fn train(args: Args) -> CliResult {
    let mut config = RunConfig::load(&args.config)?;
    let cwd = std::env::current_dir()?;
    if let Some(dir) = args.run_dir {
        config.run_dir = cwd.join(dir);
    }
    if let Some(preset) = args.preset {
        config.model.preset = preset;
    }
    let t = &mut config.training;
    let set = |target: &mut usize, value: Option<usize>| *target = value.unwrap_or(*target);
    set(&mut t.max_steps, args.max_steps);
    set(&mut t.max_epochs, args.max_epochs);
    set(&mut t.accum_steps, args.accum_steps);
    set(&mut t.warmup_steps, args.warmup_steps);
    set(&mut t.eval_every, args.eval_every);
    set(&mut t.log_every, args.log_every);
    set(&mut t.patience, args.patience);
    set(&mut config.batch.max_tokens, args.max_tokens);
    t.max_minutes = args.max_minutes.unwrap_or(t.max_minutes);
    t.lr_factor = args.lr_factor.unwrap_or(t.lr_factor);
    t.anneal = args.anneal.unwrap_or(t.anneal);
    t.label_smoothing = args.label_smoothing.unwrap_or(t.label_smoothing);
    t.seed = args.seed.unwrap_or(t.seed);
    t.precision = args.precision.unwrap_or(t.precision);
    t.clip_norm = args.clip_norm.unwrap_or(t.clip_norm);
    set(&mut t.average_checkpoints, args.average_checkpoints);
    if let Some(dropout) = args.dropout {
        config.model.dropout = Some(dropout);
    }
    if let Some(size) = args.src_vocab {
        config.source_tokenizer.vocab_size = size;
    }
    if let Some(size) = args.tgt_vocab {
        config.target_tokenizer.vocab_size = size;
    }
    let sampling = &mut config.sampling;
    sampling.subword_alpha = args.subword_alpha.unwrap_or(sampling.subword_alpha);
    if let Some(weights) = &args.origin_weights {
        sampling.origin_weights = webnmt::train::epoch_data::SamplingConfig::parse_weights(weights)
            .map_err(|e| format!("--origin-weights: {e}"))?;
    }
    sampling.validate()?;
    set(&mut config.clean.max_chars, args.max_chars);
    config.clean.max_ratio = args.max_ratio.unwrap_or(config.clean.max_ratio);
    config.clean.validate()?;
    let t = &mut config.training;
    if let Some(dir) = args.init_from {
        t.init_from = Some(cwd.join(dir));
    }
    config.model.resolve(1000, 1000)?;
    t.validate()?;
    config.batch.validate()?;

    if args.split_only {
        prepare_data(&config)?;
        eprintln!("data split written to {}", config.run_dir.display());
        return Ok(());
    }
    let devices = match &args.devices {
        Some(list) => {
            let devices = parse_devices(list)?;
            if devices[0] == burn::tensor::Device::flex() {
                pin_default_to_flex();
            }
            eprintln!("training on {} devices: {list}", devices.len());
            devices
        }
        None => vec![pick_device(args.device)],
    };
    if args.export_only {
        export_only(&config, &devices[0])?;
        eprintln!(
            "bundle written to {}",
            config.run_dir.join("bundle").display()
        );
        return Ok(());
    }
    let summary = run(&config, &devices, args.resume)?;
    let s = &summary.state;
    if devices.len() > 1 {
        let counts: Vec<String> = devices
            .iter()
            .zip(&summary.device_batches)
            .map(|(d, n)| format!("{d:?} {n}"))
            .collect();
        eprintln!("batches per device: {}", counts.join(", "));
    }
    eprintln!(
        "done: {} steps, {} epochs, best validation loss {}, {:.0} s; bundle in {}",
        s.step,
        s.epoch,
        s.best_val_loss.map_or("-".into(), |l| format!("{l:.4}")),
        s.elapsed_secs,
        config.run_dir.join("bundle").display()
    );
    Ok(())
}

/// Training allocates and frees the same large tensors every step (the logits alone are
/// `max_tokens × vocabulary` floats, 128 MB by default). glibc serves blocks over 32 MB with
/// mmap and unmaps them on free, so every step page-faults them in again: on 2 cores that was a
/// quarter of flex's training time (`small`: 510 → 680 target tokens/s). Serve everything from
/// the heap and never trim it, so freed memory is reused; peak memory grows by about a fifth.
/// `WEBNMT_MALLOC=system` keeps glibc's defaults (and lets `GLIBC_TUNABLES` decide).
fn keep_freed_memory() {
    if std::env::var("WEBNMT_MALLOC").as_deref() == Ok("system") {
        return;
    }
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes allocator parameters; it is called before any thread starts.
    unsafe {
        libc::mallopt(libc::M_MMAP_MAX, 0);
        libc::mallopt(libc::M_TRIM_THRESHOLD, libc::c_int::MAX);
    }
}

fn pick_device(choice: DeviceChoice) -> burn::tensor::Device {
    let use_gpu = match choice {
        DeviceChoice::Gpu => true,
        DeviceChoice::Cpu => false,
        DeviceChoice::Auto => pollster::block_on(webnmt::gpu::Gpu::new())
            .is_ok_and(|g| !g.adapter().is_cpu_emulation()),
    };
    if use_gpu {
        eprintln!("training on the GPU (burn-wgpu); --device cpu uses the CPU");
        return burn::tensor::Device::wgpu(burn::tensor::DeviceKind::DefaultDevice);
    }
    eprintln!("training on the CPU (burn flex); --device gpu uses a GPU");
    pin_default_to_flex();
    burn::tensor::Device::flex()
}

/// burn creates restored optimizer state on its default device, which is wgpu when compiled in
/// (lavapipe here: minutes of shader compilation). Pins the default to flex.
fn pin_default_to_flex() {
    // SAFETY: no thread of this process reads the environment concurrently: training has not
    // started and the adapter probe has returned.
    unsafe { std::env::set_var("BURN_DEVICE", "flex") };
}
