//! cgroup v2: delegation of the memory controller to our own cgroup, and limits.

use std::path::Path;

use anyhow::Result;

use super::base::{join_cgroup, probe, write, Env, Mode, LEAF_PREFIX};

/// cgroup v2: enable the memory controller for children of our own cgroup.
pub(super) fn prepare(env: &Env, path: &str) -> std::result::Result<Mode, String> {
    let base = [env.root.clone(), env.root.join("unified")]
        .into_iter()
        .find(|b| b.join("cgroup.controllers").exists())
        .ok_or_else(|| "no cgroup v2 hierarchy is mounted".to_string())?;
    let own = join_cgroup(&base, path);
    let read = |f: &str| std::fs::read_to_string(own.join(f)).unwrap_or_default();
    let has = |t: &str| {
        t.split_whitespace()
            .any(|c| c == "memory" || c == "+memory")
    };
    if !has(&read("cgroup.controllers")) {
        return Err(format!(
            "the memory controller is not delegated to this process's cgroup v2 {}",
            own.display()
        ));
    }
    if !has(&read("cgroup.subtree_control")) {
        // No internal processes: move ourselves into a leaf, then enable memory.
        let others: Vec<String> = read("cgroup.procs")
            .split_whitespace()
            .filter(|p| *p != env.pid.to_string())
            .map(String::from)
            .collect();
        if !others.is_empty() {
            return Err(format!(
                "cgroup v2 {} holds other processes ({}), so the memory controller cannot be enabled for its children",
                own.display(),
                others.join(" ")
            ));
        }
        let leaf = own.join(format!("{LEAF_PREFIX}{}", env.pid));
        std::fs::create_dir_all(&leaf)
            .map_err(|e| format!("cannot create {}: {e}", leaf.display()))?;
        std::fs::write(leaf.join("cgroup.procs"), env.pid.to_string())
            .map_err(|e| format!("cannot move the harness into {}: {e}", leaf.display()))?;
        std::fs::write(own.join("cgroup.subtree_control"), "+memory").map_err(|e| {
            format!(
                "cannot enable the memory controller in {}: {e}",
                own.display()
            )
        })?;
    }
    probe(&own, env.pid)?;
    Ok(Mode::V2(own))
}

/// `memory.max` and `memory.swap.max = 0` (when swap accounting exists) of the
/// run cgroup `dir`.
pub(super) fn write_limits(dir: &Path, limit_bytes: u64) -> Result<()> {
    write(&dir.join("memory.max"), &limit_bytes.to_string())?;
    if dir.join("memory.swap.max").exists() {
        write(&dir.join("memory.swap.max"), "0")?;
    }
    Ok(())
}
