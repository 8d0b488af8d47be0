#!/usr/bin/env python3
"""Writes qdq-*.onnx: QDQ weights (DequantizeLinear of 4-bit codes, opset 21) that dsc
refuses, each with the reason ../qdq-errors.test expects. ONNX's text format has no 4-bit
types, so these are binary; each is a few hundred bytes.

    /work/venv/bin/python make_qdq_errors.py   # pip install onnx numpy
"""
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def model(name, k, n, block, axis, scale_shape, reader="MatMul"):
    rng = np.random.default_rng(7)
    codes = helper.make_tensor("w", TensorProto.INT4, [k, n],
                               rng.integers(-8, 8, size=k * n).tolist())
    scale = numpy_helper.from_array(np.full(scale_shape, 0.05, dtype=np.float32), "scale")
    if reader == "MatMul":
        nodes = [helper.make_node("DequantizeLinear", ["w", "scale"], ["weight"], axis=axis,
                                  block_size=block),
                 helper.make_node("MatMul", ["x", "weight"], ["y"])]
        output = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, n])
    else:  # the codes read by another op than DequantizeLinear
        nodes = [helper.make_node("Cast", ["w"], ["codes"], to=TensorProto.FLOAT),
                 helper.make_node("MatMul", ["x", "codes"], ["y"])]
        output = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, n])
    graph = helper.make_graph(nodes, name,
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, k])],
                              [output], [codes, scale])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    m.ir_version = 10
    onnx.save(m, f"{name}.onnx")


model("qdq-blocks-along-outputs", 8, 32, 16, 1, [8, 2])
model("qdq-odd-blocks", 9, 4, 3, 0, [3, 4])
model("qdq-wrong-scale", 64, 4, 32, 0, [4, 4])
model("qdq-codes-read-elsewhere", 8, 4, 0, 0, [], reader="Cast")
