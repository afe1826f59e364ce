//! The GPU engine against the burn model on the committed tiny fixture model
//! (`tests/fixtures/tiny`, trained by `train` on the fixture corpus), and on a random model at
//! the shipped models' widths: the same int8 weights, dequantized into burn on the flex CPU
//! backend. Runs on lavapipe in CI.
#![cfg(feature = "train")]

mod common;

use burn::tensor::{Device, Int, Tensor, TensorData};
use common::{assert_batched_equals_alone, search_one};
use pollster::block_on;
use webnmt::config::{BOS_ID, EOS_ID, ModelConfig};
use webnmt::export::{ExportInfo, export_weights, named_weights};
use webnmt::gpu::testing::gpu_or_skip;
use webnmt::infer::Engine;
use webnmt::model::{BurnEngine, BurnSession, Transformer, greedy_decode};
use webnmt::search::{SearchOptions, beam_search, log_softmax};
use webnmt::translate::{TranslateOptions, TranslationEngine, translate};
use webnmt::weights::Bundle;

const TINY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/tiny/bundle");
const DEV: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/corpus/de-en/dev.de"
);

fn load(test: &str) -> Option<(Engine, Transformer, Device)> {
    let gpu = gpu_or_skip(test)?;
    let bundle = Bundle::from_dir(std::path::Path::new(TINY)).expect("fixture bundle");
    let device = Device::flex();
    let model = Transformer::from_bundle(&bundle, &device).expect("bundle fits the model");
    let engine = block_on(Engine::new(gpu, bundle)).expect("engine loads");
    Some((engine, model, device))
}

/// The 50 dev sentences of the fixture corpus as source token ids.
fn sources(engine: &Engine) -> Vec<Vec<u32>> {
    let text = std::fs::read_to_string(DEV).expect("fixture dev set");
    let sources: Vec<Vec<u32>> = text
        .lines()
        .map(|l| engine.source_tokenizer().encode(l).expect("tokenizes"))
        .collect();
    assert_eq!(sources.len(), 50);
    sources
}

#[test]
fn teacher_forced_logits_match_burn() {
    let Some((engine, model, device)) = load("teacher_forced_logits_match_burn") else {
        return;
    };
    let sources = sources(&engine);
    assert_teacher_forced_matches(&engine, &model, &device, &sources);
}

/// The kernels at the shipped models' widths, which the tiny model (d_model 32, d_head 16)
/// does not reach: d_model 256 in 4 heads of 64 and d_ff 1024 (the fused LayerNorm product at
/// 256, attention at d_head 64, embed at 256), random weights exported to int8 like a
/// trained model's.
#[test]
fn teacher_forced_logits_match_burn_at_the_shipped_width() {
    let test = "teacher_forced_logits_match_burn_at_the_shipped_width";
    let Some(gpu) = gpu_or_skip(test) else {
        return;
    };
    let tiny = Bundle::from_dir(std::path::Path::new(TINY)).expect("fixture bundle");
    let config = ModelConfig {
        d_model: 256,
        d_ff: 1024,
        n_heads: 4,
        n_enc_layers: 2,
        n_dec_layers: 2,
        dropout: 0.0,
        ..tiny.config().clone()
    };
    config.validate().expect("a valid model");
    let device = Device::flex();
    let weights = named_weights(&Transformer::new(&config, &device)).expect("weights");
    let dir = std::env::temp_dir().join(format!("webnmt-engine-wide-{}", std::process::id()));
    let info = ExportInfo {
        source_lang: "de".into(),
        target_lang: "en".into(),
        metrics: serde_json::Value::Null,
    };
    let (src_tok, tgt_tok) = (&tiny.source_tokenizer, &tiny.target_tokenizer);
    export_weights(&weights, &config, src_tok, tgt_tok, info, &dir).expect("exports");
    let bundle = Bundle::from_dir(&dir).expect("the export loads");
    let _ = std::fs::remove_dir_all(&dir);
    // Both from the int8 bundle: the engine's weights, dequantized into burn.
    let model = Transformer::from_bundle(&bundle, &device).expect("bundle fits the model");
    let engine = block_on(Engine::new(gpu, bundle)).expect("engine loads");
    let sources = sources(&engine);
    assert_teacher_forced_matches(&engine, &model, &device, &sources);
}

/// The engine's teacher-forced logits and cross-attention weights against burn's for six
/// sentences, each with a target prefix of 12 tokens of another sentence.
fn assert_teacher_forced_matches(
    engine: &Engine,
    model: &Transformer,
    device: &Device,
    sources: &[Vec<u32>],
) {
    let batch = &sources[..6];
    let encoded = block_on(engine.encode(batch)).expect("encoder runs");
    let mut worst = 0.0f32;
    for (i, src) in batch.iter().enumerate() {
        // Any target prefix will do: the first tokens of the next sentence.
        let mut tgt_in = vec![BOS_ID];
        tgt_in.extend(sources[i + 10].iter().take(12));
        let (logits, weights) =
            block_on(engine.teacher_forced(&encoded, i, &tgt_in)).expect("decoder runs");
        let ids = |v: &[u32]| v.iter().map(|&t| i64::from(t)).collect::<Vec<_>>();
        let src_t = Tensor::<2, Int>::from_data(TensorData::new(ids(src), [1, src.len()]), device);
        let tgt_t =
            Tensor::<2, Int>::from_data(TensorData::new(ids(&tgt_in), [1, tgt_in.len()]), device);
        let (memory, mask) = model.encode(src_t);
        let (want, want_weights) = model.decode(tgt_t, memory, &mask);
        let want: Vec<f32> = want.try_into_vec_as().expect("logits");
        let want_weights: Vec<f32> = want_weights.try_into_vec_as().expect("weights");
        assert_eq!(logits.len(), want.len());
        assert_eq!(weights.len(), want_weights.len(), "cross-attention weights");
        for (g, w) in logits.iter().zip(&want) {
            worst = worst.max((g - w).abs() / (1.0 + w.abs()));
        }
        for (g, w) in weights.iter().zip(&want_weights) {
            assert!(
                (g - w).abs() < 1e-4,
                "cross-attention weight {g} vs burn {w}"
            );
        }
    }
    assert!(worst < 1e-3, "worst relative logit difference {worst}");
    eprintln!("worst relative logit difference engine vs burn: {worst:e}");
}

#[test]
fn greedy_equals_burn_greedy_on_50_sentences() {
    let Some((engine, model, device)) = load("greedy_equals_burn_greedy_on_50_sentences") else {
        return;
    };
    let sources = sources(&engine);
    let options = SearchOptions::greedy();
    let encoded = block_on(engine.encode(&sources)).expect("encoder runs");
    let cap = engine.config().max_seq_len;
    for (i, src) in sources.iter().enumerate() {
        let (result, stats) = search_one(&engine, &encoded, i, &options).expect("search");
        let ours = &result.hypotheses[0].tokens;
        let max_len = options.max_target_len(src.len(), cap);
        // burn's greedy emits at most `max_len` tokens without EOS; the search counts EOS.
        let theirs = &greedy_decode(&model, std::slice::from_ref(src), max_len, &device)
            .expect("greedy tokens read back")[0];
        assert_eq!(ours, theirs, "sentence {i}: engine vs burn greedy");
        // One submit and one 8-byte readback (rows × k = 1) per step.
        assert_eq!(stats.gpu.submits, stats.steps as u64, "sentence {i}");
        assert_eq!(stats.gpu.bytes_read, 8 * stats.steps as u64, "sentence {i}");
    }
}

#[test]
fn beam_search_equals_burn_beam_search() {
    let Some((engine, model, device)) = load("beam_search_equals_burn_beam_search") else {
        return;
    };
    let sources = sources(&engine);
    let encoded = block_on(engine.encode(&sources[..12])).expect("encoder runs");
    let cap = engine.config().max_seq_len;
    let repeatable = engine.target_tokenizer().repeatable();
    let options = SearchOptions {
        n_best: 4,
        ..SearchOptions::default()
    };
    for (i, src) in sources[..12].iter().enumerate() {
        let (ours, _) = search_one(&engine, &encoded, i, &options).expect("engine search");
        let mut burn = BurnSession::new(&model, src, cap, repeatable.clone(), &device);
        let theirs = block_on(beam_search(&mut burn, &options, src.len())).expect("burn search");
        let tokens = |r: &webnmt::search::SearchResult| {
            r.hypotheses
                .iter()
                .map(|h| h.tokens.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(
            tokens(&ours),
            tokens(&theirs),
            "sentence {i}: n-best differ"
        );
        for (a, b) in ours.hypotheses.iter().zip(&theirs.hypotheses) {
            assert!(
                (a.score - b.score).abs() < 1e-3,
                "sentence {i}: {a:?} vs {b:?}"
            );
        }
    }
}

/// The shared text pipeline gives the same translations, n-best lists and heatmaps with the
/// burn model as with the GPU engine.
#[test]
fn both_engines_translate_text_alike() {
    let Some((engine, model, device)) = load("both_engines_translate_text_alike") else {
        return;
    };
    let bundle = Bundle::from_dir(std::path::Path::new(TINY)).expect("fixture bundle");
    let burn = BurnEngine::new(model, &bundle, &device);
    let text = std::fs::read_to_string(DEV).expect("fixture dev set");
    // Two lines per paragraph: several sentences per request.
    let lines: Vec<&str> = text.lines().take(12).collect();
    for options in [
        TranslateOptions {
            search: SearchOptions::greedy(),
            attention: true,
            ..TranslateOptions::default()
        },
        TranslateOptions {
            search: SearchOptions {
                n_best: 3,
                ..SearchOptions::default()
            },
            attention: true,
            ..TranslateOptions::default()
        },
    ] {
        for pair in lines.chunks(2) {
            let paragraph = pair.join(" ");
            let ours = block_on(translate(&engine, &paragraph, &options, &|| false))
                .expect("engine translates");
            let theirs = block_on(translate(&burn, &paragraph, &options, &|| false))
                .expect("burn translates");
            assert_eq!(ours.text, theirs.text, "{paragraph}");
            assert_eq!(ours.sentences.len(), theirs.sentences.len());
            for (a, b) in ours.sentences.iter().zip(&theirs.sentences) {
                let texts = |s: &webnmt::translate::SentenceTranslation| {
                    s.hypotheses
                        .iter()
                        .map(|h| h.text.clone())
                        .collect::<Vec<_>>()
                };
                assert_eq!(texts(a), texts(b), "{}", a.source);
                let (ma, mb) = (a.attention.as_ref(), b.attention.as_ref());
                let (ma, mb) = (ma.expect("engine heatmap"), mb.expect("burn heatmap"));
                assert_eq!(ma.source_tokens, mb.source_tokens);
                assert_eq!(ma.target_tokens, mb.target_tokens);
                assert_eq!(ma.weights.len(), mb.weights.len(), "{}", a.source);
                for (x, y) in ma.weights.iter().zip(&mb.weights) {
                    assert!(
                        (x - y).abs() < 1e-4,
                        "{}: heatmap {x} vs burn {y}",
                        a.source
                    );
                }
            }
        }
    }
}

#[test]
fn cached_steps_agree_with_the_teacher_forced_pass() {
    let Some((engine, _, _)) = load("cached_steps_agree_with_the_teacher_forced_pass") else {
        return;
    };
    let sources = sources(&engine);
    let encoded = block_on(engine.encode(&sources[..8])).expect("encoder runs");
    let options = SearchOptions {
        beam: 4,
        groups: 2,
        ..SearchOptions::default()
    };
    let vocab = engine.config().tgt_vocab_size;
    for i in 0..8 {
        let (result, _) = search_one(&engine, &encoded, i, &options).expect("search");
        let best = &result.hypotheses[0];
        // Without the repetition penalty's effect, the step log-probs the search summed must be
        // the teacher-forced pass's: compare on hypotheses that repeat no token in the window.
        let mut tgt_in = vec![BOS_ID];
        tgt_in.extend(&best.tokens);
        let (logits, _) = block_on(engine.teacher_forced(&encoded, i, &tgt_in)).expect("decoder");
        let mut targets = best.tokens.clone();
        targets.push(EOS_ID);
        let mut sum = 0.0f32;
        let mut seen = Vec::new();
        for (t, &token) in targets.iter().enumerate().take(best.rows.len()) {
            let mut row = logits[t * vocab..][..vocab].to_vec();
            log_softmax(&mut row);
            let mut lp = row[token as usize];
            let window = &seen[seen.len().saturating_sub(options.repetition_window)..];
            if window.contains(&token) {
                lp *= options.repetition_penalty;
            }
            seen.push(token);
            sum += lp;
        }
        assert!(
            (sum - best.logprob).abs() < 1e-3 * (1.0 + sum.abs()),
            "sentence {i}: search log-prob {} vs teacher-forced {sum}",
            best.logprob
        );
    }
}

#[test]
fn a_batch_beyond_the_adapters_limits_is_an_error_not_a_panic() {
    let Some((engine, _, _)) = load("a_batch_beyond_the_adapters_limits_is_an_error") else {
        return;
    };
    // Enough rows that the feed-forward activations exceed the largest storage binding (the
    // dispatch-size limit of the adapter may refuse the batch first: also an error).
    let limit = engine.gpu().device.limits().max_storage_buffer_binding_size as usize;
    let seq = engine.config().max_seq_len;
    let batch = limit / (seq * engine.config().d_ff * 4) + 1;
    let sources = vec![vec![5u32; seq]; batch];
    let err = match block_on(engine.encode(&sources)) {
        Ok(_) => panic!("{batch} sentences of {seq} tokens must not fit"),
        Err(e) => e.to_string(),
    };
    assert!(
        ["GPU validation failed", "out of memory", "rows ≤"]
            .iter()
            .any(|m| err.contains(m)),
        "{err}"
    );
    // The engine still works afterwards.
    let encoded = block_on(engine.encode(&sources[..1])).expect("a small batch still runs");
    search_one(&engine, &encoded, 0, &SearchOptions::greedy()).expect("and decodes");
}

#[test]
fn a_lost_device_is_an_error_not_a_panic() {
    let Some((engine, _, _)) = load("a_lost_device_is_an_error_not_a_panic") else {
        return;
    };
    let sources = sources(&engine);
    let encoded = block_on(engine.encode(&sources[..2])).expect("encoder runs");
    // What a driver reset or a removed GPU does to a live device.
    engine.gpu().device.destroy();
    let err = search_one(&engine, &encoded, 0, &SearchOptions::greedy())
        .expect_err("no translation from a lost device");
    assert!(!err.to_string().is_empty());
    let err = block_on(translate(
        &engine,
        "Ein Hund.",
        &Default::default(),
        &|| false,
    ))
    .expect_err("no translation from a lost device");
    eprintln!("after device loss: {err}");
}

#[test]
fn batched_search_equals_one_at_a_time() {
    let Some((engine, _, _)) = load("batched_search_equals_one_at_a_time") else {
        return;
    };
    assert_batched_equals_alone(&engine, &sources(&engine));
}
