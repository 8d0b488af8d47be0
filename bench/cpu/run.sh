#!/bin/sh
# The CPU benchmark: our runtime against ONNX Runtime and PyTorch eager, side by side in one
# table, in one run on this machine. From the repository root of a working tree whose build/
# has dsc and dsbench (build/bin, or DSC_BIN_DIR):
#
#   PYTHON=/path/to/python bench/cpu/run.sh [--models gpt2-124m,llama-0.5b]
#       [--dtypes fp32,fp16,int8] [--batches 1,8] [--prompt-len 32] [--new-tokens 32]
#       [--iterations 3] [--warmup 1] [--threads N] [--work DIR] [--out DIR]
#       [--no-ort] [--no-torch] [--max-wait 120] [--retries 2] [--rounds 3]
#       [--report-only]
#
# Per model (bench.py's MODELS: bench/gpu/bench.py's, plus llama-0.5b, Qwen2.5-0.5B's shape):
# 1. builds the HF model with random seeded weights from its config (nothing downloaded) and
#    exports it twice, DIR/nocache/model.onnx for dsc and DIR/past/model.onnx (with a KV
#    cache) for ONNX Runtime (bench.py export);
# 2. per dtype: `dsc compile --arch none --dtype D --max-batch 8 --max-seq-len 256` (a larger
#    batch or prompt + new tokens raise them);
# 3. per batch: `dsbench --device cpu --json` on each plan; ONNX Runtime on the with-past
#    export (prefill from an empty past, then single-token steps fed their presents;
#    bench.py ort) and transformers' model in eager PyTorch with its KV cache (bench.py
#    torch), both in fp32 with the same prompt length, step count and thread count;
#    dsbench and ONNX Runtime alternate --rounds times (torch once); a row is its median
#    round by decode step, with the rounds' range of decode steps beside it;
# 4. prints one table and writes it as cpu-bench.md and cpu-bench.json under --out (default:
#    the work folder).
# Every process runs under /usr/bin/time (peak RSS, %M). The machine may be shared: before each
# measurement run.sh waits (up to --max-wait seconds) until the other processes use less than
# a quarter of a core, and the table says how many cores the others used during each run
# (/proc/stat's busy time less the process's own); a run during which they used more than a
# quarter of a core is taken again, up to --retries times. dsbench uses every hardware
# thread; --threads (default: nproc) sets ONNX Runtime's intra_op_num_threads and
# torch.set_num_threads. Python comes from $PYTHON (default python3): it needs torch,
# transformers, onnx, onnxruntime and numpy.
#
# The work folder (default /tmp/dsc-cpu-bench) keeps the exports and plans and reuses them (a
# plan is compiled again when dsc is newer than it); the measurements are taken afresh on
# every call, one heavy process at a time. A step that fails puts its error in the table and
# the rest goes on. Nothing asserts on time: this is a benchmark, not a test. Each result
# keeps the command that made it, so a row measured badly can be measured again alone (e.g.
# --models llama-0.5b --dtypes fp32 --batches 1) and --report-only then prints the whole
# table from the results in the work folder without measuring anything.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
invocation="bench/cpu/run.sh $*"
[ -n "${PYTHON:-}" ] && invocation="PYTHON=$PYTHON $invocation"
models=gpt2-124m,llama-0.5b dtypes=fp32,fp16,int8 batches=1,8
prompt=32 new=32 iterations=3 warmup=1 threads=$(nproc)
work=/tmp/dsc-cpu-bench out="" ort=1 torch=1 max_wait=120 retries=2 report_only=0 rounds=3
while [ $# -gt 0 ]; do
  case "$1" in
    --models) models=$2; shift ;;
    --dtypes) dtypes=$2; shift ;;
    --batches) batches=$2; shift ;;
    --prompt-len) prompt=$2; shift ;;
    --new-tokens) new=$2; shift ;;
    --iterations) iterations=$2; shift ;;
    --warmup) warmup=$2; shift ;;
    --threads) threads=$2; shift ;;
    --work) work=$2; shift ;;
    --out) out=$2; shift ;;
    --no-ort) ort=0 ;;
    --no-torch) torch=0 ;;
    --report-only) report_only=1 ;;
    --max-wait) max_wait=$2; shift ;;
    --retries) retries=$2; shift ;;
    --rounds) rounds=$2; shift ;;
    -h|--help) sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "run.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
python=${PYTHON:-python3}
bin=${DSC_BIN_DIR:-$root/build/bin}
bench="$root/bench/cpu/bench.py"
for tool in dsc dsbench; do
  [ -x "$bin/$tool" ] || { echo "run.sh: no $bin/$tool: build it first (or set DSC_BIN_DIR)" >&2; exit 2; }
done
timer=""
[ -x /usr/bin/time ] && timer=/usr/bin/time
mkdir -p "$work/results"
out=${out:-$work}

log() { echo "[$(date -u +%H:%M:%S)] $*"; }
largest() { echo "$1" | tr ',' '\n' | sort -n | tail -1; }
max_batch=$(largest "8,$batches")
seq_len=$(largest "256,$((prompt + new))")

# The busy time of every CPU in /proc/stat (user, nice, system, irq, softirq, steal), in ticks.
cpu_busy() { awk '/^cpu /{print $2 + $3 + $4 + $7 + $8 + $9}' /proc/stat; }
tick=$(getconf CLK_TCK 2>/dev/null || echo 100)
# Waits until the other processes use less than a quarter of a core (2 s samples), at most
# --max-wait seconds.
wait_quiet() {
  waited=0
  while [ "$waited" -lt "$max_wait" ]; do
    before=$(cpu_busy); sleep 2; after=$(cpu_busy)
    [ $(((after - before) * 2)) -lt "$tick" ] && return 0
    [ "$waited" = 0 ] && log "  waiting for the machine to be quiet (others use $(echo "$before $after $tick" | awk '{printf "%.1f", ($2 - $1) / $3 / 2}') cores)"
    waited=$((waited + 2))
  done
  log "  still busy after $max_wait s; measuring anyway"
}
# others_cores STEM: the cores the other processes used during measure's last run of STEM.
others_cores() {
  { [ -s "$1.rss" ] && [ -s "$1.cpu" ]; } || { echo 0; return; }
  echo "$(tail -1 "$1.rss") $(cat "$1.cpu")" |
    awk 'NF == 7 && $2 > 0 { printf "%.2f", (($6 - $5) / $7 - $3 - $4) / $2; next } { print 0 }'
}

# measure STEM STDOUT COMMAND...: runs COMMAND under /usr/bin/time (STEM.rss: peak RSS in KiB,
# elapsed, user and system seconds; STEM.cpu: /proc/stat's busy ticks before and after, and
# ticks per second), its stdout to STDOUT and stderr to STEM.log, and records it in
# STEM.cmd. On failure STEM.err holds the log's tail (what the table shows) and STEM.json
# goes.
measure() {
  stem=$1 stdout=$2
  shift 2
  echo "$*" >"$stem.cmd"
  attempt=0
  while :; do
    rm -f "$stem.json" "$stem.err" "$stem.rss" "$stem.cpu" "$stem.log"
    wait_quiet
    before=$(cpu_busy)
    if [ -n "$timer" ]; then
      "$timer" -f "%M %e %U %S" -o "$stem.rss" "$@" >"$stdout" 2>"$stem.log"
    else
      "$@" >"$stdout" 2>"$stem.log"
    fi
    status=$?
    echo "$before $(cpu_busy) $tick" >"$stem.cpu"
    others=$(others_cores "$stem")
    attempt=$((attempt + 1))
    [ $status = 0 ] && [ "$attempt" -le "$retries" ] && awk "BEGIN { exit !($others > 0.25) }" ||
      break
    log "  the other processes used $others cores meanwhile: measuring again"
  done
  if [ $status != 0 ] || [ ! -s "$stem.json" ]; then
    { [ $status != 0 ] && echo "exit status $status:"; tail -5 "$stem.log"; } >"$stem.err"
    rm -f "$stem.json"
    log "  failed: $(tail -1 "$stem.err")"
    return 1
  fi
  return 0
}

names=$(echo "$models" | tr ',' ' ')
[ "$report_only" = 1 ] && names=""
for name in $names; do
  dir=$work/$name
  mkdir -p "$dir"
  rm -f "$dir/export.err"
  if [ ! -f "$dir/model.json" ]; then
    log "$name: build and export (no cache, with past)"
    echo "$python $bench export $name $dir" >"$dir/export.cmd"
    "$python" "$bench" export "$name" "$dir" >"$dir/export.log" 2>&1 ||
      { tail -5 "$dir/export.log" >"$dir/export.err"; log "$name: export failed"; cat "$dir/export.err"; }
  fi
  for dtype in $(echo "$dtypes" | tr ',' ' '); do
    plan=$dir/$dtype-b$max_batch-s$seq_len.dsp
    rm -f "$dir/compile-$dtype.err"
    if [ ! -f "$dir/model.json" ]; then
      { echo "no export:"; cat "$dir/export.err" 2>/dev/null; } >"$dir/compile-$dtype.err"
      continue
    fi
    set -- "$bin/dsc" compile "$dir/nocache/model.onnx" -o "$plan" --arch none --dtype "$dtype" \
      --max-batch "$max_batch" --max-seq-len "$seq_len"
    echo "$*" >"$dir/compile-$dtype.cmd"
    if [ -f "$plan" ] && [ ! "$bin/dsc" -nt "$plan" ]; then
      continue
    fi
    log "$name: dsc compile --dtype $dtype"
    start=$(date +%s)
    if "$@" >"$dir/compile-$dtype.log" 2>&1; then
      log "$name: compiled in $(($(date +%s) - start)) s: $(grep -E '^dsc: recognised' "$dir/compile-$dtype.log" | head -3)"
    else
      rm -f "$plan"
      tail -5 "$dir/compile-$dtype.log" >"$dir/compile-$dtype.err"
      log "$name: dsc compile --dtype $dtype failed"
      cat "$dir/compile-$dtype.err"
    fi
  done
  for batch in $(echo "$batches" | tr ',' ' '); do
    timing="--prompt-len $prompt --new-tokens $new --warmup $warmup --iterations $iterations"
    # dsbench and ONNX Runtime take turns, --rounds times: the machine's memory bandwidth
    # drifts by a quarter within minutes, so each row's median round is compared with the
    # others' from the same minutes. torch eager runs once.
    round=1
    while [ "$round" -le "$rounds" ]; do
      for dtype in $(echo "$dtypes" | tr ',' ' '); do
        plan=$dir/$dtype-b$max_batch-s$seq_len.dsp
        stem=$work/results/$name-dsbench-$dtype-b$batch-r$round
        rm -f "$stem.json" "$stem.err" "$stem.rss" "$stem.cpu" "$stem.cmd"
        [ -f "$plan" ] || continue  # the compile error stands for it
        log "$name: dsbench $dtype, batch $batch (round $round of $rounds)"
        # shellcheck disable=SC2086
        measure "$stem" "$stem.json" "$bin/dsbench" "$plan" --device cpu --batch "$batch" $timing --json &&
          log "  $(grep -E '"avg"' "$stem.json" | tr -d ' \n')"
      done
      if [ "$ort" = 1 ]; then
        stem=$work/results/$name-ort-fp32-b$batch-r$round
        rm -f "$stem.json" "$stem.err" "$stem.rss" "$stem.cpu" "$stem.cmd"
        if [ -f "$dir/model.json" ]; then
          log "$name: onnxruntime fp32, batch $batch (round $round of $rounds)"
          # shellcheck disable=SC2086
          measure "$stem" "$stem.out" "$python" "$bench" ort "$name" "$dir" "$stem.json" \
            --batch "$batch" $timing --threads "$threads"
        fi
      fi
      round=$((round + 1))
    done
    if [ "$torch" = 1 ]; then
      stem=$work/results/$name-torch-fp32-b$batch-r1
      log "$name: torch eager fp32, batch $batch"
      # shellcheck disable=SC2086
      measure "$stem" "$stem.out" "$python" "$bench" torch "$name" "$stem.json" \
        --batch "$batch" $timing --threads "$threads"
    fi
  done
done

flags=""
[ "$ort" = 1 ] || flags="$flags --no-ort"
[ "$torch" = 1 ] || flags="$flags --no-torch"
# shellcheck disable=SC2086
"$python" "$bench" report "$work" --models "$models" --dtypes "$dtypes" --batches "$batches" \
  --prompt-len "$prompt" --new-tokens "$new" --warmup "$warmup" --iterations "$iterations" \
  --threads "$threads" --out "$out" --invocation "$invocation" --rounds "$rounds" $flags
