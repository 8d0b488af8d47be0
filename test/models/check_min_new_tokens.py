"""--min-new-tokens on a tensor-parallel plan's distributed argmax, against one rank.

The greedy token at step K of a plain run becomes a stop token held back until step N > K:
one rank (the logits processors over whole rows) must then choose another token at step K,
and the tensor-parallel plan, whose ranks each hold back the stop tokens of their own shard of
the vocabulary before the distributed argmax, must choose the same tokens throughout.

    check_min_new_tokens.py --dsrun dsrun --plan one.dsp --tp-plan tp2.dsp \
        --reference generation.json [--step 2]
"""
import argparse
import json
import os
import re
import subprocess
import sys


def generate(command, env=None):
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        sys.exit(f"FAIL: {' '.join(command)}: {done.stderr}")
    found = re.search(r"sequence 0:((?: \d+)*)", done.stdout)
    if not found:
        sys.exit(f"FAIL: {' '.join(command)} printed no sequence: {done.stdout}")
    return [int(t) for t in found.group(1).split()], done.stderr


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--dsrun", required=True)
    parser.add_argument("--plan", required=True)
    parser.add_argument("--tp-plan", required=True)
    parser.add_argument("--reference", required=True, help="generation.json: its first prompt")
    parser.add_argument("--step", type=int, default=2)
    args = parser.parse_args()
    prompt = json.load(open(args.reference))["prompts"][0]["ids"]
    new = args.step + 4
    base = ["--prompt-ids", ",".join(map(str, prompt)), "--max-new-tokens", str(new),
            "--ignore-eos", "--generation-config", "none"]
    plain, _ = generate([args.dsrun, args.plan, *base])
    stop = plain[args.step]
    held = base + ["--stop", str(stop), "--min-new-tokens", str(new)]
    one, _ = generate([args.dsrun, args.plan, *held])
    env = dict(os.environ, DSRT_TRACE_GENERATE="1")
    tp, trace = generate([args.dsrun, args.tp_plan, "--ranks", "inprocess", *held], env)
    failures = []
    if "greedy by distributed argmax" not in trace:
        failures.append(f"the tensor-parallel run took no distributed argmax: {trace}")
    if one[:args.step] != plain[:args.step] or one[args.step] == stop:
        failures.append(f"one rank did not hold back {stop} at step {args.step}: {one} "
                        f"(plain {plain})")
    if tp != one:
        failures.append(f"tensor-parallel {tp} != one rank {one}")
    if failures:
        sys.exit("FAIL: " + "\n".join(failures))
    print(f"OK: stop token {stop} held back at step {args.step}: {one}, alike at TP")


if __name__ == "__main__":
    main()
