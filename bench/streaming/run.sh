#!/usr/bin/env bash
# Peak resident memory of `dsc compile` on a model with 1 GiB of weights (a benchmark, not a
# test). Usage: bench/streaming/run.sh [build dir] [python with numpy+onnx]
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
BUILD="${1:-$ROOT/build}"
PYTHON="${2:-python3}"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

"$PYTHON" "$ROOT/bench/streaming/make_model.py" "$WORK/model"
du -b "$WORK/model/model.onnx_data" | awk '{printf "weights: %.0f MiB\n", $1 / 2^20}'
for dtype in fp32 fp16; do
  /usr/bin/time -v "$BUILD/bin/dsc" compile "$WORK/model/model.onnx" -o "$WORK/model-$dtype.dsp" \
      --dtype "$dtype" 2> "$WORK/time-$dtype.txt"
  rss=$(awk -F: '/Maximum resident set size/ {print $2}' "$WORK/time-$dtype.txt")
  wall=$(awk -F': ' '/Elapsed \(wall clock\)/ {print $2}' "$WORK/time-$dtype.txt")
  plan=$(stat -c %s "$WORK/model-$dtype.dsp")
  printf 'dsc compile --dtype %s: peak RSS %d MiB, wall %s, plan %d MiB\n' \
      "$dtype" $((rss / 1024)) "$wall" $((plan / 2**20))
done
