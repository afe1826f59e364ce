//! Text → tokens → beam search → text on the CPU, with the tiny model's tokenizers and a
//! deterministic stand-in for the decoder (a `TableModel` whose logits hash the source and the
//! history): arbitrary UTF-8 through sentence splitting, tokenization, chunking, every search
//! option and detokenization. The first 8 bytes choose the search options. Nothing may panic;
//! options the search refuses must come back as errors.
#![no_main]

use libfuzzer_sys::fuzz_target;
use webnmt::translate::text::split_sentences;
use webnmt::search::testing::TableModel;
use webnmt::search::{SearchOptions, beam_search};
use webnmt::tokenizer::Tokenizer;

const TINY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/tiny/bundle");

fn tokenizer(name: &str) -> Tokenizer {
    Tokenizer::from_file(format!("{TINY}/{name}")).expect("the committed tiny tokenizers")
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 8 {
        return;
    }
    let (o, text) = data.split_at(8);
    let Ok(text) = std::str::from_utf8(text) else {
        return;
    };
    thread_local! {
        static TOKENIZERS: (Tokenizer, Tokenizer) =
            (tokenizer("source.tokenizer.json"), tokenizer("target.tokenizer.json"));
    }
    let options = SearchOptions {
        beam: usize::from(o[0] % 10),
        groups: usize::from(o[1] % 5),
        diversity: f32::from(o[2]) / 50.0,
        length_penalty: f32::from(o[3]) / 100.0,
        repetition_penalty: 0.5 + f32::from(o[4]) / 64.0,
        repetition_window: usize::from(o[5] % 40),
        // 0..=31: valid spans and ones above the limit of 16.
        block_repeats: usize::from(o[6] >> 3),
        n_best: usize::from(o[6] % 6),
        max_len_a: f32::from(o[7] % 4),
        max_len_b: usize::from(o[7] / 16),
    };
    TOKENIZERS.with(|(source, target)| {
        for sentence in split_sentences(text) {
            let Ok(ids) = source.encode(sentence) else {
                continue;
            };
            for chunk in ids.chunks(150) {
                let vocab = target.vocab_size();
                let seed: u64 = chunk.iter().fold(17, |h, &t| h.wrapping_mul(31) ^ u64::from(t));
                let mut model = TableModel::new(vocab, 2, 3, 150, |history: &[u32]| {
                    let h = history
                        .iter()
                        .fold(seed, |h, &t| h.wrapping_mul(1_000_003) ^ u64::from(t));
                    (0..vocab as u64)
                        .map(|i| ((h ^ i.wrapping_mul(0x9E37_79B9)) % 1000) as f32 / 100.0)
                        .collect()
                });
                let result = pollster::block_on(beam_search(&mut model, &options, chunk.len()));
                if let Ok(result) = result {
                    for h in &result.hypotheses {
                        let _ = target.decode(&h.tokens);
                    }
                }
            }
        }
    });
});
