//! A GGUF v3 writer: header, metadata key/values, tensor infos, aligned tensor data.
//!
//! Format (ggml's `docs/gguf.md`, GGUF version 3; all integers little-endian):
//! 1. header: magic `GGUF` (4 bytes), `version: u32 = 3`, `tensor_count: u64`,
//!    `metadata_kv_count: u64`;
//! 2. `metadata_kv_count` key/values: key as a *gguf string* (`len: u64` + UTF-8
//!    bytes, no NUL), `value_type: u32`, the value (arrays: element type `u32`,
//!    `len: u64`, the elements);
//! 3. `tensor_count` tensor infos: name (gguf string), `n_dims: u32`, `ne[n_dims]: u64`
//!    (ggml order: `ne[0]` is the fastest-varying dimension, i.e. a row-major
//!    `[rows, cols]` matrix has `ne = [cols, rows]`), `type: u32` (a `ggml_type`),
//!    `offset: u64` from the start of the data section, a multiple of
//!    `general.alignment`;
//! 4. padding to `general.alignment` (default 32), then the data section: each
//!    tensor's bytes at its offset, padded with zeros to the alignment.
//!
//! Tensors are streamed: [`write_gguf`] asks a callback for one tensor's bytes at a
//! time, so a file larger than memory can be written.

use std::io::{Seek, Write};

use anyhow::{bail, Result};

/// `general.alignment` of files we write (the format's default), bytes.
pub const ALIGNMENT: u64 = 32;

/// A `ggml_type` we write (values from ggml's `ggml.h`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GgmlType {
    /// `GGML_TYPE_F32 = 0`: 4 bytes per element.
    F32,
    /// `GGML_TYPE_BF16 = 30`: 2 bytes per element.
    Bf16,
    /// `GGML_TYPE_MXFP4 = 39`: blocks of 32 elements in 17 bytes (`block_mxfp4`:
    /// one E8M0 scale byte, then 16 bytes of E2M1 codes, byte `j` holding element `j`
    /// in its low nibble and element `j + 16` in its high one).
    Mxfp4,
}

impl GgmlType {
    /// The `ggml_type` id.
    pub fn id(self) -> u32 {
        match self {
            GgmlType::F32 => 0,
            GgmlType::Bf16 => 30,
            GgmlType::Mxfp4 => 39,
        }
    }

    /// Bytes of a tensor of `n` elements (MXFP4: `n` must be a multiple of 32).
    pub fn bytes(self, n: u64) -> u64 {
        match self {
            GgmlType::F32 => 4 * n,
            GgmlType::Bf16 => 2 * n,
            GgmlType::Mxfp4 => n / 32 * 17,
        }
    }
}

/// A metadata value (the GGUF value types we use; type ids from `docs/gguf.md`).
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// `GGUF_TYPE_UINT32 = 4`.
    U32(u32),
    /// `GGUF_TYPE_FLOAT32 = 6`.
    F32(f32),
    /// `GGUF_TYPE_BOOL = 7` (one byte, 0 or 1).
    Bool(bool),
    /// `GGUF_TYPE_STRING = 8`.
    Str(String),
    /// `GGUF_TYPE_ARRAY = 9` of `GGUF_TYPE_INT32 = 5`.
    ArrI32(Vec<i32>),
    /// `GGUF_TYPE_ARRAY = 9` of `GGUF_TYPE_STRING = 8`.
    ArrStr(Vec<String>),
}

/// One tensor's header entry.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorInfo {
    /// GGUF tensor name (e.g. `blk.0.attn_norm.weight`).
    pub name: String,
    /// Dimensions in ggml order (`ne[0]` fastest).
    pub ne: Vec<u64>,
    /// Element type.
    pub ty: GgmlType,
}

impl TensorInfo {
    /// Bytes of this tensor's data (before padding).
    pub fn nbytes(&self) -> u64 {
        self.ty.bytes(self.ne.iter().product())
    }
}

fn put_str(w: &mut impl Write, s: &str) -> std::io::Result<()> {
    w.write_all(&(s.len() as u64).to_le_bytes())?;
    w.write_all(s.as_bytes())
}

fn put_value(w: &mut impl Write, v: &Value) -> std::io::Result<()> {
    match v {
        Value::U32(x) => {
            w.write_all(&4u32.to_le_bytes())?;
            w.write_all(&x.to_le_bytes())
        }
        Value::F32(x) => {
            w.write_all(&6u32.to_le_bytes())?;
            w.write_all(&x.to_le_bytes())
        }
        Value::Bool(x) => {
            w.write_all(&7u32.to_le_bytes())?;
            w.write_all(&[*x as u8])
        }
        Value::Str(s) => {
            w.write_all(&8u32.to_le_bytes())?;
            put_str(w, s)
        }
        Value::ArrI32(a) => {
            w.write_all(&9u32.to_le_bytes())?;
            w.write_all(&5u32.to_le_bytes())?;
            w.write_all(&(a.len() as u64).to_le_bytes())?;
            for x in a {
                w.write_all(&x.to_le_bytes())?;
            }
            Ok(())
        }
        Value::ArrStr(a) => {
            w.write_all(&9u32.to_le_bytes())?;
            w.write_all(&8u32.to_le_bytes())?;
            w.write_all(&(a.len() as u64).to_le_bytes())?;
            for s in a {
                put_str(w, s)?;
            }
            Ok(())
        }
    }
}

fn pad(w: &mut impl Write, pos: u64) -> std::io::Result<u64> {
    let n = pos.next_multiple_of(ALIGNMENT) - pos;
    w.write_all(&vec![0u8; n as usize])?;
    Ok(pos + n)
}

/// Writes a GGUF v3 file to `w`: `kvs` in order (`general.alignment` is added first
/// when absent), then `tensors` in order, whose bytes `data(i)` returns (each must be
/// exactly [`TensorInfo::nbytes`] long). Errors: a wrong data length, IO errors.
pub fn write_gguf<W: Write + Seek>(
    w: &mut W,
    kvs: &[(String, Value)],
    tensors: &[TensorInfo],
    mut data: impl FnMut(usize) -> Result<Vec<u8>>,
) -> Result<()> {
    let has_align = kvs.iter().any(|(k, _)| k == "general.alignment");
    w.write_all(b"GGUF")?;
    w.write_all(&3u32.to_le_bytes())?;
    w.write_all(&(tensors.len() as u64).to_le_bytes())?;
    w.write_all(&((kvs.len() + usize::from(!has_align)) as u64).to_le_bytes())?;
    if !has_align {
        put_str(w, "general.alignment")?;
        put_value(w, &Value::U32(ALIGNMENT as u32))?;
    }
    for (k, v) in kvs {
        put_str(w, k)?;
        put_value(w, v)?;
    }
    let mut off = 0u64;
    for t in tensors {
        put_str(w, &t.name)?;
        w.write_all(&(t.ne.len() as u32).to_le_bytes())?;
        for d in &t.ne {
            w.write_all(&d.to_le_bytes())?;
        }
        w.write_all(&t.ty.id().to_le_bytes())?;
        w.write_all(&off.to_le_bytes())?;
        off = (off + t.nbytes()).next_multiple_of(ALIGNMENT);
    }
    let mut pos = w.stream_position()?;
    pos = pad(w, pos)?;
    let data_start = pos;
    for (i, t) in tensors.iter().enumerate() {
        let bytes = data(i)?;
        if bytes.len() as u64 != t.nbytes() {
            bail!(
                "tensor {}: {} bytes produced, {} expected",
                t.name,
                bytes.len(),
                t.nbytes()
            );
        }
        w.write_all(&bytes)?;
        pos = pad(w, pos + bytes.len() as u64)?;
    }
    debug_assert_eq!(pos - data_start, off);
    Ok(())
}
