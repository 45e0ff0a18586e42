//! Shared by the criterion benches (`#[path]`-included): the calling thread's CPU
//! time as a criterion measurement, so a bench measures its own work, not the
//! waits another process on the machine causes.

use criterion::measurement::{Measurement, ValueFormatter};
use criterion::Throughput;

/// Thread CPU time in nanoseconds, as a criterion measurement.
pub struct ThreadCpu;

fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid out-pointer; CLOCK_THREAD_CPUTIME_ID is always available on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

impl Measurement for ThreadCpu {
    type Intermediate = u64;
    type Value = u64;
    fn start(&self) -> u64 {
        thread_cpu_ns()
    }
    fn end(&self, i: u64) -> u64 {
        thread_cpu_ns() - i
    }
    fn add(&self, a: &u64, b: &u64) -> u64 {
        a + b
    }
    fn zero(&self) -> u64 {
        0
    }
    fn to_f64(&self, v: &u64) -> f64 {
        *v as f64
    }
    fn formatter(&self) -> &dyn ValueFormatter {
        &NsFormatter
    }
}

struct NsFormatter;

impl ValueFormatter for NsFormatter {
    fn scale_values(&self, typical: f64, values: &mut [f64]) -> &'static str {
        let (div, unit) = if typical < 1e3 {
            (1.0, "ns (cpu)")
        } else if typical < 1e6 {
            (1e3, "µs (cpu)")
        } else if typical < 1e9 {
            (1e6, "ms (cpu)")
        } else {
            (1e9, "s (cpu)")
        };
        values.iter_mut().for_each(|v| *v /= div);
        unit
    }
    fn scale_throughputs(&self, _typical: f64, t: &Throughput, values: &mut [f64]) -> &'static str {
        let (amount, unit) = match *t {
            Throughput::Bytes(b) | Throughput::BytesDecimal(b) => (b as f64, "GB/s (cpu)"),
            Throughput::Elements(e) => (e as f64, "Gelem/s (cpu)"),
            Throughput::Bits(b) => (b as f64, "Gbit/s (cpu)"),
            Throughput::ElementsAndBytes { bytes, .. } => (bytes as f64, "GB/s (cpu)"),
        };
        // value is ns, so amount / ns = G-units per second.
        values.iter_mut().for_each(|v| *v = amount / *v);
        unit
    }
    fn scale_for_machines(&self, _values: &mut [f64]) -> &'static str {
        "ns"
    }
}
