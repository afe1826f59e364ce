//! The Noam learning-rate schedule of the paper (with the reference's factor).

/// `factor · d_model^-0.5 · min(step^-0.5, step · warmup^-1.5)` for `step ≥ 1`: linear warm-up
/// for `warmup` steps, then decay with the inverse square root of the step.
pub fn noam(step: usize, d_model: usize, factor: f64, warmup: usize) -> f64 {
    let step = step.max(1) as f64;
    let warmup = warmup.max(1) as f64;
    factor * (d_model as f64).powf(-0.5) * step.powf(-0.5).min(step * warmup.powf(-1.5))
}

#[cfg(test)]
mod tests {
    use super::noam;

    #[test]
    fn noam_peaks_at_warmup() {
        let at = |s| noam(s, 512, 2.0, 8000);
        assert!(at(1) < at(4000) && at(4000) < at(8000));
        assert!(at(8000) > at(8001) && at(8001) > at(16000));
        let peak = 2.0 / (512f64.sqrt() * 8000f64.sqrt());
        assert!((at(8000) - peak).abs() < 1e-12);
        // After warm-up it falls as step^-0.5.
        assert!((at(32000) / at(8000) - 0.5).abs() < 1e-12);
    }
}
