//! Subword tokenizers: SentencePiece-style Unigram vocabularies stored as `tokenizer.json`.
//!
//! The reference system tokenizes with SentencePiece (Unigram, 16k pieces per language,
//! separate Korean and English vocabularies, character coverage 0.9995, `<pad> <unk> <s> </s>`).
//! We rebuild that pipeline with the pure-Rust `tokenizers` crate so that the native `train`
//! binary and the wasm page read the same `tokenizer.json` and produce the same ids:
//!
//! | stage          | what it does                                                              |
//! |----------------|---------------------------------------------------------------------------|
//! | normalizer     | `Sequence[Nmt, NFKC, Replace(/\s+/ → " "), Strip(both)]`: SentencePiece's `nmt_nfkc` plus its `remove_extra_whitespaces` (control characters dropped, every whitespace run becomes one space, no leading or trailing space) |
//! | pre-tokenizer  | `Metaspace('▁', prepend_scheme = always, split = true)`: a space becomes `▁` and starts a new word; a piece never crosses a word boundary |
//! | model          | `Unigram` with `<pad>`=0, `<unk>`=1, `<s>`=2, `</s>`=3, no byte fallback: characters outside the vocabulary become one `<unk>` per run |
//! | decoder        | `Metaspace`: `▁` becomes a space again, the leading one is dropped         |
//! | post-processor | none: [`Tokenizer::encode`] adds no BOS/EOS, the model adds them itself    |
//!
//! The four special tokens are *control symbols* as in SentencePiece: they are registered as
//! special added tokens (so any `tokenizers` user can skip them when decoding), but
//! [`Tokenizer`] encodes with `encode_special_tokens` on and their Unigram scores are far below
//! any real piece, so text that happens to contain `<s>` or `</s>` is tokenized as characters
//! and never smuggles a BOS/EOS into the model input.
//!
//! Training ([`train_unigram`], feature `train`) wraps the crate's `UnigramTrainer`, which
//! has no character-coverage option and is not deterministic by itself (hash-set order, thread
//! count). We therefore count words ourselves in a fixed order, apply SentencePiece's
//! character-coverage rule before training, run the EM steps on a thread pool of a fixed size
//! ([`TokenizerConfig::threads`]) and put the finished vocabulary in a canonical order. The
//! same corpus and configuration give byte-identical `tokenizer.json` files.

use std::fmt;
#[cfg(not(target_arch = "wasm32"))]
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use tokenizers::decoders::DecoderWrapper;
use tokenizers::models::unigram::Unigram;
use tokenizers::normalizers::replace::ReplacePattern;
use tokenizers::normalizers::{NFKC, Nmt, NormalizerWrapper, Replace, Sequence, Strip};
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::pre_tokenizers::metaspace::{Metaspace, PrependScheme};
use tokenizers::{AddedToken, ModelWrapper};

/// The special token ids, fixed for every tokenizer (defined with the model config).
pub use crate::config::{BOS_ID, EOS_ID, PAD_ID, UNK_ID};

/// The special tokens in id order: `SPECIAL_TOKENS[id]` is the token with that id.
pub const SPECIAL_TOKENS: [&str; 4] = ["<pad>", "<unk>", "<s>", "</s>"];

/// SentencePiece's word-boundary marker (U+2581), the first character of word-initial pieces.
pub const WORD_BOUNDARY: char = '\u{2581}';

/// Unigram score of the special tokens in trained vocabularies. Real pieces score around
/// −5…−25 (log probabilities), so the Viterbi search always prefers spelling `<s>` out of
/// the characters `<`, `s`, `>` (which training always puts in the vocabulary).
const SPECIAL_PIECE_SCORE: f64 = -1.0e6;

/// Everything that can go wrong loading, using or training a tokenizer.
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    /// The bytes are not a `tokenizer.json` the `tokenizers` crate understands.
    #[error(
        "the tokenizer JSON could not be parsed ({message}); pass a tokenizer.json written by \
         `train` or by the `tokenizers` library (format of tokenizers 0.23)"
    )]
    InvalidJson {
        /// The parser's message.
        message: String,
    },
    /// A special token is absent from the vocabulary.
    #[error(
        "the tokenizer has no {token} token (expected at id {expected}); webnmt vocabularies \
         start with <pad>=0 <unk>=1 <s>=2 </s>=3: retrain the tokenizer with `train`"
    )]
    MissingSpecialToken {
        /// The missing token, e.g. `</s>`.
        token: &'static str,
        /// The id it must have.
        expected: u32,
    },
    /// A special token exists but at another id than the engine expects.
    #[error(
        "the tokenizer has {token} at id {found}, but webnmt needs it at id {expected} \
         (<pad>=0 <unk>=1 <s>=2 </s>=3): retrain the tokenizer with `train`"
    )]
    WrongSpecialId {
        /// The misplaced token.
        token: &'static str,
        /// The id it must have.
        expected: u32,
        /// The id it has in the file.
        found: u32,
    },
    /// An id passed to [`Tokenizer::decode`] is not in the vocabulary.
    #[error(
        "token id {id} at position {position} is outside the vocabulary of {vocab_size} tokens; \
         the model and this tokenizer.json do not belong to the same bundle"
    )]
    IdOutOfRange {
        /// The offending id.
        id: u32,
        /// Its index in the input slice.
        position: usize,
        /// The vocabulary size.
        vocab_size: usize,
    },
    /// The `tokenizers` crate failed while encoding.
    #[error("could not encode the text: {message}")]
    Encode {
        /// The library's message.
        message: String,
    },
    /// The `tokenizers` crate failed while decoding.
    #[error("could not decode the token ids: {message}")]
    Decode {
        /// The library's message.
        message: String,
    },
    /// The tokenizer could not be turned into JSON.
    #[error("could not serialise the tokenizer to JSON: {message}")]
    Serialize {
        /// The library's message.
        message: String,
    },
    /// Reading or writing a tokenizer file failed.
    #[cfg(not(target_arch = "wasm32"))]
    #[error("{action} tokenizer file {path}: {source}")]
    Io {
        /// `could not read` or `could not write`.
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// A tokenizer file was read but its content is unusable.
    #[cfg(not(target_arch = "wasm32"))]
    #[error("tokenizer file {path}: {source}")]
    InFile {
        /// The file.
        path: PathBuf,
        /// What is wrong with its content.
        source: Box<TokenizerError>,
    },
    /// No training line has any text after normalisation.
    #[error(
        "the tokenizer training corpus is empty (no line has text after normalisation); \
         check the corpus paths and that the files are not blank"
    )]
    EmptyCorpus,
    /// The vocabulary cannot even hold the alphabet.
    #[error(
        "vocab_size {vocab_size} is too small for this corpus: its alphabet needs {needed} \
         entries ({alphabet} characters kept at character_coverage {coverage} plus 4 special \
         tokens); set vocab_size to at least {needed} or lower character_coverage"
    )]
    VocabTooSmall {
        /// The requested vocabulary size.
        vocab_size: u32,
        /// Characters that must be in the vocabulary.
        alphabet: usize,
        /// The smallest vocabulary size that can work.
        needed: usize,
        /// The configured character coverage.
        coverage: f64,
    },
    /// A piece given to [`Tokenizer::from_pieces`] cannot be used.
    #[error("vocabulary piece {piece:?} is invalid: {reason}")]
    InvalidPiece {
        /// The piece.
        piece: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The `tokenizers` crate refused the assembled pipeline (a bug in this module).
    #[error("could not assemble the tokenizer: {message}; please report this")]
    Build {
        /// The library's message.
        message: String,
    },
    /// A [`TokenizerConfig`] field is out of range.
    #[error("tokenizer setting {field} = {value} is invalid: {hint}")]
    InvalidConfig {
        /// The field name as written in the config file.
        field: &'static str,
        /// The rejected value.
        value: String,
        /// The accepted range.
        hint: &'static str,
    },
    /// The Unigram trainer failed.
    #[error("tokenizer training failed: {message}")]
    Train {
        /// The trainer's message.
        message: String,
    },
}

/// A loaded subword vocabulary: text ↔ token ids, identical on native and wasm.
#[derive(Clone)]
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    vocab_size: usize,
}

impl fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The derived form would print all 16k pieces.
        f.debug_struct("Tokenizer")
            .field("vocab_size", &self.vocab_size)
            .finish_non_exhaustive()
    }
}

impl Tokenizer {
    /// Loads a `tokenizer.json` from its bytes (a `&str` works too) and checks that the four
    /// special tokens sit at ids 0–3.
    pub fn from_json(json: impl AsRef<[u8]>) -> Result<Self, TokenizerError> {
        check_pipeline(json.as_ref())?;
        let inner = tokenizers::Tokenizer::from_bytes(json.as_ref()).map_err(|e| {
            TokenizerError::InvalidJson {
                message: e.to_string(),
            }
        })?;
        Self::from_inner(inner)
    }

    /// Reads and loads a `tokenizer.json` file (native only; the page fetches the bytes and
    /// calls [`Tokenizer::from_json`]).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, TokenizerError> {
        let path = path.as_ref();
        let bytes = std::fs::read(path).map_err(|source| TokenizerError::Io {
            action: "could not read",
            path: path.to_path_buf(),
            source,
        })?;
        Self::from_json(bytes).map_err(|source| TokenizerError::InFile {
            path: path.to_path_buf(),
            source: Box::new(source),
        })
    }

    /// A tokenizer with this module's pipeline around hand-written Unigram pieces
    /// (`(piece, log-probability)`, word-initial pieces start with `▁`); the special tokens
    /// are put in front at ids 0–3. For small test vocabularies: real ones come from
    /// `train_unigram`. Characters without a single-character piece encode as `<unk>`;
    /// include `<`, `>`, `/` and the letters of the special tokens, or text containing a
    /// literal `<s>` encodes it as the control symbol.
    pub fn from_pieces(
        pieces: impl IntoIterator<Item = (String, f64)>,
    ) -> Result<Self, TokenizerError> {
        let mut vocab: Vec<(String, f64)> = SPECIAL_TOKENS
            .iter()
            .map(|t| ((*t).to_owned(), SPECIAL_PIECE_SCORE))
            .collect();
        let mut seen: std::collections::HashSet<String> =
            SPECIAL_TOKENS.iter().map(|t| (*t).to_owned()).collect();
        for (piece, score) in pieces {
            let reason = if piece.is_empty() {
                Some("pieces must not be empty")
            } else if SPECIAL_TOKENS.contains(&piece.as_str()) {
                Some("special tokens are added at ids 0-3 by themselves")
            } else if !score.is_finite() || score > 0.0 {
                Some("scores are log-probabilities: finite and at most 0")
            } else if seen.contains(&piece) {
                Some("each piece may appear once")
            } else {
                None
            };
            if let Some(reason) = reason {
                return Err(TokenizerError::InvalidPiece { piece, reason });
            }
            seen.insert(piece.clone());
            vocab.push((piece, score));
        }
        build(vocab)
    }

    /// Wraps a `tokenizers` tokenizer after checking the special ids.
    fn from_inner(mut inner: tokenizers::Tokenizer) -> Result<Self, TokenizerError> {
        for (expected, token) in (0u32..).zip(SPECIAL_TOKENS) {
            match inner.token_to_id(token) {
                None => return Err(TokenizerError::MissingSpecialToken { token, expected }),
                Some(found) if found != expected => {
                    return Err(TokenizerError::WrongSpecialId {
                        token,
                        expected,
                        found,
                    });
                }
                Some(_) => {}
            }
            // token_to_id may come from the added vocabulary; the model must agree.
            if inner.id_to_token(expected).as_deref() != Some(token) {
                return Err(TokenizerError::MissingSpecialToken { token, expected });
            }
        }
        // Control symbols are never matched in user text (SentencePiece semantics).
        inner.set_encode_special_tokens(true);
        let vocab_size = inner.get_vocab_size(true);
        Ok(Self { inner, vocab_size })
    }

    /// The tokenizer as compact `tokenizer.json` text, loadable by [`Tokenizer::from_json`]
    /// and by any `tokenizers` 0.23 build (Rust, wasm or Python).
    pub fn to_json(&self) -> Result<String, TokenizerError> {
        self.inner
            .to_string(false)
            .map_err(|e| TokenizerError::Serialize {
                message: e.to_string(),
            })
    }

    /// Writes [`Tokenizer::to_json`] to `path` atomically (a temporary file, then a rename).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn save(&self, path: impl AsRef<Path>) -> Result<(), TokenizerError> {
        let path = path.as_ref();
        let json = self.to_json()?;
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(".tmp");
        let tmp = PathBuf::from(tmp);
        let io_err = |source| TokenizerError::Io {
            action: "could not write",
            path: path.to_path_buf(),
            source,
        };
        std::fs::write(&tmp, json).map_err(io_err)?;
        std::fs::rename(&tmp, path).map_err(io_err)
    }

    /// Number of ids, special tokens included; every id is below this.
    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    /// Token ids of `text`, without BOS/EOS. Empty or whitespace-only text gives no ids.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, TokenizerError> {
        let encoding = self
            .inner
            .encode_fast(text, false)
            .map_err(|e| TokenizerError::Encode {
                message: e.to_string(),
            })?;
        Ok(encoding.get_ids().to_vec())
    }

    /// Text of `ids`: special tokens (`<pad>`, `<unk>`, `<s>`, `</s>`) are skipped, `▁`
    /// becomes a space and the leading space is dropped, as SentencePiece does.
    pub fn decode(&self, ids: &[u32]) -> Result<String, TokenizerError> {
        if let Some((position, &id)) = ids
            .iter()
            .enumerate()
            .find(|&(_, &id)| id as usize >= self.vocab_size)
        {
            return Err(TokenizerError::IdOutOfRange {
                id,
                position,
                vocab_size: self.vocab_size,
            });
        }
        // Filter by id rather than trusting the file's `special` flags.
        let kept: Vec<u32> = ids.iter().copied().filter(|&id| id > EOS_ID).collect();
        self.inner
            .decode(&kept, true)
            .map_err(|e| TokenizerError::Decode {
                message: e.to_string(),
            })
    }

    /// Id of a vocabulary piece (`"▁the"`, `"<s>"`), if it exists.
    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    /// The piece with this id, `▁` included (for display), or `None` outside the vocabulary.
    pub fn id_to_token(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }
}

/// The normalizer shared by training and encoding (see the module table).
/// Refuses a `tokenizer.json` whose pipeline around the vocabulary (normalizer, pre-tokenizer,
/// post-processor, decoder) is not the one this module writes, before the `tokenizers` crate
/// parses it: some of its deserializers panic on malformed parts (found by `fuzz/bundle`), and a
/// panic would kill the page's worker. Also refuses text that is not JSON.
fn check_pipeline(json: &[u8]) -> Result<(), TokenizerError> {
    static CANONICAL: std::sync::OnceLock<Option<serde_json::Value>> = std::sync::OnceLock::new();
    let invalid = |message: String| TokenizerError::InvalidJson { message };
    let value: serde_json::Value =
        serde_json::from_slice(json).map_err(|e| invalid(e.to_string()))?;
    let canonical = CANONICAL.get_or_init(|| {
        let tokenizer = Tokenizer::from_pieces([("▁a".to_string(), -1.0)]).ok()?;
        serde_json::from_str(&tokenizer.to_json().ok()?).ok()
    });
    let Some(canonical) = canonical else {
        return Err(invalid("cannot build the reference pipeline".into()));
    };
    for part in ["normalizer", "pre_tokenizer", "post_processor", "decoder"] {
        if value.get(part) != canonical.get(part) {
            return Err(invalid(format!(
                "its {part} is not webnmt's (NFKC, Metaspace ▁, no post-processor)"
            )));
        }
    }
    Ok(())
}

fn normalizer() -> Result<NormalizerWrapper, TokenizerError> {
    let collapse = Replace::new(ReplacePattern::Regex(r"\s+".to_owned()), " ").map_err(|e| {
        TokenizerError::Build {
            message: format!("whitespace pattern: {e}"),
        }
    })?;
    Ok(Sequence::new(vec![
        Nmt.into(),
        NFKC.into(),
        collapse.into(),
        Strip::new(true, true).into(),
    ])
    .into())
}

/// The pre-tokenizer: spaces become `▁`, each word starts with one.
fn pre_tokenizer() -> PreTokenizerWrapper {
    Metaspace::new(WORD_BOUNDARY, PrependScheme::Always, true).into()
}

/// The decoder matching [`pre_tokenizer`].
fn decoder() -> DecoderWrapper {
    Metaspace::new(WORD_BOUNDARY, PrependScheme::Always, true).into()
}

/// Assembles the full pipeline around a Unigram vocabulary whose first four entries are
/// [`SPECIAL_TOKENS`].
fn build(vocab: Vec<(String, f64)>) -> Result<Tokenizer, TokenizerError> {
    let lib_err = |e: tokenizers::Error| TokenizerError::Build {
        message: e.to_string(),
    };
    let model = Unigram::from(vocab, Some(UNK_ID as usize), false).map_err(lib_err)?;
    let mut inner = tokenizers::Tokenizer::new(ModelWrapper::from(model));
    inner
        .with_normalizer(Some(normalizer()?))
        .map_err(lib_err)?;
    inner.with_pre_tokenizer(Some(pre_tokenizer()));
    inner.with_decoder(Some(decoder()));
    inner
        .add_special_tokens(SPECIAL_TOKENS.map(|t| AddedToken::from(t, true)))
        .map_err(lib_err)?;
    Tokenizer::from_inner(inner)
}

/// Settings for [`train_unigram`]; a `[tokenizer]` table in the training config.
///
/// Defaults follow the reference (SentencePiece Unigram, 16k, coverage 0.9995) and
/// SentencePiece's own defaults for the rest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TokenizerConfig {
    /// Vocabulary size, special tokens included. Default 16000 (the reference). Small
    /// corpora cannot fill a large vocabulary: the result may have fewer pieces, see
    /// [`preset_vocab_size`].
    pub vocab_size: u32,
    /// Share of the corpus's character occurrences the alphabet must cover; rarer
    /// characters are left out and encode as `<unk>`. Default 0.9995 (the reference);
    /// 1.0 keeps every character. (`tokenizers` has no such option; we apply SentencePiece's
    /// rule before training.)
    pub character_coverage: f64,
    /// Characters kept whenever they occur in the corpus, whatever `character_coverage`
    /// says (SentencePiece's `required_chars`). Default: printable ASCII (`!`…`~`). The
    /// reference set none; on small corpora coverage 0.9995 alone turns every digit and the
    /// rarer capitals (`J K Q V X Z`) into `<unk>` (measured on Multi30k). `""` gives
    /// SentencePiece's exact behaviour.
    pub required_chars: String,
    /// Longest piece, in characters. Default 16 (SentencePiece `max_sentencepiece_length`).
    pub max_piece_length: usize,
    /// Share of pieces kept at each pruning round. Default 0.75 (SentencePiece
    /// `shrinking_factor`).
    pub shrinking_factor: f64,
    /// EM iterations between pruning rounds. Default 2 (SentencePiece
    /// `num_sub_iterations`).
    pub n_sub_iterations: u32,
    /// Number of seed pieces taken from the suffix array. Default 1 000 000 (SentencePiece
    /// `seed_sentencepiece_size`).
    pub seed_size: usize,
    /// Threads for the EM steps. The result depends on this number (floating-point sums are
    /// split per thread; measured: same pieces, scores differ by < 1e-10, a few near-ties
    /// swap ids) but on nothing else. Default 1: identical output on every machine, and on
    /// 2 cores only ~10% slower than 2 threads. 0 means one per core.
    pub threads: usize,
}

impl Default for TokenizerConfig {
    fn default() -> Self {
        Self {
            vocab_size: 16_000,
            character_coverage: 0.9995,
            required_chars: ('!'..='~').collect(),
            max_piece_length: 16,
            shrinking_factor: 0.75,
            n_sub_iterations: 2,
            seed_size: 1_000_000,
            threads: 1,
        }
    }
}

impl TokenizerConfig {
    /// The default configuration with [`preset_vocab_size`] for a corpus of `pairs`
    /// sentence pairs.
    pub fn for_corpus(pairs: usize) -> Self {
        Self {
            vocab_size: preset_vocab_size(pairs),
            ..Self::default()
        }
    }

    /// Checks every field's range.
    pub fn validate(&self) -> Result<(), TokenizerError> {
        let bad =
            |field, value: String, hint| Err(TokenizerError::InvalidConfig { field, value, hint });
        if self.vocab_size <= SPECIAL_TOKENS.len() as u32 {
            return bad(
                "vocab_size",
                self.vocab_size.to_string(),
                "must exceed the 4 special tokens; 16000 is the reference size",
            );
        }
        if !(self.character_coverage > 0.0 && self.character_coverage <= 1.0) {
            return bad(
                "character_coverage",
                self.character_coverage.to_string(),
                "must be in (0, 1]; 0.9995 is the reference value",
            );
        }
        if self.max_piece_length == 0 {
            return bad(
                "max_piece_length",
                "0".into(),
                "must be at least 1; default 16",
            );
        }
        if !(self.shrinking_factor > 0.0 && self.shrinking_factor < 1.0) {
            return bad(
                "shrinking_factor",
                self.shrinking_factor.to_string(),
                "must be in (0, 1); default 0.75",
            );
        }
        if self.n_sub_iterations == 0 {
            return bad(
                "n_sub_iterations",
                "0".into(),
                "must be at least 1; default 2",
            );
        }
        if self.seed_size < self.vocab_size as usize {
            return bad(
                "seed_size",
                self.seed_size.to_string(),
                "must be at least vocab_size; default 1000000",
            );
        }
        Ok(())
    }
}

/// Vocabulary size (per language) for a corpus of `pairs` sentence pairs.
///
/// | pairs          | size   | why (measured on `shared/data`, tokens per training sentence)      |
/// |----------------|--------|---------------------------------------------------------------------|
/// | < 5 000        | 1 000  | test fixtures; the trainer may return fewer pieces                   |
/// | 5 000–50 000   | 4 000  | de-en (29k): 8k leaves 64–70% of pieces seen < 10 times (4k: 27–37%) for only 3–7% shorter sequences; en cannot even fill 8k (7 831) |
/// | 50 000–300 000 | 8 000  | ko-en (104k): 16k saves 11% tokens (ko 28.2 → 25.2, en 29.9 → 27.2) but doubles embeddings and softmax |
/// | ≥ 300 000      | 16 000 | the reference (897k pairs)                                           |
pub fn preset_vocab_size(pairs: usize) -> u32 {
    match pairs {
        0..5_000 => 1_000,
        5_000..50_000 => 4_000,
        50_000..300_000 => 8_000,
        _ => 16_000,
    }
}

#[cfg(feature = "train")]
mod sample;
#[cfg(feature = "train")]
pub use sample::SubwordSampler;
#[cfg(feature = "train")]
pub use training::train_unigram;

#[cfg(feature = "train")]
mod training {
    //! Unigram training on top of `tokenizers`' `UnigramTrainer`, made deterministic.

    use std::collections::{HashMap, HashSet};

    use tokenizers::models::unigram::{Unigram, UnigramTrainer};
    use tokenizers::{
        AddedToken, Normalizer, OffsetReferential, OffsetType, PreTokenizedString, PreTokenizer,
    };

    use super::{
        SPECIAL_TOKENS, Tokenizer, TokenizerConfig, TokenizerError, UNK_ID, normalizer,
        pre_tokenizer,
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
}

#[cfg(test)]
mod tests {
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
        // Decoding skips <unk> like the other special tokens.
        assert_eq!(t.decode(&[4, UNK_ID, 6]).ok().as_deref(), Some(" cat"));
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

    #[test]
    fn presets_grow_with_the_corpus() {
        let sizes: Vec<u32> = [300, 29_000, 104_000, 897_566]
            .iter()
            .map(|&n| preset_vocab_size(n))
            .collect();
        assert_eq!(sizes, [1_000, 4_000, 8_000, 16_000]);
        assert_eq!(
            TokenizerConfig::for_corpus(897_566),
            TokenizerConfig::default()
        );
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
            let plain = tokenizers::Tokenizer::from_bytes(json.as_bytes())
                .unwrap_or_else(|e| panic!("{e}"));
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
            assert_eq!(t.decode(&got).ok().as_deref(), Some("the  cat"));
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
}

#[cfg(test)]
mod hostile_json {
    use super::Tokenizer;

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
