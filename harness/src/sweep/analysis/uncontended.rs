//! The second-best evidence for the bottom line: each run's **uncontended** decode
//! times (wall time minus the compute threads' mean run-queue wait per step, as the
//! run measured it: `uncontended_s_per_token` of `--metrics-json`).
//!
//! On a shared machine a neighbour's CPU use marks runs `noisy` and leaves the wall
//! times too few to decide. The uncontended time takes out what CPU contention added,
//! so runs marked noisy *only* for CPU contention (other processes' CPU, the run's own
//! wait, CPU pressure) are usable in it; runs a neighbour's disk reads or the
//! hypervisor's steal disturbed stay out, since those are not corrected. The bottom
//! line uses these times only when the wall times do not decide
//! ([`crate::sweep::analysis::bottom_line::DecidedOn`]).

use memdial::tools::noise::{Noise, Thresholds};

use super::bottom_line::DecidedOn;
use super::recommend::{recommend_steady, Recommendation};
use super::stats::{per_point, point_runs, PointStats};
use crate::sweep::record::row::Row;

/// The rows with every memdial run's decode times replaced by its uncontended ones and
/// its `noisy` mark recomputed without the CPU-contention figures; rows without
/// uncontended figures (other engines, older sweeps) are kept as they are. `None` when
/// no measured row has uncontended figures (nothing to decide on).
pub fn rows_of(rows: &[Row], t: &Thresholds) -> Option<Vec<Row>> {
    let has = |r: &Row| r.is_measured_ok() && !r.metrics.uncontended_s_per_token.is_empty();
    if !rows.iter().any(has) {
        return None;
    }
    Some(
        rows.iter()
            .map(|r| {
                let mut r = r.clone();
                if has(&r) {
                    r.metrics.decode_s_per_token = r.metrics.uncontended_s_per_token.clone();
                    r.metrics.decode_s_per_token_median = r.metrics.uncontended_s_per_token_median;
                    r.noisy = uncorrected_noise(&r, t);
                }
                r
            })
            .collect(),
    )
}

/// The recommendation decided on uncontended times (`reference` picks the points
/// recommended from, as for the wall times),
/// when the wall-time one `wall` is not clear and the uncontended one is (`Ok(Some)`);
/// `Ok(None)` when the wall-time answer is clear or no run has uncontended figures;
/// `Err(why)` when they were tried and did not decide either.
pub fn decide(
    wall: &Recommendation,
    rows: &[Row],
    t: &Thresholds,
    reference: &dyn Fn(&[PointStats]) -> Vec<PointStats>,
) -> Result<Option<Recommendation>, String> {
    if wall.bottom_line.as_ref().is_some_and(|b| b.clear()) {
        return Ok(None);
    }
    let Some(urows) = rows_of(rows, t) else {
        return Ok(None);
    };
    let ustats = per_point(&urows);
    let mut u = recommend_steady(&reference(&ustats), &point_runs(&urows));
    match u.bottom_line.as_mut().filter(|b| b.clear()) {
        Some(bl) => {
            bl.decided_on = DecidedOn::Uncontended;
            // The counts keep their meaning: runs the wall-time answer left out as noisy.
            bl.noisy_runs = wall.bottom_line.as_ref().map_or(0, |b| b.noisy_runs);
            Ok(Some(u))
        }
        None => {
            let measured: Vec<&Row> = urows.iter().filter(|r| r.is_measured_ok()).collect();
            let still: Vec<&&Row> = measured.iter().filter(|r| r.noisy.is_some()).collect();
            let count = |what: &str| {
                still
                    .iter()
                    .filter(|r| r.noisy.as_deref().is_some_and(|n| n.contains(what)))
                    .count()
            };
            let mut why = format!(
                "{} of {} measured runs stay out, disturbed by what they do not correct",
                still.len(),
                measured.len()
            );
            let (disk, steal) = (count("read from the model's disk"), count("CPU steal"));
            if disk + steal > 0 {
                why += &format!(
                    " ({disk} by other processes' reads on the model's disk, {steal} by CPU steal)"
                );
            }
            if let Some(bl) = &u.bottom_line {
                why += &format!("; {}", bl.undecided.join("; "));
            }
            Err(why)
        }
    }
}

/// Why `r` is noisy on what the uncontended time does not correct (steal, foreign
/// reads on the model's disk), or `None`.
fn uncorrected_noise(r: &Row, t: &Thresholds) -> Option<String> {
    let Some(wall_s) = r.wall_s else {
        return r.noisy.clone();
    };
    Noise {
        wall_s,
        other_cpu_s: 0.0,
        steal_s: r.noise_steal_s.unwrap_or(0.0),
        psi_cpu_some_s: None,
        psi_io_some_s: r.noise_psi_io_s,
        foreign_read_bytes: r.noise_foreign_read_bytes,
        run_queue_wait_fraction: None,
    }
    .noisy(t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sweep::record::status::RunStatus;

    fn row(noisy: Option<&str>, foreign: u64, unc: Vec<f64>) -> Row {
        let mut r = Row {
            status: RunStatus::Ok,
            wall_s: Some(2.0),
            noisy: noisy.map(String::from),
            noise_foreign_read_bytes: Some(foreign),
            noise_steal_s: Some(0.0),
            ..Row::default()
        };
        r.metrics.decode_s_per_token = vec![0.2, 0.4];
        r.metrics.decode_s_per_token_median = Some(0.3);
        r.metrics.uncontended_s_per_token_median = memdial::util::stats::median(&unc);
        r.metrics.uncontended_s_per_token = unc;
        r
    }

    /// Two points, three runs each, every run noisy for a neighbour's CPU: the wall
    /// times give no answer; the uncontended ones (1.0 s at budget 100, 0.5 s at
    /// 200, every token) decide 200 clearly — the ratio 2 is far above 1.10 and the
    /// interval of constant runs has no width.
    #[test]
    fn all_cpu_noisy_runs_decide_on_their_uncontended_times() {
        let mut all = vec![];
        for (i, (bytes, unc)) in [(100u64, 1.0), (200, 0.5)].into_iter().enumerate() {
            for rep in 0..3 {
                let mut r = row(Some("other processes used 1.00 cores"), 0, vec![unc; 4]);
                r.point_index = i;
                r.repeat = rep;
                r.budget_spec = format!("b{bytes}");
                r.budget_bytes = bytes;
                r.threads = 2;
                r.metrics.decode_s_per_token = vec![unc * 3.0; 4];
                r.metrics.decode_s_per_token_median = Some(unc * 3.0);
                all.push(r);
            }
        }
        let wall = recommend_steady(&per_point(&all), &point_runs(&all));
        assert!(
            wall.bottom_line.as_ref().is_none_or(|b| !b.clear()),
            "{wall:?}"
        );
        let u = rows_of(&all, &Thresholds::default()).unwrap();
        let rec = recommend_steady(&per_point(&u), &point_runs(&u));
        let bl = rec.bottom_line.as_ref().unwrap();
        assert!(bl.clear(), "{bl:?}");
        assert_eq!(bl.group[0].1.point_index, 1);
    }

    #[test]
    fn cpu_noise_is_corrected_disk_noise_is_not() {
        let t = Thresholds::default();
        let cpu = row(
            Some("other processes used 1.00 cores (threshold 0.25)"),
            0,
            vec![0.1, 0.12],
        );
        let disk = row(Some("64 MiB read …"), 64 << 20, vec![0.1, 0.1]);
        let other_engine = row(Some("other processes used 1.00 cores"), 0, vec![]);
        let out = rows_of(&[cpu, disk, other_engine], &t).unwrap();
        assert_eq!(out[0].metrics.decode_s_per_token, vec![0.1, 0.12]);
        assert_eq!(out[0].metrics.decode_s_per_token_median, Some(0.11));
        assert_eq!(out[0].noisy, None);
        assert!(out[1]
            .noisy
            .as_deref()
            .unwrap()
            .contains("read from the model's disk by others"));
        // Without uncontended figures: untouched.
        assert_eq!(out[2].metrics.decode_s_per_token, vec![0.2, 0.4]);
        assert!(out[2].noisy.is_some());
        assert!(rows_of(&out[2..], &t).is_none());
    }
}
