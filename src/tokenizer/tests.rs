use super::*;

/// A hand-made vocabulary: enough to test loading, encoding and decoding without the
/// `train` feature.
fn handmade() -> Tokenizer {
    let pieces = [
        ("▁", -2.0),
        ("▁the", -3.0),
        ("▁cat", -4.0),
        ("▁sat", -4.0),
        ("t", -5.0),
        ("h", -5.0),
        ("e", -5.0),
        ("c", -5.0),
        ("a", -5.0),
        ("s", -5.0),
        ("<", -6.0),
        (">", -6.0),
        ("/", -6.0),
        ("p", -6.0),
        ("d", -6.0),
        ("u", -6.0),
        ("n", -6.0),
        ("k", -6.0),
    ];
    match Tokenizer::from_pieces(pieces.iter().map(|(p, s)| ((*p).to_owned(), *s))) {
        Ok(t) => t,
        Err(e) => panic!("hand-made vocabulary must build: {e}"),
    }
}

fn ids(t: &Tokenizer, text: &str) -> Vec<u32> {
    t.encode(text)
        .unwrap_or_else(|e| panic!("encode {text:?}: {e}"))
}

fn json_of(t: &Tokenizer) -> serde_json::Value {
    let json = t.to_json().unwrap_or_else(|e| panic!("to_json: {e}"));
    serde_json::from_str(&json).unwrap_or_else(|e| panic!("our JSON must parse: {e}"))
}

fn load(value: &serde_json::Value) -> Result<Tokenizer, TokenizerError> {
    Tokenizer::from_json(value.to_string())
}

#[test]
fn handmade_encodes_decodes_and_reloads() {
    let t = handmade();
    assert_eq!(t.vocab_size(), 22);
    let the = t.token_to_id("▁the").map(|id| id as usize);
    assert_eq!(the, Some(5));
    let got = ids(&t, "  the\tcat \n sat ");
    let pieces: Vec<String> = got.iter().filter_map(|&i| t.id_to_token(i)).collect();
    assert_eq!(pieces, ["▁the", "▁cat", "▁sat"]);
    assert_eq!(t.decode(&got).ok().as_deref(), Some("the cat sat"));
    let reloaded = Tokenizer::from_json(t.to_json().unwrap_or_default())
        .unwrap_or_else(|e| panic!("reload: {e}"));
    assert_eq!(ids(&reloaded, "the cat sat"), got);
}

#[test]
fn empty_and_whitespace_give_no_ids() {
    let t = handmade();
    assert!(ids(&t, "").is_empty());
    assert!(ids(&t, " \t\n\u{3000} ").is_empty());
    assert_eq!(t.decode(&[]).ok().as_deref(), Some(""));
}

#[test]
fn unknown_characters_become_one_unk_per_run() {
    let t = handmade();
    // "▁" then the unknown run fused into one <unk>, then "▁cat".
    assert_eq!(ids(&t, "😀😀 cat"), [4, UNK_ID, 6]);
    // Decoding skips <unk> like the other special tokens, and the bare "▁" of its word with
    // it: no leading or doubled space.
    assert_eq!(t.decode(&[4, UNK_ID, 6]).ok().as_deref(), Some("cat"));
    assert_eq!(
        t.decode(&[5, 4, UNK_ID, 6]).ok().as_deref(),
        Some("the cat")
    );
    assert_eq!(
        t.decode(&[5, 4, UNK_ID, UNK_ID]).ok().as_deref(),
        Some("the")
    );
    // Inside a word the pieces stay, and a word that starts with an unknown keeps its space.
    assert_eq!(t.decode(&[6, UNK_ID, 5]).ok().as_deref(), Some("cat the"));
    assert_eq!(ids(&t, "the 😀s cat"), [5, 4, UNK_ID, 13, 6]);
    assert_eq!(
        t.decode(&[5, 4, UNK_ID, 13, 6]).ok().as_deref(),
        Some("the s cat")
    );
}

#[test]
fn special_tokens_in_text_are_spelled_out() {
    let t = handmade();
    for text in ["<s>", "</s>", "<pad> <unk>", "the</s>"] {
        let got = ids(&t, text);
        assert!(
            got.iter().all(|&id| id > EOS_ID),
            "{text:?} produced a special id: {got:?}"
        );
        assert_eq!(t.decode(&got).ok().as_deref(), Some(text));
    }
}

#[test]
fn decode_skips_special_ids_and_rejects_unknown_ids() {
    let t = handmade();
    assert_eq!(
        t.decode(&[BOS_ID, 5, 6, EOS_ID, PAD_ID]).ok().as_deref(),
        Some("the cat")
    );
    match t.decode(&[5, 22]) {
        Err(TokenizerError::IdOutOfRange {
            id: 22,
            position: 1,
            vocab_size: 22,
        }) => {}
        other => panic!("expected IdOutOfRange, got {other:?}"),
    }
}

#[test]
fn from_pieces_rejects_bad_pieces() {
    for (piece, score) in [("", -1.0), ("<s>", -1.0), ("a", f64::NAN), ("a", 0.5)] {
        match Tokenizer::from_pieces([(piece.to_owned(), score)]) {
            Err(TokenizerError::InvalidPiece { piece: p, .. }) if p == piece => {}
            other => panic!("{piece:?} {score}: expected InvalidPiece, got {other:?}"),
        }
    }
    let twice = [("a".to_owned(), -1.0), ("a".to_owned(), -2.0)];
    assert!(matches!(
        Tokenizer::from_pieces(twice),
        Err(TokenizerError::InvalidPiece { .. })
    ));
}

#[test]
fn invalid_json_is_a_typed_error() {
    for bad in ["", "{", "[1,2]", r#"{"model": 3}"#] {
        match Tokenizer::from_json(bad) {
            Err(TokenizerError::InvalidJson { .. }) => {}
            other => panic!("{bad:?}: expected InvalidJson, got {other:?}"),
        }
    }
}

/// Settings of a `tokenizer.json` that would panic in `encode` (truncation with a stride not
/// below its length), pad every sentence, split words before the Metaspace, or map unknown
/// characters to another id are refused when loading, naming the part.
#[test]
fn a_tokenizer_json_with_other_settings_is_refused() {
    let json: serde_json::Value =
        serde_json::from_str(&handmade().to_json().expect("json")).expect("parses");
    assert!(Tokenizer::from_json(json.to_string()).is_ok());
    type Edit = fn(&mut serde_json::Value);
    let edits: [(&str, Edit); 6] = [
        ("truncation", |j| {
            j["truncation"] = serde_json::json!({"direction": "Right", "max_length": 1,
                "strategy": "LongestFirst", "stride": 1});
        }),
        ("padding", |j| {
            j["padding"] = serde_json::json!({"strategy": {"Fixed": 8}, "direction": "Right",
                "pad_to_multiple_of": null, "pad_id": 7, "pad_type_id": 0, "pad_token": "x"});
        }),
        ("added_tokens", |j| {
            let mut extra = j["added_tokens"][0].clone();
            extra["id"] = 5.into();
            extra["content"] = "the".into();
            extra["special"] = false.into();
            j["added_tokens"].as_array_mut().expect("array").push(extra);
        }),
        ("unk_id", |j| j["model"]["unk_id"] = 3.into()),
        ("byte_fallback", |j| {
            j["model"]["byte_fallback"] = true.into()
        }),
        ("type", |j| j["model"]["type"] = "BPE".into()),
    ];
    for (part, edit) in edits {
        let mut bad = json.clone();
        edit(&mut bad);
        match Tokenizer::from_json(bad.to_string()) {
            Err(TokenizerError::InvalidJson { message }) => {
                assert!(message.contains(part), "{part}: {message}");
            }
            other => panic!("{part}: expected InvalidJson, got {other:?}"),
        }
    }
}

/// Removes a token from both the model vocabulary and the added tokens.
fn without_token(mut json: serde_json::Value, token: &str) -> serde_json::Value {
    if let Some(vocab) = json["model"]["vocab"].as_array_mut() {
        vocab.retain(|entry| entry[0] != token);
    }
    if let Some(added) = json["added_tokens"].as_array_mut() {
        added.retain(|entry| entry["content"] != token);
    }
    json
}

#[test]
fn missing_special_token_is_rejected() {
    let json = without_token(json_of(&handmade()), "</s>");
    match load(&json) {
        Err(TokenizerError::MissingSpecialToken {
            token: "</s>",
            expected: 3,
        }) => {}
        other => panic!("expected MissingSpecialToken, got {other:?}"),
    }
}

#[test]
fn wrong_special_id_is_rejected() {
    let mut json = without_token(json_of(&handmade()), "<s>");
    // Put <s> back at the end of the vocabulary: id 21 instead of 2.
    if let Some(vocab) = json["model"]["vocab"].as_array_mut() {
        vocab.push(serde_json::json!(["<s>", -1.0e6]));
    }
    match load(&json) {
        Err(TokenizerError::WrongSpecialId {
            token: "<s>",
            expected: 2,
            found: 21,
        }) => {}
        other => panic!("expected WrongSpecialId, got {other:?}"),
    }
}

#[cfg(not(target_arch = "wasm32"))]
#[test]
fn files_round_trip_and_name_the_path_on_error() {
    let dir = std::env::temp_dir().join(format!("webnmt-tok-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
    let path = dir.join("tokenizer.json");
    let t = handmade();
    t.save(&path).unwrap_or_else(|e| panic!("save: {e}"));
    let back = Tokenizer::from_file(&path).unwrap_or_else(|e| panic!("load: {e}"));
    assert_eq!(ids(&back, "the cat"), ids(&t, "the cat"));

    std::fs::write(&path, "not json").unwrap_or_else(|e| panic!("{e}"));
    let err = Tokenizer::from_file(&path).err().map(|e| e.to_string());
    assert!(
        err.as_deref()
            .is_some_and(|m| m.contains("tokenizer.json") && m.contains("could not be parsed")),
        "{err:?}"
    );
    let missing = Tokenizer::from_file(dir.join("absent.json"));
    assert!(matches!(missing, Err(TokenizerError::Io { .. })));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn config_rejects_unknown_fields_and_bad_values() {
    let parsed: Result<TokenizerConfig, _> =
        serde_json::from_str(r#"{"vocab_size": 8000, "vocab": 3}"#);
    assert!(parsed.is_err(), "unknown field must be rejected");
    let partial: TokenizerConfig =
        serde_json::from_str(r#"{"vocab_size": 8000}"#).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(partial.character_coverage, 0.9995);
    assert_eq!(partial.vocab_size, 8000);
    for (config, field) in [
        (
            TokenizerConfig {
                vocab_size: 4,
                ..TokenizerConfig::default()
            },
            "vocab_size",
        ),
        (
            TokenizerConfig {
                character_coverage: 1.5,
                ..TokenizerConfig::default()
            },
            "character_coverage",
        ),
        (
            TokenizerConfig {
                shrinking_factor: 1.0,
                ..TokenizerConfig::default()
            },
            "shrinking_factor",
        ),
    ] {
        match config.validate() {
            Err(TokenizerError::InvalidConfig { field: f, .. }) if f == field => {}
            other => panic!("{field}: expected InvalidConfig, got {other:?}"),
        }
    }
    assert!(TokenizerConfig::default().validate().is_ok());
}

#[cfg(feature = "train")]
mod train {
    use super::super::*;
    use super::ids;

    /// A few hundred varied sentences in English, German and Korean.
    fn corpus() -> Vec<String> {
        let subjects = [
            "the cat",
            "a small dog",
            "my neighbour",
            "der Hund",
            "die Katze",
            "고양이가",
            "우리 아이들은",
            "the teacher",
            "Müller",
        ];
        let verbs = [
            "sees",
            "is eating",
            "läuft über",
            "schläft neben",
            "먹었습니다",
            "좋아해요",
            "walked past",
            "found",
        ];
        let objects = [
            "the old house",
            "ein grünes Fahrrad",
            "학교 앞에서",
            "the river bank",
            "größere Äpfel",
            "친구와 함께",
            "42 books",
            "3.14 apples",
        ];
        let mut lines = Vec::new();
        for (i, s) in subjects.iter().enumerate() {
            for (j, v) in verbs.iter().enumerate() {
                for (k, o) in objects.iter().enumerate() {
                    if (i + j + k) % 2 == 0 {
                        lines.push(format!("{s} {v} {o}."));
                    }
                }
            }
        }
        lines
    }

    fn small_config() -> TokenizerConfig {
        TokenizerConfig {
            vocab_size: 300,
            ..TokenizerConfig::default()
        }
    }

    fn trained() -> Tokenizer {
        train_unigram(corpus(), &small_config()).unwrap_or_else(|e| panic!("train: {e}"))
    }

    fn samples() -> Vec<String> {
        let mut s: Vec<String> = [
            "the cat sees the old house.",
            "고양이가 친구와 함께 먹었습니다.",
            "Müller läuft über größere Äpfel.",
            "emoji 😀 and ☃ snowman",
            "digits 0123456789 and 3.14",
            "",
            "   \t \n ",
            "<s> and </s> are text here",
            "ｆｕｌｌｗｉｄｔｈ and ﬁ ligature",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        s.push(
            "the cat sees 고양이 Äpfel "
                .repeat(80)
                .chars()
                .take(2000)
                .collect(),
        );
        s
    }

    #[test]
    fn training_is_deterministic() {
        let a = trained().to_json().unwrap_or_else(|e| panic!("{e}"));
        let b = trained().to_json().unwrap_or_else(|e| panic!("{e}"));
        assert!(a == b, "two trainings on the same corpus differ");
        // Line order does not matter either: words are counted, then sorted.
        let mut reversed = corpus();
        reversed.reverse();
        let c = train_unigram(&reversed, &small_config())
            .and_then(|t| t.to_json())
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(a == c, "line order changed the vocabulary");
    }

    #[test]
    fn trained_vocabulary_has_fixed_special_ids() {
        let t = trained();
        for (id, token) in (0u32..).zip(SPECIAL_TOKENS) {
            assert_eq!(t.token_to_id(token), Some(id));
            assert_eq!(t.id_to_token(id).as_deref(), Some(token));
        }
        // This corpus is too repetitive to fill 300 pieces; the trainer stops early.
        assert!(
            t.vocab_size() <= 300 && t.vocab_size() > 60,
            "{}",
            t.vocab_size()
        );
    }

    #[test]
    fn json_round_trip_keeps_ids() {
        let t = trained();
        let json = t.to_json().unwrap_or_else(|e| panic!("{e}"));
        let back = Tokenizer::from_json(json.as_bytes()).unwrap_or_else(|e| panic!("{e}"));
        // The plain library loader (what any tokenizers user does) accepts the same bytes.
        let plain =
            tokenizers::Tokenizer::from_bytes(json.as_bytes()).unwrap_or_else(|e| panic!("{e}"));
        for text in samples() {
            let expected = ids(&t, &text);
            assert_eq!(ids(&back, &text), expected, "{text:?}");
            if !text.contains("<s>") {
                let lib = plain
                    .encode(text.as_str(), false)
                    .unwrap_or_else(|e| panic!("{e}"));
                assert_eq!(lib.get_ids(), expected.as_slice(), "{text:?}");
            }
        }
        assert_eq!(
            back.to_json().unwrap_or_else(|e| panic!("{e}")),
            json,
            "JSON changed on reload"
        );
    }

    #[test]
    fn decode_inverts_encode_up_to_normalisation() {
        let t = trained();
        let cases = [
            ("the cat sees the old house.", "the cat sees the old house."),
            (
                "  der Hund   läuft über 42 books ",
                "der Hund läuft über 42 books",
            ),
            (
                "고양이가\t친구와 함께 먹었습니다.",
                "고양이가 친구와 함께 먹었습니다.",
            ),
            ("ｆｉｎｄ ﬁ 3.14", "find fi 3.14"),
            ("<s> is not a control symbol", "<s> is not a control symbol"),
        ];
        for (input, expected) in cases {
            let got = ids(&t, input);
            assert!(got.iter().all(|&id| id != UNK_ID), "{input:?}: {got:?}");
            assert_eq!(t.decode(&got).ok().as_deref(), Some(expected), "{input:?}");
        }
    }

    #[test]
    fn unseen_characters_map_to_unk() {
        let t = trained();
        let got = ids(&t, "the 😀 cat");
        assert!(got.contains(&UNK_ID), "{got:?}");
        // The unknown word leaves no doubled space.
        assert_eq!(t.decode(&got).ok().as_deref(), Some("the cat"));
    }

    #[test]
    fn long_input_encodes() {
        let t = trained();
        let long: String = "Müller sees 고양이 "
            .repeat(150)
            .chars()
            .take(2000)
            .collect();
        let got = ids(&t, &long);
        // Fewer tokens than characters: `▁` merges with the next character at least.
        assert!(got.len() > 100 && got.len() < 2000, "{}", got.len());
        assert!(!got.contains(&UNK_ID));
    }

    #[test]
    fn character_coverage_leaves_rare_characters_out() {
        let mut lines = corpus();
        // Both characters occur once in ~9000: below the 0.05% tail coverage cuts.
        lines.push("ein seltenes Zeichen ᚠ und 7".to_owned());
        let full = TokenizerConfig {
            character_coverage: 1.0,
            ..small_config()
        };
        let all = train_unigram(&lines, &full).unwrap_or_else(|e| panic!("{e}"));
        assert!(all.token_to_id("ᚠ").is_some());
        // Default: coverage drops ᚠ, but ASCII is required and stays.
        let covered = train_unigram(&lines, &small_config()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(covered.token_to_id("ᚠ"), None);
        assert!(ids(&covered, "ᚠ").contains(&UNK_ID));
        assert!(!ids(&covered, "7").contains(&UNK_ID));
        // SentencePiece's exact rule drops the rare digit too.
        let exact = TokenizerConfig {
            required_chars: String::new(),
            ..small_config()
        };
        let exact = train_unigram(&lines, &exact).unwrap_or_else(|e| panic!("{e}"));
        assert!(ids(&exact, "7").contains(&UNK_ID));
    }

    #[test]
    fn empty_corpus_is_rejected() {
        let none: [&str; 0] = [];
        for lines in [&none[..], &["", "  ", "\t\n"][..]] {
            match train_unigram(lines, &small_config()) {
                Err(TokenizerError::EmptyCorpus) => {}
                other => panic!("expected EmptyCorpus, got {other:?}"),
            }
        }
    }

    #[test]
    fn vocab_smaller_than_alphabet_is_rejected() {
        let config = TokenizerConfig {
            vocab_size: 20,
            ..small_config()
        };
        match train_unigram(corpus(), &config) {
            Err(e @ TokenizerError::VocabTooSmall { .. }) => {
                let message = e.to_string();
                assert!(message.contains("at least"), "{message}");
            }
            other => panic!("expected VocabTooSmall, got {other:?}"),
        }
    }

    #[test]
    fn threads_setting_is_reproducible() {
        let config = TokenizerConfig {
            threads: 2,
            ..small_config()
        };
        let a = train_unigram(corpus(), &config).and_then(|t| t.to_json());
        let b = train_unigram(corpus(), &config).and_then(|t| t.to_json());
        assert!(a.is_ok() && a.ok() == b.ok());
    }
}

mod hostile_json {
    use super::super::Tokenizer;

    /// Parts of `tokenizer.json` that make the `tokenizers` crate panic are refused first
    /// (the decoder case was found by `fuzz/bundle`).
    #[test]
    fn malformed_pipelines_are_errors_not_panics() {
        let good = Tokenizer::from_pieces([("▁a".to_string(), -1.0)])
            .and_then(|t| t.to_json())
            .expect("a tokenizer");
        let mut value: serde_json::Value = serde_json::from_str(&good).expect("json");
        for (part, bad) in [
            ("decoder", serde_json::json!({"type": 5})),
            ("decoder", serde_json::json!("Metaspace")),
            (
                "normalizer",
                serde_json::json!({"type": "Precompiled", "precompiled_charsmap": 3}),
            ),
            ("pre_tokenizer", serde_json::json!({"type": "Split"})),
        ] {
            let saved = value[part].clone();
            value[part] = bad;
            let err = Tokenizer::from_json(value.to_string()).expect_err("refused");
            assert!(err.to_string().contains(part), "{err}");
            value[part] = saved;
        }
        assert!(Tokenizer::from_json(value.to_string()).is_ok());
        assert!(Tokenizer::from_json(&good.as_bytes()[..good.len() / 2]).is_err());
    }
}

#[test]
fn repeatable_pieces_are_the_letterless_ones_inside_words() {
    let pieces = [
        "▁1", "000", ",", ".", "-", "▁the", "s", "▁,", "다", "▁다", "é", "2a",
    ];
    let t = Tokenizer::from_pieces(pieces.iter().map(|p| ((*p).to_owned(), -5.0)))
        .unwrap_or_else(|e| panic!("{e}"));
    let repeatable = t.repeatable();
    assert_eq!(repeatable.len(), t.vocab_size());
    let spared: Vec<&str> = pieces
        .iter()
        .copied()
        .filter(|p| t.token_to_id(p).is_some_and(|id| repeatable[id as usize]))
        .collect();
    assert_eq!(spared, ["000", ",", ".", "-"]);
    assert!(
        !repeatable[..4].iter().any(|&r| r),
        "special tokens are not spared"
    );
}

#[test]
fn numbers_and_ellipses_survive_the_repeat_block_in_the_shipped_vocabularies() {
    use crate::search::{MAX_BLOCK_REPEATS, repeat_bans};
    // Texts the block must let through (each token of each, after its prefix), and loops it
    // must still stop.
    let fine = [
        "It cost 1,000,000 won.",
        "10,000,000,000 people",
        "Wait... what?",
        "0.000001 percent",
        "He said no, no, and no.",
    ];
    for pair in ["ko-en", "de-en"] {
        let path = format!(
            "{}/web/models/{pair}/target.tokenizer.json",
            env!("CARGO_MANIFEST_DIR")
        );
        let t = Tokenizer::from_file(&path).unwrap_or_else(|e| panic!("{e}"));
        let repeatable = t.repeatable();
        let banned = |ids: &[u32], spared: &[bool]| {
            (0..ids.len()).find(|&end| {
                repeat_bans(&ids[..end], MAX_BLOCK_REPEATS, spared).contains(&ids[end])
            })
        };
        let mut caught_without = 0;
        for text in fine {
            let ids = ids(&t, text);
            if let Some(end) = banned(&ids, &repeatable) {
                panic!(
                    "{pair}: {text:?} is blocked at token {end} ({:?})",
                    t.id_to_token(ids[end])
                );
            }
            caught_without += usize::from(banned(&ids, &[]).is_some());
        }
        assert!(
            caught_without > 0,
            "{pair}: no text needs the exemption, so this test shows nothing"
        );
        for looping in ["the the the", "of the of the", "is a good is a good"] {
            let ids = ids(&t, looping);
            assert!(
                banned(&ids, &repeatable).is_some(),
                "{pair}: {looping:?} ({ids:?}) must stay blocked"
            );
        }
    }
}
