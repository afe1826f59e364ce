//! Crash-safe checkpoint directories.
//!
//! A checkpoint is written into `step-NNNNNNNN.partial/`, every file is synced, and only then is
//! the directory renamed to `step-NNNNNNNN/` (a rename is atomic) and the parent synced. So a
//! process killed at any moment leaves either a complete checkpoint or a `.partial` directory
//! that is ignored and removed on the next start (a step saved again replaces its old directory
//! the same way: moved aside to a `.partial` name first). After each save only the newest `keep`
//! complete checkpoints remain, so the disk holds at most `keep + 1` (the one being written).

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

const PARTIAL: &str = ".partial";

/// The checkpoints of one training run.
pub struct Checkpoints {
    dir: PathBuf,
    keep: usize,
}

impl Checkpoints {
    /// The checkpoints in `dir`, to read (export, checks) while a training run may be writing
    /// there: nothing is created or removed.
    pub fn read(dir: &Path) -> Self {
        Self {
            dir: dir.to_path_buf(),
            keep: usize::MAX,
        }
    }

    /// Opens (and creates) `dir` for the one training run writing there, removing half-written
    /// checkpoints left by a killed process (only that run may: another process's `.partial`
    /// is a checkpoint being written).
    pub fn open(dir: &Path, keep: usize) -> io::Result<Self> {
        fs::create_dir_all(dir)?;
        for entry in fs::read_dir(dir)? {
            let path = entry?.path();
            if path.is_dir() && path.to_string_lossy().ends_with(PARTIAL) {
                fs::remove_dir_all(&path)?;
            }
        }
        Ok(Self {
            dir: dir.to_path_buf(),
            keep: keep.max(1),
        })
    }

    /// Complete checkpoints, oldest first, as `(step, directory)`.
    pub fn list(&self) -> io::Result<Vec<(usize, PathBuf)>> {
        let mut found = Vec::new();
        for entry in fs::read_dir(&self.dir)? {
            let path = entry?.path();
            let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
                continue;
            };
            if let Some(step) = name.strip_prefix("step-").and_then(|s| s.parse().ok())
                && path.is_dir()
            {
                found.push((step, path));
            }
        }
        found.sort();
        Ok(found)
    }

    /// The newest complete checkpoint.
    pub fn latest(&self) -> io::Result<Option<(usize, PathBuf)>> {
        Ok(self.list()?.pop())
    }

    /// Writes a checkpoint for `step`: `write` fills the given (empty) directory; then the
    /// checkpoint is made durable, published atomically, and old ones are pruned.
    pub fn save<E: From<io::Error>>(
        &self,
        step: usize,
        write: impl FnOnce(&Path) -> Result<(), E>,
    ) -> Result<PathBuf, E> {
        let name = format!("step-{step:08}");
        let partial = self.dir.join(format!("{name}{PARTIAL}"));
        let done = self.dir.join(&name);
        if partial.exists() {
            fs::remove_dir_all(&partial)?;
        }
        fs::create_dir_all(&partial)?;
        write(&partial)?;
        for entry in fs::read_dir(&partial)? {
            fs::File::open(entry?.path())?.sync_all()?;
        }
        sync_dir(&partial)?;
        // The same step saved again (a stopped run resumed with nothing left to train) moves
        // the old one aside under a name the list ignores: never a half-deleted checkpoint.
        let replaced = self.dir.join(format!("{name}.replaced{PARTIAL}"));
        crate::weights::replace_dir(&partial, &done, &replaced)?;
        let all = self.list()?;
        for (_, old) in all.iter().take(all.len().saturating_sub(self.keep)) {
            fs::remove_dir_all(old)?;
        }
        Ok(done)
    }
}

/// Makes a rename or a new file in `dir` durable (a no-op where directories cannot be opened).
fn sync_dir(dir: &Path) -> io::Result<()> {
    match fs::File::open(dir) {
        Ok(f) => f.sync_all().or(Ok(())),
        Err(_) => Ok(()),
    }
}

/// Writes `contents` to `path` atomically (temporary file, sync, rename).
pub fn write_atomic(path: &Path, contents: &[u8]) -> io::Result<()> {
    let tmp = path.with_extension("tmp");
    fs::write(&tmp, contents)?;
    fs::File::open(&tmp)?.sync_all()?;
    fs::rename(&tmp, path)?;
    if let Some(parent) = path.parent() {
        sync_dir(parent)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("webnmt-ckpt-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn keeps_the_newest_and_ignores_partial_writes() {
        let dir = scratch("keep");
        let ckpts = Checkpoints::open(&dir, 2).expect("dir");
        for step in [10, 20, 30] {
            ckpts
                .save::<io::Error>(step, |d| fs::write(d.join("state.json"), step.to_string()))
                .expect("save");
        }
        let steps: Vec<usize> = ckpts.list().expect("list").iter().map(|c| c.0).collect();
        assert_eq!(steps, vec![20, 30]);
        // A write that fails midway leaves no complete checkpoint behind…
        let failed = ckpts.save::<io::Error>(40, |d| {
            fs::write(d.join("model.bpk"), b"half")?;
            Err(io::Error::other("killed"))
        });
        assert!(failed.is_err());
        assert_eq!(ckpts.latest().expect("latest").map(|c| c.0), Some(30));
        // …and its directory is cleaned up by the next open, not by a reader (an export while
        // the run writes it).
        assert!(dir.join("step-00000040.partial").exists());
        let read = Checkpoints::read(&dir).latest().expect("latest");
        assert_eq!(read.map(|c| c.0), Some(30));
        assert!(dir.join("step-00000040.partial").exists());
        let ckpts = Checkpoints::open(&dir, 2).expect("reopen");
        assert!(!dir.join("step-00000040.partial").exists());
        assert_eq!(ckpts.list().expect("list").len(), 2);
        fs::remove_dir_all(&dir).expect("cleanup");
    }

    /// The same step saved again replaces it whole; the replaced copy, moved aside first, is
    /// not a checkpoint while it exists (a kill there leaves the older ones to resume from).
    #[test]
    fn a_step_saved_again_replaces_the_old_one_whole() {
        let dir = scratch("again");
        let ckpts = Checkpoints::open(&dir, 3).expect("dir");
        for (step, text) in [(10, "a"), (20, "b"), (20, "c")] {
            ckpts
                .save::<io::Error>(step, |d| fs::write(d.join("state.json"), text))
                .expect("save");
        }
        let list = ckpts.list().expect("list");
        assert_eq!(list.iter().map(|c| c.0).collect::<Vec<_>>(), [10, 20]);
        let state = fs::read_to_string(list[1].1.join("state.json")).expect("state");
        assert_eq!(state, "c");
        assert!(!dir.join("step-00000020.replaced.partial").exists());
        // Moved aside but not yet removed (a kill between the renames): not listed.
        fs::rename(
            dir.join("step-00000020"),
            dir.join("step-00000020.replaced.partial"),
        )
        .expect("rename");
        assert_eq!(ckpts.latest().expect("latest").map(|c| c.0), Some(10));
        fs::remove_dir_all(&dir).expect("cleanup");
    }

    #[test]
    fn write_atomic_replaces_whole_files() {
        let dir = scratch("atomic");
        fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("metrics.csv");
        write_atomic(&path, b"one").expect("write");
        write_atomic(&path, b"two").expect("write");
        assert_eq!(fs::read(&path).expect("read"), b"two");
        assert!(!path.with_extension("tmp").exists());
        fs::remove_dir_all(&dir).expect("cleanup");
    }
}
