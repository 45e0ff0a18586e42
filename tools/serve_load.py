#!/usr/bin/env python3
"""Concurrent streaming clients against a running `memdial serve` (loopback), with the
`openai` client of the oracle venv: aggregate decode tokens/s, TTFT and inter-token
latency per concurrency, each request's ids checked against `memdial run`.

  tools/serve_load.py --base-url http://127.0.0.1:8080/v1 --model-dir fixtures/models/mini \
      --clients 1,4 --rounds 5 --prompt-len 8 --max-tokens 24 [--memdial target/release/memdial]

Each round sends `c` requests at once (client i gets prompt i: different prompts route
to different experts), greedy, `ignore_eos`, `max_tokens` tokens each; rounds of the
concurrencies are interleaved (1, 4, 1, 4, ...) so both see the same machine. A
round's decode window runs from the last first token to the first last token (every
sequence decoding); aggregate decode tokens/s = tokens streamed inside the window /
its length. Bytes read per generated token come from /metrics
(memdial_store_bytes_read_total over the round / tokens generated in it). Prints one
JSON object; exit 1 if any request's ids differ from `memdial run` alone.
"""

import argparse
import json
import random
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

import openai


def prompts(n, length, vocab):
    # As examples/batch_decode.rs makes them.
    return [[(i * 7919 + j * 104729 + 17) % vocab for j in range(length)] for i in range(n)]


def run_ids(memdial, model_dir, prompt, max_tokens):
    out = subprocess.run(
        [memdial, "run", "--model", model_dir, "--prompt-ids", ",".join(map(str, prompt)),
         "--max-tokens", str(max_tokens), "--ignore-eos", "--output", "ids"],
        check=True, capture_output=True, text=True).stdout
    return [int(x) for x in out.strip().split(",")]


def metric(base, name):
    root = base.rsplit("/v1", 1)[0]
    with urllib.request.urlopen(root + "/metrics", timeout=30) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    return None


def one(client, model, prompt, max_tokens, rec):
    t0 = time.perf_counter()
    times, ids = [], []
    s = client.completions.create(model=model, prompt=prompt, max_tokens=max_tokens, temperature=0,
                                  stream=True, extra_body={"ignore_eos": True, "return_token_ids": True})
    for chunk in s:
        now = time.perf_counter()
        for c in chunk.choices:
            got = (c.model_extra or {}).get("token_ids") or []
            ids.extend(got)
            times.extend([now] * len(got))
    rec.update(t0=t0, times=times, ids=ids)


def round_(base, model, ps, max_tokens, key):
    recs = [dict() for _ in ps]
    clients = [openai.OpenAI(base_url=base, api_key=key, max_retries=0, timeout=600) for _ in ps]
    b0 = metric(base, "memdial_store_bytes_read_total")
    th = [threading.Thread(target=one, args=(clients[i], model, p, max_tokens, recs[i])) for i, p in enumerate(ps)]
    for t in th:
        t.start()
    for t in th:
        t.join()
    b1 = metric(base, "memdial_store_bytes_read_total")
    first = max(r["times"][0] for r in recs)
    last = min(r["times"][-1] for r in recs)
    inside = sum(1 for r in recs for t in r["times"] if first < t <= last)
    gen = sum(len(r["ids"]) for r in recs)
    return {
        "agg_decode_tokens_per_s": inside / (last - first) if last > first else None,
        "ttft_s": [r["times"][0] - r["t0"] for r in recs],
        "itl_s": [b - a for r in recs for a, b in zip(r["times"], r["times"][1:])],
        "bytes_per_generated_token": (b1 - b0) / gen if b0 is not None and gen else None,
        "ids": [r["ids"] for r in recs],
    }


def pct(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, int(q * len(v)))] if v else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--model-dir", required=True)
    ap.add_argument("--model", help="served model id (default: from /v1/models)")
    ap.add_argument("--api-key", default="none")
    ap.add_argument("--clients", default="1,4")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--prompt-len", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=24)
    ap.add_argument("--memdial", default="target/release/memdial")
    a = ap.parse_args()
    cs = [int(c) for c in a.clients.split(",")]
    cfg = json.load(open(a.model_dir + "/config.json"))
    vocab = cfg.get("vocab_size") or cfg["text_config"]["vocab_size"]
    ps = prompts(max(cs), a.prompt_len, vocab)
    want = [run_ids(a.memdial, a.model_dir, p, a.max_tokens) for p in ps]
    model = a.model or openai.OpenAI(base_url=a.base_url, api_key=a.api_key).models.list().data[0].id
    res = {c: [] for c in cs}
    mismatches = 0
    for _ in range(a.rounds):
        for c in cs:
            r = round_(a.base_url, model, ps[:c], a.max_tokens, a.api_key)
            mismatches += sum(1 for i, ids in enumerate(r["ids"]) if ids != want[i])
            res[c].append(r)
    out = {"clients": cs, "rounds": a.rounds, "prompt_len": a.prompt_len, "max_tokens": a.max_tokens,
           "requests_with_ids_differing_from_run": mismatches, "per_concurrency": {}}
    for c in cs:
        agg = [r["agg_decode_tokens_per_s"] for r in res[c] if r["agg_decode_tokens_per_s"]]
        ttft = [t for r in res[c] for t in r["ttft_s"]]
        itl = [t for r in res[c] for t in r["itl_s"]]
        bpt = [r["bytes_per_generated_token"] for r in res[c] if r["bytes_per_generated_token"]]
        out["per_concurrency"][c] = {
            "agg_decode_tokens_per_s_median": statistics.median(agg) if agg else None,
            "agg_decode_tokens_per_s_rounds": agg,
            "ttft_s_median": statistics.median(ttft), "ttft_s_p90": pct(ttft, 0.9),
            "itl_s_median": statistics.median(itl) if itl else None, "itl_s_p90": pct(itl, 0.9),
            "bytes_read_per_generated_token_median": statistics.median(bpt) if bpt else None,
        }
    if len(cs) >= 2:
        lo, hi = cs[0], cs[-1]
        a1 = [r["agg_decode_tokens_per_s"] for r in res[lo]]
        a2 = [r["agg_decode_tokens_per_s"] for r in res[hi]]
        rng = random.Random(0)
        boots = []
        for _ in range(2000):
            s1 = [rng.choice(a1) for _ in a1]
            s2 = [rng.choice(a2) for _ in a2]
            boots.append(statistics.median(s2) / statistics.median(s1))
        boots.sort()
        out[f"ratio_{hi}_over_{lo}"] = {
            "ratio_of_medians": statistics.median(a2) / statistics.median(a1),
            "bootstrap_95": [boots[int(0.025 * len(boots))], boots[int(0.975 * len(boots)) - 1]],
            "per_pair_median": statistics.median(y / x for x, y in zip(a1, a2)),
        }
    print(json.dumps(out, indent=1))
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
