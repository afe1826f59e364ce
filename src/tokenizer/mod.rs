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
use std::sync::Arc;

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
    /// [`Tokenizer::repeatable`], worked out once.
    repeatable: Arc<[bool]>,
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
        let repeatable = (0..vocab_size as u32)
            .map(|id| inner.id_to_token(id).is_some_and(|p| is_repeatable(&p)))
            .collect();
        Ok(Self {
            inner,
            vocab_size,
            repeatable,
        })
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

    /// By id, the pieces the search's repeat block never bans
    /// ([`crate::search::repeat_bans`]): those that continue a word (no leading `▁`) and hold
    /// no letter, such as `000` and `,` of `▁1 , 000 , 000` or each `.` of `. . .`, which repeat
    /// in well-formed text. Word pieces, however short, and letters in any script stay banned.
    pub fn repeatable(&self) -> Arc<[bool]> {
        Arc::clone(&self.repeatable)
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
        // Filter by id rather than trusting the file's `special` flags. An unknown word (a
        // bare `▁`, then `<unk>`, then the next word or the end: "like 😀 pizza") leaves its
        // `▁` out too, or the text would keep a doubled or leading space; an unknown start of a
        // word ("😀s") keeps it.
        let boundary = |id: u32| {
            let piece = self.inner.id_to_token(id);
            piece.is_some_and(|p| p.starts_with(WORD_BOUNDARY))
        };
        let mut kept: Vec<u32> = Vec::with_capacity(ids.len());
        for (i, &id) in ids.iter().enumerate() {
            if id == UNK_ID {
                let word_ends = match ids.get(i + 1) {
                    None => true,
                    Some(&UNK_ID) => false, // decided at the last <unk> of the run
                    Some(&next) => next <= EOS_ID || boundary(next),
                };
                let bare = |k: &u32| {
                    let piece = self.inner.id_to_token(*k);
                    piece.is_some_and(|p| p.chars().eq([WORD_BOUNDARY]))
                };
                if word_ends && kept.last().is_some_and(bare) {
                    kept.pop();
                }
            } else if id > EOS_ID {
                kept.push(id);
            }
        }
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

/// Whether the repeat block leaves this piece alone ([`Tokenizer::repeatable`]).
fn is_repeatable(piece: &str) -> bool {
    !piece.starts_with('▁') && !piece.chars().any(char::is_alphabetic)
}

/// Refuses a `tokenizer.json` whose pipeline around the vocabulary (normalizer, pre-tokenizer,
/// post-processor, decoder, no truncation or padding, the four special tokens as the only added
/// tokens, a Unigram model with `<unk>` at 1 and no byte fallback) is not the one this module
/// writes, before the `tokenizers` crate parses it: some of its deserializers panic on malformed
/// parts (found by `fuzz/bundle`), its truncation panics on a stride not below the length, and a
/// panic would kill the page's worker; other settings would encode differently from training.
/// Also refuses text that is not JSON.
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
    for part in ["truncation", "padding"] {
        if value.get(part) != canonical.get(part) {
            return Err(invalid(format!("its {part} is not webnmt's (none)")));
        }
    }
    // Only the special tokens, as webnmt writes them (one missing or misplaced is reported
    // by name when the vocabulary is checked).
    let written = canonical["added_tokens"].as_array();
    let added = value.get("added_tokens").and_then(|a| a.as_array());
    if !added.is_some_and(|added| {
        added
            .iter()
            .all(|token| written.is_some_and(|w| w.contains(token)))
    }) {
        return Err(invalid(format!(
            "its added_tokens is not webnmt's (only {SPECIAL_TOKENS:?}, as special tokens 0-3)"
        )));
    }
    for key in ["type", "unk_id", "byte_fallback"] {
        if value["model"].get(key) != canonical["model"].get(key) {
            return Err(invalid(format!(
                "its model's {key} is not webnmt's (a Unigram model, <unk> at id {UNK_ID}, \
                 no byte fallback)"
            )));
        }
    }
    Ok(())
}

/// The normalizer shared by training and encoding (see the module table).
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

/// Settings for [`train_unigram`]; the `[source_tokenizer]` and `[target_tokenizer]` tables of
/// the training config.
///
/// Defaults follow the reference (SentencePiece Unigram, 16k, coverage 0.9995) and
/// SentencePiece's own defaults for the rest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TokenizerConfig {
    /// Vocabulary size, special tokens included. Default 16000 (the reference). Small
    /// corpora cannot fill a large vocabulary: the result may have fewer pieces
    /// (`configs/de-en.toml` asks for 8000).
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

#[cfg(feature = "train")]
mod sample;
#[cfg(feature = "train")]
mod training;
#[cfg(feature = "train")]
pub use sample::SubwordSampler;
#[cfg(feature = "train")]
pub use training::train_unigram;

#[cfg(test)]
mod tests;
