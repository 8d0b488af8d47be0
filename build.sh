#!/usr/bin/env bash
# Installs what the build needs, builds everything, and runs the main job on the model
# shipped in the repository: import the tiny GPT-2 export and print its IR.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")" && pwd)"
source "$ROOT/scripts/setup.sh"
ninja -C "$BUILD_DIR"
"$BUILD_DIR/bin/dsc" --emit=onnx "$ROOT/test/models/gpt2-op14/model.onnx"
