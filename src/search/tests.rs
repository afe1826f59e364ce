//! Beam search against hand-made score tables and seeded random ones.

use pollster::block_on;
use std::cell::RefCell;
use std::convert::Infallible;

use super::testing::{TableError, TableModel};
use super::*;

const BOS: u32 = 0;
const EOS: u32 = 1;
const A: u32 = 2;
const B: u32 = 3;
const C: u32 = 4;
/// Vocabulary of the hand-made tables: BOS, EOS, A, B, C, D.
const V: usize = 6;
/// The model's length cap in the hand-made tables.
const CAP: usize = 100;

/// Logits whose log-softmax is `ln p` for the listed tokens; the remaining mass is spread over
/// the other tokens except BOS, which is impossible (`-inf`).
fn dist(probs: &[(u32, f32)]) -> Vec<f32> {
    let listed: f32 = probs.iter().map(|p| p.1).sum();
    let others = V - 1 - probs.len();
    let rest = (1.0 - listed).max(1e-6) / others.max(1) as f32;
    let mut logits = vec![rest.ln(); V];
    logits[BOS as usize] = f32::NEG_INFINITY;
    for &(token, p) in probs {
        logits[token as usize] = p.ln();
    }
    logits
}

/// Plain options for the hand-made tables: no penalties, α = 0, at most 10 tokens.
fn plain(beam: usize, groups: usize) -> SearchOptions {
    SearchOptions {
        beam,
        groups,
        diversity: 0.0,
        length_penalty: 0.0,
        repetition_penalty: 1.0,
        repetition_window: 0,
        block_repeats: 0,
        n_best: 1,
        max_len_a: 0.0,
        max_len_b: 10,
    }
}

fn run(options: &SearchOptions, table: impl FnMut(&[u32]) -> Vec<f32>) -> SearchResult {
    let mut model = TableModel::new(V, BOS, EOS, CAP, table);
    block_on(beam_search(&mut model, options, 5)).expect("search runs")
}

/// Rows scored at each step.
fn rows_per_step(result: &SearchResult) -> Vec<usize> {
    result.steps.iter().map(|s| s.parents.len()).collect()
}

fn best_tokens(result: &SearchResult) -> Vec<u32> {
    result.best().expect("a hypothesis").tokens.clone()
}

/// SplitMix64, enough randomness for tables without the `rand` crate.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32
    }
}

/// A random language model over `vocab` tokens: logits in [-3, 3) drawn from a generator
/// seeded by `seed` and the history; EOS grows likelier with length; BOS is impossible. Odd
/// seeds round the logits to multiples of 0.5, so that equal scores (ties) are common.
fn random_table(seed: u64, vocab: usize) -> impl FnMut(&[u32]) -> Vec<f32> {
    move |history: &[u32]| {
        let mut rng = SplitMix(seed);
        for &t in history {
            rng.0 ^= u64::from(t) + 1;
            rng.next();
        }
        (0..vocab)
            .map(|i| {
                let x = match i as u32 {
                    BOS => f32::NEG_INFINITY,
                    EOS => rng.unit() * 6.0 - 4.0 + 0.5 * history.len() as f32,
                    _ => rng.unit() * 6.0 - 3.0,
                };
                if !seed.is_multiple_of(2) {
                    (x * 2.0).round() / 2.0
                } else {
                    x
                }
            })
            .collect()
    }
}

/// A spread of search settings for the random-table properties.
fn random_configs(seed: u64) -> Vec<SearchOptions> {
    let alpha = [0.0, 0.6, 1.0][(seed % 3) as usize];
    let (penalty, window) = if seed.is_multiple_of(2) {
        (1.5, 3)
    } else {
        (1.0, 0)
    };
    [
        (1, 1, 0.0),
        (4, 1, 0.0),
        (4, 2, 0.5),
        (8, 4, 0.5),
        (6, 3, 2.0),
        (8, 2, 0.0),
    ]
    .into_iter()
    .map(|(beam, groups, diversity)| SearchOptions {
        beam,
        groups,
        diversity,
        length_penalty: alpha,
        repetition_penalty: penalty,
        repetition_window: window,
        block_repeats: 0,
        n_best: (beam / 2).max(1),
        max_len_a: 1.0,
        max_len_b: 4,
    })
    .collect()
}

fn random_search(
    seed: u64,
    vocab: usize,
    options: &SearchOptions,
    k: usize,
    early_termination: bool,
) -> SearchResult {
    let mut model = TableModel::new(vocab, BOS, EOS, CAP, random_table(seed, vocab));
    block_on(search(
        &mut model,
        options,
        &[4],
        k,
        early_termination,
        &|| false,
    ))
    .expect("search runs")
    .remove(0)
}

/// Greedy decoding written independently of the search: argmax (lowest id on ties) of the
/// penalized distribution until EOS or `max_len` tokens.
fn greedy_argmax(
    mut table: impl FnMut(&[u32]) -> Vec<f32>,
    max_len: usize,
    penalty: f32,
    window: usize,
) -> (Vec<u32>, f32) {
    let mut history = Vec::new();
    let mut sum = 0.0f32;
    loop {
        let mut lp = table(&history);
        log_softmax(&mut lp);
        apply_repetition_penalty(&mut lp, &history, penalty, window);
        let mut best = 0;
        for i in 1..lp.len() {
            if lp[i] > lp[best] {
                best = i;
            }
        }
        sum += lp[best];
        if best as u32 == EOS {
            return (history, sum);
        }
        history.push(best as u32);
        if history.len() == max_len {
            return (history, sum);
        }
    }
}

#[test]
fn beam_1_equals_greedy_argmax() {
    for seed in 0..30u64 {
        let vocab = 5 + (seed as usize % 7);
        let (penalty, window) = if seed.is_multiple_of(2) {
            (1.5, 4)
        } else {
            (1.0, 0)
        };
        let options = SearchOptions {
            repetition_penalty: penalty,
            repetition_window: window,
            max_len_a: 1.0,
            max_len_b: 4,
            ..SearchOptions::greedy()
        };
        let result = random_search(seed, vocab, &options, options.candidates_per_beam(), true);
        let (tokens, sum) = greedy_argmax(random_table(seed, vocab), 8, penalty, window);
        assert_eq!(result.k, 1, "greedy must read back one candidate per step");
        assert_eq!(result.hypotheses.len(), 1);
        let best = &result.hypotheses[0];
        assert_eq!(best.tokens, tokens, "seed {seed}");
        assert_eq!(best.logprob, sum, "seed {seed}");
        assert!(rows_per_step(&result).iter().all(|&r| r == 1));
    }
}

#[test]
fn eos_ends_a_hypothesis() {
    let asked = RefCell::new(Vec::new());
    let result = run(&plain(2, 1), |h| {
        asked.borrow_mut().push(h.to_vec());
        match h {
            [] => dist(&[(A, 0.9)]),
            [A] => dist(&[(EOS, 0.9)]),
            _ => dist(&[(C, 0.5)]),
        }
    });
    let best = result.best().expect("a hypothesis");
    assert_eq!(best.tokens, vec![A]);
    assert_eq!(best.finish, Finish::Eos);
    assert_eq!(best.rows.len(), 2, "the length counts EOS");
    assert!((best.logprob - 2.0 * 0.9f32.ln()).abs() < 1e-4);
    assert!(
        asked.borrow().iter().all(|h| !h.contains(&EOS)),
        "a hypothesis was extended past EOS"
    );
}

#[test]
fn length_penalty_changes_the_ranking() {
    // Short: B EOS, sum ≈ -0.70 over 2 tokens. Long: A A A A EOS, sum ≈ -1.34 over 5 tokens.
    let table = |h: &[u32]| match h {
        [] => dist(&[(B, 0.55), (A, 0.4)]),
        [B] => dist(&[(EOS, 0.9)]),
        [A] | [A, A] | [A, A, A] => dist(&[(A, 0.9)]),
        _ => dist(&[(EOS, 0.9)]),
    };
    let options = |alpha| SearchOptions {
        length_penalty: alpha,
        n_best: 2,
        ..plain(2, 1)
    };
    let total = run(&options(0.0), table);
    let mean = run(&options(1.0), table);
    assert_eq!(
        best_tokens(&total),
        vec![B],
        "α = 0 prefers the short hypothesis"
    );
    assert_eq!(
        best_tokens(&mean),
        vec![A, A, A, A],
        "α = 1 prefers the long one"
    );
    assert_eq!(total.hypotheses[1].tokens, vec![A, A, A, A]);
    assert_eq!(mean.hypotheses[1].tokens, vec![B]);
    let long = &mean.hypotheses[0];
    assert_eq!(long.score, long.logprob / 5.0);
}

#[test]
fn beam_finds_what_greedy_misses() {
    // A looks better first but leads nowhere; B is certain to end well.
    let table = |h: &[u32]| match h {
        [] => dist(&[(A, 0.6), (B, 0.4)]),
        [B] => dist(&[(EOS, 0.99)]),
        _ => dist(&[]),
    };
    let greedy = run(&plain(1, 1), table);
    let beam = run(&plain(2, 1), table);
    assert_eq!(best_tokens(&greedy)[0], A);
    assert_eq!(best_tokens(&beam), vec![B]);
    assert!(beam.hypotheses[0].score > greedy.hypotheses[0].score);
}

#[test]
fn diversity_makes_groups_start_differently() {
    let table = |h: &[u32]| match h {
        [] => dist(&[(A, 0.4), (B, 0.35), (C, 0.2)]),
        _ => dist(&[(EOS, 0.95)]),
    };
    let first_tokens = |diversity| {
        let options = SearchOptions {
            diversity,
            n_best: 2,
            ..plain(2, 2)
        };
        let result = run(&options, table);
        let mut by_group: Vec<(usize, u32)> = result
            .hypotheses
            .iter()
            .map(|h| (h.group, h.tokens[0]))
            .collect();
        by_group.sort();
        by_group
    };
    assert_eq!(first_tokens(0.0), vec![(0, A), (1, A)]);
    assert_eq!(first_tokens(0.5), vec![(0, A), (1, B)]);
}

#[test]
fn repetition_penalty_breaks_a_loop() {
    let table = |_: &[u32]| dist(&[(A, 0.5), (EOS, 0.4)]);
    let looping = run(&plain(1, 1), table);
    assert_eq!(best_tokens(&looping), vec![A; 10]);
    assert_eq!(looping.hypotheses[0].finish, Finish::MaxLen);
    let options = SearchOptions {
        repetition_penalty: 1.5,
        repetition_window: 30,
        ..plain(1, 1)
    };
    let penalized = run(&options, table);
    assert_eq!(best_tokens(&penalized), vec![A]);
    assert_eq!(penalized.hypotheses[0].finish, Finish::Eos);
}

#[test]
fn repetition_penalty_hits_distinct_tokens_in_the_window_once() {
    let base = [-1.0, -2.0, -3.0, -4.0, 0.0];
    let mut lp = base;
    // Window 3 sees [3, 1, 1]: tokens 1 and 3, once each; token 2 and 0 are too old or absent;
    // token 9 is outside the vocabulary and ignored.
    apply_repetition_penalty(&mut lp, &[2, 9, 3, 1, 1], 1.5, 3);
    assert_eq!(lp, [-1.0, -3.0, -3.0, -6.0, 0.0]);
    let mut lp = base;
    apply_repetition_penalty(&mut lp, &[4, 9], 2.0, 30);
    assert_eq!(lp, base, "a certain token (log-prob 0) stays certain");
    for (penalty, window) in [(1.0, 30), (1.5, 0)] {
        let mut lp = base;
        apply_repetition_penalty(&mut lp, &[0, 1, 2], penalty, window);
        assert_eq!(
            lp, base,
            "penalty {penalty}, window {window} must do nothing"
        );
    }
}

#[test]
fn max_length_is_respected() {
    let table = |_: &[u32]| {
        let mut l = dist(&[(A, 0.5), (B, 0.3)]);
        l[EOS as usize] = f32::NEG_INFINITY;
        l
    };
    let options = SearchOptions {
        max_len_a: 0.5,
        max_len_b: 2,
        n_best: 4,
        ..plain(4, 1)
    };
    let mut model = TableModel::new(V, BOS, EOS, CAP, table);
    let result = block_on(beam_search(&mut model, &options, 6)).expect("search runs");
    assert_eq!(result.max_len, 5);
    assert_eq!(result.steps_taken(), 5);
    assert_eq!(result.hypotheses.len(), 4);
    for h in &result.hypotheses {
        assert_eq!(h.tokens.len(), 5);
        assert_eq!(h.finish, Finish::MaxLen);
    }
    let mut capped = TableModel::new(V, BOS, EOS, 3, table);
    let result = block_on(beam_search(&mut capped, &options, 6)).expect("search runs");
    assert_eq!(result.steps_taken(), 3, "the model's cap wins");
    assert!(result.hypotheses.iter().all(|h| h.tokens.len() == 3));
}

#[test]
fn max_target_len_scales_with_the_source_and_is_capped() {
    let options = SearchOptions {
        max_len_a: 1.5,
        max_len_b: 3,
        ..SearchOptions::default()
    };
    assert_eq!(options.max_target_len(4, 100), 9);
    assert_eq!(options.max_target_len(5, 100), 10, "floor(7.5) + 3");
    assert_eq!(options.max_target_len(4, 7), 7);
    let huge = SearchOptions {
        max_len_a: f32::MAX,
        max_len_b: usize::MAX,
        ..SearchOptions::default()
    };
    assert_eq!(huge.max_target_len(usize::MAX, 256), 256);
}

#[test]
fn a_short_source_gets_one_token_and_a_zero_cap_is_an_error() {
    // floor(0.5 · 1) + 0 = 0 would leave no room at all; the search gets one token instead of
    // failing the batch the sentence is in.
    let options = SearchOptions {
        max_len_a: 0.5,
        max_len_b: 0,
        ..plain(2, 1)
    };
    assert_eq!(options.max_target_len(1, CAP), 1);
    assert_eq!(options.max_target_len(4, CAP), 2);
    let table = |_: &[u32]| dist(&[(A, 0.6)]);
    let mut model = TableModel::new(V, BOS, EOS, CAP, table);
    let result = block_on(beam_search(&mut model, &options, 1)).expect("search runs");
    assert_eq!((result.max_len, best_tokens(&result)), (1, vec![A]));
    let mut no_room = TableModel::new(V, BOS, EOS, 0, table);
    let err = block_on(beam_search(&mut no_room, &options, 1)).expect_err("nothing fits");
    assert!(matches!(err, SearchError::ZeroCap), "{err}");
}

#[test]
fn output_is_sorted_and_deterministic() {
    for seed in 0..10 {
        let options = SearchOptions {
            n_best: 8,
            max_len_a: 1.0,
            max_len_b: 4,
            ..SearchOptions::default()
        };
        let first = random_search(seed, 9, &options, options.candidates_per_beam(), true);
        let second = random_search(seed, 9, &options, options.candidates_per_beam(), true);
        assert_eq!(first, second, "seed {seed}");
        assert_eq!(first.hypotheses.len(), 8);
        assert!(
            first
                .hypotheses
                .windows(2)
                .all(|w| w[0].score >= w[1].score),
            "seed {seed}: not sorted"
        );
        for h in &first.hypotheses {
            assert_eq!(h.score, length_normalized(h.logprob, h.rows.len(), 0.6));
        }
        assert_eq!(
            rows_per_step(&first)[0],
            1,
            "step 0 scores the BOS row only"
        );
        assert!(rows_per_step(&first).iter().all(|&r| r <= 8));
    }
}

#[test]
fn n_best_sets_the_output_count() {
    for n_best in [1, 3, 8] {
        let options = SearchOptions {
            n_best,
            ..SearchOptions::default()
        };
        let result = random_search(7, 12, &options, options.candidates_per_beam(), true);
        assert_eq!(result.hypotheses.len(), n_best);
    }
}

#[test]
fn defaults_are_the_reference_settings_and_valid() {
    let d = SearchOptions::default();
    assert_eq!((d.beam, d.groups, d.repetition_window), (8, 4, 30));
    assert_eq!(
        (d.diversity, d.length_penalty, d.repetition_penalty),
        (0.5, 0.6, 1.5)
    );
    assert_eq!(d.validate(), Ok(()));
    let greedy = SearchOptions::greedy();
    assert_eq!(greedy.validate(), Ok(()));
    assert_eq!(
        (greedy.beam, greedy.groups, greedy.repetition_penalty),
        (1, 1, 1.0)
    );
    assert_eq!(d.candidates_per_beam(), 8);
    assert_eq!(SearchOptions::greedy().candidates_per_beam(), 1);
    assert_eq!(plain(8, 1).candidates_per_beam(), 8);
    assert_eq!(
        plain(8, 4).candidates_per_beam(),
        2,
        "no diversity: groups are independent"
    );
}

#[test]
fn invalid_options_are_rejected_with_the_right_error() {
    let d = SearchOptions::default;
    let cases = [
        (SearchOptions { beam: 0, ..d() }, OptionsError::ZeroBeam),
        (
            SearchOptions {
                beam: 512,
                groups: 1,
                ..d()
            },
            OptionsError::BeamTooLarge { beam: 512 },
        ),
        (SearchOptions { groups: 0, ..d() }, OptionsError::ZeroGroups),
        (
            SearchOptions { groups: 3, ..d() },
            OptionsError::BeamNotDivisible { beam: 8, groups: 3 },
        ),
        (
            SearchOptions {
                diversity: -0.5,
                ..d()
            },
            OptionsError::BadDiversity { value: -0.5 },
        ),
        (
            SearchOptions {
                length_penalty: -1.0,
                ..d()
            },
            OptionsError::BadLengthPenalty { value: -1.0 },
        ),
        (
            SearchOptions {
                repetition_penalty: 0.5,
                ..d()
            },
            OptionsError::BadRepetitionPenalty { value: 0.5 },
        ),
        (
            SearchOptions {
                block_repeats: 17,
                ..d()
            },
            OptionsError::BlockRepeatsTooLarge { value: 17 },
        ),
        (SearchOptions { n_best: 0, ..d() }, OptionsError::ZeroNBest),
        (
            SearchOptions { n_best: 9, ..d() },
            OptionsError::NBestAboveBeam { n_best: 9, beam: 8 },
        ),
        (
            SearchOptions {
                max_len_a: -2.0,
                ..d()
            },
            OptionsError::BadMaxLenA { value: -2.0 },
        ),
        (
            SearchOptions {
                max_len_a: 0.0,
                max_len_b: 0,
                ..d()
            },
            OptionsError::ZeroMaxLen,
        ),
    ];
    for (options, want) in cases {
        assert_eq!(options.validate(), Err(want));
    }
    let nan = SearchOptions {
        length_penalty: f32::NAN,
        ..d()
    };
    assert!(matches!(
        nan.validate(),
        Err(OptionsError::BadLengthPenalty { .. })
    ));
    let inf = SearchOptions {
        diversity: f32::INFINITY,
        ..d()
    };
    assert!(matches!(
        inf.validate(),
        Err(OptionsError::BadDiversity { .. })
    ));

    // The search refuses them too, before calling the model.
    let mut model = TableModel::new(V, BOS, EOS, CAP, |_: &[u32]| -> Vec<f32> {
        panic!("the model must not be called with invalid options")
    });
    let err = block_on(beam_search(
        &mut model,
        &SearchOptions { beam: 0, ..d() },
        5,
    ));
    assert!(matches!(
        err,
        Err(SearchError::Options(OptionsError::ZeroBeam))
    ));
}

#[test]
fn parents_back_trace_reproduces_every_hypothesis() {
    for seed in 0..20 {
        for options in random_configs(seed) {
            let result = random_search(seed, 8, &options, options.candidates_per_beam(), true);
            for h in &result.hypotheses {
                let len = h.rows.len();
                assert_eq!(h.rows[0], 0, "every hypothesis starts at the BOS row");
                // Walk back from the last row through the parents alone.
                let mut row = h.rows[len - 1];
                let mut walked = vec![row];
                for t in (1..len).rev() {
                    row = result.steps[t].parents[row];
                    walked.push(row);
                }
                walked.reverse();
                assert_eq!(walked, h.rows, "seed {seed}, {options:?}");
                // The decoder inputs along the trace are the generated tokens.
                let inputs: Vec<u32> = (1..len)
                    .map(|t| result.steps[t].tokens[h.rows[t]])
                    .collect();
                let generated = match h.finish {
                    Finish::Eos => &h.tokens[..],
                    Finish::MaxLen => &h.tokens[..len - 1],
                };
                assert_eq!(inputs, generated, "seed {seed}, {options:?}");
                assert_eq!(result.steps[0].tokens, vec![BOS]);
            }
        }
    }
}

#[test]
fn early_termination_stops_before_max_len_when_it_must() {
    // EOS at once is likely; the alternative loops on A and can never catch up.
    let table = |h: &[u32]| match h {
        [] => dist(&[(EOS, 0.8), (A, 0.15)]),
        _ => {
            let mut l = dist(&[(A, 0.9)]);
            l[EOS as usize] = f32::NEG_INFINITY;
            l
        }
    };
    let options = SearchOptions {
        length_penalty: 0.6,
        ..plain(2, 1)
    };
    let mut model = TableModel::new(V, BOS, EOS, CAP, table);
    let early = block_on(search(&mut model, &options, &[5], 2, true, &|| false))
        .expect("search runs")
        .remove(0);
    let mut model = TableModel::new(V, BOS, EOS, CAP, table);
    let full = block_on(search(&mut model, &options, &[5], 2, false, &|| false))
        .expect("search runs")
        .remove(0);
    assert!(early.stopped_early);
    assert_eq!(early.steps_taken(), 1);
    assert_eq!(full.steps_taken(), full.max_len);
    assert!(!full.stopped_early);
    assert_eq!(early.hypotheses, full.hypotheses);
    assert_eq!(best_tokens(&early), Vec::<u32>::new());
}

#[test]
fn early_termination_bounds_live_hypotheses_at_max_len() {
    // After step 0, EOS (mean -0.51) beats A (sum -1.20 over 1 token), but A's continuation is
    // nearly certain and ends with mean ≈ -0.18: a bound using the current length would stop.
    let table = |h: &[u32]| match h.len() {
        0 => dist(&[(EOS, 0.6), (A, 0.3)]),
        1..6 => dist(&[(A, 0.99)]),
        _ => dist(&[(EOS, 0.99)]),
    };
    let options = SearchOptions {
        length_penalty: 1.0,
        ..plain(2, 1)
    };
    let mut model = TableModel::new(V, BOS, EOS, CAP, table);
    let early = block_on(search(&mut model, &options, &[5], 2, true, &|| false))
        .expect("search runs")
        .remove(0);
    let mut model = TableModel::new(V, BOS, EOS, CAP, table);
    let full = block_on(search(&mut model, &options, &[5], 2, false, &|| false))
        .expect("search runs")
        .remove(0);
    assert_eq!(best_tokens(&full), vec![A; 6]);
    assert_eq!(early.hypotheses, full.hypotheses);
}

#[test]
fn early_termination_never_changes_the_result() {
    let mut stopped = 0;
    for seed in 0..40 {
        for options in random_configs(seed) {
            let k = options.candidates_per_beam();
            let early = random_search(seed, 7, &options, k, true);
            let full = random_search(seed, 7, &options, k, false);
            assert_eq!(
                early.hypotheses, full.hypotheses,
                "seed {seed}, {options:?}"
            );
            assert!(early.steps_taken() <= full.steps_taken());
            stopped += usize::from(early.stopped_early);
        }
    }
    assert!(
        stopped > 20,
        "early termination fired only {stopped} times; the test is too weak"
    );
}

#[test]
fn candidates_per_beam_is_exact() {
    let mut too_few_differs = 0;
    for seed in 0..40 {
        for options in random_configs(seed) {
            let vocab = 9;
            let exact = random_search(seed, vocab, &options, vocab, false);
            let got = random_search(seed, vocab, &options, options.candidates_per_beam(), false);
            assert_eq!(got.hypotheses, exact.hypotheses, "seed {seed}, {options:?}");
            assert_eq!(got.steps, exact.steps, "seed {seed}, {options:?}");
            // With diversity, only beam / groups candidates per row is not enough.
            let per_group = options.beam / options.groups;
            if options.diversity > 0.0 && per_group < options.beam {
                let few = random_search(seed, vocab, &options, per_group, false);
                too_few_differs += usize::from(few.hypotheses != exact.hypotheses);
            }
        }
    }
    assert!(
        too_few_differs > 0,
        "the comparison never detects a too-small k"
    );
}

#[test]
fn top_k_sorts_descending_and_breaks_ties_by_token() {
    let lp = [-2.0, -1.0, -3.0, -1.0, f32::NEG_INFINITY];
    let tokens = |k| top_k(&lp, k).iter().map(|c| c.token).collect::<Vec<_>>();
    assert_eq!(tokens(3), vec![1, 3, 0]);
    assert_eq!(tokens(1), vec![1]);
    assert_eq!(tokens(10), vec![1, 3, 0, 2, 4]);
    assert!(tokens(0).is_empty());
}

#[test]
fn top_k_equals_a_full_sort_on_random_rows_with_ties() {
    // The one-pass top-k against sorting every (log-prob, id) pair, on rows with many ties,
    // -inf, 0 and NaN.
    let mut rng = SplitMix(7);
    for case in 0..300 {
        let n = 1 + (rng.next() % 60) as usize;
        let lp: Vec<f32> = (0..n)
            .map(|_| match rng.next() % 10 {
                0 => f32::NEG_INFINITY,
                1 => 0.0,
                2 if case % 7 == 0 => f32::NAN,
                r => -((rng.next() % 5) as f32) - r as f32 / 4.0,
            })
            .collect();
        let mut ids: Vec<usize> = (0..n).collect();
        ids.sort_by(|&a, &b| lp[b].total_cmp(&lp[a]).then(a.cmp(&b)));
        for k in [1, 2, 3, 8, n, n + 3] {
            let got: Vec<u32> = top_k(&lp, k).iter().map(|c| c.token).collect();
            let want: Vec<u32> = ids.iter().take(k).map(|&i| i as u32).collect();
            assert_eq!(got, want, "case {case}, k {k}, {lp:?}");
        }
    }
}

#[test]
fn log_softmax_normalises_and_keeps_impossible_tokens_impossible() {
    let mut l = [1.0, 2.0, 3.0, f32::NEG_INFINITY];
    log_softmax(&mut l);
    let total: f32 = l.iter().map(|x| x.exp()).sum();
    assert!((total - 1.0).abs() < 1e-6);
    assert!((l[2] - l[1] - 1.0).abs() < 1e-6);
    assert_eq!(l[3], f32::NEG_INFINITY);
    assert!(l.iter().all(|&x| x <= 0.0));
}

/// A model that always gives the same answer, for contract violations.
struct Scripted(Vec<Vec<Candidate>>);

impl StepModel for Scripted {
    type Error = Infallible;
    fn bos(&self) -> u32 {
        BOS
    }
    fn eos(&self) -> u32 {
        EOS
    }
    fn max_len_cap(&self) -> usize {
        CAP
    }
    async fn step(&mut self, _: &StepRequest<'_>) -> Result<Vec<Vec<Candidate>>, Infallible> {
        Ok(self.0.clone())
    }
}

#[test]
fn malformed_model_output_is_rejected() {
    let c = |token, logprob| Candidate { token, logprob };
    let run =
        |answer: Vec<Vec<Candidate>>| block_on(beam_search(&mut Scripted(answer), &plain(2, 1), 5));
    assert!(matches!(
        run(vec![vec![c(A, -1.0)], vec![c(A, -1.0)]]),
        Err(SearchError::RowCount {
            step: 0,
            expected: 1,
            got: 2
        })
    ));
    assert!(matches!(
        run(vec![vec![]]),
        Err(SearchError::CandidateCount { got: 0, .. })
    ));
    assert!(matches!(
        run(vec![vec![c(A, -1.0), c(B, -1.0), c(C, -2.0)]]),
        Err(SearchError::CandidateCount { got: 3, k: 2, .. })
    ));
    assert!(matches!(
        run(vec![vec![c(A, 0.5)]]),
        Err(SearchError::BadLogprob { token: A, .. })
    ));
    assert!(matches!(
        run(vec![vec![c(A, f32::NAN)]]),
        Err(SearchError::BadLogprob { token: A, .. })
    ));
    assert!(matches!(
        run(vec![vec![c(A, -2.0), c(B, -1.0)]]),
        Err(SearchError::Unsorted { index: 1, .. })
    ));
    assert!(matches!(
        run(vec![vec![c(A, -1.0), c(A, -2.0)]]),
        Err(SearchError::DuplicateToken { token: A, .. })
    ));
    // The model's own errors come back with the step.
    let mut broken = TableModel::new(V, BOS, EOS, CAP, |_: &[u32]| vec![0.0; 3]);
    let err = block_on(beam_search(&mut broken, &plain(2, 1), 5));
    assert!(matches!(
        err,
        Err(SearchError::Model {
            step: 0,
            source: TableError::WrongVocab { got: 3, .. }
        })
    ));
}

#[test]
fn table_model_catches_broken_parent_bookkeeping() {
    let mut model = TableModel::new(V, BOS, EOS, CAP, |_: &[u32]| dist(&[]));
    let row = |parent, last_token, history| StepRow {
        sentence: 0,
        parent,
        last_token,
        history,
    };
    let request = |step, rows| StepRequest {
        step,
        k: 2,
        repetition_penalty: 1.0,
        repetition_window: 0,
        block_repeats: 0,
        repeatable: &[],
        rows,
    };
    block_on(model.step(&request(0, vec![row(0, BOS, &[])]))).expect("step 0 is fine");
    let out_of_range = block_on(model.step(&request(1, vec![row(1, A, &[A])])));
    assert!(matches!(
        out_of_range,
        Err(TableError::ParentOutOfRange { parent: 1, .. })
    ));
    let mismatch = block_on(model.step(&request(1, vec![row(0, A, &[B])])));
    assert!(matches!(
        mismatch,
        Err(TableError::HistoryMismatch { row: 0, .. })
    ));
    block_on(model.step(&request(1, vec![row(0, A, &[A])]))).expect("a consistent row is fine");
}

#[test]
fn a_batch_gives_each_sentence_its_own_search() {
    // Sentences of different lengths (so different maximum lengths and finishing steps), each
    // with its own table: searched together, each result equals its search alone, and the
    // table model's parent checks see every row extend a row of its own sentence.
    let lens = [4, 1, 7, 3, 5];
    for seed in 0..6 {
        for options in random_configs(seed) {
            let vocab = 9;
            let tables = (0..lens.len() as u64)
                .map(|s| random_table(seed * 100 + s, vocab))
                .collect();
            let mut model = TableModel::batch(vocab, BOS, EOS, CAP, tables);
            let batch = block_on(beam_search_batch(&mut model, &options, &lens, &|| false))
                .expect("batch runs");
            assert_eq!(batch.len(), lens.len());
            for (s, (result, &len)) in batch.iter().zip(&lens).enumerate() {
                let mut alone = TableModel::new(
                    vocab,
                    BOS,
                    EOS,
                    CAP,
                    random_table(seed * 100 + s as u64, vocab),
                );
                let expected = block_on(beam_search(&mut alone, &options, len)).expect("runs");
                assert_eq!(result, &expected, "seed {seed}, sentence {s}, {options:?}");
            }
        }
    }
}

#[test]
fn a_batch_reports_a_wrong_row_count() {
    // A model that drops the last row of a batched request is caught, not misattributed.
    struct Short;
    impl StepModel for Short {
        type Error = Infallible;
        fn max_len_cap(&self) -> usize {
            CAP
        }
        async fn step(&mut self, r: &StepRequest<'_>) -> Result<Vec<Vec<Candidate>>, Infallible> {
            let mut logits = dist(&[(A, 0.5)]);
            log_softmax(&mut logits);
            Ok(vec![top_k(&logits, r.k); r.rows.len() - 1])
        }
    }
    let err = block_on(beam_search_batch(
        &mut Short,
        &plain(1, 1),
        &[3, 3],
        &|| false,
    ))
    .expect_err("a row is missing");
    assert!(matches!(
        err,
        SearchError::RowCount {
            step: 0,
            expected: 2,
            got: 1
        }
    ));
}

#[test]
fn a_cancelled_batch_stops_between_steps() {
    let asked = std::cell::Cell::new(0);
    let cancelled = || {
        asked.set(asked.get() + 1);
        asked.get() >= 3
    };
    let tables = (0..3).map(|s| random_table(s, 9)).collect();
    let mut model = TableModel::batch(9, BOS, EOS, CAP, tables);
    let options = SearchOptions {
        max_len_b: 50,
        ..plain(4, 1)
    };
    let err = block_on(beam_search_batch(
        &mut model,
        &options,
        &[20, 20, 20],
        &cancelled,
    ))
    .expect_err("cancelled");
    // Not asked before step 0; asked before steps 1, 2 and 3, which did not run.
    assert!(matches!(err, SearchError::Cancelled { step: 3 }), "{err}");
}

/// Whether `tokens` ends in a loop of the repeat block's kind: the same token three times, or
/// an `n`-token phrase (`2 ≤ n ≤ span`) twice in a row. Written apart from `repeat_bans`.
fn ends_in_loop(tokens: &[u32], span: usize) -> bool {
    let len = tokens.len();
    if span == 0 {
        return false;
    }
    let run = len >= 3 && tokens[len - 3..].iter().all(|&t| t == tokens[len - 1]);
    let phrase =
        (2..=span).any(|n| len >= 2 * n && tokens[len - 2 * n..len - n] == tokens[len - n..]);
    run || phrase
}

#[test]
fn repeat_bans_are_exactly_the_tokens_that_close_a_loop() {
    assert_eq!(repeat_bans(&[A, A], 4, &[]), vec![A], "a third A");
    assert!(
        repeat_bans(&[A], 4, &[]).is_empty(),
        "a second A is allowed"
    );
    assert_eq!(repeat_bans(&[A, B, C, A, B], 4, &[]), vec![C]);
    assert_eq!(repeat_bans(&[A, B, A], 4, &[]), vec![B]);
    assert!(
        repeat_bans(&[A, B, A], 1, &[]).is_empty(),
        "span 1: only runs of three"
    );
    assert!(repeat_bans(&[A, A], 0, &[]).is_empty(), "span 0 is off");
    // Several at once, each once: `C A A` bans A (a run), `A C A` bans C (`A C A C`).
    assert_eq!(repeat_bans(&[A, C, A, A], 4, &[]), vec![A]);
    assert_eq!(repeat_bans(&[C, A, C, A, C], 4, &[]), vec![A]);
    // A repeatable token is never banned, the others still are.
    let a_repeats: Vec<bool> = (0..V).map(|t| t == A as usize).collect();
    assert!(repeat_bans(&[A, A], 4, &a_repeats).is_empty());
    assert!(repeat_bans(&[C, A, C, A, C], 4, &a_repeats).is_empty());
    assert_eq!(repeat_bans(&[A, B, A], 4, &a_repeats), vec![B]);
    let mut rng = SplitMix(7);
    for _ in 0..3000 {
        let vocab = 2 + (rng.next() % 3) as u32;
        let len = (rng.next() % 12) as usize;
        let span = (rng.next() % 6) as usize;
        let history: Vec<u32> = (0..len)
            .map(|_| (rng.next() % u64::from(vocab)) as u32)
            .collect();
        // Each token repeatable or not at random; the mask may be shorter than the vocabulary.
        let repeatable: Vec<bool> = (0..rng.next() % 5)
            .map(|_| rng.next().is_multiple_of(3))
            .collect();
        let bans = repeat_bans(&history, span, &repeatable);
        assert!(bans.len() <= span, "{history:?} span {span}: {bans:?}");
        for token in 0..vocab {
            let mut next = history.clone();
            next.push(token);
            let spared = repeatable.get(token as usize) == Some(&true);
            assert_eq!(
                bans.contains(&token),
                ends_in_loop(&next, span) && !spared,
                "{history:?} + {token}, span {span}, repeatable {repeatable:?}"
            );
        }
    }
}

#[test]
fn block_repeats_keeps_loops_out_of_every_hypothesis() {
    // A model that always prefers A, then B, and ends only after 8 tokens: it would say
    // A A A … or A B A B ….
    let table = |h: &[u32]| {
        if h.len() >= 8 {
            dist(&[(EOS, 0.9)])
        } else {
            dist(&[(A, 0.5), (B, 0.4), (EOS, 1e-6)])
        }
    };
    let loops = |tokens: &[u32]| (1..=tokens.len()).any(|end| ends_in_loop(&tokens[..end], 4));
    for (beam, groups) in [(1, 1), (4, 1), (8, 4)] {
        let looping = run(&plain(beam, groups), table);
        assert!(
            looping
                .hypotheses
                .iter()
                .any(|h| ends_in_loop(&h.tokens[..3], 4)),
            "the table loops without the block"
        );
        let options = SearchOptions {
            block_repeats: 4,
            n_best: beam,
            ..plain(beam, groups)
        };
        let result = run(&options, table);
        assert!(!result.hypotheses.is_empty());
        for h in &result.hypotheses {
            assert!(!loops(&h.tokens), "beam {beam}: {:?} loops", h.tokens);
            assert_eq!(h.tokens.len(), 8, "beam {beam}: {:?}", h.tokens);
            assert!(h.logprob.is_finite(), "a banned token was chosen: {h:?}");
        }
    }
}
