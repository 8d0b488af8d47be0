#!/bin/sh
# The serving benchmark (issue 41; docs/serving.md): `dsbench serve` on GPT-2 124M and the
# 0.5B Llama bench shape (Qwen2.5-0.5B's), fp32 and int8, on one request stream served three
# ways in each run: the engine, static batches of the client count (dsrt_generate), and one
# request at a time. From the repository root of a working tree whose build/ has dsc and
# dsbench:
#
#   PYTHON=/path/to/python bench/serving/run.sh [--work DIR] [--models gpt2-124m,llama-0.5b]
#       [--dtypes fp32,int8] [--requests 64] [--clients 16]
#
# The models are bench/cpu/bench.py's exports (random seeded weights, built from the HF
# config, nothing downloaded; Python needs torch, transformers and onnx), compiled with
# `dsc compile --serving --max-batch 64 --max-seq-len 1024 --arch none`. Per model and dtype:
# 1. the long-tailed stream (prompts 8-400, outputs 8-160, log-uniform, seed 1) at 16
#    clients: throughput, TTFT and TPOT against static batches and one at a time;
# 2. the same stream under a KV budget that a static session would fill with 4 sequences of
#    max_seq_len (sequences in flight against that);
# 3. with a shared 512-token system prompt (prompts 8-100 after it), the engine alone at 4
#    clients: the first request's TTFT against the others'.
# Nothing asserts on time: a benchmark, not a test. Results on the console.
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
work=/tmp/dsc-serve-bench models=gpt2-124m,llama-0.5b dtypes=fp32,int8 requests=64 clients=16
while [ $# -gt 0 ]; do
  case "$1" in
    --work) work=$2; shift ;;
    --models) models=$2; shift ;;
    --dtypes) dtypes=$2; shift ;;
    --requests) requests=$2; shift ;;
    --clients) clients=$2; shift ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
bin=${DSC_BIN_DIR:-$root/build/bin}
mkdir -p "$work"
for model in $(echo "$models" | tr , ' '); do
  [ -f "$work/$model/nocache/model.onnx" ] ||
    "${PYTHON:-python3}" "$root/bench/cpu/bench.py" export "$model" "$work/$model"
  for dtype in $(echo "$dtypes" | tr , ' '); do
    plan="$work/$model-$dtype.dsp"
    [ -f "$plan" ] && [ "$plan" -nt "$bin/dsc" ] ||
      "$bin/dsc" compile "$work/$model/nocache/model.onnx" -o "$plan" --dtype "$dtype" \
        --serving --max-batch 64 --max-seq-len 1024 --arch none 2>/dev/null
    echo "== $model $dtype: $requests requests, $clients clients"
    "$bin/dsbench" serve "$plan" --requests "$requests" --clients "$clients"
    # A budget a static session fills with 4 sequences of max_seq_len: the KV bytes of one
    # position (from the engine's block size and bytes per block) x 4096.
    per_block=$("$bin/dsbench" serve "$plan" --requests 1 --clients 1 --output-len 1,1 \
      --prompt-len 1,1 --skip-static --skip-alone --json | "${PYTHON:-python3}" -c \
      'import json,sys; r=json.load(sys.stdin)["runs"][0]; print(r["kv_bytes_per_block"])')
    budget=$((per_block / 16 * 4096))
    echo "== $model $dtype: KV budget $budget bytes (4 static sequences of 1024)"
    "$bin/dsbench" serve "$plan" --requests "$requests" --clients "$clients" \
      --kv-cache-bytes "$budget" --skip-static --skip-alone
    echo "== $model $dtype: shared 512-token system prompt"
    "$bin/dsbench" serve "$plan" --requests 16 --clients 4 --system-prompt 512 \
      --prompt-len 8,100 --output-len 8,32 --skip-static --skip-alone
  done
done
