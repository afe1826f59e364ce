//! A whole training run from a config file: read and clean the corpus, split held-out sets,
//! train (or reuse) the tokenizers, tokenize, train the model, export the int8 bundle.
//!
//! The run directory holds everything: `config.toml` (the resolved config), the tokenizers,
//! `data.txt` (cleaning and split report), `checkpoints/`, `best/`, `metrics.csv`,
//! `metrics.svg`, held-out test sets, and `bundle/`.

use super::epoch_data::{EpochData, SamplingConfig};
use super::{TrainData, TrainError, TrainOptions, TrainState, TrainSummary, train};
use crate::config::{BOS_ID, ConfigError, EOS_ID, ModelConfig, PAD_ID};
use crate::data::{
    BatchConfig, Batcher, CleanConfig, Corpus, CorpusFiles, DataError, SpecialIds, Split,
    SplitConfig, SplitSize, TokenPair, clean, split,
};
use crate::export::{ExportInfo, average_weights, export_weights, named_weights};
use crate::model::Transformer;
use crate::tokenizer::{Tokenizer, TokenizerConfig, TokenizerError, train_unigram};
use burn::module::Module;
use burn::tensor::Device;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The training config file (TOML). Relative paths are relative to the file's folder.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunConfig {
    /// Where checkpoints, logs and the bundle go.
    pub run_dir: PathBuf,
    /// Language codes written into the bundle, e.g. `ko` and `en`.
    pub source_lang: String,
    pub target_lang: String,
    /// Training corpus; dev and test are carved off it unless given.
    pub corpus: CorpusFiles,
    #[serde(default)]
    pub dev: Option<CorpusFiles>,
    #[serde(default)]
    pub test: Option<CorpusFiles>,
    #[serde(default)]
    pub clean: CleanConfig,
    #[serde(default)]
    pub split: SplitConfig,
    #[serde(default)]
    pub source_tokenizer: TokenizerConfig,
    #[serde(default)]
    pub target_tokenizer: TokenizerConfig,
    pub model: ModelSection,
    #[serde(default)]
    pub batch: BatchConfig,
    #[serde(default)]
    pub training: TrainOptions,
    /// How each epoch's pairs are drawn: subword sampling, per-origin weights.
    #[serde(default)]
    pub sampling: SamplingConfig,
}

/// `[model]`: a preset, optionally with some sizes overridden (vocabulary sizes come from the
/// tokenizers).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ModelSection {
    pub preset: String,
    pub d_model: Option<usize>,
    pub d_ff: Option<usize>,
    pub n_heads: Option<usize>,
    pub n_enc_layers: Option<usize>,
    pub n_dec_layers: Option<usize>,
    pub dropout: Option<f64>,
    pub max_seq_len: Option<usize>,
}

impl ModelSection {
    /// The model config for these vocabulary sizes.
    pub fn resolve(&self, src_vocab: usize, tgt_vocab: usize) -> Result<ModelConfig, ConfigError> {
        let mut c = ModelConfig::preset(&self.preset, src_vocab, tgt_vocab)?;
        c.d_model = self.d_model.unwrap_or(c.d_model);
        c.d_ff = self.d_ff.unwrap_or(c.d_ff);
        c.n_heads = self.n_heads.unwrap_or(c.n_heads);
        c.n_enc_layers = self.n_enc_layers.unwrap_or(c.n_enc_layers);
        c.n_dec_layers = self.n_dec_layers.unwrap_or(c.n_dec_layers);
        c.dropout = self.dropout.unwrap_or(c.dropout);
        c.max_seq_len = self.max_seq_len.unwrap_or(c.max_seq_len);
        c.validate()?;
        Ok(c)
    }
}

/// Everything that can stop a run before or during training.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("cannot read config {path}: {reason}")]
    ConfigFile { path: PathBuf, reason: String },
    #[error(transparent)]
    Data(#[from] DataError),
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
    #[error("invalid model config: {0}")]
    Model(#[from] ConfigError),
    #[error(transparent)]
    Train(#[from] TrainError),
    #[error("cannot write {path}: {reason}")]
    Write { path: PathBuf, reason: String },
    #[error("cannot read {path}: {reason}")]
    Read { path: PathBuf, reason: String },
    #[error(transparent)]
    Bundle(#[from] crate::weights::BundleError),
}

impl RunConfig {
    /// Reads a TOML config; unknown keys and impossible values are errors.
    pub fn load(path: &Path) -> Result<Self, RunError> {
        let err = |reason: String| RunError::ConfigFile {
            path: path.to_path_buf(),
            reason,
        };
        let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
        let mut config: RunConfig = toml::from_str(&text).map_err(|e| err(e.to_string()))?;
        let base = path.parent().unwrap_or(Path::new("."));
        config.resolve_paths(base);
        config.model.resolve(1000, 1000)?;
        config.clean.validate()?;
        config.batch.validate()?;
        config.source_tokenizer.validate()?;
        config.target_tokenizer.validate()?;
        config.training.validate()?;
        config.sampling.validate().map_err(err)?;
        Ok(config)
    }

    /// Makes every relative path relative to `base`.
    pub fn resolve_paths(&mut self, base: &Path) {
        let fix = |p: &mut PathBuf| {
            if p.is_relative() {
                *p = base.join(&*p);
            }
        };
        fix(&mut self.run_dir);
        if let Some(p) = self.training.init_from.as_mut() {
            fix(p);
        }
        for files in [
            Some(&mut self.corpus),
            self.dev.as_mut(),
            self.test.as_mut(),
        ]
        .into_iter()
        .flatten()
        {
            for p in [
                &mut files.source,
                &mut files.target,
                &mut files.tags,
                &mut files.tsv,
            ]
            .into_iter()
            .flatten()
            {
                fix(p);
            }
        }
    }
}

fn write(path: &Path, contents: &str) -> Result<(), RunError> {
    std::fs::write(path, contents).map_err(|e| RunError::Write {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })
}

fn tokenize(corpus: &Corpus, src: &Tokenizer, tgt: &Tokenizer) -> Result<Vec<TokenPair>, RunError> {
    corpus
        .pairs
        .iter()
        .map(|p| {
            Ok(TokenPair::new(
                src.encode(&p.source)?,
                tgt.encode(&p.target)?,
            ))
        })
        .collect()
}

/// Loads `name` from the run directory when resuming, or trains it on `lines` and saves it.
fn tokenizer_for(
    run_dir: &Path,
    name: &str,
    resume: bool,
    lines: Vec<&str>,
    config: &TokenizerConfig,
    init_from: Option<&Path>,
) -> Result<Tokenizer, RunError> {
    let path = run_dir.join(name);
    if resume && path.exists() {
        return Ok(Tokenizer::from_file(&path)?);
    }
    if let Some(bundle) = init_from {
        // A run that starts from a bundle must use its vocabulary.
        let tokenizer = Tokenizer::from_file(bundle.join(name))?;
        tokenizer.save(&path)?;
        return Ok(tokenizer);
    }
    eprintln!(
        "training {name} ({} lines, vocabulary {})",
        lines.len(),
        config.vocab_size
    );
    let tokenizer = train_unigram(lines, config)?;
    tokenizer.save(&path)?;
    Ok(tokenizer)
}

/// Reads, cleans and splits the corpus as a run does, and writes the run directory's
/// `config.toml`, `data.txt` (counts per rule and split) and `heldout.<split>.<lang>` files (dev,
/// test and each held-out domain). Deterministic: the same config gives the same files. Returns
/// the split with the dev and test sets in use.
pub fn prepare_data(config: &RunConfig) -> Result<(Split, Corpus, Corpus), RunError> {
    let run_dir = &config.run_dir;
    std::fs::create_dir_all(run_dir).map_err(|e| RunError::Write {
        path: run_dir.clone(),
        reason: e.to_string(),
    })?;
    let config_text = toml::to_string_pretty(config).map_err(|e| RunError::Write {
        path: run_dir.join("config.toml"),
        reason: e.to_string(),
    })?;
    write(&run_dir.join("config.toml"), &config_text)?;
    // Data: read, clean, split.
    let (corpus, report) = clean(config.corpus.read()?, &config.clean)?;
    let mut split_config = config.split.clone();
    let given = |c: &Option<CorpusFiles>| -> Result<Option<Corpus>, RunError> {
        Ok(match c {
            Some(files) => Some(files.read()?),
            None => None,
        })
    };
    let (dev, test) = (given(&config.dev)?, given(&config.test)?);
    if dev.is_some() {
        split_config.dev = SplitSize::Count(0);
    }
    if test.is_some() {
        split_config.test = SplitSize::Count(0);
    }
    let mut parts = split(corpus, &split_config)?;
    let dev = dev.unwrap_or_else(|| parts.dev.clone());
    if dev.pairs.is_empty() {
        // Validation, early stopping and the export's best weights all need a dev set. (Given
        // [dev] files are never empty: reading refuses files without lines.)
        return Err(RunError::Train(TrainError::Options(
            "the dev set is empty: [split] dev is 0 (or too small a fraction of the corpus) and \
             the config has no [dev] files; set [split] dev (a count such as 1000, or a \
             fraction such as 0.01) or add a [dev] section"
                .to_string(),
        )));
    }
    let test = test.unwrap_or_else(|| parts.test.clone());
    crate::data::remove_overlap(&mut parts.train, &[&dev, &test]);
    let mut data_report = format!("{report}\n\n{}\n", parts.report);
    for (name, corpus) in [("dev", &dev), ("test", &test)]
        .into_iter()
        .chain(parts.held_out.iter().map(|(t, c)| (t.as_str(), c)))
    {
        let lines = |f: fn(&crate::data::Pair) -> &str| {
            corpus.pairs.iter().map(f).collect::<Vec<_>>().join("\n") + "\n"
        };
        // `heldout.<name>.<lang>`; names may hold dots (`python-docs-ko-3.6-3.9`).
        let file = |lang: &str| run_dir.join(format!("heldout.{name}.{lang}"));
        write(&file(&config.source_lang), &lines(|p| &p.source))?;
        write(&file(&config.target_lang), &lines(|p| &p.target))?;
        data_report.push_str(&format!("{name}: {} pairs\n", corpus.len()));
    }
    write(&run_dir.join("data.txt"), &data_report)?;
    eprintln!("{data_report}");
    Ok((parts, dev, test))
}

/// Runs the whole pipeline on `devices` (the first is the main one; see [`train`]); with
/// `resume`, continues the run found in `run_dir`.
pub fn run(config: &RunConfig, devices: &[Device], resume: bool) -> Result<TrainSummary, RunError> {
    let run_dir = &config.run_dir;
    let device = devices
        .first()
        .ok_or_else(|| RunError::Train(TrainError::Options("no training device given".into())))?;
    // Before anything is written: the data files and tokenizers of a run there stay as they are.
    crate::train::check_fresh_start(run_dir, resume)?;
    let (parts, dev, _test) = prepare_data(config)?;

    // Tokenizers (trained on the training split only).
    let train_pairs = &parts.train.pairs;
    let src_tok = tokenizer_for(
        run_dir,
        crate::weights::SOURCE_TOKENIZER,
        resume,
        train_pairs.iter().map(|p| p.source.as_str()).collect(),
        &config.source_tokenizer,
        config.training.init_from.as_deref(),
    )?;
    let tgt_tok = tokenizer_for(
        run_dir,
        crate::weights::TARGET_TOKENIZER,
        resume,
        train_pairs.iter().map(|p| p.target.as_str()).collect(),
        &config.target_tokenizer,
        config.training.init_from.as_deref(),
    )?;
    let model_config = config
        .model
        .resolve(src_tok.vocab_size(), tgt_tok.vocab_size())?;
    let ids = SpecialIds {
        pad: PAD_ID,
        bos: BOS_ID,
        eos: EOS_ID,
    };
    let batch_config = BatchConfig {
        max_seq_len: model_config.max_seq_len,
        ..config.batch.clone()
    };
    let train_tokens = tokenize(&parts.train, &src_tok, &tgt_tok)?;
    let epoch_data = if config.sampling.is_fixed() {
        None
    } else {
        Some(
            EpochData::new(
                &parts.train,
                &train_tokens,
                (&src_tok, &tgt_tok),
                &config.sampling,
                &batch_config,
                ids,
            )
            .map_err(|e| RunError::Train(TrainError::Options(e)))?,
        )
    };
    let train_batches = match &epoch_data {
        Some(data) => data
            .batcher(0)
            .map_err(|e| RunError::Train(TrainError::Options(e)))?,
        None => Batcher::new(train_tokens.clone(), &batch_config, ids)?,
    };
    let resample = |epoch: u64| match &epoch_data {
        Some(data) => data.batcher(epoch),
        None => Err("no per-epoch sampling configured".to_string()),
    };
    let dev_pairs = tokenize(&dev, &src_tok, &tgt_tok)?;
    let dev_batches = Batcher::new(dev_pairs.clone(), &batch_config, ids).map_err(|e| {
        RunError::Train(TrainError::Options(format!(
            "the dev set ({}): {e}",
            dev.name
        )))
    })?;
    eprintln!(
        "model: {} parameters ({} + {} vocabulary); {}",
        model_config.n_params(),
        model_config.src_vocab_size,
        model_config.tgt_vocab_size,
        train_batches.padding(&train_batches.plan(0))
    );
    // Pairs too long for the model (or with an empty side) are left out: say how many.
    for (name, batches) in [("training", &train_batches), ("dev", &dev_batches)] {
        let stats = batches.stats();
        if stats.kept < stats.input || stats.truncated > 0 {
            eprintln!("{name} pairs, tokenized:\n{stats}");
        }
    }

    let summary = train(
        &model_config,
        &config.training,
        &TrainData {
            train: &train_batches,
            resample: epoch_data.as_ref().map(|_| &resample as _),
            dev: &dev_batches,
            dev_pairs: &dev_pairs,
            target_tokenizer: &tgt_tok,
        },
        run_dir,
        devices,
        resume,
    )?;

    export(
        config,
        &model_config,
        &src_tok,
        &tgt_tok,
        &summary.state,
        device,
    )?;
    Ok(summary)
}

/// Writes `run_dir/bundle` from the run's best weights (`best/model.bpk`), or from the mean of
/// its newest `average_checkpoints` checkpoints.
fn export(
    config: &RunConfig,
    model_config: &ModelConfig,
    src_tok: &Tokenizer,
    tgt_tok: &Tokenizer,
    state: &TrainState,
    device: &Device,
) -> Result<(), RunError> {
    let load = |path: PathBuf| {
        Transformer::new(model_config, device)
            .try_load_file(&path)
            .map_err(|e| RunError::Read {
                path: path.clone(),
                reason: format!("cannot load it as this config's model: {e:?}"),
            })
            .and_then(|model| Ok(named_weights(&model)?))
    };
    let n = config.training.average_checkpoints;
    let (weights, averaged) = if n > 1 {
        let dir = config.run_dir.join("checkpoints");
        let list = super::checkpoint::Checkpoints::read(&dir)
            .list()
            .map_err(|e| RunError::Read {
                path: dir.clone(),
                reason: e.to_string(),
            })?;
        let newest = &list[list.len().saturating_sub(n)..];
        if !newest.is_empty() && newest.len() < n {
            eprintln!(
                "note: the export averages {} checkpoint{}, fewer than average_checkpoints = {n} \
                 (keep_checkpoints or the run's length allows no more)",
                newest.len(),
                if newest.len() == 1 { "" } else { "s" }
            );
        }
        let models = newest
            .iter()
            .map(|(_, d)| load(d.join("model.bpk")))
            .collect::<Result<Vec<_>, _>>()?;
        let mean = average_weights(&models).ok_or_else(|| RunError::Read {
            path: dir.clone(),
            reason: "no checkpoints to average, or checkpoints of different models".into(),
        })?;
        (mean, newest.iter().map(|(step, _)| *step).collect())
    } else {
        (
            load(config.run_dir.join("best").join("model.bpk"))?,
            Vec::new(),
        )
    };
    let metrics = serde_json::json!({
        "steps": state.step,
        "epochs": state.epoch,
        "best_val_loss": state.best_val_loss,
        "last": state.history.last(),
        "stopped": state.stopped,
        "training_secs": state.elapsed_secs,
        "target_tokens": state.target_tokens,
        "averaged_checkpoints": averaged,
    });
    export_weights(
        &weights,
        model_config,
        src_tok,
        tgt_tok,
        ExportInfo {
            source_lang: config.source_lang.clone(),
            target_lang: config.target_lang.clone(),
            metrics,
        },
        &config.run_dir.join("bundle"),
    )?;
    Ok(())
}

/// Exports an existing run again (its tokenizers, best weights and newest checkpoint's state)
/// without training.
pub fn export_only(config: &RunConfig, device: &Device) -> Result<(), RunError> {
    let run_dir = &config.run_dir;
    let missing = |what: &str, e: &dyn std::fmt::Display| RunError::Read {
        path: run_dir.clone(),
        reason: format!("{what}: {e}; train first (without --export-only)"),
    };
    let src_tok = Tokenizer::from_file(run_dir.join(crate::weights::SOURCE_TOKENIZER))?;
    let tgt_tok = Tokenizer::from_file(run_dir.join(crate::weights::TARGET_TOKENIZER))?;
    let model_config = config
        .model
        .resolve(src_tok.vocab_size(), tgt_tok.vocab_size())?;
    let (_, latest) = super::checkpoint::Checkpoints::read(&run_dir.join("checkpoints"))
        .latest()
        .map_err(|e| missing("no checkpoints", &e))?
        .ok_or_else(|| missing("no checkpoints", &"none found"))?;
    let state: TrainState = std::fs::read_to_string(latest.join("state.json"))
        .map_err(|e| missing("unreadable state.json", &e))
        .and_then(|json| {
            serde_json::from_str(&json).map_err(|e| missing("unreadable state.json", &e))
        })?;
    export(config, &model_config, &src_tok, &tgt_tok, &state, device)
}
