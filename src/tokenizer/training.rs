//! Unigram training on top of `tokenizers`' `UnigramTrainer`, made deterministic.

use std::collections::{HashMap, HashSet};

use tokenizers::models::unigram::{Unigram, UnigramTrainer};
use tokenizers::{
    AddedToken, Normalizer, OffsetReferential, OffsetType, PreTokenizedString, PreTokenizer,
};

use super::{
    SPECIAL_TOKENS, Tokenizer, TokenizerConfig, TokenizerError, UNK_ID, normalizer, pre_tokenizer,
};

/// Words longer than this (bytes) are left out of training, like SentencePiece's
/// `max_sentence_length`; the lattice of one huge word only slows EM down.
const MAX_WORD_BYTES: usize = 4192;

/// The step between the scores the trainer gives characters missing from the EM
/// vocabulary (`min_score_penalty_delta` in `tokenizers`' `UnigramTrainer::finalize`).
const MISSING_CHAR_DELTA: f64 = 0.0001;

/// Trains a Unigram tokenizer on `lines` (one sentence each, one language).
///
/// Deterministic: the same lines (in any order) and configuration give byte-identical
/// [`Tokenizer::to_json`] output. The vocabulary may come out smaller than
/// `config.vocab_size` when the corpus has too few distinct substrings.
pub fn train_unigram<S: AsRef<str>>(
    lines: impl IntoIterator<Item = S>,
    config: &TokenizerConfig,
) -> Result<Tokenizer, TokenizerError> {
    config.validate()?;
    let words = count_words(lines)?;
    if words.is_empty() {
        return Err(TokenizerError::EmptyCorpus);
    }

    let required: HashSet<char> = config.required_chars.chars().collect();
    let kept = covered_alphabet(&words, config.character_coverage, &required);
    // Characters of the special tokens are always in the alphabet so that literal `<s>`
    // in text can be spelled out instead of matching the control symbol.
    let forced: HashSet<char> = SPECIAL_TOKENS.iter().flat_map(|t| t.chars()).collect();
    let alphabet = kept.union(&forced).count();
    let needed = alphabet + SPECIAL_TOKENS.len();
    if needed > config.vocab_size as usize {
        return Err(TokenizerError::VocabTooSmall {
            vocab_size: config.vocab_size,
            alphabet,
            needed,
            coverage: config.character_coverage,
        });
    }
    let sentences = split_at_rare_chars(words, &kept);
    if sentences.is_empty() {
        return Err(TokenizerError::EmptyCorpus);
    }

    let trainer = UnigramTrainer::builder()
        .show_progress(false)
        .vocab_size(config.vocab_size)
        .n_sub_iterations(config.n_sub_iterations)
        .shrinking_factor(config.shrinking_factor)
        .max_piece_length(config.max_piece_length)
        .seed_size(config.seed_size)
        .special_tokens(SPECIAL_TOKENS.map(|t| AddedToken::from(t, true)).to_vec())
        .unk_token(Some(SPECIAL_TOKENS[UNK_ID as usize].to_owned()))
        .initial_alphabet(forced.into_iter().collect())
        .build()
        .map_err(|e| TokenizerError::Train {
            message: e.to_string(),
        })?;
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(config.threads)
        .build()
        .map_err(|e| TokenizerError::Train {
            message: format!("could not start {} training threads: {e}", config.threads),
        })?;
    let mut model = Unigram::default();
    pool.install(|| trainer.do_train(sentences, &mut model))
        .map_err(|e| TokenizerError::Train {
            message: e.to_string(),
        })?;
    // Hand back what a loader of the saved file gets: JSON stores scores as decimal text,
    // and without serde_json's `float_roundtrip` feature parsing may move the last bit.
    let trained = Tokenizer::from_pieces(canonical_pieces(&model))?;
    Tokenizer::from_json(trained.to_json()?)
}

/// Normalises and pre-tokenizes every line, counting words (`▁word` strings). Sorted by
/// word so the trainer sees a fixed order whatever the hash seeds are.
fn count_words<S: AsRef<str>>(
    lines: impl IntoIterator<Item = S>,
) -> Result<Vec<(String, u32)>, TokenizerError> {
    let normalizer = normalizer()?;
    let pre_tokenizer = pre_tokenizer();
    let mut counts: HashMap<String, u32> = HashMap::new();
    let lib_err = |e: tokenizers::Error| TokenizerError::Train {
        message: e.to_string(),
    };
    for line in lines {
        let mut normalized = tokenizers::NormalizedString::from(line.as_ref());
        normalizer.normalize(&mut normalized).map_err(lib_err)?;
        let mut pre = PreTokenizedString::from(normalized);
        pre_tokenizer.pre_tokenize(&mut pre).map_err(lib_err)?;
        for (word, _, _) in pre.get_splits(OffsetReferential::Normalized, OffsetType::Byte) {
            if !word.is_empty() {
                let count = counts.entry(word.to_owned()).or_insert(0);
                *count = count.saturating_add(1);
            }
        }
    }
    let mut words: Vec<(String, u32)> = counts.into_iter().collect();
    words.sort_unstable();
    Ok(words)
}

/// SentencePiece's character-coverage rule: the most frequent characters (ties by code
/// point) until they cover `coverage` of all character occurrences, plus the `required`
/// characters that occur at all.
fn covered_alphabet(
    words: &[(String, u32)],
    coverage: f64,
    required: &HashSet<char>,
) -> HashSet<char> {
    let mut counts: HashMap<char, u64> = HashMap::new();
    for (word, n) in words {
        for c in word.chars() {
            *counts.entry(c).or_insert(0) += u64::from(*n);
        }
    }
    let total: u64 = counts.values().sum();
    let mut by_freq: Vec<(char, u64)> = counts.into_iter().collect();
    by_freq.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let mut kept = HashSet::new();
    let mut covered = 0u64;
    for (c, n) in by_freq {
        if covered as f64 / total as f64 >= coverage && !required.contains(&c) {
            continue;
        }
        covered += n;
        kept.insert(c);
    }
    kept
}

/// Cuts words at characters outside the alphabet (SentencePiece replaces them with an
/// unknown marker no piece may contain; cutting has the same effect), drops over-long
/// words and merges the counts, sorted.
fn split_at_rare_chars(words: Vec<(String, u32)>, kept: &HashSet<char>) -> Vec<(String, u32)> {
    let mut counts: HashMap<String, u32> = HashMap::new();
    let mut add = |part: &str, n: u32| {
        if !part.is_empty() && part.len() <= MAX_WORD_BYTES {
            let count = counts.entry(part.to_owned()).or_insert(0);
            *count = count.saturating_add(n);
        }
    };
    for (word, n) in &words {
        let mut start = 0;
        for (i, c) in word.char_indices() {
            if !kept.contains(&c) {
                add(&word[start..i], *n);
                start = i + c.len_utf8();
            }
        }
        add(&word[start..], *n);
    }
    let mut out: Vec<(String, u32)> = counts.into_iter().collect();
    out.sort_unstable();
    out
}

/// The trained pieces (special tokens left out) in a canonical order: descending score,
/// ties by piece.
///
/// `UnigramTrainer::finalize` walks a hash set of required characters: characters EM
/// dropped get scores `min + k·δ` in that (random) order, and equal scores keep it. We
/// find that group (exact scores `min`, `min + δ`, … as the trainer computes them) and
/// hand its scores out again by piece, so the result no longer depends on hash seeds.
fn canonical_pieces(model: &Unigram) -> Vec<(String, f64)> {
    let mut pieces: Vec<(String, f64)> = model
        .iter()
        .filter(|(piece, _)| !SPECIAL_TOKENS.contains(&piece.as_str()))
        .cloned()
        .collect();
    let min = pieces.iter().map(|p| p.1).fold(f64::INFINITY, f64::min);
    let mut group: Vec<usize> = Vec::new();
    let mut penalty = 0.0;
    loop {
        let target = min + penalty;
        let before = group.len();
        group.extend(
            pieces
                .iter()
                .enumerate()
                .filter(|(_, p)| p.1 == target && p.0.chars().count() == 1)
                .map(|(i, _)| i),
        );
        if group.len() == before {
            break;
        }
        penalty += MISSING_CHAR_DELTA;
    }
    let mut scores: Vec<f64> = group.iter().map(|&i| pieces[i].1).collect();
    scores.sort_unstable_by(|a, b| b.total_cmp(a));
    group.sort_unstable_by(|&a, &b| pieces[a].0.cmp(&pieces[b].0));
    for (&i, score) in group.iter().zip(scores) {
        pieces[i].1 = score;
    }
    pieces.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    pieces
}
