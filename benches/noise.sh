#!/usr/bin/env bash
# The shared-runner benchmark (docs/steady-state.md, "On a shared machine"):
#  1. `mini` resident, 1 and 2 threads, quiet / one busy loop / two busy loops, each
#     repeated: decode wall time, uncontended time, run-queue wait share, CPU time per token;
#  2. the ci-runner sweep (24 runs) quiet, beside one busy loop and beside two: its bottom line.
# Usage: benches/noise.sh [MODEL] [OUT]   (MODEL default fixtures/models/mini; build first:
#   cargo build --release; memdial fixture --preset mini --out fixtures/models/mini)
# Busy loops are pinned to CPU 0 (and 1): `taskset -c N sh -c 'while :; do :; done'`.
set -euo pipefail
cd "$(dirname "$0")/.."
B=./target/release/memdial
M="${1:-fixtures/models/mini}"
OUT="${2:-target/noise-bench}"
REPS="${REPS:-3}"
mkdir -p "$OUT"
loops=()
start_loops() { for i in $(seq 1 "$1"); do taskset -c $((i - 1)) sh -c 'while :; do :; done' & loops+=($!); done; }
stop_loops() { [ ${#loops[@]} -eq 0 ] || kill "${loops[@]}" 2>/dev/null || true; loops=(); }
trap stop_loops EXIT
echo "round loops threads wall_s uncontended_s wait_share cpu_s" > "$OUT/runs.txt"
for rep in $(seq 1 "$REPS"); do
  for n in 0 1 2; do
    for t in 1 2; do
      start_loops "$n"
      "$B" run --model "$M" --prompt-ids 1,2,3,4,5,6,7,8 --max-tokens 16 --threads "$t" \
        --metrics-json "$OUT/m.json" > /dev/null 2>&1
      stop_loops
      python3 - "$OUT/m.json" "$rep $n $t" >> "$OUT/runs.txt" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
g = lambda k: m.get(k) if m.get(k) is not None else float("nan")
print(sys.argv[2], "%.4f %.4f %.3f %.4f" % (g("decode_s_per_token_median"),
      g("uncontended_s_per_token_median"), g("run_queue_wait_fraction"), g("cpu_s_per_token")))
PY
    done
  done
done
python3 - "$OUT/runs.txt" <<'PY'
import statistics as st, sys
rows = [l.split() for l in open(sys.argv[1]).read().splitlines()[1:]]
print("| threads | busy loops | wall s/token | uncontended s/token | uncontended / quiet wall | wait share | CPU s/token |")
print("|---|---|---|---|---|---|---|")
for t in "12":
    quiet = st.median(float(r[3]) for r in rows if r[1] == "0" and r[2] == t)
    for n in "012":
        rs = [r for r in rows if r[1] == n and r[2] == t]
        med = lambda i: st.median(float(r[i]) for r in rs)
        print(f"| {t} | {n} | {med(3):.4f} | {med(4):.4f} | {med(4) / quiet:.2f}x | {med(5):.2f} | {med(6):.4f} |")
PY
for n in 0 1 2; do
  rm -rf "$OUT/sweep-$n"
  start_loops "$n"
  "$B" sweep --model "$M" --spec harness/sweeps/ci-runner.toml --out "$OUT/sweep-$n" > "$OUT/sweep-$n.log" 2>&1 || true
  stop_loops
  echo "== $n busy loop(s): $(tail -3 "$OUT/sweep-$n.log" | head -1)"
  grep -m1 "Bottom line" "$OUT/sweep-$n/report.md" | cut -c1-400
done
