//! The bytes of each planned GGUF tensor, read from the checkpoint's shards and
//! transformed as [`super::kimi`] planned them.

use anyhow::{bail, Context, Result};
use memdial::format::checkpoint::Checkpoint;
use memdial::format::shard::ShardFiles;
use memdial::kernels::bf16_le;

use super::gguf::GgmlType;
use super::kimi::{Planned, Src};

/// Reads tensors of a checkpoint (one open file per shard).
pub struct Reader<'a> {
    ck: &'a Checkpoint,
    files: ShardFiles<'a>,
}

impl<'a> Reader<'a> {
    /// Opens every shard of `ck`.
    pub fn new(ck: &'a Checkpoint) -> Result<Self> {
        Ok(Reader {
            ck,
            files: ShardFiles::open(&ck.shards)?,
        })
    }

    /// Raw bytes of tensor `name`.
    pub fn raw(&self, name: &str) -> Result<Vec<u8>> {
        let t = self
            .ck
            .tensors
            .get(name)
            .with_context(|| format!("tensor {name} missing"))?;
        let mut b = vec![0u8; t.len as usize];
        self.files.read_at(name, t, 0, &mut b)?;
        Ok(b)
    }

    /// Values of a BF16 or F32 tensor as f32 (BF16 widens exactly).
    pub fn f32s(&self, name: &str) -> Result<Vec<f32>> {
        let b = self.raw(name)?;
        Ok(match self.ck.tensors[name].dtype.as_str() {
            "BF16" => b.chunks_exact(2).map(|c| bf16_le([c[0], c[1]])).collect(),
            "F32" => b
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
            d => bail!("tensor {name}: dtype {d} cannot be read as float"),
        })
    }

    /// Bytes of tensor `name` in type `ty` (F32: widened; BF16: the stored bytes).
    pub fn typed(&self, name: &str, ty: GgmlType) -> Result<Vec<u8>> {
        match ty {
            GgmlType::F32 => Ok(f32_bytes(&self.f32s(name)?)),
            GgmlType::Bf16 if self.ck.tensors[name].dtype == "BF16" => self.raw(name),
            _ => bail!("tensor {name}: cannot write as {ty:?}"),
        }
    }

    /// The bytes of planned tensor `p`.
    pub fn produce(&self, p: &Planned) -> Result<Vec<u8>> {
        let ty = p.info.ty;
        Ok(match &p.src {
            Src::Plain(n) => self.typed(n, ty)?,
            Src::NegExp(n, take) => {
                let v = self.f32s(n)?;
                let v = &v[..take.unwrap_or(v.len())];
                f32_bytes(
                    &v.iter()
                        .map(|x| -(*x as f64).exp() as f32)
                        .collect::<Vec<_>>(),
                )
            }
            Src::Product(a, b) => {
                let (a, b) = (self.f32s(a)?, self.f32s(b)?);
                f32_bytes(&a.iter().zip(&b).map(|(x, y)| x * y).collect::<Vec<_>>())
            }
            Src::KvB {
                name,
                heads,
                nope,
                v,
                rank,
                k,
            } => {
                let src = self.typed(name, ty)?;
                let es = if ty == GgmlType::F32 { 4 } else { 2 };
                let row = |h: usize, r: usize| (h * (nope + v) + r) * rank;
                let mut out =
                    Vec::with_capacity(src.len() / (nope + v) * if *k { *nope } else { *v });
                for h in 0..*heads {
                    if *k {
                        // numpy (H, rank, nope): element [h][l][n] = kv_b[h(nope+v)+n][l]
                        for l in 0..*rank {
                            for n in 0..*nope {
                                let i = (row(h, n) + l) * es;
                                out.extend_from_slice(&src[i..i + es]);
                            }
                        }
                    } else {
                        for j in 0..*v {
                            let i = row(h, nope + j) * es;
                            out.extend_from_slice(&src[i..i + rank * es]);
                        }
                    }
                }
                out
            }
            Src::Stack(names) => {
                let mut out = vec![];
                for n in names {
                    out.extend(self.typed(n, ty)?);
                }
                out
            }
            Src::StackMxfp4(pairs) => {
                let mut out = vec![];
                for (p, s) in pairs {
                    let (p, s) = (self.raw(p)?, self.raw(s)?);
                    if ty == GgmlType::Mxfp4 {
                        super::mxfp4::repack(&p, &s, &mut out);
                    } else {
                        out.extend(f32_bytes(&super::mxfp4::dequant(&p, &s)));
                    }
                }
                out
            }
        })
    }
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}
