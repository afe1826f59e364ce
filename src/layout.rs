//! Sizes and buffer layouts of kernel calls: plain data shared by the GPU kernels
//! ([`crate::kernels`]) and their plain-Rust references ([`crate::reference`]). They live below
//! both, so the oracle does not depend on GPU code; `kernels::attention` re-exports them.

/// Sizes and masks of one attention call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttentionShape {
    pub batch: usize,
    pub n_queries: usize,
    /// Keys per batch row.
    pub n_keys: usize,
    pub d_model: usize,
    pub n_heads: usize,
    /// Position of query 0 (a decoder step: the step index), for the causal mask.
    pub q_offset: usize,
    /// Hide keys after each query's position.
    pub causal: bool,
}

impl AttentionShape {
    /// Features per head.
    pub fn d_head(&self) -> usize {
        self.d_model / self.n_heads.max(1)
    }
}

/// Where queries, keys and values sit in their buffers, in elements (f32):
/// - query `(b, i)` starts at `q_start + (b · n_queries + i) · q_stride`;
/// - key `j` of batch row `b` is row `j · pos_rows + b' · batch_rows` of the key/value buffer,
///   with `b' = b`, or the beam history `ancestors[b · anc_stride + j]` when the call has
///   ancestors; the key starts at `kv_start + row · kv_stride + k_col`, the value at `… + v_col`.
///
/// Every field must be a multiple of 4 except `pos_rows` and `batch_rows`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttentionLayout {
    pub q_start: usize,
    pub q_stride: usize,
    pub kv_start: usize,
    pub kv_stride: usize,
    pub k_col: usize,
    pub v_col: usize,
    pub pos_rows: usize,
    pub batch_rows: usize,
}

impl AttentionLayout {
    /// The output of a fused QKV projection, `[batch, n, 3 · d_model]` (queries, then keys, then
    /// values in each row), with `n` queries and keys per batch row.
    pub const fn fused_qkv(d_model: usize, n: usize) -> Self {
        Self {
            q_start: 0,
            q_stride: 3 * d_model,
            kv_start: 0,
            kv_stride: 3 * d_model,
            k_col: d_model,
            v_col: 2 * d_model,
            pos_rows: 1,
            batch_rows: n,
        }
    }

    /// Queries `[batch, n_queries, d_model]` over the fused key/value projection of one source,
    /// `[n_keys, 2 · d_model]`, starting at row `first_row` of that buffer; every batch row
    /// attends to the same keys (the beams of one sentence).
    pub const fn cross(d_model: usize, first_row: usize) -> Self {
        Self {
            q_start: 0,
            q_stride: d_model,
            kv_start: first_row * 2 * d_model,
            kv_stride: 2 * d_model,
            k_col: 0,
            v_col: d_model,
            pos_rows: 1,
            batch_rows: 0,
        }
    }

    /// Queries `[rows, 1, d_model]` of a batch of sentences over the fused key/value projection
    /// of the encoder batch, `[batch, seq, 2 · d_model]`: with an owner table (the kernel's
    /// `ancestors`, `owner[r · stride + j]` = row `r`'s sentence in the encoder batch), key `j`
    /// of row `r` is row `j + owner · seq`.
    pub const fn batch_cross(d_model: usize, seq: usize) -> Self {
        Self {
            pos_rows: 1,
            batch_rows: seq,
            ..Self::cross(d_model, 0)
        }
    }

    /// The decoder's self-attention KV cache at step `t`: `[capacity, beams, 3 · d_model]`,
    /// position-major, each step's fused QKV projection of every beam written at position `t`
    /// and never moved; key `j` of beam `b` is in the slot of its ancestor at step `j`.
    pub const fn kv_cache(d_model: usize, beams: usize, t: usize) -> Self {
        Self {
            q_start: t * beams * 3 * d_model,
            pos_rows: beams,
            batch_rows: 1,
            ..Self::fused_qkv(d_model, 0)
        }
    }

    /// The first element past the last key or value read, for `ancestors` below `slots`.
    pub(crate) fn kv_end(&self, s: &AttentionShape, slots: Option<usize>) -> usize {
        let last_b = slots.unwrap_or(s.batch).max(1) - 1;
        let row = (s.n_keys - 1) * self.pos_rows + last_b * self.batch_rows;
        self.kv_start + row * self.kv_stride + self.k_col.max(self.v_col) + s.d_model
    }

    /// The first element past the last query read.
    pub(crate) fn q_end(&self, s: &AttentionShape) -> usize {
        self.q_start + (s.batch * s.n_queries - 1) * self.q_stride + s.d_model
    }
}
