"""Writes seeded inputs for an attention graph's forward pass as input_K.pb files:
floats (NAME:D0xD1x...), int64 token ids below V (--ids NAME:BxS:V), an all-ones int64
padding mask (--mask NAME:BxT) and int64 positions (--positions NAME:BxS, row b starting at
3 * b, so rows rotate differently).

    attention_inputs.py DIR q:2x5x16 k:2x5x8 --mask attention_mask:2x5 --positions pos:2x5
"""
import argparse
import os
import random
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "models"))
import tensorproto  # noqa: E402


def dims_of(spec):
    name, dims = spec.split(":")
    return name, [int(d) for d in dims.split("x")]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("floats", nargs="*")
    ap.add_argument("--ids")
    ap.add_argument("--mask")
    ap.add_argument("--positions")
    args = ap.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    rng = random.Random(7)
    tensors = []
    for spec in args.floats:
        name, dims = dims_of(spec)
        count = 1
        for d in dims:
            count *= d
        values = [rng.uniform(-2, 2) for _ in range(count)]
        tensors.append((name, dims, tensorproto.FLOAT, struct.pack(f"<{count}f", *values)))
    if args.ids:
        name, shape = args.ids.rsplit(":", 1)[0], args.ids.rsplit(":", 1)[1]
        name, (b, s) = dims_of(name)
        values = [rng.randrange(int(shape)) for _ in range(b * s)]
        tensors.append((name, [b, s], tensorproto.INT64, struct.pack(f"<{b * s}q", *values)))
    if args.mask:
        name, (b, t) = dims_of(args.mask)
        tensors.append((name, [b, t], tensorproto.INT64, struct.pack(f"<{b * t}q", *[1] * (b * t))))
    if args.positions:
        name, (b, s) = dims_of(args.positions)
        values = [3 * row + i for row in range(b) for i in range(s)]
        tensors.append((name, [b, s], tensorproto.INT64, struct.pack(f"<{b * s}q", *values)))
    for index, (name, dims, dtype, raw) in enumerate(tensors):
        tensorproto.write_tensor(os.path.join(args.dir, f"input_{index}.pb"), name, dims, dtype, raw)


if __name__ == "__main__":
    main()
