#!/bin/sh
# The GPU benchmark, on the GPU machine, from the repository root of a working tree that
# carries build-gpu-bundle/ (scripts/gpu-bundle.sh):
#
#   bench/gpu/run.sh [--models gpt2-124m,gpt2-355m,...] [--prompt-len 128] [--new-tokens 128]
#                    [--iterations 5] [--warmup 2] [--work DIR] [--no-hf] [--no-compile]
#                    [--tests] [--no-bench] [--no-int8] [--int8-group-size G]
#
# 1. builds libdsrt, dsrun, dsbench and dseval there (cmake -DDSC_RUNTIME_ONLY=ON, with the bundle's
#    generated plan header and header-only dependencies) into build-gpu-rt/;
# 2. per model: builds the HF model with random weights from its config and exports it to
#    ONNX (bench.py export, tools/fixtures' export code), `dsc compile --dtype fp16`, and
#    `dsbench --device cuda --json` at batch 1; then times transformers in fp16 on the same
#    GPU (bench.py hf: eager and torch.compile, the same prompt and step count);
#    Each model is also compiled with `--dtype int8` (weight-only, per output channel, or
#    --int8-group-size G; docs/int8.md) and timed the same way: its row gives the speedup over
#    the fp16 row and the weight bandwidth it achieves (--no-int8 leaves it out);
# 3. prints one table and writes it as markdown and JSON under $OUT when it is set.
# --tests runs the GPU test suite (test/gpu, `ctest -L gpu`) after the build; --no-bench
# skips the benchmark.
#
# Every step's result is kept under the work folder (default /tmp/dsc-gpu-bench) and reused,
# so a long list can be split over several calls (a 10-minute limit per command: export and
# compile of the 1.5B models take minutes each). A model whose step fails gets its error in
# the table; the others go on.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
models=gpt2-124m,gpt2-355m,gpt2-774m,gpt2-1.5b,opt-1.3b,llama-1b
prompt=128 new=128 iterations=5 warmup=2 work=/tmp/dsc-gpu-bench hf=1 compile=1 tests=0 bench=1
int8=1 group=0
while [ $# -gt 0 ]; do
  case "$1" in
    --models) models=$2; shift ;;
    --prompt-len) prompt=$2; shift ;;
    --new-tokens) new=$2; shift ;;
    --iterations) iterations=$2; shift ;;
    --warmup) warmup=$2; shift ;;
    --work) work=$2; shift ;;
    --no-hf) hf=0 ;;
    --no-compile) compile=0 ;;
    --tests) tests=1 ;;
    --no-bench) bench=0 ;;
    --no-int8) int8=0 ;;
    --int8-group-size) group=$2; shift ;;
    *) echo "run.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
bundle=$root/build-gpu-bundle
build=${DSC_RUNTIME_BUILD_DIR:-$root/build-gpu-rt}
# The bundle travels compressed (scripts/gpu-bundle.sh --carry).
if [ ! -x "$bundle/bin/dsc" ] && [ -f "$root/build-gpu-carry/bundle.tar.xz" ]; then
  tar -C "$root" -xJf "$root/build-gpu-carry/bundle.tar.xz"
fi
python=${PYTHON:-python3}
[ -x "$bundle/bin/dsc" ] || { echo "run.sh: no $bundle/bin/dsc: run scripts/gpu-bundle.sh first and carry build-gpu-bundle" >&2; exit 2; }
mkdir -p "$work"

log() { echo "[$(date -u +%H:%M:%S)] $*"; }

# 1. The runtime, built here (no LLVM on this machine).
# dseval: the GPU suite's int8 tests (test/gpu/int8*.test) compare plans with it.
if [ ! -x "$build/bin/dsbench" ] || [ ! -x "$build/bin/dsrun" ] || [ ! -x "$build/bin/dseval" ]; then
  log "building libdsrt, dsrun, dsbench, dseval (runtime-only) in $build"
  cmake -G Ninja -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DDSC_RUNTIME_ONLY=ON \
        -DDSC_PLAN_GENERATED_DIR="$bundle/generated" \
        -DDSC_BUNDLED_INCLUDE_DIR="$bundle/include" -DDSC_EXTRA_TOOLS_DIR="$bundle/bin" \
        -DLLVM_EXTERNAL_LIT="$bundle/bin/lit" >"$work/cmake.log" 2>&1 &&
    ninja -C "$build" dsrt dsrun dsbench dsp-dump dsp-roofline dseval >"$work/ninja.log" 2>&1 ||
    { tail -30 "$work/cmake.log" "$work/ninja.log"; echo "run.sh: the runtime build failed" >&2; exit 1; }
fi
export PATH="$bundle/bin:$build/bin:$PATH"
log "$(dsrun --list-devices)"
# dsc compiles the plans' kernels with NVRTC, opened with dlopen: the CUDA toolkit's, or the
# one that comes with PyTorch's wheels.
if [ -z "${DSC_NVRTC:-}" ] && [ ! -e /usr/local/cuda/lib64/libnvrtc.so ]; then
  nvrtc=$("$python" -c 'import glob, os, nvidia; print(next(iter(sorted(glob.glob(os.path.join(os.path.dirname(nvidia.__file__), "*nvrtc*", "lib", "libnvrtc.so*")))), ""))' 2>/dev/null)
  [ -n "$nvrtc" ] && export DSC_NVRTC="$nvrtc" && log "NVRTC: $nvrtc"
fi

if [ "$tests" = 1 ]; then
  log "GPU test suite"
  DSC_CACHE_DIR=$work/kernel-cache ctest --test-dir "$build" -L gpu --output-on-failure
  status=$?
  [ "$bench" = 1 ] || exit $status
fi
[ "$bench" = 1 ] || exit 0

names=$(echo "$models" | tr ',' ' ')
seq_len=$((prompt + new))
# Every export starts at once, in the background (CPU work: 95 s for the 1B Llama on the
# H200's machine, one after the other the longest part of a call), while the GPU times the
# models whose exports are done.
for name in $names; do
  dir=$work/$name
  mkdir -p "$dir"
  if [ ! -f "$dir/model.json" ]; then
    rm -f "$dir/export.status"
    log "$name: export (in the background)"
    ( OMP_NUM_THREADS=4 "$python" "$root/bench/gpu/bench.py" export "$name" "$dir" \
          >"$dir/export.log" 2>&1
      echo $? >"$dir/export.status" ) &
  fi
done
for name in $names; do
  dir=$work/$name
  rm -f "$dir/error.txt"
  while [ ! -f "$dir/model.json" ] && [ ! -f "$dir/export.status" ]; do sleep 1; done
  if [ ! -f "$dir/model.json" ] || [ "$(cat "$dir/export.status" 2>/dev/null || echo 0)" != 0 ]; then
    tail -20 "$dir/export.log" > "$dir/error.txt"; log "$name: export failed"; cat "$dir/error.txt"; continue
  fi
  log "$name: exported"
  plan=$dir/fp16-$seq_len.dsp
  if [ ! -f "$plan" ]; then
    log "$name: dsc compile --dtype fp16"
    dsc compile "$dir/model.onnx" -o "$plan" --dtype fp16 --max-batch 1 --max-seq-len "$seq_len" \
        >"$dir/dsc.log" 2>&1 ||
      { rm -f "$plan"; tail -20 "$dir/dsc.log" > "$dir/error.txt"; log "$name: dsc failed"; cat "$dir/error.txt"; continue; }
    grep -E "^dsc: (recognised|left generic)" "$dir/dsc.log"
  fi
  log "$name: dsbench --device cuda"
  dsbench "$plan" --device cuda --strict --batch 1 --prompt-len "$prompt" --new-tokens "$new" \
      --warmup "$warmup" --iterations "$iterations" --json >"$dir/dsbench.json" 2>"$dir/dsbench.log" ||
    { rm -f "$dir/dsbench.json"; tail -20 "$dir/dsbench.log" > "$dir/error.txt"; log "$name: dsbench failed"; cat "$dir/error.txt"; }
  [ -f "$dir/dsbench.json" ] && log "$name: fp16 $("$python" -c 'import json, sys; r = json.load(open(sys.argv[1])); print("%.3f ms/token, prefill %.2f ms" % (r["decode_ms"]["avg"], r["prefill_ms"]["avg"]))' "$dir/dsbench.json" 2>/dev/null)"
  # The performance model's prediction beside the measurement (bench/roofline/README.md),
  # at the decode's mean context.
  dsp-roofline "$plan" --context $((prompt + new / 2)) >"$dir/roofline.txt" 2>&1 ||
    log "$name: dsp-roofline failed"
  if [ "$int8" = 1 ]; then
    # The fp16 plan's limits and dsbench's settings, so that only the weights differ.
    rm -f "$dir/error-int8.txt" "$dir/dsbench-int8.json"
    plan8=$dir/int8-g$group-$seq_len.dsp
    grouping=""
    [ "$group" = 0 ] || grouping="--int8-group-size $group"
    if [ ! -f "$plan8" ]; then
      log "$name: dsc compile --dtype int8 $grouping"
      dsc compile "$dir/model.onnx" -o "$plan8" --dtype int8 $grouping \
          --max-batch 1 --max-seq-len "$seq_len" >"$dir/dsc-int8.log" 2>&1 ||
        { rm -f "$plan8"; tail -20 "$dir/dsc-int8.log" > "$dir/error-int8.txt"; log "$name: dsc --dtype int8 failed"; cat "$dir/error-int8.txt"; }
    fi
    if [ -f "$plan8" ]; then
      log "$name: dsbench --device cuda (int8)"
      dsbench "$plan8" --device cuda --strict --batch 1 --prompt-len "$prompt" --new-tokens "$new" \
          --warmup "$warmup" --iterations "$iterations" --json >"$dir/dsbench-int8.json" 2>"$dir/dsbench-int8.log" ||
        { rm -f "$dir/dsbench-int8.json"; tail -20 "$dir/dsbench-int8.log" > "$dir/error-int8.txt"; log "$name: dsbench (int8) failed"; cat "$dir/error-int8.txt"; }
    fi
  fi
  if [ "$hf" = 1 ]; then
    log "$name: transformers fp16"
    flags=""
    [ "$compile" = 1 ] || flags=--no-compile
    "$python" "$root/bench/gpu/bench.py" hf "$name" "$dir/hf.json" --prompt-len "$prompt" \
        --new-tokens "$new" --iterations "$iterations" --warmup "$warmup" $flags \
        >"$dir/hf.log" 2>&1 || { log "$name: transformers failed"; tail -5 "$dir/hf.log"; }
  fi
  # The table so far after every model, so that a call cut off by its time limit still
  # brings back the models it finished.
  done_names="${done_names:-} $name"
  "$python" "$root/bench/gpu/bench.py" report "$work" $done_names >"$work/report.txt" 2>&1 ||
    tail -5 "$work/report.txt"
done
cat "$work/report.txt"
