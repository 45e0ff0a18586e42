//! The identity of a sweep's inputs — a model directory, a single model file (a GGUF),
//! prompt files — defined over *files*, so it works for checkpoints memdial reads and
//! for opaque models alike.
//!
//! Each regular file under the input (recursively; names starting with `.` skipped,
//! symlinks followed) contributes its relative path, its size, its modification time
//! and a SHA-256 of its *head*: the whole file when it is at most [`WHOLE_FILE_MAX`]
//! bytes (config, tokenizer, `tensors.sha256`, `generation_config.json`, prompt files),
//! else its first [`HEAD_BYTES`] (a safetensors or GGUF header names every tensor with
//! its dtype, shape and offset) and its last [`TAIL_BYTES`]. The pages those reads put
//! in the page cache are dropped again (`POSIX_FADV_DONTNEED`), so taking an identity
//! leaves a cold cache cold. Cost: two small reads per large file and a full read of
//! each small one — milliseconds for any checkpoint; a model's `tensors.sha256`, when
//! present, is a small file and so covers every tensor's data by its digest.
//!
//! A same-size in-place edit of tensor data that leaves head, tail and mtime unchanged
//! is not seen (nor by any check short of reading every byte): [`full_digest`] reads
//! every byte with `O_DIRECT` (no page cache) for a caller that wants that.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::util::digest::hex;

/// Files up to this size (bytes) are hashed whole: 1 MiB.
pub const WHOLE_FILE_MAX: u64 = 1 << 20;
/// Bytes hashed from the start of a larger file: 1 MiB.
pub const HEAD_BYTES: u64 = 1 << 20;
/// Bytes hashed from the end of a larger file: 64 KiB.
pub const TAIL_BYTES: u64 = 64 << 10;
/// The identity format; part of [`Identity::digest`], so a change of the rules above
/// never makes two different inputs compare equal.
pub const FORMAT: u32 = 1;

/// What one file contributes to an [`Identity`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileFacts {
    /// Path relative to the input (`/`-separated); the file name for a single file.
    pub name: String,
    /// Size in bytes.
    pub size: u64,
    /// Modification time, nanoseconds since the Unix epoch.
    pub mtime_ns: i64,
    /// Lower-case hex SHA-256 of the whole file (≤ [`WHOLE_FILE_MAX`] bytes), else of
    /// its first [`HEAD_BYTES`] followed by its last [`TAIL_BYTES`].
    pub head_sha256: String,
}

/// The identity of one input (a directory or a file): its files in name order and
/// their digest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    /// [`FORMAT`] at the time it was taken.
    pub format: u32,
    /// Every regular file, sorted by name.
    pub files: Vec<FileFacts>,
    /// Lower-case hex SHA-256 of `"memdial-identity v{format}\n"` followed, per file,
    /// by `name ‖ 0x00 ‖ size ‖ 0x00 ‖ mtime_ns ‖ 0x00 ‖ head_sha256 ‖ "\n"` (numbers in
    /// decimal ASCII).
    pub digest: String,
}

impl Identity {
    /// The identity of `path`: a regular file, or every regular file under a directory.
    ///
    /// Errors: `path` missing or neither a file nor a directory, a directory with no
    /// regular file, a file that cannot be read (each naming the path).
    pub fn of_path(path: &Path) -> Result<Identity> {
        let meta =
            std::fs::metadata(path).with_context(|| format!("cannot stat {}", path.display()))?;
        let mut files = Vec::new();
        if meta.is_file() {
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            files.push(facts(path, name)?);
        } else if meta.is_dir() {
            let mut found = Vec::new();
            walk(path, "", &mut found)?;
            found.sort();
            for (name, p) in found {
                files.push(facts(&p, name)?);
            }
            if files.is_empty() {
                bail!("{} holds no regular file", path.display());
            }
        } else {
            bail!(
                "{} is neither a regular file nor a directory",
                path.display()
            );
        }
        Ok(Identity::from_files(files))
    }

    /// The identity made of `files` (sorted by name here).
    pub fn from_files(mut files: Vec<FileFacts>) -> Identity {
        files.sort_by(|a, b| a.name.cmp(&b.name));
        let mut h = Sha256::new();
        h.update(format!("memdial-identity v{FORMAT}\n").as_bytes());
        for f in &files {
            h.update(
                format!(
                    "{}\0{}\0{}\0{}\n",
                    f.name, f.size, f.mtime_ns, f.head_sha256
                )
                .as_bytes(),
            );
        }
        Identity {
            format: FORMAT,
            files,
            digest: hex(&h.finalize()),
        }
    }

    /// What differs from `older` to `self`, one phrase per file ("config.json: content
    /// changed", "model-00002.safetensors: removed", "x: size 10 → 12 bytes", "y:
    /// modified (mtime)"); empty when the two are the same identity.
    pub fn changes_since(&self, older: &Identity) -> Vec<String> {
        self.changes(older, true)
    }

    /// [`Identity::changes_since`] without the changes of modification time alone:
    /// for copies of one input made elsewhere (a shard or a baseline run on another
    /// machine, a model downloaded twice), whose files have the same size and head
    /// hash but their own mtimes.
    pub fn content_changes_since(&self, older: &Identity) -> Vec<String> {
        self.changes(older, false)
    }

    fn changes(&self, older: &Identity, mtime: bool) -> Vec<String> {
        let mut out = Vec::new();
        if older.format != self.format {
            out.push(format!(
                "identity format {} → {}",
                older.format, self.format
            ));
        }
        let find = |v: &[FileFacts], n: &str| v.iter().position(|f| f.name == n);
        for o in &older.files {
            match find(&self.files, &o.name) {
                None => out.push(format!("{}: removed", o.name)),
                Some(i) => {
                    let n = &self.files[i];
                    if n.size != o.size {
                        out.push(format!("{}: size {} → {} bytes", o.name, o.size, n.size));
                    } else if n.head_sha256 != o.head_sha256 {
                        out.push(format!("{}: content changed", o.name));
                    } else if mtime && n.mtime_ns != o.mtime_ns {
                        out.push(format!("{}: modified (mtime changed)", o.name));
                    }
                }
            }
        }
        for n in &self.files {
            if find(&older.files, &n.name).is_none() {
                out.push(format!("{}: added", n.name));
            }
        }
        out
    }
}

/// Collects `(relative name, path)` of the regular files under `dir`.
fn walk(dir: &Path, prefix: &str, out: &mut Vec<(String, PathBuf)>) -> Result<()> {
    let rd = std::fs::read_dir(dir).with_context(|| format!("cannot list {}", dir.display()))?;
    for e in rd {
        let e = e.with_context(|| format!("cannot list {}", dir.display()))?;
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') {
            continue;
        }
        let p = e.path();
        let rel = if prefix.is_empty() {
            name
        } else {
            format!("{prefix}/{name}")
        };
        // Follow symlinks: a model directory of links to shards identifies the shards.
        let Ok(m) = std::fs::metadata(&p) else {
            continue; // a dangling link holds nothing to identify
        };
        if m.is_dir() {
            walk(&p, &rel, out)?;
        } else if m.is_file() {
            out.push((rel, p));
        }
    }
    Ok(())
}

/// The facts of one regular file (see [`FileFacts`]).
fn facts(path: &Path, name: String) -> Result<FileFacts> {
    let mut f = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let m = f
        .metadata()
        .with_context(|| format!("cannot stat {}", path.display()))?;
    let size = m.len();
    let mtime_ns = m
        .modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
        .unwrap_or(0);
    let _ = rustix::fs::fadvise(&f, 0, None, rustix::fs::Advice::Random);
    let mut h = Sha256::new();
    let read = |f: &mut File, h: &mut Sha256, off: u64, len: u64| -> Result<()> {
        f.seek(SeekFrom::Start(off))?;
        let mut buf = vec![0u8; len as usize];
        f.read_exact(&mut buf)
            .with_context(|| format!("cannot read {}", path.display()))?;
        h.update(&buf);
        Ok(())
    };
    if size <= WHOLE_FILE_MAX {
        read(&mut f, &mut h, 0, size)?;
    } else {
        read(&mut f, &mut h, 0, HEAD_BYTES)?;
        read(&mut f, &mut h, size - TAIL_BYTES, TAIL_BYTES)?;
    }
    // Leave the cache as cold as it was (best effort; mapped pages stay).
    let _ = rustix::fs::fadvise(&f, 0, None, rustix::fs::Advice::DontNeed);
    Ok(FileFacts {
        name,
        size,
        mtime_ns,
        head_sha256: hex(&h.finalize()),
    })
}

/// Lower-case hex SHA-256 of every byte of `path`, read with `O_DIRECT` in 8 MiB
/// requests so it leaves no pages in the page cache (falls back to buffered reads
/// followed by `POSIX_FADV_DONTNEED` where the filesystem refuses `O_DIRECT`, as
/// tmpfs does). Reads the whole file: about `size / read bandwidth` seconds.
///
/// Errors: the file cannot be opened or read (naming it).
pub fn full_digest(path: &Path) -> Result<String> {
    use crate::io::reader::{IoMode, ShardFile};
    const REQ: u64 = 8 << 20;
    let size = std::fs::metadata(path)
        .with_context(|| format!("cannot stat {}", path.display()))?
        .len();
    let file = match ShardFile::open(path, IoMode::Direct) {
        Ok(f) => f,
        Err(_) => ShardFile::open(path, IoMode::Buffered)?,
    };
    let mut buf = crate::io::aligned::AlignedBuf::new(file.buffer_len_for(0, REQ.min(size)));
    let mut h = Sha256::new();
    let mut off = 0;
    while off < size {
        let len = REQ.min(size - off);
        let start = file.read_into(off, len, &mut buf)?;
        h.update(&buf.full_mut()[start..start + len as usize]);
        off += len;
    }
    if file.mode() == IoMode::Buffered {
        let _ = rustix::fs::fadvise(file.file(), 0, None, rustix::fs::Advice::DontNeed);
    }
    Ok(hex(&h.finalize()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("identity-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn set_mtime(p: &Path, secs: i64) {
        let f = File::options().write(true).open(p).unwrap();
        let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs as u64);
        f.set_modified(t).unwrap();
    }

    #[test]
    fn digest_matches_python_hashlib() {
        // Expected from Python:
        //   import hashlib
        //   h = lambda b: hashlib.sha256(b).hexdigest()
        //   s = b"memdial-identity v1\n"
        //   s += b"a.txt\x00" + b"3\x00" + b"1000000000000000000\x00" + h(b"abc").encode() + b"\n"
        //   s += b"sub/b.bin\x00" + b"0\x00" + b"2000000000000000000\x00" + h(b"").encode() + b"\n"
        //   h(s)
        let d = scratch("py");
        std::fs::write(d.join("a.txt"), b"abc").unwrap();
        std::fs::create_dir(d.join("sub")).unwrap();
        std::fs::write(d.join("sub/b.bin"), b"").unwrap();
        std::fs::write(d.join(".lock"), b"ignored").unwrap();
        set_mtime(&d.join("a.txt"), 1_000_000_000);
        set_mtime(&d.join("sub/b.bin"), 2_000_000_000);
        let id = Identity::of_path(&d).unwrap();
        assert_eq!(
            id.files[0].head_sha256,
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(
            id.digest,
            "31255044a8e13f903aac195a452a9e786879d079c552c2da438f1b230462ad67"
        );
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn changes_name_what_changed() {
        let d = scratch("changes");
        std::fs::write(d.join("config.json"), b"{\"a\":1}").unwrap();
        std::fs::write(d.join("w.bin"), vec![7u8; 100]).unwrap();
        set_mtime(&d.join("config.json"), 1_000_000_000);
        set_mtime(&d.join("w.bin"), 1_000_000_000);
        let old = Identity::of_path(&d).unwrap();
        assert!(Identity::of_path(&d)
            .unwrap()
            .changes_since(&old)
            .is_empty());
        std::fs::write(d.join("config.json"), b"{\"a\":2}").unwrap();
        set_mtime(&d.join("config.json"), 1_000_000_000);
        set_mtime(&d.join("w.bin"), 1_000_000_001);
        std::fs::write(d.join("new.txt"), b"x").unwrap();
        let new = Identity::of_path(&d).unwrap();
        assert_ne!(new.digest, old.digest);
        assert_eq!(
            new.changes_since(&old),
            [
                "config.json: content changed",
                "w.bin: modified (mtime changed)",
                "new.txt: added"
            ]
        );
        // A copy elsewhere: its mtimes are its own.
        assert_eq!(
            new.content_changes_since(&old),
            ["config.json: content changed", "new.txt: added"]
        );
        std::fs::remove_file(d.join("w.bin")).unwrap();
        let gone = Identity::of_path(&d).unwrap();
        assert_eq!(gone.changes_since(&new), ["w.bin: removed"]);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn large_files_hash_head_and_tail() {
        // Expected from Python: data = bytes(i % 251 for i in range(3 << 20));
        //   hashlib.sha256(data[:1 << 20] + data[-(64 << 10):]).hexdigest()
        let d = scratch("large");
        let data: Vec<u8> = (0..3usize << 20).map(|i| (i % 251) as u8).collect();
        let p = d.join("model.gguf");
        std::fs::write(&p, &data).unwrap();
        let id = Identity::of_path(&p).unwrap();
        assert_eq!(id.files.len(), 1);
        assert_eq!(id.files[0].name, "model.gguf");
        assert_eq!(id.files[0].size, 3 << 20);
        assert_eq!(
            id.files[0].head_sha256,
            "77e050803bdbbb6bd578a3b86d074a8f670b8cd5e10eeba57ba123d8c9c9652a"
        );
        // hashlib.sha256(data).hexdigest()
        assert_eq!(
            full_digest(&p).unwrap(),
            "a1feacf0d812ba4d0b0e463ed45bbd583cea1de55c54693116754b30b5794745"
        );
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn refuses_what_it_cannot_identify() {
        let d = scratch("refuse");
        let e = Identity::of_path(&d).unwrap_err().to_string();
        assert!(e.contains("holds no regular file"), "{e}");
        let e = Identity::of_path(&d.join("missing"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("cannot stat"), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
