#!/usr/bin/env python3
"""Writes moe-dense*/: tiny mixture-of-experts blocks in the form the project's MoE exporter
writes (tools/fixtures/README.md, "MoE"): every expert computed, weighted by its column of
the dense routing weights, summed by Adds. With onnxruntime's outputs as the reference.

    moe-dense             softmax, TopK, renormalised, ScatterElements into zeros
    moe-dense-sigmoid     sigmoid scores, TopK, not renormalised; Gather + Unsqueeze columns
    moe-dense-topk-first  TopK of the logits, then Softmax of the chosen (GPT-OSS's order)
    moe-dense-unequal     expert 2 has 6 intermediate features, the others 4: declined
    moe-dense-wrong-router  the router reads the embeddings, the experts their double:
                          declined
    moe-dense-k5          TopK of 5 over 4 experts: refused, naming the TopK
    moe-dense-clamped     GPT-OSS's experts: biases on gate, up and down, the clamped SwiGLU
                          (clamp(up, -l, l) + 1) * g * sigmoid(alpha g), g = min(gate, l),
                          with Clips, alpha 1.3 and l 1.0 (so both clamps cut)
    moe-dense-clamped-minmax  the same with Min/Max, alpha 1.702 (a gelu_quick once the
                          activations are recognised), the products' operands swapped
    moe-dense-clamped-one-sided  up clamped from above only: not the clamped SwiGLU, declined

    /work/today-venv/bin/python make_moe_dense.py [VARIANT ...]  # onnx, onnxruntime, numpy

Each folder: model.onnx (input_ids [batch, sequence] -> moe_out [batch * sequence,
hidden]) and test_data_set_0 (2 x 5 tokens), test_data_set_1 (one token).
"""
import os
import sys

import numpy as np
import onnx
import onnxruntime
from onnx import TensorProto, helper, numpy_helper

VOCAB, HIDDEN, INTER, EXPERTS, TOP_K = 32, 8, 4, 4, 2


def const(name, array):
    return numpy_helper.from_array(np.asarray(array), name)


def build(variant, rng):
    nodes, inits = [], []
    inits += [const("embed", rng.standard_normal((VOCAB, HIDDEN)).astype(np.float32)),
              const("flat", np.array([-1, HIDDEN], np.int64)),
              const("router_w", rng.standard_normal((HIDDEN, EXPERTS)).astype(np.float32)),
              const("k", np.array([5 if variant == "k5" else TOP_K], np.int64))]
    if variant not in ("sigmoid", "topk-first"):
        inits.append(const("sum_axes", np.array([-1], np.int64)))
    nodes.append(helper.make_node("Gather", ["embed", "input_ids"], ["emb"]))
    nodes.append(helper.make_node("Reshape", ["emb", "flat"], ["rows"]))
    experts_in = "rows"
    if variant == "wrong-router":
        inits.append(const("two", np.array(2.0, np.float32)))
        nodes.append(helper.make_node("Mul", ["rows", "two"], ["doubled"]))
        experts_in = "doubled"
    nodes.append(helper.make_node("MatMul", ["rows", "router_w"], ["logits"]))
    if variant == "topk-first":
        nodes.append(helper.make_node("TopK", ["logits", "k"], ["top_logits", "top_i"], axis=-1))
        nodes.append(helper.make_node("Softmax", ["top_logits"], ["top_w"], axis=-1))
    else:
        score = "Sigmoid" if variant == "sigmoid" else "Softmax"
        nodes.append(helper.make_node(score, ["logits"], ["scores"],
                                      **({} if score == "Sigmoid" else {"axis": -1})))
        nodes.append(helper.make_node("TopK", ["scores", "k"], ["top_v", "top_i"], axis=-1))
        if variant == "sigmoid":
            nodes.append(helper.make_node("Identity", ["top_v"], ["top_w"]))
        else:
            nodes.append(helper.make_node("ReduceSum", ["top_v", "sum_axes"], ["top_sum"],
                                          keepdims=1))
            nodes.append(helper.make_node("Div", ["top_v", "top_sum"], ["top_w"]))
    # zeros [tokens, experts] from the logits' shape, as TorchScript writes torch.zeros(T, E).
    nodes.append(helper.make_node("Shape", ["logits"], ["logits_shape"]))
    nodes.append(helper.make_node("ConstantOfShape", ["logits_shape"], ["zeros"],
                                  value=helper.make_tensor("v", TensorProto.FLOAT, [1], [0.0])))
    nodes.append(helper.make_node("ScatterElements", ["zeros", "top_i", "top_w"], ["dense"],
                                  axis=1))
    previous = None
    clamped = variant.startswith("clamped")
    if clamped:
        alpha, limit = (1.702, 1.0) if variant == "clamped-minmax" else (1.3, 1.0)
        inits += [const("limit", np.array(limit, np.float32)),
                  const("neg_limit", np.array(-limit, np.float32)),
                  const("alpha", np.array(alpha, np.float32)),
                  const("one", np.array(1.0, np.float32))]
    for e in range(EXPERTS):
        inter = 6 if variant == "unequal" and e == 2 else INTER
        for name, shape in (("gate", (HIDDEN, inter)), ("up", (HIDDEN, inter)),
                            ("down", (inter, HIDDEN))):
            inits.append(const(f"{name}{e}", (0.5 * rng.standard_normal(shape)).astype(np.float32)))
        if not clamped:
            nodes += [helper.make_node("MatMul", [experts_in, f"gate{e}"], [f"g{e}"]),
                      helper.make_node("MatMul", [experts_in, f"up{e}"], [f"u{e}"]),
                      helper.make_node("Sigmoid", [f"g{e}"], [f"sg{e}"]),
                      helper.make_node("Mul", [f"g{e}", f"sg{e}"], [f"act{e}"]),
                      helper.make_node("Mul", [f"act{e}", f"u{e}"], [f"h{e}"]),
                      helper.make_node("MatMul", [f"h{e}", f"down{e}"], [f"y{e}"])]
        else:
            for name, size in (("gate", inter), ("up", inter), ("down", HIDDEN)):
                inits.append(const(f"{name}_b{e}",
                                   (0.5 * rng.standard_normal(size)).astype(np.float32)))
            # up's linear first in the minmax form: which is the gate is the probe's to prove
            order = ["up", "gate"] if variant == "clamped-minmax" else ["gate", "up"]
            for name in order:
                nodes += [helper.make_node("MatMul", [experts_in, f"{name}{e}"], [f"{name}_m{e}"]),
                          helper.make_node("Add", [f"{name}_m{e}", f"{name}_b{e}"], [f"{name[0]}{e}"])]
            if variant == "clamped":
                nodes += [helper.make_node("Clip", [f"g{e}", "", "limit"], [f"gc{e}"]),
                          helper.make_node("Clip", [f"u{e}", "neg_limit", "limit"], [f"uc{e}"])]
            elif variant == "clamped-minmax":
                nodes += [helper.make_node("Min", [f"g{e}", "limit"], [f"gc{e}"]),
                          helper.make_node("Min", ["limit", f"u{e}"], [f"um{e}"]),
                          helper.make_node("Max", [f"um{e}", "neg_limit"], [f"uc{e}"])]
            else:  # one-sided
                nodes += [helper.make_node("Clip", [f"g{e}", "", "limit"], [f"gc{e}"]),
                          helper.make_node("Min", [f"u{e}", "limit"], [f"uc{e}"])]
            swapped = variant == "clamped-minmax"
            nodes += [helper.make_node("Add", [f"uc{e}", "one"], [f"u1{e}"]),
                      helper.make_node("Mul", [f"gc{e}", "alpha"], [f"ga{e}"]),
                      helper.make_node("Sigmoid", [f"ga{e}"], [f"sg{e}"]),
                      helper.make_node("Mul", [f"sg{e}", f"gc{e}"] if swapped
                                       else [f"gc{e}", f"sg{e}"], [f"act{e}"]),
                      helper.make_node("Mul", [f"act{e}", f"u1{e}"] if swapped
                                       else [f"u1{e}", f"act{e}"], [f"h{e}"]),
                      helper.make_node("MatMul", [f"h{e}", f"down{e}"], [f"y_m{e}"]),
                      helper.make_node("Add", [f"y_m{e}", f"down_b{e}"], [f"y{e}"])]
        if variant == "sigmoid":  # dense[:, e] then unsqueeze
            inits += [const(f"idx{e}", np.array(e, np.int64)), const(f"ax{e}", np.array([1], np.int64))]
            nodes += [helper.make_node("Gather", ["dense", f"idx{e}"], [f"col{e}_"], axis=1),
                      helper.make_node("Unsqueeze", [f"col{e}_", f"ax{e}"], [f"col{e}"])]
        else:  # dense[:, e:e+1]
            inits += [const(f"s{e}", np.array([e], np.int64)), const(f"e{e}", np.array([e + 1], np.int64)),
                      const(f"a{e}", np.array([1], np.int64))]
            nodes.append(helper.make_node("Slice", ["dense", f"s{e}", f"e{e}", f"a{e}"], [f"col{e}"]))
        nodes.append(helper.make_node("Mul", [f"y{e}", f"col{e}"], [f"t{e}"]))
        if previous is None:
            previous = f"t{e}"
        else:
            out = "moe_out" if e == EXPERTS - 1 else f"sum{e}"
            nodes.append(helper.make_node("Add", [previous, f"t{e}"], [out]))
            previous = out
    graph = helper.make_graph(
        nodes, f"moe_dense_{variant}",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "sequence"])],
        [helper.make_tensor_value_info("moe_out", TensorProto.FLOAT, ["tokens", HIDDEN])],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    if variant != "k5":  # the checker's shape inference refuses it, as it should
        onnx.checker.check_model(model, full_check=True)
    return model


VARIANTS = ["", "sigmoid", "topk-first", "unequal", "wrong-router", "k5", "clamped",
            "clamped-minmax", "clamped-one-sided"]


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    wanted = sys.argv[1:]
    for variant in VARIANTS:
        if wanted and (variant or "plain") not in wanted:
            continue
        name = "moe-dense" + (f"-{variant}" if variant else "")
        rng = np.random.default_rng(47)
        model = build(variant or "plain", rng)
        out = os.path.join(here, name)
        os.makedirs(out, exist_ok=True)
        onnx.save(model, os.path.join(out, "model.onnx"))
        if variant == "k5":
            continue  # onnxruntime refuses it too
        session = onnxruntime.InferenceSession(os.path.join(out, "model.onnx"),
                                               providers=["CPUExecutionProvider"])
        for index, shape in enumerate([(2, 5), (1, 1)]):
            ids = rng.integers(0, VOCAB, shape).astype(np.int64)
            result = session.run(None, {"input_ids": ids})[0]
            data = os.path.join(out, f"test_data_set_{index}")
            os.makedirs(data, exist_ok=True)
            for file, array, tensor in [("input_0.pb", ids, "input_ids"),
                                        ("output_0.pb", result, "moe_out")]:
                with open(os.path.join(data, file), "wb") as f:
                    f.write(numpy_helper.from_array(array, tensor).SerializeToString())
        print(name, "written")


if __name__ == "__main__":
    main()
