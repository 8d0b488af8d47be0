#!/bin/bash
# Issue 41's table on a 2-core AMD EPYC (Zen 2: AVX2, FMA, F16C; no AVX-512, no VNNI, no
# AMX), plans in /tmp/serve as bench/serving/run.sh compiles them (the 0.5B Llama's static
# plan with --max-batch 16 and no --serving).
B=/work/main/build/bin/dsbench
OUT=$(cd "$(dirname "$0")" && pwd)
cd /tmp/serve
run() {
  local name=$1; shift
  { echo "# $(date -u +%FT%TZ) git $(git -C /work/main rev-parse --short HEAD) $(grep -m1 'model name' /proc/cpuinfo)"
    echo "# dsbench serve $*"; echo "# uptime: $(uptime)"
    $B serve "$@" 2>&1
    echo "# uptime after: $(uptime)"; } > $OUT/$name.txt
  echo "$name: $(grep -E "^engine  |^static|^one at" $OUT/$name.txt | awk '{printf "%s %s | ", $1, $(NF-6)}')"
}
for what in "$@"; do
  case $what in
    gpt2-int8) run gpt2-int8 gpt2-124m-int8.dsp --requests 64 --clients 16 ;;
    gpt2-fp32) run gpt2-fp32 gpt2-124m-fp32.dsp --requests 64 --clients 16 ;;
    llama-int8) run llama-int8 llama-0.5b-int8.dsp --requests 64 --clients 16 --static-plan llama-0.5b-int8-static.dsp ;;
    *) run "$what" ${RUN_ARGS} ;;
  esac
done
