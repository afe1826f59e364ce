//! Text in → text out, the same for every engine: the GPU engine ([`crate::infer`]) and the
//! burn model (`model`, feature `train`) both plug into [`translate`].
//!
//! - An engine implements [`TranslationEngine`]: its tokenizers and config, the encoder over a
//!   batch of source pieces, one search per piece and, for heatmaps, the cross-attention
//!   weights of a given target. Everything else happens here, once.
//! - [`translate`] splits the text into sentences ([`text::split_sentences`]), cuts a sentence
//!   longer than `max_seq_len` tokens into chunks (translated one by one, never cut off),
//!   encodes the pieces in batches of at most [`ENCODER_BATCH`] (or one decoder batch, if
//!   larger), searches them [`TranslateOptions::batch`] at a time, lists
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
use std::collections::HashMap;
use std::collections::hash_map::Entry;

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

    /// Runs the encoder over `sources`: 1..=max([`ENCODER_BATCH`], [`MAX_BATCH`]) pieces
    /// ([`translate`] sends at most [`ENCODER_BATCH`], or one decoder batch if larger).
    fn encode(
        &self,
        sources: &[Vec<u32>],
    ) -> impl Future<Output = Result<Self::Encoded, Self::Error>>;

    /// Beam search (greedy for beam 1) for `pieces` of `encoded` (indices into its batch):
    /// one result per piece, in order, each exactly the search of that piece alone. Engines
    /// that can decode several pieces per step do (the GPU and CPU engines); the stats are
    /// the whole call's. `cancelled` goes to the search ([`crate::search::beam_search_batch`]),
    /// which asks it between decoder steps and stops with an error once it answers true.
    fn search(
        &self,
        encoded: &Self::Encoded,
        pieces: &[usize],
        options: &SearchOptions,
        cancelled: &dyn Fn() -> bool,
    ) -> impl Future<Output = Result<(Vec<SearchResult>, SearchStats), Self::Error>>;

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
    /// The engine returned fewer or more search results than pieces asked for (a broken
    /// engine; none of ours does).
    #[error("the engine returned {got} search results for {asked} pieces")]
    MissingResults {
        /// Pieces searched.
        asked: usize,
        /// Results returned.
        got: usize,
    },
}

/// A request an engine cannot serve. [`translate`] never makes one; the burn and CPU engines
/// check anyway with these two checks (the GPU engine with its own shape checks), so a direct
/// caller gets an error instead of a panic.
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

/// The decoder's buffers of one batch may take at most this many bytes in all (KV caches of
/// every layer and the logits): engines cut a larger batch into parts
/// ([`split_decoder_batch`]).
pub const DECODER_BATCH_BYTES: u64 = 512 << 20;

/// `pieces` cut into consecutive runs, in order, each as long as `bytes(run)` (the decoder
/// buffers a run needs) stays within `budget`. A piece over the budget alone is a run of its
/// own (its engine then reports the limit it passes).
pub fn split_decoder_batch(
    pieces: &[usize],
    budget: u64,
    bytes: impl Fn(&[usize]) -> u64,
) -> Vec<&[usize]> {
    let mut parts = Vec::new();
    let mut first = 0;
    for end in 1..=pieces.len() {
        if end - first > 1 && bytes(&pieces[first..end]) > budget {
            parts.push(&pieces[first..end - 1]);
            first = end - 1;
        }
    }
    if first < pieces.len() {
        parts.push(&pieces[first..]);
    }
    parts
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

/// The sentences (pieces) decoded together by default: [`TranslateOptions::batch`]. On
/// lavapipe, 200 ko→en lines ran 1.95× / 1.93× (greedy / beam 4) as fast as one at a time with
/// 16, 2.39× / 2.06× with 32 and 2.33× / 2.08× with 64 (`bench --document-lines 200 --batch N`,
/// a quiet machine).
pub const DEFAULT_BATCH: usize = 32;

/// The first decoder batch of [`translate_texts`] takes at most this many pieces, in input
/// order: its first result comes as soon as with 16, whatever [`TranslateOptions::batch`] is.
pub const FIRST_BATCH: usize = 16;

/// The largest [`TranslateOptions::batch`].
pub const MAX_BATCH: usize = 128;

/// After the first decoder batch, pieces are gathered this many batches at a time (and at
/// least [`ENCODER_BATCH`]) and sorted by length, so a batch holds pieces of similar length.
/// 200 ko→en lines on lavapipe, batch 32, greedy: 2.39–2.42× one at a time with 4, 2.52–2.56×
/// with 8 (rows of a batch finish closer together).
const LOOKAHEAD: usize = 8;

/// Pieces a [`TranslationCache`] holds at most; past it, it starts over.
const CACHE_PIECES: usize = 100_000;

/// Translates `text` with `engine`: one paragraph (or line) in, its translation out. Sentences
/// are split, encoded in batches and decoded [`TranslateOptions::batch`] at a time; empty or
/// blank text gives empty output. `cancelled` is asked before each encoder and decoder batch;
/// once it answers true the translation stops with [`TranslateError::Cancelled`] (the page: a
/// newer request came in; elsewhere `&|| false`).
pub async fn translate<E: TranslationEngine>(
    engine: &E,
    text: &str,
    options: &TranslateOptions,
    cancelled: &dyn Fn() -> bool,
) -> Result<Translation, TranslateError<E::Error>> {
    let mut translation = Translation::default();
    translate_texts(engine, &[text], options, cancelled, None, &mut |_, t| {
        translation = t;
    })
    .await?;
    Ok(translation)
}

/// The translations of pieces already searched, for the lifetime of a page or a run: a piece
/// seen before (the same tokens, under the same options) is not searched again.
#[derive(Debug, Default)]
pub struct TranslationCache {
    /// What the entries were translated with (the batch size aside, which changes nothing).
    options: Option<(SearchOptions, bool)>,
    pieces: HashMap<Vec<u32>, PieceOutput>,
    /// Pieces not searched because they were searched before: answered from the cache, or
    /// the same as an earlier piece of the same call.
    pub hits: usize,
}

impl TranslationCache {
    /// Forgets every entry if they were translated with other options.
    fn prepare(&mut self, options: &TranslateOptions) {
        let key = (options.search.clone(), options.attention);
        if self.options.as_ref() != Some(&key) {
            self.pieces.clear();
            self.options = Some(key);
        }
    }

    fn insert(&mut self, tokens: Vec<u32>, output: PieceOutput) {
        if self.pieces.len() >= CACHE_PIECES {
            self.pieces.clear();
        }
        self.pieces.insert(tokens, output);
    }
}

/// What a piece's search gives the text around it.
#[derive(Clone, Debug, PartialEq)]
struct PieceOutput {
    hypotheses: Vec<HypothesisText>,
    attention: Option<AttentionMap>,
}

/// A piece of a text: a sentence or a chunk of a long one.
struct Piece<'t> {
    /// Its sentence's index in the text, and the sentence.
    sentence: (usize, &'t str),
    /// Its distinct piece (identical pieces are searched once).
    job: usize,
}

/// Translates `texts` with `engine`, as [`translate`] translates each, and hands each text's
/// [`Translation`] to `on_text(index, translation)` in input order, as soon as it and every
/// text before it are done. Pieces of all texts are decoded together, [`TranslateOptions::batch`]
/// per decoder batch, grouped by length; a piece that occurs twice is searched once, and not
/// at all if `cache` already holds it. The first decoder batch takes the first pieces in
/// input order, at most [`FIRST_BATCH`] (a first result soon); later ones look ahead a few
/// batches.
///
/// Each translation's `timings` are the work done since the previous text was handed out, so
/// they add up to the whole call (a text handed out right after another, from the same decoder
/// batch, shows about zero).
pub async fn translate_texts<E: TranslationEngine>(
    engine: &E,
    texts: &[&str],
    options: &TranslateOptions,
    cancelled: &dyn Fn() -> bool,
    mut cache: Option<&mut TranslationCache>,
    on_text: &mut dyn FnMut(usize, Translation),
) -> Result<(), TranslateError<E::Error>> {
    engine
        .check_options(&options.search)
        .map_err(TranslateError::Engine)?;
    if let Some(cache) = cache.as_deref_mut() {
        cache.prepare(options);
    }
    let batch = options.batch.clamp(1, MAX_BATCH);
    let mut start = now_ms();
    let mut before = engine.counts();

    // Every text's pieces, and the distinct pieces (jobs) with their outputs when known.
    let mut texts_pieces: Vec<Vec<Piece>> = Vec::with_capacity(texts.len());
    let mut jobs: Vec<(Vec<u32>, Option<PieceOutput>)> = Vec::new();
    let mut job_of: HashMap<Vec<u32>, usize> = HashMap::new();
    for text in texts {
        let mut pieces = Vec::new();
        for (s, sentence) in text::split_sentences(text).into_iter().enumerate() {
            for chunk in source_chunks(engine, sentence)? {
                let job = match job_of.entry(chunk) {
                    Entry::Occupied(seen) => {
                        if let Some(c) = cache.as_deref_mut() {
                            c.hits += 1;
                        }
                        *seen.get()
                    }
                    Entry::Vacant(new) => {
                        let known = cache.as_deref_mut().and_then(|c| {
                            let hit = c.pieces.get(new.key()).cloned();
                            c.hits += usize::from(hit.is_some());
                            hit
                        });
                        jobs.push((new.key().clone(), known));
                        *new.insert(jobs.len() - 1)
                    }
                };
                pieces.push(Piece {
                    sentence: (s, sentence),
                    job,
                });
            }
        }
        texts_pieces.push(pieces);
    }

    let mut timings = Timings::default();
    let mut next_text = 0;
    let mut emit = |jobs: &[(Vec<u32>, Option<PieceOutput>)], timings: &mut Timings| {
        while let Some(pieces) = texts_pieces.get(next_text) {
            if !pieces.iter().all(|p| jobs[p.job].1.is_some()) {
                break;
            }
            let mut t = assemble(pieces, jobs);
            timings.total_ms = now_ms() - start;
            let counts = engine.counts();
            timings.gpu = counts - before;
            t.timings = std::mem::take(timings);
            (start, before) = (now_ms(), counts);
            on_text(next_text, t);
            next_text += 1;
        }
    };
    emit(&jobs, &mut timings);

    let mut todo: Vec<usize> = (0..jobs.len()).filter(|&j| jobs[j].1.is_none()).collect();
    let mut window = batch.min(FIRST_BATCH);
    while !todo.is_empty() {
        let mut group: Vec<usize> = todo.drain(..window.min(todo.len())).collect();
        window = (batch * LOOKAHEAD).max(ENCODER_BATCH);
        // Stable: pieces of equal length keep their input order. One piece at a time gains
        // nothing from it, and would put long early lines out later.
        if batch > 1 {
            group.sort_by_key(|&j| jobs[j].0.len());
        }
        // Encoder batches of whole decoder batches (one decoder batch reads one encoder batch):
        // ENCODER_BATCH pieces, or one decoder batch when `batch` is larger.
        let per_encoder = (ENCODER_BATCH / batch).max(1) * batch;
        for encoder_jobs in group.chunks(per_encoder) {
            if cancelled() {
                return Err(TranslateError::Cancelled);
            }
            let sources: Vec<Vec<u32>> = encoder_jobs.iter().map(|&j| jobs[j].0.clone()).collect();
            let encoder_start = now_ms();
            let encoded = engine
                .encode(&sources)
                .await
                .map_err(TranslateError::Engine)?;
            timings.encoder_ms += now_ms() - encoder_start;
            let indices: Vec<usize> = (0..encoder_jobs.len()).collect();
            for decoder_batch in indices.chunks(batch) {
                if cancelled() {
                    return Err(TranslateError::Cancelled);
                }
                let searched = engine
                    .search(&encoded, decoder_batch, &options.search, cancelled)
                    .await;
                // A search stopped by `cancelled` is an engine error; say what it was.
                let (results, stats) = searched.map_err(|e| {
                    if cancelled() {
                        TranslateError::Cancelled
                    } else {
                        TranslateError::Engine(e)
                    }
                })?;
                if results.len() != decoder_batch.len() {
                    return Err(TranslateError::MissingResults {
                        asked: decoder_batch.len(),
                        got: results.len(),
                    });
                }
                timings.add(&stats);
                for (&i, result) in decoder_batch.iter().zip(&results) {
                    let output =
                        piece_output(engine, &encoded, i, &sources[i], result, options).await?;
                    let job = encoder_jobs[i];
                    if let Some(cache) = cache.as_deref_mut() {
                        cache.insert(sources[i].clone(), output.clone());
                    }
                    jobs[job].1 = Some(output);
                }
                emit(&jobs, &mut timings);
            }
        }
    }
    Ok(())
}

/// The n-best texts (each distinct translation once) and, if asked, the heatmap of a searched
/// piece.
async fn piece_output<E: TranslationEngine>(
    engine: &E,
    encoded: &E::Encoded,
    i: usize,
    tokens: &[u32],
    result: &SearchResult,
    options: &TranslateOptions,
) -> Result<PieceOutput, TranslateError<E::Error>> {
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
    Ok(PieceOutput {
        hypotheses,
        attention,
    })
}

/// A text's translation from its pieces' outputs (all known): a sentence cut into chunks gets
/// its chunks' best translations joined, its first chunk's n-best list and heatmap.
fn assemble(pieces: &[Piece], jobs: &[(Vec<u32>, Option<PieceOutput>)]) -> Translation {
    let mut sentences: Vec<SentenceTranslation> = Vec::new();
    for piece in pieces {
        let Some(output) = jobs[piece.job].1.as_ref() else {
            continue;
        };
        let (index, source) = piece.sentence;
        match sentences.last_mut() {
            // A later chunk of the same sentence: append to its best translation.
            Some(last) if last.index == index => {
                if let (Some(first), Some(h)) =
                    (last.hypotheses.first_mut(), output.hypotheses.first())
                {
                    // An empty chunk (EOS first) adds no space.
                    first.text = [first.text.as_str(), h.text.as_str()]
                        .into_iter()
                        .filter(|t| !t.is_empty())
                        .collect::<Vec<_>>()
                        .join(" ");
                    first.tokens.extend(&h.tokens);
                }
                last.chunks += 1;
            }
            _ => sentences.push(SentenceTranslation {
                index,
                source: source.to_string(),
                hypotheses: output.hypotheses.clone(),
                attention: output.attention.clone(),
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
    Translation {
        text,
        sentences,
        timings: Timings::default(),
    }
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
#[derive(Clone, Debug, PartialEq, serde::Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct TranslateOptions {
    pub search: SearchOptions,
    /// Also compute the best hypothesis' cross-attention heatmap per sentence.
    pub attention: bool,
    /// Sentences (pieces) decoded together, 1..=[`MAX_BATCH`] (others are clamped): every
    /// live beam of each is a row of one decoder step. Changes no translation, only the speed;
    /// 1 decodes one sentence at a time.
    pub batch: usize,
}

impl Default for TranslateOptions {
    fn default() -> Self {
        Self {
            search: SearchOptions::default(),
            attention: false,
            batch: DEFAULT_BATCH,
        }
    }
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

/// Where the time of a translation went (decoder batches shared by several sentences are
/// counted once).
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
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
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
