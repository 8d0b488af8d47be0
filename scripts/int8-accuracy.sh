#!/usr/bin/env bash
# Accuracy and size of int8 weight-only plans (docs/int8.md), on the CPU: every fixture
# family compiled fp32, fp16 and int8 (per output channel, --int8-group-size 128, 64 and 32,
# 64 with --int8-mlp-extra-grouping, per channel with the LM head kept in fp16 by
# --int8-skip-lm-head, and per channel with everything else, the scales included, in bf16
# by --compute-dtype bf16), each reduced-precision plan evaluated against the fp32 plan with
# dseval over the committed prompt set (test/quant/prompts.txt): top-1
# agreement of the next-token logits, max and mean absolute logit error (BERT: its
# last_hidden_state at every position, no top-1). Weight bytes are the plan's rank-0 section
# as dsp-dump sums it; the ratio is against the fp16 plan of the same model (and --tp).
# Also llama at --tp 2 (int8 per channel, ranks as threads) against the fp32 plan at --tp 1,
# and for every decoder the per-channel plan over 8 decode steps after each prompt (dseval
# --decode-steps 8: the KV cache path, each step fed the fp32 plan's argmax).
#
#   scripts/int8-accuracy.sh [--build-dir build | --tools-dir DIR] [--prompts FILE] [--keep DIR]
#
# Prints one Markdown table (with the machine and the commit) on stdout; exits 1 when a
# plan fails to compile or evaluate (its row says so). --keep DIR keeps the plans and
# dseval's JSON there. Needs dsc, dseval and dsp-dump in the build's bin/ (or --tools-dir).
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build
prompts=$root/test/quant/prompts.txt
keep= tools=
while [ $# -gt 0 ]; do
  case $1 in
    --build-dir) build=$2; shift 2 ;;
    --tools-dir) tools=$2; shift 2 ;;
    --prompts) prompts=$2; shift 2 ;;
    --keep) keep=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -u/p' "$0" | sed '$d'; exit 0 ;;
    *) echo "int8-accuracy.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
case $build in /*) ;; *) build=$(pwd)/$build ;; esac
bin=${tools:-$build/bin}
for tool in dsc dseval dsp-dump; do
  [ -x "$bin/$tool" ] || { echo "int8-accuracy.sh: $bin/$tool is missing (ninja -C $build $tool)" >&2; exit 2; }
done
if [ -n "$keep" ]; then
  mkdir -p "$keep" && work=$(cd "$keep" && pwd)
else
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
fi

families="gpt2 opt llama bloom gptj gptneo bert"
# setting name | dsc flags
settings="fp16|--dtype fp16
int8 per-channel|--dtype int8
int8 g128|--dtype int8 --int8-group-size 128
int8 g64|--dtype int8 --int8-group-size 64
int8 g32|--dtype int8 --int8-group-size 32
int8 g64 mlp-extra|--dtype int8 --int8-group-size 64 --int8-mlp-extra-grouping
int8 per-channel skip-lm-head|--dtype int8 --int8-skip-lm-head
int8 per-channel bf16|--dtype int8 --compute-dtype bf16"
status=0

# Prompts are at most 24 tokens; 64 is within every fixture's position table.
compile() {  # model plan flags...
  local model=$1 plan=$2
  shift 2
  "$bin/dsc" compile "$model" -o "$plan" --arch none --max-seq-len 64 "$@" \
    > "$plan.log" 2>&1
}

# The rank-0 section's "weight bytes: N total (...); tfm.linear weights and scales M" line.
weight_bytes() { sed -n 's/^    weight bytes: \([0-9]*\) total.*/\1/p' "$1" | head -1; }
linear_bytes() { sed -n 's/^    weight bytes: .*tfm.linear weights and scales \([0-9]*\);.*/\1/p' "$1" | head -1; }
first_error() { grep -h -m1 'error' "$@" || tail -qn1 "$@"; }
json_field() { sed -n "s/.*\"$2\": \([^,}]*\).*/\1/p" "$1"; }
# The largest fp32 margin (top logit minus the logit the candidate chose) among the prompts
# whose argmax flipped: "-" when none did.
flip_margin() {
  tr '{' '\n' < "$1" | sed -n 's/.*"reference_margin": \([^}]*\)}.*/\1/p' |
    awk 'BEGIN { m = "" } { if (m == "" || $1 > m) m = $1 } END { if (m == "") print "-"; else printf "%.2g", m }'
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0 && a != "") printf "%.3f", a / b; else printf "-" }'; }
fmt() { awk -v x="$1" 'BEGIN { if (x == "" || x == "null") printf "n/a"; else printf "%.3g", x }'; }

failed_row() {  # family setting message
  echo "| $1 | $2 | $(echo "$3" | head -1 | head -c 200 | tr '|' '/') | | | | | | | | |"
  status=1
}

row() {  # family setting plan reference fp16plan [dseval flags...]
  local family=$1 setting=$2 plan=$3 reference=$4 fp16=$5
  shift 5
  local result
  result=$work/$family/$(echo "$setting" | tr -c 'a-zA-Z0-9\n' '-').json
  if ! "$bin/dseval" "$plan" --reference "$reference" --prompts "$prompts" --json "$@" \
      > "$result" 2> "$result.err"; then
    failed_row "$family" "$setting" "dseval failed: $(tr '\n' ' ' < "$result.err")"
    return
  fi
  "$bin/dsp-dump" "$plan" > "$plan.dump" 2>&1
  "$bin/dsp-dump" "$fp16" > "$fp16.dump" 2>&1
  local top1 agree n bytes fp16bytes lin fp16lin
  top1=$(json_field "$result" top1)
  agree=$(json_field "$result" top1_agree)
  n=$(json_field "$result" rows)
  if [ "$top1" = null ]; then top1="n/a"; else top1="$agree/$n"; fi
  bytes=$(weight_bytes "$plan.dump"); fp16bytes=$(weight_bytes "$fp16.dump")
  lin=$(linear_bytes "$plan.dump"); fp16lin=$(linear_bytes "$fp16.dump")
  echo "| $family | $setting | $top1 | $(flip_margin "$result") |" \
       "$(fmt "$(json_field "$result" max_abs_error)") |" \
       "$(fmt "$(json_field "$result" mean_abs_error)") |" \
       "$(fmt "$(json_field "$result" reference_max_abs)") | $bytes | $fp16bytes |" \
       "$(ratio "$bytes" "$fp16bytes") | $(ratio "$lin" "$fp16lin") |"
}

commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)
git -C "$root" diff --quiet 2>/dev/null || commit="$commit+local changes"
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
count=$(grep -cv '^[[:space:]]*\(#\|$\)' "$prompts")
echo "int8 accuracy and size, $(date -u '+%Y-%m-%d %H:%M UTC'), commit $commit"
echo "machine: $(uname -m), $(nproc) cores, $cpu; CPU backend"
echo "prompts: $prompts ($count prompts); reference: the fp32 plan of each model"
echo
echo "| family | setting | top-1 | flip margin | max abs err | mean abs err | ref max \|value\| |" \
     "weight bytes | fp16 weight bytes | ratio | linear ratio |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
for family in $families; do
  model=$root/test/models/$family-op17/model.onnx
  mkdir -p "$work/$family"
  fp32=$work/$family/fp32.dsp fp16=$work/$family/fp16.dsp
  if ! compile "$model" "$fp32" || ! compile "$model" "$fp16" --dtype fp16; then
    failed_row "$family" fp32/fp16 "compile failed: $(first_error "$fp32.log" "$fp16.log" 2>/dev/null)"
    continue
  fi
  while IFS='|' read -r setting flags; do
    plan=$work/$family/$(echo "$setting" | tr ' ' '-').dsp
    # shellcheck disable=SC2086  # flags is a list of words
    if [ "$setting" != fp16 ] && ! compile "$model" "$plan" $flags; then
      failed_row "$family" "$setting" "compile failed: $(first_error "$plan.log")"
      continue
    fi
    [ "$setting" = fp16 ] && plan=$fp16
    row "$family" "$setting" "$plan" "$fp32" "$fp16"
  done <<< "$settings"
  # Decode through the KV cache: 8 more steps per prompt, fed the fp32 plan's argmax.
  if [ "$family" != bert ] && [ -f "$work/$family/int8-per-channel.dsp" ]; then
    row "$family" "int8 per-channel, +8 decode steps" "$work/$family/int8-per-channel.dsp" \
      "$fp32" "$fp16" --decode-steps 8
  fi
done

# Quantized after sharding: each rank's shard has its own scales.
model=$root/test/models/llama-op17/model.onnx
tp2=$work/llama/int8-tp2.dsp fp16tp2=$work/llama/fp16-tp2.dsp
if compile "$model" "$tp2" --dtype int8 --tp 2 && compile "$model" "$fp16tp2" --dtype fp16 --tp 2; then
  row llama "int8 per-channel --tp 2" "$tp2" "$work/llama/fp32.dsp" "$fp16tp2" --ranks inprocess
else
  failed_row llama "int8 per-channel --tp 2" \
    "compile failed: $(first_error "$tp2.log" "$fp16tp2.log")"
fi
echo
echo "top-1: prompts (rows: with decode steps, prompts x 9) whose next-token argmax equals the"
echo "fp32 plan's (BERT: n/a, its last_hidden_state is compared at every position). flip margin:"
echo "the largest fp32 gap between the top logit and the one the candidate chose, over the"
echo "prompts that flipped."
echo "Errors are absolute, in logits."
echo "weight bytes: the plan's (rank 0's) weights as stored; ratio: over the fp16 plan's;"
echo "linear ratio: the tfm.linear weights (+ int8 scales) alone, over their fp16 bytes"
echo "(the LM head, tfm.lm_head, is counted in weight bytes, not in the linear ratio)."
exit $status
