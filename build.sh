#!/usr/bin/env bash
# Installs what the build needs, builds everything, and runs the main job on the model
# shipped in the repository: compile the tiny GPT-2 export (with its tokenizer) to a plan,
# check its forward pass against the PyTorch reference, and generate text from a prompt on
# the CPU.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")" && pwd)"
source "$ROOT/scripts/setup.sh"
ninja -C "$BUILD_DIR"
MODEL="$ROOT/test/models/gpt2-op17"
PLAN="$BUILD_DIR/gpt2.dsp"
"$BUILD_DIR/bin/dsc" compile "$MODEL/model.onnx" -o "$PLAN" --max-batch 4 --max-seq-len 64
"$BUILD_DIR/bin/dsp-dump" "$PLAN" > "$BUILD_DIR/gpt2.dump"
sed -n '1,12p' "$BUILD_DIR/gpt2.dump"
"$BUILD_DIR/bin/dsrun" "$PLAN" --input-dir "$MODEL/test_data_set_0" \
    --expect-dir "$MODEL/test_data_set_0" --rtol 1e-4 --atol 1e-4
# The weights are random, so the text is too; the same ids come out of transformers'
# generate (test/models/generate-greedy.test).
"$BUILD_DIR/bin/dsrun" "$PLAN" --prompt "The quick brown fox" --max-new-tokens 24
