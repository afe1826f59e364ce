//! The Noam learning-rate schedule of the paper (with the reference's factor), and an optional
//! linear anneal to zero at the end of a run or of a time-budgeted round.

/// `factor · d_model^-0.5 · min(step^-0.5, step · warmup^-1.5)` for `step ≥ 1`: linear warm-up
/// for `warmup` steps, then decay with the inverse square root of the step.
pub fn noam(step: usize, d_model: usize, factor: f64, warmup: usize) -> f64 {
    let step = step.max(1) as f64;
    let warmup = warmup.max(1) as f64;
    factor * (d_model as f64).powf(-0.5) * step.powf(-0.5).min(step * warmup.powf(-1.5))
}

/// The options the learning rate at a step is computed from; a checkpoint records it, so a
/// resumed run keeps it.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Schedule {
    pub lr_factor: f64,
    pub warmup_steps: usize,
}

impl Schedule {
    /// The Noam rate at `step` ([`noam`]).
    pub fn rate(&self, step: usize, d_model: usize) -> f64 {
        noam(step, d_model, self.lr_factor, self.warmup_steps)
    }
}

/// The anneal's multiplier on the rate: 1 at the start, falling linearly to 0 when `progress`
/// (the larger of the run's share of its steps and the round's share of its minutes) reaches 1.
pub fn anneal(progress: f64) -> f64 {
    (1.0 - progress).clamp(0.0, 1.0)
}

/// How far a run is towards its end, in `[0, 1]`: the larger of `step / total_steps` and, with a
/// time budget, `elapsed_secs / budget_secs` (the budget of this invocation).
pub fn progress(step: usize, total_steps: usize, elapsed_secs: f64, budget_secs: f64) -> f64 {
    let by_steps = step as f64 / total_steps.max(1) as f64;
    let by_time = if budget_secs > 0.0 {
        elapsed_secs / budget_secs
    } else {
        0.0
    };
    by_steps.max(by_time).clamp(0.0, 1.0)
}

#[cfg(test)]
mod tests {
    use super::{anneal, noam, progress};

    #[test]
    fn anneal_falls_linearly_to_zero_at_the_nearer_end() {
        assert_eq!(anneal(0.0), 1.0);
        assert!((anneal(0.25) - 0.75).abs() < 1e-12);
        assert_eq!(anneal(1.0), 0.0);
        assert_eq!(anneal(1.5), 0.0);
        // Steps: 250 of 1000 is a quarter; the time budget decides when it is further along.
        assert!((progress(250, 1000, 0.0, 0.0) - 0.25).abs() < 1e-12);
        assert!((progress(250, 1000, 30.0, 60.0) - 0.5).abs() < 1e-12);
        assert!((progress(900, 1000, 30.0, 60.0) - 0.9).abs() < 1e-12);
        // Past the budget (a slow last step) it stays at the end.
        assert_eq!(progress(10, 1000, 90.0, 60.0), 1.0);
    }

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
