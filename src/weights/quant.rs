//! The int8 quantization of one matrix and its reference dequantization.

use serde::Serialize;

/// Why a matrix cannot be quantized.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum QuantError {
    /// The packed layout needs whole groups of four input features.
    #[error(
        "cannot pack a [{n}, {k}] matrix as int8: k (input features) = {k} is not a multiple \
         of 4; choose d_model, d_ff and vocabulary sizes divisible by 4"
    )]
    KNotMultipleOf4 { n: usize, k: usize },
    /// The data does not have `n * k` elements.
    #[error("a [{n}, {k}] matrix needs {} values, got {len}", n * k)]
    WrongLength { n: usize, k: usize, len: usize },
    /// A weight is NaN or infinite (a diverged training run).
    #[error("weight [{row}, {col}] is {value}, not a finite number; the checkpoint is broken")]
    NotFinite { row: usize, col: usize, value: f32 },
}

/// An int8 matrix `[n, k]` with one f32 scale per row, packed four values per `u32`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct QuantizedMatrix {
    /// Rows: output features.
    pub n: usize,
    /// Columns: input features, a multiple of 4.
    pub k: usize,
    /// `[n, k / 4]` packed i8x4, row-major.
    pub packed: Vec<u32>,
    /// `[n]` per-row scales.
    pub scale: Vec<f32>,
}

impl QuantizedMatrix {
    /// Quantizes the row-major `[n, k]` matrix `w`.
    pub fn quantize(w: &[f32], n: usize, k: usize) -> Result<Self, QuantError> {
        if !k.is_multiple_of(4) {
            return Err(QuantError::KNotMultipleOf4 { n, k });
        }
        if w.len() != n * k {
            return Err(QuantError::WrongLength { n, k, len: w.len() });
        }
        if let Some(i) = w.iter().position(|v| !v.is_finite()) {
            return Err(QuantError::NotFinite {
                row: i / k,
                col: i % k,
                value: w[i],
            });
        }
        let mut packed = Vec::with_capacity(n * k / 4);
        let mut scale = Vec::with_capacity(n);
        for row in w.chunks_exact(k.max(1)).take(n) {
            let max_abs = row.iter().fold(0.0f32, |m, v| m.max(v.abs()));
            let s = max_abs / 127.0;
            scale.push(s);
            let inv = if s > 0.0 { 1.0 / s } else { 0.0 };
            for group in row.chunks_exact(4) {
                let mut word = 0u32;
                for (j, v) in group.iter().enumerate() {
                    let q = (v * inv).round().clamp(-127.0, 127.0) as i8;
                    word |= u32::from(q as u8) << (8 * j);
                }
                packed.push(word);
            }
        }
        Ok(Self {
            n,
            k,
            packed,
            scale,
        })
    }

    /// The int8 value at `[row, col]`.
    pub fn q(&self, row: usize, col: usize) -> i8 {
        let word = self.packed[row * self.k / 4 + col / 4];
        (word >> (8 * (col % 4))) as u8 as i8
    }

    /// The f32 matrix these int8 values stand for: `scale[r] · q[r, i]`, row-major `[n, k]`.
    pub fn dequantize(&self) -> Vec<f32> {
        (0..self.n)
            .flat_map(|r| (0..self.k).map(move |c| (r, c)))
            .map(|(r, c)| self.scale[r] * f32::from(self.q(r, c)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantize_round_trips_within_half_a_step() {
        let w: Vec<f32> = (0..6 * 8)
            .map(|i| ((i * 37 % 23) as f32 - 11.0) / 7.0)
            .collect();
        let q = QuantizedMatrix::quantize(&w, 6, 8).expect("valid shape");
        let d = q.dequantize();
        for r in 0..6 {
            for c in 0..8 {
                let err = (d[r * 8 + c] - w[r * 8 + c]).abs();
                assert!(err <= q.scale[r] / 2.0 + 1e-6, "[{r},{c}] err {err}");
            }
        }
    }

    #[test]
    fn packing_is_little_endian_twos_complement() {
        let w = [127.0, -127.0, 1.0, -1.0];
        let q = QuantizedMatrix::quantize(&w, 1, 4).expect("valid shape");
        assert_eq!(q.scale, vec![1.0]);
        assert_eq!(q.packed, vec![0xFF_01_81_7F]);
        assert_eq!(
            (0..4).map(|c| q.q(0, c)).collect::<Vec<_>>(),
            vec![127, -127, 1, -1]
        );
    }

    #[test]
    fn zero_rows_and_bad_shapes() {
        let q = QuantizedMatrix::quantize(&[0.0; 8], 2, 4).expect("valid shape");
        assert_eq!(q.dequantize(), vec![0.0; 8]);
        assert_eq!(
            QuantizedMatrix::quantize(&[0.0; 6], 2, 3),
            Err(QuantError::KNotMultipleOf4 { n: 2, k: 3 })
        );
        assert_eq!(
            QuantizedMatrix::quantize(&[0.0; 7], 2, 4),
            Err(QuantError::WrongLength { n: 2, k: 4, len: 7 })
        );
        assert!(matches!(
            QuantizedMatrix::quantize(&[0.0, 0.0, 0.0, 0.0, 0.0, f32::NAN, 0.0, 0.0], 2, 4),
            Err(QuantError::NotFinite { row: 1, col: 1, .. })
        ));
    }
}
