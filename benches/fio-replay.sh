#!/bin/bash
# Direct IO at its best (issue #12): the streaming store's decode read throughput
# (bytes read during decode ÷ the time reads were in flight, `read_throughput_busy_decode_bytes_per_s`)
# against fio O_DIRECT replaying the engine's own requests at the same depth.
#
#   benches/fio-replay.sh MODEL_DIR BUDGET_BYTES [DEPTH=4] [ROUNDS=3]
#
# 1. One `memdial run --io direct --prefetch next-layer` under strace records every pread of
#    the IO threads (file, offset, length: the trunk and expert records, aligned as read).
# 2. The requests are dealt round-robin to DEPTH fio jobs (each its own slice, psync,
#    direct=1, replay_no_stall=1): the same request sizes, order and depth as the engine.
#    Lengths are clipped at the file's last whole 4 KiB page (fio treats the engine's
#    aligned over-read past EOF as an error).
# 3. ROUNDS interleaved pairs from a cold page cache: engine run, fio replay.
# Needs strace, fio, python3; the model directory must be writable for fadvise (any file
# you own). Run on a quiet machine; report `uptime` beside the figures.
set -euo pipefail
M=$1; B=$2; D=${3:-4}; R=${4:-3}
BIN=${MEMDIAL:-target/release/memdial}
T=$(mktemp -d)
evict() { python3 -c "
import os,glob
for f in glob.glob('$M/*.safetensors'):
    fd=os.open(f,os.O_RDONLY); os.posix_fadvise(fd,0,0,os.POSIX_FADV_DONTNEED); os.close(fd)"; }
run() { $BIN run --model "$M" --budget "$B" --io direct --io-threads "$D" --prefetch next-layer \
  --threads 2 --max-tokens 8 --prompt "The capital of France is" "$@" >/dev/null 2>&1; }
evict
strace -f -e trace=openat,pread64 -s 0 -o "$T/strace.txt" $BIN run --model "$M" --budget "$B" \
  --io direct --io-threads "$D" --prefetch next-layer --threads 2 --max-tokens 8 \
  --prompt "The capital of France is" >/dev/null 2>&1
python3 - "$T" "$D" <<'PY'
import os, re, sys
t, depth = sys.argv[1], int(sys.argv[2])
fds, main, pend, reqs = {}, None, {}, []
for l in open(f"{t}/strace.txt"):
    m = re.match(r'(\d+)\s+openat\(AT_FDCWD, "([^"]+)", ([^)]*)\) = (\d+)', l)
    if m:
        main = main or m.group(1)
        if "O_DIRECT" in m.group(3):
            fds[m.group(4)] = os.path.abspath(m.group(2))
        continue
    m = re.match(r'(\d+)\s+pread64\((\d+),\s+<unfinished', l)
    if m:
        pend[m.group(1)] = m.group(2)
        continue
    m = re.match(r'(\d+)\s+<\.\.\. pread64 resumed>.*, (\d+), (\d+)\)\s+= (\d+)', l)
    if m:
        fd = pend.pop(m.group(1), None)
        if fd in fds and m.group(1) != main:
            reqs.append((fds[fd], int(m.group(3)), int(m.group(2))))
        continue
    m = re.match(r'(\d+)\s+pread64\((\d+), .*, (\d+), (\d+)\)\s+= (\d+)', l)
    if m and m.group(2) in fds and m.group(1) != main:
        reqs.append((fds[m.group(2)], int(m.group(4)), int(m.group(3))))
reqs = [(p, o, min(n, (os.path.getsize(p) - o) // 4096 * 4096)) for p, o, n in reqs]
reqs = [r for r in reqs if r[2] > 0]
tot = sum(r[2] for r in reqs)
print(f"engine requests of the IO threads: {len(reqs)}, {tot/1e6:.0f} MB, "
      f"{sum(r[2] for r in reqs if r[2] > 4 << 20)/tot:.0%} of bytes in requests > 4 MiB")
files = sorted({r[0] for r in reqs})
for j in range(depth):
    with open(f"{t}/iolog{j}", "w") as f:
        f.write("fio version 2 iolog\n")
        f.writelines(f"{p} add\n" for p in files)
        f.writelines(f"{p} open\n" for p in files)
        f.writelines(f"{p} read {o} {n}\n" for i, (p, o, n) in enumerate(reqs) if i % depth == j)
        f.writelines(f"{p} close\n" for p in files)
PY
JOBS=""; for j in $(seq 0 $((D-1))); do JOBS="$JOBS --name=j$j --read_iolog=$T/iolog$j"; done
for r in $(seq 1 "$R"); do
  evict; run --metrics-json "$T/m.json"
  E=$(python3 -c "import json;m=json.load(open('$T/m.json'));print(m['read_throughput_busy_decode_bytes_per_s']/1e6)")
  evict
  F=$(fio --direct=1 --ioengine=psync --replay_no_stall=1 --group_reporting --output-format=json $JOBS 2>/dev/null \
      | python3 -c "import json,sys;t=sys.stdin.read();print(json.loads(t[t.index('{'):])['jobs'][0]['read']['bw_bytes']/1e6)")
  python3 -c "print(f'round $r, depth $D: engine {float($E):.0f} MB/s while reading, fio {float($F):.0f} MB/s, engine/fio {float($E)/float($F):.2f}')"
done
echo "load: $(uptime)"
rm -rf "$T"
