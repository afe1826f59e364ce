//! Tests of the data subsystem on the committed fixture corpus in `tests/fixtures/corpus/`
//! (see its README for how it was cut), plus one `#[ignore]`d run over the full shared corpora.

mod batch;
mod clean;
mod full;
mod read;
mod split;

use std::path::PathBuf;

use super::*;

/// A file of the fixture corpus.
fn fixture(rel: &str) -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/corpus"
    ))
    .join(rel)
}

/// The ko-en fixture train set with its tags.
fn ko_en_train() -> Corpus {
    read_aligned(
        &fixture("ko-en/train.ko"),
        &fixture("ko-en/train.en"),
        Some(&fixture("ko-en/train.origin")),
    )
    .expect("the ko-en fixture reads")
}

/// The de-en fixture train set.
fn de_en_train() -> Corpus {
    read_aligned(&fixture("de-en/train.de"), &fixture("de-en/train.en"), None)
        .expect("the de-en fixture reads")
}
