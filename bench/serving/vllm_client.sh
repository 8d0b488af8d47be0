#!/bin/sh
# vLLM's own benchmark client (`vllm bench serve`) against dsserve, and against llama.cpp's
# llama-server on the same GGUF weights where --gguf is given: a load generator neither
# system wrote, each server started fresh, one after the other. From the repository root:
#
#   PYTHON=/path/to/venv/bin/python bench/serving/vllm_client.sh PLAN TOKENIZER_DIR \
#       [--gguf MODEL.gguf] [--clients 16] -- VLLM_BENCH_ARGS...
#
# PYTHON needs dsrt's server (`pip install './python[server]'`) and vLLM's client: the vllm
# wheel installed with --no-deps, then what its `vllm.benchmarks.serve` imports (torch,
# transformers, aiohttp, ...), is enough on a machine without a GPU. TOKENIZER_DIR holds the
# model's tokenizer: the client makes its prompts with it, and dsserve takes it as
# --tokenizer. VLLM_BENCH_ARGS: the dataset and the load (--max-concurrency is the number
# of clients), e.g. `--dataset-name random --random-input-len 200 --random-output-len 100
# --num-prompts 64 --max-concurrency 16 --ignore-eos --temperature 0`. Each server's result
# JSON goes to $WORK (vLLM's --save-result). LLAMA_CPP: llama.cpp's folder with build/bin;
# --clients: llama-server's slots (-np), at least the client's concurrency. Nothing asserts
# on time: a benchmark.
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
plan=$1 tokenizer=$2; shift 2
gguf="" clients=16
while [ $# -gt 0 ]; do
  case "$1" in
    --gguf) gguf=$2; shift ;;
    --clients) clients=$2; shift ;;
    --) shift; break ;;
    *) echo "unknown option $1 (vLLM's options go after --)" >&2; exit 2 ;;
  esac
  shift
done
python=${PYTHON:-python3}
port=${PORT:-8770} work=${WORK:-/tmp/dsc-vllm-client}
mkdir -p "$work"
server=""
trap '[ -n "$server" ] && kill $server 2>/dev/null' EXIT

wait_for() {
  until "$python" -c "import urllib.request as u; u.urlopen('http://127.0.0.1:$port/health')" \
      2>/dev/null; do
    kill -0 "$server" || { echo "the server exited" >&2; exit 1; }
    sleep 0.5
  done
}

bench() {  # NAME MODEL_NAME: vLLM's client against the server on $port
  echo "== $1: vllm bench serve $*" >&2
  "$python" - "$@" <<'EOF'
import argparse, sys
from vllm.benchmarks.serve import add_cli_args, main
name, model, *rest = sys.argv[1:]
parser = argparse.ArgumentParser()
add_cli_args(parser)
args = parser.parse_args(rest)
main(args)
EOF
}

vllm_args="$*"
model=$(basename "$plan" .dsp)
"$python" -m dsrt.server "$plan" --port "$port" --served-model-name "$model" \
  --tokenizer "$tokenizer" > "$work/dsserve.log" 2>&1 &
server=$!
wait_for
# shellcheck disable=SC2086
bench dsserve "$model" --backend openai --base-url "http://127.0.0.1:$port" --model "$model" \
  --tokenizer "$tokenizer" --save-result --result-dir "$work" --result-filename dsserve.json \
  $vllm_args
kill $server; wait $server 2>/dev/null || true; server=""
if [ -n "$gguf" ]; then
  llama=${LLAMA_CPP:?LLAMA_CPP: llama.cpp with build/bin}/build/bin/llama-server
  threads=$(nproc)
  "$llama" -m "$gguf" -np "$clients" -c $((clients * 1024)) --cont-batching -t "$threads" \
    --host 127.0.0.1 --port "$port" --no-webui > "$work/llama-server.log" 2>&1 &
  server=$!
  wait_for
  # shellcheck disable=SC2086
  bench llama-server "$model" --backend openai --base-url "http://127.0.0.1:$port" \
    --model "$model" --tokenizer "$tokenizer" --save-result --result-dir "$work" \
    --result-filename llama-server.json $vllm_args
  kill $server; wait $server 2>/dev/null || true; server=""
  # llama-server sends its usage in a chunk that also has a choice, which vLLM's client
  # skips; it then counts output tokens by encoding the text again, which for text that
  # does not round-trip is not what was generated. The server's own count, from its log:
  awk -F'/' '/ eval time/ && !/prompt eval/ {split($2, a, " "); n += a[1]; r++}
    END {printf "llama-server generated %d tokens in %d requests (its own count)\n", n, r}' \
    "$work/llama-server.log" | tee "$work/llama-server-tokens.txt"
fi
