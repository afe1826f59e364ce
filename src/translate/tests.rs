//! The pipeline on the CPU with a stand-in engine: the tiny fixture model's tokenizers, a
//! [`TableModel`] whose logits hash the piece and the history, and made-up cross-attention.
//! Sentences, chunks, encoder batches, n-best lists, heatmaps and cancellation need no GPU.

use super::*;
use crate::search::testing::{TableError, TableModel};
use crate::search::{SearchError, beam_search_batch};
use crate::weights::Bundle;
use std::cell::{Cell, RefCell};

const TINY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/tiny/bundle");

/// Cuts sentences into several chunks (the tiny model's own limit is 150).
const MAX_SEQ_LEN: usize = 6;

struct TableEngine {
    config: ModelConfig,
    source: Tokenizer,
    target: Tokenizer,
    /// Sizes of the batches passed to `encode`.
    batches: RefCell<Vec<usize>>,
    /// Sizes of the batches passed to `search`.
    decoder_batches: RefCell<Vec<usize>>,
    searches: Cell<usize>,
}

impl TableEngine {
    fn new() -> Self {
        let bundle = Bundle::from_dir(std::path::Path::new(TINY)).expect("fixture bundle");
        Self {
            config: ModelConfig {
                max_seq_len: MAX_SEQ_LEN,
                ..bundle.config().clone()
            },
            source: bundle.source_tokenizer,
            target: bundle.target_tokenizer,
            batches: RefCell::new(Vec::new()),
            decoder_batches: RefCell::new(Vec::new()),
            searches: Cell::new(0),
        }
    }
}

impl TranslationEngine for TableEngine {
    type Error = SearchError<TableError>;
    type Encoded = Vec<Vec<u32>>;

    fn config(&self) -> &ModelConfig {
        &self.config
    }

    fn source_tokenizer(&self) -> &Tokenizer {
        &self.source
    }

    fn target_tokenizer(&self) -> &Tokenizer {
        &self.target
    }

    fn check_options(&self, options: &SearchOptions) -> Result<(), Self::Error> {
        Ok(options.validate()?)
    }

    async fn encode(&self, sources: &[Vec<u32>]) -> Result<Vec<Vec<u32>>, Self::Error> {
        self.batches.borrow_mut().push(sources.len());
        Ok(sources.to_vec())
    }

    /// All pieces in one batched search, each with its own table.
    async fn search(
        &self,
        encoded: &Vec<Vec<u32>>,
        pieces: &[usize],
        options: &SearchOptions,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<(Vec<SearchResult>, SearchStats), Self::Error> {
        self.searches.set(self.searches.get() + pieces.len());
        self.decoder_batches.borrow_mut().push(pieces.len());
        let vocab = self.target.vocab_size();
        let tables = pieces
            .iter()
            .map(|&i| piece_table(&encoded[i], vocab))
            .collect();
        let mut model = TableModel::batch(vocab, BOS_ID, EOS_ID, MAX_SEQ_LEN, tables);
        let lens: Vec<usize> = pieces.iter().map(|&i| encoded[i].len()).collect();
        let results = beam_search_batch(&mut model, options, &lens, cancelled).await?;
        let stats = SearchStats {
            steps: results
                .iter()
                .map(SearchResult::steps_taken)
                .max()
                .unwrap_or(0),
            ..SearchStats::default()
        };
        Ok((results, stats))
    }

    /// Head 0 looks at the first source token only, head 1 everywhere alike.
    async fn cross_attention(
        &self,
        encoded: &Vec<Vec<u32>>,
        i: usize,
        target_in: &[u32],
    ) -> Result<Vec<f32>, Self::Error> {
        let (t, s) = (target_in.len(), encoded[i].len());
        let mut weights = vec![0.0; 2 * t * s];
        for row in 0..t {
            weights[row * s] = 1.0;
            weights[t * s + row * s..][..s].fill(1.0 / s as f32);
        }
        Ok(weights)
    }
}

/// Logits that hash the piece and the history.
fn piece_table(piece: &[u32], vocab: usize) -> impl FnMut(&[u32]) -> Vec<f32> + use<> {
    let seed = piece
        .iter()
        .fold(17u64, |h, &t| h.wrapping_mul(31) ^ u64::from(t));
    move |history: &[u32]| -> Vec<f32> {
        let h = history
            .iter()
            .fold(seed, |h, &t| h.wrapping_mul(1_000_003) ^ u64::from(t));
        let mut logits: Vec<f32> = (0..vocab as u64)
            .map(|i| ((h ^ i.wrapping_mul(0x9E37_79B9)) % 1000) as f32 / 100.0)
            .collect();
        // No special token but EOS, which grows likelier with every token.
        logits[..EOS_ID as usize].fill(-100.0);
        logits[EOS_ID as usize] = 2.0 * history.len() as f32;
        logits
    }
}

fn run(engine: &TableEngine, text: &str, options: &TranslateOptions) -> Translation {
    pollster::block_on(translate(engine, text, options, &|| false)).expect("translates")
}

#[test]
fn long_sentences_are_translated_in_chunks_and_joined() {
    let engine = TableEngine::new();
    let sentence = "Ein Mann mit einem orangefarbenen Hut, der etwas anstarrt und lacht.";
    let ids = engine.source.encode(sentence).expect("tokenizes");
    assert!(ids.len() > 2 * MAX_SEQ_LEN, "{} tokens", ids.len());
    let t = run(&engine, sentence, &TranslateOptions::default());
    assert_eq!(t.sentences.len(), 1);
    let joined = &t.sentences[0];
    assert_eq!(joined.chunks, ids.len().div_ceil(MAX_SEQ_LEN));
    // Each chunk on its own, as the pipeline must have searched it.
    let chunks: Vec<Vec<u32>> = ids.chunks(MAX_SEQ_LEN).map(<[u32]>::to_vec).collect();
    let (mut tokens, mut texts): (Vec<u32>, Vec<String>) = (Vec::new(), Vec::new());
    for i in 0..chunks.len() {
        let options = SearchOptions::default();
        let (results, _) = pollster::block_on(engine.search(&chunks, &[i], &options, &|| false))
            .expect("searches");
        let best = results[0].best().expect("a hypothesis");
        tokens.extend(&best.tokens);
        texts.push(engine.target.decode(&best.tokens).expect("decodes"));
    }
    assert_eq!(joined.hypotheses[0].tokens, tokens);
    assert_eq!(joined.hypotheses[0].text, texts.join(" "));
    assert_eq!(t.text, texts.join(" "));
    assert_eq!(t.target_tokens(), tokens.len());
}

#[test]
fn an_empty_chunk_adds_no_space_to_its_sentence() {
    let output = |text: &str| PieceOutput {
        hypotheses: vec![HypothesisText {
            text: text.into(),
            tokens: Vec::new(),
            score: 0.0,
            logprob: 0.0,
        }],
        attention: None,
    };
    // One sentence in three chunks, the middle one translated as nothing, then another.
    let jobs = [("a", 0), ("", 1), ("b", 2), ("c", 3)]
        .map(|(text, token)| (vec![token], Some(output(text))));
    let piece = |sentence, job| Piece { sentence, job };
    let pieces = [
        piece((0, "x"), 0),
        piece((0, "x"), 1),
        piece((0, "x"), 2),
        piece((1, "y"), 3),
    ];
    let t = assemble(&pieces, &jobs);
    assert_eq!(t.sentences[0].hypotheses[0].text, "a b");
    assert_eq!(t.sentences[0].chunks, 3);
    assert_eq!(t.text, "a b c");
    let leading = assemble(&pieces[1..3], &jobs);
    assert_eq!(leading.text, "b", "no leading space");
}

/// `n` different short sentences.
fn sentences(n: usize) -> String {
    let animals = [
        "Hund", "Katze", "Pferd", "Mann", "Frau", "Kind", "Vogel", "Ball",
    ];
    (0..n)
        .map(|i| format!("Ein {} und {}.", animals[i % 8], animals[(i / 8) % 8]))
        .collect::<Vec<_>>()
        .join(" ")
}

/// How many pieces `texts` split into: all of them, and the distinct ones.
fn count_pieces(engine: &TableEngine, texts: &[&str]) -> (usize, usize) {
    let mut all = 0;
    let mut seen = std::collections::HashSet::new();
    for text in texts {
        for sentence in text::split_sentences(text) {
            let chunks = source_chunks(engine, sentence).expect("tokenizes");
            all += chunks.len();
            seen.extend(chunks);
        }
    }
    (all, seen.len())
}

#[test]
fn pieces_are_decoded_in_batches_and_sentences_joined_by_spaces() {
    let engine = TableEngine::new();
    let text = sentences(40);
    let t = run(&engine, &text, &TranslateOptions::default());
    assert_eq!(t.sentences.len(), 40);
    let (_, pieces) = count_pieces(&engine, &[&text]);
    let encoded = engine.batches.borrow().clone();
    let decoded = engine.decoder_batches.borrow().clone();
    assert_eq!(encoded.iter().sum::<usize>(), pieces, "{encoded:?}");
    assert_eq!(decoded.iter().sum::<usize>(), pieces, "{decoded:?}");
    assert!(encoded.iter().all(|&n| n <= ENCODER_BATCH), "{encoded:?}");
    assert!(decoded.iter().all(|&n| n <= DEFAULT_BATCH), "{decoded:?}");
    // The first decoder batch is the first pieces, at once; later ones fill up.
    assert_eq!(decoded[0], FIRST_BATCH.min(DEFAULT_BATCH).min(pieces));
    assert!(
        decoded.len() <= pieces.div_ceil(DEFAULT_BATCH) + 2,
        "{decoded:?}"
    );
    assert_eq!(engine.searches.get(), pieces);
    let best: Vec<&str> = t
        .sentences
        .iter()
        .map(|s| s.hypotheses[0].text.as_str())
        .filter(|s| !s.is_empty())
        .collect();
    assert_eq!(t.text, best.join(" "));
    assert!(t.sentences.iter().enumerate().all(|(i, s)| s.index == i));
}

#[test]
fn batching_changes_no_translation() {
    let text = sentences(30);
    let one = run(
        &TableEngine::new(),
        &text,
        &TranslateOptions {
            batch: 1,
            ..TranslateOptions::default()
        },
    );
    for batch in [2, 7, 16, MAX_BATCH] {
        let engine = TableEngine::new();
        let options = TranslateOptions {
            batch,
            ..TranslateOptions::default()
        };
        let many = run(&engine, &text, &options);
        assert_eq!(many.text, one.text, "batch {batch}");
        assert_eq!(many.sentences, one.sentences, "batch {batch}");
    }
}

#[test]
fn texts_come_back_in_order_and_repeats_are_searched_once() {
    let engine = TableEngine::new();
    let mut texts: Vec<String> = (0..12).map(|i| sentences(i % 5 + 1)).collect();
    texts.push(String::new());
    texts.push("Ein Hund und Hund.".into());
    let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
    let mut cache = TranslationCache::default();
    let mut got = Vec::new();
    let options = TranslateOptions {
        batch: 3,
        ..TranslateOptions::default()
    };
    pollster::block_on(translate_texts(
        &engine,
        &texts,
        &options,
        &|| false,
        Some(&mut cache),
        &mut |i, t| got.push((i, t)),
    ))
    .expect("translates");
    assert_eq!(
        got.iter().map(|g| g.0).collect::<Vec<_>>(),
        (0..texts.len()).collect::<Vec<_>>()
    );
    // Only 5 distinct sentences in all: each piece searched once, the repeats counted as hits.
    let (all, pieces) = count_pieces(&engine, &texts);
    assert_eq!((engine.searches.get(), cache.hits), (pieces, all - pieces));
    assert!(all > pieces);
    for ((_, t), text) in got.iter().zip(&texts) {
        assert_eq!(
            t,
            &Translation {
                timings: t.timings,
                ..run(&TableEngine::new(), text, &options)
            }
        );
    }
    // A second call answers from the cache; other options start it over.
    let again = TableEngine::new();
    let mut n = 0;
    pollster::block_on(translate_texts(
        &again,
        &texts,
        &options,
        &|| false,
        Some(&mut cache),
        &mut |_, _| n += 1,
    ))
    .expect("translates");
    assert_eq!(
        (n, again.searches.get(), cache.hits),
        (texts.len(), 0, 2 * all - pieces)
    );
    let greedy = TranslateOptions {
        search: SearchOptions::greedy(),
        ..options
    };
    pollster::block_on(translate_texts(
        &again,
        &texts,
        &greedy,
        &|| false,
        Some(&mut cache),
        &mut |_, _| (),
    ))
    .expect("translates");
    assert_eq!(again.searches.get(), pieces);
}

#[test]
fn blank_text_encodes_nothing() {
    let engine = TableEngine::new();
    let t = run(&engine, " \n\t ", &TranslateOptions::default());
    assert_eq!(t.text, "");
    assert!(t.sentences.is_empty());
    assert!(engine.batches.borrow().is_empty());
}

#[test]
fn identical_hypotheses_are_listed_once() {
    let engine = TableEngine::new();
    // Without diversity, four groups of one all follow the same argmax chain.
    let search = SearchOptions {
        beam: 4,
        groups: 4,
        diversity: 0.0,
        n_best: 4,
        ..SearchOptions::default()
    };
    let t = run(
        &engine,
        "Ein Hund.",
        &TranslateOptions {
            search,
            ..TranslateOptions::default()
        },
    );
    assert_eq!(t.sentences[0].hypotheses.len(), 1);
}

#[test]
fn heatmaps_average_the_heads_of_the_best_hypothesis() {
    let engine = TableEngine::new();
    let options = TranslateOptions {
        search: SearchOptions::greedy(),
        attention: true,
        ..TranslateOptions::default()
    };
    let t = run(&engine, "Ein Hund.", &options);
    let sentence = &t.sentences[0];
    let map = sentence.attention.as_ref().expect("a heatmap");
    let source = engine.source.encode(&sentence.source).expect("tokenizes");
    let best = &sentence.hypotheses[0];
    let s = source.len();
    assert_eq!(map.source_tokens.len(), s);
    // The tokens and EOS (the table model's greedy search ends with it), one row each.
    assert!(!best.tokens.is_empty());
    assert_eq!(map.target_tokens.len(), best.tokens.len() + 1, "{map:?}");
    assert_eq!(map.weights.len(), map.target_tokens.len() * s);
    for row in map.weights.chunks(s) {
        assert!((row.iter().sum::<f32>() - 1.0).abs() < 1e-6, "{row:?}");
        assert!((row[0] - (0.5 + 0.5 / s as f32)).abs() < 1e-6, "{row:?}");
    }
    assert_eq!(map.target_tokens.last().map(String::as_str), Some("</s>"));
}

#[test]
fn cancellation_stops_before_the_next_batch() {
    let engine = TableEngine::new();
    let asked = Cell::new(0);
    // Asked before the first encoder batch, its decoder batch, then the next encoder batch.
    let cancelled = || {
        asked.set(asked.get() + 1);
        asked.get() > 2
    };
    let result = pollster::block_on(translate(
        &engine,
        "Ein Hund. Eine Katze. Ein Pferd.",
        &TranslateOptions {
            batch: 1,
            ..TranslateOptions::default()
        },
        &cancelled,
    ));
    assert!(matches!(result, Err(TranslateError::Cancelled)));
    assert_eq!(engine.searches.get(), 1);
}

#[test]
fn impossible_options_are_the_engines_error() {
    let engine = TableEngine::new();
    let options = TranslateOptions {
        search: SearchOptions {
            beam: 6,
            groups: 4,
            ..SearchOptions::default()
        },
        ..TranslateOptions::default()
    };
    let result = pollster::block_on(translate(&engine, "Ein Hund.", &options, &|| false));
    assert!(matches!(
        result,
        Err(TranslateError::Engine(SearchError::Options(_)))
    ));
    assert!(engine.batches.borrow().is_empty());
}

#[test]
fn decoder_batches_split_at_the_budget_in_order() {
    let pieces: Vec<usize> = (0..10).collect();
    // 10 bytes per piece, budget 35: runs of three, the last one shorter.
    let parts = split_decoder_batch(&pieces, 35, |run| 10 * run.len() as u64);
    assert_eq!(
        parts,
        vec![&pieces[0..3], &pieces[3..6], &pieces[6..9], &pieces[9..10]]
    );
    // A piece over the budget alone still gets a run; everything fits: one run.
    let parts = split_decoder_batch(&pieces, 5, |run| 10 * run.len() as u64);
    assert_eq!(parts.len(), 10);
    assert_eq!(
        split_decoder_batch(&pieces, u64::MAX, |_| 0),
        vec![&pieces[..]]
    );
    assert!(split_decoder_batch(&[], 5, |_| 0).is_empty());
}
