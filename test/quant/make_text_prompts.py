#!/usr/bin/env python3
"""Token-id prompts cut from text, for accuracy checks of a model with learned weights.

Takes lines of at least 8 words from the given Markdown files (no tables, headings, links or
code fences), shuffles them with a fixed seed, and keeps the first COUNT that encode to at
least MIN tokens, each cut to MAX tokens. Prints one comma-separated line of ids per prompt.
Needs the `tokenizers` package.
"""
import argparse
import random

from tokenizers import Tokenizer


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tokenizer", required=True, help="tokenizer.json")
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--count", type=int, default=48)
    parser.add_argument("--min-len", type=int, default=12)
    parser.add_argument("--max-len", type=int, default=40)
    parser.add_argument("texts", nargs="+")
    args = parser.parse_args()
    tokenizer = Tokenizer.from_file(args.tokenizer)
    lines = []
    for path in args.texts:
        with open(path, encoding="utf-8") as text:
            for line in text:
                line = line.strip()
                if len(line.split()) >= 8 and not line.startswith(("|", "#", "http", "```")):
                    lines.append(line)
    random.Random(args.seed).shuffle(lines)
    kept = 0
    for line in lines:
        ids = tokenizer.encode(line).ids
        if len(ids) < args.min_len:
            continue
        print(",".join(str(i) for i in ids[: args.max_len]))
        kept += 1
        if kept == args.count:
            break


if __name__ == "__main__":
    main()
