#!/usr/bin/env python3
"""Writes ONNX's own node tests of the ops mixture-of-experts routing uses (TopK, OneHot,
NonZero, ScatterElements) to test/node-tests/routing/, in the node-test layout (model.onnx,
test_data_set_N/input_K.pb, output_K.pb).

Debian's libonnx-testdata has TopK and OneHot only at opset 11, below the 13-23 dsc accepts,
and lacks the cases of ties, out-of-range one-hot indices and ScatterElements' max and min.
These come from the onnx wheel's case generators (onnx/backend/test/case/node/{topk,onehot,
nonzero,scatterelements}.py, references from numpy). The wheel writes each at its newest
opset (TopK at 24, OneHot above 23); each model is written at opset 18 instead, where the
ops' definitions are the same but for types these tests do not use (TopK-24 and OneHot-25
only add types; onnx.checker checks each model at 18).

    /work/h44-venv/bin/python test/node-tests/export_routing_node_tests.py

Needs onnx 1.23.2 (pip install onnx==1.23.2 numpy).
"""
import argparse
import shutil
from pathlib import Path

import onnx
from onnx import numpy_helper
from onnx.backend.test.case import node as node_cases

PREFIXES = ("test_top_k", "test_onehot", "test_nonzero", "test_scatter_elements")
OPSET = 18
# Cases whose model is not valid at OPSET: the types they test came later.
SKIPPED = {"test_onehot_with_bfloat16_values": "bf16 values came with OneHot-25 (opset 25)"}


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "routing")
    args = ap.parse_args()
    kept = 0
    for case in node_cases.collect_testcases(None):
        if not case.name.startswith(PREFIXES) or case.name.endswith("_expanded"):
            continue
        if case.name in SKIPPED:
            print(f"{case.name} left out: {SKIPPED[case.name]}")
            continue
        model = case.model
        for entry in model.opset_import:
            if entry.domain in ("", "ai.onnx"):
                entry.version = OPSET
        model.ir_version = 8
        onnx.checker.check_model(model, full_check=True)
        out = args.out / case.name
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        (out / "model.onnx").write_bytes(model.SerializeToString())
        for i, (inputs, outputs) in enumerate(case.data_sets):
            data = out / f"test_data_set_{i}"
            data.mkdir()
            for j, x in enumerate(inputs):
                name = model.graph.input[j].name
                (data / f"input_{j}.pb").write_bytes(
                    numpy_helper.from_array(x, name).SerializeToString())
            for j, x in enumerate(outputs):
                name = model.graph.output[j].name
                (data / f"output_{j}.pb").write_bytes(
                    numpy_helper.from_array(x, name).SerializeToString())
        kept += 1
    print(f"{kept} node tests written to {args.out}")


if __name__ == "__main__":
    main()
