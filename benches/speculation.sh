#!/usr/bin/env bash
# Exact speculation at `mini`'s floor + 32 MiB (docs/speculation.md): interleaved
# runs of `--speculate off` against replay:…:4 and ngram:4, medians per setting.
# Usage: benches/speculation.sh MEMDIAL MINI_DIR ROUTING_IDS_FILE OUT_DIR [REPEATS]
# ROUTING_IDS_FILE: comma-separated ids of the routing prompt (the first 32 are used).
set -euo pipefail
M=$1 MINI=$2 ROUTING=$3 OUT=$4 REPEATS=${5:-5}
mkdir -p "$OUT"
floor=$("$M" plan --model "$MINI" --max-context 64 --threads 2 --io direct --prefetch next-layer --json \
  | python3 -c 'import json,sys; print(json.load(sys.stdin)["floor_bytes"])')
budget=$((floor + 32 * 1024 * 1024))
echo "floor $floor bytes, budget $budget bytes" | tee "$OUT/budget.txt"
seq_prompt=1,2,3,4,5,6,7,8
rep_prompt=$(python3 -c 'print(",".join(str(x) for x in [101,202,303,404,505,606]*4))')
route_prompt=$(python3 -c "import sys; print(','.join(open('$ROUTING').read().strip().strip('[]').split(',')[:32]))")
run() { # name prompt max_tokens speculate
  "$M" run --model "$MINI" --prompt-ids "$2" --max-tokens "$3" --ignore-eos --max-context 64 \
    --budget "$budget" --io direct --prefetch next-layer --threads 2 --output ids \
    --speculate "$4" --metrics-json "$OUT/$1.json" > "$OUT/$1.ids"
}
# The replay drafts: the plain run's own ids.
run seq-ids "$seq_prompt" 32 off
for r in $(seq 1 "$REPEATS"); do
  run "seq-off-$r" "$seq_prompt" 32 off
  run "seq-replay4-$r" "$seq_prompt" 32 "replay:$OUT/seq-ids.ids:4"
  run "rep-off-$r" "$rep_prompt" 32 off
  run "rep-ngram4-$r" "$rep_prompt" 32 ngram:4
  run "route-off-$r" "$route_prompt" 32 off
  run "route-ngram4-$r" "$route_prompt" 32 ngram:4
done
python3 - "$OUT" "$REPEATS" <<'PY'
import json, statistics, sys
out, n = sys.argv[1], int(sys.argv[2])
def load(name): return [json.load(open(f"{out}/{name}-{r}.json")) for r in range(1, n + 1)]
def ids(name): return {open(f"{out}/{name}-{r}.ids").read() for r in range(1, n + 1)}
print("| prompt | speculate | bytes/token (MiB) | × off | s/token | × off | forwards | accepted / drafted | mean accepted | ids = off |")
print("|---|---|---|---|---|---|---|---|---|---|")
for prompt, s in [("seq", "replay4"), ("rep", "ngram4"), ("route", "ngram4")]:
    base = load(f"{prompt}-off")
    b0 = statistics.median(m["bytes_read_per_token"] for m in base)
    t0 = statistics.median(m["decode_s_per_token_median"] for m in base)
    print(f"| {prompt} | off | {b0/2**20:.1f} | 1 | {t0:.4f} | 1 | {base[0]['forwards']} | – | – | – |")
    ms = load(f"{prompt}-{s}")
    b = statistics.median(m["bytes_read_per_token"] for m in ms)
    t = statistics.median(m["decode_s_per_token_median"] for m in ms)
    same = ids(f"{prompt}-off") == ids(f"{prompt}-{s}") and len(ids(f"{prompt}-off")) == 1
    m = ms[0]
    print(f"| {prompt} | {s} | {b/2**20:.1f} | {b/b0:.3f} | {t:.4f} | {t/t0:.3f} | {m['forwards']} | "
          f"{m['accepted_tokens']} / {m['drafted_tokens']} | {m['mean_accepted_length']:.2f} | {'yes' if same else 'NO'} |")
PY
