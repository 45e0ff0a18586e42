#!/bin/bash
# Interleaved runs of both layouts at the larger floor, direct, next-layer.
cd /work/wt-i29
B=./target/release/memdial
FL=$($B run --model fixtures/models/mini-lossless --budget 1MB --prefetch next-layer --max-context 32 --prompt "x" --max-tokens 16 2>&1 | grep -o "floor of [0-9.]* MiB" | grep -o "[0-9.]*")
echo "packed floor $FL MiB" > /tmp/i29/measure.log
cp $B /tmp/i29/memdial-measure
for r in 1 2 3 4; do
  for m in mini mini-lossless; do
    uptime >> /tmp/i29/measure.log
    /tmp/i29/memdial-measure run --model fixtures/models/$m --budget ${FL}MiB --io direct --prefetch next-layer --max-context 32 \
      --prompt "The quick brown fox jumps over the lazy dog" --max-tokens 16 --ignore-eos \
      --metrics-json /tmp/i29/run-$m-$r.json > /dev/null 2>>/tmp/i29/measure.log
    echo "$m $r rc=$?" >> /tmp/i29/measure.log
  done
done
echo done >> /tmp/i29/measure.log
