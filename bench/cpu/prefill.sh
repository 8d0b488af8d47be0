#!/usr/bin/env bash
# Long-prompt prefill on the CPU (issue 47): two dsbench builds (before and after a change)
# on one plan, alternating, then a per-op, per-layer profile of the second at each length.
# The machine may be shared: the rounds alternate so that both builds see the same drift,
# and every round is kept (bench/cpu/RESULTS.md reports the range).
#
#   bench/cpu/prefill.sh BEFORE_DSBENCH AFTER_DSBENCH PLAN OUT [LENGTHS] [ROUNDS]
#
# LENGTHS: comma list of prompt lengths (default 512,2048,8192); ROUNDS: before/after pairs
# per length (default 2; the even rounds run the second build first). Each run:
#   dsbench PLAN --device cpu --batch 1 --prompt-len N --new-tokens 8 --warmup W
#            --iterations I --json
# (W 1, I 3 below 2048 tokens; W 1, I 2 at 2048; W 0, I 1 above), its JSON in
# OUT/{before,after}-N-R.json. Profiles: DSRT_PROFILE=layers (runtime/src/cpu/Session.cpp)
# with W 0, I 1, stderr in OUT/profile-N.txt. OUT/summary.md: one row per run.
set -euo pipefail
if [ $# -lt 4 ]; then
  sed -n '2,16p' "$0"
  exit 2
fi
before=$1 after=$2 plan=$3 out=$4
lengths=${5:-512,2048,8192} rounds=${6:-2}
mkdir -p "$out"

runs() {  # length -> "warmup iterations"
  if [ "$1" -lt 2048 ]; then echo "1 3"; elif [ "$1" -eq 2048 ]; then echo "1 2"; else echo "0 1"; fi
}

one() {  # which binary length round
  local which=$1 n=$2 round=$3 bin
  bin=$([ "$which" = before ] && echo "$before" || echo "$after")
  read -r warmup iterations < <(runs "$n")
  # The 1-minute load average as the run starts: 2 or more on 2 cores means others ran too.
  echo "$(date -u +%H:%M:%S) $which $n round $round, load $(cut -d' ' -f1 /proc/loadavg)" >&2
  "$bin" "$plan" --device cpu --batch 1 --prompt-len "$n" --new-tokens 8 --warmup "$warmup" \
    --iterations "$iterations" --json >"$out/$which-$n-$round.json"
}

IFS=, read -r -a sizes <<<"$lengths"
for n in "${sizes[@]}"; do
  for round in $(seq 1 "$rounds"); do
    if [ $((round % 2)) -eq 1 ]; then
      one before "$n" "$round"; one after "$n" "$round"
    else
      one after "$n" "$round"; one before "$n" "$round"
    fi
  done
done
for n in "${sizes[@]}"; do
  echo "$(date -u +%H:%M:%S) profile $n" >&2
  DSRT_PROFILE=layers "$after" "$plan" --device cpu --batch 1 --prompt-len "$n" --new-tokens 8 \
    --warmup 0 --iterations 1 >"$out/profile-$n.out" 2>"$out/profile-$n.txt"
done

python3 - "$out" <<'EOF'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
rows = ["| prompt | build | round | prefill ms | decode step ms (avg) | peak RSS MiB |",
        "|---:|---|---:|---:|---:|---:|"]
def key(p):
    which, n, r = p.stem.split("-")
    return int(n), int(r), which
for path in sorted(out.glob("*-*-*.json"), key=key):
    which, n, r = path.stem.split("-")
    d = json.loads(path.read_text())
    prefill = d["prefill_ms"]["avg"] if isinstance(d["prefill_ms"], dict) else d["prefill_ms"]
    decode = d["decode_ms"]["avg"] if isinstance(d["decode_ms"], dict) else d["decode_ms"]
    rows.append(f"| {n} | {which} | {r} | {prefill:.0f} | {decode:.2f} | "
                f"{d['peak_resident_bytes'] / 2**20:.0f} |")
(out / "summary.md").write_text("\n".join(rows) + "\n")
print("\n".join(rows))
EOF
