//! Carving dev, test and per-tag held-out sets off a training corpus, deterministically.
//!
//! Run it on the output of [`super::clean`]: sets are drawn from distinct (source, target)
//! pairs, and every copy of a drawn pair is kept out of train, so no held-out pair is ever
//! trained on even when deduplication was turned off.
//!
//! Procedure for a corpus with `n` distinct pairs:
//! 1. the distinct pairs (first occurrences) are shuffled with SplitMix64 keyed by `seed`;
//! 2. held-out, per tag in the shuffled order: the first `min(held_out_per_tag, count / 2)`
//!    pairs carrying that tag (at most half, so every domain keeps training data); untagged pairs
//!    are never held out this way;
//! 3. dev: the next [`SplitSize::resolve`]`(dev, n)` remaining pairs in the shuffled order;
//! 4. test: the next `resolve(test, n)` pairs;
//! 5. train: everything else, including extra copies of pairs not drawn, in file order.
//!
//! Every set is returned in file order.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;

use serde::{Deserialize, Serialize};

use super::error::DataError;
use super::read::{Corpus, Pair};
use super::rng::{SPLIT_STREAM, SplitMix64};

/// A set size: a number of pairs, or a fraction of the corpus's distinct pairs. In TOML an
/// integer (`dev = 500`) is a count and a float (`dev = 0.01`) a fraction.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum SplitSize {
    /// Exactly this many pairs.
    Count(usize),
    /// This fraction (0 ≤ f < 1) of the distinct pairs, rounded to the nearest count, and at
    /// least 1 when the fraction is above 0.
    Fraction(f64),
}

impl SplitSize {
    /// The number of pairs this size means for a corpus of `total` distinct pairs.
    pub fn resolve(self, total: usize) -> usize {
        match self {
            Self::Count(n) => n,
            Self::Fraction(f) if f > 0.0 && total > 0 => {
                ((f * total as f64).round() as usize).max(1)
            }
            Self::Fraction(_) => 0,
        }
    }

    fn validate(self, setting: &'static str) -> Result<(), DataError> {
        match self {
            Self::Fraction(f) if !(0.0..1.0).contains(&f) => Err(DataError::InvalidConfig {
                setting,
                value: f.to_string(),
                expected: "a count (an integer) or a fraction at least 0 and below 1",
            }),
            _ => Ok(()),
        }
    }
}

/// How to split a corpus when no dev/test files are given.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SplitConfig {
    /// Seed of the shuffle (default 0).
    pub seed: u64,
    /// Dev set size (default 1% of the distinct pairs); set 0 when a dev file is given.
    pub dev: SplitSize,
    /// Test set size (default 1% of the distinct pairs); set 0 when a test file is given.
    pub test: SplitSize,
    /// Pairs held out per tag for per-domain evaluation (default 0: none).
    pub held_out_per_tag: usize,
}

impl Default for SplitConfig {
    fn default() -> Self {
        Self {
            seed: 0,
            dev: SplitSize::Fraction(0.01),
            test: SplitSize::Fraction(0.01),
            held_out_per_tag: 0,
        }
    }
}

/// The sets a corpus was split into.
#[derive(Clone, Debug, PartialEq)]
pub struct Split {
    /// Pairs to train on.
    pub train: Corpus,
    /// Validation pairs.
    pub dev: Corpus,
    /// Test pairs.
    pub test: Corpus,
    /// Held-out pairs per tag, never trained on.
    pub held_out: BTreeMap<String, Corpus>,
    /// The sizes.
    pub report: SplitReport,
}

/// Sizes of the sets of a [`Split`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct SplitReport {
    /// Pairs that went in.
    pub input: usize,
    /// Distinct (source, target) pairs among them.
    pub distinct: usize,
    /// Train pairs.
    pub train: usize,
    /// Dev pairs.
    pub dev: usize,
    /// Test pairs.
    pub test: usize,
    /// Held-out pairs per tag.
    pub held_out: BTreeMap<String, usize>,
    /// Repeated copies of a dev, test or held-out pair removed from train (0 after dedup).
    pub copies_removed: usize,
}

impl fmt::Display for SplitReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let held: Vec<(String, usize)> = self
            .held_out
            .iter()
            .map(|(tag, n)| (format!("held out: {tag}"), *n))
            .collect();
        let mut rows = vec![("pairs in", self.input), ("distinct pairs", self.distinct)];
        rows.extend(held.iter().map(|(label, n)| (label.as_str(), *n)));
        rows.extend([
            ("dev", self.dev),
            ("test", self.test),
            ("copies removed from train", self.copies_removed),
            ("train", self.train),
        ]);
        super::write_rows(f, &rows)
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Dest {
    Train,
    Dev,
    Test,
    HeldOut,
    /// A later copy of a pair drawn for dev, test or held-out.
    Dropped,
}

/// Splits `corpus` as described in the module documentation.
///
/// # Errors
/// [`DataError::InvalidConfig`] for a fraction outside `0..1`, [`DataError::EmptyCorpus`] for
/// an empty corpus, [`DataError::SplitTooLarge`] when nothing would be left to train on.
pub fn split(corpus: Corpus, config: &SplitConfig) -> Result<Split, DataError> {
    config.dev.validate("split.dev")?;
    config.test.validate("split.test")?;
    if corpus.is_empty() {
        return Err(DataError::EmptyCorpus {
            corpus: corpus.name,
        });
    }

    let input = corpus.len();
    let (dest, distinct) = {
        // Index of the first occurrence of each distinct pair, and each pair's first occurrence.
        let mut first: HashMap<(&str, &str), usize> = HashMap::new();
        let mut first_of = Vec::with_capacity(corpus.len());
        let mut distinct = Vec::new();
        for (i, p) in corpus.pairs.iter().enumerate() {
            let f = *first.entry((&p.source, &p.target)).or_insert_with(|| {
                distinct.push(i);
                i
            });
            first_of.push(f);
        }
        let n = distinct.len();
        let mut quota: BTreeMap<&str, usize> = BTreeMap::new();
        if config.held_out_per_tag > 0 {
            for &i in &distinct {
                if let Some(tag) = &corpus.pairs[i].tag {
                    *quota.entry(tag).or_insert(0) += 1;
                }
            }
            for q in quota.values_mut() {
                *q = config.held_out_per_tag.min(*q / 2);
            }
        }
        let held_total: usize = quota.values().sum();
        let (n_dev, n_test) = (config.dev.resolve(n), config.test.resolve(n));
        if held_total + n_dev + n_test >= n {
            return Err(DataError::SplitTooLarge {
                corpus: corpus.name,
                distinct: n,
                dev: n_dev,
                test: n_test,
                held_out: held_total,
            });
        }

        let mut order = distinct.clone();
        SplitMix64::keyed(&[config.seed, SPLIT_STREAM]).shuffle(&mut order);
        let mut dest = vec![Dest::Train; corpus.len()];
        for &i in &order {
            if let Some(q) = corpus.pairs[i]
                .tag
                .as_deref()
                .and_then(|t| quota.get_mut(t))
                .filter(|q| **q > 0)
            {
                *q -= 1;
                dest[i] = Dest::HeldOut;
            }
        }
        let rest: Vec<usize> = order
            .iter()
            .copied()
            .filter(|&i| dest[i] == Dest::Train)
            .take(n_dev + n_test)
            .collect();
        for (k, i) in rest.into_iter().enumerate() {
            dest[i] = if k < n_dev { Dest::Dev } else { Dest::Test };
        }
        // Later copies follow their first occurrence out of train.
        for i in 0..corpus.len() {
            let f = first_of[i];
            if f != i && dest[f] != Dest::Train {
                dest[i] = Dest::Dropped;
            }
        }
        (dest, n)
    };

    let name = corpus.name;
    let mut train = Vec::new();
    let mut dev = Vec::new();
    let mut test = Vec::new();
    let mut held: BTreeMap<String, Vec<Pair>> = BTreeMap::new();
    let mut copies_removed = 0;
    for (pair, d) in corpus.pairs.into_iter().zip(dest) {
        match d {
            Dest::Train => train.push(pair),
            Dest::Dev => dev.push(pair),
            Dest::Test => test.push(pair),
            Dest::HeldOut => {
                let tag = pair.tag.clone().unwrap_or_default();
                held.entry(tag).or_default().push(pair);
            }
            Dest::Dropped => copies_removed += 1,
        }
    }
    let report = SplitReport {
        input,
        distinct,
        train: train.len(),
        dev: dev.len(),
        test: test.len(),
        held_out: held.iter().map(|(t, v)| (t.clone(), v.len())).collect(),
        copies_removed,
    };
    Ok(Split {
        train: Corpus::new(format!("{name} (train split)"), train),
        dev: Corpus::new(format!("{name} (dev split)"), dev),
        test: Corpus::new(format!("{name} (test split)"), test),
        held_out: held
            .into_iter()
            .map(|(tag, pairs)| {
                let c = Corpus::new(format!("{name} (held out: {tag})"), pairs);
                (tag, c)
            })
            .collect(),
        report,
    })
}

/// Removes from `train` every pair whose trimmed source and target equal those of a pair in
/// one of `others` (e.g. dev and test files given separately); returns how many were removed.
pub fn remove_overlap(train: &mut Corpus, others: &[&Corpus]) -> usize {
    let held: HashSet<(&str, &str)> = others
        .iter()
        .flat_map(|c| c.pairs.iter())
        .map(|p| (p.source.trim(), p.target.trim()))
        .collect();
    let before = train.pairs.len();
    train
        .pairs
        .retain(|p| !held.contains(&(p.source.trim(), p.target.trim())));
    before - train.pairs.len()
}
