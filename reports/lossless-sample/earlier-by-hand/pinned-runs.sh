#!/bin/bash
# All pinned (budget above the model): where the layout does not pay.
cd /work/wt-i29
B=/tmp/i29/memdial-measure
for r in 1 2 3; do
  for m in mini mini-lossless; do
    uptime >> /tmp/i29/measure2.log
    $B run --model fixtures/models/$m --budget 2GiB --io direct --prefetch next-layer --max-context 32 \
      --prompt "The quick brown fox jumps over the lazy dog" --max-tokens 16 --ignore-eos \
      --metrics-json /tmp/i29/pinned-$m-$r.json > /dev/null 2>>/tmp/i29/measure2.log
    echo "$m $r rc=$?" >> /tmp/i29/measure2.log
  done
done
echo done >> /tmp/i29/measure2.log
