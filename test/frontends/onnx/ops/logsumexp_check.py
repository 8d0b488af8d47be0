"""Writes ReduceLogSumExp.onnxtxt's input (x: rows that overflow a plain exp, a row of -inf,
a row with +inf, mixed signs) and the expected output, each row's log of the sum of its
exponentials computed in double precision with math.fsum over the row shifted by its
maximum, as input_0.pb and output_0.pb in DIR.

    logsumexp_check.py DIR
"""
import math
import os
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..",
                                "models"))
from tensorproto import FLOAT, write_tensor  # noqa: E402

ROWS = [
    [1000.0, 999.0, 998.5, 1000.0],   # exp overflows f32 (and f64) without the shift
    [-1.5, 0.25, 3.0, -7.0],
    [-math.inf, -math.inf, -math.inf, -math.inf],  # log 0 = -inf, not NaN
    [2.0, math.inf, -1.0, 0.0],       # inf
    [-88.0, -90.0, -87.5, -200.0],    # exp underflows f32 without the shift
    [0.0, 0.0, 0.0, 0.0],
]


def logsumexp(row):
    top = max(row)
    if math.isinf(top):
        return top
    return top + math.log(math.fsum(math.exp(v - top) for v in row))


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    flat = [v for row in ROWS for v in row]
    write_tensor(os.path.join(out, "input_0.pb"), "x", [2, 3, 4], FLOAT,
                 struct.pack(f"<{len(flat)}f", *flat))
    expected = [logsumexp(row) for row in ROWS]
    write_tensor(os.path.join(out, "output_0.pb"), "y", [2, 3], FLOAT,
                 struct.pack(f"<{len(expected)}f", *expected))


if __name__ == "__main__":
    main()
