//! SplitMix64: the small, fully specified generator behind every shuffle in [`crate::data`].
//!
//! `rand` documents that `SmallRng`'s algorithm may change between releases and platforms; a
//! resumed training run must regenerate the same epoch order from `(seed, epoch)` after any
//! dependency update, so the generator is written out here (Steele, Lea & Flood, "Fast
//! splittable pseudorandom number generators", 2014; the constants of Vigna's `splitmix64.c`).

/// Domain separators so the split and the batch order never share a stream for equal seeds.
pub(crate) const SPLIT_STREAM: u64 = 0x5350_4c49_5400_0001; // "SPLIT"
pub(crate) const BATCH_STREAM: u64 = 0x4241_5443_4800_0002; // "BATCH"

/// SplitMix64 state.
#[derive(Clone, Debug)]
pub(crate) struct SplitMix64 {
    state: u64,
}

/// The SplitMix64 output function: a bijective 64-bit mix.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

const GOLDEN_GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

impl SplitMix64 {
    /// A generator whose first output is `mix(seed + γ)`, as in `splitmix64.c`.
    pub(crate) fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    /// A generator keyed by several words (e.g. `[seed, BATCH_STREAM, epoch]`): each word is
    /// folded in with the mix function, so nearby keys give unrelated streams.
    pub(crate) fn keyed(words: &[u64]) -> Self {
        let mut state = 0u64;
        for &w in words {
            state = mix(state.wrapping_add(GOLDEN_GAMMA) ^ w);
        }
        Self::new(state)
    }

    /// The next 64 random bits.
    pub(crate) fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(GOLDEN_GAMMA);
        mix(self.state)
    }

    /// A number in `0..n` (`n > 0`) by Lemire's multiply-shift; the bias is below `n / 2^64`.
    pub(crate) fn below(&mut self, n: usize) -> usize {
        debug_assert!(n > 0);
        ((u128::from(self.next_u64()) * n as u128) >> 64) as usize
    }

    /// Fisher–Yates shuffle (Durstenfeld's version, from the back).
    pub(crate) fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.below(i + 1);
            items.swap(i, j);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reference outputs of Vigna's `splitmix64.c` for seed 1234567.
    #[test]
    fn splitmix64_matches_reference_outputs() {
        let mut rng = SplitMix64::new(1_234_567);
        let got: Vec<u64> = (0..5).map(|_| rng.next_u64()).collect();
        assert_eq!(
            got,
            [
                6_457_827_717_110_365_317,
                3_203_168_211_198_807_973,
                9_817_491_932_198_370_423,
                4_593_380_528_125_082_431,
                16_408_922_859_458_223_821,
            ]
        );
    }

    #[test]
    fn shuffle_is_a_permutation_and_keyed_streams_differ() {
        let mut a: Vec<usize> = (0..1000).collect();
        SplitMix64::keyed(&[7, BATCH_STREAM, 0]).shuffle(&mut a);
        let mut b: Vec<usize> = (0..1000).collect();
        SplitMix64::keyed(&[7, BATCH_STREAM, 1]).shuffle(&mut b);
        assert_ne!(a, b);
        assert_ne!(a, (0..1000).collect::<Vec<_>>());
        a.sort_unstable();
        assert_eq!(a, (0..1000).collect::<Vec<_>>());
    }

    #[test]
    fn below_stays_in_range_and_covers_it() {
        let mut rng = SplitMix64::new(3);
        let mut seen = [0usize; 7];
        for _ in 0..7000 {
            seen[rng.below(7)] += 1;
        }
        // Each bucket expects 1000; a fair generator stays far inside 800..1200.
        assert!(seen.iter().all(|&c| (800..1200).contains(&c)), "{seen:?}");
    }
}
