//! Token-budget batching: coverage, budget, padding, determinism, layout, length limits.

use std::collections::HashMap;

use super::*;
use crate::data::rng::SplitMix64;

const IDS: SpecialIds = SpecialIds {
    pad: 0,
    bos: 1,
    eos: 2,
};

/// Whitespace-word ids (from 4 up, in order of first appearance): a stand-in tokenizer with a
/// realistic length distribution.
fn word_ids(corpus: &Corpus) -> Vec<TokenPair> {
    let mut vocab: HashMap<String, u32> = HashMap::new();
    let mut ids = |text: &str| -> Vec<u32> {
        text.split_whitespace()
            .map(|w| {
                let next = 4 + vocab.len() as u32;
                *vocab.entry(w.to_string()).or_insert(next)
            })
            .collect()
    };
    corpus
        .pairs
        .iter()
        .map(|p| TokenPair::new(ids(&p.source), ids(&p.target)))
        .collect()
}

/// `n` pairs with subword-like lengths: source length log-normal (median 20 tokens, σ 0.7),
/// target length the source length times a log-normal factor (median 1.1, σ 0.25), both at
/// least 1 and at most 200.
fn synthetic_pairs(n: usize, seed: u64) -> Vec<TokenPair> {
    let mut rng = SplitMix64::new(seed);
    let mut normal = move || {
        // Box–Muller on two uniforms in (0, 1].
        let u1 = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        let u2 = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        (-2.0 * (1.0 - u1).ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    };
    (0..n)
        .map(|_| {
            let s = (20.0 * (0.7 * normal()).exp()).round().clamp(1.0, 200.0) as usize;
            let t = (s as f64 * 1.1 * (0.25 * normal()).exp())
                .round()
                .clamp(1.0, 200.0) as usize;
            TokenPair::new(vec![5; s], vec![6; t])
        })
        .collect()
}

fn cfg(max_tokens: usize, max_seq_len: usize, bucket_pairs: usize, seed: u64) -> BatchConfig {
    BatchConfig {
        max_tokens,
        max_seq_len,
        overlong: Overlong::Drop,
        bucket_pairs,
        seed,
    }
}

fn sorted_rows(plan: &[Vec<usize>]) -> Vec<usize> {
    let mut rows: Vec<usize> = plan.iter().flatten().copied().collect();
    rows.sort_unstable();
    rows
}

#[test]
fn every_pair_appears_exactly_once_per_epoch() {
    let pairs = word_ids(&de_en_train());
    let n = pairs.len();
    let b = Batcher::new(pairs, &cfg(256, 150, 100, 1), IDS).unwrap();
    assert_eq!(b.len(), n);
    for epoch in 0..4 {
        let plan = b.plan(epoch);
        assert_eq!(
            sorted_rows(&plan),
            (0..n).collect::<Vec<_>>(),
            "epoch {epoch}"
        );
        assert!(plan.len() > 5);
    }
    // With pairs dropped, exactly the kept ones appear.
    let mut pairs = word_ids(&de_en_train());
    pairs[3].src.clear();
    pairs[10] = TokenPair::new(vec![7; 200], vec![7; 3]);
    let b = Batcher::new(pairs, &cfg(256, 150, 100, 1), IDS).unwrap();
    let expect: Vec<usize> = (0..n).filter(|&i| i != 3 && i != 10).collect();
    assert_eq!(sorted_rows(&b.plan(0)), expect);
}

#[test]
fn no_batch_exceeds_the_budget_unless_a_pair_alone_does() {
    let pairs = synthetic_pairs(5000, 11);
    let b = Batcher::new(pairs, &cfg(120, 200, 1000, 2), IDS).unwrap();
    let mut alone = 0;
    for batch in b.epoch(0, 0) {
        if batch.padded_tokens() > 120 {
            assert_eq!(batch.batch, 1, "an over-budget batch must be a single pair");
            alone += 1;
        }
        assert_eq!(batch.src.len(), batch.batch * batch.src_len);
        assert_eq!(batch.tgt_in.len(), batch.batch * batch.tgt_len);
    }
    // Pairs longer than 120 tokens exist in this distribution, so the rule was exercised.
    assert!(alone > 0);
}

#[test]
fn padding_overhead_is_small_on_realistic_lengths() {
    let pairs = synthetic_pairs(20_000, 5);
    let config = BatchConfig {
        max_seq_len: 150,
        ..BatchConfig::default()
    };
    let b = Batcher::new(pairs, &config, IDS).unwrap();
    println!("{}", b.stats());
    let plan = b.plan(0);
    let bucketed = b.padding(&plan);
    println!("bucketed (default config): {bucketed}");

    // The same budget packed in shuffled order without sorting, for comparison.
    let mut order: Vec<usize> = plan.iter().flatten().copied().collect();
    SplitMix64::new(9).shuffle(&mut order);
    let mut naive = Vec::new();
    let mut rows: Vec<usize> = Vec::new();
    let mut longest = 0;
    for i in order {
        let size = pair_size(&b, i);
        let l = longest.max(size);
        if !rows.is_empty() && (rows.len() + 1) * l > config.max_tokens {
            naive.push(std::mem::take(&mut rows));
            longest = size;
        } else {
            longest = l;
        }
        rows.push(i);
    }
    naive.push(rows);
    let unsorted = b.padding(&naive);
    println!("unsorted packing:          {unsorted}");
    for bucket_pairs in [1024, 4096, 65536] {
        let b2 = Batcher::new(
            synthetic_pairs(20_000, 5),
            &BatchConfig {
                bucket_pairs,
                ..config.clone()
            },
            IDS,
        )
        .unwrap();
        println!(
            "bucket_pairs {bucket_pairs:>6}:        {}",
            b2.padding(&b2.plan(0))
        );
    }
    assert!(
        bucketed.overhead() < 0.15,
        "bucketed overhead {:.3}",
        bucketed.overhead()
    );
    assert!(
        unsorted.overhead() > 3.0 * bucketed.overhead(),
        "bucketing should cut padding sharply: {:.3} vs {:.3}",
        unsorted.overhead(),
        bucketed.overhead()
    );
    // Batches fill the budget: few tokens wasted by closing batches early.
    let slots: usize = plan.iter().map(|rows| b.batch(rows).padded_tokens()).sum();
    let fill = slots as f64 / (plan.len() * config.max_tokens) as f64;
    println!(
        "budget fill {:.1}% over {} batches",
        100.0 * fill,
        plan.len()
    );
    assert!(fill > 0.85, "fill {fill:.3}");
}

/// `max(|src|, |tgt| + 1)` of pair `i`, read back through a one-row batch.
fn pair_size(b: &Batcher, i: usize) -> usize {
    let one = b.batch(&[i]);
    one.src_len.max(one.tgt_len)
}

#[test]
fn same_seed_and_epoch_give_the_same_batches_and_epochs_differ() {
    let make =
        |seed| Batcher::new(word_ids(&ko_en_train()), &cfg(200, 150, 64, seed), IDS).unwrap();
    let (a, b) = (make(3), make(3));
    assert_eq!(a.plan(0), b.plan(0));
    assert_eq!(a.plan(5), b.plan(5));
    let e0: Vec<Batch> = a.epoch(0, 0).collect();
    let e0b: Vec<Batch> = b.epoch(0, 0).collect();
    assert_eq!(e0, e0b);
    assert_ne!(a.plan(0), a.plan(1), "a new epoch reorders");
    assert_ne!(a.plan(0), make(4).plan(0), "a new seed reorders");
    // Plans do not depend on what was computed before (resume after a restart).
    let fresh = make(3);
    assert_eq!(fresh.plan(5), a.plan(5));
    // Resuming at batch k yields the rest of the same epoch.
    let rest: Vec<Batch> = a.epoch(0, 3).collect();
    assert_eq!(rest, e0[3..]);
}

#[test]
fn batch_layout_pads_and_adds_bos_and_eos() {
    let pairs = vec![
        TokenPair::new(vec![10, 11, 12], vec![20]),
        TokenPair::new(vec![13], vec![21, 22]),
    ];
    let ids = SpecialIds {
        pad: 3,
        bos: 1,
        eos: 2,
    };
    let b = Batcher::new(pairs, &BatchConfig::default(), ids).unwrap();
    let batch = b.batch(&[0, 1]);
    assert_eq!((batch.batch, batch.src_len, batch.tgt_len), (2, 3, 3));
    assert_eq!(batch.src, [10, 11, 12, 13, 3, 3]);
    assert_eq!(batch.tgt_in, [1, 20, 3, 1, 21, 22]);
    assert_eq!(batch.tgt_out, [20, 2, 3, 21, 22, 2]);
    assert_eq!(batch.src_lens, [3, 1]);
    assert_eq!(batch.tgt_lens, [2, 3]);
    assert_eq!(batch.n_tgt_tokens, 5);
    assert_eq!(batch.pad, 3);
    assert_eq!(batch.rows, [0, 1]);
    assert_eq!(batch.padded_tokens(), 6);
}

#[test]
fn overlong_pairs_are_dropped_or_truncated_and_counted() {
    let pairs = || {
        vec![
            TokenPair::new(vec![5; 4], vec![6; 3]), // fits: 4 and 3 + 1
            TokenPair::new(vec![5; 5], vec![6; 1]), // source too long
            TokenPair::new(vec![5; 2], vec![6; 4]), // target + EOS too long
            TokenPair::new(vec![], vec![6; 2]),     // empty source
            TokenPair::new(vec![5; 2], vec![]),     // empty target
        ]
    };
    let mut config = cfg(100, 4, 16, 0);
    let b = Batcher::new(pairs(), &config, IDS).unwrap();
    let s = b.stats();
    assert_eq!(
        (
            s.input,
            s.kept,
            s.dropped_too_long,
            s.truncated,
            s.dropped_empty
        ),
        (5, 1, 2, 0, 2)
    );
    assert_eq!(sorted_rows(&b.plan(0)), [0]);
    println!("{s}");

    config.overlong = Overlong::Truncate;
    let b = Batcher::new(pairs(), &config, IDS).unwrap();
    let s = b.stats();
    assert_eq!(
        (
            s.input,
            s.kept,
            s.dropped_too_long,
            s.truncated,
            s.dropped_empty
        ),
        (5, 3, 0, 2, 2)
    );
    let batch = b.batch(&[1, 2]);
    assert_eq!(batch.src_lens, [4, 2]);
    assert_eq!(
        batch.tgt_lens,
        [2, 4],
        "target cut to max_seq_len − 1, then EOS"
    );
    assert!(b.plan(0).iter().flatten().all(|&i| {
        let one = b.batch(&[i]);
        one.src_len <= 4 && one.tgt_len <= 4
    }));
}

#[test]
fn nothing_to_batch_and_bad_settings_are_errors() {
    let err = Batcher::new(
        vec![TokenPair::new(vec![5; 10], vec![6; 2])],
        &cfg(100, 4, 16, 0),
        IDS,
    )
    .unwrap_err();
    assert!(
        matches!(
            err,
            DataError::NothingToBatch {
                pairs: 1,
                too_long: 1,
                empty: 0,
                max_seq_len: 4
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("truncate"), "{err}");
    let err = Batcher::new(Vec::new(), &BatchConfig::default(), IDS).unwrap_err();
    assert!(
        matches!(err, DataError::NothingToBatch { pairs: 0, .. }),
        "{err:?}"
    );

    for (bad, setting) in [
        (cfg(0, 150, 16, 0), "batch.max_tokens"),
        (cfg(100, 1, 16, 0), "model.max_seq_len"),
        (cfg(100, 150, 0, 0), "batch.bucket_pairs"),
    ] {
        let err = Batcher::new(vec![TokenPair::new(vec![5], vec![6])], &bad, IDS).unwrap_err();
        assert!(
            matches!(err, DataError::InvalidConfig { setting: s, .. } if s == setting),
            "{err:?}"
        );
    }

    let parsed: BatchConfig =
        serde_json::from_str(r#"{"max_tokens": 2048, "overlong": "truncate"}"#).unwrap();
    assert_eq!(parsed.max_tokens, 2048);
    assert_eq!(parsed.overlong, Overlong::Truncate);
    assert_eq!(parsed.max_seq_len, 150);
    // `max_seq_len` is the model's (`[model] max_seq_len`), so `[batch]` refuses the key.
    for key in ["batch_size", "max_seq_len"] {
        let err = serde_json::from_str::<BatchConfig>(&format!(r#"{{"{key}": 128}}"#)).unwrap_err();
        assert!(
            err.to_string().contains(&format!("unknown field `{key}`")),
            "{err}"
        );
    }
}

#[test]
fn fixture_batches_have_little_padding() {
    let b = Batcher::new(word_ids(&ko_en_train()), &cfg(128, 150, 300, 0), IDS).unwrap();
    let stats = b.padding(&b.plan(0));
    println!("ko-en fixture, word ids, 128-token budget: {stats}");
    assert_eq!(stats.pairs, 300);
    assert!(stats.overhead() < 0.25, "{stats}");
}
