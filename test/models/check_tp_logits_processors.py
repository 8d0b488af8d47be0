"""transformers' logits processors on a tensor-parallel plan's distributed argmax, against
one rank.

Each processor changes single tokens' scores, so the ranks of a vocabulary-parallel LM head
run them on their own shards before the argmax that combines them. Here one rank (the
processors over whole rows) and the tensor-parallel plan must choose the same greedy tokens
under each processor, and the processors must change something:
* min_new_tokens: a greedy token of a plain run in the last rank's shard made a stop token
  held back until after the last step (one rank must choose another there);
* repetition_penalty, no_repeat_ngram_size and forced_eos_token_id (the last token of
  the vocabulary forced; forced BOS needs a one-token start: the same code, not run here).

    check_tp_logits_processors.py --dsrun dsrun --plan one.dsp --tp-plan tp2.dsp \
        --reference generation.json [--dsp-dump dsp-dump]
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
    parser.add_argument("--reference", required=True, help="generation.json: its prompts")
    parser.add_argument("--dsp-dump", default="dsp-dump")
    args = parser.parse_args()
    # The last rank's shard: a processor that read rank 0's offset on every rank would leave
    # its tokens alone (rank 0's shard starts at 0 either way).
    dump = subprocess.run([args.dsp_dump, args.tp_plan], capture_output=True, text=True).stdout
    shards = re.findall(r"\[(\d+), \+(\d+)\)", dump.split("vocabulary per rank", 1)[-1]
                        .splitlines()[0])
    if len(shards) < 2:
        sys.exit(f"FAIL: {args.tp_plan} has no vocabulary shards: {dump[:300]}")
    last_first = int(shards[-1][0])
    vocab = last_first + int(shards[-1][1])
    prompts = [p["ids"] for p in json.load(open(args.reference))["prompts"]]
    new = 12

    def options(prompt):
        return ["--prompt-ids", ",".join(map(str, prompt)), "--max-new-tokens", str(new),
                "--ignore-eos", "--generation-config", "none"]

    env = dict(os.environ, DSRT_TRACE_GENERATE="1")
    failures = []

    def alike(name, prompt, extra):
        one, _ = generate([args.dsrun, args.plan, *options(prompt), *extra])
        tp, trace = generate([args.dsrun, args.tp_plan, "--ranks", "inprocess",
                              *options(prompt), *extra], env)
        if "greedy by distributed argmax" not in trace:
            failures.append(f"{name}: the tensor-parallel run took no distributed argmax")
        if tp != one:
            failures.append(f"{name}: tensor-parallel {tp} != one rank {one}")
        return one

    plains = [generate([args.dsrun, args.plan, *options(p)])[0] for p in prompts]
    # The first greedy token of the last rank's shard, held back.
    chosen = [(i, k) for i, plain in enumerate(plains) for k, token in enumerate(plain)
              if token >= last_first]
    if not chosen:
        sys.exit(f"FAIL: no greedy token of {plains} is in the last shard [{last_first}, "
                 f"{vocab}): pick another fixture")
    i, step = chosen[0]
    stop = plains[i][step]
    held = alike("min_new_tokens", prompts[i], ["--stop", str(stop), "--min-new-tokens",
                                                str(new)])
    if held[:step] != plains[i][:step] or held[step] == stop:
        failures.append(f"min_new_tokens did not hold back {stop} at step {step}: "
                        f"{held} (plain {plains[i]})")
    changed = {"min_new_tokens": held}
    # Each on the first prompt whose greedy tokens it changes (a random model's repeat
    # somewhere in 12 tokens, or the last token forced).
    for name, extra in (("repetition_penalty", ["--repetition-penalty", "50"]),
                        ("no_repeat_ngram_size", ["--no-repeat-ngram-size", "1"]),
                        ("forced_eos_token_id", ["--forced-eos", str(vocab - 1)])):
        for prompt, plain in zip(prompts, plains):
            tokens = alike(name, prompt, extra)
            if tokens != plain:
                changed[name] = tokens
                break
        else:
            failures.append(f"{name} changed no prompt's tokens: pick another fixture")
    if failures:
        sys.exit("FAIL: " + "\n".join(failures))
    print("OK: alike at TP 2 and one rank: " +
          ", ".join(f"{name} {tokens}" for name, tokens in changed.items()))


if __name__ == "__main__":
    main()
