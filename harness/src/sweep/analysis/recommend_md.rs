//! The recommendation in words: the Markdown of [`Recommendation`] (why there is no
//! answer, the bottom line and its tables), apart from how it is decided
//! ([`super::recommend`]).

#![allow(unused_imports)]
use super::bottom_line::{decide, BottomLine, Candidates, NoQuiet};
use super::recommend::*;
use super::stats::PointStats;
use memdial::util::stats::bootstrap::{ratio, Ratio};

impl Recommendation {
    /// Why there is no recommendation, in Markdown: no finished run yet, runs that
    /// timed no decode step (with the fastest first token instead), only noisy runs,
    /// or only points over their budget.
    fn no_answer(&self, label: &dyn Fn(&str, u64) -> String) -> String {
        if self.finished_runs == 0 {
            return "No finished runs to recommend from yet.\n\n".into();
        }
        if self.first_token_only {
            let mut s = format!(
                "**Bottom line: no answer** — none of the {} finished run(s) timed a decode step: \
                 s/token needs at least 2 generated tokens per run (the first token is timed as the \
                 time to first token), and these generated one (`max_tokens = 1`, or a stop id first). \
                 Raise `max_tokens` to rank budgets and IO modes by decode speed.",
                self.finished_runs
            );
            if let Some((io, t)) = &self.fastest_ttft {
                s += &format!(
                    " Fastest time to first token: **{:.4} s** at {} ({io}, {}){}.",
                    t.ttft_s,
                    label(&t.budget_spec, t.budget_bytes),
                    t.prefetch,
                    if t.noisy { ", from noisy runs" } else { "" }
                );
            }
            return s + "\n\n";
        }
        if self.noisy_runs > 0 {
            return format!(
                "**Bottom line: no answer** — no quiet runs to recommend from: {} finished run(s) were marked noisy (see `noisy` in results.csv). A quieter machine would decide it.\n\n",
                self.noisy_runs
            );
        }
        format!(
            "**Bottom line: no answer** — {} finished run(s), but no point can be recommended: \
             {} point(s) went over their budget (left out; see `over_budget` in results.csv).\n\n",
            self.finished_runs,
            self.excluded_over_budget.len()
        )
    }

    /// The Markdown section (`## Recommendation`).
    pub fn markdown(&self, label: &dyn Fn(&str, u64) -> String) -> String {
        use std::fmt::Write as _;
        let mut s = String::from("## Recommendation\n\n");
        let tried = self
            .uncontended_undecided
            .as_ref()
            .map(|w| {
                format!(
                    "Uncontended times (CPU contention taken out) did not decide either: {w}.\n\n"
                )
            })
            .unwrap_or_default();
        if self.modes.iter().all(|m| m.best.is_none()) {
            s += &self.no_answer(label);
            s += &tried;
            return s;
        }
        s += &super::bottom_line::markdown(
            self.overall_knee.as_ref().zip(self.overall_best.as_ref()),
            self.bottom_line.as_ref(),
            &self.start,
            self.cold_beside.as_ref(),
            label,
        );
        s += &tried;
        let _ = writeln!(
            s,
            "| IO mode | knee (smallest budget within 10 % of its best) | best | Pareto frontier (budget → s/token) |\n|---|---|---|---|"
        );
        for m in &self.modes {
            let f = |p: &Pick| {
                format!(
                    "{} → {:.4} ({})",
                    label(&p.budget_spec, p.budget_bytes),
                    p.s_per_token,
                    p.prefetch
                )
            };
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} |",
                m.io,
                m.knee
                    .as_ref()
                    .map(|k| format!(
                        "**{}**, {} s/token ({})",
                        label(&k.budget_spec, k.budget_bytes),
                        ci(k),
                        k.settings()
                    ))
                    .unwrap_or_else(|| "–".into()),
                m.best
                    .as_ref()
                    .map(|b| format!(
                        "{} s/token at {}",
                        ci(b),
                        label(&b.budget_spec, b.budget_bytes)
                    ))
                    .unwrap_or_else(|| "–".into()),
                m.frontier.iter().map(f).collect::<Vec<_>>().join("; ")
            );
        }
        let _ = writeln!(
            s,
            "\n| budget | fastest IO mode | s/token [95% CI] | next | margin (next / fastest) [95% CI] |\n|---|---|---|---|---|"
        );
        for w in &self.by_budget {
            let (next, margin) = match (&w.runner_up, &w.margin) {
                (Some((io, p)), Some(r)) => (
                    format!("{io} ({:.4}, {})", p.s_per_token, p.prefetch),
                    r.describe(),
                ),
                (Some((io, p)), None) => (format!("{io} ({:.4})", p.s_per_token), "–".into()),
                _ => ("–".into(), "–".into()),
            };
            let _ = writeln!(
                s,
                "| {} | **{}** ({}) | {} | {} | {} |",
                label(&w.budget_spec, w.winner.budget_bytes),
                w.io,
                w.winner.settings(),
                ci(&w.winner),
                next,
                margin
            );
        }
        s.push('\n');
        if self.excluded_over_budget.is_empty() {
            s += "Every point counted was held to its budget or stayed within budget + slack.\n\n";
        } else {
            let _ = writeln!(
                s,
                "Left out: {} point(s) with runs over budget (page cache not charged to the budget): {}.\n",
                self.excluded_over_budget.len(),
                self.excluded_over_budget
                    .iter()
                    .map(|i| format!("p{i}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        s
    }
}
