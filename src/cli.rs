//! What the command-line tools share: the decoding flags of `translate` and `evaluate`.

use crate::search::SearchOptions;

/// Decoding options as flags; unset flags keep the reference implementation's defaults
/// (beam 8 in 4 diverse groups, diversity 0.5, length penalty 0.6, repetition penalty 1.5 over
/// 30 tokens, maximum length 2 · source + 10).
#[derive(clap::Args, Clone, Debug, Default)]
pub struct SearchArgs {
    /// Beam size (1 = greedy) [default: 8].
    #[arg(long)]
    pub beam: Option<usize>,
    /// Diverse beam groups; must divide the beam [default: 4, or 1 with --beam 1].
    #[arg(long)]
    pub groups: Option<usize>,
    /// Diversity penalty between groups [default: 0.5].
    #[arg(long)]
    pub diversity: Option<f32>,
    /// Length penalty α: hypotheses are ranked by log-prob / length^α [default: 0.6].
    #[arg(long)]
    pub length_penalty: Option<f32>,
    /// Repetition penalty (1 = off) [default: 1.5].
    #[arg(long)]
    pub repetition_penalty: Option<f32>,
    /// Tokens the repetition penalty looks back over [default: 30].
    #[arg(long)]
    pub repetition_window: Option<usize>,
    /// Translations kept per sentence [default: 1].
    #[arg(long)]
    pub n_best: Option<usize>,
    /// Maximum target length = floor(A · source tokens) + B, capped by the model [default: A 2].
    #[arg(long)]
    pub max_len_a: Option<f32>,
    /// See --max-len-a [default: 10].
    #[arg(long)]
    pub max_len_b: Option<usize>,
    /// Greedy decoding without penalties (beam 1, one group, repetition penalty 1); other
    /// flags still override.
    #[arg(long)]
    pub greedy: bool,
}

impl SearchArgs {
    /// The options these flags describe.
    pub fn options(&self) -> SearchOptions {
        let mut o = if self.greedy {
            SearchOptions::greedy()
        } else {
            SearchOptions::default()
        };
        o.beam = self.beam.unwrap_or(o.beam);
        let default_groups = if self.beam == Some(1) { 1 } else { o.groups };
        o.groups = self.groups.unwrap_or(default_groups);
        o.diversity = self.diversity.unwrap_or(o.diversity);
        o.length_penalty = self.length_penalty.unwrap_or(o.length_penalty);
        o.repetition_penalty = self.repetition_penalty.unwrap_or(o.repetition_penalty);
        o.repetition_window = self.repetition_window.unwrap_or(o.repetition_window);
        o.n_best = self.n_best.unwrap_or(o.n_best);
        o.max_len_a = self.max_len_a.unwrap_or(o.max_len_a);
        o.max_len_b = self.max_len_b.unwrap_or(o.max_len_b);
        o
    }
}

#[cfg(test)]
mod tests {
    use super::SearchArgs;
    use crate::search::SearchOptions;

    #[test]
    fn defaults_are_the_reference_ones_and_flags_override() {
        assert_eq!(SearchArgs::default().options(), SearchOptions::default());
        let beam1 = SearchArgs {
            beam: Some(1),
            ..Default::default()
        };
        assert_eq!(beam1.options().groups, 1);
        assert_eq!(beam1.options().validate(), Ok(()));
        let greedy = SearchArgs {
            greedy: true,
            length_penalty: Some(1.0),
            ..Default::default()
        }
        .options();
        assert_eq!((greedy.beam, greedy.repetition_penalty), (1, 1.0));
        assert_eq!(greedy.length_penalty, 1.0);
    }
}
