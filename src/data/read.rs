//! Reading parallel text: two line-aligned files (plus an optional tag file), or one TSV file.
//!
//! Line handling, the same for every file: a UTF-8 byte-order mark at the start is skipped;
//! lines end with `\n` and a `\r` before it is dropped; a final line without a newline counts,
//! a final newline does not start another line. Text is otherwise kept as it is (cleaning trims
//! it). Blank lines are real lines: in aligned files they become pairs with an empty side, which
//! [`super::clean`] then removes as too short.
//!
//! Whole files are read into memory: the corpora this crate targets are tens of megabytes.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::error::DataError;

/// One sentence pair.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pair {
    /// Source-language segment.
    pub source: String,
    /// Target-language segment.
    pub target: String,
    /// The pair's tag (its domain or source corpus, e.g. `bible-krv1961-web`) when the corpus
    /// has a tag file or a TSV tag column; `None` otherwise.
    pub tag: Option<String>,
    /// 1-based line in the file(s) it was read from; 0 for pairs built in memory.
    pub line: usize,
}

impl Pair {
    /// A pair built in memory (no tag, line 0).
    pub fn new(source: impl Into<String>, target: impl Into<String>) -> Self {
        Self {
            source: source.into(),
            target: target.into(),
            tag: None,
            line: 0,
        }
    }
}

/// A list of pairs and the name of where they came from (used in error messages).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Corpus {
    /// Where the pairs came from: `train.ko + train.en` or `train.tsv`, possibly with a suffix
    /// such as ` (dev split)`.
    pub name: String,
    /// The pairs, in file order unless a step says otherwise.
    pub pairs: Vec<Pair>,
}

impl Corpus {
    /// A corpus named `name` holding `pairs`.
    pub fn new(name: impl Into<String>, pairs: Vec<Pair>) -> Self {
        Self {
            name: name.into(),
            pairs,
        }
    }

    /// Number of pairs.
    pub fn len(&self) -> usize {
        self.pairs.len()
    }

    /// Whether there are no pairs.
    pub fn is_empty(&self) -> bool {
        self.pairs.is_empty()
    }

    /// How many pairs carry each tag (untagged pairs are not counted), sorted by tag.
    pub fn tag_counts(&self) -> BTreeMap<String, usize> {
        let mut counts = BTreeMap::new();
        for tag in self.pairs.iter().filter_map(|p| p.tag.as_ref()) {
            *counts.entry(tag.clone()).or_insert(0) += 1;
        }
        counts
    }
}

/// Which files hold a corpus, as written in a config file: either `source` + `target` (+
/// optional `tags`), or `tsv`. Relative paths are used as given; resolving them against the
/// config file's directory is the caller's job.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CorpusFiles {
    /// Source-language file, one segment per line.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<PathBuf>,
    /// Target-language file, line-aligned with `source`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<PathBuf>,
    /// Optional tag file, one tag per line, line-aligned with `source`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tags: Option<PathBuf>,
    /// A TSV file instead of `source`/`target`: `source<TAB>target[<TAB>tag]` per line.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tsv: Option<PathBuf>,
}

impl CorpusFiles {
    /// Two aligned files.
    pub fn aligned(source: impl Into<PathBuf>, target: impl Into<PathBuf>) -> Self {
        Self {
            source: Some(source.into()),
            target: Some(target.into()),
            ..Self::default()
        }
    }

    /// One TSV file.
    pub fn tsv(path: impl Into<PathBuf>) -> Self {
        Self {
            tsv: Some(path.into()),
            ..Self::default()
        }
    }

    /// The same files with a tag file added.
    pub fn with_tags(mut self, tags: impl Into<PathBuf>) -> Self {
        self.tags = Some(tags.into());
        self
    }

    /// Reads the corpus with [`read_aligned`] or [`read_tsv`], after checking that the
    /// combination of files makes sense.
    pub fn read(&self) -> Result<Corpus, DataError> {
        let problem = |p: &str| DataError::CorpusFiles {
            problem: p.to_string(),
        };
        match (&self.source, &self.target, &self.tsv) {
            (Some(source), Some(target), None) => {
                read_aligned(source, target, self.tags.as_deref())
            }
            (None, None, Some(tsv)) if self.tags.is_none() => read_tsv(tsv),
            (None, None, Some(_)) => Err(problem(
                "`tags` was given with `tsv`; a TSV file carries its tags in a third column",
            )),
            (_, _, Some(_)) => Err(problem("both `tsv` and `source`/`target` were given")),
            (Some(_), None, None) => Err(problem("`source` was given without `target`")),
            (None, Some(_), None) => Err(problem("`target` was given without `source`")),
            (None, None, None) => Err(problem("no file was given")),
        }
    }
}

/// Reads two line-aligned files (line *i* of `target` translates line *i* of `source`) and,
/// if given, a tag file with one tag per line (surrounding whitespace trimmed, must not be
/// blank).
///
/// # Errors
/// [`DataError::Open`] for a file that cannot be read, [`DataError::InvalidUtf8`] with the line,
/// [`DataError::LineCountMismatch`] with both counts and both paths,
/// [`DataError::EmptyTag`], and [`DataError::EmptyCorpus`] when the files have no lines.
pub fn read_aligned(
    source: &Path,
    target: &Path,
    tags: Option<&Path>,
) -> Result<Corpus, DataError> {
    let name = format!("{} + {}", source.display(), target.display());
    let src = read_lines(source)?;
    let tgt = read_lines(target)?;
    check_count(source, src.len(), target, tgt.len())?;
    let tags = match tags {
        Some(path) => {
            let lines = read_lines(path)?;
            check_count(source, src.len(), path, lines.len())?;
            let mut tags = Vec::with_capacity(lines.len());
            for (i, line) in lines.into_iter().enumerate() {
                tags.push(Some(tag_of(&line, path, i + 1)?));
            }
            tags
        }
        None => vec![None; src.len()],
    };
    if src.is_empty() {
        return Err(DataError::EmptyCorpus { corpus: name });
    }
    let pairs = src
        .into_iter()
        .zip(tgt)
        .zip(tags)
        .enumerate()
        .map(|(i, ((source, target), tag))| Pair {
            source,
            target,
            tag,
            line: i + 1,
        })
        .collect();
    Ok(Corpus::new(name, pairs))
}

/// Reads a TSV corpus: `source<TAB>target` per line, or `source<TAB>target<TAB>tag`.
///
/// Columns: the first line with text decides whether there is a tag column (2 or 3 columns);
/// every other line must match it ([`DataError::TsvColumnCount`]); 4 or more columns are an
/// error ([`DataError::TsvTooManyColumns`]) rather than silently dropped text, since a fourth
/// column usually means a tab inside a segment. A blank (or whitespace-only) line becomes a pair
/// with two empty sides and no tag, which cleaning removes; a line with text but no tab is
/// [`DataError::TsvNoTab`]. Tags are trimmed and must not be blank.
///
/// # Errors
/// As listed above, plus [`DataError::Open`], [`DataError::InvalidUtf8`] and
/// [`DataError::EmptyCorpus`].
pub fn read_tsv(path: &Path) -> Result<Corpus, DataError> {
    let name = path.display().to_string();
    let lines = read_lines(path)?;
    if lines.is_empty() {
        return Err(DataError::EmptyCorpus { corpus: name });
    }
    // (line number, column count) of the first line with text.
    let mut shape: Option<(usize, usize)> = None;
    let mut pairs = Vec::with_capacity(lines.len());
    for (i, line) in lines.into_iter().enumerate() {
        let line_no = i + 1;
        // Tabs are whitespace too: "\t" or " \t " is a blank line, not two or three columns.
        if line.trim().is_empty() {
            pairs.push(Pair {
                source: String::new(),
                target: String::new(),
                tag: None,
                line: line_no,
            });
            continue;
        }
        let cols: Vec<&str> = line.split('\t').collect();
        match cols.len() {
            1 => {
                return Err(DataError::TsvNoTab {
                    path: path.to_path_buf(),
                    line: line_no,
                });
            }
            2 | 3 => {}
            n => {
                return Err(DataError::TsvTooManyColumns {
                    path: path.to_path_buf(),
                    line: line_no,
                    columns: n,
                });
            }
        }
        let (first_line, expected) = *shape.get_or_insert((line_no, cols.len()));
        if cols.len() != expected {
            return Err(DataError::TsvColumnCount {
                path: path.to_path_buf(),
                line: line_no,
                columns: cols.len(),
                first_line,
                expected,
            });
        }
        let tag = match cols.get(2) {
            Some(t) => Some(tag_of(t, path, line_no)?),
            None => None,
        };
        pairs.push(Pair {
            source: cols[0].to_string(),
            target: cols[1].to_string(),
            tag,
            line: line_no,
        });
    }
    Ok(Corpus::new(name, pairs))
}

/// A trimmed, non-blank tag.
fn tag_of(text: &str, path: &Path, line: usize) -> Result<String, DataError> {
    let tag = text.trim();
    if tag.is_empty() {
        return Err(DataError::EmptyTag {
            path: path.to_path_buf(),
            line,
        });
    }
    Ok(tag.to_string())
}

fn check_count(
    first: &Path,
    first_lines: usize,
    second: &Path,
    second_lines: usize,
) -> Result<(), DataError> {
    if first_lines == second_lines {
        return Ok(());
    }
    Err(DataError::LineCountMismatch {
        first: first.to_path_buf(),
        first_lines,
        second: second.to_path_buf(),
        second_lines,
    })
}

/// The lines of a UTF-8 text file, as described in the module documentation.
pub(crate) fn read_lines(path: &Path) -> Result<Vec<String>, DataError> {
    let bytes = fs::read(path).map_err(|cause| DataError::Open {
        path: path.to_path_buf(),
        cause,
    })?;
    let body = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(&bytes);
    if body.is_empty() {
        return Ok(Vec::new());
    }
    let body = body.strip_suffix(b"\n").unwrap_or(body);
    let mut lines = Vec::new();
    for (i, raw) in body.split(|&b| b == b'\n').enumerate() {
        let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
        match std::str::from_utf8(raw) {
            Ok(text) => lines.push(text.to_string()),
            Err(e) => {
                return Err(DataError::InvalidUtf8 {
                    path: path.to_path_buf(),
                    line: i + 1,
                    column: e.valid_up_to() + 1,
                });
            }
        }
    }
    Ok(lines)
}
