#!/usr/bin/env python3
"""Writes qwen3-moe-torchscript/: a one-layer Qwen3-MoE (transformers' own class, random
weights, 4 experts, 2 per token) exported by torch.onnx.export's TorchScript exporter at
opset 18, as optimum's text-generation export runs it, with PyTorch's logits as the
reference.

transformers 5's experts loop over the experts the traced tokens hit
(`expert_hit = ...nonzero()`), so the export is only valid for inputs that hit every expert
the trace hit: it splits NonZero's rows into as many pieces as the trace had. Data sets 0
to 2 hit all four experts; data set 3 (one token) hits two, and onnxruntime fails on it in
the Split the trace wrote (dsc must fail there too, naming the step).

    /work/today-venv/bin/python export_qwen3_moe.py   # tools/fixtures/requirements-today.txt
"""
import os
from collections import Counter

import numpy as np
import onnx
import onnxruntime
import torch
from onnx import numpy_helper
from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

EXPERTS, TOP_K = 4, 2
SHAPES = [(2, 6), (1, 3), (3, 5), (1, 1)]


class Logits(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask):
        return self.model(input_ids=input_ids, attention_mask=attention_mask,
                          use_cache=False).logits


def main():
    config = Qwen3MoeConfig(vocab_size=64, hidden_size=32, intermediate_size=64,
                            moe_intermediate_size=16, num_hidden_layers=1,
                            num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                            num_experts=EXPERTS, num_experts_per_tok=TOP_K,
                            decoder_sparse_step=1, norm_topk_prob=True,
                            max_position_embeddings=64)
    # The loop over experts; the default grouped_mm path uses histc, which has no ONNX form.
    config._experts_implementation = "eager"
    torch.manual_seed(44)
    model = Qwen3MoeForCausalLM(config).eval()
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "qwen3-moe-torchscript")
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "model.onnx")
    ids = torch.randint(0, 64, SHAPES[0])
    torch.onnx.export(Logits(model), (ids, torch.ones_like(ids)), path,
                      input_names=["input_ids", "attention_mask"], output_names=["logits"],
                      dynamic_axes={"input_ids": {0: "batch", 1: "sequence"},
                                    "attention_mask": {0: "batch", 1: "sequence"},
                                    "logits": {0: "batch", 1: "sequence"}},
                      opset_version=18, dynamo=False)
    ops = Counter(n.op_type for n in onnx.load(path).graph.node)
    print({op: ops[op] for op in ("TopK", "OneHot", "NonZero", "ScatterElements")})
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    for index, shape in enumerate(SHAPES):
        ids = ids if index == 0 else torch.randint(0, 64, shape)
        mask = torch.ones_like(ids)
        with torch.no_grad():
            logits = Logits(model)(ids, mask).numpy()
        try:
            ort = session.run(None, {"input_ids": ids.numpy(), "attention_mask": mask.numpy()})[0]
            verdict = f"onnxruntime within {np.abs(ort - logits).max():.1e} of PyTorch"
        except Exception as error:  # the trace's Split of NonZero's rows
            verdict = "onnxruntime fails: " + str(error).splitlines()[0][:120]
        data = os.path.join(out, f"test_data_set_{index}")
        os.makedirs(data, exist_ok=True)
        for file, array, name in [("input_0.pb", ids.numpy(), "input_ids"),
                                  ("input_1.pb", mask.numpy(), "attention_mask"),
                                  ("output_0.pb", logits, "logits")]:
            with open(os.path.join(data, file), "wb") as f:
                f.write(numpy_helper.from_array(array, name).SerializeToString())
        print(f"{data}: {verdict}")


if __name__ == "__main__":
    main()
