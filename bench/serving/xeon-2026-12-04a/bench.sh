#!/bin/bash
B=/work/main/build/bin/dsbench
OUT=/work/main/bench/serving/xeon-2026-12-04a
cd /tmp/serve
run() {
  local name=$1; shift
  { echo "# $(date -u +%FT%TZ) git $(git -C /work/main rev-parse --short HEAD) ${ENVS}"
    echo "# dsbench serve $*"; echo "# uptime: $(uptime)"
    env $ENVS $B serve "$@" 2>&1
    echo "# uptime after: $(uptime)"; } > $OUT/$name.txt
  echo "$name: $(grep -E "^engine  |^static|^one at" $OUT/$name.txt | awk '{printf "%s %s | ", $1, $(NF-6)}')"
}
ENVS="DSRT_INT8_AMX=1"; run gpt2-int8-amx gpt2-124m-int8.dsp --requests 64 --clients 16
ENVS="DSRT_INT8_AMX=0"; run gpt2-int8-noamx gpt2-124m-int8.dsp --requests 64 --clients 16
ENVS="DSRT_INT8_AMX=1"; run gpt2-int8-amx-2 gpt2-124m-int8.dsp --requests 64 --clients 16
ENVS="DSRT_INT8_AMX=0"; run gpt2-int8-noamx-2 gpt2-124m-int8.dsp --requests 64 --clients 16
ENVS="DSRT_INT8_AMX=1"; run llama-int8-amx llama-0.5b-int8.dsp --requests 64 --clients 16 --static-plan llama-0.5b-int8-static.dsp
ENVS="DSRT_INT8_AMX=0"; run llama-int8-noamx llama-0.5b-int8.dsp --requests 64 --clients 16 --static-plan llama-0.5b-int8-static.dsp
ENVS="DSRT_INT8_AMX=1"; run gpt2-fp32 gpt2-124m-fp32.dsp --requests 64 --clients 16
