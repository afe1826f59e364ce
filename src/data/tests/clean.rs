//! Cleaning rules on `rules/dirty.tsv` (whose third column names each line's expected fate),
//! the fixture corpora, and the config and error paths.

use super::*;

fn dirty() -> Corpus {
    read_tsv(&fixture("rules/dirty.tsv")).expect("rules/dirty.tsv reads")
}

#[test]
fn every_rule_removes_what_the_dirty_fixture_says() {
    let input = dirty();
    let expected = input.tag_counts();
    let (kept, report) = clean(input, &CleanConfig::default()).unwrap();
    assert_eq!(report.input, 18);
    assert_eq!(report.too_short, expected["too_short"]);
    assert_eq!(report.too_long, expected["too_long"]);
    assert_eq!(report.ratio, expected["ratio"]);
    assert_eq!(report.identical, expected["identical"]);
    assert_eq!(report.duplicate, expected["duplicate"]);
    assert_eq!(report.kept, expected["keep"]);
    assert_eq!(
        (
            report.too_short,
            report.too_long,
            report.ratio,
            report.identical,
            report.duplicate,
            report.kept
        ),
        (4, 3, 1, 3, 3, 4)
    );
    assert_eq!(report.removed(), 14);
    assert!(kept.pairs.iter().all(|p| p.tag.as_deref() == Some("keep")));
    // First occurrences survive, in file order.
    let lines: Vec<usize> = kept.pairs.iter().map(|p| p.line).collect();
    assert_eq!(lines, [1, 6, 10, 16]);
}

#[test]
fn whitespace_is_trimmed_before_any_rule() {
    let (kept, report) = clean(dirty(), &CleanConfig::default()).unwrap();
    // Line 2 is line 1 with spaces around both sides: a duplicate once trimmed.
    assert_eq!(kept.pairs[0].source, "안녕하세요");
    assert_eq!(kept.pairs[0].target, "Hello");
    assert!(
        kept.pairs
            .iter()
            .all(|p| p.source == p.source.trim() && p.target == p.target.trim())
    );
    // "print() " vs "print()" is identical once trimmed; "   " is empty once trimmed.
    assert_eq!(report.identical, 3);
    assert_eq!(report.too_short, 4);
}

#[test]
fn lengths_are_characters_not_bytes() {
    let (kept, _) = clean(dirty(), &CleanConfig::default()).unwrap();
    let long = &kept.pairs[1];
    assert_eq!(long.line, 6);
    assert_eq!(long.source.chars().count(), 200);
    assert_eq!(long.source.len(), 600, "200 Hangul syllables are 600 bytes");
    let config = CleanConfig {
        max_chars: 199,
        ..CleanConfig::default()
    };
    let (kept, report) = clean(dirty(), &config).unwrap();
    assert_eq!(report.too_long, 4);
    assert!(kept.pairs.iter().all(|p| p.line != 6));
}

#[test]
fn ratio_is_longer_over_shorter_in_characters() {
    assert_eq!(length_ratio(2, 7), 3.5);
    assert_eq!(length_ratio(7, 2), 3.5);
    assert_eq!(length_ratio(3, 3), 1.0);
    assert_eq!(length_ratio(0, 0), 1.0);
    assert_eq!(length_ratio(0, 3), f64::INFINITY);
    // Line 10 ("가나" / "abcdefg") is exactly 3.5: kept at 3.5, removed at 3.4.
    let config = CleanConfig {
        max_ratio: 3.4,
        ..CleanConfig::default()
    };
    let (kept, report) = clean(dirty(), &config).unwrap();
    // At 3.4, line 6 (200 / 58 ≈ 3.45), line 10 and its repeat on line 14 (now a ratio case,
    // not a duplicate) join line 9.
    assert_eq!(report.ratio, 4);
    assert_eq!(report.duplicate, 2);
    let lines: Vec<usize> = kept.pairs.iter().map(|p| p.line).collect();
    assert_eq!(lines, [1, 16]);
}

#[test]
fn a_pair_is_counted_once_by_the_first_rule_that_removes_it() {
    let corpus = Corpus::new(
        "in memory",
        vec![
            Pair::new("same", "same"),
            Pair::new("same", "same"), // identical and duplicate: identical
            Pair::new("x".repeat(300), "x".repeat(300)), // too long, identical: too long
            Pair::new("", ""),         // too short, identical
            Pair::new("ab", "abcdefgh"), // ratio 4
            Pair::new("ab", "abcdefgh"), // ratio again, not a duplicate
            Pair::new("fine", "gut"),
        ],
    );
    let (_, r) = clean(corpus, &CleanConfig::default()).unwrap();
    assert_eq!(
        (
            r.too_short,
            r.too_long,
            r.ratio,
            r.identical,
            r.duplicate,
            r.kept
        ),
        (1, 1, 2, 2, 0, 1)
    );
    assert_eq!(r.input, 7);
}

#[test]
fn identical_and_duplicate_rules_can_be_turned_off() {
    let config = CleanConfig {
        drop_identical: false,
        dedup: false,
        ..CleanConfig::default()
    };
    let (kept, report) = clean(dirty(), &config).unwrap();
    assert_eq!((report.identical, report.duplicate), (0, 0));
    // 4 kept + 3 identical + 3 duplicates.
    assert_eq!(report.kept, 10);
    assert_eq!(kept.len(), 10);
    let shown = report.to_string();
    assert!(shown.contains("source == target (off)"), "{shown}");
    assert!(shown.contains("duplicate pair (off)"), "{shown}");
}

#[test]
fn report_prints_one_line_per_rule_in_order() {
    let (_, report) = clean(dirty(), &CleanConfig::default()).unwrap();
    let shown = report.to_string();
    println!("{shown}");
    let labels: Vec<&str> = shown
        .lines()
        .map(|l| l.split("  ").next().unwrap_or(""))
        .collect();
    assert_eq!(
        labels,
        [
            "pairs read",
            "too short (< 1 chars on a side)",
            "too long (> 200 chars on a side)",
            "length ratio > 3.5",
            "source == target",
            "duplicate pair",
            "kept",
        ]
    );
    let last = shown.lines().last().unwrap_or("");
    assert!(last.ends_with("4 (22.2%)"), "{last}");
    assert_eq!(
        report.summary(),
        "too short 4, too long 3, length ratio 1, identical sides 3, duplicates 3"
    );
}

#[test]
fn report_serializes_counts_and_settings() {
    let (_, report) = clean(dirty(), &CleanConfig::default()).unwrap();
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["duplicate"], 3);
    assert_eq!(json["kept"], 4);
    assert_eq!(json["config"]["max_ratio"], 3.5);
}

/// Counts from an independent Python implementation of the same rules over the fixture files.
#[test]
fn fixture_corpora_clean_as_expected() {
    let (kept, r) = clean(ko_en_train(), &CleanConfig::default()).unwrap();
    assert_eq!(
        (
            r.too_short,
            r.too_long,
            r.ratio,
            r.identical,
            r.duplicate,
            r.kept
        ),
        (0, 0, 6, 57, 0, 237)
    );
    let tags = kept.tag_counts();
    assert_eq!(tags["python-docs-ko-3.13"], 82);
    assert_eq!(tags["tatoeba-manythings-kor"], 37);
    let (_, r) = clean(de_en_train(), &CleanConfig::default()).unwrap();
    assert_eq!(r.kept, 300);
}

#[test]
fn cleaning_away_everything_is_an_error_with_the_counts() {
    let corpus = read_aligned(
        &fixture("bad/all_removed.ko"),
        &fixture("bad/all_removed.en"),
        None,
    )
    .unwrap();
    let err = clean(corpus, &CleanConfig::default()).unwrap_err();
    let DataError::AllRemoved { pairs, report, .. } = &err else {
        panic!("expected AllRemoved, got {err:?}");
    };
    assert_eq!(*pairs, 3);
    assert_eq!(
        (report.too_short, report.ratio, report.identical),
        (1, 1, 1)
    );
    let msg = err.to_string();
    assert!(
        msg.starts_with("all 3 pairs of ") && msg.contains("bad/all_removed.ko + "),
        "{msg}"
    );
    assert!(
        msg.contains("too short 1, too long 0, length ratio 1, identical sides 1, duplicates 0"),
        "{msg}"
    );

    let err = clean(Corpus::new("nothing", Vec::new()), &CleanConfig::default()).unwrap_err();
    assert!(matches!(err, DataError::EmptyCorpus { .. }), "{err:?}");
}

#[test]
fn clean_config_defaults_unknown_fields_and_validation() {
    let parsed: CleanConfig = serde_json::from_str("{}").unwrap();
    assert_eq!(parsed, CleanConfig::default());
    assert_eq!(
        (parsed.min_chars, parsed.max_chars, parsed.max_ratio),
        (1, 200, 3.5)
    );
    let parsed: CleanConfig = serde_json::from_str(r#"{"max_chars": 100}"#).unwrap();
    assert_eq!(parsed.max_chars, 100);
    assert_eq!(parsed.max_ratio, 3.5);
    let err = serde_json::from_str::<CleanConfig>(r#"{"max_len": 100}"#).unwrap_err();
    assert!(err.to_string().contains("unknown field `max_len`"), "{err}");

    for bad in [
        CleanConfig {
            max_ratio: 0.5,
            ..CleanConfig::default()
        },
        CleanConfig {
            max_ratio: f64::NAN,
            ..CleanConfig::default()
        },
        CleanConfig {
            max_chars: 0,
            ..CleanConfig::default()
        },
        CleanConfig {
            min_chars: 10,
            max_chars: 5,
            ..CleanConfig::default()
        },
    ] {
        let err = clean(dirty(), &bad).unwrap_err();
        assert!(matches!(err, DataError::InvalidConfig { .. }), "{err:?}");
        assert!(err.to_string().starts_with("data setting `clean."), "{err}");
    }
}
