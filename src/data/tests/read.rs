//! Reading aligned files and TSV: formats accepted and every error, from the fixture files.

use std::io::ErrorKind;

use super::*;

#[test]
fn reads_ko_en_fixture_with_tags() {
    let c = ko_en_train();
    assert_eq!(c.len(), 300);
    let first = &c.pairs[0];
    assert_eq!(
        first.source,
        "아홉째는 맛다냐니 그 아들과 형제와 십 이인이요"
    );
    assert_eq!(
        first.target,
        "the ninth to Mattaniah, his sons and his brothers, twelve;"
    );
    assert_eq!(first.tag.as_deref(), Some("bible-krv1961-web"));
    assert_eq!(first.line, 1);
    assert_eq!(c.pairs[299].line, 300);
    assert!(c.pairs.iter().all(|p| p.tag.is_some()));
    let tags = c.tag_counts();
    assert_eq!(tags.len(), 8, "{tags:?}");
    assert_eq!(tags["python-docs-ko-3.13"], 126);
    assert_eq!(tags.values().sum::<usize>(), 300);
    assert!(c.name.contains("train.ko") && c.name.contains("train.en"));
}

#[test]
fn reads_de_en_fixture_train_and_dev() {
    let train = de_en_train();
    assert_eq!(train.len(), 300);
    assert!(train.pairs.iter().all(|p| p.tag.is_none()));
    let dev = read_aligned(&fixture("de-en/dev.de"), &fixture("de-en/dev.en"), None).unwrap();
    assert_eq!(dev.len(), 50);
    let dev = read_aligned(&fixture("ko-en/dev.ko"), &fixture("ko-en/dev.en"), None).unwrap();
    assert_eq!(dev.len(), 50);
}

#[test]
fn bom_crlf_and_missing_final_newline_are_handled() {
    let c = read_aligned(
        &fixture("format/bom_crlf.ko"),
        &fixture("format/bom_crlf.en"),
        Some(&fixture("format/bom_crlf.origin")),
    )
    .unwrap();
    let got: Vec<(&str, &str, &str)> = c
        .pairs
        .iter()
        .map(|p| (&*p.source, &*p.target, p.tag.as_deref().unwrap_or("")))
        .collect();
    assert_eq!(
        got,
        [
            ("첫째 줄", "first line", "news"),
            ("둘째 줄", "second line", "bible"),
            ("셋째 줄", "third line", "news"),
        ]
    );
}

#[test]
fn tsv_with_bom_crlf_and_a_blank_line() {
    let c = read_tsv(&fixture("format/pairs.tsv")).unwrap();
    let got: Vec<(&str, &str, usize)> = c
        .pairs
        .iter()
        .map(|p| (&*p.source, &*p.target, p.line))
        .collect();
    assert_eq!(
        got,
        [
            ("하나", "one", 1),
            ("", "", 2),
            ("둘", "two", 3),
            ("셋", "three", 4)
        ]
    );
    assert!(c.pairs.iter().all(|p| p.tag.is_none()));
}

#[test]
fn tsv_lines_of_only_tabs_and_spaces_are_blank_whatever_the_columns() {
    let path = std::env::temp_dir().join(format!("webnmt-blank-{}.tsv", std::process::id()));
    std::fs::write(
        &path,
        "\t\n하나\tone\tnumbers\n\t\t\n \t \n둘\ttwo\tnumbers\n",
    )
    .expect("the test writes its TSV");
    let c = read_tsv(&path);
    let _ = std::fs::remove_file(&path);
    let c = c.expect("blank lines are read, whatever their tabs");
    let got: Vec<(&str, Option<&str>, usize)> = c
        .pairs
        .iter()
        .map(|p| (&*p.source, p.tag.as_deref(), p.line))
        .collect();
    assert_eq!(
        got,
        [
            ("", None, 1),
            ("하나", Some("numbers"), 2),
            ("", None, 3),
            ("", None, 4),
            ("둘", Some("numbers"), 5)
        ]
    );
}

#[test]
fn tsv_third_column_is_a_trimmed_tag() {
    let c = read_tsv(&fixture("format/tagged.tsv")).unwrap();
    let tags: Vec<_> = c.pairs.iter().map(|p| p.tag.as_deref()).collect();
    assert_eq!(tags, [Some("numbers"), Some("animals"), Some("numbers")]);
    assert_eq!(c.tag_counts()["numbers"], 2);
}

#[test]
fn mismatched_line_counts_name_both_files_and_counts() {
    let err = read_aligned(
        &fixture("bad/mismatch.ko"),
        &fixture("bad/mismatch.en"),
        None,
    )
    .unwrap_err();
    assert!(
        matches!(
            err,
            DataError::LineCountMismatch {
                first_lines: 3,
                second_lines: 2,
                ..
            }
        ),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(msg.contains("bad/mismatch.ko has 3 lines"), "{msg}");
    assert!(msg.contains("bad/mismatch.en has 2"), "{msg}");
}

#[test]
fn tag_file_with_the_wrong_line_count_is_a_mismatch() {
    let err = read_aligned(
        &fixture("format/bom_crlf.ko"),
        &fixture("format/bom_crlf.en"),
        Some(&fixture("bad/short.origin")),
    )
    .unwrap_err();
    assert!(
        matches!(err, DataError::LineCountMismatch { first_lines: 3, second_lines: 2, ref second, .. }
            if second.ends_with("bad/short.origin")),
        "{err:?}"
    );
}

#[test]
fn invalid_utf8_names_file_line_and_column() {
    let err = read_aligned(
        &fixture("bad/invalid_utf8.ko"),
        &fixture("bad/invalid_utf8.en"),
        None,
    )
    .unwrap_err();
    assert!(
        matches!(err, DataError::InvalidUtf8 { line: 2, column: 4, ref path }
            if path.ends_with("bad/invalid_utf8.en")),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(
        msg.contains("bad/invalid_utf8.en:2: not valid UTF-8"),
        "{msg}"
    );
    assert!(msg.contains("iconv"), "{msg}");
}

#[test]
fn empty_files_are_an_empty_corpus() {
    let err = read_aligned(&fixture("bad/empty.ko"), &fixture("bad/empty.en"), None).unwrap_err();
    assert!(matches!(err, DataError::EmptyCorpus { .. }), "{err:?}");
    assert!(err.to_string().contains("bad/empty.ko + "), "{err}");
    let err = read_tsv(&fixture("bad/empty.ko")).unwrap_err();
    assert!(matches!(err, DataError::EmptyCorpus { .. }), "{err:?}");
    // One empty file against a non-empty one is a mismatch, which says more.
    let err =
        read_aligned(&fixture("bad/empty.ko"), &fixture("bad/mismatch.en"), None).unwrap_err();
    assert!(
        matches!(err, DataError::LineCountMismatch { .. }),
        "{err:?}"
    );
}

#[test]
fn missing_file_names_path_and_os_error() {
    let missing = fixture("bad/no_such_file.ko");
    let err = read_aligned(&missing, &fixture("bad/mismatch.en"), None).unwrap_err();
    let DataError::Open { path, cause } = &err else {
        panic!("expected Open, got {err:?}");
    };
    assert_eq!(path, &missing);
    assert_eq!(cause.kind(), ErrorKind::NotFound);
    let msg = err.to_string();
    assert!(msg.contains("bad/no_such_file.ko"), "{msg}");
    assert!(msg.contains(&cause.to_string()), "{msg}");
    // A directory is not a corpus either.
    let err = read_tsv(&fixture("bad")).unwrap_err();
    assert!(matches!(err, DataError::Open { .. }), "{err:?}");
}

#[test]
fn tsv_line_without_tab_is_named() {
    let err = read_tsv(&fixture("bad/no_tab.tsv")).unwrap_err();
    assert!(
        matches!(err, DataError::TsvNoTab { line: 2, .. }),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("bad/no_tab.tsv:2: no tab"),
        "{err}"
    );
}

#[test]
fn tsv_lines_must_agree_on_columns() {
    let err = read_tsv(&fixture("bad/columns.tsv")).unwrap_err();
    assert!(
        matches!(
            err,
            DataError::TsvColumnCount {
                line: 2,
                columns: 3,
                first_line: 1,
                expected: 2,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .contains("bad/columns.tsv:2: 3 tab-separated columns")
    );
}

#[test]
fn tsv_with_four_columns_is_rejected() {
    let err = read_tsv(&fixture("bad/too_many_columns.tsv")).unwrap_err();
    assert!(
        matches!(
            err,
            DataError::TsvTooManyColumns {
                line: 1,
                columns: 4,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("at most 3"), "{err}");
}

#[test]
fn empty_tag_is_named() {
    let err = read_aligned(
        &fixture("format/bom_crlf.ko"),
        &fixture("format/bom_crlf.en"),
        Some(&fixture("bad/empty_tag.origin")),
    )
    .unwrap_err();
    assert!(
        matches!(err, DataError::EmptyTag { line: 2, .. }),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .contains("bad/empty_tag.origin:2: empty tag")
    );
}

#[test]
fn corpus_files_read_both_kinds_and_reject_bad_combinations() {
    let aligned = CorpusFiles::aligned(fixture("ko-en/train.ko"), fixture("ko-en/train.en"))
        .with_tags(fixture("ko-en/train.origin"));
    assert_eq!(aligned.read().unwrap(), ko_en_train());
    assert_eq!(
        CorpusFiles::tsv(fixture("format/tagged.tsv"))
            .read()
            .unwrap()
            .len(),
        3
    );
    let bad = [
        CorpusFiles::default(),
        CorpusFiles {
            source: Some("a".into()),
            ..CorpusFiles::default()
        },
        CorpusFiles {
            target: Some("a".into()),
            ..CorpusFiles::default()
        },
        CorpusFiles::tsv("a.tsv").with_tags("a.origin"),
        CorpusFiles {
            tsv: Some("a.tsv".into()),
            source: Some("a".into()),
            ..CorpusFiles::default()
        },
    ];
    for files in bad {
        let err = files.read().unwrap_err();
        assert!(matches!(err, DataError::CorpusFiles { .. }), "{err:?}");
    }

    let parsed: CorpusFiles =
        serde_json::from_str(r#"{"source": "train.ko", "target": "train.en"}"#).unwrap();
    assert_eq!(parsed, CorpusFiles::aligned("train.ko", "train.en"));
    let err = serde_json::from_str::<CorpusFiles>(r#"{"src": "train.ko"}"#).unwrap_err();
    assert!(err.to_string().contains("unknown field `src`"), "{err}");
}
