#!/usr/bin/env python3
"""Writes a model with >= 1 GiB of fp32 weights in external data, for measuring that
`dsc compile` streams weights instead of holding them: `layers` MatMul layers of
hidden x hidden with a ReLU between them. Needs numpy and onnx (tools/fixtures/requirements.txt)."""
import argparse
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

parser = argparse.ArgumentParser()
parser.add_argument("out_dir")
parser.add_argument("--layers", type=int, default=16)
parser.add_argument("--hidden", type=int, default=4096)
args = parser.parse_args()
os.makedirs(args.out_dir, exist_ok=True)

rng = np.random.default_rng(0)
nodes, initializers = [], []
previous = "x"
for i in range(args.layers):
    weight = (rng.standard_normal((args.hidden, args.hidden), dtype=np.float32) /
              np.sqrt(args.hidden)).astype(np.float32)
    initializers.append(numpy_helper.from_array(weight, f"layer{i}.weight"))
    nodes.append(helper.make_node("MatMul", [previous, f"layer{i}.weight"], [f"h{i}"]))
    nodes.append(helper.make_node("Relu", [f"h{i}"], [f"a{i}"]))
    previous = f"a{i}"
graph = helper.make_graph(
    nodes, "streaming", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", args.hidden])],
    [helper.make_tensor_value_info(previous, TensorProto.FLOAT, ["batch", args.hidden])],
    initializers)
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
onnx.save_model(model, os.path.join(args.out_dir, "model.onnx"), save_as_external_data=True,
                all_tensors_to_one_file=True, location="model.onnx_data", size_threshold=0)
print(f"{args.layers} x {args.hidden}^2 fp32 = "
      f"{args.layers * args.hidden * args.hidden * 4 / 2**30:.2f} GiB of weights")
