//! The sinusoidal positional table of the paper, in one place below everything that adds it:
//! the burn model, the GPU engine (which uploads it) and the plain-Rust reference, so all three
//! add bit-identical values.

/// The paper's sinusoidal positional encoding, row-major `[seq_len, d_model]`:
/// `PE[pos, 2i] = sin(pos / 10000^(2i / d_model))`, `PE[pos, 2i + 1] = cos(pos / 10000^(2i / d_model))`.
///
/// The burn model, the GPU engine and the reference all take their table from here, so they
/// agree exactly.
pub fn positional_encoding(seq_len: usize, d_model: usize) -> Vec<f32> {
    let mut pe = Vec::with_capacity(seq_len * d_model);
    for pos in 0..seq_len {
        for j in 0..d_model {
            let pair = (j / 2 * 2) as f64;
            let angle = pos as f64 / 10000f64.powf(pair / d_model as f64);
            pe.push(if j % 2 == 0 { angle.sin() } else { angle.cos() } as f32);
        }
    }
    pe
}

#[cfg(test)]
mod tests {
    use super::positional_encoding;

    #[test]
    fn positional_encoding_matches_the_paper() {
        let pe = positional_encoding(3, 4);
        // pos 0: sin 0, cos 0, sin 0, cos 0.
        assert_eq!(&pe[0..4], &[0.0, 1.0, 0.0, 1.0]);
        // pos 2, pair 1: angle 2 / 10000^(2/4) = 0.02.
        assert!((pe[2 * 4 + 2] - 0.02f32.sin()).abs() < 1e-7);
        assert!((pe[2 * 4 + 3] - 0.02f32.cos()).abs() < 1e-7);
    }
}
