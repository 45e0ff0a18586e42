//! Speculative verification passes made from a plain trace: what `memdial simulate
//! --speculate K --mean-accepted-length L` replays instead of the trace's one-token
//! decode forwards (docs/speculation.md).
//!
//! Pass `j` starts at generated token `round(j · (L + 1))` and carries `K + 1` rows: the
//! tokens it emits and, standing in for the drafts it rejects, the positions after them
//! (a plain trace holds no routing of rejected drafts; the next positions' routing is the
//! nearest recorded stand-in). Rows are cut at the trace's last decode position.

use anyhow::{bail, Result};

use crate::store::trace::ForwardRecord;

/// A speculating run to model: `draft_tokens` (`K`) drafts per pass, `accepted`
/// (`L`, `0 ..= K`) of them accepted per pass on average.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Speculation {
    pub draft_tokens: usize,
    pub accepted: f64,
}

/// The passes replacing `decode` (one-token forwards at consecutive positions, as plain
/// decoding records them): `(position, ids)` per pass, every pass with logits.
///
/// Errors: a decode forward of more than one token, or positions that are not
/// consecutive (a trace of a batched or speculating run).
pub fn passes(decode: &[ForwardRecord], s: Speculation) -> Result<Vec<(usize, Vec<usize>)>> {
    for (i, f) in decode.iter().enumerate() {
        if f.ids.len() != 1 {
            bail!(
                "decode forward at position {} ran {} tokens: simulating speculation needs a \
                 trace of plain one-token decoding",
                f.forward,
                f.ids.len()
            );
        }
        if i > 0 && f.forward != decode[i - 1].forward + 1 {
            bail!(
                "decode forwards at positions {} and {} are not consecutive: simulating \
                 speculation needs a trace of one plain sequence",
                decode[i - 1].forward,
                f.forward
            );
        }
    }
    let step = s.accepted + 1.0;
    let mut out = Vec::new();
    let mut j = 0usize;
    loop {
        let start = (j as f64 * step).round() as usize;
        if start >= decode.len() {
            break;
        }
        let end = (start + s.draft_tokens + 1).min(decode.len());
        out.push((
            decode[start].forward,
            decode[start..end].iter().map(|f| f.ids[0]).collect(),
        ));
        j += 1;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain(n: usize) -> Vec<ForwardRecord> {
        (0..n)
            .map(|i| ForwardRecord {
                forward: 8 + i,
                ids: vec![100 + i],
                logits: 1,
            })
            .collect()
    }

    #[test]
    fn passes_start_every_l_plus_one_tokens_and_carry_k_plus_one_rows() {
        // K = 4, L = 1.5: starts round(0), round(2.5) = 3 (half away from zero),
        // round(5) = 5, round(7.5) = 8; 9 decode positions 8..=16.
        let p = passes(
            &plain(9),
            Speculation {
                draft_tokens: 4,
                accepted: 1.5,
            },
        )
        .unwrap();
        let want: Vec<(usize, Vec<usize>)> = vec![
            (8, vec![100, 101, 102, 103, 104]),
            (11, vec![103, 104, 105, 106, 107]),
            (13, vec![105, 106, 107, 108]),
            (16, vec![108]),
        ];
        assert_eq!(p, want);
        // Every draft accepted: passes tile the positions.
        let all = passes(
            &plain(7),
            Speculation {
                draft_tokens: 2,
                accepted: 2.0,
            },
        )
        .unwrap();
        assert_eq!(
            all.iter()
                .map(|(p, ids)| (*p, ids.len()))
                .collect::<Vec<_>>(),
            vec![(8, 3), (11, 3), (14, 1)]
        );
    }

    #[test]
    fn a_trace_that_is_not_plain_decoding_is_refused() {
        let mut t = plain(3);
        t[1].ids.push(7);
        let s = Speculation {
            draft_tokens: 2,
            accepted: 1.0,
        };
        assert!(passes(&t, s)
            .unwrap_err()
            .to_string()
            .contains("ran 2 tokens"));
        let mut t = plain(3);
        t[2].forward += 1;
        assert!(passes(&t, s)
            .unwrap_err()
            .to_string()
            .contains("not consecutive"));
    }
}
