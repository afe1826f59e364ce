//! The burn model as a [`StepModel`]: beam search on the framework, with the same search code
//! as the GPU engine (the baseline of the benchmark and the oracle of the engine tests).

use super::{DecoderCache, Transformer};
use crate::config::{BOS_ID, EOS_ID};
use crate::infer::text::split_sentences;
use crate::search::{
    Candidate, SearchOptions, StepModel, StepRequest, apply_repetition_penalty, beam_search,
    log_softmax, top_k,
};
use crate::tokenizer::Tokenizer;
use burn::tensor::{Device, Int, Tensor, TensorData};

/// Why a burn step failed.
#[derive(Debug, thiserror::Error)]
#[error("burn model: {0}")]
pub struct BurnStepError(String);

/// One sentence decoded by the burn model with its KV cache.
pub struct BurnSession<'m> {
    model: &'m Transformer,
    cache: DecoderCache,
    device: Device,
    cap: usize,
}

impl<'m> BurnSession<'m> {
    /// Encodes `source` (token ids, no BOS/EOS) and prepares incremental decoding.
    pub fn new(model: &'m Transformer, source: &[u32], cap: usize, device: &Device) -> Self {
        let ids: Vec<i64> = source.iter().map(|&t| i64::from(t)).collect();
        let src = Tensor::<2, Int>::from_data(TensorData::new(ids, [1, source.len()]), device);
        let (memory, mask) = model.encode(src);
        Self {
            model,
            cache: model.start_decoding(memory, mask),
            device: device.clone(),
            cap,
        }
    }
}

impl StepModel for BurnSession<'_> {
    type Error = BurnStepError;

    fn bos(&self) -> u32 {
        BOS_ID
    }

    fn eos(&self) -> u32 {
        EOS_ID
    }

    fn max_len_cap(&self) -> usize {
        self.cap
    }

    async fn step(
        &mut self,
        request: &StepRequest<'_>,
    ) -> Result<Vec<Vec<Candidate>>, BurnStepError> {
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
            .map_err(|e| BurnStepError(format!("{e:?}")))?;
        Ok(values
            .chunks(vocab)
            .zip(&request.rows)
            .map(|(row, r)| {
                let mut lp = row.to_vec();
                log_softmax(&mut lp);
                apply_repetition_penalty(
                    &mut lp,
                    r.history,
                    request.repetition_penalty,
                    request.repetition_window,
                );
                top_k(&lp, request.k)
            })
            .collect())
    }
}

/// Translates `text` with the burn model as `Engine::translate` does: sentences, chunks of at
/// most `max_seq_len` tokens, the best hypotheses' texts joined by spaces. Returns the text and
/// the number of generated tokens (EOS excluded). The baseline of `bench` and `evaluate`.
#[allow(clippy::too_many_arguments)]
pub fn translate_text(
    model: &Transformer,
    source: &Tokenizer,
    target: &Tokenizer,
    max_seq_len: usize,
    text: &str,
    options: &SearchOptions,
    device: &Device,
) -> Result<(String, usize), BurnStepError> {
    let mut parts = Vec::new();
    let mut tokens = 0;
    for sentence in split_sentences(text) {
        let ids = source
            .encode(sentence)
            .map_err(|e| BurnStepError(e.to_string()))?;
        for chunk in ids.chunks(max_seq_len) {
            let mut session = BurnSession::new(model, chunk, max_seq_len, device);
            let result = pollster::block_on(beam_search(&mut session, options, chunk.len()))
                .map_err(|e| BurnStepError(e.to_string()))?;
            if let Some(best) = result.best() {
                tokens += best.tokens.len();
                let piece = target
                    .decode(&best.tokens)
                    .map_err(|e| BurnStepError(e.to_string()))?;
                if !piece.is_empty() {
                    parts.push(piece);
                }
            }
        }
    }
    Ok((parts.join(" "), tokens))
}
