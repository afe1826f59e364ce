//! The training loop: Adam with the Noam schedule, label smoothing, dropout, global-norm
//! gradient clipping, gradient accumulation, token-budget batches, validation loss and
//! perplexity plus greedy BLEU / chrF on a dev sample, early stopping, crash-safe checkpoints
//! with exact resume, a progress bar, and `metrics.csv` / `metrics.svg`.
//!
//! Reproducibility: the batch order of epoch `e` is a function of `(seed, e)` and the device RNG
//! (dropout) is re-seeded from `(seed, step)` before every step, so a resumed run continues
//! exactly where the killed one stopped.

pub mod checkpoint;
pub mod clip;
pub mod devices;
pub mod epoch_data;
pub mod loss;
pub mod metrics;
pub mod precision;
pub mod run;
pub mod schedule;

use crate::config::ModelConfig;
use crate::data::{Batch, Batcher, TokenPair};
use crate::eval;
use crate::model::{Transformer, greedy_decode};
use crate::tokenizer::Tokenizer;
use burn::module::Module;
use burn::optim::{AdamConfig, GradientsAccumulator, ModuleOptimizer};
use burn::tensor::{Device, FloatDType, Int, Tensor, TensorData};
use checkpoint::{Checkpoints, write_atomic};
use metrics::MetricsRow;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// How `TrainState::stopped` begins when validation stopped improving: a resumed run with a
/// larger `patience` (or 0) goes on from there.
const EARLY_STOPPING: &str = "early stopping";

/// Training settings. Defaults are the reference implementation's where it gives one.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TrainOptions {
    /// Seed for initialisation and dropout (the batch order has its own, in the batch config).
    pub seed: u64,
    /// Batches whose gradients are summed before one optimizer step (reference: 2).
    pub accum_steps: usize,
    /// Noam factor (reference: 2.0).
    pub lr_factor: f64,
    /// Noam warm-up steps (reference: 8000).
    pub warmup_steps: usize,
    /// Multiply the Noam rate by a linear ramp from 1 to 0 over the run: it reaches 0 at the
    /// run's step limit (`max_steps` or `max_epochs`) or at the end of this invocation's
    /// `max_minutes`, whichever comes first, so a time-budgeted round ends annealed (off by
    /// default; the reference has no anneal).
    pub anneal: bool,
    /// Label smoothing ε (reference: 0.05).
    pub label_smoothing: f64,
    /// Global gradient-norm clip (reference: 1.0); 0 disables.
    pub clip_norm: f64,
    /// Adam β1, β2, ε (the paper's 0.9, 0.98, 1e-9).
    pub adam_beta1: f32,
    pub adam_beta2: f32,
    pub adam_epsilon: f32,
    /// Epoch limit (reference: 50).
    pub max_epochs: usize,
    /// Optimizer-step limit; 0 means no limit.
    pub max_steps: usize,
    /// Wall-clock budget of this invocation in minutes; 0 means none. When it runs out the
    /// run validates, checkpoints and exports; `--resume` continues it.
    pub max_minutes: f64,
    /// Log a training-loss row every this many steps.
    pub log_every: usize,
    /// Validate (loss, perplexity, BLEU, chrF) and checkpoint every this many steps.
    pub eval_every: usize,
    /// Dev sentences translated greedily for BLEU / chrF at each validation.
    pub bleu_sentences: usize,
    /// Early stopping: validations without an improvement of at least `min_delta` (reference:
    /// 10 and 0.001); 0 disables.
    pub patience: usize,
    pub min_delta: f64,
    /// Complete checkpoints kept on disk.
    pub keep_checkpoints: usize,
    /// Export the mean of the newest this many checkpoints' weights instead of the best
    /// weights (checkpoint averaging; 0 or 1: the best weights). At most `keep_checkpoints`.
    pub average_checkpoints: usize,
    /// Forward/backward precision: auto (f16 mixed precision on GPU backends that support it,
    /// f32 on the CPU), f32, f16 or bf16; the weights and optimizer stay f32 (see
    /// [`precision`]). The reference trained with automatic mixed precision.
    pub precision: precision::Precision,
    /// Start from this bundle's weights and tokenizers instead of a random initialisation
    /// (fine-tuning, or continuing a run whose checkpoints are gone). The optimizer starts
    /// fresh; use a short warm-up.
    pub init_from: Option<PathBuf>,
}

impl Default for TrainOptions {
    fn default() -> Self {
        Self {
            seed: 1,
            accum_steps: 2,
            lr_factor: 2.0,
            warmup_steps: 8000,
            anneal: false,
            label_smoothing: 0.05,
            clip_norm: 1.0,
            adam_beta1: 0.9,
            adam_beta2: 0.98,
            adam_epsilon: 1e-9,
            max_epochs: 50,
            max_steps: 0,
            max_minutes: 0.0,
            log_every: 50,
            eval_every: 1000,
            bleu_sentences: 200,
            patience: 10,
            min_delta: 0.001,
            keep_checkpoints: 3,
            average_checkpoints: 0,
            precision: precision::Precision::Auto,
            init_from: None,
        }
    }
}

/// Why training stopped early or could not run.
#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    #[error("{0}")]
    Options(String),
    #[error("cannot write to {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("checkpoint {path} is unreadable ({message}); delete it to resume from the one before")]
    Checkpoint { path: PathBuf, message: String },
    #[error("cannot write a checkpoint under the run's checkpoints/ folder: {0}")]
    CheckpointIo(#[from] std::io::Error),
    #[error(
        "the training loss became {0} (not a number); lower lr_factor or raise warmup_steps (a \
         run keeps its schedule: start another run, from scratch or with --init-from on an \
         earlier export, with another --run-dir)"
    )]
    Diverged(f32),
    #[error(
        "the gradients of step {step} are not finite (norm {norm}); the step was not applied and \
         the checkpoints hold the weights before it. Lower lr_factor or raise warmup_steps (in \
         another run: --init-from an export of this one, another --run-dir), or lower clip_norm"
    )]
    NonFiniteGradients { step: usize, norm: f64 },
    #[error(
        "training failed on device {0}; check that the device works (or leave it out of --devices)"
    )]
    Device(String),
    #[error("validation: cannot read the greedy translations back from the device: {0}")]
    Readback(#[from] burn::tensor::TensorReadError),
    #[error("validation: cannot turn token ids into text with the target tokenizer: {0}")]
    Detokenize(crate::tokenizer::TokenizerError),
    #[error("validation: cannot score the dev translations: {0}")]
    Score(#[from] crate::eval::EvalError),
}

/// Progress of a run: saved in every checkpoint as `state.json`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct TrainState {
    pub step: usize,
    pub epoch: usize,
    /// Batches of `epoch` already consumed.
    pub batch_in_epoch: usize,
    pub best_val_loss: Option<f64>,
    pub evals_without_improvement: usize,
    pub target_tokens: u64,
    pub elapsed_secs: f64,
    pub history: Vec<MetricsRow>,
    /// The f16 loss scale (mixed precision); absent in f32 runs and older checkpoints.
    #[serde(default)]
    pub loss_scale: Option<precision::LossScale>,
    /// Steps skipped because the f16 gradients overflowed.
    #[serde(default)]
    pub skipped_steps: usize,
    /// Why the run ended, once it has.
    pub stopped: Option<String>,
    /// The learning-rate schedule the run's steps were taken with: the rate is a function of it
    /// and the step, so a resumed run must keep it. Absent in older checkpoints.
    #[serde(default)]
    pub schedule: Option<schedule::Schedule>,
    /// The model the checkpoints hold (its dropout may change between invocations). Absent in
    /// older checkpoints.
    #[serde(default)]
    pub model: Option<ModelConfig>,
}

/// What a finished run reports.
#[derive(Clone, Debug, Serialize)]
pub struct TrainSummary {
    pub state: TrainState,
    /// Batches each device trained on in this invocation, in `--devices` order.
    pub device_batches: Vec<u64>,
}

/// Everything one run needs besides its options.
pub struct TrainData<'a> {
    /// Training batches (of epoch 0 when `resample` is given).
    pub train: &'a Batcher,
    /// The training batches of a later epoch, when they change from epoch to epoch (sampled
    /// subword segmentations, per-origin sampling weights; see [`epoch_data`]). Must be a
    /// function of the epoch alone, so a resumed run sees the same batches.
    pub resample: Option<&'a (dyn Fn(u64) -> Result<Batcher, String> + Sync)>,
    /// Validation batches (the loss is computed over all of them).
    pub dev: &'a Batcher,
    /// Dev pairs translated greedily for BLEU / chrF (the first `bleu_sentences`).
    pub dev_pairs: &'a [TokenPair],
    pub target_tokenizer: &'a Tokenizer,
}

impl TrainOptions {
    /// Whether `evals` validations without improvement end the run.
    fn stops_early(&self, evals: usize) -> bool {
        self.patience > 0 && evals >= self.patience
    }

    /// Checks values that would make the loop meaningless.
    pub fn validate(&self) -> Result<(), TrainError> {
        let fail = |m: String| Err(TrainError::Options(m));
        if self.accum_steps == 0 || self.log_every == 0 || self.eval_every == 0 {
            return fail("accum_steps, log_every and eval_every must be at least 1".into());
        }
        if !(0.0..1.0).contains(&self.label_smoothing) {
            return fail(format!(
                "label_smoothing = {} must be in [0, 1)",
                self.label_smoothing
            ));
        }
        // (name, value, whether 0 is allowed); NaN and infinity never are.
        let numbers = [
            ("lr_factor", self.lr_factor, false),
            ("clip_norm", self.clip_norm, true),
            ("min_delta", self.min_delta, true),
            ("max_minutes", self.max_minutes, true),
            ("adam_epsilon", f64::from(self.adam_epsilon), false),
        ];
        for (name, value, zero_ok) in numbers {
            if !(value.is_finite() && (value > 0.0 || zero_ok && value == 0.0)) {
                let bound = if zero_ok { "0 or more" } else { "above 0" };
                return fail(format!("{name} = {value} must be a finite number {bound}"));
            }
        }
        for (name, beta) in [
            ("adam_beta1", self.adam_beta1),
            ("adam_beta2", self.adam_beta2),
        ] {
            if !(0.0..1.0).contains(&beta) {
                return fail(format!(
                    "{name} = {beta} must be in [0, 1) (the defaults: 0.9, 0.98)"
                ));
            }
        }
        if self.average_checkpoints > self.keep_checkpoints {
            return fail(format!(
                "average_checkpoints = {} needs as many checkpoints kept on disk; raise \
                 keep_checkpoints (now {}) to at least that",
                self.average_checkpoints, self.keep_checkpoints
            ));
        }
        if self.max_epochs == 0 && self.max_steps == 0 {
            return fail("set max_epochs or max_steps".into());
        }
        Ok(())
    }
}

fn int_tensor(ids: &[u32], shape: [usize; 2], device: &Device) -> Tensor<2, Int> {
    let ids: Vec<i64> = ids.iter().map(|&t| i64::from(t)).collect();
    Tensor::from_data(TensorData::new(ids, shape), device)
}

fn batch_loss(model: &Transformer, batch: &Batch, smoothing: f64, device: &Device) -> Tensor<1> {
    let src = int_tensor(&batch.src, [batch.batch, batch.src_len], device);
    let tgt_in = int_tensor(&batch.tgt_in, [batch.batch, batch.tgt_len], device);
    let tgt_out = int_tensor(&batch.tgt_out, [batch.batch, batch.tgt_len], device);
    loss::label_smoothed_cross_entropy(model.forward(src, tgt_in), tgt_out, smoothing)
}

/// Validation: token-weighted mean cross-entropy (no smoothing) over the dev set, and greedy
/// BLEU / chrF on its first `bleu_sentences` pairs.
fn validate(
    model: &Transformer,
    data: &TrainData<'_>,
    options: &TrainOptions,
    config: &ModelConfig,
    device: &Device,
) -> Result<(f64, Option<(f64, f64)>), TrainError> {
    let model = model.valid();
    let device = device.clone().without_autodiff();
    let (mut sum, mut tokens) = (0.0, 0.0);
    for batch in data.dev.epoch(0, 0) {
        let loss = batch_loss(&model, &batch, 0.0, &device).into_scalar::<f32>();
        sum += f64::from(loss) * batch.n_tgt_tokens as f64;
        tokens += batch.n_tgt_tokens as f64;
    }
    let val_loss = if tokens > 0.0 { sum / tokens } else { f64::NAN };
    let sample = &data.dev_pairs[..data.dev_pairs.len().min(options.bleu_sentences)];
    if sample.is_empty() {
        return Ok((val_loss, None));
    }
    let decode = |ids: &[u32]| {
        data.target_tokenizer
            .decode(ids)
            .map_err(TrainError::Detokenize)
    };
    let mut hyps = Vec::with_capacity(sample.len());
    for chunk in sample.chunks(64) {
        let sources: Vec<Vec<u32>> = chunk.iter().map(|p| p.src.clone()).collect();
        let max_len = config.max_seq_len - 2;
        for ids in greedy_decode(&model, &sources, max_len, &device)? {
            hyps.push(decode(&ids)?);
        }
    }
    // One reference stream: `refs[0][i]` is the reference of sentence `i`.
    let refs: Vec<Vec<String>> = vec![
        sample
            .iter()
            .map(|p| decode(&p.tgt))
            .collect::<Result<_, _>>()?,
    ];
    let bleu = eval::corpus_bleu(&hyps, &refs)?;
    let chrf = eval::corpus_chrf(&hyps, &refs)?;
    Ok((val_loss, Some((bleu.score, chrf.score))))
}

/// Refuses to start a new run (`resume` false) in `run_dir` when it holds another run's
/// checkpoints: the new run's would be pruned at once as older than the old run's higher steps,
/// and export and a later resume would take the old run's.
pub fn check_fresh_start(run_dir: &Path, resume: bool) -> Result<(), TrainError> {
    let dir = run_dir.join("checkpoints");
    if resume || !dir.is_dir() {
        return Ok(());
    }
    let latest = Checkpoints::read(&dir)
        .latest()
        .map_err(|source| TrainError::Io {
            path: dir.clone(),
            source,
        })?;
    match latest {
        Some((step, _)) => Err(TrainError::Options(format!(
            "{} already holds checkpoints of a run (the newest at step {step}): add --resume to \
             continue it, or give another --run-dir (or delete that one) to start over",
            run_dir.display()
        ))),
        None => Ok(()),
    }
}

/// Trains `config` on `data`, writing checkpoints, `best/`, `metrics.csv` and `metrics.svg`
/// under `run_dir`. With `resume`, continues from the newest complete checkpoint there.
///
/// With several `devices` (the first is the main one: optimizer, validation, checkpoints) each
/// optimizer step takes `accum_steps` batches per device, run in parallel (see [`devices`]).
pub fn train(
    config: &ModelConfig,
    options: &TrainOptions,
    data: &TrainData<'_>,
    run_dir: &Path,
    devices: &[Device],
    resume: bool,
) -> Result<TrainSummary, TrainError> {
    options.validate()?;
    let Some(device) = devices.first() else {
        return Err(TrainError::Options("no training device given".into()));
    };
    let workers: Vec<Device> = devices.iter().map(|d| d.clone().autodiff()).collect();
    let batches_per_step = options.accum_steps * workers.len();
    let batches_per_epoch = data.train.plan(0).len();
    // The steps the limits allow (the progress bar's and the anneal's end): `max_steps`, or
    // what `max_epochs` epochs of epoch 0's size make (accumulation carries over epoch
    // boundaries; the last epoch drops the batches that make no step). Only an estimate when
    // origin weights resample epochs of other sizes: the epoch count itself ends the run.
    let epoch_steps = |epochs: usize| (epochs * batches_per_epoch / batches_per_step).max(1);
    let total_steps = match (options.max_steps, options.max_epochs) {
        (0, e) => epoch_steps(e),
        (s, 0) => s,
        (s, e) => s.min(epoch_steps(e)),
    };
    let step_limit_reached = |step: usize| options.max_steps > 0 && step >= options.max_steps;
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| TrainError::Io { path, source }
    };
    std::fs::create_dir_all(run_dir).map_err(io(run_dir))?;
    check_fresh_start(run_dir, resume)?;
    let ckpt_dir = run_dir.join("checkpoints");
    let checkpoints =
        Checkpoints::open(&ckpt_dir, options.keep_checkpoints).map_err(io(&ckpt_dir))?;
    let best_dir = run_dir.join("best");
    std::fs::create_dir_all(&best_dir).map_err(io(&best_dir))?;

    let device = device.clone().autodiff();
    device.seed(options.seed);
    let mut model = Transformer::new(config, &device);
    let mut optim = AdamConfig::new()
        .with_beta_1(options.adam_beta1)
        .with_beta_2(options.adam_beta2)
        .with_epsilon(options.adam_epsilon)
        .init();
    let mut state = TrainState::default();
    let schedule = schedule::Schedule {
        lr_factor: options.lr_factor,
        warmup_steps: options.warmup_steps,
    };
    let latest = checkpoints.latest().map_err(io(&ckpt_dir))?;
    if let (None, Some(dir)) = (&latest, &options.init_from) {
        let bad = |message: String| {
            TrainError::Options(format!("--init-from {}: {message}", dir.display()))
        };
        let bundle = crate::weights::Bundle::from_dir(dir).map_err(|e| bad(e.to_string()))?;
        let theirs = bundle.config();
        if !config.same_model(theirs) {
            return Err(bad(format!(
                "its model {theirs:?} differs from this run's {config:?}"
            )));
        }
        // With this run's dropout (the bundle's is what the run that made it trained with).
        model = Transformer::from_bundle_with_dropout(&bundle, config.dropout, &device)
            .map_err(|e| bad(e.to_string()))?;
        eprintln!("starting from the weights of {}", dir.display());
    }
    if let Some((_, dir)) = latest {
        let bad = |message: String| TrainError::Checkpoint {
            path: dir.clone(),
            message,
        };
        let json =
            std::fs::read_to_string(dir.join("state.json")).map_err(|e| bad(e.to_string()))?;
        state = serde_json::from_str(&json).map_err(|e| bad(e.to_string()))?;
        if let Some(theirs) = state.schedule.filter(|theirs| *theirs != schedule) {
            return Err(TrainError::Options(format!(
                "this run's checkpoints were trained with --lr-factor {} --warmup-steps {}, not \
                 --lr-factor {} --warmup-steps {}: the learning rate is computed from them and \
                 the step, so resume with the run's values, or start another run from this \
                 one's weights (--init-from {} and another --run-dir)",
                theirs.lr_factor,
                theirs.warmup_steps,
                schedule.lr_factor,
                schedule.warmup_steps,
                run_dir.join("bundle").display(),
            )));
        }
        if let Some(theirs) = state.model.as_ref().filter(|m| !config.same_model(m)) {
            return Err(TrainError::Options(format!(
                "this run's checkpoints hold the model {theirs:?}, not this invocation's \
                 {config:?}: resume with the run's model settings (--preset, [model], \
                 --src-vocab, --tgt-vocab), or start another run from its weights \
                 (--init-from {} and another --run-dir)",
                run_dir.join("bundle").display(),
            )));
        }
        model = model
            .try_load_file(dir.join("model.bpk"))
            .map_err(|e| bad(format!("{e:?}")))?;
        optim = optim
            .load(dir.join("optim.bpk"))
            .map_err(|e| bad(format!("{e:?}")))?;
    }
    state.schedule = Some(schedule);
    state.model = Some(config.clone());
    if let Some(reason) = state.stopped.clone() {
        let early = reason.starts_with(EARLY_STOPPING);
        // A run stopped by its step or epoch limit goes on when this invocation's limits are
        // higher (`--max-epochs`, `--max-steps`).
        let limits_allow_more = !step_limit_reached(state.step)
            && (options.max_epochs == 0 || state.epoch < options.max_epochs);
        if early && !options.stops_early(state.evals_without_improvement) {
            eprintln!(
                "continuing a run that had stopped ({reason}): --patience {} lets it go on",
                options.patience
            );
            state.stopped = None;
        } else if !early && limits_allow_more {
            eprintln!(
                "continuing a run that had stopped ({reason}): the limits now allow {total_steps} \
                 steps"
            );
            state.stopped = None;
        } else {
            let how = if early {
                format!(
                    "; --patience 0 (or more than {}) continues it",
                    state.evals_without_improvement
                )
            } else {
                let mut raise = Vec::new();
                if options.max_steps > 0 && state.step >= options.max_steps {
                    raise.push(format!("--max-steps above {}", state.step));
                }
                if raise.is_empty() || (options.max_epochs > 0 && state.epoch >= options.max_epochs)
                {
                    raise.push(format!("--max-epochs above {}", state.epoch));
                }
                format!("; {} continues it", raise.join(" and "))
            };
            eprintln!("this run already finished ({reason}); nothing to resume{how}");
            return Ok(TrainSummary {
                state,
                device_batches: vec![0; workers.len()],
            });
        }
    }

    let half = options.precision.resolve(&workers)?;
    let mut loss_scale = state
        .loss_scale
        .unwrap_or_else(|| precision::LossScale::new(half));
    if let Some(dtype) = half {
        eprintln!(
            "mixed precision: forward and backward in {dtype:?}, weights and optimizer in f32"
        );
    }
    let bar = indicatif::ProgressBar::new(total_steps as u64).with_position(state.step as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{elapsed_precise} [{bar:30}] step {pos}/{len} ETA {eta}  {msg}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
        .progress_chars("=> "),
    );

    let started = Instant::now();
    let elapsed_before = state.elapsed_secs;
    let (mut window_loss, mut window_batches, mut window_tokens) = (0.0f64, 0usize, 0u64);
    let mut step_tokens = 0u64;
    let mut window_start = Instant::now();
    let mut accumulator = GradientsAccumulator::<Transformer>::new();
    let mut pending = 0usize;
    let mut device_batches = vec![0u64; workers.len()];
    'epochs: loop {
        let resampled;
        let batcher = match data.resample {
            Some(resample) if state.epoch > 0 => {
                resampled = resample(state.epoch as u64).map_err(TrainError::Options)?;
                &resampled
            }
            _ => data.train,
        };
        let batches_per_epoch = batcher.plan(state.epoch as u64).len();
        let mut batches = batcher.epoch(state.epoch as u64, state.batch_in_epoch);
        loop {
            // One batch per device, never past the end of the optimizer step.
            let round: Vec<Batch> = batches
                .by_ref()
                .take(workers.len().min(batches_per_step - pending))
                .collect();
            if round.is_empty() {
                break;
            }
            let jobs: Vec<devices::Job<'_>> = round
                .iter()
                .enumerate()
                .map(|(i, batch)| devices::Job {
                    batch,
                    seed: options.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15)
                        ^ (state.step * batches_per_step + pending + i) as u64,
                })
                .collect();
            let settings = devices::StepSettings {
                smoothing: options.label_smoothing,
                loss_multiplier: loss_scale.scale / batches_per_step as f64,
                half,
            };
            let results = devices::run_round(&model, &jobs, &workers, settings)?;
            for ((result, batch), count) in results.into_iter().zip(&round).zip(&mut device_batches)
            {
                if !result.loss.is_finite() {
                    return Err(TrainError::Diverged(result.loss));
                }
                accumulator.accumulate(&model, result.grads);
                *count += 1;
                window_loss += f64::from(result.loss);
                window_tokens += batch.n_tgt_tokens as u64;
                step_tokens += batch.n_tgt_tokens as u64;
            }
            pending += round.len();
            state.batch_in_epoch += round.len();
            window_batches += round.len();
            if pending < batches_per_step {
                continue;
            }
            pending = 0;
            let mut grads = accumulator.grads();
            let norm =
                clip::unscale_and_clip(&model, &mut grads, loss_scale.scale, options.clip_norm);
            let dynamic = half == Some(FloatDType::F16);
            // Applied, such gradients would write NaN weights into the next checkpoint. A
            // dynamic (f16) scale retries with half the scale, down to 1, then gives up too.
            if !norm.is_finite() && (!dynamic || loss_scale.scale <= 1.0) {
                return Err(TrainError::NonFiniteGradients {
                    step: state.step + 1,
                    norm,
                });
            }
            if !loss_scale.update(norm, dynamic) {
                state.skipped_steps += 1;
                state.loss_scale = Some(loss_scale);
                bar.suspend(|| {
                    eprintln!(
                        "f16 gradients overflowed after step {}; step skipped, loss scale now {}",
                        state.step, loss_scale.scale
                    )
                });
                continue;
            }
            if half == Some(FloatDType::F16) {
                state.loss_scale = Some(loss_scale);
            }
            state.step += 1;
            let mut lr = schedule.rate(state.step, config.d_model);
            if options.anneal {
                lr *= schedule::anneal(schedule::progress(
                    state.step,
                    total_steps,
                    started.elapsed().as_secs_f64(),
                    options.max_minutes * 60.0,
                ));
            }
            model = optim.step(lr, model, grads);
            state.target_tokens += step_tokens;
            step_tokens = 0;
            bar.set_position(state.step as u64);

            let log_now = state.step.is_multiple_of(options.log_every);
            let eval_now = state.step.is_multiple_of(options.eval_every);
            let out_of_time = options.max_minutes > 0.0
                && started.elapsed().as_secs_f64() >= options.max_minutes * 60.0;
            // The final epoch ends here when the batches left in it make no further step (its
            // step count varies: accumulation carries over epoch boundaries).
            let epochs_done = options.max_epochs > 0
                && state.epoch + 1 >= options.max_epochs
                && batches_per_epoch.saturating_sub(state.batch_in_epoch) < batches_per_step;
            let last = step_limit_reached(state.step) || out_of_time || epochs_done;
            if log_now || eval_now || last {
                let secs = window_start.elapsed().as_secs_f64().max(1e-9);
                let mut row = MetricsRow {
                    step: state.step,
                    epoch: state.epoch,
                    lr,
                    train_loss: window_loss / window_batches.max(1) as f64,
                    tokens_per_sec: window_tokens as f64 / secs,
                    elapsed_secs: elapsed_before + started.elapsed().as_secs_f64(),
                    ..Default::default()
                };
                bar.set_message(format!(
                    "loss {:.3}  {:.0} tok/s",
                    row.train_loss, row.tokens_per_sec
                ));
                (window_loss, window_batches, window_tokens) = (0.0, 0, 0);
                if eval_now || last {
                    let (val_loss, scores) = validate(&model, data, options, config, &device)?;
                    row.val_loss = Some(val_loss);
                    row.val_bleu = scores.map(|s| s.0);
                    row.val_chrf = scores.map(|s| s.1);
                    // Printed even when stderr is not a terminal (the bar is hidden then).
                    bar.suspend(|| {
                        eprintln!(
                            "step {}: val loss {val_loss:.4} (ppl {:.2}), BLEU {}, chrF {}",
                            state.step,
                            val_loss.exp(),
                            scores.map_or("-".into(), |s| format!("{:.2}", s.0)),
                            scores.map_or("-".into(), |s| format!("{:.2}", s.1)),
                        )
                    });
                    let improved = state
                        .best_val_loss
                        .is_none_or(|best| val_loss < best - options.min_delta);
                    if improved {
                        state.best_val_loss = Some(val_loss);
                        state.evals_without_improvement = 0;
                        let tmp = best_dir.join("model.partial");
                        model
                            .clone()
                            .valid()
                            .save_file(tmp.with_extension("bpk.partial"))
                            .map_err(|e| TrainError::Checkpoint {
                                path: best_dir.clone(),
                                message: format!("{e:?}"),
                            })?;
                        std::fs::rename(
                            tmp.with_extension("bpk.partial"),
                            best_dir.join("model.bpk"),
                        )
                        .map_err(io(&best_dir))?;
                    } else {
                        state.evals_without_improvement += 1;
                    }
                    if options.stops_early(state.evals_without_improvement) {
                        state.stopped = Some(format!(
                            "{EARLY_STOPPING}: no validation improvement ≥ {} in {} evaluations",
                            options.min_delta, options.patience
                        ));
                    }
                }
                state.history.push(row);
                state.elapsed_secs = elapsed_before + started.elapsed().as_secs_f64();
                if epochs_done && state.stopped.is_none() {
                    state.stopped = Some(format!("reached {} epochs", options.max_epochs));
                    state.epoch += 1;
                    state.batch_in_epoch = 0;
                } else if step_limit_reached(state.step) && state.stopped.is_none() {
                    // Also when the time ran out at the same step: a resume has nothing to do.
                    state.stopped = Some(format!("reached {} steps", options.max_steps));
                }
                metrics::write(run_dir, &state.history).map_err(io(run_dir))?;
                if eval_now || last || state.stopped.is_some() {
                    save_checkpoint(&checkpoints, &model, &optim, &state)?;
                }
                // The next window's throughput counts training only, not this validation and
                // checkpoint.
                window_start = Instant::now();
                if state.stopped.is_some() {
                    break 'epochs;
                }
                if out_of_time {
                    bar.suspend(|| {
                        eprintln!(
                            "stopping after the {} minute budget at step {}; --resume continues",
                            options.max_minutes, state.step
                        )
                    });
                    break 'epochs;
                }
            }
        }
        state.epoch += 1;
        state.batch_in_epoch = 0;
        if options.max_epochs > 0 && state.epoch >= options.max_epochs {
            state.stopped = Some(format!("reached {} epochs", options.max_epochs));
            save_checkpoint(&checkpoints, &model, &optim, &state)?;
            break;
        }
    }
    bar.finish();
    Ok(TrainSummary {
        state,
        device_batches,
    })
}

/// Writes model, optimizer state and `state.json` as one crash-safe checkpoint.
fn save_checkpoint(
    checkpoints: &Checkpoints,
    model: &Transformer,
    optim: &ModuleOptimizer,
    state: &TrainState,
) -> Result<(), TrainError> {
    let record = |dir: &Path, e: &dyn std::fmt::Debug| TrainError::Checkpoint {
        path: dir.to_path_buf(),
        message: format!("{e:?}"),
    };
    checkpoints.save(state.step, |dir| {
        model
            .clone()
            .save_file(dir.join("model.bpk"))
            .map_err(|e| record(dir, &e))?;
        optim
            .save(dir.join("optim.bpk"))
            .map_err(|e| record(dir, &e))?;
        let json = serde_json::to_vec_pretty(state).map_err(|e| record(dir, &e))?;
        write_atomic(&dir.join("state.json"), &json).map_err(|source| TrainError::Io {
            path: dir.join("state.json"),
            source,
        })
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::TrainOptions;

    #[test]
    fn options_that_make_the_loop_meaningless_are_rejected() {
        assert!(TrainOptions::default().validate().is_ok());
        let cases: [fn(&mut TrainOptions); 9] = [
            |o| o.lr_factor = f64::NAN,
            |o| o.lr_factor = 0.0,
            |o| o.lr_factor = f64::INFINITY,
            |o| o.clip_norm = f64::NAN,
            |o| o.min_delta = f64::NAN,
            |o| o.max_minutes = -1.0,
            |o| o.adam_beta2 = 1.0,
            |o| o.adam_epsilon = f32::NAN,
            |o| o.label_smoothing = f64::NAN,
        ];
        for (i, change) in cases.iter().enumerate() {
            let mut options = TrainOptions::default();
            change(&mut options);
            assert!(options.validate().is_err(), "case {i}: {options:?}");
        }
    }
}
