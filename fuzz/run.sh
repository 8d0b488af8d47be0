#!/usr/bin/env bash
# Fuzzes each harness for a while (issue 19; docs/reliability.md, "Fuzzing"):
#
#   fuzz/run.sh SECONDS [harness...]   harnesses: onnx-importer onnx-compile onnx-generate plan
#                                      tokenizer c-api engine
#
# The harnesses come from a libFuzzer build (DSC_FUZZ_BUILD, default build-asan, configured
# with CXX=clang++-22 -DDSC_ENABLE_ASAN=ON -DDSC_ENABLE_FUZZ=ON: see .ci/run); the plan seeds
# from the main build's tests (DSC_BUILD_DIR, default build; its ctest makes them). Corpora grow
# under DSC_FUZZ_WORK (default $DSC_FUZZ_BUILD/fuzz-work) from one run to the next. A crash
# stops with the reproducer's path: keep it under fuzz/regressions/<harness>/ once fixed.
# DSC_FUZZ_RUNS=N also stops each harness after N executions.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
python3 "$ROOT/scripts/fixtures.py" unpack  # the fixtures are seeds (scripts/fixtures.py)
SECONDS_EACH="${1:?usage: fuzz/run.sh SECONDS [harness...]}"
shift
HARNESSES=("$@")
((${#HARNESSES[@]})) || HARNESSES=(onnx-importer onnx-compile onnx-generate plan tokenizer c-api engine)
FUZZ_BUILD="${DSC_FUZZ_BUILD:-$ROOT/build-asan}"
MAIN_BUILD="${DSC_BUILD_DIR:-$ROOT/build}"
WORK="${DSC_FUZZ_WORK:-$FUZZ_BUILD/fuzz-work}"
PLAN_SEEDS="$MAIN_BUILD/fuzz/seeds/plan"

# The largest seed model, in KB; -max_len is a little more.
max_kb() { [ "$1" = onnx-generate ] && echo 800 || echo 300; }

seeds() {
  case "$1" in
    # libFuzzer truncates inputs past -max_len, and a truncated model no longer parses.
    onnx-importer|onnx-compile|onnx-generate)
      # Encoder-decoders' halves too (T5's relative position bias, BART's decoder); the
      # whole path also optimum's merged decoders and the larger halves (under 800 KB).
      find "$ROOT"/test/models \( -name model.onnx -o -name encoder.onnx -o -name decoder.onnx \) \
        -size "-$(max_kb "$1")k" | sort
      # ONNX Runtime's contrib ops and the QDQ form with their weights inline (MoE, QMoE,
      # MatMulNBits, 4-bit DequantizeLinear), which the fixtures keep in external data.
      find "$ROOT"/test/node-tests/com.microsoft -name model.onnx -size "-$(max_kb "$1")k" | sort
      ls "$ROOT"/test/frontends/onnx/ops/*.onnxtxt ;;
    plan) ls "$PLAN_SEEDS"/*.dsp ;;
    tokenizer) ls "$ROOT"/test/tokenizers/*.json | grep -v cases.json ;;
    c-api) ls "$ROOT"/fuzz/seeds/c-api.bin ;;
    engine) ls "$ROOT"/fuzz/seeds/engine/* ;;
  esac
  ls "$ROOT/fuzz/regressions/$1"/* 2>/dev/null || true
  case "$1" in
    onnx-compile) ls "$ROOT"/fuzz/regressions/onnx-importer/* 2>/dev/null || true ;;
    # With the interface seeds the main build's ctest makes (fuzz/MakeGenerateSeeds.cmake).
    onnx-generate) ls "$ROOT"/fuzz/regressions/onnx-importer/* \
                      "$ROOT"/fuzz/regressions/onnx-compile/* \
                      "$MAIN_BUILD"/fuzz/seeds/onnx-generate/* 2>/dev/null || true ;;
  esac
}

export DSRT_FUZZ_PLAN="$PLAN_SEEDS/llama.dsp"
# The session's fast kernels start no threads of their own per input this way.
export OMP_NUM_THREADS=1
for harness in "${HARNESSES[@]}"; do
  binary="$FUZZ_BUILD/bin/fuzz-$harness"
  [ -x "$binary" ] || { echo "fuzz/run.sh: no $binary (build it in $FUZZ_BUILD)" >&2; exit 2; }
  corpus="$WORK/corpus/$harness"
  mkdir -p "$corpus" "$WORK/crashes"
  if [ -z "$(ls -A "$corpus")" ]; then
    seeds "$harness" | while read -r seed; do cp "$seed" "$corpus/seed-$(basename "$(dirname "$seed")")-$(basename "$seed")"; done
  fi
  echo "== fuzz-$harness for ${SECONDS_EACH}s ($(ls "$corpus" | wc -l) inputs in $corpus)"
  # This run's artifacts only: a crash kept from an earlier run (fixed since, or being
  # fixed) had been reported again as this run's.
  started="$WORK/crashes/.started-$harness"
  touch "$started"
  sleep 1  # file times are whole seconds on some filesystems
  "$binary" -max_total_time="$SECONDS_EACH" -runs="${DSC_FUZZ_RUNS:--1}" -timeout=60 -rss_limit_mb=6144 \
      -max_len=$(($(max_kb "$harness") * 1024 + 100000)) -print_final_stats=1 -artifact_prefix="$WORK/crashes/$harness-" \
      "$corpus" 2>&1 | grep -v "failed to allocate" | grep -E "^(stat::number_of_executed_units|stat::average_exec_per_sec|stat::peak_rss_mb|==|SUMMARY|fuzz:|INFO: Seed)|^ +#[0-9]+ |^(READ|WRITE) of size|is located|ERROR|Test unit written|deadly signal|Done [0-9]+ runs" || true
  # libFuzzer also writes slow-unit-* files (over 10 s): on a machine shared with builds
  # they are often the load's, not the input's; they are listed, not failed on.
  artifacts=$(find "$WORK/crashes" -maxdepth 1 -name "$harness-*" -newer "$started" | sort)
  if grep -q -- "-slow-unit-" <<<"$artifacts"; then
    echo "fuzz/run.sh: fuzz-$harness: slow inputs (time them alone): $(grep -- -slow-unit- <<<"$artifacts")" >&2
  fi
  if grep -v -- "-slow-unit-" <<<"$artifacts" | grep -q .; then
    echo "fuzz/run.sh: fuzz-$harness found a crash: $(grep -v -- -slow-unit- <<<"$artifacts")" >&2
    exit 1
  fi
done
