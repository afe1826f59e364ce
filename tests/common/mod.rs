//! Helpers shared by the engine tests (`tests/engine.rs`, `tests/cpu.rs`).

use pollster::block_on;
use webnmt::search::{SearchOptions, SearchResult};
use webnmt::translate::{SearchStats, TranslationEngine};

/// One piece's search, alone.
pub fn search_one<E: TranslationEngine>(
    engine: &E,
    encoded: &E::Encoded,
    i: usize,
    options: &SearchOptions,
) -> Result<(SearchResult, SearchStats), E::Error> {
    let (mut results, stats) = block_on(engine.search(encoded, &[i], options, &|| false))?;
    Ok((results.remove(0), stats))
}

/// Every piece of 50 sentences (two encoder batches) searched in one batch equals its search
/// alone: the same hypotheses, scores and steps, for greedy, beam 4 and the defaults.
pub fn assert_batched_equals_alone<E: TranslationEngine>(engine: &E, sources: &[Vec<u32>])
where
    E::Error: std::fmt::Debug,
{
    let beam4 = SearchOptions {
        beam: 4,
        groups: 1,
        diversity: 0.0,
        n_best: 4,
        ..SearchOptions::default()
    };
    for options in [SearchOptions::greedy(), beam4, SearchOptions::default()] {
        for batch in sources.chunks(25) {
            let encoded = block_on(engine.encode(batch)).expect("encoder runs");
            let all: Vec<usize> = (0..batch.len()).collect();
            let (batched, _) =
                block_on(engine.search(&encoded, &all, &options, &|| false)).expect("batch");
            assert_eq!(batched.len(), batch.len());
            for (i, together) in batched.iter().enumerate() {
                let (alone, _) = search_one(engine, &encoded, i, &options).expect("search");
                assert_eq!(together, &alone, "piece {i} with {options:?}");
            }
            // Encoded alone too (other padding, as another --batch would give): the same.
            for i in [0, batch.len() / 2, batch.len() - 1] {
                let single = block_on(engine.encode(&batch[i..=i])).expect("encoder runs");
                let (alone, _) = search_one(engine, &single, 0, &options).expect("search");
                assert_eq!(batched[i], alone, "piece {i} encoded alone, {options:?}");
            }
        }
    }
}
