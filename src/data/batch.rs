//! Token-budget batches of tokenized pairs, with length bucketing and a reproducible order.
//!
//! Sizes. A batch of `batch` pairs has `src_len = max |src|` and `tgt_len = max |tgt| + 1`
//! (the decoder input is BOS + target, its output target + EOS, both `|tgt| + 1` long). Its
//! padded size is `batch × max(src_len, tgt_len)`: one number that bounds both the encoder
//! tensor `[batch, src_len]` and the decoder tensors `[batch, tgt_len]`, and that is what
//! `max_tokens` limits. A pair whose own size exceeds `max_tokens` forms a batch by itself.
//!
//! Length limit. A pair is overlong when `|src| > max_seq_len` or `|tgt| + 1 > max_seq_len`.
//! [`Overlong::Drop`] (default) leaves it out; [`Overlong::Truncate`] cuts the source to
//! `max_seq_len` and the target to `max_seq_len − 1` tokens (the target then still ends with
//! EOS, which teaches the model to stop early: prefer dropping). Pairs with an empty side are
//! always left out (cleaned text never tokenizes to nothing, but an encoder row of pure padding
//! would make attention undefined). [`BatchStats`] counts each case.
//!
//! Order of one epoch, a pure function of `(seed, epoch)`:
//! 1. the usable pairs are shuffled (SplitMix64 keyed by seed and epoch);
//! 2. the shuffled list is cut into chunks of `bucket_pairs` pairs; each chunk is sorted by
//!    `(max(|src|, |tgt| + 1), |src|, |tgt|)` (stable, so ties stay shuffled) and packed greedily
//!    into batches under the budget — similar lengths share a batch, so padding stays small;
//! 3. the batches of all chunks are shuffled, so batch lengths come in random order.
//!
//! A resumed run calls [`Batcher::plan`] with the same seed and epoch and skips the batches it
//! has already trained on.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::error::DataError;
use super::rng::{BATCH_STREAM, SplitMix64};

/// One tokenized sentence pair: token ids without BOS or EOS on the target side.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenPair {
    /// Source token ids, as the encoder reads them.
    pub src: Vec<u32>,
    /// Target token ids, without BOS and EOS (the batch adds them).
    pub tgt: Vec<u32>,
}

impl TokenPair {
    /// A pair of id sequences.
    pub fn new(src: Vec<u32>, tgt: Vec<u32>) -> Self {
        Self { src, tgt }
    }
}

/// What to do with a pair longer than `max_seq_len`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Overlong {
    /// Leave the pair out (default).
    #[default]
    Drop,
    /// Cut the source to `max_seq_len` and the target to `max_seq_len − 1` tokens.
    Truncate,
}

/// Batching settings.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BatchConfig {
    /// Most padded tokens per batch, `batch × max(src_len, tgt_len)` (default 4096, about the
    /// reference's 128 sentences of ~30 tokens).
    pub max_tokens: usize,
    /// Longest sequence in tokens, source or target + 1 (default 150, the reference's
    /// `max_seq_length`). Not a key of `[batch]`: training sets it from the model's
    /// `max_seq_len`, so the two can never disagree.
    #[serde(skip)]
    pub max_seq_len: usize,
    /// Drop or truncate overlong pairs (default drop).
    pub overlong: Overlong,
    /// Pairs per sorting chunk (default 16384). Batches never span two chunks, so keep it many
    /// batches' worth: larger gives less padding but batches whose members repeat more from
    /// epoch to epoch.
    pub bucket_pairs: usize,
    /// Seed of the epoch order (default 0).
    pub seed: u64,
}

impl Default for BatchConfig {
    fn default() -> Self {
        Self {
            max_tokens: 4096,
            max_seq_len: 150,
            overlong: Overlong::Drop,
            bucket_pairs: 16384,
            seed: 0,
        }
    }
}

impl BatchConfig {
    /// Checks that batches can be formed with these settings.
    ///
    /// # Errors
    /// [`DataError::InvalidConfig`] when `max_tokens` or `bucket_pairs` is 0 or `max_seq_len`
    /// is below 2.
    pub fn validate(&self) -> Result<(), DataError> {
        let bad = |setting, value: usize, expected| {
            Err(DataError::InvalidConfig {
                setting,
                value: value.to_string(),
                expected,
            })
        };
        if self.max_tokens == 0 {
            return bad("batch.max_tokens", 0, "at least 1 (try 4096)");
        }
        if self.max_seq_len < 2 {
            return bad(
                "model.max_seq_len",
                self.max_seq_len,
                "at least 2: the decoder needs BOS or EOS plus one token",
            );
        }
        if self.bucket_pairs == 0 {
            return bad(
                "batch.bucket_pairs",
                0,
                "at least 1, and best many batches' worth (try 16384)",
            );
        }
        Ok(())
    }
}

/// The special token ids the batches use; they come from the target tokenizer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpecialIds {
    /// Padding, filled in after the real tokens of every row.
    pub pad: u32,
    /// Beginning of sentence: the first decoder input.
    pub bos: u32,
    /// End of sentence: the last decoder output.
    pub eos: u32,
}

/// A padded batch, every matrix row-major.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Batch {
    /// Number of pairs (rows).
    pub batch: usize,
    /// Longest source in the batch.
    pub src_len: usize,
    /// Longest target + 1.
    pub tgt_len: usize,
    /// `[batch, src_len]` source ids, padded with `pad`.
    pub src: Vec<u32>,
    /// `[batch, tgt_len]` decoder input: BOS then the target, padded with `pad`.
    pub tgt_in: Vec<u32>,
    /// `[batch, tgt_len]` decoder output: the target then EOS, padded with `pad`.
    pub tgt_out: Vec<u32>,
    /// `[batch]` real source length of each row.
    pub src_lens: Vec<usize>,
    /// `[batch]` real decoder length of each row (target + 1).
    pub tgt_lens: Vec<usize>,
    /// Real target tokens (EOS included): the tokens the loss is averaged over.
    pub n_tgt_tokens: usize,
    /// The padding id used.
    pub pad: u32,
    /// `[batch]` index of each row in the pairs given to [`Batcher::new`].
    pub rows: Vec<usize>,
}

impl Batch {
    /// `batch × max(src_len, tgt_len)`: the size the token budget limits.
    pub fn padded_tokens(&self) -> usize {
        self.batch * self.src_len.max(self.tgt_len)
    }
}

/// What happened to the pairs given to [`Batcher::new`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct BatchStats {
    /// Pairs given.
    pub input: usize,
    /// Pairs that will be batched (truncated ones included).
    pub kept: usize,
    /// Overlong pairs left out ([`Overlong::Drop`]).
    pub dropped_too_long: usize,
    /// Overlong pairs cut to fit ([`Overlong::Truncate`]).
    pub truncated: usize,
    /// Pairs left out because a side had no tokens.
    pub dropped_empty: usize,
}

impl fmt::Display for BatchStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        super::write_rows(
            f,
            &[
                ("tokenized pairs", self.input),
                ("empty side (dropped)", self.dropped_empty),
                ("too long (dropped)", self.dropped_too_long),
                ("too long (truncated)", self.truncated),
                ("batched", self.kept),
            ],
        )
    }
}

/// How much of an epoch's batches is padding.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct PaddingStats {
    /// Batches in the epoch.
    pub batches: usize,
    /// Pairs in the epoch.
    pub pairs: usize,
    /// Real tokens: `Σ |src| + (|tgt| + 1)` over the pairs.
    pub real_tokens: usize,
    /// Tensor slots: `Σ batch × (src_len + tgt_len)` over the batches.
    pub padded_tokens: usize,
}

impl PaddingStats {
    /// Padding as a fraction of real tokens: `padded / real − 1`.
    pub fn overhead(&self) -> f64 {
        if self.real_tokens == 0 {
            0.0
        } else {
            self.padded_tokens as f64 / self.real_tokens as f64 - 1.0
        }
    }
}

impl fmt::Display for PaddingStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} pairs in {} batches, {} real tokens in {} slots: {:.1}% padding overhead",
            self.pairs,
            self.batches,
            self.real_tokens,
            self.padded_tokens,
            100.0 * self.overhead()
        )
    }
}

/// Turns tokenized pairs into epochs of padded batches.
#[derive(Clone, Debug)]
pub struct Batcher {
    /// All pairs given, truncated where the config says so.
    pairs: Vec<TokenPair>,
    /// Indices into `pairs` of the pairs that are batched.
    usable: Vec<usize>,
    config: BatchConfig,
    ids: SpecialIds,
    stats: BatchStats,
}

impl Batcher {
    /// Checks every pair against `max_seq_len` and keeps the ones that can be batched.
    ///
    /// # Errors
    /// [`DataError::InvalidConfig`] for bad settings, [`DataError::NothingToBatch`] when no
    /// pair is left (including when `pairs` is empty).
    pub fn new(
        mut pairs: Vec<TokenPair>,
        config: &BatchConfig,
        ids: SpecialIds,
    ) -> Result<Self, DataError> {
        config.validate()?;
        let max = config.max_seq_len;
        let mut stats = BatchStats {
            input: pairs.len(),
            ..BatchStats::default()
        };
        let mut usable = Vec::with_capacity(pairs.len());
        for (i, p) in pairs.iter_mut().enumerate() {
            if p.src.is_empty() || p.tgt.is_empty() {
                stats.dropped_empty += 1;
                continue;
            }
            if p.src.len() > max || p.tgt.len() + 1 > max {
                match config.overlong {
                    Overlong::Drop => {
                        stats.dropped_too_long += 1;
                        continue;
                    }
                    Overlong::Truncate => {
                        p.src.truncate(max);
                        p.tgt.truncate(max - 1);
                        stats.truncated += 1;
                    }
                }
            }
            usable.push(i);
        }
        stats.kept = usable.len();
        if usable.is_empty() {
            return Err(DataError::NothingToBatch {
                pairs: stats.input,
                too_long: stats.dropped_too_long,
                empty: stats.dropped_empty,
                max_seq_len: max,
            });
        }
        Ok(Self {
            pairs,
            usable,
            config: config.clone(),
            ids,
            stats,
        })
    }

    /// What happened to the pairs given.
    pub fn stats(&self) -> &BatchStats {
        &self.stats
    }

    /// Number of pairs batched per epoch.
    pub fn len(&self) -> usize {
        self.usable.len()
    }

    /// Whether no pair is batched (never true for a constructed batcher).
    pub fn is_empty(&self) -> bool {
        self.usable.is_empty()
    }

    /// The batches of `epoch`, each a list of indices into the pairs given to [`Batcher::new`],
    /// in training order. The same `(seed, epoch)` always gives the same plan.
    pub fn plan(&self, epoch: u64) -> Vec<Vec<usize>> {
        let mut rng = SplitMix64::keyed(&[self.config.seed, BATCH_STREAM, epoch]);
        let mut order = self.usable.clone();
        rng.shuffle(&mut order);
        let size = |i: usize| {
            let p = &self.pairs[i];
            p.src.len().max(p.tgt.len() + 1)
        };
        let mut batches = Vec::new();
        for chunk in order.chunks_mut(self.config.bucket_pairs) {
            chunk.sort_by_key(|&i| (size(i), self.pairs[i].src.len(), self.pairs[i].tgt.len()));
            let mut rows: Vec<usize> = Vec::new();
            let mut longest = 0;
            for &i in chunk.iter() {
                let l = longest.max(size(i));
                if !rows.is_empty() && (rows.len() + 1) * l > self.config.max_tokens {
                    batches.push(std::mem::take(&mut rows));
                    longest = size(i);
                } else {
                    longest = l;
                }
                rows.push(i);
            }
            if !rows.is_empty() {
                batches.push(rows);
            }
        }
        rng.shuffle(&mut batches);
        batches
    }

    /// The batches of `epoch` from batch number `start` on (0 for a fresh epoch; the number
    /// already trained on when resuming), built one at a time.
    pub fn epoch(&self, epoch: u64, start: usize) -> impl Iterator<Item = Batch> + '_ {
        self.plan(epoch)
            .into_iter()
            .skip(start)
            .map(move |rows| self.batch(&rows))
    }

    /// The padded batch of the given rows (indices into the pairs given to [`Batcher::new`],
    /// as [`Batcher::plan`] returns them).
    ///
    /// # Panics
    /// If a row is not an index of the pairs given; plans never contain such rows.
    pub fn batch(&self, rows: &[usize]) -> Batch {
        let SpecialIds { pad, bos, eos } = self.ids;
        let pairs: Vec<&TokenPair> = rows.iter().map(|&i| &self.pairs[i]).collect();
        let src_len = pairs.iter().map(|p| p.src.len()).max().unwrap_or(0);
        let tgt_len = pairs.iter().map(|p| p.tgt.len() + 1).max().unwrap_or(0);
        let n = pairs.len();
        let mut src = vec![pad; n * src_len];
        let mut tgt_in = vec![pad; n * tgt_len];
        let mut tgt_out = vec![pad; n * tgt_len];
        for (r, p) in pairs.iter().enumerate() {
            src[r * src_len..][..p.src.len()].copy_from_slice(&p.src);
            let row_in = &mut tgt_in[r * tgt_len..][..p.tgt.len() + 1];
            row_in[0] = bos;
            row_in[1..].copy_from_slice(&p.tgt);
            let row_out = &mut tgt_out[r * tgt_len..][..p.tgt.len() + 1];
            row_out[..p.tgt.len()].copy_from_slice(&p.tgt);
            row_out[p.tgt.len()] = eos;
        }
        let tgt_lens: Vec<usize> = pairs.iter().map(|p| p.tgt.len() + 1).collect();
        Batch {
            batch: n,
            src_len,
            tgt_len,
            src,
            tgt_in,
            tgt_out,
            src_lens: pairs.iter().map(|p| p.src.len()).collect(),
            n_tgt_tokens: tgt_lens.iter().sum(),
            tgt_lens,
            pad,
            rows: rows.to_vec(),
        }
    }

    /// Padding of a plan (as returned by [`Batcher::plan`], or any list of row lists).
    ///
    /// # Panics
    /// If a row is not an index of the pairs given.
    pub fn padding(&self, plan: &[Vec<usize>]) -> PaddingStats {
        let mut stats = PaddingStats {
            batches: plan.len(),
            ..PaddingStats::default()
        };
        for rows in plan {
            let (mut s, mut t) = (0, 0);
            for &i in rows {
                let p = &self.pairs[i];
                s = s.max(p.src.len());
                t = t.max(p.tgt.len() + 1);
                stats.real_tokens += p.src.len() + p.tgt.len() + 1;
            }
            stats.pairs += rows.len();
            stats.padded_tokens += rows.len() * (s + t);
        }
        stats
    }
}
