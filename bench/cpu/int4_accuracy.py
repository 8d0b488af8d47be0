#!/usr/bin/env python3
"""int4 accuracy on learned weights against ONNX Runtime GenAI's (issue 43).

  int4_accuracy.py [WORK] [--steps 1500]

1. Trains a small Llama (hidden 128, MLP 384, 4 layers, 4 heads over 2 KV heads) on this repository's
   docs with models/docs-gpt2's tokenizer (tools/train_docs_model.py's corpus and batches),
   seeded, and saves it as an HF folder.
2. Runs ONNX Runtime GenAI's model builder on it: fp32 and int4 (its defaults: blocks of 32,
   accuracy_level 4).
3. Compares, on test/quant/docs-prompts.txt (48 prompts of text the model was not trained on)
   and 8 decode steps each (432 rows), each candidate's next-token logits with the builder's
   fp32 model's: top-1 agreement and the mean and max absolute logit error.
   * onnxruntime on the builder's int4 model, as shipped (int8 activations) and at
     accuracy_level 0 (f32 activations);
   * dsc plans: the builder's int4 model (its codes kept), and `--dtype int4` (groups of 32
     and 128) and `--dtype int8` of the builder's fp32 model; through `dseval` against dsc's
     fp32 plan of the builder's fp32 model (which matches onnxruntime's within 1e-4).
   Every candidate is fed the reference's greedy tokens, as dseval does.
Prints a table and writes WORK/int4-accuracy.json. Needs torch, transformers, tokenizers,
onnx, onnxruntime and onnxruntime-genai 0.18.0; dsc and dseval from build/bin (DSC_BIN_DIR).
"""
import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
BIN = Path(os.environ.get("DSC_BIN_DIR", REPO / "build/bin"))
TOKENIZER = REPO / "models/docs-gpt2/tokenizer.json"
PROMPTS = REPO / "test/quant/docs-prompts.txt"
DECODE_STEPS = 8


def train(hf: Path, steps: int):
    import torch
    import transformers
    from tokenizers import Tokenizer
    sys.path.insert(0, str(REPO / "tools"))
    import train_docs_model as docs  # noqa: E402  the corpus and the batches
    torch.manual_seed(0)
    torch.set_num_threads(2)
    text, commit, _ = docs.corpus("HEAD")
    tokenizer = Tokenizer.from_file(str(TOKENIZER))
    ids = torch.tensor(tokenizer.encode(text).ids, dtype=torch.long)
    config = transformers.LlamaConfig(
        vocab_size=tokenizer.get_vocab_size(), hidden_size=128, intermediate_size=384,
        num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
        max_position_embeddings=256, bos_token_id=0, eos_token_id=0, pad_token_id=0,
        tie_word_embeddings=False)
    model = transformers.LlamaForCausalLM(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3, betas=(0.9, 0.95),
                                  weight_decay=0.1)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(
        1.0, (step + 1) / 100) * (0.05 + 0.95 * 0.5 * (1 + math.cos(
            math.pi * min(1.0, step / steps)))))
    data = docs.batches(ids, 16, 128, torch.Generator().manual_seed(0))
    start = time.time()
    model.train()
    for step in range(steps):
        inputs, targets = next(data)
        loss = torch.nn.functional.cross_entropy(
            model(input_ids=inputs).logits.flatten(0, 1), targets.flatten())
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        if step % 250 == 0 or step == steps - 1:
            print(f"step {step}: loss {loss.item():.3f} ({time.time() - start:.0f} s)",
                  flush=True)
    model.eval()
    model.save_pretrained(hf)
    shutil.copy(TOKENIZER, hf / "tokenizer.json")
    return {"steps": steps, "final_loss": loss.item(), "corpus_commit": commit,
            "parameters": sum(p.numel() for p in model.parameters())}


def build(hf: Path, precision: str, out: Path):
    if (out / "model.onnx").exists():
        return
    subprocess.run([sys.executable, "-m", "onnxruntime_genai.models.builder", "-m", str(hf),
                    "-i", str(hf), "-o", str(out), "-p", precision, "-e", "cpu",
                    "-c", str(out.parent / "cache")], check=True, capture_output=True)


def prompts():
    return [[int(t) for t in line.split(",")] for line in PROMPTS.read_text().splitlines()
            if line.strip() and not line.startswith("#")]


class OrtModel:
    def __init__(self, path: Path):
        import onnxruntime
        self.session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        self.past = [i for i in self.session.get_inputs() if i.name.startswith("past_key")]
        config = json.loads((path.parent / "genai_config.json").read_text())["model"]["decoder"]
        self.kv_heads, self.head = config["num_key_value_heads"], config["head_size"]

    def logits(self, ids):
        """Logits at every position of ids, from an empty cache."""
        feeds = {"input_ids": np.array([ids], dtype=np.int64),
                 "attention_mask": np.ones((1, len(ids)), dtype=np.int64)}
        for p in self.past:
            feeds[p.name] = np.zeros((1, self.kv_heads, 0, self.head), dtype=np.float32)
        return self.session.run(["logits"], feeds)[0][0]


def exact_copy(folder: Path, dest: Path):
    import onnx
    model = onnx.load(str(folder / "model.onnx"))
    for node in model.graph.node:
        for attribute in node.attribute:
            if node.op_type == "MatMulNBits" and attribute.name == "accuracy_level":
                attribute.i = 0
    dest.mkdir(exist_ok=True)
    onnx.save(model, str(dest / "model.onnx"), save_as_external_data=True,
              location="model.onnx.data")
    shutil.copy(folder / "genai_config.json", dest / "genai_config.json")
    return dest / "model.onnx"


def compare_ort(reference: OrtModel, candidate: OrtModel, rows):
    agree, errors, worst = 0, [], 0.0
    for ids, generated in rows:
        sequence = ids + generated[:DECODE_STEPS]
        ref = reference.logits(sequence)[len(ids) - 1:]
        got = candidate.logits(sequence)[len(ids) - 1:]
        agree += int(np.sum(ref.argmax(-1) == got.argmax(-1)))
        errors.append(np.abs(ref - got).mean())
        worst = max(worst, float(np.abs(ref - got).max()))
    count = len(rows) * (DECODE_STEPS + 1)
    return {"top1": agree / count, "agree": agree, "rows": count,
            "mean_abs": float(np.mean(errors)), "max_abs": worst}


def dseval(plan: Path, reference: Path):
    out = subprocess.run([str(BIN / "dseval"), str(plan), "--reference", str(reference),
                          "--prompts", str(PROMPTS), "--decode-steps", str(DECODE_STEPS),
                          "--json"], check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("work", nargs="?", default="/tmp/dsc-int4-accuracy")
    parser.add_argument("--steps", type=int, default=1500)
    args = parser.parse_args()
    work = Path(args.work)
    hf = work / "hf"
    training = json.loads((work / "training.json").read_text()) if (
        work / "training.json").exists() else None
    if not (hf / "config.json").exists() or training is None:
        training = train(hf, args.steps)
        (work / "training.json").write_text(json.dumps(training))
    build(hf, "fp32", work / "og-fp32")
    build(hf, "int4", work / "og-int4")

    reference = OrtModel(work / "og-fp32/model.onnx")
    rows = []
    for ids in prompts():
        sequence = list(ids)
        for _ in range(DECODE_STEPS):
            sequence.append(int(reference.logits(sequence)[-1].argmax()))
        rows.append((ids, sequence[len(ids):]))
    results = {"training": training}
    results["ORT GenAI int4 (accuracy_level 4, as shipped)"] = compare_ort(
        reference, OrtModel(work / "og-int4/model.onnx"), rows)
    results["ORT GenAI int4 at accuracy_level 0"] = compare_ort(
        reference, OrtModel(exact_copy(work / "og-int4", work / "og-int4-exact")), rows)

    plans = {"fp32": (work / "og-fp32/model.onnx", []),
             "builder int4, codes kept": (work / "og-int4/model.onnx", []),
             "--dtype int4 (g32)": (work / "og-fp32/model.onnx", ["--dtype", "int4"]),
             "--dtype int4 --int8-group-size 128": (work / "og-fp32/model.onnx",
                                                    ["--dtype", "int4", "--int8-group-size",
                                                     "128"]),
             "--dtype int8": (work / "og-fp32/model.onnx", ["--dtype", "int8"])}
    for name, (model, options) in plans.items():
        plan = work / ("plan-" + "".join(c if c.isalnum() else "-" for c in name) + ".dsp")
        subprocess.run([str(BIN / "dsc"), "compile", str(model), "-o", str(plan), "--arch",
                        "none"] + options, check=True, capture_output=True)
        plans[name] = plan
    for name, plan in plans.items():
        if name != "fp32":
            results[f"dsc {name}"] = dseval(plan, plans["fp32"])

    print(f"\n{len(rows)} prompts x {DECODE_STEPS + 1} rows against the builder's fp32 model "
          f"(Llama, {training['parameters']} parameters, {training['steps']} steps, loss "
          f"{training['final_loss']:.2f})")
    print("| candidate | top-1 | mean abs logit error | max abs logit error |")
    print("|---|---:|---:|---:|")
    for name, result in results.items():
        if name == "training":
            continue
        top1 = result.get("top1", result.get("top1_agreement"))
        mean = result.get("mean_abs", result.get("mean_abs_error"))
        worst = result.get("max_abs", result.get("max_abs_error"))
        print(f"| {name} | {top1:.3f} | {mean:.3f} | {worst:.3f} |")
    (work / "int4-accuracy.json").write_text(json.dumps(results, indent=1, default=str))


if __name__ == "__main__":
    main()
