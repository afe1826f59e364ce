//! Subword regularization: sampled Unigram segmentations for training (Kudo 2018, "Subword
//! Regularization", as SentencePiece's `enable_sampling` with `nbest_size = -1`).
//!
//! [`Tokenizer::encode`] always returns the best (Viterbi) segmentation. For training, a
//! [`SubwordSampler`] draws a segmentation `x` of each word with probability proportional to
//! `P(x)^alpha`, where `P(x)` is the product of the Unigram pieces' probabilities: small `alpha`
//! (0.1) samples almost uniformly among the segmentations the vocabulary allows, large `alpha`
//! approaches the Viterbi one. The draw is exact over the whole lattice (forward filtering,
//! backward sampling) and deterministic: the same text, `alpha` and seed give the same ids, so a
//! resumed run sees the same data.
//!
//! The text goes through the tokenizer's own normalizer and pre-tokenizer first, so sampled and
//! Viterbi encodings split words identically; characters without a piece become `<unk>`, one per
//! run, as in [`Tokenizer::encode`].

use std::collections::HashMap;

use tokenizers::ModelWrapper;
use tokenizers::normalizers::NormalizerWrapper;
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::tokenizer::{
    Normalizer, OffsetReferential, OffsetType, PreTokenizedString, PreTokenizer,
};

use super::{Tokenizer, TokenizerError, UNK_ID};
use crate::data::SplitMix64;

/// `tokenizers`' Unigram scores an unknown character `min score − 10`.
const UNK_PENALTY: f64 = 10.0;

/// Draws random segmentations from a tokenizer's Unigram lattice.
#[derive(Clone, Debug)]
pub struct SubwordSampler {
    normalizer: NormalizerWrapper,
    pre_tokenizer: PreTokenizerWrapper,
    /// Piece → (id, log-probability), special tokens left out.
    pieces: HashMap<String, (u32, f64)>,
    /// Longest piece, in characters.
    max_chars: usize,
    unk_score: f64,
    alpha: f64,
}

impl SubwordSampler {
    /// A sampler over `tokenizer`'s vocabulary with smoothing `alpha` (> 0; SentencePiece's
    /// recommended range is 0.1–0.5).
    pub fn new(tokenizer: &Tokenizer, alpha: f64) -> Result<Self, TokenizerError> {
        let build = |message: &str| TokenizerError::Build {
            message: format!("subword sampling: {message}"),
        };
        if !(alpha.is_finite() && alpha > 0.0) {
            return Err(build(&format!(
                "alpha must be a positive number, got {alpha}"
            )));
        }
        let ModelWrapper::Unigram(model) = tokenizer.inner.get_model() else {
            return Err(build("the tokenizer's model is not Unigram"));
        };
        let normalizer = tokenizer
            .inner
            .get_normalizer()
            .cloned()
            .ok_or_else(|| build("the tokenizer has no normalizer"))?;
        let pre_tokenizer = tokenizer
            .inner
            .get_pre_tokenizer()
            .cloned()
            .ok_or_else(|| build("the tokenizer has no pre-tokenizer"))?;
        let mut pieces = HashMap::new();
        let (mut max_chars, mut min_score) = (1, f64::INFINITY);
        for (id, (piece, score)) in (0u32..).zip(model.iter()) {
            if id <= super::EOS_ID {
                continue; // control symbols never match text
            }
            max_chars = max_chars.max(piece.chars().count());
            min_score = min_score.min(*score);
            pieces.insert(piece.clone(), (id, *score));
        }
        Ok(Self {
            normalizer,
            pre_tokenizer,
            pieces,
            max_chars,
            unk_score: min_score - UNK_PENALTY,
            alpha,
        })
    }

    /// One sampled segmentation of `text` as ids (no BOS/EOS), deterministic in `seed`.
    pub fn encode(&self, text: &str, seed: u64) -> Result<Vec<u32>, TokenizerError> {
        let err = |e: tokenizers::Error| TokenizerError::Encode {
            message: e.to_string(),
        };
        let mut pre = PreTokenizedString::from(text);
        pre.normalize(|s| self.normalizer.normalize(s))
            .map_err(err)?;
        self.pre_tokenizer.pre_tokenize(&mut pre).map_err(err)?;
        let mut rng = SplitMix64::keyed(&[seed, SAMPLE_STREAM]);
        let mut ids = Vec::new();
        for (word, _, _) in pre.get_splits(OffsetReferential::Original, OffsetType::Byte) {
            self.sample_word(word, &mut rng, &mut ids);
        }
        Ok(ids)
    }

    /// Appends a sampled segmentation of one pre-tokenized word to `out`.
    fn sample_word(&self, word: &str, rng: &mut SplitMix64, out: &mut Vec<u32>) {
        // Byte offset of every character boundary.
        let bounds: Vec<usize> = word
            .char_indices()
            .map(|(i, _)| i)
            .chain(std::iter::once(word.len()))
            .collect();
        let n = bounds.len() - 1;
        if n == 0 {
            return;
        }
        // Lattice edges ending at each boundary: (start boundary, id, score).
        let mut ending: Vec<Vec<(usize, u32, f64)>> = vec![Vec::new(); n + 1];
        for start in 0..n {
            let mut single = false;
            for end in start + 1..=(start + self.max_chars).min(n) {
                if let Some(&(id, score)) = self.pieces.get(&word[bounds[start]..bounds[end]]) {
                    ending[end].push((start, id, score));
                    single |= end == start + 1;
                }
            }
            if !single {
                ending[start + 1].push((start, UNK_ID, self.unk_score));
            }
        }
        // Forward: log of the summed weight of all paths from the start to each boundary.
        let mut forward = vec![f64::NEG_INFINITY; n + 1];
        forward[0] = 0.0;
        for end in 1..=n {
            forward[end] = log_sum_exp(
                ending[end]
                    .iter()
                    .map(|&(start, _, score)| forward[start] + self.alpha * score),
            );
        }
        // Backward: from the end, pick each incoming edge by its share of the paths.
        let first = out.len();
        let mut end = n;
        while end > 0 {
            let edges = &ending[end];
            let weights: Vec<f64> = edges
                .iter()
                .map(|&(start, _, score)| {
                    (forward[start] + self.alpha * score - forward[end]).exp()
                })
                .collect();
            let total: f64 = weights.iter().sum();
            let mut u = uniform(rng) * total;
            let mut pick = edges.len() - 1;
            for (i, w) in weights.iter().enumerate() {
                if u < *w {
                    pick = i;
                    break;
                }
                u -= w;
            }
            let (start, id, _) = edges[pick];
            // Runs of unknown characters are one <unk>, as in `Tokenizer::encode`.
            if !(id == UNK_ID && out.last() == Some(&UNK_ID) && out.len() > first) {
                out.push(id);
            }
            end = start;
        }
        out[first..].reverse();
    }
}

/// Domain separator of the sampling stream.
const SAMPLE_STREAM: u64 = 0x5341_4d50_4c45_0003; // "SAMPLE"

/// A uniform number in [0, 1) from 53 random bits.
fn uniform(rng: &mut SplitMix64) -> f64 {
    (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64
}

fn log_sum_exp(values: impl Iterator<Item = f64> + Clone) -> f64 {
    let max = values.clone().fold(f64::NEG_INFINITY, f64::max);
    if max == f64::NEG_INFINITY {
        return max;
    }
    max + values.map(|v| (v - max).exp()).sum::<f64>().ln()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `▁ab` can be spelled `▁ab`, `▁a b` or `▁ a b` ...
    fn tokenizer() -> Tokenizer {
        Tokenizer::from_pieces(
            [
                ("▁", -2.0),
                ("a", -2.0),
                ("b", -2.0),
                ("▁a", -1.5),
                ("▁ab", -1.0),
                ("c", -3.0),
            ]
            .map(|(p, s)| (p.to_string(), s)),
        )
        .expect("valid pieces")
    }

    fn spell(t: &Tokenizer, ids: &[u32]) -> String {
        ids.iter()
            .map(|&id| t.id_to_token(id).unwrap_or_default())
            .collect::<Vec<_>>()
            .join(" ")
    }

    #[test]
    fn samples_follow_the_unigram_distribution() {
        let t = tokenizer();
        let sampler = SubwordSampler::new(&t, 1.0).expect("sampler");
        // Segmentations of `▁ab` and their probabilities at alpha 1:
        // ▁ab e^-1; ▁a b e^-3.5; ▁ a b e^-6 (and ▁ ab is not a piece).
        let weights = [(-1.0f64).exp(), (-3.5f64).exp(), (-6.0f64).exp()];
        let total: f64 = weights.iter().sum();
        let mut counts: HashMap<String, usize> = HashMap::new();
        let n = 20_000;
        for seed in 0..n {
            let ids = sampler.encode("ab", seed).expect("encodes");
            *counts.entry(spell(&t, &ids)).or_default() += 1;
        }
        for (spelling, w) in ["▁ab", "▁a b", "▁ a b"].iter().zip(weights) {
            let share = counts.get(*spelling).copied().unwrap_or(0) as f64 / n as f64;
            let expected = w / total;
            assert!(
                (share - expected).abs() < 0.01,
                "{spelling}: {share} vs {expected} ({counts:?})"
            );
        }
        assert_eq!(counts.len(), 3, "{counts:?}");
    }

    #[test]
    fn sampling_is_deterministic_and_decodes_to_the_text() {
        let t = tokenizer();
        let sampler = SubwordSampler::new(&t, 0.2).expect("sampler");
        let text = "ab  ab cab";
        let mut seen = std::collections::HashSet::new();
        for seed in 0..50 {
            let ids = sampler.encode(text, seed).expect("encodes");
            assert_eq!(ids, sampler.encode(text, seed).expect("encodes"));
            assert_eq!(t.decode(&ids).expect("decodes"), "ab ab cab");
            seen.insert(ids);
        }
        assert!(seen.len() > 5, "only {} segmentations", seen.len());
    }

    #[test]
    fn unknown_runs_are_one_unk_and_high_alpha_is_viterbi() {
        let t = tokenizer();
        let sampler = SubwordSampler::new(&t, 50.0).expect("sampler");
        let text = "ab xyz ab";
        assert_eq!(
            sampler.encode(text, 7).expect("encodes"),
            t.encode(text).expect("encodes")
        );
        assert!(SubwordSampler::new(&t, 0.0).is_err());
    }
}
