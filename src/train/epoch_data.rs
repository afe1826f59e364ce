//! What each epoch trains on, when it is not the same every epoch: `[sampling]` in the config.
//!
//! - **Subword regularization** (`subword_alpha` > 0): every epoch encodes each pair anew with
//!   a segmentation sampled from the Unigram lattice ([`SubwordSampler`]), source and target,
//!   so the model sees many spellings of a word in pieces (Kudo 2018). Decoding and validation
//!   keep the Viterbi segmentation.
//! - **Per-origin weights** (`origin_weights`, by `train.origin` tag; 1 when not listed): a pair
//!   of weight `w` appears `⌊w⌋` times per epoch plus once more with probability `w − ⌊w⌋`, so
//!   0.3 keeps about 30% of a large out-of-domain origin each epoch (a different 30% every
//!   epoch), 2 doubles a small in-domain one and 0 leaves an origin out.
//!
//! Every draw is keyed by `(seed, epoch, pair, copy)`: an epoch's pairs are a function of the
//! epoch alone, computed in parallel, and a resumed run regenerates them exactly.

use std::collections::BTreeMap;

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::data::{BatchConfig, Batcher, Corpus, SpecialIds, SplitMix64, TokenPair};
use crate::tokenizer::{SubwordSampler, Tokenizer};

/// The largest per-origin weight: a pair at most this many times an epoch (a larger value is a
/// typo, and would fill memory with copies).
pub const MAX_ORIGIN_WEIGHT: f64 = 100.0;

/// `[sampling]`: how each epoch's pairs are drawn from the training split.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SamplingConfig {
    /// Subword-regularization smoothing α (0: off, always the Viterbi segmentation;
    /// SentencePiece's usual values are 0.1–0.5; smaller is more random).
    pub subword_alpha: f64,
    /// Copies per epoch of each pair of an origin tag (fractions are sampled; default 1).
    pub origin_weights: BTreeMap<String, f64>,
    /// Seed of the draws (default 0).
    pub seed: u64,
}

impl SamplingConfig {
    /// True when every epoch trains on the same pairs, segmented the same way.
    pub fn is_fixed(&self) -> bool {
        self.subword_alpha == 0.0 && self.origin_weights.values().all(|&w| w == 1.0)
    }

    /// Checks the values.
    pub fn validate(&self) -> Result<(), String> {
        if !(self.subword_alpha.is_finite() && self.subword_alpha >= 0.0) {
            return Err(format!(
                "sampling.subword_alpha = {} must be 0 (off) or positive (try 0.1-0.5)",
                self.subword_alpha
            ));
        }
        if let Some((tag, w)) = self
            .origin_weights
            .iter()
            .find(|(_, w)| !(w.is_finite() && (0.0..=MAX_ORIGIN_WEIGHT).contains(*w)))
        {
            return Err(format!(
                "sampling.origin_weights: {tag} = {w} must be a number from 0 to \
                 {MAX_ORIGIN_WEIGHT} (the times a pair of that origin appears per epoch)"
            ));
        }
        Ok(())
    }

    /// Parses `tag=weight,tag=weight` (the `--origin-weights` flag) into `origin_weights`.
    pub fn parse_weights(text: &str) -> Result<BTreeMap<String, f64>, String> {
        text.split(',')
            .filter(|item| !item.trim().is_empty())
            .map(|item| {
                let (tag, weight) = item
                    .split_once('=')
                    .ok_or_else(|| format!("'{item}' is not tag=weight"))?;
                let weight: f64 = weight
                    .trim()
                    .parse()
                    .map_err(|_| format!("'{weight}' in '{item}' is not a number"))?;
                Ok((tag.trim().to_string(), weight))
            })
            .collect()
    }
}

/// Builds the batches of any epoch from the cleaned training split.
pub struct EpochData<'a> {
    corpus: &'a Corpus,
    /// The Viterbi encodings, used when sampling is off.
    fixed: &'a [TokenPair],
    samplers: Option<(SubwordSampler, SubwordSampler)>,
    weights: Vec<f64>,
    config: SamplingConfig,
    batch: BatchConfig,
    ids: SpecialIds,
}

/// Stream separators of the two kinds of draws.
const COPIES: u64 = 0x434f_5049_4553_0004; // "COPIES"
const SEGMENT: u64 = 0x5345_474d_454e_0005; // "SEGMEN"

impl<'a> EpochData<'a> {
    /// `fixed[i]` is the Viterbi encoding of `corpus.pairs[i]`. Tags in `origin_weights`
    /// that no pair carries are an error (a typo would silently weigh nothing).
    pub fn new(
        corpus: &'a Corpus,
        fixed: &'a [TokenPair],
        tokenizers: (&Tokenizer, &Tokenizer),
        config: &SamplingConfig,
        batch: &BatchConfig,
        ids: SpecialIds,
    ) -> Result<Self, String> {
        config.validate()?;
        let tags: std::collections::BTreeSet<&str> = corpus
            .pairs
            .iter()
            .filter_map(|p| p.tag.as_deref())
            .collect();
        if let Some(tag) = config
            .origin_weights
            .keys()
            .find(|t| !tags.contains(t.as_str()))
        {
            return Err(format!(
                "sampling.origin_weights names '{tag}', which no training pair carries; \
                 the tags are: {}",
                tags.into_iter().collect::<Vec<_>>().join(", ")
            ));
        }
        let samplers = if config.subword_alpha > 0.0 {
            let sampler = |t| SubwordSampler::new(t, config.subword_alpha);
            Some((
                sampler(tokenizers.0).map_err(|e| e.to_string())?,
                sampler(tokenizers.1).map_err(|e| e.to_string())?,
            ))
        } else {
            None
        };
        let weights = corpus
            .pairs
            .iter()
            .map(|p| {
                p.tag
                    .as_ref()
                    .and_then(|t| config.origin_weights.get(t))
                    .copied()
                    .unwrap_or(1.0)
            })
            .collect();
        Ok(Self {
            corpus,
            fixed,
            samplers,
            weights,
            config: config.clone(),
            batch: batch.clone(),
            ids,
        })
    }

    /// The pairs of `epoch`, in corpus order (the batcher shuffles them).
    pub fn pairs(&self, epoch: u64) -> Result<Vec<TokenPair>, String> {
        let seed = self.config.seed;
        let per_pair: Result<Vec<Vec<TokenPair>>, String> = (0..self.fixed.len())
            .into_par_iter()
            .map(|i| {
                let w = self.weights[i];
                let mut rng = SplitMix64::keyed(&[seed, COPIES, epoch, i as u64]);
                let extra = (w.fract() > 0.0
                    && ((rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64) < w.fract())
                    as usize;
                let copies = w.trunc() as usize + extra;
                (0..copies)
                    .map(|copy| match &self.samplers {
                        None => Ok(self.fixed[i].clone()),
                        Some((src, tgt)) => {
                            let key = |side: u64| {
                                SplitMix64::keyed(&[
                                    seed,
                                    SEGMENT,
                                    epoch,
                                    i as u64,
                                    copy as u64,
                                    side,
                                ])
                                .next_u64()
                            };
                            let pair = &self.corpus.pairs[i];
                            Ok(TokenPair::new(
                                src.encode(&pair.source, key(0))
                                    .map_err(|e| e.to_string())?,
                                tgt.encode(&pair.target, key(1))
                                    .map_err(|e| e.to_string())?,
                            ))
                        }
                    })
                    .collect()
            })
            .collect();
        Ok(per_pair?.into_iter().flatten().collect())
    }

    /// The batcher of `epoch`.
    pub fn batcher(&self, epoch: u64) -> Result<Batcher, String> {
        Batcher::new(self.pairs(epoch)?, &self.batch, self.ids).map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::Pair;

    fn corpus() -> Corpus {
        let pair = |s: &str, t: &str, tag: &str| Pair {
            source: s.into(),
            target: t.into(),
            tag: Some(tag.into()),
            line: 0,
        };
        Corpus::new(
            "test",
            (0..400)
                .map(|i| {
                    if i % 4 == 0 {
                        pair("ab ab", "ab", "small")
                    } else {
                        pair("ba", "ab ba", "big")
                    }
                })
                .collect(),
        )
    }

    fn tokenizer() -> Tokenizer {
        Tokenizer::from_pieces(
            [
                ("▁", -2.0),
                ("a", -2.0),
                ("b", -2.0),
                ("▁a", -1.5),
                ("▁ab", -1.0),
            ]
            .map(|(p, s)| (p.to_string(), s)),
        )
        .expect("valid pieces")
    }

    fn data<'a>(
        corpus: &'a Corpus,
        fixed: &'a [TokenPair],
        t: &Tokenizer,
        config: &SamplingConfig,
    ) -> Result<EpochData<'a>, String> {
        let ids = SpecialIds {
            pad: 0,
            bos: 2,
            eos: 3,
        };
        EpochData::new(corpus, fixed, (t, t), config, &BatchConfig::default(), ids)
    }

    fn fixed(corpus: &Corpus, t: &Tokenizer) -> Vec<TokenPair> {
        corpus
            .pairs
            .iter()
            .map(|p| {
                TokenPair::new(
                    t.encode(&p.source).expect("encodes"),
                    t.encode(&p.target).expect("encodes"),
                )
            })
            .collect()
    }

    #[test]
    fn origin_weights_scale_each_origin_per_epoch() {
        let (c, t) = (corpus(), tokenizer());
        let f = fixed(&c, &t);
        let config = SamplingConfig {
            origin_weights: [("small".to_string(), 2.0), ("big".to_string(), 0.5)].into(),
            ..SamplingConfig::default()
        };
        let d = data(&c, &f, &t, &config).expect("valid");
        let e1 = d.pairs(1).expect("pairs");
        // 100 small pairs twice; about half of 300 big ones.
        let small = e1.iter().filter(|p| p == &&f[0]).count();
        assert_eq!(small, 200);
        let big = e1.len() - small;
        assert!((120..=180).contains(&big), "{big}");
        assert_eq!(e1, d.pairs(1).expect("pairs"), "an epoch is deterministic");
        assert_ne!(e1, d.pairs(2).expect("pairs"), "epochs differ");
        let typo = SamplingConfig {
            origin_weights: [("smal".to_string(), 2.0)].into(),
            ..SamplingConfig::default()
        };
        let err = data(&c, &f, &t, &typo).err().expect("unknown tag");
        assert!(err.contains("smal") && err.contains("big"), "{err}");
    }

    #[test]
    fn subword_sampling_changes_segmentations_not_text() {
        let (c, t) = (corpus(), tokenizer());
        let f = fixed(&c, &t);
        let config = SamplingConfig {
            subword_alpha: 0.2,
            ..SamplingConfig::default()
        };
        assert!(!config.is_fixed());
        let d = data(&c, &f, &t, &config).expect("valid");
        let (e0, e1) = (d.pairs(0).expect("pairs"), d.pairs(1).expect("pairs"));
        assert_eq!(e0.len(), c.pairs.len());
        assert_ne!(e0, e1);
        for (p, sampled) in c.pairs.iter().zip(&e1) {
            assert_eq!(t.decode(&sampled.src).expect("decodes"), p.source);
            assert_eq!(t.decode(&sampled.tgt).expect("decodes"), p.target);
        }
        assert!(e1.iter().zip(&f).any(|(a, b)| a != b));
    }

    #[test]
    fn weights_flag_parses_and_rejects_garbage() {
        let w = SamplingConfig::parse_weights("bible=0.3, ted=2").expect("parses");
        assert_eq!(w.get("bible"), Some(&0.3));
        assert_eq!(w.get("ted"), Some(&2.0));
        assert!(SamplingConfig::parse_weights("bible").is_err());
        assert!(SamplingConfig::parse_weights("bible=x").is_err());
        for (weight, valid) in [(0.0, true), (MAX_ORIGIN_WEIGHT, true), (-0.5, false)]
            .into_iter()
            .chain([(1e18, false), (f64::NAN, false), (f64::INFINITY, false)])
        {
            let config = SamplingConfig {
                origin_weights: [("ted".to_string(), weight)].into(),
                ..SamplingConfig::default()
            };
            assert_eq!(config.validate().is_ok(), valid, "weight {weight}");
        }
    }
}
