#!/usr/bin/env python3
"""Mixture-of-experts decode on the CPU (issue 44): does a decode step cost the experts its
token chooses, or all of them?

Two random-weight Qwen3-MoE models of one shape but for the expert count (hidden 1024, 4
layers, 16 heads over 4 KV heads of 64, vocabulary 4096, experts of 512 intermediate
features, top-2), E = 8 and E = 32: the same active bytes per token, four times the total.
Each is exported by the project's MoE exporter (tools/fixtures/moe_export.py, TorchScript,
with a cache), compiled with `dsc compile --arch none` (fp32), checked by `dsp-roofline`'s
bytes, and timed with `dsbench --batch 1 --prompt-len 32 --new-tokens 64`, rounds
alternating between the two plans. With `--dense`, a dense Qwen3 whose MLP has the same
active bytes (intermediate 2 * 512) joins them.

    DSC_BIN_DIR=build/bin /work/today-venv/bin/python bench/cpu/moe_decode.py /tmp/moe-bench [--rounds 3]
"""
import argparse
import json
import os
import subprocess
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "tools", "fixtures"))
import moe_export  # noqa: E402
from transformers import Qwen3Config, Qwen3ForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM  # noqa: E402

SHAPE = dict(vocab_size=4096, hidden_size=1024, num_hidden_layers=4, num_attention_heads=16,
             num_key_value_heads=4, head_dim=64, max_position_embeddings=512,
             tie_word_embeddings=False)


class WithCache(torch.nn.Module):
    def __init__(self, model, layers):
        super().__init__()
        self.model, self.layers = model, layers

    def forward(self, input_ids, attention_mask, position_ids, *past):
        from transformers import DynamicCache
        cache = DynamicCache()
        for layer in range(self.layers):
            cache.update(past[2 * layer], past[2 * layer + 1], layer)
        out = self.model(input_ids=input_ids, attention_mask=attention_mask,
                         position_ids=position_ids, past_key_values=cache, use_cache=True)
        present = []
        for layer in range(self.layers):
            present += [out.past_key_values.layers[layer].keys,
                        out.past_key_values.layers[layer].values]
        return (out.logits, *present)


def export(name, model, out):
    path = os.path.join(out, name, "model.onnx")
    if os.path.exists(path):
        return path
    os.makedirs(os.path.dirname(path), exist_ok=True)
    layers = SHAPE["num_hidden_layers"]
    ids = torch.randint(0, SHAPE["vocab_size"], (1, 4))
    past = [torch.randn(1, 4, 2, 64) for _ in range(2 * layers)]
    mask = torch.ones(1, 6, dtype=torch.int64)
    positions = torch.arange(2, 6).unsqueeze(0)
    names = [f"past_key_values.{i}.{kv}" for i in range(layers) for kv in ("key", "value")]
    presents = [f"present.{i}.{kv}" for i in range(layers) for kv in ("key", "value")]
    axes = {"input_ids": {0: "batch", 1: "sequence"},
            "attention_mask": {0: "batch", 1: "past_sequence + sequence"},
            "position_ids": {0: "batch", 1: "sequence"}, "logits": {0: "batch", 1: "sequence"}}
    for n in names:
        axes[n] = {0: "batch", 2: "past_sequence"}
    for n in presents:
        axes[n] = {0: "batch", 2: "past_sequence + sequence"}
    with torch.no_grad():
        torch.onnx.export(WithCache(model, layers), (ids, mask, positions, *past), path,
                          input_names=["input_ids", "attention_mask", "position_ids", *names],
                          output_names=["logits", *presents], dynamic_axes=axes,
                          opset_version=17, dynamo=False, external_data=True)
    return path


def run(command):
    return subprocess.run(command, check=True, capture_output=True, text=True).stdout


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dense", action="store_true")
    args = parser.parse_args()
    bin_dir = os.environ.get("DSC_BIN_DIR", "build/bin")
    torch.manual_seed(0)
    models = {}
    for experts in (8, 32):
        config = Qwen3MoeConfig(**SHAPE, num_experts=experts, num_experts_per_tok=2,
                                moe_intermediate_size=512, intermediate_size=1024,
                                decoder_sparse_step=1, norm_topk_prob=True)
        config._experts_implementation = "eager"
        model = Qwen3MoeForCausalLM(config).eval()
        moe_export.patch_experts(model)
        models[f"moe-e{experts}"] = model
    if args.dense:
        models["dense-1024"] = Qwen3ForCausalLM(Qwen3Config(**SHAPE, intermediate_size=1024)).eval()
    plans = {}
    for name, model in models.items():
        path = export(name, model, args.out)
        plan = os.path.join(args.out, name + ".dsp")
        if not os.path.exists(plan):
            print(run([f"{bin_dir}/dsc", "compile", path, "-o", plan, "--arch", "none",
                       "--max-seq-len", "512"]), end="", file=sys.stderr)
        roofline = run([f"{bin_dir}/dsp-roofline", plan, "--context", "32"])
        decode = roofline.split('program "decode"')[1]
        weight = int(decode.split("weight bytes: ")[1].split()[0])
        total = int(run([f"{bin_dir}/dsp-dump", plan]).split("weight bytes: ")[1].split()[0])
        plans[name] = dict(plan=plan, decode_weight_bytes=weight, total_weight_bytes=total,
                           decode_ms=[], prefill_ms=[])
    for round_ in range(args.rounds):
        order = list(plans) if round_ % 2 == 0 else list(reversed(plans))
        for name in order:
            load = open("/proc/loadavg").read().split()[0]
            result = json.loads(run([f"{bin_dir}/dsbench", plans[name]["plan"], "--device", "cpu",
                                     "--batch", "1", "--prompt-len", "32", "--new-tokens", "64",
                                     "--warmup", "1", "--iterations", "3", "--json"]))
            plans[name]["decode_ms"].append(result["decode_ms"]["p50"])
            plans[name]["prefill_ms"].append(result["prefill_ms"]["p50"])
            print(f"{time.strftime('%H:%M:%S')} {name} round {round_} load {load}: decode "
                  f"{result['decode_ms']['p50']:.2f} ms/token (P50)", file=sys.stderr)
    print("| model | total weight bytes | decode step reads (dsp-roofline) | decode ms/token, "
          "P50 per round (range) | prefill 32 ms, P50 (range) |")
    print("|---|---:|---:|---:|---:|")
    for name, p in plans.items():
        if not p["decode_ms"]:  # --rounds 0: exported and compiled only
            continue
        print(f"| {name} | {p['total_weight_bytes']:,} | {p['decode_weight_bytes']:,} | "
              f"{min(p['decode_ms']):.2f}-{max(p['decode_ms']):.2f} | "
              f"{min(p['prefill_ms']):.1f}-{max(p['prefill_ms']):.1f} |")


if __name__ == "__main__":
    main()
