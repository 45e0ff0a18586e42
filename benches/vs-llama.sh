#!/usr/bin/env bash
# Resident compute against llama.cpp, interleaved (docs/benchmarks.md, "Against llama.cpp"):
# memdial on the safetensors model, llama.cpp (tools/llama-ids) on its native GGUF, the
# same 64 prompt ids and 16 generated tokens, both engines in each round, ROUNDS rounds.
# pp64 = 64 / time to first token (the prompt in one forward); tg16 = 1 / the median
# decode step. llama.cpp runs with each of the settings in LLAMA_SETTINGS
# ("passive:norepack" is the sweep's built-in llama.cpp; docs/engines.md).
# Usage: benches/vs-llama.sh MODEL GGUF [OUT]
#   MEMDIAL_LLAMA_BIN: llama_ids (tools/build-engines.sh DIR prints it);
#   MEMDIAL_KERNELS=avx2 for memdial's AVX2 path (then build llama.cpp with --portable);
#   THREADS (default 2), ROUNDS (default 3),
#   LLAMA_SETTINGS (default "passive:norepack passive:repack active:repack").
# Prints one line per run and, per engine and setting, the medians and memdial's ratios.
set -euo pipefail
cd "$(dirname "$0")/.."
B=./target/release/memdial
M="${1:?usage: benches/vs-llama.sh MODEL GGUF [OUT]}"
G="${2:?usage: benches/vs-llama.sh MODEL GGUF [OUT]}"
OUT="${3:-target/vs-llama}"
L="${MEMDIAL_LLAMA_BIN:?set MEMDIAL_LLAMA_BIN to tools/llama-ids built against llama.cpp}"
T="${THREADS:-2}"
ROUNDS="${ROUNDS:-3}"
SETTINGS="${LLAMA_SETTINGS:-passive:norepack passive:repack active:repack}"
mkdir -p "$OUT"
IDS=$(python3 -c "print(','.join(str(100 + (i * 37) % 5000) for i in range(64)))")
: > "$OUT/runs.txt"
for r in $(seq 1 "$ROUNDS"); do
  "$B" run --model "$M" --prompt-ids "$IDS" --max-tokens 16 --ignore-eos --threads "$T" \
    --output ids --metrics-json "$OUT/m.json" > /dev/null
  python3 -c "
import json; m = json.load(open('$OUT/m.json'))
print('$r memdial -', 64 / m['ttft_s'], 1 / m['decode_s_per_token_median'])" >> "$OUT/runs.txt"
  for s in $SETTINGS; do
    pol=${s%%:*}; rp=${s##*:}
    args=(--load-mode none)
    [ "$rp" = norepack ] && args+=(--no-repack)
    OMP_NUM_THREADS=$T OMP_WAIT_POLICY=$pol "$L" -m "$G" --ids "$IDS" -n 16 -t "$T" \
      "${args[@]}" --out "$OUT/l.json" > /dev/null 2>&1
    python3 -c "
import json, statistics; d = json.load(open('$OUT/l.json'))
print('$r llama.cpp $s', 64 / d['ttft_s'], 1 / statistics.median(d['decode_s_per_token']))" >> "$OUT/runs.txt"
  done
  tail -n $((1 + $(echo $SETTINGS | wc -w))) "$OUT/runs.txt"
done
python3 - "$OUT/runs.txt" <<'PY'
import statistics, sys
from collections import defaultdict
by = defaultdict(list)
for line in open(sys.argv[1]):
    r, e, s, pp, tg = line.split()
    by[(e, s)].append((int(r), float(pp), float(tg)))
mem = {r: (pp, tg) for r, pp, tg in by[("memdial", "-")]}
print(f"{'engine':10} {'setting':18} {'pp64 tok/s':>10} {'tg16 tok/s':>10} {'memdial/it pp':>14} {'memdial/it tg':>14}")
for (e, s), v in by.items():
    pp = statistics.median(x[1] for x in v)
    tg = statistics.median(x[2] for x in v)
    rp = statistics.median(mem[r][0] / x for r, x, _ in v)
    rt = statistics.median(mem[r][1] / y for r, _, y in v)
    print(f"{e:10} {s:18} {pp:10.1f} {tg:10.1f} {rp:14.2f} {rt:14.2f}")
PY
