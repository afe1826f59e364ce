//! The burn model as a [`StepModel`] ([`BurnSession`]: beam search on the framework, with the
//! same search code as the GPU engine) and as a [`TranslationEngine`] ([`BurnEngine`]: the same
//! text pipeline as the GPU engine). The baseline of the benchmark, `evaluate --cpu` and the
//! oracle of the engine tests.

use super::{DecoderCache, Transformer};
use crate::config::ModelConfig;
use crate::search::{
    Candidate, OptionsError, SearchError, SearchOptions, SearchResult, StepModel, StepRequest,
    beam_search_batch, log_softmax, top_k,
};
use crate::tokenizer::Tokenizer;
use crate::translate::{RequestError, SearchStats, TranslationEngine, now_ms};
use crate::weights::Bundle;
use burn::tensor::{Device, Int, Tensor, TensorData, TensorReadError};
use std::sync::Arc;

/// Why a burn step failed: a tensor could not be read back from the device.
#[derive(Debug, thiserror::Error)]
#[error("burn model: cannot read the {what} back from the device: {source}")]
pub struct BurnStepError {
    /// What was being read (`logits`, `cross-attention weights`).
    what: &'static str,
    source: TensorReadError,
}

/// One sentence decoded by the burn model with its KV cache.
pub struct BurnSession<'m> {
    model: &'m Transformer,
    cache: DecoderCache,
    device: Device,
    cap: usize,
    /// [`StepModel::repeatable`].
    repeatable: Arc<[bool]>,
    /// Time inside [`StepModel::step`], to tell the model's time from the search's own.
    step_ms: f64,
}

impl<'m> BurnSession<'m> {
    /// Encodes `source` (token ids, no BOS/EOS) and prepares incremental decoding; the repeat
    /// block spares the `repeatable` tokens (the target tokenizer's
    /// [`Tokenizer::repeatable`]).
    pub fn new(
        model: &'m Transformer,
        source: &[u32],
        cap: usize,
        repeatable: Arc<[bool]>,
        device: &Device,
    ) -> Self {
        let ids: Vec<i64> = source.iter().map(|&t| i64::from(t)).collect();
        let src = Tensor::<2, Int>::from_data(TensorData::new(ids, [1, source.len()]), device);
        let (memory, mask) = model.encode(src);
        Self {
            model,
            cache: model.start_decoding(memory, mask),
            device: device.clone(),
            cap,
            repeatable,
            step_ms: 0.0,
        }
    }

    /// Of `total_ms` spent searching, the part outside the model's steps.
    pub fn bookkeeping_ms(&self, total_ms: f64) -> f64 {
        (total_ms - self.step_ms).max(0.0)
    }
}

impl StepModel for BurnSession<'_> {
    type Error = BurnStepError;

    fn max_len_cap(&self) -> usize {
        self.cap
    }

    fn repeatable(&self) -> Arc<[bool]> {
        Arc::clone(&self.repeatable)
    }

    async fn step(
        &mut self,
        request: &StepRequest<'_>,
    ) -> Result<Vec<Vec<Candidate>>, BurnStepError> {
        let start = now_ms();
        let rows = request.rows.len();
        if request.step > 0 {
            let parents: Vec<i64> = request.rows.iter().map(|r| r.parent as i64).collect();
            let index = Tensor::<1, Int>::from_data(TensorData::new(parents, [rows]), &self.device);
            Transformer::reorder_cache(&mut self.cache, index);
        }
        let tokens: Vec<i64> = request
            .rows
            .iter()
            .map(|r| i64::from(r.last_token))
            .collect();
        let input = Tensor::<1, Int>::from_data(TensorData::new(tokens, [rows]), &self.device);
        let (logits, _) = self.model.decode_step(input, &mut self.cache);
        let [_, vocab] = logits.dims();
        let values = logits
            .try_into_vec_as::<f32>()
            .map_err(|source| BurnStepError {
                what: "logits",
                source,
            })?;
        let candidates = values
            .chunks(vocab)
            .zip(&request.rows)
            .map(|(row, r)| {
                let mut lp = row.to_vec();
                log_softmax(&mut lp);
                request.penalize(&mut lp, r.history);
                top_k(&lp, request.k)
            })
            .collect();
        self.step_ms += now_ms() - start;
        Ok(candidates)
    }
}

/// Why the burn model could not translate.
#[derive(Debug, thiserror::Error)]
pub enum BurnError {
    /// Impossible search options.
    #[error(transparent)]
    Options(#[from] OptionsError),
    /// A request the pipeline never makes: bad sources, piece or target length.
    #[error(transparent)]
    Request(#[from] RequestError),
    /// The search failed, or the model inside it.
    #[error(transparent)]
    Search(#[from] SearchError<BurnStepError>),
    /// Reading a tensor back failed outside a search.
    #[error(transparent)]
    Step(#[from] BurnStepError),
}

/// The burn model with its tokenizers, on any burn device (flex CPU, wgpu): translates with
/// [`crate::translate::translate`] exactly as the GPU engine does, from the same tokens.
///
/// Its "encoder output" is the pieces themselves: each search encodes its piece alone (as a
/// [`BurnSession`]), so the encoder's time counts as decoder time in the timings.
pub struct BurnEngine {
    model: Transformer,
    config: ModelConfig,
    source_tokenizer: Tokenizer,
    target_tokenizer: Tokenizer,
    device: Device,
}

impl BurnEngine {
    /// `model` on `device` with the config and tokenizers of `bundle` (whose weights `model`
    /// may hold, or the fp32 checkpoint they were exported from).
    pub fn new(model: Transformer, bundle: &Bundle, device: &Device) -> Self {
        Self {
            model,
            config: bundle.config().clone(),
            source_tokenizer: bundle.source_tokenizer.clone(),
            target_tokenizer: bundle.target_tokenizer.clone(),
            device: device.clone(),
        }
    }

    /// Piece `i` of `encoded`, checked for a target of `target_len` tokens (`None`: a search).
    fn piece<'a>(
        &self,
        encoded: &'a [Vec<u32>],
        i: usize,
        target_len: Option<usize>,
    ) -> Result<&'a [u32], BurnError> {
        RequestError::check_piece(i, encoded.len(), target_len, self.config.max_seq_len)?;
        Ok(&encoded[i])
    }
}

impl TranslationEngine for BurnEngine {
    type Error = BurnError;
    type Encoded = Vec<Vec<u32>>;

    fn config(&self) -> &ModelConfig {
        &self.config
    }

    fn source_tokenizer(&self) -> &Tokenizer {
        &self.source_tokenizer
    }

    fn target_tokenizer(&self) -> &Tokenizer {
        &self.target_tokenizer
    }

    fn check_options(&self, options: &SearchOptions) -> Result<(), BurnError> {
        Ok(options.validate()?)
    }

    async fn encode(&self, sources: &[Vec<u32>]) -> Result<Vec<Vec<u32>>, BurnError> {
        RequestError::check_sources(sources, self.config.max_seq_len)?;
        Ok(sources.to_vec())
    }

    /// One piece after the other (burn's batched products are not guaranteed to give a row
    /// the same numbers whatever the batch, so this engine does not batch).
    async fn search(
        &self,
        encoded: &Vec<Vec<u32>>,
        pieces: &[usize],
        options: &SearchOptions,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<(Vec<SearchResult>, SearchStats), BurnError> {
        let start = now_ms();
        let mut stats = SearchStats::default();
        let mut results = Vec::with_capacity(pieces.len());
        for &i in pieces {
            let source = self.piece(encoded, i, None)?;
            let piece_start = now_ms();
            let cap = self.config.max_seq_len;
            let repeatable = self.target_tokenizer.repeatable();
            let mut session = BurnSession::new(&self.model, source, cap, repeatable, &self.device);
            let mut result =
                beam_search_batch(&mut session, options, &[source.len()], cancelled).await?;
            let result = result.remove(0);
            stats.steps += result.steps_taken();
            stats.bookkeeping_ms += session.bookkeeping_ms(now_ms() - piece_start);
            results.push(result);
        }
        stats.ms = now_ms() - start;
        Ok((results, stats))
    }

    async fn cross_attention(
        &self,
        encoded: &Vec<Vec<u32>>,
        i: usize,
        target_in: &[u32],
    ) -> Result<Vec<f32>, BurnError> {
        let source = self.piece(encoded, i, Some(target_in.len()))?;
        let ids = |v: &[u32]| v.iter().map(|&t| i64::from(t)).collect::<Vec<_>>();
        let tensor = |v: &[u32]| {
            Tensor::<2, Int>::from_data(TensorData::new(ids(v), [1, v.len()]), &self.device)
        };
        let (memory, mask) = self.model.encode(tensor(source));
        let (_, weights) = self.model.decode(tensor(target_in), memory, &mask);
        Ok(weights
            .try_into_vec_as::<f32>()
            .map_err(|source| BurnStepError {
                what: "cross-attention weights",
                source,
            })?)
    }
}
