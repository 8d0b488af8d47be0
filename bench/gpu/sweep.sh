#!/bin/sh
# Everything the GPU issue asks of a lent GPU, in one command on the GPU machine (a machine
# cools 30 s after a call and a fresh one starts bare, so a session makes few calls, each a
# whole sweep). From the repository root of a working tree that carries build-gpu-carry/
# (scripts/gpu-bundle.sh --carry; the device tool's `carry`), in this order:
#
#   info       the device, driver and toolkit; what libdsrt finds (dsrun --list-devices)
#   build      libdsrt, dsrun, dsbench, dseval, dsp-dump and the GPU test binaries
#              (runtime-only CMake build, about a minute on 16 cores), unless already there
#   tests      the GPU unit tests and the GPU lit suite, strict (ctest -L gpu)
#   engine     the serving engine on the GPU (dsrt-engine-check, strict): every request's
#              greedy tokens over the paged KV cache equal to dsrt_generate alone, on
#              --serving plans of five fixtures (rotary/GQA, ALiBi, window + cap, bf16 cache),
#              and the prompt chunks through the paged prefill kernel (its launches counted)
#   sanitizer  compute-sanitizer memcheck, racecheck and synccheck on a forward pass and 8
#              greedy decode steps of two fixtures (gpt2-op17, llama-op17), strict
#   realistic  bench/gpu/bench.py correctness: real shapes (GPT-2 124M, Llama-3.2-1B, heads of
#              128 and of 256 with MQA/GQA), random weights, fp32/fp16/bf16/int8 plans, GPU
#              against the CPU session on prompts and 16 decode steps (dseval), the greedy
#              tokens of both
#   bench      bench/gpu/run.sh: dsbench fp16 and int8 against transformers eager and
#              torch.compile on the same GPU
#   profile    ncu: every kernel's time over a prompt and 2 decode steps of the bench's
#              GPT-2 124M fp16 plan ($OUT/profile.csv, a summary by kernel in the log)
#
# The default limits add up to about 13.5 minutes, inside the 15 minutes of device time a
# session is lent (a machine's start takes 30-40 s more); split the steps over two calls
# where the first may find something to fix (bench/gpu/results/*/README.md: what ran).
# Environment: LIMIT_<step>=SECONDS overrides a step's time limit; SANITIZER_TOOLS picks the
# compute-sanitizer tools; BENCH_ARGS passes more options to bench/gpu/run.sh.
#
# Each step runs under its own time limit; a step that fails or runs out of time does not
# stop the later ones. What comes back (the device tool returns at most 8 files from $OUT):
#   $OUT/summary.md     one screen: every step's status, time and headline numbers
#   $OUT/sweep.log      every step's log, concatenated
#   $OUT/realistic.md   the correctness table; $OUT/realistic.json its numbers
#   $OUT/gpu-bench.md   the benchmark table; $OUT/gpu-bench.json its numbers
#   $OUT/profile.csv    ncu's kernel times (the profile step)
#
# Not by default (its limit would pass the 15 minutes): int4, the int4 linears (docs/int4.md):
# test/gpu/int4.test's plans, then the realistic step's models at --dtype int4 against their
# CPU sessions and timed against int8 (--steps realistic,int4). Nor sinks (about 90 s), the
# attention sinks' kernels (docs/cuda-backend.md "Attention sinks"): test/gpu/attention-sinks
# and attention-sinks-launches.test outside lit (--steps info,build,sinks; the tests step's
# lit suite has them too); nor moe, the fused mixture of experts (docs/cuda-backend.md,
# "Mixture of experts"): test/gpu/moe.test's plans against their CPU sessions, the MoE
# kernels' launch counts, compute-sanitizer over them and expert parallelism on in-process
# ranks (--steps moe, about 2 minutes); nor tilegemm, the int8 and int4 prefill's tile GEMM
# against dequantize + cuBLASLt at 16 to 512 prompt rows, which places the
# DSRT_CUDA_TILE_GEMM_ROWS threshold (--steps realistic,tilegemm).
# usage: bench/gpu/sweep.sh [--steps info,build,tests,engine,sanitizer,realistic,int4,sinks,moe,tilegemm,bench,profile]
#                           [--realistic-models gpt2-124m,llama-1b,llama-hd128,mqa-hd256]
#                           [--bench-models gpt2-124m,llama-1b] [--work DIR]
# Without a GPU (the development machine) every step still runs, the sessions on the CPU
# fallback, so that the first GPU minutes find GPU bugs and not script bugs; the summary
# says so.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
# The fixtures travel packed (scripts/fixtures.py); a fresh machine unpacks them first.
python3 "$root/scripts/fixtures.py" unpack
steps=info,build,tests,engine,sanitizer,realistic,bench,profile
realistic_models=gpt2-124m,llama-1b,llama-hd128,mqa-hd256
bench_models=gpt2-124m,llama-1b
work=/tmp/dsc-gpu-sweep
run_one=""
while [ $# -gt 0 ]; do
  case "$1" in
    # Internal: one step, in a process of its own that `timeout` can stop.
    --run-step) run_one=$2; shift ;;
    --steps) steps=$2; shift ;;
    --realistic-models) realistic_models=$2; shift ;;
    --bench-models) bench_models=$2; shift ;;
    --work) work=$2; shift ;;
    *) echo "sweep.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
out=${OUT:-$work/out}
mkdir -p "$work/logs" "$out"
summary=$out/summary.md
python=${PYTHON:-python3}
bundle=$root/build-gpu-bundle
build=${DSC_RUNTIME_BUILD_DIR:-$root/build-gpu-rt}
export DSC_CACHE_DIR=$work/kernel-cache
[ -n "$run_one" ] || : >"$out/sweep.log"

log() { echo "[$(date -u +%H:%M:%S)] $*"; }

# The bundle travels compressed (the working tree and what it carries share 64 MiB).
if [ ! -x "$bundle/bin/dsc" ] && [ -f "$root/build-gpu-carry/bundle.tar.xz" ]; then
  log "unpacking build-gpu-carry/bundle.tar.xz"
  tar -C "$root" -xJf "$root/build-gpu-carry/bundle.tar.xz"
fi
export PATH="$bundle/bin:$build/bin:$PATH"
# The carried runtime build (scripts/gpu-bundle.sh) names the development checkout's path in
# its CTest files and lit configuration: where this root is elsewhere, that path points here.
if [ -f "$build/CMakeCache.txt" ]; then
  home=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$build/CMakeCache.txt")
  if [ -n "$home" ] && [ "$home" != "$root" ] && [ ! -e "$home" ]; then
    mkdir -p "$(dirname "$home")" && ln -s "$root" "$home" && log "linked $home to $root"
  fi
fi

[ -n "$run_one" ] || {
  echo "# GPU sweep, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo
  echo "| step | status | seconds | notes |"
  echo "|---|---|---:|---|"
} >"$summary"

# run_step NAME LIMIT_SECONDS COMMAND...: the command's output goes to the step's log (and
# $OUT/sweep.log); its exit status, time and last line to the summary.
run_step() {
  name=$1 limit=$2
  shift 2
  case ",$steps," in *",$name,"*) ;; *) return 0 ;; esac
  log "step $name (at most ${limit}s)"
  start=$(date +%s)
  timeout --kill-after=10 "$limit" sh "$0" --run-step "$1" --work "$work" \
      --realistic-models "$realistic_models" --bench-models "$bench_models" \
      >"$work/logs/$name.log" 2>&1
  status=$?
  seconds=$(( $(date +%s) - start ))
  case $status in
    0) verdict=ok ;;
    77) verdict=skipped ;;
    124|137) verdict="TIMEOUT (${limit}s)" ;;
    *) verdict="FAIL ($status)" ;;
  esac
  note=$(grep -v '^\s*$' "$work/logs/$name.log" | tail -n 1 | cut -c1-160 | tr '|' '/')
  echo "| $name | $verdict | $seconds | $note |" >>"$summary"
  { echo "===== $name: $verdict in ${seconds}s ====="; cat "$work/logs/$name.log"; echo; } \
    >>"$out/sweep.log"
  log "step $name: $verdict in ${seconds}s"
}

step_info() {
  nvidia-smi 2>&1 || echo "nvidia-smi: not here"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem \
    --format=csv 2>&1 || true
  nvcc --version 2>&1 | tail -n 2 || true
  uname -a
  nproc
  "$python" -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__, "cuda", torch.version.cuda)' 2>&1 || true
  command -v dsrun >/dev/null && dsrun --list-devices
  [ -x "$bundle/bin/dsc" ] && echo "dsc: $bundle/bin/dsc" || echo "dsc: no bundle (scripts/gpu-bundle.sh --carry)"
}

step_build() {
  if [ -x "$build/bin/dsbench" ] && [ -x "$build/bin/dseval" ]; then
    echo "runtime already built in $build"
    return 0
  fi
  [ -d "$bundle/generated" ] || { echo "no bundle: run scripts/gpu-bundle.sh --carry and carry build-gpu-carry"; return 1; }
  cmake -G Ninja -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DDSC_RUNTIME_ONLY=ON \
        -DDSC_PLAN_GENERATED_DIR="$bundle/generated" \
        -DDSC_BUNDLED_INCLUDE_DIR="$bundle/include" -DDSC_EXTRA_TOOLS_DIR="$bundle/bin" \
        -DLLVM_EXTERNAL_LIT="$bundle/bin/lit" || return 1
  ninja -C "$build" dsrt dsrun dsbench dsp-dump dsp-roofline dseval dsrt-engine-check ||
    return 1
  echo "runtime built in $build"
}

# The GPU lit suite (ctest -L gpu), then the bundle's GPU unit tests on the plans their
# CMake fixtures compile in the full build (runtime/test/cuda/CMakeLists.txt).
step_tests() {
  [ -f "$build/CTestTestfile.cmake" ] || { echo "no runtime build"; return 1; }
  failed=0
  ctest --test-dir "$build" -L gpu --output-on-failure || failed=1
  plans=$work/test-plans
  mkdir -p "$plans"
  models=$root/test/models
  dsc compile "$models/gpt2-op14/model.onnx" -o "$plans/gpt2-op14.dsp" --max-seq-len 16 &&
    dsc compile "$models/gpt2-op14/model.onnx" -o "$plans/gpt2-op14-cpu.dsp" --max-seq-len 16 \
        --arch none &&
    dsc compile "$models/llama-op17/model.onnx" -o "$plans/llama-tp2.dsp" --tp 2 \
        --max-seq-len 16 &&
    dsc compile "$models/gpt2-op17/model.onnx" -o "$plans/gpt2-int8-g32.dsp" --dtype int8 \
        --int8-group-size 32 --max-seq-len 16 &&
    dsc compile "$models/llama-op17/model.onnx" -o "$plans/llama-long.dsp" --max-seq-len 64 \
        --arch none &&
    dsc compile "$models/llama-op17/model.onnx" -o "$plans/llama-serving.dsp" --serving \
        --max-batch 8 --max-seq-len 16 &&
    dsc compile "$models/gptoss-ts-eager/model.onnx" -o "$plans/gptoss.dsp" --max-batch 2 \
        --max-seq-len 16 &&
    dsc compile "$models/gptoss-ts-eager/model.onnx" -o "$plans/gptoss-serving.dsp" --serving \
        --max-batch 8 --max-seq-len 16 &&
    dsc compile "$models/llama-ortgenai-sinks/model.onnx" -o "$plans/sinks-serving.dsp" \
        --serving --max-batch 8 --max-seq-len 16 ||
    { echo "compiling the test plans failed"; return 1; }
  for test in "$bundle"/tests/*; do
    [ -x "$test" ] && [ "${test%.so}" = "$test" ] || continue
    echo "--- $(basename "$test")"
    DSRT_TEST_GPT2_PLAN=$plans/gpt2-op14.dsp DSRT_TEST_GPT2_CPU_PLAN=$plans/gpt2-op14-cpu.dsp \
    DSRT_TEST_TP2_PLAN=$plans/llama-tp2.dsp DSRT_TEST_INT8_PLAN=$plans/gpt2-int8-g32.dsp \
    DSRT_TEST_LLAMA_LONG_PLAN=$plans/llama-long.dsp DSRT_TEST_SERVING_PLAN=$plans/llama-serving.dsp \
    DSRT_TEST_GPTOSS_PLAN=$plans/gptoss.dsp DSRT_TEST_GPTOSS_SERVING_PLAN=$plans/gptoss-serving.dsp \
    DSRT_TEST_SINKS_SERVING_PLAN=$plans/sinks-serving.dsp \
    DSRT_TEST_FAKE_GPU_LIBRARY=$bundle/tests/libdsrt-fake-gpu-library.so \
      "$test" --gtest_brief=1 || failed=1
  done
  [ $failed = 0 ] && echo "GPU tests: passed" || echo "GPU tests: FAILED (above)"
  return $failed
}

# The serving engine over the paged KV cache on the GPU against each request alone
# (test/gpu/engine-paged.test's check, outside lit so that its failures print whole).
# Strict where there is a GPU; without one the sessions run on the CPU (a dry run). On the
# GPU each plan's prompt chunks must have run the paged prefill kernel
# (DSRT_CUDA_LAUNCH_COUNTS: test/gpu/engine-paged-prefill.test).
step_engine() {
  checker=$build/bin/dsrt-engine-check
  [ -x "$checker" ] || ninja -C "$build" dsrt-engine-check || return 1
  strict=""
  dsrun --list-devices 2>/dev/null | head -n 1 | grep -qv '^cuda devices: 0' && strict=--strict
  failed=0
  for n in llama3-dynamo23 bloom-op17 gemma2-dynamo gptneo-op17 qwen2-bf16-dynamo; do
    plan=$work/engine-$n.dsp
    dsc compile "$root/test/models/$n/model.onnx" -o "$plan" --serving --max-batch 16 \
        --max-seq-len 64 || { failed=1; continue; }
    DSRT_CUDA_LAUNCH_COUNTS=1 "$checker" "$plan" --device cuda $strict \
        >"$work/engine-$n.log" 2>&1 || failed=1
    tail -n 1 "$work/engine-$n.log"
    if [ -n "$strict" ]; then
      if grep -qE '^dsrt: [1-9][0-9]* launches of attention_prefill_.*PAGED1$' \
          "$work/engine-$n.log"; then
        grep -E '^dsrt: [0-9]+ launches of attention_(prefill|decode)_.*PAGED1$' \
          "$work/engine-$n.log"
      else
        echo "$n: no launch of the paged prefill kernel"
        failed=1
      fi
    fi
  done
  [ $failed = 0 ] && echo "engine on cuda: every request as alone" ||
    echo "engine on cuda: FAILED (above)"
  return $failed
}

# A forward pass and 8 greedy decode steps of a fixture on the GPU, strict, under each tool.
step_sanitizer() {
  if ! dsrun --list-devices 2>/dev/null | head -n 1 | grep -qv '^cuda devices: 0'; then
    echo "skipped: no CUDA device (dsrun --list-devices)"
    return 77
  fi
  sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  [ -x "$sanitizer" ] || { echo "no compute-sanitizer"; return 1; }
  failed=0
  for fixture in gpt2-op17 llama-op17; do
    plan=$work/$fixture.dsp
    dsc compile "$root/test/models/$fixture/model.onnx" -o "$plan" --max-batch 2 \
        --max-seq-len 32 || { failed=1; continue; }
    for tool in ${SANITIZER_TOOLS:-memcheck racecheck synccheck}; do
      echo "--- $fixture: $tool"
      "$sanitizer" --tool "$tool" --error-exitcode 9 dsrun "$plan" --device cuda --strict \
          --input-dir "$root/test/models/$fixture/test_data_set_0" --quiet || failed=1
      "$sanitizer" --tool "$tool" --error-exitcode 9 dsrun "$plan" --device cuda --strict \
          --prompt-ids 5,6,7 --prompt-ids 9,10 --max-new-tokens 8 || failed=1
    done
  done
  [ $failed = 0 ] && echo "compute-sanitizer: no errors" || echo "compute-sanitizer: errors (above)"
  return $failed
}

# Attention sinks on the GPU (not in the default steps: --steps sinks), as
# test/gpu/attention-sinks.test and attention-sinks-launches.test check them: GPT-OSS's
# fixture forward against PyTorch and its CPU session, greedy generation, the engine over f32
# and bf16 pools, with the SINKS kernels' launches counted; ORT GenAI's head_sink and
# smooth_softmax llamas. Strict on a GPU (GPT-OSS's experts run the fused MoE kernels).
step_sinks() {
  strict=""
  dsrun --list-devices 2>/dev/null | head -n 1 | grep -qv '^cuda devices: 0' && strict=--strict
  dir=$work/sinks models=$root/test/models failed=0
  mkdir -p "$dir"
  m=$models/gptoss-ts-eager
  dsc compile "$m/model.onnx" -o "$dir/gptoss.dsp" --max-batch 4 --max-seq-len 40 &&
    dsc compile "$m/model.onnx" -o "$dir/gptoss-serving.dsp" --serving --max-batch 16 \
        --max-seq-len 64 &&
    dsc compile "$m/model.onnx" -o "$dir/gptoss-serving-bf16.dsp" --serving \
        --kv-cache-dtype bf16 --max-batch 16 --max-seq-len 64 || return 1
  for s in 0 1 2; do
    echo "--- gptoss set $s: against PyTorch, and against the CPU"
    dsrun "$dir/gptoss.dsp" --device cuda $strict --input-dir "$m/test_data_set_$s" \
        --expect-dir "$m/test_data_set_$s" --rtol 1e-4 --atol 1e-4 || failed=1
    mkdir -p "$dir/cpu-$s"
    dsrun "$dir/gptoss.dsp" --device cpu --input-dir "$m/test_data_set_$s" \
        --output-dir "$dir/cpu-$s" --quiet &&
      dsrun "$dir/gptoss.dsp" --device cuda $strict --input-dir "$m/test_data_set_$s" \
          --expect-dir "$dir/cpu-$s" --rtol 1e-4 --atol 1e-4 || failed=1
  done
  "$python" "$models/check_generation.py" --dsrun dsrun --plan "$dir/gptoss.dsp" \
      --reference "$m/generation.json" --prefill --dsrun-arg=--device --dsrun-arg=cuda \
      ${strict:+--dsrun-arg=$strict} ||
    failed=1
  DSRT_CUDA_LAUNCH_COUNTS=1 DSRT_CUDA_GRAPHS=0 dsrun "$dir/gptoss.dsp" --device cuda $strict \
      --stats --prompt-ids 5,6,7 \
      --prompt-ids 9,10 --max-new-tokens 8 --ignore-eos >"$dir/gptoss-launches.log" 2>&1 ||
    failed=1
  grep -E '^dsrt: [0-9]+ launches of attention_|fallback steps' "$dir/gptoss-launches.log"
  if [ -n "$strict" ]; then
    for kind in prefill decode; do
      grep -qE "^dsrt: [1-9][0-9]* launches of attention_${kind}_.*_SINKS1\$" \
          "$dir/gptoss-launches.log" || { echo "gptoss: no launch of attention_$kind with SINKS"; failed=1; }
    done
  fi
  for plan in gptoss-serving gptoss-serving-bf16; do
    dsrt-engine-check "$dir/$plan.dsp" --device cuda $strict >"$dir/$plan.log" 2>&1 || failed=1
    tail -n 1 "$dir/$plan.log"
  done
  for v in sinks smooth; do
    o=$models/llama-ortgenai-$v
    dsc compile "$o/model.onnx" -o "$dir/$v.dsp" --max-batch 4 --max-seq-len 40 &&
      dsc compile "$o/model.onnx" -o "$dir/$v-serving.dsp" --serving --max-batch 16 \
          --max-seq-len 64 || { failed=1; continue; }
    for s in 0 1 2; do
      echo "--- $v set $s: against onnxruntime"
      dsrun "$dir/$v.dsp" --device cuda $strict --input-dir "$o/test_data_set_$s" \
          --expect-dir "$o/test_data_set_$s" --rtol 1e-4 --atol 1e-4 || failed=1
    done
    DSRT_CUDA_LAUNCH_COUNTS=1 dsrt-engine-check "$dir/$v-serving.dsp" --device cuda $strict \
        >"$dir/$v-serving.log" 2>&1 || failed=1
    tail -n 1 "$dir/$v-serving.log"
    grep -E '^dsrt: [0-9]+ launches of attention_.*_SINKS1_PAGED1$' "$dir/$v-serving.log"
  done
  [ $failed = 0 ] && echo "sinks on cuda: as the references" || echo "sinks on cuda: FAILED (above)"
  return $failed
}

step_realistic() {
  "$python" "$root/bench/gpu/bench.py" correctness "$work/realistic" \
      $(echo "$realistic_models" | tr ',' ' ') --out "$out"
}

# int4 linears on the GPU (docs/int4.md, docs/cuda-backend.md "int4 linears"; not in the
# default steps: --steps int4, after realistic). test/gpu/int4.test's fixture plans outside
# lit, so that the numbers print; then each real-shape export the realistic step left: its
# int4 plan against its CPU session (dseval; no bound yet, the first GPU run measures it),
# and decode timed against the int8 plan (dsbench, batch 1, 32 prompt and 48 new tokens
# within the plans' 96 positions). The CPU runs its exact kernel
# (DSRT_INT4_ACTIVATIONS=f32), as the GPU has f32 activations.
step_int4() {
  strict=""
  dsrun --list-devices 2>/dev/null | head -n 1 | grep -qv '^cuda devices: 0' && strict=--strict
  dir=$work/int4 failed=0
  mkdir -p "$dir"
  export DSRT_INT4_ACTIVATIONS=f32
  dsc compile "$root/test/models/gpt2-op17/model.onnx" -o "$dir/gpt2.dsp" --dtype int4 \
      --max-batch 4 --max-seq-len 64 &&
    dsc compile "$root/test/models/llama-op17/model.onnx" -o "$dir/llama-head.dsp" \
        --dtype int4 --int4-lm-head --compute-dtype bf16 --max-batch 4 --max-seq-len 64 ||
    return 1
  for plan in gpt2 llama-head; do
    bounds="--min-top1 0.95 --max-abs-error 0.05 --max-mean-abs-error 0.005"
    [ $plan = gpt2 ] || bounds="--min-top1 0.85 --max-abs-error 0.3 --max-mean-abs-error 0.04"
    echo "--- $plan int4: GPU against CPU"
    # shellcheck disable=SC2086 # the bounds are options
    dseval "$dir/$plan.dsp" --reference "$dir/$plan.dsp" --device cuda $bounds \
        --prompts "$root/test/quant/prompts.txt" --decode-steps 8 || failed=1
  done
  timed=""
  for folder in "$work"/realistic/*/; do
    [ -f "$folder/model.json" ] || continue
    name=$(basename "$folder")
    onnx=$("$python" -c 'import json, sys; print(json.load(open(sys.argv[1]))["onnx"])' \
        "$folder/model.json")
    dsc compile "$onnx" -o "$folder/int4.dsp" --dtype int4 --max-batch 4 --max-seq-len 96 ||
      { failed=1; continue; }
    echo "--- $name int4: GPU against CPU"
    dseval "$folder/int4.dsp" --reference "$folder/int4.dsp" --device cuda --decode-steps 16 \
        --prompts "$work/realistic/prompts.txt" || failed=1
    for dtype in int8 int4; do
      [ -f "$folder/$dtype.dsp" ] || continue
      dsbench "$folder/$dtype.dsp" --device cuda $strict --batch 1 --prompt-len 32 \
          --new-tokens 48 --warmup 2 --iterations 5 --json >"$dir/$name-$dtype.json" ||
        { failed=1; continue; }
      timed="$timed $name $dtype $("$python" -c 'import json, sys; r = json.load(open(sys.argv[1])); print("%.3f ms/token, prefill %.2f ms;" % (r["decode_ms"]["avg"], r["prefill_ms"]["avg"]))' "$dir/$name-$dtype.json")"
    done
  done
  [ $failed = 0 ] && echo "int4 on cuda: within bounds;$timed" || echo "int4 on cuda: FAILED (above);$timed"
  return $failed
}

# The prefill of int8 and int4 plans through the tile GEMM (gemm_dequant, the default up to
# 512 rows) and through dequantize + cuBLASLt (DSRT_CUDA_TILE_GEMM_ROWS=0), timed by dsbench at
# batch 1 and prompts of 16 to 512 tokens, on the real-shape exports the realistic step left
# (not in the default steps: --steps realistic,tilegemm; TILE_MODELS picks them, TILE_ROWS the
# prompt lengths). Prefill's time is mostly its linears', so the ratio at each length says
# where the threshold (LinearOps.cpp's kTileGemmRows, docs/cuda-backend.md "int8 linears")
# belongs. Correctness is test/gpu/tile-gemm.test's (the tests step).
step_tilegemm() {
  strict=""
  dsrun --list-devices 2>/dev/null | head -n 1 | grep -qv '^cuda devices: 0' && strict=--strict
  dir=$work/tilegemm failed=0 found=0
  mkdir -p "$dir"
  export DSRT_INT4_ACTIVATIONS=f32
  rows=${TILE_ROWS:-16 64 128 256 512}
  for name in $(echo "${TILE_MODELS:-llama-1b,gpt2-124m}" | tr ',' ' '); do
    folder=$work/realistic/$name
    [ -f "$folder/model.json" ] || continue
    found=1
    onnx=$("$python" -c 'import json, sys; print(json.load(open(sys.argv[1]))["onnx"])' \
        "$folder/model.json")
    for dtype in int8 int4; do
      plan=$dir/$name-$dtype.dsp
      dsc compile "$onnx" -o "$plan" --dtype $dtype --max-batch 1 --max-seq-len 520 ||
        { failed=1; continue; }
      line="$name $dtype prefill ms (tile / dequantize+cuBLASLt):"
      for prompt in $rows; do
        for path in tile dequantize; do
          limit=512
          [ $path = tile ] || limit=0
          DSRT_CUDA_TILE_GEMM_ROWS=$limit dsbench "$plan" --device cuda $strict --batch 1 \
              --prompt-len "$prompt" --new-tokens 1 --warmup 2 --iterations 5 --json \
              >"$dir/$name-$dtype-$prompt-$path.json" || { failed=1; continue; }
        done
        line="$line $prompt: $("$python" -c 'import json, sys; t, d = (json.load(open(f))["prefill_ms"]["avg"] for f in sys.argv[1:]); print("%.3f/%.3f (%.2fx)" % (t, d, d / t if t else 0))' \
            "$dir/$name-$dtype-$prompt-tile.json" "$dir/$name-$dtype-$prompt-dequantize.json" 2>/dev/null || echo "n/a")"
      done
      echo "$line"
    done
  done
  [ $found = 1 ] || { echo "no real-shape export from the realistic step"; return 1; }
  [ $failed = 0 ] && echo "tile GEMM timed (above)" || echo "tile GEMM: FAILED (above)"
  return $failed
}

# The fused mixture of experts on the GPU (docs/cuda-backend.md, "Mixture of experts"; not in
# the default steps: --steps moe). test/gpu/moe.test's plans outside lit, so that the numbers
# print: each against its CPU session (dseval: logits of 48 prompts and 8 decode steps,
# within the test's bounds), the kernels each launched (DSRT_CUDA_LAUNCH_COUNTS=1: the MoE
# kernels must be there, the fallback nowhere), compute-sanitizer memcheck and racecheck
# over a prompt and 4 greedy decode steps of Qwen2-MoE (the routing kernel's block-wide
# lists, the shared expert), and --ep 2 on two in-process ranks against one rank's logits.
step_moe() {
  strict=""
  dsrun --list-devices 2>/dev/null | head -n 1 | grep -qv '^cuda devices: 0' && strict=--strict
  dir=$work/moe failed=0
  mkdir -p "$dir"
  export DSRT_INT4_ACTIVATIONS=f32
  models=$root/test/models
  dsc compile "$models/qwen3moe-ts/model.onnx" -o "$dir/qwen3moe.dsp" --max-batch 4 \
      --max-seq-len 64 &&
    dsc compile "$models/qwen2moe-ts/model.onnx" -o "$dir/qwen2moe.dsp" --max-batch 4 \
        --max-seq-len 64 &&
    dsc compile "$models/mixtral-ts/model.onnx" -o "$dir/mixtral-int8.dsp" --dtype int8 \
        --int8-group-size 8 --max-batch 4 --max-seq-len 64 &&
    dsc compile "$models/mixtral-ts/model.onnx" -o "$dir/mixtral-int4.dsp" --dtype int4 \
        --int8-group-size 8 --max-batch 4 --max-seq-len 64 &&
    dsc compile "$models/qwen3moe-ts/model.onnx" -o "$dir/qwen3moe-ep2.dsp" --ep 2 \
        --max-batch 4 --max-seq-len 64 ||
    return 1
  for plan in qwen3moe qwen2moe mixtral-int8 mixtral-int4; do
    echo "--- $plan: GPU against CPU"
    dseval "$dir/$plan.dsp" --reference "$dir/$plan.dsp" --device cuda --min-top1 0.99 \
        --max-abs-error 1e-3 --max-mean-abs-error 1e-4 \
        --prompts "$root/test/quant/prompts.txt" --decode-steps 8 || failed=1
    echo "--- $plan: launches of a prompt and 8 greedy tokens"
    # shellcheck disable=SC2086 # $strict is empty or one option
    DSRT_CUDA_LAUNCH_COUNTS=1 dsrun "$dir/$plan.dsp" --device cuda $strict \
        --prompt-ids 37,122,254,228 --max-new-tokens 8 --ignore-eos >/dev/null \
        2>"$dir/$plan-launches.txt" || failed=1
    grep -E "moe_|fallback" "$dir/$plan-launches.txt"
    [ -z "$strict" ] || grep -q "moe_route" "$dir/$plan-launches.txt" ||
      { echo "no moe_route launch for $plan"; failed=1; }
  done
  if [ -n "$strict" ] && command -v compute-sanitizer >/dev/null 2>&1; then
    for tool in memcheck racecheck; do
      echo "--- compute-sanitizer $tool: qwen2moe"
      compute-sanitizer --tool "$tool" --error-exitcode 9 dsrun "$dir/qwen2moe.dsp" \
          --device cuda --prompt-ids 37,122,254,228 --max-new-tokens 4 --ignore-eos \
          >/dev/null || failed=1
    done
  fi
  echo "--- qwen3moe --ep 2 on two in-process ranks against one rank"
  mkdir -p "$dir/tp1" &&
    dsrun "$dir/qwen3moe.dsp" --device cpu --input-dir "$models/qwen3moe-ts/test_data_set_0" \
        --output-dir "$dir/tp1" --quiet &&
    # shellcheck disable=SC2086
    dsrun "$dir/qwen3moe-ep2.dsp" --ranks inprocess --device cuda $strict \
        --input-dir "$models/qwen3moe-ts/test_data_set_0" --expect-dir "$dir/tp1" \
        --rtol 1e-4 --atol 1e-4 || failed=1
  [ $failed = 0 ] && echo "moe on cuda: within bounds" || echo "moe on cuda: FAILED (above)"
  return $failed
}

step_bench() {
  # shellcheck disable=SC2086 # BENCH_ARGS: more run.sh options, split on spaces
  "$root/bench/gpu/run.sh" --models "$bench_models" --work "$work/bench" ${BENCH_ARGS:-}
}

# Nsight Compute's time of every kernel of a 4-token prompt and 2 greedy decode steps of the
# benchmark's GPT-2 124M fp16 plan (the bench step's), one row per launch: where a decode
# step's time goes. Written to $OUT/profile.csv.
step_profile() {
  plan=$(ls "$work"/bench/gpt2-124m/fp16-*.dsp 2>/dev/null | head -n 1)
  [ -n "$plan" ] || { echo "no GPT-2 124M plan from the bench step"; return 1; }
  ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
  [ -x "$ncu" ] || { echo "no ncu"; return 1; }
  "$ncu" --clock-control none --metrics gpu__time_duration.sum --csv --print-units base \
      --launch-count "${PROFILE_LAUNCHES:-800}" --log-file "$out/profile.csv" \
      dsrun "$plan" --device cuda --prompt-ids 5,6,7,8 --max-new-tokens 3 --ignore-eos ||
    return 1
  python3 - "$out/profile.csv" <<'PY'
import csv, sys, collections
rows = [r for r in csv.DictReader(l for l in open(sys.argv[1]) if l.startswith('"'))
        if r.get("Metric Name") == "gpu__time_duration.sum"]
total = collections.defaultdict(lambda: [0, 0.0])
for r in rows:
    name = r["Kernel Name"].split("(")[0]
    total[name][0] += 1
    total[name][1] += float(r["Metric Value"].replace(",", "")) / 1e3
print(f"{len(rows)} kernels profiled; by kernel: launches, total us, mean us")
for name, (count, us) in sorted(total.items(), key=lambda kv: -kv[1][1])[:25]:
    print(f"  {name[:60]:60s} {count:5d} {us:10.1f} {us / count:8.2f}")
PY
}

if [ -n "$run_one" ]; then
  "$run_one"
  exit $?
fi

run_step info "${LIMIT_info:-20}" step_info
run_step build "${LIMIT_build:-60}" step_build
run_step tests "${LIMIT_tests:-120}" step_tests
run_step engine "${LIMIT_engine:-90}" step_engine
run_step sanitizer "${LIMIT_sanitizer:-90}" step_sanitizer
run_step realistic "${LIMIT_realistic:-150}" step_realistic
run_step int4 "${LIMIT_int4:-240}" step_int4
run_step sinks "${LIMIT_sinks:-90}" step_sinks
run_step moe "${LIMIT_moe:-150}" step_moe
run_step tilegemm "${LIMIT_tilegemm:-300}" step_tilegemm
run_step bench "${LIMIT_bench:-240}" step_bench
run_step profile "${LIMIT_profile:-45}" step_profile

if ! dsrun --list-devices 2>/dev/null | head -n 1 | grep -qv '^cuda devices: 0'; then
  echo >>"$summary"
  echo "No CUDA device: every session ran on the CPU fallback (a dry run of the sweep)." \
    >>"$summary"
fi
[ -f "$out/realistic.md" ] && { echo; cat "$out/realistic.md"; } >>"$summary"
[ -f "$out/gpu-bench.md" ] && { echo; cat "$out/gpu-bench.md"; } >>"$summary"
cat "$summary"
