//! Whether an engine's program can start, checked before any run: the file exists
//! (found on `PATH` when it has no `/`), is a regular file we may execute, and is
//! an ELF binary of this machine's architecture or a script whose `#!` interpreter
//! can start in turn. Nothing is run.

use std::path::{Path, PathBuf};

/// Why `program` cannot start (`None`: it can, as far as can be told without running
/// it). A program of neither kind (no `#!`, not ELF) is accepted: the C library runs
/// such a file with `/bin/sh`.
pub fn cannot_start(program: &str) -> Option<String> {
    cannot_start_at(program, 0)
}

fn cannot_start_at(program: &str, depth: usize) -> Option<String> {
    let path = match resolve(program) {
        Ok(p) => p,
        Err(why) => return Some(why),
    };
    let shown = path.display();
    let meta = match std::fs::metadata(&path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Some(format!("{shown} does not exist"))
        }
        Err(e) => return Some(format!("{shown}: {e}")),
    };
    if meta.is_dir() {
        return Some(format!("{shown} is a directory, not a program"));
    }
    if !meta.is_file() {
        return Some(format!("{shown} is not a regular file"));
    }
    if !executable(&path) {
        use std::os::unix::fs::PermissionsExt;
        return Some(format!(
            "{shown} is not executable (mode {:o}; chmod +x it)",
            meta.permissions().mode() & 0o7777
        ));
    }
    let mut head = [0u8; 256];
    let n = std::fs::File::open(&path)
        .and_then(|mut f| std::io::Read::read(&mut f, &mut head))
        .unwrap_or(0);
    let head = &head[..n];
    if let Some(line) = head.strip_prefix(b"#!") {
        let line = line.split(|b| *b == b'\n').next().unwrap_or(&[]);
        let line = String::from_utf8_lossy(line);
        let mut words = line.split_whitespace();
        let Some(interp) = words.next() else {
            return Some(format!("{shown}: its #! line names no interpreter"));
        };
        if depth > 3 {
            return Some(format!("{shown}: #! interpreters nest too deep"));
        }
        if let Some(why) = cannot_start_at(interp, depth + 1) {
            return Some(format!("{shown}: its #! interpreter {why}"));
        }
        // `#!/usr/bin/env python3`: the program env looks up on PATH.
        if interp.ends_with("/env") {
            if let Some(prog) = words.find(|w| !w.starts_with('-') && !w.contains('=')) {
                if let Some(why) = cannot_start_at(prog, depth + 1) {
                    return Some(format!("{shown}: its #! line runs `env {prog}`: {why}"));
                }
            }
        }
        return None;
    }
    if head.starts_with(b"\x7fELF") {
        return elf_mismatch(head).map(|why| format!("{shown} {why}"));
    }
    None
}

/// `program` as a path: itself when it holds a `/`, else the first executable file
/// of that name on `PATH`.
fn resolve(program: &str) -> Result<PathBuf, String> {
    if program.is_empty() {
        return Err("the program is an empty string".into());
    }
    if program.contains('/') {
        return Ok(PathBuf::from(program));
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join(program))
        .find(|p| p.is_file() && executable(p))
        .ok_or_else(|| format!("{program:?} is not found on PATH"))
}

fn executable(p: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(p.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: access reads the NUL-terminated path we own.
    unsafe { libc::access(c.as_ptr(), libc::X_OK) == 0 }
}

/// Why an ELF header `head` cannot run here: another architecture (its `e_machine`)
/// or word size.
fn elf_mismatch(head: &[u8]) -> Option<String> {
    if head.len() < 20 {
        return Some("is a truncated ELF file".into());
    }
    let class = head[4];
    let machine = match head[5] {
        2 => u16::from_be_bytes([head[18], head[19]]),
        _ => u16::from_le_bytes([head[18], head[19]]),
    };
    let (want_machine, want_class, arch) = if cfg!(target_arch = "x86_64") {
        (62u16, 2u8, "x86_64")
    } else if cfg!(target_arch = "aarch64") {
        (183, 2, "aarch64")
    } else {
        return None;
    };
    if machine != want_machine || class != want_class {
        return Some(format!(
            "is an ELF binary for another architecture (e_machine {machine}, class {class}; this machine is {arch})"
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs_that_cannot_start_are_named() {
        let d = std::env::temp_dir().join(format!("memdial-program-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let w = |name: &str, text: &[u8], mode: u32| {
            use std::os::unix::fs::PermissionsExt;
            let p = d.join(name);
            std::fs::write(&p, text).unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
            p.display().to_string()
        };
        assert_eq!(cannot_start("sh"), None);
        assert_eq!(cannot_start("/bin/sh"), None);
        let ok = w("ok.sh", b"#!/bin/sh\necho hi\n", 0o755);
        assert_eq!(cannot_start(&ok), None);
        let cases = [
            ("/no/such/bin".to_string(), "/no/such/bin does not exist"),
            ("no-such-program-xyz".into(), "is not found on PATH"),
            (d.display().to_string(), "is a directory"),
            (
                w("noexec.sh", b"#!/bin/sh\n", 0o644),
                "is not executable (mode 644",
            ),
            (
                w("badinterp.sh", b"#!/no/such/interp -x\n", 0o755),
                "its #! interpreter /no/such/interp does not exist",
            ),
            (
                w("badenv.sh", b"#!/usr/bin/env no-such-python-xyz\n", 0o755),
                "runs `env no-such-python-xyz`",
            ),
            (
                // An ELF header for s390 (e_machine 22), 64-bit big-endian.
                w(
                    "s390.bin",
                    b"\x7fELF\x02\x02\x01\0\0\0\0\0\0\0\0\0\0\x02\0\x16",
                    0o755,
                ),
                "is an ELF binary for another architecture (e_machine 22",
            ),
        ];
        for (p, want) in cases {
            let why = cannot_start(&p).unwrap_or_default();
            assert!(why.contains(want), "{p}: {why:?}");
        }
        std::fs::remove_dir_all(&d).unwrap();
    }
}
