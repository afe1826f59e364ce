//! Greedy decoding with the burn model and its KV cache: the framework baseline, and the dev-set
//! translation during training.

use super::Transformer;
use crate::config::{BOS_ID, EOS_ID, PAD_ID};
use burn::tensor::{Device, Int, Tensor, TensorData, TensorReadError};

/// Greedy translations of a batch of token sequences (without BOS/EOS), each at most
/// `max_len` tokens long. Returns the target tokens without BOS and EOS.
///
/// # Errors
/// The chosen tokens cannot be read back from the device.
pub fn greedy_decode(
    model: &Transformer,
    sources: &[Vec<u32>],
    max_len: usize,
    device: &Device,
) -> Result<Vec<Vec<u32>>, TensorReadError> {
    if sources.is_empty() {
        return Ok(Vec::new());
    }
    let batch = sources.len();
    let src_len = sources.iter().map(Vec::len).max().unwrap_or(0).max(1);
    let mut ids = Vec::with_capacity(batch * src_len);
    for s in sources {
        ids.extend(s.iter().map(|&t| i64::from(t)));
        ids.extend(std::iter::repeat_n(i64::from(PAD_ID), src_len - s.len()));
    }
    let src = Tensor::<2, Int>::from_data(TensorData::new(ids, [batch, src_len]), device);
    let (memory, mask) = model.encode(src);
    let mut cache = model.start_decoding(memory, mask);
    let mut outputs = vec![Vec::new(); batch];
    let mut done = vec![false; batch];
    let mut tokens = vec![i64::from(BOS_ID); batch];
    for _ in 0..max_len {
        let input = Tensor::<1, Int>::from_data(TensorData::new(tokens.clone(), [batch]), device);
        let (logits, _) = model.decode_step(input, &mut cache);
        let next = logits.argmax(1).reshape([batch]).try_into_vec_as::<i64>()?;
        for (i, &t) in next.iter().enumerate() {
            if done[i] {
                continue;
            }
            if t == i64::from(EOS_ID) {
                done[i] = true;
            } else {
                outputs[i].push(t as u32);
            }
            tokens[i] = t;
        }
        if done.iter().all(|&d| d) {
            break;
        }
    }
    Ok(outputs)
}
