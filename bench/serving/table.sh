#!/bin/bash
# Issue 41's table (bench/serving/RESULTS.md): `dsbench serve` on plans in /tmp/serve as
# bench/serving/run.sh compiles them (the 0.5B Llama's static plans with --max-batch 16 and
# no --serving), each run's output in OUT_DIR/NAME.txt with the command, commit, CPU and
# `uptime` in its first lines. Usage: OUT_DIR=DIR table.sh gpt2-int8 gpt2-fp32 llama-int8
# llama-fp32, or NAME with RUN_ARGS for any other run.
B=${DSC_BIN_DIR:-/work/main/build/bin}/dsbench
OUT=${OUT_DIR:?OUT_DIR: where the outputs go}
cd /tmp/serve
run() {
  local name=$1; shift
  { echo "# $(date -u +%FT%TZ) git $(git -C /work/main rev-parse --short HEAD) $(grep -m1 'model name' /proc/cpuinfo)"
    echo "# dsbench serve $*"; echo "# uptime: $(uptime)"
    $B serve "$@" 2>&1
    echo "# uptime after: $(uptime)"; } > "$OUT/$name.txt"
  echo "$name: $(grep -E "^engine  |^static|^one at" "$OUT/$name.txt" | awk '{printf "%s %s | ", $1, $(NF-6)}')"
}
for what in "$@"; do
  case $what in
    gpt2-int8) run gpt2-int8 gpt2-124m-int8.dsp --requests 64 --clients 16 ;;
    gpt2-fp32) run gpt2-fp32 gpt2-124m-fp32.dsp --requests 64 --clients 16 ;;
    llama-int8) run llama-int8 llama-0.5b-int8.dsp --requests 64 --clients 16 --static-plan llama-0.5b-int8-static.dsp ;;
    llama-fp32) run llama-fp32 llama-0.5b-fp32.dsp --requests 32 --clients 16 --static-plan llama-0.5b-fp32-static.dsp ;;
    *) run "$what" ${RUN_ARGS} ;;
  esac
done
