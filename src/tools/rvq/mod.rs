//! `memdial pack --rvq BITS`: a checkpoint whose routed experts are residual vector
//! quantization codes against per-layer codebooks (lossy; docs/lossless.md, "Lossy: RVQ
//! experts"). Every other tensor — trunk, shared experts, routers, embedding,
//! `lm_head` — is copied byte for byte.
//!
//! Per MoE layer and matrix kind (`w1`, `w2`, `w3`), [`kmeans::train`] fits `BITS`
//! codebooks of 256 codewords of 8 weights on [`TRAINING_VECTORS`] groups taken at
//! even strides over the layer's experts (seed [`RVQ_SEED`], [`KMEANS_ITERATIONS`]
//! rounds per stage); [`kmeans::encode`] then codes every group of every expert.
//! The result is a plain safetensors checkpoint (config `quantization_config`
//! `memdial-rvq`, [`crate::format::config::rvq`]) that every store reads.

pub mod kmeans;

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use serde::Serialize;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::engine::loader::Checkpointed;
use crate::format::config::rvq::{self, RvqConfig, RVQ_CODEBOOK, RVQ_GROUP, RVQ_METHOD};
use crate::format::config::ExpertFormat;
use crate::format::schema::Role;
use crate::format::shard::{ShardFiles, TensorLoc};
use crate::kernels::{bf16_to_f32, dequant_mxfp4};
use crate::util::digest::hex;
use crate::util::error::UsageError;

/// Seed of the codebooks' initial centroids.
pub const RVQ_SEED: u64 = 1;
/// Lloyd rounds per stage.
pub const KMEANS_ITERATIONS: usize = 8;
/// Training groups per layer and matrix kind (all of them when there are fewer).
pub const TRAINING_VECTORS: usize = 65_536;
/// Output shards are cut at this many bytes (a tensor is never split).
const MAX_SHARD_BYTES: u64 = 512 << 20;

/// Reconstruction error of one matrix kind over every layer.
#[derive(Debug, Clone, Serialize)]
pub struct KindError {
    /// `w1`, `w2` or `w3`.
    pub mat: String,
    /// `sqrt(Σ (w − ŵ)² / Σ w²)` over every routed weight of this kind.
    pub relative_rms: f64,
}

/// What `pack --rvq` wrote.
#[derive(Debug, Clone, Serialize)]
pub struct RvqReport {
    /// The written directory.
    pub out: String,
    /// Bits per routed weight (= stages).
    pub bits: usize,
    /// Routed expert matrices coded.
    pub expert_matrices: usize,
    /// Their bytes in the source (BF16 or MXFP4 with scales).
    pub source_expert_bytes: u64,
    /// Their `rvq_codes` bytes.
    pub rvq_expert_bytes: u64,
    /// Bytes of every layer's codebooks (pinned when streamed).
    pub codebook_bytes: u64,
    /// Tensors copied unchanged.
    pub copied_tensors: usize,
    /// Per matrix kind.
    pub errors: Vec<KindError>,
    /// Wall time.
    pub seconds: f64,
}

/// One routed-expert matrix of the source: its tensors and shape.
#[derive(Debug, Clone)]
struct SrcMat {
    /// Full name of the matrix without the suffix (`….experts.{e}.{m}`).
    base: String,
    /// `weight` (BF16) or `weight_packed` (MXFP4) source name.
    first: String,
    /// MXFP4 `weight_scale` source name.
    scale: Option<String>,
    rows: usize,
    cols: usize,
}

/// The source's routed matrices by `(layer, expert, mat)`.
type Mats = BTreeMap<(usize, usize, usize), SrcMat>;

/// A tensor of the output, in write order.
enum Entry {
    Copy(String),
    Codebook {
        layer: usize,
        mat: usize,
    },
    Codes {
        layer: usize,
        expert: usize,
        mat: usize,
    },
}

const MATS: [&str; 3] = ["w1", "w2", "w3"];

/// Writes the RVQ checkpoint of `src` at `bits` bits per routed weight into `out`
/// (via `OUT.partial`, renamed when complete and re-read against its config).
/// `progress(done, total)` counts routed matrices coded.
///
/// Errors (usage): `bits` outside 1..=8, `out` exists, a model without routed
/// experts, a gpt-oss model, a source already RVQ or lossless-packed. Otherwise: an
/// invalid source, a non-finite routed weight, IO errors.
pub fn pack_rvq(
    src: &Path,
    out: &Path,
    bits: usize,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<RvqReport> {
    let t0 = Instant::now();
    let r = rvq::parse(&json!({ "bits": bits })).map_err(|e| UsageError::Invalid(e.to_string()))?;
    if out.exists() {
        return Err(UsageError::Invalid(format!(
            "{} already exists (remove it or choose another --out)",
            out.display()
        ))
        .into());
    }
    let c = Checkpointed::read(src)?.validated()?;
    let refuse = |why: &str| -> Result<RvqReport> {
        Err(UsageError::Invalid(format!("pack --rvq {}: {why}", src.display())).into())
    };
    if c.ck.lossless.is_some() {
        return refuse("the source is a lossless pack; give the safetensors checkpoint");
    }
    if c.cfg.gpt_oss.is_some() {
        return refuse("gpt-oss experts are stacked tensors; RVQ covers Kimi routed experts");
    }
    match c.cfg.moe.as_ref().map(|m| m.expert_format) {
        None => return refuse("the model has no routed experts"),
        Some(ExpertFormat::Rvq(_)) => return refuse("the routed experts are already RVQ"),
        Some(_) => {}
    }
    let (mats, order) = plan_entries(&c)?;
    let tmp = PathBuf::from(format!("{}.partial", out.display()));
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp)
            .with_context(|| format!("cannot remove the leftover {}", tmp.display()))?;
    }
    std::fs::create_dir_all(&tmp).with_context(|| format!("cannot create {}", tmp.display()))?;
    let res = write_checkpoint(&c, r, &mats, &order, &tmp, progress);
    let mut rep = match res {
        Ok(rep) => rep,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&tmp);
            return Err(e);
        }
    };
    if let Err(e) = Checkpointed::read(&tmp).and_then(Checkpointed::validated) {
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(e.context("the written RVQ checkpoint does not read back"));
    }
    std::fs::rename(&tmp, out)
        .with_context(|| format!("cannot rename {} to {}", tmp.display(), out.display()))?;
    rep.out = out.display().to_string();
    rep.seconds = t0.elapsed().as_secs_f64();
    Ok(rep)
}

/// The source's routed matrices by `(layer, expert, mat)` and the output's tensors in
/// the source's order (each layer's codebooks just before its first expert).
fn plan_entries(c: &Checkpointed) -> Result<(Mats, Vec<Entry>)> {
    let present = |s: &crate::format::schema::TensorSpec| -> Option<String> {
        std::iter::once(&s.name)
            .chain(s.aliases.iter())
            .find(|n| c.ck.tensors.contains_key(n.as_str()))
            .cloned()
    };
    let mut mats: Mats = BTreeMap::new();
    let mut of_name: HashMap<String, (usize, usize, usize)> = HashMap::new();
    for s in c.specs.iter().filter(|s| s.role == Role::Expert) {
        let (Some(l), Some(e)) = (s.layer, s.expert) else {
            bail!("{}: an expert tensor without layer and expert id", s.name);
        };
        let (base, suffix) = s.name.rsplit_once('.').context("expert tensor name")?;
        let m = MATS
            .iter()
            .position(|m| base.ends_with(&format!(".{m}")))
            .with_context(|| format!("{}: not a w1/w2/w3 expert matrix", s.name))?;
        let name = present(s).with_context(|| format!("{} is missing", s.name))?;
        let loc = &c.ck.tensors[&name];
        let entry = mats.entry((l, e, m)).or_insert_with(|| SrcMat {
            base: base.to_string(),
            first: String::new(),
            scale: None,
            rows: 0,
            cols: 0,
        });
        match suffix {
            "weight" => {
                (entry.first, entry.rows, entry.cols) = (name.clone(), loc.shape[0], loc.shape[1])
            }
            "weight_packed" => {
                (entry.first, entry.rows, entry.cols) =
                    (name.clone(), loc.shape[0], 2 * loc.shape[1])
            }
            "weight_scale" => entry.scale = Some(name.clone()),
            _ => bail!("{}: unexpected expert tensor", s.name),
        }
        of_name.insert(name, (l, e, m));
    }
    for m in mats.values() {
        if m.cols % RVQ_GROUP != 0 {
            bail!(
                "{}: {} columns are not a multiple of {RVQ_GROUP}",
                m.base,
                m.cols
            );
        }
    }
    let mut names: Vec<(&String, &TensorLoc)> = c.ck.tensors.iter().collect();
    names.sort_by_key(|(n, t)| (t.shard, t.offset, n.as_str()));
    let mut order = Vec::with_capacity(names.len());
    let mut layers_seen = std::collections::HashSet::new();
    for (n, _) in names {
        match of_name.get(n.as_str()) {
            None => order.push(Entry::Copy(n.clone())),
            Some(&(l, e, m)) if mats[&(l, e, m)].first == *n => {
                if layers_seen.insert(l) {
                    order.extend((0..3).map(|mat| Entry::Codebook { layer: l, mat }));
                }
                order.push(Entry::Codes {
                    layer: l,
                    expert: e,
                    mat: m,
                });
            }
            Some(_) => {} // an MXFP4 scale: coded with its packed tensor
        }
    }
    Ok((mats, order))
}

/// One MoE layer's RVQ: codebooks per matrix kind and every expert's codes.
struct LayerRvq {
    layer: usize,
    books: [Vec<u8>; 3],
    codes: HashMap<(usize, usize), Vec<u8>>,
}

/// Error sums per matrix kind: `Σ (w − ŵ)²`, `Σ w²`.
type ErrSums = [(f64, f64); 3];

fn decode_src(shards: &ShardFiles<'_>, c: &Checkpointed, m: &SrcMat) -> Result<Vec<f32>> {
    let read = |name: &str| -> Result<Vec<u8>> {
        let t = &c.ck.tensors[name];
        let mut b = vec![0u8; t.len as usize];
        shards.read_at(name, t, 0, &mut b)?;
        Ok(b)
    };
    let w = match &m.scale {
        None => bf16_to_f32(&read(&m.first)?),
        Some(s) => dequant_mxfp4(&read(&m.first)?, &read(s)?, m.rows, m.cols),
    };
    if let Some(i) = w.iter().position(|v| !v.is_finite()) {
        bail!(
            "{}: weight {i} is {} (RVQ codes finite weights)",
            m.base,
            w[i]
        );
    }
    Ok(w)
}

/// Trains and encodes layer `layer`'s routed experts.
fn code_layer(
    c: &Checkpointed,
    shards: &ShardFiles<'_>,
    r: RvqConfig,
    mats: &Mats,
    layer: usize,
    err: &mut ErrSums,
) -> Result<LayerRvq> {
    let experts = c.cfg.moe.as_ref().map_or(0, |m| m.num_experts);
    let mut books: [Vec<u8>; 3] = Default::default();
    let mut codes = HashMap::new();
    for mat in 0..3 {
        let get = |e: usize| mats.get(&(layer, e, mat)).context("expert matrix missing");
        let per = get(0)?.rows * get(0)?.cols / RVQ_GROUP;
        let total = per * experts;
        let t = TRAINING_VECTORS.min(total);
        // Training group j is group floor(j · total / t) of the experts in id order.
        let mut train = Vec::with_capacity(t * RVQ_GROUP);
        let mut j = 0usize;
        for e in 0..experts {
            let w = decode_src(shards, c, get(e)?)?;
            while j < t && (j as u128 * total as u128 / t as u128) < ((e + 1) * per) as u128 {
                let g = (j as u128 * total as u128 / t as u128) as usize - e * per;
                train.extend_from_slice(&w[g * RVQ_GROUP..(g + 1) * RVQ_GROUP]);
                j += 1;
            }
        }
        let label = format!("{}.{}", layer, MATS[mat]);
        let cb = kmeans::train(&train, r.stages, KMEANS_ITERATIONS, RVQ_SEED, &label);
        let searches: Vec<kmeans::Search> = cb
            .chunks_exact(RVQ_CODEBOOK * RVQ_GROUP)
            .map(kmeans::Search::new)
            .collect();
        for e in 0..experts {
            let w = decode_src(shards, c, get(e)?)?;
            let k = encode_par(&w, &cb, &searches);
            let (num, den) = &mut err[mat];
            for (v, ks) in w.chunks_exact(RVQ_GROUP).zip(k.chunks_exact(r.stages)) {
                for i in 0..RVQ_GROUP {
                    let mut d = cb[ks[0] as usize * RVQ_GROUP + i];
                    for (s, &kk) in ks.iter().enumerate().skip(1) {
                        d += cb[(s * RVQ_CODEBOOK + kk as usize) * RVQ_GROUP + i];
                    }
                    *num += (v[i] as f64 - d as f64).powi(2);
                    *den += (v[i] as f64).powi(2);
                }
            }
            codes.insert((e, mat), k);
        }
        books[mat] = cb.iter().flat_map(|v| v.to_le_bytes()).collect();
    }
    Ok(LayerRvq {
        layer,
        books,
        codes,
    })
}

/// [`kmeans::encode`] over row blocks on the available cores (each group is coded
/// alone, so the split never changes a code).
fn encode_par(w: &[f32], cb: &[f32], searches: &[kmeans::Search]) -> Vec<u8> {
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(8);
    let groups = w.len() / RVQ_GROUP;
    let chunk = groups.div_ceil(threads).max(1) * RVQ_GROUP;
    let parts: Vec<Vec<u8>> = std::thread::scope(|s| {
        let hs: Vec<_> = w
            .chunks(chunk)
            .map(|part| s.spawn(move || kmeans::encode(part, cb, searches)))
            .collect();
        hs.into_iter()
            .map(|h| h.join().expect("encode thread"))
            .collect()
    });
    parts.concat()
}

/// An output tensor: name, safetensors dtype, shape.
type Row = (String, String, Vec<usize>);

/// The output's tensors in write order, their byte sizes, and the shards' ranges of
/// them (cut at [`MAX_SHARD_BYTES`]).
fn output_table(
    c: &Checkpointed,
    r: RvqConfig,
    mats: &Mats,
    order: &[Entry],
) -> (Vec<Row>, Vec<u64>, Vec<std::ops::Range<usize>>) {
    let book_name = |l: usize, m: usize| -> String {
        let base = &mats[&(l, 0, m)].base;
        let cut = base.rfind(".experts.").expect("expert base name");
        format!("{}.rvq_codebooks.{}", &base[..cut], MATS[m])
    };
    // (name, dtype, shape) of every output tensor, in write order.
    let table: Vec<Row> = order
        .iter()
        .map(|e| match e {
            Entry::Copy(n) => {
                let t = &c.ck.tensors[n];
                (n.clone(), t.dtype.clone(), t.shape.clone())
            }
            Entry::Codebook { layer, mat } => (
                book_name(*layer, *mat),
                "F32".into(),
                vec![r.stages, RVQ_CODEBOOK, RVQ_GROUP],
            ),
            Entry::Codes { layer, expert, mat } => {
                let m = &mats[&(*layer, *expert, *mat)];
                let shape = vec![m.rows, m.cols / RVQ_GROUP, r.stages];
                (format!("{}.rvq_codes", m.base), "U8".into(), shape)
            }
        })
        .collect();
    let size = |(n, dt, shape): &Row| -> u64 {
        match c.ck.tensors.get(n) {
            Some(t) if dt == &t.dtype && shape == &t.shape => t.len,
            _ => shape.iter().product::<usize>() as u64 * if dt == "F32" { 4 } else { 1 },
        }
    };
    let mut cuts: Vec<std::ops::Range<usize>> = vec![];
    let (mut start, mut bytes) = (0usize, 0u64);
    for (i, t) in table.iter().enumerate() {
        if i > start && bytes + size(t) > MAX_SHARD_BYTES {
            cuts.push(start..i);
            (start, bytes) = (i, 0);
        }
        bytes += size(t);
    }
    cuts.push(start..table.len());
    let sizes = table.iter().map(size).collect();
    (table, sizes, cuts)
}

fn write_checkpoint(
    c: &Checkpointed,
    r: RvqConfig,
    mats: &Mats,
    order: &[Entry],
    dir: &Path,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<RvqReport> {
    let shards = ShardFiles::open(&c.ck.shards)?;
    let (table, sizes, cuts) = output_table(c, r, mats, order);
    let nshards = cuts.len();
    let mut rep = RvqReport {
        out: String::new(),
        bits: r.stages,
        expert_matrices: mats.len(),
        source_expert_bytes: mats
            .values()
            .map(|m| {
                c.ck.tensors[&m.first].len + m.scale.as_ref().map_or(0, |s| c.ck.tensors[s].len)
            })
            .sum(),
        rvq_expert_bytes: 0,
        codebook_bytes: 0,
        copied_tensors: 0,
        errors: vec![],
        seconds: 0.0,
    };
    let mut err: ErrSums = [(0.0, 0.0); 3];
    let mut cur: Option<LayerRvq> = None;
    let mut weight_map = serde_json::Map::new();
    let mut sums = String::new();
    let mut done = 0u64;
    let mut buf = vec![0u8; 1 << 20];
    for (si, range) in cuts.iter().enumerate() {
        let fname = format!("model-{:05}-of-{:05}.safetensors", si + 1, nshards);
        let mut header = serde_json::Map::new();
        header.insert("__metadata__".into(), json!({"format": "pt"}));
        let mut off = 0u64;
        for (t, &n) in table[range.clone()].iter().zip(&sizes[range.clone()]) {
            header.insert(
                t.0.clone(),
                json!({"dtype": t.1, "shape": t.2, "data_offsets": [off, off + n]}),
            );
            off += n;
            weight_map.insert(t.0.clone(), Value::String(fname.clone()));
        }
        let mut htext = serde_json::to_string(&Value::Object(header))?.into_bytes();
        while htext.len() % 8 != 0 {
            htext.push(b' ');
        }
        let path = dir.join(&fname);
        let mut f = BufWriter::new(
            File::create(&path).with_context(|| format!("cannot create {}", path.display()))?,
        );
        f.write_all(&(htext.len() as u64).to_le_bytes())?;
        f.write_all(&htext)?;
        for i in range.clone() {
            let sum = match &order[i] {
                Entry::Copy(n) => {
                    rep.copied_tensors += 1;
                    shards.read_chunks(n, &c.ck.tensors[n], &mut buf, |b| Ok(f.write_all(b)?))?
                }
                Entry::Codebook { layer, mat } | Entry::Codes { layer, mat, .. } => {
                    if cur.as_ref().map(|x| x.layer) != Some(*layer) {
                        cur = Some(code_layer(c, &shards, r, mats, *layer, &mut err)?);
                    }
                    let lr = cur.as_ref().expect("just coded");
                    let b: &[u8] = match &order[i] {
                        Entry::Codes { expert, .. } => {
                            done += 1;
                            progress(done, mats.len() as u64);
                            rep.rvq_expert_bytes += lr.codes[&(*expert, *mat)].len() as u64;
                            &lr.codes[&(*expert, *mat)]
                        }
                        _ => {
                            rep.codebook_bytes += lr.books[*mat].len() as u64;
                            &lr.books[*mat]
                        }
                    };
                    f.write_all(b)?;
                    hex(&Sha256::digest(b))
                }
            };
            sums.push_str(&format!("{sum}  {}\n", table[i].0));
        }
        f.into_inner().map_err(|e| e.into_error())?.sync_all()?;
    }
    rep.errors = (0..3)
        .map(|m| KindError {
            mat: MATS[m].into(),
            relative_rms: (err[m].0 / err[m].1.max(f64::MIN_POSITIVE)).sqrt(),
        })
        .collect();
    write_side_files(c, r, dir, weight_map, &sums)?;
    Ok(rep)
}

/// `config.json` (with the RVQ `quantization_config`), the index, `tensors.sha256`,
/// and the source's other files (tokenizer, generation config) copied.
fn write_side_files(
    c: &Checkpointed,
    r: RvqConfig,
    dir: &Path,
    weight_map: serde_json::Map<String, Value>,
    sums: &str,
) -> Result<()> {
    let cfg_path = c.dir.join("config.json");
    let mut root: Value = serde_json::from_str(&std::fs::read_to_string(&cfg_path)?)
        .with_context(|| format!("{} is not JSON", cfg_path.display()))?;
    root["quantization_config"] = json!({
        "quant_method": RVQ_METHOD, "bits": r.stages, "stages": r.stages,
        "group_size": RVQ_GROUP, "codebook_size": RVQ_CODEBOOK,
        "kmeans_iterations": KMEANS_ITERATIONS, "seed": RVQ_SEED,
        "training_vectors": TRAINING_VECTORS,
    });
    std::fs::write(
        dir.join("config.json"),
        serde_json::to_string_pretty(&root)? + "\n",
    )?;
    let index = json!({"metadata": {}, "weight_map": Value::Object(weight_map)});
    std::fs::write(
        dir.join("model.safetensors.index.json"),
        serde_json::to_string_pretty(&index)? + "\n",
    )?;
    std::fs::write(dir.join("tensors.sha256"), sums)?;
    const OWN: [&str; 4] = [
        "config.json",
        "model.safetensors.index.json",
        "tensors.sha256",
        "checksums.sha256",
    ];
    for e in std::fs::read_dir(&c.dir)? {
        let e = e?;
        let name = e.file_name().to_string_lossy().to_string();
        if e.file_type()?.is_file()
            && !name.ends_with(".safetensors")
            && !OWN.contains(&name.as_str())
        {
            std::fs::copy(e.path(), dir.join(&name))
                .with_context(|| format!("cannot copy {}", e.path().display()))?;
        }
    }
    Ok(())
}
