//! cgroup v1: per-run cgroups nested in this process's own memory cgroup.

use std::path::Path;

use anyhow::Result;

use super::base::{join_cgroup, probe, write, Env, Mode, Support};

/// Detection when `/proc/self/cgroup` has a v1 `memory` line with path `path`:
/// available when our own memory cgroup is visible and a child can be made.
pub(super) fn detect(env: &Env, path: &str) -> Support {
    let own = join_cgroup(&env.root.join("memory"), path);
    if !own.join("memory.limit_in_bytes").exists() {
        return Support::Unavailable(format!(
            "this process's cgroup v1 memory cgroup {} is not visible (no memory.limit_in_bytes)",
            own.display()
        ));
    }
    match probe(&own, env.pid) {
        Ok(()) => Support::Available(Mode::V1(own)),
        Err(e) => Support::Unavailable(e),
    }
}

/// `memory.limit_in_bytes`, `memory.memsw.limit_in_bytes` (when swap accounting
/// exists) and `memory.swappiness = 0` of the run cgroup `dir`.
pub(super) fn write_limits(dir: &Path, limit_bytes: u64) -> Result<()> {
    write(&dir.join("memory.limit_in_bytes"), &limit_bytes.to_string())?;
    if dir.join("memory.memsw.limit_in_bytes").exists() {
        write(
            &dir.join("memory.memsw.limit_in_bytes"),
            &limit_bytes.to_string(),
        )?;
    }
    let _ = write(&dir.join("memory.swappiness"), "0");
    Ok(())
}
