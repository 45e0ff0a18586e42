#!/usr/bin/env python3
"""Direct IO at its best: the streaming store's decode read throughput against
fio O_DIRECT replaying the engine's own decode reads (same files, offsets, lengths, order).

    benches/fio-replay.py MODEL_DIR BUDGET_BYTES [--depth 4] [--rounds 6] [--reserve-hugepages]

Every figure is the same quantity: bytes read ÷ the time at least one of those reads was in
flight ("busy time"), in MB/s (10^6 bytes/s).
- engine: `read_throughput_busy_decode_bytes_per_s` of `memdial run --io direct --prefetch
  next-layer --io-threads DEPTH` (bytes its IO threads read during decode ÷ their busy time);
- fio timed: one fio job replays the decode reads at the times the engine issued them (iolog
  version 3, microsecond timestamps, `ioengine=io_uring iodepth=DEPTH direct=1`), so it sees
  the engine's request sizes, order, pauses and depth profile; its busy time is the union of
  the reads' [issue, completion] intervals from fio's per-read latency log;
- fio no-stall: the same reads back to back (iolog version 2, `replay_no_stall=1`), DEPTH
  always in flight: what the device gives when the queue never runs dry (busy = runtime).

fio's IO buffers must be in 2 MiB pages like the engine's (`AlignedBuf` asks for transparent
huge pages): a direct read into 4 KiB pages becomes one bio segment per page, and the virtio
disk's `max_segments` (254 here) cuts it into requests of ≤ 1016 KiB (measured: 401 KiB on
average against 1111 KiB into 2 MiB pages, 2.8× the requests, and 1.8× slower); fio's default
`malloc` buffers measured 0.30–0.37 GB/s on the engine's reads where `--mem=shmhuge` got
1.13–1.32 GB/s. fio can only get 2 MiB pages from hugetlbfs (`--mem=shmhuge`), so the script
uses it when enough hugetlb pages are free (`--reserve-hugepages`, as root, reserves them for
the run and restores `vm.nr_hugepages`), and warns otherwise.

1. One traced run (`strace -f -ttt -T -e pread64`) lists the IO threads' reads (file, offset,
   aligned length, start, end). Decode reads are the last `bytes_read_total − prefill_bytes_read
   − bytes_read_load` bytes in completion order. From the trace alone the script prints the
   engine's busy-time throughput (a cross-check of the engine's own figure) and its depth
   profile (share of busy time with 1, 2, … reads in flight).
2. ROUNDS rounds from a cold page cache, the order alternating (engine first in odd rounds,
   last in even ones), so that a drift in the machine's load does not favour one side. A
   round during which the device read > 10 % more than the runs themselves is flagged
   (someone else was reading).
The summary is the median of the per-round ratios with their range.

Needs strace, fio ≥ 3.31 (iolog v3, io_uring), python3 ≥ 3.8; run as a user who may fadvise
the model's files. Lengths are clipped at the file's last whole 4 KiB page (fio refuses the
engine's aligned over-read past EOF). Quote `uptime` beside the figures: on a shared virtual
disk the rate swings 2–3× between consecutive runs, and only interleaved rounds compare.
"""
import argparse
import glob
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time


def evict(model):
    for f in glob.glob(os.path.join(model, "*.safetensors")):
        fd = os.open(f, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)


def device_of(path):
    st = os.stat(path)
    mm = f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
    name = os.path.basename(os.path.realpath(f"/sys/dev/block/{mm}"))
    if os.path.exists(f"/sys/dev/block/{mm}/partition"):
        name = os.path.basename(os.path.dirname(os.path.realpath(f"/sys/dev/block/{mm}")))
    return name


def diskstats(dev):
    """(sectors read, io_ticks ms) of block device `dev`."""
    for l in open("/proc/diskstats"):
        f = l.split()
        if f[2] == dev:
            return int(f[5]), int(f[12])
    return None


def engine_cmd(a, extra):
    return [a.memdial, "run", "--model", a.model, "--budget", str(a.budget), "--io", "direct",
            "--io-threads", str(a.depth), "--prefetch", "next-layer", "--threads", str(a.threads),
            "--max-tokens", str(a.tokens), "--prompt", a.prompt] + extra


def parse_trace(path):
    """IO-thread O_DIRECT preads: (start s, end s, file, offset, length)."""
    fds, main, pend, reqs = {}, None, {}, []
    for l in open(path):
        m = re.match(r'(\d+)\s+([\d.]+)\s+openat\(AT_FDCWD, "([^"]+)", ([^)]*)\) = (\d+)', l)
        if m:
            main = main or m.group(1)
            if "O_DIRECT" in m.group(4):
                fds[m.group(5)] = os.path.abspath(m.group(3))
            else:
                fds.pop(m.group(5), None)
            continue
        m = re.match(r'(\d+)\s+([\d.]+)\s+pread64\((\d+),\s+<unfinished', l)
        if m:
            pend[m.group(1)] = m.group(3)
            continue
        m = re.match(r'(\d+)\s+([\d.]+)\s+<\.\.\. pread64 resumed>.*, (\d+), (\d+)\)\s+= \d+ <([\d.]+)>', l)
        if m:
            fd = pend.pop(m.group(1), None)
            if fd in fds and m.group(1) != main:
                t1 = float(m.group(2))
                reqs.append((t1 - float(m.group(5)), t1, fds[fd], int(m.group(4)), int(m.group(3))))
            continue
        m = re.match(r'(\d+)\s+([\d.]+)\s+pread64\((\d+), .*, (\d+), (\d+)\)\s+= \d+ <([\d.]+)>', l)
        if m and m.group(3) in fds and m.group(1) != main:
            t0 = float(m.group(2))
            reqs.append((t0, t0 + float(m.group(6)), fds[m.group(3)], int(m.group(5)), int(m.group(4))))
    return reqs


def depth_profile(reqs):
    """(busy seconds, mean depth while busy, {depth: share of busy time})."""
    ev = sorted([(r[0], 1) for r in reqs] + [(r[1], -1) for r in reqs])
    depth, last, busy, w, hist = 0, 0.0, 0.0, 0.0, {}
    for t, d in ev:
        if depth > 0:
            busy += t - last
            w += depth * (t - last)
            hist[depth] = hist.get(depth, 0.0) + t - last
        depth += d
        last = t
    return busy, w / busy if busy else 0.0, {k: v / busy for k, v in sorted(hist.items())}


def fio_run(log, depth, timed, t, mem):
    """fio replaying `log` at `depth`: (bytes ÷ busy time, bytes). Busy time is the union of
    the reads' [issue, completion] intervals from fio's per-read latency log (completion in ms,
    latency in ns); without stalls fio is never idle and it is the job's runtime."""
    for f in glob.glob(f"{t}/fiolat*"):
        os.remove(f)
    cmd = ["fio", "--name=replay", f"--read_iolog={log}", "--direct=1", "--ioengine=io_uring",
           f"--iodepth={depth}", "--thread", "--readonly", "--output-format=json", f"--mem={mem}"]
    if timed:
        cmd += ["--replay_no_stall=0", f"--write_lat_log={t}/fiolat", "--log_avg_msec=0"]
    else:
        cmd += ["--replay_no_stall=1"]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"fio failed: {out.stderr.strip()}")
    r = json.loads(out.stdout[out.stdout.index("{"):])["jobs"][0]["read"]
    if not timed:
        return r["bw_bytes"], r["io_bytes"]
    iv = []
    for f in glob.glob(f"{t}/fiolat_lat.*.log"):
        for l in open(f):
            x = [v.strip() for v in l.split(",")]
            end = int(x[0]) / 1e3
            iv.append((end - int(x[1]) / 1e9, end))
    busy, _, _ = depth_profile([(s0, s1, None, 0, 0) for s0, s1 in iv])
    return r["io_bytes"] / busy, r["io_bytes"]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model")
    p.add_argument("budget", type=int, help="bytes (e.g. the floor from `memdial plan`)")
    p.add_argument("--depth", type=int, default=4, help="engine --io-threads and fio iodepth")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--tokens", type=int, default=8)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--prompt", default="The capital of France is")
    p.add_argument("--reserve-hugepages", action="store_true",
                   help="as root: reserve the hugetlb pages fio's buffers need for the run, then restore")
    p.add_argument("--memdial", default=os.environ.get("MEMDIAL", "target/release/memdial"))
    a = p.parse_args()
    dev = device_of(a.model)
    t = tempfile.mkdtemp(prefix="fio-replay-")

    evict(a.model)
    subprocess.run(["strace", "-f", "--seccomp-bpf", "-ttt", "-T", "-e", "trace=openat,pread64",
                    "-s", "0", "-o", f"{t}/strace.txt"]
                   + engine_cmd(a, ["--metrics-json", f"{t}/traced.json"]),
                   check=True, capture_output=True)
    m = json.load(open(f"{t}/traced.json"))
    reqs = parse_trace(f"{t}/strace.txt")
    decode_bytes = m["bytes_read_total"] - m["prefill_bytes_read"] - m["bytes_read_load"]
    reqs.sort(key=lambda r: r[1])
    acc, k = 0, len(reqs)
    while k > 0 and acc < decode_bytes:
        k -= 1
        acc += reqs[k][4]
    dec = sorted(reqs[k:], key=lambda r: r[0])
    busy, mean_depth, hist = depth_profile(dec)
    b = sum(r[4] for r in dec)
    sizes = sorted(r[4] for r in dec)
    print(f"traced run: {len(dec)} decode reads of the IO threads, {b / 1e6:.0f} MB "
          f"(engine counted {decode_bytes / 1e6:.0f} MB), median {sizes[len(sizes) // 2] / 2**20:.2f} MiB, "
          f"{sum(s for s in sizes if s > 4 << 20) / b:.0%} of bytes in reads > 4 MiB")
    print(f"traced run: busy {busy:.3f} s -> {b / busy / 1e6:.0f} MB/s by the trace, "
          f"{m['read_throughput_busy_decode_bytes_per_s'] / 1e6:.0f} MB/s by the engine; depth while busy: "
          f"mean {mean_depth:.2f}, " + ", ".join(f"{d}: {s:.0%}" for d, s in hist.items()))
    files = sorted({r[2] for r in dec})
    t0 = dec[0][0]
    logs = {}
    for ver in (2, 3):
        logs[ver] = f"{t}/decode-v{ver}.iolog"
        ts = (lambda x: "") if ver == 2 else (lambda x: f"{round((x - t0) * 1e6)} ")
        with open(logs[ver], "w") as f:
            f.write(f"fio version {ver} iolog\n")
            f.writelines(f"{ts(t0)}{x} add\n" for x in files)
            f.writelines(f"{ts(t0)}{x} open\n" for x in files)
            for s0, _, x, o, n in dec:
                n = min(n, (os.path.getsize(x) - o) // 4096 * 4096)
                if n > 0:
                    f.write(f"{ts(s0)}{x} read {o} {n}\n")
            f.writelines(f"{ts(dec[-1][1])}{x} close\n" for x in files)

    def engine():
        subprocess.run(engine_cmd(a, ["--metrics-json", f"{t}/m.json"]), check=True,
                       capture_output=True)
        mm = json.load(open(f"{t}/m.json"))
        return mm["read_throughput_busy_decode_bytes_per_s"], mm["bytes_read_total"]

    # fio's IO buffers in 2 MiB pages, as the engine's (see the module doc): hugetlb pages
    # for depth × the largest read.
    need = (a.depth * max(r[4] for r in dec)) // (2 << 20) + 3
    mem, restore = "malloc", None
    free = int(next(l.split()[1] for l in open("/proc/meminfo") if l.startswith("HugePages_Free")))
    if free < need and a.reserve_hugepages:
        restore = int(open("/proc/sys/vm/nr_hugepages").read())
        open("/proc/sys/vm/nr_hugepages", "w").write(str(restore + need - free))
        free = int(next(l.split()[1] for l in open("/proc/meminfo") if l.startswith("HugePages_Free")))
    if free >= need:
        mem = "shmhuge"
        print(f"fio IO buffers: hugetlb 2 MiB pages (--mem=shmhuge, {need} pages)")
    else:
        print(f"WARNING: fio IO buffers in 4 KiB pages ({free} free hugetlb pages, {need} needed; "
              f"rerun with --reserve-hugepages as root, or `sysctl vm.nr_hugepages={need}`): each read is "
              f"cut into more device requests than the engine's, so fio's figure is too low")
    cols = ["engine", "fio timed", "fio no-stall"]
    runs = {"engine": engine,
            "fio timed": lambda: fio_run(logs[3], a.depth, True, t, mem),
            "fio no-stall": lambda: fio_run(logs[2], a.depth, False, t, mem)}
    ratios = {c: [] for c in cols[1:]}
    print(f"{'round':>5} " + " ".join(f"{c + ' MB/s':>18}" for c in cols)
          + "   engine/fio timed, engine/fio no-stall")
    for r in range(1, a.rounds + 1):
        res, foreign = {}, False
        for c in (cols if r % 2 else cols[::-1]):
            evict(a.model)
            d0 = diskstats(dev)
            v, own = runs[c]()
            d1 = diskstats(dev)
            res[c] = v
            foreign |= d0 is not None and (d1[0] - d0[0]) * 512 > 1.1 * own
        for c in cols[1:]:
            ratios[c].append(res["engine"] / res[c])
        print(f"{r:>5} " + " ".join(f"{res[c] / 1e6:>18.0f}" for c in cols) + "   "
              + ", ".join(f"{res['engine'] / res[c]:.2f}" for c in cols[1:])
              + ("   (the device read > 10 % more than these runs: other readers)" if foreign else ""))
    for c in cols[1:]:
        v = ratios[c]
        print(f"engine/{c} (iodepth {a.depth}): median {statistics.median(v):.2f} "
              f"[{min(v):.2f}–{max(v):.2f}] over {len(v)} rounds")
    print("load:", open("/proc/loadavg").read().strip())
    if restore is not None:
        open("/proc/sys/vm/nr_hugepages", "w").write(str(restore))
    for f in os.listdir(t):
        os.remove(os.path.join(t, f))
    os.rmdir(t)


if __name__ == "__main__":
    main()
