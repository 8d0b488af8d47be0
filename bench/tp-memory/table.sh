#!/usr/bin/env bash
# Weight bytes per rank and arena bytes of one fixture compiled with --tp 1, 2 and 4: the
# size of each rank's weight section as dsp-dump reports it, and the activation arena (one
# per rank; the programs are typed with rank 0's shard, the largest).
#
#   bench/tp-memory/table.sh [build dir] [model.onnx]
#
# Defaults: build-tp and test/models/gpt2-op17/model.onnx (hidden 64, 4 heads, vocab 300),
# --max-batch 4 --max-seq-len 40. Prints a Markdown table.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build-tp}
model=${2:-$root/test/models/gpt2-op17/model.onnx}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "| --tp | rank | weight section bytes | arena bytes |"
echo "|---:|---:|---:|---:|"
for tp in 1 2 4; do
  "$build/bin/dsc" compile "$model" -o "$work/tp$tp.dsp" --tp "$tp" --max-batch 4 \
    --max-seq-len 40 2>/dev/null
  "$build/bin/dsp-dump" "$work/tp$tp.dsp" > "$work/tp$tp.txt"
  arena=$(sed -n 's/^arena: \([0-9]*\) bytes.*/\1/p' "$work/tp$tp.txt")
  sed -n 's/^  rank \([0-9]*\): offset [0-9]*, \([0-9]*\) bytes.*/\1 \2/p' "$work/tp$tp.txt" |
    while read -r rank bytes; do
      echo "| $tp | $rank | $bytes | $arena |"
    done
done
