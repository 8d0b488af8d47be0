#!/bin/bash
# Compiles the fixture models with dsc (their kernels through NVRTC), extracts every
# kernel's PTX with dsp-dump --extract-kernels and assembles it with ptxas for sm_80 and
# sm_90: generated code that ptxas rejects fails here, without a GPU. int8 plans (per
# channel, groups of 32, bf16 scales) must have their int8 kernels (gemv with WT 8 and
# dequantize_int8: a rule that declined would leave them out), int4 plans theirs (gemv with
# WT 9 and dequantize_int4, which must not spill), and both with f16/bf16 scales the tile GEMM
# (gemm_dequant with their WT, which must not spill); `ptxas -v` prints their registers.
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
compile gpt2-op17-int8 "$models/gpt2-op17/model.onnx" --dtype int8
compile gpt2-op17-int8-g32 "$models/gpt2-op17/model.onnx" --dtype int8 --int8-group-size 32
compile llama-op17-int8-bf16 "$models/llama-op17/model.onnx" --dtype int8 --compute-dtype bf16
# int4 (docs/int4.md): groups of 32 (GPT-2: f16 scales, an int8 LM head, layer-norm
# prologues) and of 64, a bf16 Llama with an int4 LM head (gated projections, rms
# prologues), and ONNX Runtime GenAI's int4 export with its MatMulNBits codes kept.
compile gpt2-op17-int4 "$models/gpt2-op17/model.onnx" --dtype int4
compile gpt2-op17-int4-g64 "$models/gpt2-op17/model.onnx" --dtype int4 --int8-group-size 64
compile llama-op17-int4-head-bf16 "$models/llama-op17/model.onnx" --dtype int4 --int4-lm-head \
  --compute-dtype bf16
compile llama-ortgenai-int4 "$models/llama-ortgenai-int4/model.onnx" --dtype int4
plans=$((plans + 9))
# Today's exports: zeros at rows with no key (sdpa's guard), Gemma-2's capped scores with a
# window, Gemma-3's head_dim 32 with per-head norms.
for name in llama-ts-sdpa gemma2-dynamo-eager gemma3-dynamo; do
  compile "$name" "$models/$name/model.onnx"
  plans=$((plans + 1))
done

# The serving engine's paged attention (a --serving plan's step program: attention_rotary,
# attention_decode and attention_prefill with PAGED), with rotary, GQA and a packed
# projection (the CUDA cores' prefill over an f32 cache), with Gemma-2's window and cap over
# a bf16 cache (the tensor cores' prefill), and with BLOOM's ALiBi over a bf16 cache (the
# CUDA cores' prefill over a half cache).
compile llama-op17-serving "$models/llama-op17/model.onnx" --serving
# Mixtures of experts (tfm.moe's moe_route, moe_experts, moe_combine): today's Qwen3-MoE in
# bf16, Qwen2-MoE with its shared expert, Mixtral with int8 (f16 scales) and int4 experts.
compile qwen3moe-bf16 "$models/qwen3moe-ts/model.onnx" --dtype bf16
compile qwen2moe "$models/qwen2moe-ts/model.onnx"
compile mixtral-int8 "$models/mixtral-ts/model.onnx" --dtype int8 --int8-group-size 8
compile mixtral-int4 "$models/mixtral-ts/model.onnx" --dtype int4 --int8-group-size 8
plans=$((plans + 4))
compile gemma2-serving-bf16 "$models/gemma2-dynamo-eager/model.onnx" --serving \
  --kv-cache-dtype bf16
compile bloom-serving-bf16 "$models/bloom-op17/model.onnx" --serving --kv-cache-dtype bf16
plans=$((plans + 3))
# GPT-OSS's attention sinks (SINKS: the prefill and decode kernels, a sliding and a full
# layer), dense over an f32 cache and in a serving plan over a bf16 one (the paged kernels;
# its heads of 8 keep the CUDA cores' prefill), and ORT GenAI's head_sink in a serving plan
# over an f16 cache (heads of 16: the tensor cores' prefill, dense and paged).
compile gptoss-ts-eager "$models/gptoss-ts-eager/model.onnx"
compile gptoss-serving-bf16 "$models/gptoss-ts-eager/model.onnx" --serving --kv-cache-dtype bf16
compile ortgenai-sinks-serving-f16 "$models/llama-ortgenai-sinks/model.onnx" --serving \
  --kv-cache-dtype fp16
plans=$((plans + 3))

for name in gpt2-op17-int8 gpt2-op17-int8-g32 llama-op17-int8-bf16; do
  for kind in "gemv_*_WT8_*" "dequantize_int8_*" "gemm_dequant_WT8_*"; do
    found=$(find "$work/$name" -name "$kind.ptx" 2>/dev/null | head -n 1)
    if [ -z "$found" ]; then
      echo "FAIL: the int8 plan $name has no $kind kernel"
      failures=$((failures + 1))
    fi
  done
done
for name in gpt2-op17-int4 gpt2-op17-int4-g64 llama-op17-int4-head-bf16 llama-ortgenai-int4; do
  for kind in "gemv_*_WT9_*" "dequantize_int4_*" "gemm_dequant_WT9_*"; do
    if [ -z "$(find "$work/$name" -name "$kind.ptx" 2>/dev/null | head -n 1)" ]; then
      echo "FAIL: the int4 plan $name has no $kind kernel"
      failures=$((failures + 1))
    fi
  done
done

# The MoE plans have the fused MoE's kernels (a rule that declined would leave them out): the
# int8 and int4 experts', the shared expert's (SHARED1), the routing and the weighted sum.
for kind in "moe_route_*" "moe_combine_*SHARED1*" "moe_experts_*WT8_SDT2*" \
            "moe_experts_*WT9_SDT2*" "moe_experts_*WT3_*" "moe_experts_*SHARED1*"; do
  if [ -z "$(find "$work"/qwen3moe-bf16 "$work"/qwen2moe "$work"/mixtral-int8 \
                  "$work"/mixtral-int4 -name "$kind.ptx" 2>/dev/null | head -n 1)" ]; then
    echo "FAIL: no MoE plan has a $kind kernel"
    failures=$((failures + 1))
  fi
done

# Every decoder's plan has the one-launch decode attention (FUSED_COMBINE) and gemv with a
# norm prologue (NORM), and the serving plans the paged attention (PAGED: the write kernel
# that also writes the queries, the decode kernel and the prompt chunks' prefill kernel): a
# rule that declined them would leave them out.
for kind in "attention_decode_*FUSED_COMBINE1*" "gemv_*_NORM1_*" "gemv_*_NORM2_*" \
            "attention_rotary_*PAGED2" "attention_decode_*PAGED1" \
            "attention_prefill_HEAD_DIM*PAGED1" "attention_prefill_mma_*PAGED1" \
            "attention_prefill_HEAD_DIM*SINKS1" "attention_decode_*SINKS1" \
            "attention_prefill_mma_*SINKS1_PAGED1" "attention_decode_*SINKS1_PAGED1"; do
  found=$(find "$work" -name "$kind.ptx" 2>/dev/null | head -n 1)
  if [ -z "$found" ]; then
    echo "FAIL: no plan has a $kind kernel"
    failures=$((failures + 1))
  fi
done

# Each distinct kernel is assembled once per architecture, with -v, in parallel: the log
# both decides the check and gives the registers and spills reported below, so no kernel
# is assembled twice. Equal names are equal specialisations.
assemble() {  # ptx: writes NAME.ARCH.log and NAME.ARCH.failed beside the logs
  local ptx=$1 kernel arch
  kernel=$(basename "$ptx" .ptx)
  for arch in sm_80 sm_90; do
    if ! "$ptxas" -v -arch=$arch "$ptx" -o "$work/logs/$kernel.$arch.cubin" \
         > "$work/logs/$kernel.$arch.log" 2>&1; then
      echo "$ptx" > "$work/logs/$kernel.$arch.failed"
    fi
    rm -f "$work/logs/$kernel.$arch.cubin"
  done
}
export -f assemble
export ptxas work
mkdir -p "$work/logs"
declare -A seen reported
checked=0
for ptx in "$work"/*/*.ptx; do
  [ -e "$ptx" ] || continue
  kernel=$(basename "$ptx" .ptx)
  [ -n "${seen[$kernel]:-}" ] && continue
  seen[$kernel]=1
  printf '%s\0' "$ptx"
  checked=$((checked + 1))
done > "$work/kernels.list"
xargs -0 -n 1 -P "$(nproc)" bash -c 'assemble "$0"' < "$work/kernels.list"
for failed in "$work"/logs/*.failed; do
  [ -e "$failed" ] || continue
  log=${failed%.failed}.log
  arch=${log%.log}; arch=${arch##*.}
  echo "FAIL: ptxas -arch=$arch rejects $(cat "$failed"):"
  cat "$log"
  failures=$((failures + 1))
done

# Registers and spills of the int8 and int4 decode kernels, int4's dequantization, the norm
# prologue's, the one-launch decode attention (the paged one among them), the paged
# prefill, the attention kernels with sinks, the MoE kernels and the tile GEMMs, for the
# record (docs/cuda-backend.md). The int4 and MoE kernels and the tile GEMMs must not spill
# ("int4 linears", "Mixture of experts", "int8 linears"), nor the prefill kernels with sinks.
# The decode kernels with GROUP_HEADS 4 may: ptxas keeps them at 64 registers and spills a
# few bytes on some shapes with or without sinks (docs/cuda-backend.md, "Attention sinks").
for ptx in "$work"/*/gemv_*_WT8_*.ptx "$work"/*/gemv_*_WT9_*.ptx \
           "$work"/*/dequantize_int4_*.ptx "$work"/*/gemv_*_NORM*.ptx \
           "$work"/*/gemm_dequant_*.ptx \
           "$work"/*/attention_decode_*FUSED_COMBINE1*.ptx \
           "$work"/*/attention_prefill_*PAGED1.ptx "$work"/*/attention_*SINKS1*.ptx \
           "$work"/*/moe_*.ptx; do
  [ -e "$ptx" ] || continue
  kernel=$(basename "$ptx" .ptx)
  [ -n "${reported[$kernel]:-}" ] && continue
  reported[$kernel]=1
  for arch in sm_80 sm_90; do
    usage=$(grep -E "registers|spill" "$work/logs/$kernel.$arch.log" |
            sed 's/^ptxas info *: //' | tr '\n' ' ')
    if [ -z "$usage" ]; then
      echo "FAIL: ptxas -v -arch=$arch printed no register usage for $kernel"
      failures=$((failures + 1))
    fi
    echo "$kernel $arch: $usage"
    case $kernel in
      gemv_*_WT9_*|dequantize_int4_*|attention_prefill*SINKS1*|moe_*|gemm_dequant_*)
        if echo "$usage" | grep -qE "[1-9][0-9]* bytes spill"; then
          echo "FAIL: the kernel $kernel spills on $arch"
          failures=$((failures + 1))
        fi ;;
    esac
  done
done

echo "ptxas (sm_80, sm_90) checked $checked distinct kernels from $plans plans"
if [ "$checked" -eq 0 ]; then
  echo "FAIL: the plans have no kernels"
  exit 1
fi
[ "$failures" -eq 0 ]
