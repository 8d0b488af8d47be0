#!/usr/bin/env python3
"""Encoder-decoder generation on the CPU: dsrun against transformers' generate, both greedy
with their KV caches, on a T5 of t5-small's shape (6 + 6 layers, d_model 512, 8 heads of 64,
d_ff 2048, vocabulary 32128; random weights, seeded) exported as a user exports it
(torch.onnx.export, dynamo, of the encoder and of a decoder without a cache).

    /work/today-venv/bin/python bench/encdec/bench.py [--build-dir build] [--work DIR]

A decode step's time is the difference between two generations of different lengths
(--short and --long new tokens, the same prompt) divided by the extra tokens, so that
loading, encoding and the first step cancel; each figure is the best of --repeats runs.
dsrun runs as a process (its time includes mapping the plan, the same in both lengths);
transformers runs in this process with torch's threads set to --threads. A benchmark, not
a test: it prints what it measures and asserts nothing about time; it does check that
both produce the same tokens, which makes the comparison one of the same work.
"""

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools" / "fixtures"))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers as T  # noqa: E402

import export_encdec as ee  # noqa: E402


def build(work: Path):
    torch.manual_seed(0)
    cfg = T.T5Config(vocab_size=32128, d_model=512, d_kv=64, d_ff=2048, num_layers=6,
                     num_decoder_layers=6, num_heads=8, relative_attention_num_buckets=32,
                     relative_attention_max_distance=128, feed_forward_proj="relu",
                     decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
    model = T.T5ForConditionalGeneration(cfg).eval()
    folder = work / "t5-small-shape"
    if (folder / "decoder.onnx").exists():
        return model, folder
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    for p in folder.iterdir():
        if p.name not in ("config.json", "generation_config.json"):
            p.unlink()
    B, S, Tt = torch.export.Dim("batch"), torch.export.Dim("src_len"), torch.export.Dim("tgt_len")
    ids = torch.randint(2, cfg.vocab_size, (2, 12))
    mask = torch.ones_like(ids)
    ee.dynamo_export(ee.EncoderWrapper(model).eval(), (ids, mask), ["input_ids", "attention_mask"],
                     ["last_hidden_state"], {"input_ids": {0: B, 1: S},
                                             "attention_mask": {0: B, 1: S}},
                     folder / "encoder.onnx")
    with torch.no_grad():
        hidden = model.get_encoder()(input_ids=ids, attention_mask=mask).last_hidden_state
    dec = torch.zeros((2, 4), dtype=torch.long)
    ee.dynamo_export(ee.DecoderWrapper(model).eval(), (dec, hidden, mask),
                     ["decoder_input_ids", "encoder_hidden_states", "attention_mask"], ["logits"],
                     {"decoder_input_ids": {0: B, 1: Tt}, "encoder_hidden_states": {0: B, 1: S},
                      "attention_mask": {0: B, 1: S}}, folder / "decoder.onnx")
    return model, folder


def best(fn, repeats):
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return min(times), result


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build-dir", default=str(ROOT / "build"))
    parser.add_argument("--work", default="/tmp/dsc-bench-encdec")
    parser.add_argument("--prompt", type=int, default=32, help="prompt tokens")
    parser.add_argument("--short", type=int, default=8)
    parser.add_argument("--long", type=int, default=72)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    work = Path(args.work)
    model, folder = build(work)
    bindir = Path(args.build_dir) / "bin"
    plan = work / "t5-small-shape.dsp"
    if not plan.exists():
        subprocess.run([bindir / "dsc", "compile", folder, "-o", plan, "--arch", "none",
                        "--max-seq-len", "256"], check=True)
    listing = subprocess.run([bindir / "dsp-dump", plan], capture_output=True, text=True).stdout
    session = '"decode"' in listing
    prompt = list(np.random.default_rng(1).integers(2, 32000, args.prompt))

    def dsrun(new):
        out = subprocess.run([bindir / "dsrun", plan, "--prompt-ids", ",".join(map(str, prompt)),
                              "--max-new-tokens", str(new), "--ignore-eos"],
                             capture_output=True, text=True, check=True,
                             env=dict(os.environ, OMP_NUM_THREADS=str(args.threads))).stdout
        return [int(t) for t in out.split(":", 1)[1].split("(")[0].split()]

    def hf(new):
        with torch.no_grad():
            ids = torch.tensor([prompt])
            out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids),
                                 max_new_tokens=new, min_new_tokens=new, do_sample=False,
                                 num_beams=1, use_cache=True)
        return out[0, 1:].tolist()

    rows = {}
    for name, fn in (("dsrun", dsrun), ("transformers", hf)):
        short, tokens_short = best(lambda: fn(args.short), args.repeats)
        long, tokens_long = best(lambda: fn(args.long), args.repeats)
        rows[name] = dict(short_s=short, long_s=long,
                          ms_per_token=1000 * (long - short) / (args.long - args.short),
                          tokens=tokens_long)
    same = rows["dsrun"]["tokens"] == rows["transformers"]["tokens"]
    print(json.dumps({"model": "T5, t5-small's shape, random weights, fp32",
                      "prompt_tokens": args.prompt, "new_tokens": [args.short, args.long],
                      "threads": args.threads, "dsc_session_programs": session,
                      "same_tokens": same,
                      "dsrun_ms_per_token": round(rows["dsrun"]["ms_per_token"], 2),
                      "transformers_ms_per_token": round(rows["transformers"]["ms_per_token"], 2),
                      "dsrun_s": [round(rows["dsrun"]["short_s"], 3), round(rows["dsrun"]["long_s"], 3)],
                      "transformers_s": [round(rows["transformers"]["short_s"], 3),
                                         round(rows["transformers"]["long_s"], 3)],
                      "torch": torch.__version__, "transformers": T.__version__}, indent=1))


if __name__ == "__main__":
    main()
