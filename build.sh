#!/usr/bin/env bash
# Installs what the build needs, builds everything, and runs the main job on the model
# shipped in the repository (models/docs-gpt2: a small GPT-2 trained on this repository's
# documentation by tools/train_docs_model.py): compile it, with its tokenizer, to a plan,
# show the plan's header, and generate text from a prompt on the CPU.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")" && pwd)"
source "$ROOT/scripts/setup.sh"
ninja -C "$BUILD_DIR"
MODEL="$ROOT/models/docs-gpt2"
PLAN="$BUILD_DIR/docs-gpt2.dsp"
"$BUILD_DIR/bin/dsc" compile "$MODEL/model.onnx" -o "$PLAN" --max-batch 4 --max-seq-len 256
"$BUILD_DIR/bin/dsp-dump" "$PLAN" > "$BUILD_DIR/docs-gpt2.dump"
sed -n '1,8p' "$BUILD_DIR/docs-gpt2.dump"
# Greedy, so the text is the same on every machine (test/models/docs-gpt2.test checks this
# model's greedy text against transformers). The model knows only this repository's docs.
"$BUILD_DIR/bin/dsrun" "$PLAN" --prompt "The engine batches" --max-new-tokens 40
