#!/usr/bin/env python3
"""Checks a plan's beam search and logits processors against transformers' in
beam_search.json (tools/fixtures/beam_refs.py): for every case (num_beams, length_penalty,
early_stopping, max_new_tokens, and the logits processors it names; num_beams 1 is greedy),
each prompt alone gives transformers' tokens exactly, and with --batch the
prompts as one batch give each the same tokens as alone. The plan's EOS is not a stop; the
reference's stop token is (dsrun --ignore-eos --stop).

Standard library only (lit already needs python3).
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_generation import run, sequences  # noqa: E402

EARLY = {False: "false", True: "true", "never": "never"}
# A case's logits processors (transformers' names) as dsrun's flags.
PROCESSORS = {"repetition_penalty": "--repetition-penalty",
              "no_repeat_ngram_size": "--no-repeat-ngram-size",
              "min_new_tokens": "--min-new-tokens", "forced_bos_token_id": "--forced-bos",
              "forced_eos_token_id": "--forced-eos"}


def beams(args, reference, case, prompts):
    command = [args.dsrun, args.plan, *args.dsrun_arg,
               "--max-new-tokens", str(case["max_new_tokens"]),
               "--num-beams", str(case["num_beams"]),
               "--length-penalty", str(case["length_penalty"]),
               "--early-stopping", EARLY[case["early_stopping"]],
               "--ignore-eos", "--stop", str(reference["stop_token"]),
               # transformers ran the case with every other processor off (BART's own
               # forced_eos_token_id too), as the flags here say.
               "--generation-config", "none"]
    for name, flag in PROCESSORS.items():
        if name in case:
            command += [flag, str(case[name])]
    for prompt in prompts:
        command += ["--prompt-ids", ",".join(map(str, prompt))]
    return sequences(run(command), len(prompts))


def model_defaults(args, reference):
    """dsrun with no generation flag: the model's generation_config.json (written by
    --write-generation-config into the model's copy before dsc compiled it) decides."""
    failures = []
    expected = reference["model_defaults"]["outputs"]
    for i, (prompt, tokens) in enumerate(zip(reference["prompts"], expected)):
        got = sequences(run([args.dsrun, args.plan, *args.dsrun_arg, "--prompt-ids",
                             ",".join(map(str, prompt))]), 1)[0]
        if got != tokens:
            failures.append(f"the model's defaults: prompt {i}: {got} != transformers "
                            f"{tokens}")
    return failures


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--dsrun")
    parser.add_argument("--plan")
    parser.add_argument("--reference", required=True, help="beam_search.json")
    parser.add_argument("--write-generation-config", metavar="DIR",
                        help="write the reference's model_defaults generation_config.json "
                             "into DIR (a copy of the model's folder) and stop")
    parser.add_argument("--model-defaults", action="store_true",
                        help="check dsrun without generation flags against model_defaults")
    parser.add_argument("--dsrun-arg", action="append", default=[],
                        help="an extra dsrun argument (--dsrun-arg=--ranks "
                             "--dsrun-arg=inprocess)")
    parser.add_argument("--batch", action="store_true",
                        help="also all prompts as one batch (max_batch >= prompts x beams)")
    args = parser.parse_args()
    reference = json.load(open(args.reference))
    if args.write_generation_config:
        with open(os.path.join(args.write_generation_config, "generation_config.json"),
                  "w") as out:
            json.dump(reference["model_defaults"]["generation_config"], out)
        return
    if not (args.dsrun and args.plan):
        parser.error("--dsrun and --plan are needed to check")
    if args.model_defaults:
        failures = model_defaults(args, reference)
        if failures:
            print("\n".join(failures))
            sys.exit(1)
        print(f"OK: {len(reference['prompts'])} prompts with the model's defaults equal "
              f"transformers' generate()")
        return
    prompts = reference["prompts"]
    failures, checked = [], 0
    for case in reference["cases"]:
        name = ", ".join(f"{key} {value}" for key, value in case.items() if key != "outputs")
        for i, (prompt, expected) in enumerate(zip(prompts, case["outputs"])):
            alone = beams(args, reference, case, [prompt])[0]
            checked += 1
            if alone != expected:
                failures.append(f"{name}: prompt {i} alone: {alone} != transformers {expected}")
        if args.batch:
            for i, (row, expected) in enumerate(zip(beams(args, reference, case, prompts),
                                                    case["outputs"])):
                if row != expected:
                    failures.append(f"{name}: prompt {i} in the batch: {row} != {expected}")
    if failures:
        print("\n".join(failures))
        sys.exit(1)
    print(f"OK: {checked} generations equal transformers'"
          + (" alone and batched" if args.batch else ""))


if __name__ == "__main__":
    main()
