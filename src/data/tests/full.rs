//! The full shared corpora, cleaned and split once: `#[ignore]`d because it reads ~35 MB.
//!
//! Run with `cargo test --lib data::tests::full -- --ignored --nocapture`. The corpora are
//! looked for in `$WEBNMT_SHARED_DATA`, else in `../shared/data` beside the crate.

use std::path::PathBuf;

use super::*;

fn shared_data() -> PathBuf {
    std::env::var_os("WEBNMT_SHARED_DATA").map_or_else(
        || PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/data")),
        PathBuf::from,
    )
}

#[test]
#[ignore = "reads the full shared corpora (~35 MB); run by hand"]
fn full_corpora_clean_report() {
    let dir = shared_data();
    assert!(
        dir.join("ko-en/train.ko").is_file(),
        "no shared data at {}; set WEBNMT_SHARED_DATA",
        dir.display()
    );
    let ko = read_aligned(
        &dir.join("ko-en/train.ko"),
        &dir.join("ko-en/train.en"),
        Some(&dir.join("ko-en/train.origin")),
    )
    .unwrap();
    let before = ko.tag_counts();
    let (ko, report) = clean(ko, &CleanConfig::default()).unwrap();
    println!("ko-en train\n{report}\n");
    println!("{:<40} {:>7} {:>7}", "kept per origin tag", "read", "kept");
    let after = ko.tag_counts();
    for (tag, n) in &before {
        println!(
            "{tag:<40} {n:>7} {:>7}",
            after.get(tag).copied().unwrap_or(0)
        );
    }
    let s = split(
        ko,
        &SplitConfig {
            held_out_per_tag: 200,
            ..SplitConfig::default()
        },
    )
    .unwrap();
    println!(
        "\nko-en split (defaults, 200 held out per tag)\n{}\n",
        s.report
    );
    assert_eq!(report.input, 104_455);

    let de = read_aligned(
        &dir.join("de-en/train.de"),
        &dir.join("de-en/train.en"),
        None,
    )
    .unwrap();
    let (_, report) = clean(de, &CleanConfig::default()).unwrap();
    println!("de-en train\n{report}");
    assert_eq!(report.input, 28_997);
}
