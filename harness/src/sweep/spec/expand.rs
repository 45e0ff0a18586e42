//! Expanding a spec: its points (the cartesian product of the axes, in a fixed
//! order) and the run slots that repeat them.

use super::{Point, RawSpec, RunSlot, Spec};
use crate::sweep::axes::Coord;
use crate::sweep::layout::LayoutKind;
use crate::sweep::start::StartMode;

/// One combination of the later axes' values, typed.
struct Later {
    start: StartMode,
    layout: LayoutKind,
    concurrency: u32,
    speculate: Option<String>,
    depth: u32,
}

impl Spec {
    /// The values of the axes declared after engines ([`crate::sweep::axes`]), in the
    /// order they are expanded (innermost last): one `self.NAME.coords()` each.
    pub fn later_axes(&self) -> Vec<Vec<Coord>> {
        vec![
            self.start.coords(),
            self.layout.coords(),
            self.concurrency.coords(),
            self.speculate.coords(),
            self.depth.coords(),
        ]
    }

    /// All points in the fixed order (budgets, io, prefetch, cache, threads, prompts,
    /// engines, then the later axes).
    pub fn points(&self) -> Vec<Point> {
        let mut v = Vec::new();
        let multi = self.engines.len() > 1;
        let later: Vec<(Vec<Coord>, Later)> = crate::sweep::axes::product(&self.later_axes())
            .into_iter()
            .zip(self.later_values())
            .collect();
        for b in &self.budgets {
            for &io in &self.io {
                for &prefetch in &self.prefetch {
                    for &cache in &self.cache {
                        for &threads in &self.threads {
                            for prompt_index in 0..self.prompts.len() {
                                for e in &self.engines {
                                    for (axes, t) in &later {
                                        v.push(Point {
                                            index: v.len(),
                                            budget_spec: b.text.clone(),
                                            budget: b.expr,
                                            io,
                                            prefetch,
                                            cache,
                                            threads,
                                            prompt_index,
                                            engine: e.clone(),
                                            engine_in_key: multi,
                                            axes: axes.clone(),
                                            start: t.start,
                                            layout: t.layout,
                                            concurrency: t.concurrency,
                                            speculate: t.speculate.clone(),
                                            depth: t.depth,
                                        });
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        v
    }

    /// The later axes' typed values, in the order of [`crate::sweep::axes::product`]
    /// over [`Spec::later_axes`] (the first axis outermost).
    fn later_values(&self) -> Vec<Later> {
        let mut v = Vec::new();
        for &start in &self.start.0 {
            for &layout in &self.layout.0 {
                for &concurrency in &self.concurrency.0 {
                    for s in &self.speculate.0 {
                        for &depth in &self.depth.0 {
                            v.push(Later {
                                start,
                                layout,
                                concurrency,
                                speculate: (s != "off").then(|| s.clone()),
                                depth,
                            });
                        }
                    }
                }
            }
        }
        v
    }

    /// The runs of `points` in execution order: warm-up rounds first, then the measured
    /// rounds; each round visits every point once (so a partial sweep has data at
    /// every point early and slow drift is spread over all points). With `repeats =
    /// "auto"` there are `max_repeats` measured rounds; the sweep skips a point's
    /// slots once its interval is precise enough.
    pub fn runs(&self, points: &[Point]) -> Vec<RunSlot> {
        let mut v = Vec::new();
        for (warmup, n) in [
            (true, self.repetition.warmup),
            (false, self.repetition.measured),
        ] {
            for r in 0..n {
                for p in points {
                    v.push(RunSlot {
                        point: p.clone(),
                        repeat: r,
                        warmup,
                    });
                }
            }
        }
        v
    }
}

impl RawSpec {
    /// The later axes' values as written ([`Spec::later_axes`]).
    pub(super) fn later_axes(&self) -> Vec<Vec<Coord>> {
        vec![
            self.start.coords(),
            self.layout.coords(),
            self.concurrency.coords(),
            self.speculate.coords(),
            self.depth.coords(),
        ]
    }
}
