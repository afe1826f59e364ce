//! Model hyperparameters: the one source of truth shared by training, export, the bundle
//! manifest and the GPU engine.
//!
//! The architecture is the paper's encoder-decoder (post-LayerNorm, ReLU FFN, sinusoidal
//! positions, separate source and target embeddings, decoder embedding tied to the output
//! projection). Special token ids are fixed by the tokenizer: `<pad>` 0, `<unk>` 1, `<s>` 2,
//! `</s>` 3.

use crate::kernels::attention::D_HEAD_MAX;
use serde::{Deserialize, Serialize};

/// The longest `max_seq_len` a config may ask for: the engines size their position tables
/// and caches by it, so a manifest cannot make them allocate without bound (the reference and
/// every preset use 150).
pub const MAX_SEQ_LEN: usize = 4096;
/// The most encoder or decoder layers a config may have.
pub const MAX_LAYERS: usize = 64;
/// The widest `d_model`: the GPU engine's fused output projection and LayerNorm normalises a
/// row in one workgroup of `d_model / 4` invocations (`kernels::matmul_q8_norm::N_MAX`).
pub const MAX_D_MODEL: usize = 1024;
/// The widest `d_ff`, the FFN's second product's `k` (the presets use 4 · d_model). The CPU
/// engine's int8 sums stay in an `i32`: at most 127² · k exactly (k up to 133,144), and at most
/// 255 · 127 · k in the kernels that add 128 to x (AVX-512 VNNI: k up to 66,311).
pub const MAX_D_FF: usize = 65_536;

/// Why a configuration cannot describe a model.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ConfigError {
    /// Attention heads must split `d_model` evenly.
    #[error("d_model = {d_model} is not divisible by n_heads = {n_heads}; pick sizes where it is")]
    HeadsDoNotDivide { d_model: usize, n_heads: usize },
    /// The int8 weight layout packs four input features per `u32`.
    #[error(
        "{name} = {value} is not a multiple of 4, which the int8 weight layout needs; \
         round it to a multiple of 4"
    )]
    NotMultipleOf4 { name: &'static str, value: usize },
    /// A size that must be positive is zero.
    #[error("{name} must be at least {min}, got {value}")]
    TooSmall {
        name: &'static str,
        value: usize,
        min: usize,
    },
    /// A size beyond what the engines are built for (a damaged manifest or a typo).
    #[error("{name} = {value} is more than the engines support ({max}); use at most {max}")]
    TooLarge {
        name: &'static str,
        value: usize,
        max: usize,
    },
    /// The GPU attention kernel's head-width limits.
    #[error(
        "heads of {d_head} features (d_model / n_heads): the GPU engine's attention kernel, \
         which every model must run on, needs a multiple of 4, at most {max}; choose d_model \
         and n_heads accordingly"
    )]
    BadHeadWidth { d_head: usize, max: usize },
    /// LayerNorm's epsilon must keep the division finite and not swamp the variance.
    #[error("layer_norm_eps = {0} must be a positive number below 1 (the presets use 1e-5)")]
    BadEpsilon(f64),
    /// Dropout is a probability.
    #[error("dropout = {0} must be in [0, 1)")]
    BadDropout(f64),
    /// An unknown preset name.
    #[error("unknown model preset '{0}'; choose one of: tiny, small, base")]
    UnknownPreset(String),
}

/// The sizes of the Transformer. Field names follow burn's vocabulary.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    /// Source vocabulary size (from the source tokenizer).
    pub src_vocab_size: usize,
    /// Target vocabulary size (from the target tokenizer); also the output projection's size.
    pub tgt_vocab_size: usize,
    /// Width of every residual stream.
    pub d_model: usize,
    /// Hidden width of the feed-forward blocks.
    pub d_ff: usize,
    /// Attention heads per attention block.
    pub n_heads: usize,
    /// Encoder layers.
    pub n_enc_layers: usize,
    /// Decoder layers.
    pub n_dec_layers: usize,
    /// Dropout on attention weights, sublayer outputs and embeddings (training only).
    pub dropout: f64,
    /// Longest source or target sequence in tokens, special tokens included.
    pub max_seq_len: usize,
    /// LayerNorm epsilon.
    pub layer_norm_eps: f64,
}

/// Fixed special token ids (the tokenizer guarantees them).
pub const PAD_ID: u32 = 0;
/// Unknown-token id.
pub const UNK_ID: u32 = 1;
/// Beginning-of-sequence id, the decoder's first input.
pub const BOS_ID: u32 = 2;
/// End-of-sequence id.
pub const EOS_ID: u32 = 3;

impl ModelConfig {
    /// The named preset with the given vocabulary sizes:
    /// - `tiny`: d_model 32, d_ff 64, 2 heads, 2 + 2 layers (tests; trains in seconds);
    /// - `small`: d_model 256, d_ff 1024, 4 heads, 3 + 3 layers, dropout 0.1 (the CPU default,
    ///   about 9–10 M parameters with 8k vocabularies, the size of the Multi30k tutorial model);
    /// - `base`: the paper and the reference implementation: d_model 512, d_ff 2048, 8 heads,
    ///   6 + 6 layers, dropout 0.3 (the reference's value).
    ///
    /// All presets use max_seq_len 150 (the reference's) and LayerNorm epsilon 1e-5.
    pub fn preset(
        name: &str,
        src_vocab_size: usize,
        tgt_vocab_size: usize,
    ) -> Result<Self, ConfigError> {
        let (d_model, d_ff, n_heads, layers, dropout) = match name {
            "tiny" => (32, 64, 2, 2, 0.1),
            "small" => (256, 1024, 4, 3, 0.1),
            "base" => (512, 2048, 8, 6, 0.3),
            other => return Err(ConfigError::UnknownPreset(other.to_string())),
        };
        let config = Self {
            src_vocab_size,
            tgt_vocab_size,
            d_model,
            d_ff,
            n_heads,
            n_enc_layers: layers,
            n_dec_layers: layers,
            dropout,
            max_seq_len: 150,
            layer_norm_eps: 1e-5,
        };
        config.validate()?;
        Ok(config)
    }

    /// Width of one attention head.
    pub fn d_head(&self) -> usize {
        self.d_model / self.n_heads
    }

    /// Checks every constraint the model, the int8 layout and the kernels rely on.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let at_least = |name, value, min| {
            if value < min {
                Err(ConfigError::TooSmall { name, value, min })
            } else {
                Ok(())
            }
        };
        // Four special tokens plus at least one real one.
        at_least("src_vocab_size", self.src_vocab_size, 5)?;
        at_least("tgt_vocab_size", self.tgt_vocab_size, 5)?;
        at_least("d_model", self.d_model, 4)?;
        at_least("d_ff", self.d_ff, 4)?;
        at_least("n_heads", self.n_heads, 1)?;
        at_least("n_enc_layers", self.n_enc_layers, 1)?;
        at_least("n_dec_layers", self.n_dec_layers, 1)?;
        // BOS + one token + EOS.
        at_least("max_seq_len", self.max_seq_len, 3)?;
        let at_most = |name, value, max| {
            if value > max {
                Err(ConfigError::TooLarge { name, value, max })
            } else {
                Ok(())
            }
        };
        at_most("max_seq_len", self.max_seq_len, MAX_SEQ_LEN)?;
        at_most("n_enc_layers", self.n_enc_layers, MAX_LAYERS)?;
        at_most("n_dec_layers", self.n_dec_layers, MAX_LAYERS)?;
        at_most("d_model", self.d_model, MAX_D_MODEL)?;
        at_most("d_ff", self.d_ff, MAX_D_FF)?;
        for (name, value) in [("d_model", self.d_model), ("d_ff", self.d_ff)] {
            if !value.is_multiple_of(4) {
                return Err(ConfigError::NotMultipleOf4 { name, value });
            }
        }
        if !self.d_model.is_multiple_of(self.n_heads) {
            return Err(ConfigError::HeadsDoNotDivide {
                d_model: self.d_model,
                n_heads: self.n_heads,
            });
        }
        let d_head = self.d_head();
        if !d_head.is_multiple_of(4) || d_head > D_HEAD_MAX {
            return Err(ConfigError::BadHeadWidth {
                d_head,
                max: D_HEAD_MAX,
            });
        }
        if !(0.0..1.0).contains(&self.dropout) {
            return Err(ConfigError::BadDropout(self.dropout));
        }
        if !(self.layer_norm_eps > 0.0 && self.layer_norm_eps < 1.0) {
            return Err(ConfigError::BadEpsilon(self.layer_norm_eps));
        }
        Ok(())
    }

    /// Whether `other` is the same model, dropout aside (a training setting, not a size).
    pub fn same_model(&self, other: &ModelConfig) -> bool {
        ModelConfig {
            dropout: self.dropout,
            ..other.clone()
        } == *self
    }

    /// Number of trainable parameters (the tied output projection counted once).
    pub fn n_params(&self) -> usize {
        let d = self.d_model;
        let attention = 4 * (d * d + d);
        let ffn = d * self.d_ff + self.d_ff + self.d_ff * d + d;
        let norm = 2 * d;
        let enc_layer = attention + ffn + 2 * norm;
        let dec_layer = 2 * attention + ffn + 3 * norm;
        (self.src_vocab_size + self.tgt_vocab_size) * d
            + self.n_enc_layers * enc_layer
            + self.n_dec_layers * dec_layer
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_are_valid_and_sized_as_documented() {
        let base = ModelConfig::preset("base", 16000, 16000).expect("valid preset");
        assert_eq!(
            (base.d_model, base.d_ff, base.n_heads, base.d_head()),
            (512, 2048, 8, 64)
        );
        // The paper's base model with two 16k vocabularies: ~60 M, as the reference reports.
        assert!(
            (55_000_000..65_000_000).contains(&base.n_params()),
            "{}",
            base.n_params()
        );
        let small = ModelConfig::preset("small", 8000, 8000).expect("valid preset");
        assert!(
            (9_000_000..10_500_000).contains(&small.n_params()),
            "{}",
            small.n_params()
        );
        ModelConfig::preset("tiny", 300, 300).expect("valid preset");
        assert_eq!(
            ModelConfig::preset("huge", 10, 10),
            Err(ConfigError::UnknownPreset("huge".into()))
        );
    }

    #[test]
    fn impossible_sizes_are_rejected() {
        let tiny = ModelConfig::preset("tiny", 300, 300).expect("valid preset");
        let heads = ModelConfig {
            n_heads: 3,
            ..tiny.clone()
        };
        assert_eq!(
            heads.validate(),
            Err(ConfigError::HeadsDoNotDivide {
                d_model: 32,
                n_heads: 3
            })
        );
        let d_ff = ModelConfig {
            d_ff: 66,
            ..tiny.clone()
        };
        assert!(matches!(
            d_ff.validate(),
            Err(ConfigError::NotMultipleOf4 { name: "d_ff", .. })
        ));
        let dropout = ModelConfig {
            dropout: 1.0,
            ..tiny.clone()
        };
        assert_eq!(dropout.validate(), Err(ConfigError::BadDropout(1.0)));
        let vocab = ModelConfig {
            tgt_vocab_size: 4,
            ..tiny.clone()
        };
        assert!(matches!(
            vocab.validate(),
            Err(ConfigError::TooSmall {
                name: "tgt_vocab_size",
                ..
            })
        ));
        // Values a damaged manifest could carry: no engine may size a table by them.
        for (config, name) in [
            (
                ModelConfig {
                    max_seq_len: usize::MAX,
                    ..tiny.clone()
                },
                "max_seq_len",
            ),
            (
                ModelConfig {
                    max_seq_len: MAX_SEQ_LEN + 1,
                    ..tiny.clone()
                },
                "max_seq_len",
            ),
            (
                ModelConfig {
                    n_enc_layers: MAX_LAYERS + 1,
                    ..tiny.clone()
                },
                "n_enc_layers",
            ),
            (
                ModelConfig {
                    n_dec_layers: MAX_LAYERS + 1,
                    ..tiny.clone()
                },
                "n_dec_layers",
            ),
            (
                // Heads of 128 features, as the attention kernel allows; too wide a row.
                ModelConfig {
                    d_model: MAX_D_MODEL + 256,
                    n_heads: (MAX_D_MODEL + 256) / 128,
                    ..tiny.clone()
                },
                "d_model",
            ),
            (
                ModelConfig {
                    d_ff: MAX_D_FF + 4,
                    ..tiny.clone()
                },
                "d_ff",
            ),
        ] {
            assert!(
                matches!(config.validate(), Err(ConfigError::TooLarge { name: n, .. }) if n == name),
                "{name}"
            );
        }
        let at_limit = ModelConfig {
            max_seq_len: MAX_SEQ_LEN,
            n_enc_layers: MAX_LAYERS,
            d_model: MAX_D_MODEL,
            n_heads: MAX_D_MODEL / 128,
            d_ff: MAX_D_FF,
            ..tiny.clone()
        };
        assert_eq!(at_limit.validate(), Ok(()));
        // 32 / 16 = 2 features a head: the attention kernel reads them 4 at a time.
        let narrow = ModelConfig {
            n_heads: 16,
            ..tiny.clone()
        };
        assert_eq!(
            narrow.validate(),
            Err(ConfigError::BadHeadWidth {
                d_head: 2,
                max: D_HEAD_MAX
            })
        );
        let wide = ModelConfig {
            d_model: 4 * D_HEAD_MAX,
            n_heads: 2,
            ..tiny.clone()
        };
        assert!(matches!(
            wide.validate(),
            Err(ConfigError::BadHeadWidth { .. })
        ));
        for eps in [0.0, -1e-5, 1.0, f64::NAN, f64::INFINITY] {
            let config = ModelConfig {
                layer_norm_eps: eps,
                ..tiny.clone()
            };
            assert!(
                matches!(config.validate(), Err(ConfigError::BadEpsilon(_))),
                "layer_norm_eps {eps}"
            );
        }
    }

    #[test]
    fn unknown_keys_are_rejected() {
        let json = r#"{"src_vocab_size":300,"tgt_vocab_size":300,"d_model":32,"d_ff":64,
            "n_heads":2,"n_enc_layers":2,"n_dec_layers":2,"dropout":0.1,"max_seq_len":150,
            "layer_norm_eps":1e-5,"n_layers":6}"#;
        let err = serde_json::from_str::<ModelConfig>(json).expect_err("n_layers is unknown");
        assert!(err.to_string().contains("n_layers"), "{err}");
    }
}
