#!/bin/bash
# Compiles the fixture models with dsc (their kernels through NVRTC), extracts every
# kernel's PTX with dsp-dump --extract-kernels and assembles it with ptxas for sm_80 and
# sm_90: generated code that ptxas rejects fails here, without a GPU.
#   check_ptxas.sh DSC DSP_DUMP MODELS_DIR WORK_DIR
# Exits 77 (ctest's skip) when ptxas or NVRTC is not installed.
set -u
dsc=$1 dump=$2 models=$3 work=$4

ptxas=${PTXAS:-/usr/local/cuda/bin/ptxas}
if [ ! -x "$ptxas" ]; then
  ptxas=$(command -v ptxas || true)
fi
if [ -z "$ptxas" ] || [ ! -x "$ptxas" ]; then
  echo "SKIP: ptxas is not installed (looked at \$PTXAS, /usr/local/cuda/bin/ptxas and PATH)"
  exit 77
fi

rm -rf "$work"
mkdir -p "$work"
failures=0

compile() {  # name model.onnx extra-options...
  local name=$1 model=$2
  shift 2
  if ! "$dsc" compile "$model" -o "$work/$name.dsp" --max-batch 4 --max-seq-len 40 "$@" \
       2> "$work/$name.log"; then
    echo "FAIL: dsc could not compile $model $*:"
    cat "$work/$name.log"
    failures=$((failures + 1))
    return
  fi
  if grep -q "CPU-only plan" "$work/$name.log"; then
    echo "SKIP: dsc writes CPU-only plans here (no NVRTC):"
    cat "$work/$name.log"
    exit 77
  fi
  mkdir -p "$work/$name"
  if ! "$dump" --extract-kernels "$work/$name" "$work/$name.dsp" > /dev/null; then
    echo "FAIL: dsp-dump could not extract the kernels of $name"
    failures=$((failures + 1))
  fi
}

plans=0
for model in "$models"/*-op17/model.onnx; do
  name=$(basename "$(dirname "$model")")
  compile "$name" "$model"
  plans=$((plans + 1))
done
compile gpt2-op17-fp16 "$models/gpt2-op17/model.onnx" --dtype fp16
compile gpt2-op17-bf16 "$models/gpt2-op17/model.onnx" --dtype bf16
plans=$((plans + 2))

checked=0
declare -A seen
for ptx in "$work"/*/*.ptx; do
  [ -e "$ptx" ] || continue
  kernel=$(basename "$ptx" .ptx)
  # Equal names are equal specialisations: assemble each once.
  [ -n "${seen[$kernel]:-}" ] && continue
  seen[$kernel]=1
  for arch in sm_80 sm_90; do
    if ! "$ptxas" -arch=$arch "$ptx" -o "$work/ptxas.cubin" 2> "$work/ptxas.log"; then
      echo "FAIL: ptxas -arch=$arch rejects $ptx:"
      cat "$work/ptxas.log"
      failures=$((failures + 1))
    fi
  done
  checked=$((checked + 1))
done

echo "ptxas (sm_80, sm_90) checked $checked distinct kernels from $plans plans"
if [ "$checked" -eq 0 ]; then
  echo "FAIL: the plans have no kernels"
  exit 1
fi
[ "$failures" -eq 0 ]
