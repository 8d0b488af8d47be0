#!/usr/bin/env python3
"""Checks what a recognised plan outputs at query positions that have no key to attend.

Left padding with nothing cached leaves a row's first queries with every key masked. What
PyTorch gives there depends on the attention implementation (eager averages every value,
sdpa's guard gives zeros, some dynamo graphs differ from both), so dsc's definition is: the
recognised plan computes there what the export's own graph computes (its generic plan,
`dsc compile --no-recognize`), which the attention recogniser proves on its probe
(`tfm.unattended`, docs/transformer-ops.md).

This script builds such an input from a fixture's test_data_set_0 (its token ids; a mask
with the second row's first two tokens padded; positions as transformers' generate gives
them; empty past tensors), runs both plans with dsrun and requires every output value,
padded rows included, to agree within |a - b| <= atol + rtol * |b| (defaults 1e-4: the two
plans sum in different orders). It also requires the padded rows to exist (at least one
query with no key). Standard library only.
"""
import argparse
import os
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tensorproto import INT64, read_float_tensor, read_tensor, write_tensor  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dsrun", required=True)
    parser.add_argument("--recognised", required=True)
    parser.add_argument("--generic", required=True)
    parser.add_argument("--fixture", required=True)
    parser.add_argument("--rtol", type=float, default=1e-4)
    parser.add_argument("--atol", type=float, default=1e-4)
    args = parser.parse_args()
    source = os.path.join(args.fixture, "test_data_set_0")
    inputs = sorted(f for f in os.listdir(source) if f.startswith("input_"))
    with tempfile.TemporaryDirectory() as scratch:
        feed = os.path.join(scratch, "in")
        os.mkdir(feed)
        tensors = {}
        for f in inputs:
            tensors[f] = read_tensor(os.path.join(source, f))[:4]
        ids = next(t for t in tensors.values() if t[0] == "input_ids")
        batch, seq = ids[1]
        if batch < 2 or seq < 3:
            sys.exit("FAIL: the fixture's input_ids are too small for a padded row")
        mask = [1] * (batch * seq)
        mask[seq] = mask[seq + 1] = 0  # row 1: two padded tokens, nothing cached
        positions = []
        for b in range(batch):
            count = 0
            for t in range(seq):
                attended = mask[b * seq + t]
                count += attended
                positions.append(count - 1 if attended else 1)
        for f, (name, dims, dtype, raw) in tensors.items():
            path = os.path.join(feed, f)
            if name == "attention_mask":
                write_tensor(path, name, [batch, seq], INT64, struct.pack(f"<{len(mask)}q", *mask))
            elif name == "position_ids":
                write_tensor(path, name, [batch, seq], INT64,
                             struct.pack(f"<{len(positions)}q", *positions))
            elif name.startswith("past"):
                write_tensor(path, name, [dims[0], dims[1], 0, dims[3]], dtype, b"")
            else:
                write_tensor(path, name, dims, dtype, raw)
        results = {}
        for label, plan in (("recognised", args.recognised), ("generic", args.generic)):
            out = os.path.join(scratch, label)
            os.mkdir(out)
            run = subprocess.run([args.dsrun, plan, "--input-dir", feed, "--output-dir", out],
                                 capture_output=True, text=True)
            if run.returncode != 0:
                sys.exit(f"FAIL: {label} plan: {run.stdout}{run.stderr}")
            results[label] = {f: read_float_tensor(os.path.join(out, f))
                              for f in sorted(os.listdir(out))}
        worst = 0.0
        for f, (dims, ours) in results["recognised"].items():
            if f not in results["generic"]:
                sys.exit(f"FAIL: the generic plan has no {f}")
            ref_dims, ref = results["generic"][f]
            if dims != ref_dims:
                sys.exit(f"FAIL: {f}: shape {dims} != {ref_dims}")
            for i, (a, b) in enumerate(zip(ours, ref)):
                if not abs(a - b) <= args.atol + args.rtol * abs(b):
                    sys.exit(f"FAIL: {f}[{i}]: recognised {a} != generic {b}")
                worst = max(worst, abs(a - b))
        print(f"OK: {len(results['recognised'])} outputs agree with the generic plan at every "
              f"position, padded queries included (max abs diff {worst:.2e})")


if __name__ == "__main__":
    main()
