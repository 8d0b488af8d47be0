#!/usr/bin/env python3
"""Checks a plan's generation against the transformers reference in generation.json.

* Each prompt alone: greedy tokens equal `model.generate`'s (exact ids).
* The prompts as one left-padded batch: each row's tokens equal the prompt alone's.
* With --distributed-argmax N: every greedy run took the tensor-parallel greedy path (the
  prefill_greedy/decode_greedy programs and one all-reduce of packed argmax keys instead of
  gathered logits), as each of the N ranks says on stderr under DSRT_TRACE_GENERATE=1.
* With --prefill: the `prefill` program's last-position logits of each prompt alone match
  transformers' within |ours - ref| <= atol + rtol * |ref| (defaults 1e-4, 1e-4: fp32 with a
  different summation order).
* With --text: each of generation.json's "text_prompts", given to `dsrun --prompt` (the
  plan's own tokenizer), prints exactly the text transformers decoded from its greedy ids
  (an encoder-decoder prints the answer alone, without the prompt).

Standard library only (lit already needs python3); the .pb reader handles the float
TensorProtos dsrun writes.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tensorproto import read_float_tensor  # noqa: E402


def run(command, env=None, stderr_out=None):
    result = subprocess.run(command, capture_output=True, text=True, env=env)
    if result.returncode != 0:
        sys.exit(f"FAIL: {' '.join(command)}\n{result.stdout}{result.stderr}")
    if stderr_out is not None:
        stderr_out.append(result.stderr)
    return result.stdout


def dsrun(args):
    """dsrun on the plan, under the launcher (mpirun ...) and with the extra arguments."""
    return args.launcher.split() + [args.dsrun, args.plan] + args.dsrun_arg


def eos_options(reference) -> list:
    """dsrun's options for EOS as the reference's generator treated it. Most references
    only do not stop at EOS (--ignore-eos). onnxruntime_genai's Generator, run with
    min_length = max_length (the key min_new_tokens, or references written before the key),
    keeps EOS out: where a random model's argmax is EOS it takes the next likeliest token,
    so dsrun is given --min-new-tokens. Not both: --ignore-eos takes EOS out of the stop
    tokens that --min-new-tokens holds back, as vLLM's ignore_eos does min_tokens'."""
    if "min_new_tokens" in reference:
        return ["--min-new-tokens", str(reference["min_new_tokens"])]
    if reference.get("how", "").startswith("onnxruntime_genai.Generator"):
        return ["--min-new-tokens", str(reference["max_new_tokens"])]
    return ["--ignore-eos"]


def generate(args, prompts, max_new):
    # The references are transformers' with every logits processor off (BART's own
    # forced_eos_token_id too): dsrun leaves the model's generation_config.json out as well.
    command = dsrun(args) + ["--max-new-tokens", str(max_new), "--generation-config",
                             "none", *args.eos_options]
    for prompt in prompts:
        command += ["--prompt-ids", ",".join(map(str, prompt))]
    env = None
    stderr = []
    if args.distributed_argmax:
        env = dict(os.environ, DSRT_TRACE_GENERATE="1")
    stdout = run(command, env, stderr)
    if args.distributed_argmax:
        for rank in range(args.distributed_argmax):
            note = (f"rank {rank}: greedy by distributed argmax over "
                    f"{args.distributed_argmax} vocabulary shards")
            if note not in stderr[0]:
                sys.exit(f"FAIL: {' '.join(command)}: no '{note}' on stderr:\n{stderr[0]}")
    return sequences(stdout, len(prompts))


def sequences(stdout, count):
    """The ids of dsrun's 'sequence N: ids (reason)' lines, by N (None where missing)."""
    rows = {}
    for line in stdout.splitlines():
        match = re.match(r"sequence (\d+):((?: \d+)*) \((\w+)\)", line)
        if match:
            rows[int(match.group(1))] = [int(t) for t in match.group(2).split()]
    return [rows.get(i) for i in range(count)]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--dsrun", required=True)
    parser.add_argument("--plan", required=True)
    parser.add_argument("--reference", required=True, help="generation.json")
    parser.add_argument("--prefill", action="store_true",
                        help="also check the prefill program's logits")
    parser.add_argument("--alone-only", action="store_true",
                        help="skip the batch (an export that cannot take position_ids)")
    parser.add_argument("--dsrun-arg", action="append", default=[],
                        help="an extra dsrun argument (repeat: --dsrun-arg=--ranks "
                             "--dsrun-arg=inprocess)")
    parser.add_argument("--launcher", default="",
                        help="a command that runs dsrun, e.g. 'mpirun -np 2'")
    parser.add_argument("--distributed-argmax", type=int, default=0, metavar="N",
                        help="require every greedy run of the N ranks to take the "
                             "distributed argmax")
    parser.add_argument("--text", action="store_true",
                        help="also check the text prompts through the plan's tokenizer")
    parser.add_argument("--rtol", type=float, default=1e-4)
    parser.add_argument("--atol", type=float, default=1e-4)
    args = parser.parse_args()
    reference = json.load(open(args.reference))
    args.eos_options = eos_options(reference)
    prompts = [p["ids"] for p in reference["prompts"]]
    expected = [p["generated"] for p in reference["prompts"]]
    max_new = reference["max_new_tokens"]
    failures = []

    for i, prompt in enumerate(prompts):
        alone = generate(args, [prompt], max_new)[0]
        if alone != expected[i]:
            failures.append(f"prompt {i} alone: {alone} != transformers {expected[i]}")
    batched = [] if args.alone_only else generate(args, prompts, max_new)
    for i, row in enumerate(batched):
        if row != expected[i]:
            failures.append(f"prompt {i} in the batch: {row} != alone {expected[i]}")

    for i, case in enumerate(reference.get("text_prompts", []) if args.text else []):
        stdout = run(dsrun(args) + ["--prompt", case["text"], "--max-new-tokens",
                                    str(len(case["generated"])), "--generation-config",
                                    "none", *args.eos_options])
        # One prompt streams its text as it comes, without the 'sequence 0: ' of a batch.
        if stdout.rstrip("\n") != case["decoded"]:
            failures.append(f"text prompt {i} {case['text']!r}: printed {stdout!r}, "
                            f"transformers decoded {case['decoded']!r}")
    if args.text and not reference.get("text_prompts"):
        failures.append("--text: generation.json has no text_prompts")

    largest = 0.0  # the largest |ours - transformers| of the prefill logits
    if args.prefill:
        for i, prompt in enumerate(reference["prompts"]):
            with tempfile.TemporaryDirectory() as out:
                run(dsrun(args) + ["--program", "prefill", "--quiet",
                     "--tokens", ",".join(map(str, prompt["ids"])), "--output-dir", out])
                dims, values = read_float_tensor(os.path.join(out, "output_0.pb"))
            vocab = dims[-1]
            last = values[-vocab:]
            ref = prompt["prefill_last_logits"]
            worst = max(abs(a - e) - (args.atol + args.rtol * abs(e)) for a, e in zip(last, ref))
            largest = max(largest, max(abs(a - e) for a, e in zip(last, ref)))
            if len(last) != len(ref) or worst > 0:
                failures.append(f"prompt {i} prefill logits differ beyond tolerance "
                                f"(excess {worst:.3g})")

    if failures:
        print("\n".join(failures))
        sys.exit(1)
    print(f"OK: {len(prompts)} prompts x {max_new} greedy tokens alone"
          + ("" if args.alone_only else " and batched")
          + (f" (distributed argmax over {args.distributed_argmax} ranks)"
             if args.distributed_argmax else "")
          + (f", prefill logits (max abs diff {largest:.3g})" if args.prefill else "")
          + (f", {len(reference['text_prompts'])} text prompts" if args.text else ""))


if __name__ == "__main__":
    main()
