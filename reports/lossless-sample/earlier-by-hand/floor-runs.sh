#!/bin/bash
# Interleaved runs of three layouts at equal budgets (the packed floor), direct, next-layer.
cd /work/wt-i29
B=/tmp/i29/memdial-m3
L=/tmp/i29/measure4.log
FL=$($B run --model fixtures/models/mini-lossless --budget 1MB --prefetch next-layer --max-context 32 --prompt "x" --max-tokens 16 2>&1 | grep -o "floor of [0-9.]* MiB" | grep -o "[0-9.]*")
echo "packed floor $FL MiB" > $L
for r in 1 2 3 4; do
  for m in mini mini-lossless mini-dict15; do
    uptime >> $L
    $B run --model fixtures/models/$m --budget ${FL}MiB --io direct --prefetch next-layer --max-context 32 \
      --prompt "The quick brown fox jumps over the lazy dog" --max-tokens 16 --ignore-eos \
      --metrics-json /tmp/i29/m4-$m-$r.json > /dev/null 2>>$L
    echo "$m $r rc=$?" >> $L
  done
done
echo done >> $L
