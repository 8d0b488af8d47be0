#!/bin/bash
# Issue 41's table on a 2-core AMD EPYC (Zen 2: AVX2, FMA, F16C; no AVX-512, no VNNI, no AMX): ../table.sh with
# the outputs here.
OUT_DIR=$(cd "$(dirname "$0")" && pwd) exec "$(dirname "$0")/../table.sh" "$@"
