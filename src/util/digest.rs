//! Hex and SHA-256 as the checksum files and reports write them (lower-case hex).

use sha2::{Digest, Sha256};

/// Lower-case hex of a byte string, two digits per byte (`[0xab, 0x01]` → `"ab01"`).
pub fn hex(bytes: &[u8]) -> String {
    ::hex::encode(bytes)
}

/// SHA-256 of `bytes` in lower-case hex (64 digits), as `sha256sum` prints it.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_sha256sum() {
        // `printf abc | sha256sum` (FIPS 180-2, appendix B.1).
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(hex(&[0x00, 0xab, 0x0f]), "00ab0f");
    }
}
