#!/bin/bash
# ptxas over the int4 kernels dsc generates (docs/int4.md, docs/cuda-backend.md "int4
# linears"), without a GPU: int4 plans of the fixtures in groups of 32 (GPT-2: f16 scales,
# an int8 LM head, layer-norm prologues), of 64 (GPT-2: one group per row of 64 inputs, two
# of 256; the fixtures' rows are too short for 128, which the emulation tests cover), and a
# bf16 Llama with an int4 LM head (gated projections, rms prologues, bf16 activations), and
# ORT GenAI's int4 Llama export, their kernels extracted with dsp-dump --extract-kernels. Each plan must have gemv with WT 9 and dequantize_int4 (a rule
# that declined would leave them out); each int4 kernel must assemble for sm_80 and sm_90
# with no spills; `ptxas -v`'s registers are printed for the record.
#   check_int4_ptxas.sh DSC DSP_DUMP MODELS_DIR WORK_DIR
# Exits 77 (ctest's skip) when ptxas or NVRTC is not installed.
set -u
dsc=$1 dump=$2 models=$3 work=$4

ptxas=${PTXAS:-/usr/local/cuda/bin/ptxas}
[ -x "$ptxas" ] || ptxas=$(command -v ptxas || true)
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
  if ! "$dsc" compile "$model" -o "$work/$name.dsp" --max-batch 4 --max-seq-len 40 \
       --dtype int4 "$@" 2> "$work/$name.log"; then
    echo "FAIL: dsc could not compile $model --dtype int4 $*:"
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
  "$dump" --extract-kernels "$work/$name" "$work/$name.dsp" > /dev/null ||
    { echo "FAIL: dsp-dump could not extract the kernels of $name"; failures=$((failures + 1)); }
  for kind in "gemv_*_WT9_*" "dequantize_int4_*"; do
    if [ -z "$(find "$work/$name" -name "$kind.ptx" | head -n 1)" ]; then
      echo "FAIL: the int4 plan $name has no $kind kernel"
      failures=$((failures + 1))
    fi
  done
}

compile gpt2-int4-g32 "$models/gpt2-op17/model.onnx"
compile gpt2-int4-g64 "$models/gpt2-op17/model.onnx" --int8-group-size 64
compile llama-int4-head-bf16 "$models/llama-op17/model.onnx" --int4-lm-head --compute-dtype bf16
# ONNX Runtime GenAI's builder's int4 export: its MatMulNBits codes, kept (docs/ortgenai.md).
compile llama-ortgenai-int4 "$models/llama-ortgenai-int4/model.onnx"

checked=0
declare -A seen
for ptx in "$work"/*/gemv_*_WT9_*.ptx "$work"/*/dequantize_int4_*.ptx; do
  [ -e "$ptx" ] || continue
  kernel=$(basename "$ptx" .ptx)
  [ -n "${seen[$kernel]:-}" ] && continue
  seen[$kernel]=1
  for arch in sm_80 sm_90; do
    if ! "$ptxas" -v -arch=$arch "$ptx" -o "$work/ptxas.cubin" > "$work/ptxas.log" 2>&1; then
      echo "FAIL: ptxas -arch=$arch rejects $ptx:"
      cat "$work/ptxas.log"
      failures=$((failures + 1))
      continue
    fi
    if grep -E "[1-9][0-9]* bytes spill" "$work/ptxas.log" > /dev/null; then
      echo "FAIL: $kernel spills on $arch:"
      cat "$work/ptxas.log"
      failures=$((failures + 1))
    fi
    echo "$kernel $arch: $(grep -oE "Used [0-9]+ registers" "$work/ptxas.log")"
  done
  checked=$((checked + 1))
done

echo "ptxas (sm_80, sm_90) checked $checked distinct int4 kernels"
[ "$checked" -gt 0 ] || { echo "FAIL: no int4 kernels"; exit 1; }
[ "$failures" -eq 0 ]
