//! Text in → text out, the same for every engine: the GPU engine ([`crate::infer`]) and the
//! burn model (`model`, feature `train`) both plug into [`translate`].
//!
//! - An engine implements [`TranslationEngine`]: its tokenizers and config, the encoder over a
//!   batch of source pieces, one search per piece and, for heatmaps, the cross-attention
//!   weights of a given target. Everything else happens here, once.
//! - [`translate`] splits the text into sentences ([`text::split_sentences`]), cuts a sentence
//!   longer than `max_seq_len` tokens into chunks (translated one by one, never cut off),
//!   encodes the pieces in batches of at most [`ENCODER_BATCH`], searches each piece, lists
//!   each distinct n-best translation once, joins the chunks of a sentence, and assembles the
//!   optional heatmaps and the timings.
//! - So two engines that score the same tokens give the same text: `evaluate --cpu` and the
//!   burn rows of `bench` translate exactly as the page and `translate` do.

#[cfg(test)]
mod tests;
pub mod text;

use crate::config::{BOS_ID, EOS_ID, ModelConfig};
use crate::gpu::GpuCounts;
use crate::search::{Hypothesis, SearchOptions, SearchResult};
use crate::tokenizer::{Tokenizer, TokenizerError};
use serde::Serialize;

/// The most sentences (or pieces of long sentences) encoded in one pass.
pub const ENCODER_BATCH: usize = 32;

/// Milliseconds from an arbitrary origin, on both targets (`Instant` panics in the browser).
pub fn now_ms() -> f64 {
    #[cfg(target_arch = "wasm32")]
    {
        js_sys::Date::now()
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        use std::sync::OnceLock;
        static START: OnceLock<std::time::Instant> = OnceLock::new();
        START
            .get_or_init(std::time::Instant::now)
            .elapsed()
            .as_secs_f64()
            * 1000.0
    }
}

/// A model that [`translate`] can drive: the encoder, the search of one piece and the
/// cross-attention of a target. Pieces are token ids without BOS/EOS, 1..=`max_seq_len` long.
pub trait TranslationEngine {
    /// What can go wrong inside the engine.
    type Error: std::error::Error + 'static;
    /// The encoder's output for a batch of pieces.
    type Encoded;

    /// The model's sizes (`max_seq_len` cuts sentences into pieces; `n_heads` for heatmaps).
    fn config(&self) -> &ModelConfig;

    fn source_tokenizer(&self) -> &Tokenizer;

    fn target_tokenizer(&self) -> &Tokenizer;

    /// Checks that `options` are valid and that the engine can serve them.
    fn check_options(&self, options: &SearchOptions) -> Result<(), Self::Error>;

    /// Runs the encoder over `sources`: 1..=[`ENCODER_BATCH`] pieces.
    fn encode(
        &self,
        sources: &[Vec<u32>],
    ) -> impl Future<Output = Result<Self::Encoded, Self::Error>>;

    /// Beam search (greedy for beam 1) for piece `i` of `encoded`.
    fn search(
        &self,
        encoded: &Self::Encoded,
        i: usize,
        options: &SearchOptions,
    ) -> impl Future<Output = Result<(SearchResult, SearchStats), Self::Error>>;

    /// The last decoder layer's cross-attention weights `[n_heads, T, source_len]` for piece
    /// `i` of `encoded` when the decoder reads `target_in` (BOS first, `T` tokens) at once.
    fn cross_attention(
        &self,
        encoded: &Self::Encoded,
        i: usize,
        target_in: &[u32],
    ) -> impl Future<Output = Result<Vec<f32>, Self::Error>>;

    /// The GPU work counted so far; [`translate`] reports the difference. Zero for an engine
    /// that does not count.
    fn counts(&self) -> GpuCounts {
        GpuCounts::default()
    }
}

/// Why [`translate`] failed.
#[derive(Debug, thiserror::Error)]
pub enum TranslateError<E> {
    /// The engine's own error.
    #[error(transparent)]
    Engine(E),
    /// The source could not be tokenized, or a translation could not be detokenized.
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
    /// The caller's `cancelled` answered true.
    #[error("the translation was cancelled by a newer request")]
    Cancelled,
}

/// A request an engine cannot serve. [`translate`] never makes one; engines check anyway, with
/// these two checks, so a direct caller gets an error instead of a panic.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum RequestError {
    /// Sources the model cannot take.
    #[error(
        "sources must be 1..={max_seq_len} tokens long and at least one; got lengths {lengths:?}"
    )]
    Sources {
        /// The model's longest sequence.
        max_seq_len: usize,
        /// The source lengths asked for.
        lengths: Vec<usize>,
    },
    /// A piece beyond the encoded batch, or a target the decoder cannot read at once.
    #[error(
        "piece {i} of a batch of {batch} with a target of {target_len} tokens: the batch has \
         pieces 0..{batch} and a target takes 1..={max_seq_len} tokens"
    )]
    Piece {
        /// The piece asked for.
        i: usize,
        /// Pieces encoded.
        batch: usize,
        /// The target's length (0 for a search).
        target_len: usize,
        /// The model's longest sequence.
        max_seq_len: usize,
    },
}

impl RequestError {
    /// At least one source, each 1..=`max_seq_len` tokens long.
    pub fn check_sources(sources: &[Vec<u32>], max_seq_len: usize) -> Result<(), Self> {
        let fits = |s: &Vec<u32>| (1..=max_seq_len).contains(&s.len());
        if sources.is_empty() || !sources.iter().all(fits) {
            return Err(Self::Sources {
                max_seq_len,
                lengths: sources.iter().map(Vec::len).collect(),
            });
        }
        Ok(())
    }

    /// Piece `i` of a batch of `batch`, with a target (teacher forcing) of 1..=`max_seq_len`
    /// tokens when one is given.
    pub fn check_piece(
        i: usize,
        batch: usize,
        target_len: Option<usize>,
        max_seq_len: usize,
    ) -> Result<(), Self> {
        let target_fits = target_len.is_none_or(|t| (1..=max_seq_len).contains(&t));
        if i < batch && target_fits {
            return Ok(());
        }
        Err(Self::Piece {
            i,
            batch,
            target_len: target_len.unwrap_or(0),
            max_seq_len,
        })
    }
}

/// Token ids of `sentence` for the encoder, split into chunks of at most `max_seq_len` tokens
/// (a longer sentence is translated chunk by chunk, never cut).
pub fn source_chunks<E: TranslationEngine>(
    engine: &E,
    sentence: &str,
) -> Result<Vec<Vec<u32>>, TokenizerError> {
    let ids = engine.source_tokenizer().encode(sentence)?;
    Ok(ids
        .chunks(engine.config().max_seq_len)
        .map(<[u32]>::to_vec)
        .collect())
}

/// Translates `text` with `engine`: one paragraph (or line) in, its translation out. Sentences
/// are split, encoded in batches and decoded one by one; empty or blank text gives empty
/// output. `cancelled` is asked before each piece; once it answers true the translation stops
/// with [`TranslateError::Cancelled`] (the page: a newer request came in; elsewhere `&|| false`).
pub async fn translate<E: TranslationEngine>(
    engine: &E,
    text: &str,
    options: &TranslateOptions,
    cancelled: &dyn Fn() -> bool,
) -> Result<Translation, TranslateError<E::Error>> {
    engine
        .check_options(&options.search)
        .map_err(TranslateError::Engine)?;
    let start = now_ms();
    let before = engine.counts();
    let mut pieces = Vec::new(); // (sentence index, source text, tokens)
    for (s, sentence) in text::split_sentences(text).into_iter().enumerate() {
        for chunk in source_chunks(engine, sentence)? {
            pieces.push((s, sentence, chunk));
        }
    }
    let mut sentences: Vec<SentenceTranslation> = Vec::new();
    let mut timings = Timings::default();
    if pieces.is_empty() {
        return Ok(Translation {
            text: String::new(),
            sentences,
            timings,
        });
    }
    // Encoder batches of at most ENCODER_BATCH pieces bound the memory of a long text.
    let mut encoded = None;
    for (n, (s, sentence, tokens)) in pieces.iter().enumerate() {
        if cancelled() {
            return Err(TranslateError::Cancelled);
        }
        let i = n % ENCODER_BATCH;
        if i == 0 {
            let batch: Vec<Vec<u32>> = pieces[n..]
                .iter()
                .take(ENCODER_BATCH)
                .map(|p| p.2.clone())
                .collect();
            let encoder_start = now_ms();
            encoded = Some(
                engine
                    .encode(&batch)
                    .await
                    .map_err(TranslateError::Engine)?,
            );
            timings.encoder_ms += now_ms() - encoder_start;
        }
        let Some(encoded) = encoded.as_ref() else {
            continue;
        };
        let (result, stats) = engine
            .search(encoded, i, &options.search)
            .await
            .map_err(TranslateError::Engine)?;
        timings.add(&stats);
        let mut hypotheses: Vec<HypothesisText> = Vec::new();
        for h in &result.hypotheses {
            // Diverse groups can end on the same tokens; list each translation once.
            if hypotheses.iter().any(|seen| seen.tokens == h.tokens) {
                continue;
            }
            hypotheses.push(HypothesisText {
                text: engine.target_tokenizer().decode(&h.tokens)?,
                tokens: h.tokens.clone(),
                score: h.score,
                logprob: h.logprob,
            });
        }
        let attention = match (options.attention, result.best()) {
            (true, Some(best)) => Some(attention_map(engine, encoded, i, tokens, best).await?),
            _ => None,
        };
        match sentences.last_mut() {
            // A later chunk of the same sentence: append to its best translation.
            Some(last) if last.index == *s => {
                if let (Some(first), Some(h)) = (last.hypotheses.first_mut(), hypotheses.first()) {
                    first.text = format!("{} {}", first.text, h.text);
                    first.tokens.extend(&h.tokens);
                }
                last.chunks += 1;
            }
            _ => sentences.push(SentenceTranslation {
                index: *s,
                source: sentence.to_string(),
                hypotheses,
                attention,
                chunks: 1,
            }),
        }
    }
    let text = sentences
        .iter()
        .filter_map(|s| s.hypotheses.first().map(|h| h.text.as_str()))
        .filter(|t| !t.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    timings.total_ms = now_ms() - start;
    timings.gpu = engine.counts() - before;
    Ok(Translation {
        text,
        sentences,
        timings,
    })
}

/// The cross-attention heatmap of `best` for piece `i` (`source` its tokens), heads averaged:
/// one row per generated token.
async fn attention_map<E: TranslationEngine>(
    engine: &E,
    encoded: &E::Encoded,
    i: usize,
    source: &[u32],
    best: &Hypothesis,
) -> Result<AttentionMap, TranslateError<E::Error>> {
    let config = engine.config();
    let mut tgt_in = vec![BOS_ID];
    tgt_in.extend(&best.tokens);
    tgt_in.truncate(best.rows.len().clamp(1, config.max_seq_len));
    let weights = engine
        .cross_attention(encoded, i, &tgt_in)
        .await
        .map_err(TranslateError::Engine)?;
    let (t, s, heads) = (tgt_in.len(), source.len(), config.n_heads);
    let mut mean = vec![0.0f32; t * s];
    for h in 0..heads {
        for (m, w) in mean.iter_mut().zip(&weights[h * t * s..][..t * s]) {
            *m += w / heads as f32;
        }
    }
    let piece = |tok: &Tokenizer, id: u32| tok.id_to_token(id).unwrap_or_default();
    let target = engine.target_tokenizer();
    let mut target_tokens: Vec<String> = best.tokens.iter().map(|&id| piece(target, id)).collect();
    target_tokens.push(piece(target, EOS_ID));
    target_tokens.truncate(t);
    Ok(AttentionMap {
        source_tokens: source
            .iter()
            .map(|&id| piece(engine.source_tokenizer(), id))
            .collect(),
        target_tokens,
        weights: mean,
    })
}

/// What [`translate`] does besides the search.
#[derive(Clone, Debug, Default, PartialEq, serde::Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct TranslateOptions {
    pub search: SearchOptions,
    /// Also compute the best hypothesis' cross-attention heatmap per sentence.
    pub attention: bool,
}

/// One of the n-best translations of a sentence.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct HypothesisText {
    pub text: String,
    pub tokens: Vec<u32>,
    /// Length-normalised score (the ranking).
    pub score: f32,
    /// Sum of token log-probabilities.
    pub logprob: f32,
}

/// Source × target cross-attention of the last decoder layer, heads averaged.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AttentionMap {
    pub source_tokens: Vec<String>,
    /// The generated tokens, `</s>` last when the hypothesis ended with it.
    pub target_tokens: Vec<String>,
    /// `[target_tokens.len(), source_tokens.len()]`, each row sums to 1.
    pub weights: Vec<f32>,
}

/// One sentence of the input and its translations.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SentenceTranslation {
    /// Position of the sentence in the input.
    pub index: usize,
    pub source: String,
    /// Best first; the first one of a sentence longer than the model's limit joins its chunks.
    pub hypotheses: Vec<HypothesisText>,
    pub attention: Option<AttentionMap>,
    /// Pieces the sentence was cut into (more than 1 when it exceeds `max_seq_len` tokens).
    pub chunks: usize,
}

/// Time and GPU work of one search.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct SearchStats {
    /// Decoder steps.
    pub steps: usize,
    pub ms: f64,
    /// CPU time spent in the search's own bookkeeping (outside the model's steps).
    pub bookkeeping_ms: f64,
    pub gpu: GpuCounts,
}

/// Where the time of a translation went.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Timings {
    pub encoder_ms: f64,
    pub decoder_ms: f64,
    pub bookkeeping_ms: f64,
    pub total_ms: f64,
    /// Decoder steps of all searches.
    pub steps: usize,
    /// GPU work of the whole translation (encoder passes and heatmaps included).
    pub gpu: GpuCounts,
}

impl Timings {
    fn add(&mut self, s: &SearchStats) {
        self.decoder_ms += s.ms;
        self.bookkeeping_ms += s.bookkeeping_ms;
        self.steps += s.steps;
    }
}

/// A translated text.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Translation {
    /// The best translations of all sentences, joined by spaces.
    pub text: String,
    pub sentences: Vec<SentenceTranslation>,
    pub timings: Timings,
}

impl Translation {
    /// Tokens of the best translations of all sentences (chunks included, EOS excluded).
    pub fn target_tokens(&self) -> usize {
        self.sentences
            .iter()
            .filter_map(|s| s.hypotheses.first())
            .map(|h| h.tokens.len())
            .sum()
    }
}
