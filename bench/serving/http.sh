#!/bin/sh
# The serving issue's request stream through HTTP (issue 42): `dsbench serve` in process and
# `dsserve` driven by bench/serving/http_load.py over loopback, on the same requests (dsbench
# --dump-requests), in one run. From the repository root, with a venv where
# `pip install './python[server]'` was run:
#
#   PYTHON=/path/to/venv/bin/python bench/serving/http.sh PLAN [--requests 64] [--clients 16]
#
# PLAN: a serving plan (dsc compile --serving), e.g. bench/serving/run.sh's. Nothing asserts
# on time: a benchmark. Results on the console; the JSON of both runs in $WORK.
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
plan=$1; shift
requests=64 clients=16 port=${PORT:-8765} work=${WORK:-/tmp/dsc-http-bench}
while [ $# -gt 0 ]; do
  case "$1" in
    --requests) requests=$2; shift ;;
    --clients) clients=$2; shift ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
python=${PYTHON:-python3}
bin=${DSC_BIN_DIR:-$root/build/bin}
mkdir -p "$work"
"$bin/dsbench" serve "$plan" --requests "$requests" --clients "$clients" --skip-static \
  --skip-alone --json --dump-requests "$work/requests.json" > "$work/in-process.json"
"$python" -m dsrt.server "$plan" --port "$port" --max-concurrent-requests "$clients" &
server=$!
trap 'kill $server 2>/dev/null' EXIT
until "$python" -c "import urllib.request as u; u.urlopen('http://127.0.0.1:$port/health')" \
    2>/dev/null; do
  kill -0 $server || exit 1
  sleep 0.2
done
"$python" "$root/bench/serving/http_load.py" --url "http://127.0.0.1:$port" \
  --requests-file "$work/requests.json" --clients "$clients" --json > "$work/http.json"
# What the server's engine did (preemptions, prefix hits, peak blocks) beside dsbench's.
"$python" -c "import urllib.request as u; print(u.urlopen('http://127.0.0.1:$port/metrics').read().decode())" \
  > "$work/metrics.txt"
grep -E '^dsrt:(num_preemptions|prefix_cache_hits|engine_steps)_total' "$work/metrics.txt"
"$python" - "$work/in-process.json" "$work/http.json" <<'PY'
import json, sys
engine = json.load(open(sys.argv[1]))["runs"][0]
http = json.load(open(sys.argv[2]))
print(f"{'':32} {'out tok/s':>10} {'TTFT p50':>9} {'TTFT p99':>9} {'TPOT p50':>9} {'TPOT p99':>9}")
for name, r in (("dsbench serve (in process)", engine), (http["name"], http)):
    print(f"{name:32} {r['output_tokens_per_s']:10.1f} {r['ttft_p50_ms']:7.0f}ms "
          f"{r['ttft_p99_ms']:7.0f}ms {r['tpot_p50_ms']:7.1f}ms {r['tpot_p99_ms']:7.1f}ms")
print(f"HTTP / in process: {http['output_tokens_per_s'] / engine['output_tokens_per_s']:.3f}")
PY
