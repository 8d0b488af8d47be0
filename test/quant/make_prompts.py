#!/usr/bin/env python3
"""Writes the committed prompt set of the int8 accuracy tests (test/quant/prompts.txt).

Run once; the output is committed and never regenerated silently (the tests' bounds were
measured on it). Python's random module (Mersenne Twister) is stable across versions for
randrange with a fixed seed, so the command reproduces the file byte for byte.
"""
import argparse
import random
import sys


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seed", type=int, default=20261122)
    parser.add_argument("--count", type=int, default=48)
    parser.add_argument("--min-len", type=int, default=3)
    parser.add_argument("--max-len", type=int, default=24)
    parser.add_argument("--vocab", type=int, default=300)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    out = sys.stdout
    out.write("# int8 accuracy prompt set: %d prompts of %d..%d token ids in [0, %d), one per line.\n"
              % (args.count, args.min_len, args.max_len, args.vocab))
    out.write("# Generated once with: python3 test/quant/make_prompts.py --seed %d --count %d "
              "--min-len %d --max-len %d --vocab %d > test/quant/prompts.txt\n"
              % (args.seed, args.count, args.min_len, args.max_len, args.vocab))
    out.write("# (random.Random(seed): length = randint(min, max), ids = randrange(vocab) each.)\n")
    out.write("# Every fixture (test/models/*/meta.json) has vocab_size 300. Do not edit: the bounds\n")
    out.write("# in test/quant/*.test were measured on exactly these prompts.\n")
    for _ in range(args.count):
        length = rng.randint(args.min_len, args.max_len)
        out.write(",".join(str(rng.randrange(args.vocab)) for _ in range(length)) + "\n")


if __name__ == "__main__":
    main()
