//! Safetensors checkpoint index: where every tensor lives (shard file, absolute byte
//! offset, length, dtype, shape).
//!
//! Headers are parsed by deserializing `safetensors::tensor::Metadata` from bytes
//! `[8, 8+n)` of each shard (the crate's `read_metadata` wants the whole file, see
//! docs/io.md §1). The absolute offset of a tensor is `8 + n + data_offsets.0`.
//! Multi-shard checkpoints are found through `model.safetensors.index.json`
//! (`weight_map`), single-file ones through `model.safetensors`.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

#[cfg(test)]
use crate::format::shard::first_duplicate_key;
use crate::format::shard::{drop_header_pages, open_for_header};
use crate::format::shard::{read_header, Shard, TensorLoc};
/// All tensors of a checkpoint directory.
#[derive(Debug, Clone)]
pub struct Checkpoint {
    pub dir: PathBuf,
    pub shards: Vec<Shard>,
    pub tensors: HashMap<String, TensorLoc>,
    /// Things worth telling `inspect` that are not problems: stale copies of a tensor
    /// in a shard the index does not map it to (ignored; the index decides).
    pub notes: Vec<String>,
    /// The lossless pack of a packed directory ([`crate::format::lossless`]): its tensors are
    /// listed in `tensors` at logical offsets of its shard, which hold coded blocks, so
    /// their bytes are read through [`crate::format::lossless::read::read_logical`], never at
    /// `offset` of the file.
    pub lossless: Option<std::sync::Arc<crate::format::lossless::Packed>>,
}

impl Checkpoint {
    /// Indexes a checkpoint directory.
    pub fn open(dir: &Path) -> Result<Self> {
        let index = dir.join("model.safetensors.index.json");
        let mut weight_map: Option<HashMap<String, String>> = None;
        let mut files: Vec<String> = if index.exists() {
            let text = std::fs::read_to_string(&index)
                .with_context(|| format!("cannot read {}", index.display()))?;
            let v: serde_json::Value = serde_json::from_str(&text)
                .with_context(|| format!("{} is not valid JSON", index.display()))?;
            let map = v
                .get("weight_map")
                .and_then(|m| m.as_object())
                .with_context(|| format!("{} has no weight_map", index.display()))?;
            let mut wm = HashMap::with_capacity(map.len());
            for (name, f) in map {
                let f = f.as_str().with_context(|| {
                    format!(
                        "{}: weight_map[{name:?}] is not a file name",
                        index.display()
                    )
                })?;
                wm.insert(name.clone(), f.to_string());
            }
            let mut set: Vec<String> = wm.values().cloned().collect();
            weight_map = Some(wm);
            set.sort();
            set.dedup();
            set
        } else if dir.join("model.safetensors").exists() {
            vec!["model.safetensors".into()]
        } else {
            bail!(
                "{}: no model.safetensors.index.json or model.safetensors",
                dir.display()
            );
        };
        files.sort();
        let mut shards = Vec::new();
        let mut tensors = HashMap::new();
        // Stale copies: (tensor, shard holding it, shard the index maps it to).
        let mut stale: Vec<(String, String, String)> = Vec::new();
        for (si, f) in files.iter().enumerate() {
            let path = dir.join(f);
            let (data_start, meta) = read_header(&path)?;
            let size = std::fs::metadata(&path)?.len();
            for (name, info) in meta.tensors() {
                // With an index, a copy in a shard the index does not map the tensor to is
                // stale (an overlay shard replaced it): the index decides, as transformers
                // and vLLM load only the mapped copy.
                if let Some(mapped) = weight_map
                    .as_ref()
                    .and_then(|wm| wm.get(&name))
                    .filter(|m| *m != f && files.contains(m))
                {
                    stale.push((name.clone(), f.clone(), mapped.clone()));
                    continue;
                }
                let (a, b) = info.data_offsets;
                let loc = TensorLoc {
                    shard: si,
                    offset: data_start + a as u64,
                    len: (b - a) as u64,
                    dtype: format!("{:?}", info.dtype),
                    shape: info.shape.clone(),
                };
                if tensors.insert(name.clone(), loc).is_some() {
                    bail!("tensor {name} appears in more than one shard");
                }
            }
            shards.push(Shard {
                path,
                size,
                data_start,
            });
        }
        stale.sort();
        let notes = stale
            .iter()
            .map(|(name, held, mapped)| {
                format!(
                    "{name}: stale copy in {held} ignored ({} maps it to {mapped})",
                    index.file_name().unwrap_or_default().to_string_lossy()
                )
            })
            .collect();
        let mut ck = Checkpoint {
            dir: dir.to_path_buf(),
            shards,
            tensors,
            notes,
            lossless: None,
        };
        if let Some(wm) = &weight_map {
            ck.check_index(&index, &files, wm)?;
        }
        ck.lossless = crate::format::lossless::attach(dir, &mut ck.shards, &mut ck.tensors)?;
        Ok(ck)
    }

    /// Checks that `model.safetensors.index.json` (at `index`, its `weight_map` `wm`,
    /// shard file names `files` in shard order) agrees with the shard headers: every
    /// tensor it maps is in the header of the file it names, and every tensor of a
    /// header is mapped. A disagreement means the index or a shard was replaced.
    ///
    /// Errors: the first disagreement (tensor and files named) and their count.
    fn check_index(
        &self,
        index: &Path,
        files: &[String],
        wm: &HashMap<String, String>,
    ) -> Result<()> {
        let mut bad: Vec<String> = Vec::new();
        for (name, file) in wm {
            match self.tensors.get(name) {
                None => bad.push(format!(
                    "it maps {name} to {file}, whose header has no such tensor"
                )),
                Some(t) if files[t.shard] != *file => bad.push(format!(
                    "it maps {name} to {file}, but the tensor is in {}",
                    files[t.shard]
                )),
                Some(_) => {}
            }
        }
        for (name, t) in &self.tensors {
            if !wm.contains_key(name) {
                bad.push(format!(
                    "{name} is in the header of {} but not in its weight_map",
                    files[t.shard]
                ));
            }
        }
        if let Some(first) = bad.iter().min() {
            bail!(
                "{} disagrees with the shard headers: {first} ({} disagreement(s))",
                index.display(),
                bad.len()
            );
        }
        Ok(())
    }

    /// Looks a tensor up by name.
    pub fn get(&self, name: &str) -> Option<&TensorLoc> {
        self.tensors.get(name)
    }

    /// Total bytes of all tensor data.
    pub fn total_bytes(&self) -> u64 {
        self.tensors.values().map(|t| t.len).sum()
    }

    /// Structural problems independent of any config: ranges outside their file,
    /// overlapping ranges, byte length not matching dtype × shape.
    pub fn structural_problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        let mut per_shard: BTreeMap<usize, Vec<(u64, u64, &str)>> = BTreeMap::new();
        for (name, t) in &self.tensors {
            let shard = &self.shards[t.shard];
            // Packed tensors sit at logical offsets (checked when the pack is read).
            if self.lossless.as_ref().is_some_and(|p| p.shard == t.shard) {
                continue;
            }
            if t.offset + t.len > shard.size {
                problems.push(format!(
                    "{name}: bytes [{}, {}) extend past the end of {} ({} bytes) — truncated file?",
                    t.offset,
                    t.offset + t.len,
                    shard.path.display(),
                    shard.size
                ));
            }
            if let Some(es) = dtype_size(&t.dtype) {
                let want = t.shape.iter().product::<usize>() as u64 * es;
                if want != t.len {
                    problems.push(format!(
                        "{name}: {} bytes stored but dtype {} × shape {:?} needs {want}",
                        t.len, t.dtype, t.shape
                    ));
                }
            }
            per_shard
                .entry(t.shard)
                .or_default()
                .push((t.offset, t.offset + t.len, name));
        }
        for (si, mut v) in per_shard {
            v.sort();
            for w in v.windows(2) {
                if w[1].0 < w[0].1 {
                    problems.push(format!(
                        "{} and {} overlap in {}",
                        w[0].2,
                        w[1].2,
                        self.shards[si].path.display()
                    ));
                }
            }
        }
        problems.sort();
        problems
    }
}

/// Bytes per element of a safetensors dtype, if known.
pub fn dtype_size(dtype: &str) -> Option<u64> {
    Some(match dtype {
        "BOOL" | "U8" | "I8" | "F8_E4M3" | "F8_E5M2" => 1,
        "BF16" | "F16" | "I16" | "U16" => 2,
        "F32" | "I32" | "U32" => 4,
        "F64" | "I64" | "U64" => 8,
        _ => return None,
    })
}

/// The model content hash, defined once for the project: SHA-256 (lower-case hex)
/// over every shard in [`Checkpoint::shards`] order (sorted file names) of
/// `file name bytes ‖ 0x00 ‖ file size (u64 LE) ‖ the shard's first 8 + n bytes`
/// (the safetensors length prefix and JSON header, which name every tensor with its
/// dtype, shape and byte range). It identifies a checkpoint by its layout and sizes
/// without reading the tensor data, so it works for any checkpoint in milliseconds;
/// two checkpoints with equal headers and sizes but different weights hash alike
/// (use `checksums.sha256` for the data). Errors: a shard that cannot be read.
pub fn model_content_hash(ck: &Checkpoint) -> Result<String> {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    for s in &ck.shards {
        let name = s
            .path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        h.update(name.as_bytes());
        h.update([0u8]);
        h.update(s.size.to_le_bytes());
        let mut f = open_for_header(&s.path)?;
        let mut head = vec![0u8; s.data_start as usize];
        std::io::Read::read_exact(&mut f, &mut head)
            .with_context(|| format!("{}: cannot read header", s.path.display()))?;
        drop_header_pages(&f, s.data_start);
        h.update(&head);
    }
    Ok(crate::util::digest::hex(&h.finalize()))
}

#[cfg(test)]
mod content_hash_tests {
    use super::*;

    #[test]
    fn content_hash_matches_python_hashlib() {
        // Expected from Python: hashlib.sha256(b"model.safetensors" + b"\0"
        //   + struct.pack("<Q", 66) + file[:62]).hexdigest()
        let d = std::env::temp_dir().join(format!("content-hash-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let hdr = br#"{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}"#;
        let mut bytes = (hdr.len() as u64).to_le_bytes().to_vec();
        bytes.extend_from_slice(hdr);
        bytes.extend_from_slice(&1.0f32.to_le_bytes());
        std::fs::write(d.join("model.safetensors"), &bytes).unwrap();
        let ck = Checkpoint::open(&d).unwrap();
        assert_eq!(
            model_content_hash(&ck).unwrap(),
            "3c268a2cf07b54333ce9000fa73578442cf1b2d01399fb2a24246bb171a3c914"
        );
        std::fs::remove_dir_all(&d).unwrap();
    }
}

#[cfg(test)]
mod field_case_tests {
    use super::*;

    /// A safetensors file of F32 scalars `(name, value)`, hand-assembled: 8-byte LE
    /// header length, the JSON header exactly as given by the entries, then the data.
    fn st_file(entries: &[(&str, f32)]) -> Vec<u8> {
        let fields: Vec<String> = entries
            .iter()
            .enumerate()
            .map(|(i, (n, _))| {
                format!(
                    r#""{n}":{{"dtype":"F32","shape":[1],"data_offsets":[{},{}]}}"#,
                    4 * i,
                    4 * i + 4
                )
            })
            .collect();
        let hdr = format!("{{{}}}", fields.join(","));
        let mut b = (hdr.len() as u64).to_le_bytes().to_vec();
        b.extend_from_slice(hdr.as_bytes());
        for (_, v) in entries {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b
    }

    fn scratch(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("ck-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn value_at(ck: &Checkpoint, name: &str) -> f32 {
        let t = ck.get(name).unwrap();
        let b = std::fs::read(&ck.shards[t.shard].path).unwrap();
        let o = t.offset as usize;
        f32::from_le_bytes(b[o..o + 4].try_into().unwrap())
    }

    #[test]
    fn index_decides_between_an_overlay_and_a_stale_copy() {
        let d = scratch("overlay");
        // base holds a = 1 (stale) and b = 2; the overlay holds the new a = 3.
        std::fs::write(
            d.join("base.safetensors"),
            st_file(&[("a", 1.0), ("b", 2.0)]),
        )
        .unwrap();
        std::fs::write(d.join("overlay.safetensors"), st_file(&[("a", 3.0)])).unwrap();
        std::fs::write(
            d.join("model.safetensors.index.json"),
            r#"{"metadata":{},"weight_map":{"a":"overlay.safetensors","b":"base.safetensors"}}"#,
        )
        .unwrap();
        let ck = Checkpoint::open(&d).unwrap();
        assert_eq!(ck.tensors.len(), 2);
        assert_eq!(
            ck.shards[ck.get("a").unwrap().shard].path,
            d.join("overlay.safetensors")
        );
        // Hand-derived: the overlay's header `{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`
        // is 54 bytes, so `a` starts at 8 + 54.
        assert_eq!(ck.get("a").unwrap().offset, 62);
        assert_eq!(value_at(&ck, "a"), 3.0);
        assert_eq!(value_at(&ck, "b"), 2.0);
        assert_eq!(ck.total_bytes(), 8);
        assert!(ck.structural_problems().is_empty());
        assert_eq!(
            ck.notes,
            [
                "a: stale copy in base.safetensors ignored (model.safetensors.index.json maps it \
              to overlay.safetensors)"
            ]
        );
        // The same two shards mapped the other way round: the base copy is used.
        std::fs::write(
            d.join("model.safetensors.index.json"),
            r#"{"weight_map":{"a":"base.safetensors","b":"base.safetensors"}}"#,
        )
        .unwrap();
        // overlay.safetensors is no longer named by the index, so it is not read at all.
        let ck = Checkpoint::open(&d).unwrap();
        assert_eq!(value_at(&ck, "a"), 1.0);
        assert!(ck.notes.is_empty());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn copies_only_in_shards_the_index_does_not_name_are_refused() {
        let d = scratch("twice");
        std::fs::write(d.join("s1.safetensors"), st_file(&[("a", 1.0), ("b", 2.0)])).unwrap();
        std::fs::write(d.join("s2.safetensors"), st_file(&[("a", 3.0), ("c", 4.0)])).unwrap();
        // The index maps `a` to a third shard that lacks it: both copies are stale and
        // there is no current one.
        std::fs::write(d.join("s3.safetensors"), st_file(&[("d", 5.0)])).unwrap();
        std::fs::write(
            d.join("model.safetensors.index.json"),
            r#"{"weight_map":{"a":"s3.safetensors","b":"s1.safetensors","c":"s2.safetensors","d":"s3.safetensors"}}"#,
        )
        .unwrap();
        let e = format!("{:#}", Checkpoint::open(&d).unwrap_err());
        assert!(
            e.contains("disagrees with the shard headers: it maps a to s3.safetensors, whose header has no such tensor"),
            "{e}"
        );
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_name_repeated_in_one_header_is_named() {
        let d = scratch("dup");
        std::fs::write(
            d.join("model.safetensors"),
            st_file(&[("a", 1.0), ("w", 2.0), ("a", 3.0)]),
        )
        .unwrap();
        let e = format!("{:#}", Checkpoint::open(&d).unwrap_err());
        assert!(
            e.contains(r#"tensor name "a" appears more than once"#)
                && e.contains("model.safetensors"),
            "{e}"
        );
        // Without the check the crate reports a hole in the offsets instead.
        let b = std::fs::read(d.join("model.safetensors")).unwrap();
        let n = u64::from_le_bytes(b[..8].try_into().unwrap()) as usize;
        let crate_err = serde_json::from_slice::<safetensors::tensor::Metadata>(&b[8..8 + n])
            .unwrap_err()
            .to_string();
        assert!(crate_err.to_lowercase().contains("offset"), "{crate_err}");
        assert_eq!(
            first_duplicate_key(br#"{"x":1,"y":{"x":2}}"#).unwrap(),
            None
        );
        assert_eq!(
            first_duplicate_key(br#"{"x":1,"y":2,"y":3,"x":4}"#).unwrap(),
            Some("y".into())
        );
        std::fs::remove_dir_all(&d).unwrap();
    }
}
