//! Facts about the machine and the model's storage, recorded in every row and in
//! the report's environment section.

use std::path::Path;

use serde::{Deserialize, Serialize};

/// Host and storage facts.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Host {
    /// Host name.
    pub host_name: String,
    /// CPU model (`/proc/cpuinfo` "model name").
    pub cpu_model: String,
    /// Logical CPUs available to this process.
    pub cpu_cores: usize,
    /// Physical memory, bytes (`MemTotal`).
    pub ram_bytes: u64,
    /// Kernel release.
    pub kernel: String,
    /// Filesystem type holding the model directory (from `/proc/self/mountinfo`).
    pub model_fs: String,
    /// Device (mount source) holding the model directory.
    pub model_device: String,
    /// Mount point holding the model directory.
    pub model_mount: String,
    /// Cold sequential O_DIRECT read bandwidth of the largest shard, GB/s (`None` when
    /// the filesystem refuses O_DIRECT).
    pub direct_cold_gbps: Option<f64>,
    /// Cold sequential buffered read bandwidth of the largest shard, GB/s (`None` when
    /// the page cache cannot be dropped, e.g. tmpfs).
    pub buffered_cold_gbps: Option<f64>,
    /// Bytes read by each bandwidth probe.
    pub bandwidth_probe_bytes: u64,
    /// Why a probe failed, if one did.
    pub bandwidth_note: Option<String>,
    /// A virtio balloon device offers free page reporting
    /// (`VIRTIO_BALLOON_F_REPORTING`, feature bit 5): memory the guest frees is
    /// returned to the host, and the next first touch of it waits for the host to back
    /// it again. See [`free_page_reporting`]. Absent in `sweep.json` files written
    /// before this field existed.
    #[serde(default)]
    pub free_page_reporting: bool,
}

/// True when a virtio balloon device under `sysfs_virtio` (normally
/// `/sys/bus/virtio/devices`) has negotiated free page reporting: its `device` file
/// reads `0x0005` (balloon) and its `features` bit string has a `1` at index 5
/// (`VIRTIO_BALLOON_F_REPORTING`, virtio spec 5.5.3). On such a virtual machine memory
/// freed by one run is handed back to the host, so the next run's fresh buffers can be
/// slower to fill (measured on the dev VM: `docs/io.md` §2).
pub fn free_page_reporting(sysfs_virtio: &Path) -> bool {
    let Ok(dir) = std::fs::read_dir(sysfs_virtio) else {
        return false;
    };
    dir.flatten().any(|d| {
        let r = |f: &str| std::fs::read_to_string(d.path().join(f)).unwrap_or_default();
        r("device").trim() == "0x0005" && r("features").as_bytes().get(5) == Some(&b'1')
    })
}

fn read(p: &str) -> String {
    std::fs::read_to_string(p)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// Unescapes the octal escapes (`\040` = space) of `/proc/self/mountinfo`.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() {
            let digits = std::str::from_utf8(&b[i + 1..i + 4]).unwrap_or("");
            if let Ok(v) = u8::from_str_radix(digits, 8) {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// (mount point, fs type, source) of the mount holding `path` (longest prefix).
pub fn mount_of(path: &Path) -> Option<(String, String, String)> {
    let canon = std::fs::canonicalize(path).ok()?;
    let text = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let mut best: Option<(String, String, String)> = None;
    for line in text.lines() {
        // id parent major:minor root mountpoint opts [optional...] - fstype source superopts
        let (pre, post) = line.split_once(" - ")?;
        let mp = unescape(pre.split(' ').nth(4)?);
        let mut it = post.split(' ');
        let fs = it.next()?.to_string();
        let src = unescape(it.next().unwrap_or(""));
        if canon.starts_with(&mp) && best.as_ref().map(|b| mp.len() >= b.0.len()).unwrap_or(true) {
            best = Some((mp, fs, src));
        }
    }
    best
}

impl Host {
    /// Collects the facts for a model stored in `model_dir` (no bandwidth probe).
    pub fn collect(model_dir: &Path) -> Host {
        let cpu_model = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|t| {
                t.lines()
                    .find(|l| l.starts_with("model name"))
                    .and_then(|l| l.split_once(':'))
                    .map(|(_, v)| v.trim().to_string())
            })
            .unwrap_or_else(|| std::env::consts::ARCH.to_string());
        let ram_bytes = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|t| {
                t.lines()
                    .find(|l| l.starts_with("MemTotal:"))
                    .and_then(|l| l.split_whitespace().nth(1))
                    .and_then(|v| v.parse::<u64>().ok())
            })
            .unwrap_or(0)
            * 1024;
        let (model_mount, model_fs, model_device) = mount_of(model_dir).unwrap_or_default();
        Host {
            host_name: read("/proc/sys/kernel/hostname"),
            cpu_model,
            cpu_cores: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1),
            ram_bytes,
            kernel: read("/proc/sys/kernel/osrelease"),
            model_fs,
            model_device,
            model_mount,
            free_page_reporting: free_page_reporting(Path::new("/sys/bus/virtio/devices")),
            ..Default::default()
        }
    }

    /// Measures cold direct and buffered read bandwidth on `file` (up to `max_bytes`).
    pub fn probe_bandwidth(&mut self, file: &Path, max_bytes: u64) {
        use memdial::tools::iobench::probe as bench;
        self.bandwidth_probe_bytes = std::fs::metadata(file)
            .map(|m| m.len().min(max_bytes))
            .unwrap_or(0);
        let mut notes = vec![];
        match bench::direct_cold_gbps(file, max_bytes) {
            Ok(g) => self.direct_cold_gbps = Some(g),
            Err(e) => notes.push(format!("direct: {e:#}")),
        }
        match bench::buffered_cold_gbps(file, max_bytes) {
            Ok(g) => self.buffered_cold_gbps = Some(g),
            Err(e) => notes.push(format!("buffered: {e:#}")),
        }
        self.bandwidth_note = (!notes.is_empty()).then(|| notes.join("; "));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn collects_something() {
        let h = Host::collect(Path::new("."));
        assert!(h.cpu_cores >= 1);
        assert!(!h.model_fs.is_empty());
        assert_eq!(unescape("/a\\040b"), "/a b");
    }

    /// A fake sysfs: a block device (id 2), then a balloon (id 5) without and with
    /// feature bit 5 (the dev VM's balloon reads `0110010…`).
    #[test]
    fn free_page_reporting_reads_the_balloon_feature_bit() {
        let root = memdial_testkit::scratch_in(std::env::temp_dir(), "host-fpr");
        let dev = |name: &str, id: &str, features: &str| {
            let d = root.join(name);
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("device"), format!("{id}\n")).unwrap();
            std::fs::write(d.join("features"), format!("{features}\n")).unwrap();
        };
        assert!(!free_page_reporting(&root.join("missing")));
        dev("virtio0", "0x0002", "0010001001100100");
        assert!(!free_page_reporting(&root));
        dev("virtio1", "0x0005", "0110000000000000");
        assert!(!free_page_reporting(&root));
        dev("virtio1", "0x0005", "0110010100000000");
        assert!(free_page_reporting(&root));
    }
}
