#!/bin/bash
# Issue 41's table on a 2-core AMD EPYC (Zen 5, family 26: AVX-512 with VNNI and BF16; no AMX): ../table.sh with
# the outputs here.
OUT_DIR=$(cd "$(dirname "$0")" && pwd) exec "$(dirname "$0")/../table.sh" "$@"
