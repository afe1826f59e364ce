//! Splitting: disjoint sets, per-tag held-out carve, determinism, sizes, and no held-out pair
//! in train.

use std::collections::HashSet;

use super::*;

fn keys(c: &Corpus) -> HashSet<(String, String)> {
    c.pairs
        .iter()
        .map(|p| (p.source.clone(), p.target.clone()))
        .collect()
}

fn cleaned_ko_en() -> Corpus {
    clean(ko_en_train(), &CleanConfig::default()).unwrap().0
}

fn config(dev: SplitSize, test: SplitSize, per_tag: usize) -> SplitConfig {
    SplitConfig {
        seed: 7,
        dev,
        test,
        held_out_per_tag: per_tag,
    }
}

#[test]
fn sets_are_disjoint_complete_and_sized() {
    let corpus = cleaned_ko_en();
    let tag_counts = corpus.tag_counts();
    let all = keys(&corpus);
    let s = split(
        corpus,
        &config(SplitSize::Count(30), SplitSize::Fraction(0.1), 5),
    )
    .unwrap();
    assert_eq!(s.dev.len(), 30);
    assert_eq!(s.test.len(), 24, "10% of 237 rounds to 24");
    // At most 5 per tag and at most half of the tag: tatoeba-challenge has 5 pairs → 2.
    for (tag, n) in &tag_counts {
        let held = s.held_out.get(tag).map_or(0, Corpus::len);
        assert_eq!(held, 5.min(n / 2), "{tag}");
        if let Some(c) = s.held_out.get(tag) {
            assert!(c.pairs.iter().all(|p| p.tag.as_deref() == Some(tag)));
        }
    }
    let held: usize = s.held_out.values().map(Corpus::len).sum();
    assert_eq!(held, 37);
    assert_eq!(s.train.len() + s.dev.len() + s.test.len() + held, 237);
    assert_eq!(s.report.train, s.train.len());
    assert_eq!(s.report.copies_removed, 0);

    let mut union = keys(&s.train);
    for c in [&s.dev, &s.test].into_iter().chain(s.held_out.values()) {
        for k in keys(c) {
            assert!(union.insert(k), "a pair is in two sets");
        }
    }
    assert_eq!(union, all);
    // Every set keeps file order.
    for c in [&s.train, &s.dev, &s.test] {
        assert!(c.pairs.windows(2).all(|w| w[0].line < w[1].line));
    }
    assert!(s.dev.name.ends_with("(dev split)"));
}

/// Duplicates in the input (dedup turned off) must not leak a held-out pair into train: every
/// copy of a drawn pair leaves train. After dedup there is nothing to remove.
#[test]
fn no_held_out_pair_is_trained_on_even_with_duplicates() {
    let mut doubled = ko_en_train();
    let copies: Vec<Pair> = doubled.pairs.iter().rev().cloned().collect();
    doubled.pairs.extend(copies);
    let keep_dups = CleanConfig {
        dedup: false,
        ..CleanConfig::default()
    };
    let (with_dups, _) = clean(doubled.clone(), &keep_dups).unwrap();
    assert_eq!(with_dups.len(), 2 * 237);
    let s = split(
        with_dups,
        &config(SplitSize::Count(40), SplitSize::Count(40), 3),
    )
    .unwrap();
    let train = keys(&s.train);
    for c in [&s.dev, &s.test].into_iter().chain(s.held_out.values()) {
        assert!(keys(c).is_disjoint(&train), "{} leaks into train", c.name);
    }
    // Sets are drawn from distinct pairs: one copy each, the other copy removed from train.
    let held: usize = s.held_out.values().map(Corpus::len).sum();
    assert_eq!(s.report.copies_removed, 40 + 40 + held);
    assert_eq!(s.report.distinct, 237);

    let (deduped, report) = clean(doubled, &CleanConfig::default()).unwrap();
    assert_eq!(report.duplicate, 237);
    let s = split(
        deduped,
        &config(SplitSize::Count(40), SplitSize::Count(40), 3),
    )
    .unwrap();
    assert_eq!(s.report.copies_removed, 0);
    let train = keys(&s.train);
    assert!(keys(&s.dev).is_disjoint(&train) && keys(&s.test).is_disjoint(&train));
}

#[test]
fn split_is_deterministic_for_a_seed_and_changes_with_it() {
    let cfg = config(SplitSize::Count(20), SplitSize::Count(20), 2);
    let a = split(cleaned_ko_en(), &cfg).unwrap();
    let b = split(cleaned_ko_en(), &cfg).unwrap();
    assert_eq!(a, b);
    let c = split(cleaned_ko_en(), &SplitConfig { seed: 8, ..cfg }).unwrap();
    assert_ne!(keys(&a.dev), keys(&c.dev));
    assert_eq!(c.dev.len(), 20);
}

#[test]
fn sizes_resolve_from_counts_and_fractions() {
    assert_eq!(SplitSize::Count(7).resolve(300), 7);
    assert_eq!(SplitSize::Fraction(0.01).resolve(300), 3);
    assert_eq!(SplitSize::Fraction(0.1).resolve(300), 30);
    assert_eq!(SplitSize::Fraction(0.001).resolve(300), 1, "at least 1");
    assert_eq!(SplitSize::Fraction(0.0).resolve(300), 0);
    assert_eq!(SplitSize::Fraction(0.5).resolve(0), 0);

    let parsed: SplitConfig =
        serde_json::from_str(r#"{"dev": 500, "test": 0.05, "seed": 3}"#).unwrap();
    assert_eq!(parsed.dev, SplitSize::Count(500));
    assert_eq!(parsed.test, SplitSize::Fraction(0.05));
    assert_eq!(parsed.held_out_per_tag, 0);
    assert_eq!(
        serde_json::from_str::<SplitConfig>("{}").unwrap(),
        SplitConfig::default()
    );
    let err = serde_json::from_str::<SplitConfig>(r#"{"valid": 5}"#).unwrap_err();
    assert!(err.to_string().contains("unknown field `valid`"), "{err}");

    for bad in [SplitSize::Fraction(1.0), SplitSize::Fraction(-0.1)] {
        let err = split(cleaned_ko_en(), &config(bad, SplitSize::Count(0), 0)).unwrap_err();
        assert!(
            matches!(
                err,
                DataError::InvalidConfig {
                    setting: "split.dev",
                    ..
                }
            ),
            "{err:?}"
        );
    }
}

#[test]
fn asking_for_too_much_is_an_error() {
    let err = split(
        cleaned_ko_en(),
        &config(SplitSize::Count(200), SplitSize::Count(37), 0),
    )
    .unwrap_err();
    assert!(
        matches!(
            err,
            DataError::SplitTooLarge {
                distinct: 237,
                dev: 200,
                test: 37,
                held_out: 0,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("lower split.dev"), "{err}");
    // One pair left for training is enough.
    let s = split(
        cleaned_ko_en(),
        &config(SplitSize::Count(200), SplitSize::Count(36), 0),
    )
    .unwrap();
    assert_eq!(s.train.len(), 1);
}

#[test]
fn remove_overlap_drops_given_dev_pairs_from_train() {
    let dev = read_aligned(&fixture("ko-en/dev.ko"), &fixture("ko-en/dev.en"), None).unwrap();
    let mut train = ko_en_train();
    for p in dev.pairs.iter().take(5) {
        train.pairs.push(Pair::new(
            format!(" {} ", p.source),
            format!("{}\t", p.target),
        ));
    }
    assert_eq!(remove_overlap(&mut train, &[&dev]), 5);
    assert_eq!(train, ko_en_train());
}

#[test]
fn split_report_lists_every_set() {
    let s = split(
        cleaned_ko_en(),
        &config(SplitSize::Count(10), SplitSize::Count(10), 1),
    )
    .unwrap();
    let shown = s.report.to_string();
    println!("{shown}");
    assert!(shown.contains("held out: bible-krv1961-web"), "{shown}");
    assert_eq!(shown.lines().count(), 6 + s.held_out.len());
    assert!(shown.lines().last().unwrap_or("").starts_with("train"));
}
