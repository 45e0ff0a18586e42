//! The spec hash: SHA-256 of a spec's canonical JSON, in a versioned form that keeps
//! the shipped specs' hashes when fields are added.

use serde::Serialize;

/// Version of the spec-hash form. 1: the fields of the first spec format, every
/// one serialised (defaults included); fields added later are left out while they
/// hold their default, so a version-1 spec keeps its hash. A later version that
/// changes how the form is written is serialised as `"hash_format": N` at the end
/// (version 1 writes nothing, which is what makes the shipped specs' hashes stay).
pub const SPEC_HASH_FORMAT: u32 = 1;

/// The form of a spec (or of any value holding one) that [`Spec::hash`] hashes.
#[derive(Serialize)]
struct HashForm<'a, T: Serialize> {
    #[serde(flatten)]
    spec: &'a T,
    #[serde(skip_serializing_if = "is_first_hash_format")]
    hash_format: u32,
}

fn is_first_hash_format(v: &u32) -> bool {
    *v == 1
}

/// SHA-256 (hex) of the hash form of `spec`: its canonical JSON with the hash-form
/// version ([`SPEC_HASH_FORMAT`]).
pub fn spec_hash<T: Serialize>(spec: &T) -> String {
    let form = HashForm {
        spec,
        hash_format: SPEC_HASH_FORMAT,
    };
    crate::sweep::util::sha256_hex(serde_json::to_string(&form).unwrap_or_default().as_bytes())
}

impl super::Spec {
    /// SHA-256 of the canonical JSON form of the spec as written ([`spec_hash`]): shards of one
    /// sweep, and a resumed sweep, must have the same hash.
    pub fn hash(&self) -> String {
        spec_hash(&self.raw)
    }
}
