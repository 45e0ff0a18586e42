//! What the block device delivered to this process, as the kernel counts it.

/// Bytes this process (all its threads, living and exited) caused to be read from
/// block devices so far: `read_bytes` of `/proc/self/io` (the kernel counts each
/// read bio at submission, `task_io_account_read`; page-cache hits count nothing,
/// read-ahead counts in full). Equal to `getrusage` `ru_inblock` × 512.
///
/// `None` when `/proc/self/io` cannot be read (no procfs, or a kernel without
/// `CONFIG_TASK_IO_ACCOUNTING`).
pub fn device_read_bytes() -> Option<u64> {
    procfs::process::Process::myself()
        .ok()?
        .io()
        .ok()
        .map(|io| io.read_bytes)
}
