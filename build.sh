#!/usr/bin/env bash
# Installs what the build needs, builds everything, and runs the main job on the model
# shipped in the repository: compile the tiny GPT-2 export to a plan and run it on the CPU.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")" && pwd)"
source "$ROOT/scripts/setup.sh"
ninja -C "$BUILD_DIR"
MODEL="$ROOT/test/models/gpt2-op14"
"$BUILD_DIR/bin/dsc" compile "$MODEL/model.onnx" -o "$BUILD_DIR/gpt2-op14.dsp" \
    --max-batch 2 --max-seq-len 16
"$BUILD_DIR/bin/dsp-dump" "$BUILD_DIR/gpt2-op14.dsp" > "$BUILD_DIR/gpt2-op14.dump"
sed -n '1,11p' "$BUILD_DIR/gpt2-op14.dump"
"$BUILD_DIR/bin/dsrun" "$BUILD_DIR/gpt2-op14.dsp" --input-dir "$MODEL/test_data_set_0"
"$BUILD_DIR/bin/dsrun" "$BUILD_DIR/gpt2-op14.dsp" --input-dir "$MODEL/test_data_set_0" \
    --expect-dir "$MODEL/test_data_set_0" --rtol 1e-4 --atol 1e-4
