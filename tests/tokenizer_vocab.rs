//! Vocabulary tests: o200k prefix BPE validity, deterministic writer output, loader errors.

use std::path::PathBuf;
use std::time::Instant;

use memdial::tokenizer::{
    check_bpe_prefix, check_bpe_vocab, o200k_token_bytes, special_token_names,
    write_tokenizer_files, BpeDefect, Tokenizer, KIMI_N_BASE, NUM_SPECIAL_TOKENS, O200K_BASE_LEN,
};

fn scratch(name: &str) -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("tok-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The first 163 584 o200k ranks (the real K3 base count) form a prefix-closed valid BPE
/// vocabulary, so every preset size N <= 163 584 (with N >= 256) is valid too.
#[test]
fn o200k_prefix_163584_is_valid_bpe() {
    let t0 = Instant::now();
    let res = check_bpe_prefix(KIMI_N_BASE);
    println!("check_bpe_prefix({KIMI_N_BASE}) took {:?}", t0.elapsed());
    if let Err(defects) = &res {
        println!("{} defects, first: {:?}", defects.len(), &defects[..defects.len().min(20)]);
    }
    assert_eq!(res, Ok(()));

    // Cross-check with tiktoken's own merge loop (the literal criterion): with the ranks < N
    // map, every multi-byte token's bytes merge into exactly that one token.
    let t0 = Instant::now();
    let toks = o200k_token_bytes(KIMI_N_BASE).unwrap();
    let ranks = toks.iter().enumerate().map(|(r, t)| (t.clone(), r as u32)).collect();
    let mut bad = Vec::new();
    for (r, t) in toks.iter().enumerate() {
        if t.len() > 1 {
            let parts = tiktoken_rs::byte_pair_split(t, &ranks);
            if parts.len() != 1 {
                bad.push(r);
            }
        }
    }
    println!("tiktoken byte_pair_split cross-check took {:?}", t0.elapsed());
    assert!(bad.is_empty(), "{} tokens split: {:?}", bad.len(), &bad[..bad.len().min(20)]);
}

/// All 256 single bytes are among the first 256 o200k ranks, so every prefix N >= 256 can
/// encode arbitrary bytes.
#[test]
fn o200k_first_256_ranks_are_the_bytes() {
    let toks = o200k_token_bytes(256).unwrap();
    let mut seen = [false; 256];
    for t in &toks {
        assert_eq!(t.len(), 1, "{t:?}");
        seen[t[0] as usize] = true;
    }
    assert!(seen.iter().all(|&s| s));
    for n in [256, 2048, 32768] {
        assert_eq!(check_bpe_prefix(n), Ok(()), "n = {n}");
    }
}

#[test]
fn check_reports_out_of_range_and_bad_vocab() {
    assert_eq!(
        check_bpe_prefix(O200K_BASE_LEN + 1),
        Err(vec![BpeDefect::OutOfRange { requested: O200K_BASE_LEN + 1, available: O200K_BASE_LEN }])
    );
    // Removing rank 300's left part makes it unreachable.
    let mut toks = o200k_token_bytes(1000).unwrap();
    let victim = toks.iter().position(|t| t.len() == 2).unwrap();
    toks[victim] = b"\xff\xfe\xfd\xfc".to_vec();
    assert!(check_bpe_vocab(&toks).is_err());
}
