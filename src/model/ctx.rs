//! The per-forward context: what every sublayer of one forward reads besides its own
//! weights and arena buffers (the configuration, the kernel threads and the kernels'
//! workspace), passed as one value instead of three parameters.

use super::weights::Mat;
use crate::format::config::ModelConfig;
use crate::kernels::{Par, Workspace};

/// One forward's context. The workspace is the arena's `kern`
/// ([`crate::engine::arena::Scratch`]); tests and tools may pass a fresh one
/// (results never depend on it).
pub struct Ctx<'a> {
    /// The model's configuration.
    pub cfg: &'a ModelConfig,
    /// The kernel threads.
    pub par: &'a Par,
    /// The kernels' scratch.
    pub ws: &'a mut Workspace,
}

impl Ctx<'_> {
    /// `ys: [n, rows]` = `m` applied to each row of `xs: [n, cols]` ([`Mat::mm_into`]
    /// on this forward's threads and workspace).
    pub fn mm(&mut self, m: &Mat, xs: &[f32], n: usize, ys: &mut [f32]) {
        m.mm_into(self.par, self.ws, xs, n, ys)
    }

    /// `y: [rows]` = `m x` for `x: [cols]` ([`Mat::mv_into`]).
    pub fn mv(&mut self, m: &Mat, x: &[f32], y: &mut [f32]) {
        m.mv_into(self.par, self.ws, x, y)
    }
}
