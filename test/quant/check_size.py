#!/usr/bin/env python3
"""Compares the weight bytes of an int8 plan with those of the fp16 plan of the same model,
from dsp-dump's per-section summary ("weight bytes: N total (...); tfm.linear weights and
scales L; tfm.lm_head weights and scales H; a decode step reads D"), rank 0's section. Exits 1 when a ratio is
above its bound; prints both ratios either way. Standard library only.

  check_size.py --dsp-dump DSP_DUMP INT8.dsp FP16.dsp [--max-ratio R] [--max-linear-ratio R]
                [--max-decode-ratio R]
"""
import argparse
import re
import subprocess
import sys

SUMMARY = re.compile(r"^    weight bytes: (\d+) total \(([^)]*)\); tfm\.linear weights and scales "
                     r"(\d+); tfm\.lm_head weights and scales (\d+)"
                     r"(?:; a decode step reads (\d+))?$")


def summary(dsp_dump, plan):
    text = subprocess.run([dsp_dump, plan], check=True, capture_output=True, text=True).stdout
    for line in text.splitlines():
        match = SUMMARY.match(line)
        if match:
            by_dtype = {}
            for part in match.group(2).split(", "):
                name, count = part.split(" ")
                by_dtype[name] = int(count)
            return {"total": int(match.group(1)), "by_dtype": by_dtype,
                    "linear": int(match.group(3)), "lm_head": int(match.group(4)),
                    "decode": int(match.group(5)) if match.group(5) else None}
    sys.exit(f"check_size.py: no 'weight bytes' line in dsp-dump {plan}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--dsp-dump", required=True)
    parser.add_argument("int8")
    parser.add_argument("fp16")
    parser.add_argument("--max-ratio", type=float)
    parser.add_argument("--max-linear-ratio", type=float)
    parser.add_argument("--max-decode-ratio", type=float,
                        help="bound on the ratio of the bytes one decode step reads")
    args = parser.parse_args()
    q, h = summary(args.dsp_dump, args.int8), summary(args.dsp_dump, args.fp16)
    ratio = q["total"] / h["total"]
    linear = q["linear"] / h["linear"] if h["linear"] else float("nan")
    print(f"int8 weight bytes {q['total']} {q['by_dtype']}, fp16 {h['total']} {h['by_dtype']}: "
          f"ratio {ratio:.4f}; tfm.linear {q['linear']} / {h['linear']} = {linear:.4f}")
    decode = (q["decode"] / h["decode"] if q["decode"] is not None and h["decode"]
              else float("nan"))
    if q["decode"] is not None:
        print(f"a decode step reads {q['decode']} / {h['decode']} = {decode:.4f}")
    failed = False
    if "i8" not in q["by_dtype"]:
        print("FAIL: the int8 plan stores no i8 weight")
        failed = True
    # f16, but the linears' biases in f32 (cuBLASLt's epilogue adds them in its f32
    # product's type): vectors beside matrices, a few percent of a tiny fixture at most.
    f32_share = h["by_dtype"].get("f32", 0) / h["total"]
    if "f16" not in h["by_dtype"] or not set(h["by_dtype"]) <= {"f16", "f32"} or f32_share > 0.05:
        print(f"FAIL: the fp16 plan stores {h['by_dtype']}, not f16 and a few f32 biases")
        failed = True
    if args.max_ratio is not None and not ratio <= args.max_ratio:
        print(f"FAIL: weight bytes ratio {ratio:.4f} is above {args.max_ratio}")
        failed = True
    if args.max_linear_ratio is not None and not linear <= args.max_linear_ratio:
        print(f"FAIL: tfm.linear bytes ratio {linear:.4f} is above {args.max_linear_ratio}")
        failed = True
    if args.max_decode_ratio is not None and not decode <= args.max_decode_ratio:
        print(f"FAIL: decode bytes ratio {decode:.4f} is above {args.max_decode_ratio}")
        failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
