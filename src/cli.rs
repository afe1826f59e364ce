//! What the command-line tools share: the decoding flags of `translate` and `evaluate`
//! (`--batch` among them), the
//! engine choice ([`EngineArgs`]: `--engine gpu|cpu`, `--threads`), and how a tool reports an
//! error ([`run_main`]).

use crate::cpu::CpuOptions;
use crate::search::SearchOptions;
use crate::translate::{DEFAULT_BATCH, MAX_BATCH, TranslateOptions};
use crate::weights::Bundle;
use std::error::Error;
use std::path::Path;
use std::process::ExitCode;

/// What a tool's `run` returns. Any error converts with `?` (a library error, an I/O error, or
/// a `String` built with `format!` to add context), and [`run_main`] shows it.
pub type CliResult<T = ()> = Result<T, Box<dyn Error>>;

/// Runs a tool's body: on error prints `error: {message}` on stderr, then a
/// `caused by: …` line for each cause in its source chain that the message does not already
/// include, and returns [`ExitCode::FAILURE`]; otherwise [`ExitCode::SUCCESS`].
pub fn run_main(body: impl FnOnce() -> CliResult) -> ExitCode {
    match body() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{}", error_report(e.as_ref()));
            ExitCode::FAILURE
        }
    }
}

/// The bundle in `dir` (a tool's `--model`); an error names the folder and what to do.
pub fn load_bundle(dir: &Path) -> CliResult<Bundle> {
    Bundle::from_dir(dir).map_err(|e| {
        format!(
            "cannot load the model bundle {}: {e}. --model takes a folder that `train` exported \
             (such as web/models/ko-en, or a run's bundle/); `train --config CONFIG \
             --export-only` writes a run's bundle again",
            dir.display()
        )
        .into()
    })
}

/// `error: {e}` and the causes of `e` not already part of that text, one per line.
fn error_report(e: &dyn Error) -> String {
    let mut report = format!("error: {e}");
    let mut cause = e.source();
    while let Some(c) = cause {
        let text = c.to_string();
        // thiserror messages often embed their source (`…: {0}`); say each thing once.
        if !report.contains(&text) {
            report.push_str(&format!("\n  caused by: {text}"));
        }
        cause = c.source();
    }
    report
}

/// Decoding options as flags; unset flags keep the reference implementation's defaults
/// (beam 8 in 4 diverse groups, diversity 0.5, length penalty 0.6, repetition penalty 1.5 over
/// 30 tokens, maximum length 2 · source + 10) and ours (repeat loops of up to 4 tokens blocked).
#[derive(clap::Args, Clone, Debug, Default)]
pub struct SearchArgs {
    /// Beam size (1 = greedy) [default: 8].
    #[arg(long)]
    pub beam: Option<usize>,
    /// Diverse beam groups; must divide the beam [default: 4; with a --beam that 4 does not
    /// divide, 2 or 1: the largest that divides it].
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
    /// Longest phrase, in tokens, that may not follow itself immediately (a token may not come
    /// three times in a row); 0 = off [default: 4, 0 with --greedy].
    #[arg(long)]
    pub block_repeats: Option<usize>,
    /// Translations kept per sentence [default: 1].
    #[arg(long)]
    pub n_best: Option<usize>,
    /// Maximum target length = floor(A · source tokens) + B, capped by the model [default: A 2].
    #[arg(long)]
    pub max_len_a: Option<f32>,
    /// See --max-len-a [default: 10].
    #[arg(long)]
    pub max_len_b: Option<usize>,
    /// Greedy decoding without penalties (beam 1, one group, repetition penalty 1, no repeat
    /// block); other flags still override.
    #[arg(long)]
    pub greedy: bool,
    /// Sentences decoded together (every live beam of each is a row of one decoder step);
    /// changes no translation, only the speed. 1: one sentence at a time.
    #[arg(long, default_value_t = DEFAULT_BATCH,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=MAX_BATCH as u64))]
    pub batch: usize,
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
        // With a beam the default groups do not divide (`--beam 2`, `--beam 6`), as many groups
        // as divide both: the user asked for a beam, not for an error about groups.
        let default_groups = match self.beam {
            Some(beam) if beam > 0 => gcd(beam, o.groups),
            _ => o.groups,
        };
        o.groups = self.groups.unwrap_or(default_groups);
        o.diversity = self.diversity.unwrap_or(o.diversity);
        o.length_penalty = self.length_penalty.unwrap_or(o.length_penalty);
        o.repetition_penalty = self.repetition_penalty.unwrap_or(o.repetition_penalty);
        o.repetition_window = self.repetition_window.unwrap_or(o.repetition_window);
        o.block_repeats = self.block_repeats.unwrap_or(o.block_repeats);
        o.n_best = self.n_best.unwrap_or(o.n_best);
        o.max_len_a = self.max_len_a.unwrap_or(o.max_len_a);
        o.max_len_b = self.max_len_b.unwrap_or(o.max_len_b);
        o
    }

    /// The options of [`crate::translate::translate`]: these search options, `--batch`, and
    /// heatmaps if `attention`.
    pub fn translate_options(&self, attention: bool) -> TranslateOptions {
        TranslateOptions {
            search: self.options(),
            attention,
            batch: self.batch,
        }
    }
}

/// Which engine translates.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum EngineKind {
    /// The WebGPU engine (wgpu: Vulkan, Metal, DX12).
    #[default]
    Gpu,
    /// The int8 CPU engine (AVX-512 VNNI or AVX2 where the CPU has them).
    Cpu,
}

/// The engine flags of `translate` and `evaluate`.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct EngineArgs {
    /// The engine: `gpu` (WebGPU) or `cpu` (int8 SIMD on the CPU) [default: gpu; `translate`
    /// takes the CPU engine, with a notice, when there is no GPU adapter or the only one is a
    /// CPU emulation such as lavapipe, many times slower than the CPU engine; `--engine gpu`
    /// uses such an adapter].
    #[arg(long, value_enum)]
    pub engine: Option<EngineKind>,
    /// With the CPU engine: threads for the large matrix products, 1 to 256 [default: 1].
    #[arg(long, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=256))]
    pub threads: Option<usize>,
}

impl EngineArgs {
    /// The CPU engine's options these flags describe.
    pub fn cpu_options(&self) -> CpuOptions {
        CpuOptions {
            threads: self.threads.unwrap_or(1).max(1),
            ..CpuOptions::default()
        }
    }

    /// Exits with a usage error of the command `C` when `--threads` is given and the CPU engine
    /// cannot run (`cpu_engine` false), where it would silently do nothing; `how` says what
    /// does run it.
    pub fn refuse_unused_threads<C: clap::CommandFactory>(&self, cpu_engine: bool, how: &str) {
        if self.threads.is_some() && !cpu_engine {
            C::command()
                .error(
                    clap::error::ErrorKind::ArgumentConflict,
                    format!(
                        "--threads sets the CPU engine's threads, and this command would not \
                         run the CPU engine: {how}, or drop --threads"
                    ),
                )
                .exit();
        }
    }
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 { a } else { gcd(b, a % b) }
}

#[cfg(test)]
mod tests {
    use super::{CliResult, SearchArgs, error_report};
    use crate::search::SearchOptions;

    #[derive(Debug, thiserror::Error)]
    enum Outer {
        #[error("cannot load the model")]
        Load(#[source] std::io::Error),
        #[error("bad config: {0}")]
        Config(#[source] std::io::Error),
    }

    #[test]
    fn errors_are_reported_with_each_cause_once() {
        let io = || std::io::Error::other("disk on fire");
        assert_eq!(
            error_report(&Outer::Load(io())),
            "error: cannot load the model\n  caused by: disk on fire"
        );
        assert_eq!(
            error_report(&Outer::Config(io())),
            "error: bad config: disk on fire"
        );
        // `?` takes a `String` with context as well as a library error.
        let with_context = |line: usize| -> CliResult {
            Err(format!("line {line}: too long"))?;
            Ok(())
        };
        let e = with_context(3).expect_err("an error");
        assert_eq!(error_report(e.as_ref()), "error: line 3: too long");
    }

    #[test]
    fn defaults_are_the_reference_ones_and_flags_override() {
        assert_eq!(SearchArgs::default().options(), SearchOptions::default());
        let beam1 = SearchArgs {
            beam: Some(1),
            ..Default::default()
        };
        assert_eq!(beam1.options().groups, 1);
        assert_eq!(beam1.options().validate(), Ok(()));
        // A beam the default 4 groups do not divide gets the most groups that do.
        for (beam, groups) in [(2, 2), (3, 1), (6, 2), (12, 4)] {
            let options = SearchArgs {
                beam: Some(beam),
                ..Default::default()
            }
            .options();
            assert_eq!(options.groups, groups, "--beam {beam}");
            assert_eq!(options.validate(), Ok(()), "--beam {beam}");
        }
        let asked = SearchArgs {
            beam: Some(2),
            groups: Some(4),
            ..Default::default()
        };
        assert!(asked.options().validate().is_err(), "groups given are kept");
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
