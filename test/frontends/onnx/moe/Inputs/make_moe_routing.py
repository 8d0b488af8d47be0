#!/usr/bin/env python3
"""Writes moe-routing/: a tiny mixture-of-experts block as torch.onnx.export writes
transformers' Qwen3-MoE sparse block (Qwen3MoeSparseMoeBlock.forward) for optimum's
text-generation export, with onnxruntime's outputs as the reference.

The routing: softmax over the router's logits, TopK of the probabilities (renormalised),
OneHot of the chosen experts transposed to [experts, k, tokens], then per expert NonZero
of its mask row (torch.where), Gather of its tokens, the expert's SiLU MLP scaled by the
routing weight (GatherND), and index_add_ back into the output (ScatterElements, add).
An expert no token chose runs on empty tensors.

    /work/h44-venv/bin/python make_moe_routing.py   # pip install onnx onnxruntime numpy

Writes model.onnx and, in the node-test layout, test_data_set_0/ (2 x 5 tokens) and
test_data_set_1/ (one token: two experts take none) with input_0.pb (input_ids),
output_0.pb (the block's output) and output_1.pb (the router's logits).
"""
import os

import numpy as np
import onnx
import onnxruntime
from onnx import TensorProto, helper, numpy_helper

VOCAB, HIDDEN, INTER, EXPERTS, TOP_K = 32, 8, 16, 4, 2
BATCH, SEQ = 2, 5


def const(name, array):
    return numpy_helper.from_array(np.asarray(array), name)


def build(rng):
    inits = [
        const("embed", rng.standard_normal((VOCAB, HIDDEN)).astype(np.float32)),
        const("gate", rng.standard_normal((HIDDEN, EXPERTS)).astype(np.float32)),
        const("flat_shape", np.array([-1, HIDDEN], np.int64)),
        const("k", np.array([TOP_K], np.int64)),
        const("depth", np.array(EXPERTS, np.int64)),
        const("onehot_values", np.array([0, 1], np.int64)),
        const("minus_one_col", np.array([-1, 1], np.int64)),
        const("axes_1", np.array([1], np.int64)),
    ]
    nodes = [
        helper.make_node("Gather", ["embed", "input_ids"], ["hidden"]),
        helper.make_node("Shape", ["hidden"], ["hidden_shape"]),
        helper.make_node("Reshape", ["hidden", "flat_shape"], ["h2d"]),
        helper.make_node("MatMul", ["h2d", "gate"], ["router_logits"]),
        helper.make_node("Softmax", ["router_logits"], ["probs"], axis=1),
        helper.make_node("TopK", ["probs", "k"], ["top_p", "selected"], axis=-1, largest=1,
                         sorted=1),
        helper.make_node("ReduceSum", ["top_p", "axes_1"], ["top_sum"], keepdims=1),
        helper.make_node("Div", ["top_p", "top_sum"], ["routing_weights"]),
        helper.make_node("Shape", ["h2d"], ["h2d_shape"]),
        helper.make_node("ConstantOfShape", ["h2d_shape"], ["zeros"],
                         value=helper.make_tensor("zero", TensorProto.FLOAT, [1], [0.0])),
        helper.make_node("OneHot", ["selected", "depth", "onehot_values"], ["onehot"],
                         axis=-1),
        helper.make_node("Transpose", ["onehot"], ["expert_mask"], perm=[2, 1, 0]),
    ]
    current = "zeros"
    for e in range(EXPERTS):
        p = f"e{e}_"
        inits += [
            const(p + "index", np.array(e, np.int64)),
            const(p + "gate_proj", rng.standard_normal((HIDDEN, INTER)).astype(np.float32) * 0.5),
            const(p + "up_proj", rng.standard_normal((HIDDEN, INTER)).astype(np.float32) * 0.5),
            const(p + "down_proj", rng.standard_normal((INTER, HIDDEN)).astype(np.float32) * 0.5),
        ]
        nodes += [
            # idx, top_x = torch.where(expert_mask[e])
            helper.make_node("Gather", ["expert_mask", p + "index"], [p + "mask"], axis=0),
            helper.make_node("NonZero", [p + "mask"], [p + "nz"]),
            helper.make_node("Transpose", [p + "nz"], [p + "nz_t"], perm=[1, 0]),
            helper.make_node("Split", [p + "nz_t"], [p + "idx2", p + "top_x2"], axis=1,
                             num_outputs=2),
            helper.make_node("Reshape", [p + "idx2", "minus_one_col"], [p + "idx_col"]),
            helper.make_node("Reshape", [p + "top_x2", "minus_one_col"], [p + "top_x_col"]),
            helper.make_node("Squeeze", [p + "top_x_col", "axes_1"], [p + "top_x"]),
            # current_state = hidden_states[None, top_x].reshape(-1, hidden_dim)
            helper.make_node("Gather", ["h2d", p + "top_x"], [p + "state"], axis=0),
            # the expert: down(silu(gate(x)) * up(x))
            helper.make_node("MatMul", [p + "state", p + "gate_proj"], [p + "g"]),
            helper.make_node("Sigmoid", [p + "g"], [p + "g_sig"]),
            helper.make_node("Mul", [p + "g", p + "g_sig"], [p + "g_act"]),
            helper.make_node("MatMul", [p + "state", p + "up_proj"], [p + "u"]),
            helper.make_node("Mul", [p + "g_act", p + "u"], [p + "gu"]),
            helper.make_node("MatMul", [p + "gu", p + "down_proj"], [p + "y"]),
            # * routing_weights[top_x, idx, None]
            helper.make_node("Concat", [p + "top_x_col", p + "idx_col"], [p + "pairs"], axis=1),
            helper.make_node("GatherND", ["routing_weights", p + "pairs"], [p + "w"]),
            helper.make_node("Unsqueeze", [p + "w", "axes_1"], [p + "w_col"]),
            helper.make_node("Mul", [p + "y", p + "w_col"], [p + "scaled"]),
            # final_hidden_states.index_add_(0, top_x, ...)
            helper.make_node("Shape", [p + "scaled"], [p + "scaled_shape"]),
            helper.make_node("Expand", [p + "top_x_col", p + "scaled_shape"], [p + "rows"]),
            helper.make_node("ScatterElements", [current, p + "rows", p + "scaled"],
                             [p + "acc"], axis=0, reduction="add"),
        ]
        current = p + "acc"
    nodes.append(helper.make_node("Reshape", [current, "hidden_shape"], ["moe_out"]))
    graph = helper.make_graph(
        nodes, "moe_routing",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "sequence"])],
        [helper.make_tensor_value_info("moe_out", TensorProto.FLOAT,
                                       ["batch", "sequence", HIDDEN]),
         helper.make_tensor_value_info("router_logits", TensorProto.FLOAT, [None, EXPERTS])],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)],
                              producer_name="make_moe_routing.py")
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def main():
    rng = np.random.default_rng(44)
    model = build(rng)
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "moe-routing")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "model.onnx"), "wb") as f:
        f.write(model.SerializeToString())
    session = onnxruntime.InferenceSession(model.SerializeToString(),
                                           providers=["CPUExecutionProvider"])
    for index, (batch, seq) in enumerate([(BATCH, SEQ), (1, 1)]):
        ids = rng.integers(0, VOCAB, (batch, seq)).astype(np.int64)
        outputs = session.run(None, {"input_ids": ids})
        data = os.path.join(out, f"test_data_set_{index}")
        os.makedirs(data, exist_ok=True)
        tensors = [("input_0.pb", ids, "input_ids"), ("output_0.pb", outputs[0], "moe_out"),
                   ("output_1.pb", outputs[1], "router_logits")]
        for file, array, name in tensors:
            with open(os.path.join(data, file), "wb") as f:
                f.write(numpy_helper.from_array(array, name).SerializeToString())
        chosen = np.argsort(-outputs[1], axis=1, kind="stable")[:, :TOP_K]
        counts = [int((chosen == e).sum()) for e in range(EXPERTS)]
        print(f"{data}: tokens per expert {counts}")

if __name__ == "__main__":
    main()
