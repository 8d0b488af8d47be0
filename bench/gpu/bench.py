#!/usr/bin/env python3
"""The GPU benchmark's Python side (bench/gpu/run.sh drives it), on the GPU machine:

  bench.py export NAME DIR        the HF model NAME with random weights (seeded; built from a
                                  config, nothing downloaded) exported to DIR/model.onnx the
                                  way tools/fixtures/export_hf.py exports the fixtures (its
                                  wrappers and torch.onnx.export call, reused)
  bench.py hf NAME JSON [--prompt-len P] [--new-tokens N] [--iterations I] [--warmup W]
                                  transformers' own decode on the GPU in fp16: batch 1, a
                                  P-token prompt, then N single-token steps through the KV
                                  cache, each step timed alone (eager, then torch.compile)
  bench.py correctness WORK NAME... [--out DIR]
                                  real shapes, random weights, fp32/fp16/bf16/int8 plans: the
                                  GPU session against the CPU one on prompts and 16 decode
                                  steps (dseval --device cuda) and the greedy tokens of both
  bench.py report WORK NAME...    one table of dsc vs transformers from the JSON files under
                                  WORK/NAME/, printed, and written as markdown and JSON under
                                  $OUT when it is set; a model with an int8 result
                                  (dsbench-int8.json) gets an "int8" row below its fp16 one,
                                  with its speedup over the fp16 row (docs/int8.md)

Needs torch, transformers, onnx, onnxruntime, numpy (the GPU machine has them).
"""
import argparse
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools" / "fixtures"))

# name: (transformers class, config arguments, whether the export takes position_ids).
# The GPT-2 sizes are the four released checkpoints' shapes; OPT-1.3B is facebook/opt-1.3b's;
# "llama-1b" is Llama-3.2-1B's shape (grouped-query attention, 128k vocabulary, tied head).
# "gpt2-tiny" checks the pipeline in seconds (the fixtures' GPT-2 shape with GPT-2's vocabulary).
MODELS = {
    "gpt2-tiny": ("GPT2LMHeadModel", "GPT2Config",
                  dict(n_embd=64, n_layer=2, n_head=4), True),
    "gpt2-124m": ("GPT2LMHeadModel", "GPT2Config",
                  dict(n_embd=768, n_layer=12, n_head=12), True),
    "gpt2-355m": ("GPT2LMHeadModel", "GPT2Config",
                  dict(n_embd=1024, n_layer=24, n_head=16), True),
    "gpt2-774m": ("GPT2LMHeadModel", "GPT2Config",
                  dict(n_embd=1280, n_layer=36, n_head=20), True),
    "gpt2-1.5b": ("GPT2LMHeadModel", "GPT2Config",
                  dict(n_embd=1600, n_layer=48, n_head=25), True),
    "opt-1.3b": ("OPTForCausalLM", "OPTConfig",
                 dict(hidden_size=2048, ffn_dim=8192, num_hidden_layers=24,
                      num_attention_heads=32, max_position_embeddings=2048,
                      word_embed_proj_dim=2048, vocab_size=50272), False),
    "llama-1b": ("LlamaForCausalLM", "LlamaConfig",
                 dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                      num_attention_heads=32, num_key_value_heads=8, vocab_size=128256,
                      max_position_embeddings=131072,
                      rope_parameters=dict(rope_type="llama3", rope_theta=500000.0,
                                           factor=32.0, low_freq_factor=1.0,
                                           high_freq_factor=4.0,
                                           original_max_position_embeddings=8192),
                      tie_word_embeddings=True, bos_token_id=128000, eos_token_id=128001),
                 True),
    # Issue 47's prefill model: a 244M Llama (hidden 1024, 16 layers, 16 heads over 4 KV
    # heads, 32k vocabulary), long enough for 8192-token prompts (bench/cpu/RESULTS.md).
    "llama-244m": ("LlamaForCausalLM", "LlamaConfig",
                   dict(hidden_size=1024, intermediate_size=2784, num_hidden_layers=16,
                        num_attention_heads=16, num_key_value_heads=4, vocab_size=32000,
                        max_position_embeddings=16384), True),
    # The attention kernels' wide tiles, for the correctness sweep: heads of 128 in GQA 4:1,
    # and heads of 256 over one KV head (Gemma-2B's attention shape).
    "llama-hd128": ("LlamaForCausalLM", "LlamaConfig",
                    dict(hidden_size=1024, intermediate_size=2816, num_hidden_layers=4,
                         num_attention_heads=8, num_key_value_heads=2, head_dim=128,
                         vocab_size=32000, max_position_embeddings=4096), True),
    "mqa-hd256": ("LlamaForCausalLM", "LlamaConfig",
                  dict(hidden_size=1024, intermediate_size=2048, num_hidden_layers=4,
                       num_attention_heads=8, num_key_value_heads=1, head_dim=256,
                       vocab_size=32000, max_position_embeddings=4096), True),
}

# GPU against the CPU session on one plan (bench.py correctness): the largest difference of
# the next-token logits allowed per weight dtype. Measured on an NVIDIA H200 (driver
# 580.159.04, 2026-11-26; bench/gpu/results/2026-11-26-h200), the largest over GPT-2 124M,
# heads of 128 (GQA 4:1) and heads of 256 (MQA), 8 prompts and 16 decode steps each:
# fp32 7.6e-6, fp16 1.9e-3, bf16 1.5e-2, int8 2.8e-3. fp32 takes no TF32 and differs by
# summation order only; fp16/bf16 prefill GEMMs round their activations to the weight type
# on the tensor cores (the CPU keeps them in f32), 2^-11 and 2^-8 of each activation, so
# bf16's bound is 8 times fp16's; int8 rounds like fp16 around its dequantized weights. Each
# bound is about four times the largest measured difference.
CORRECTNESS_BOUNDS = {"fp32": 5e-5, "fp16": 1e-2, "bf16": 6e-2, "int8": 1.5e-2}


def build(name, dtype, device):
    import torch
    import transformers
    model_class, config_class, arguments, _ = MODELS[name]
    config = getattr(transformers, config_class)(**arguments)
    torch.manual_seed(0)
    with torch.device(device):
        model = getattr(transformers, model_class)(config)
        # As tools/fixtures/export_hf.py does: HF initialises biases to 0 and norm scales to 1,
        # and torch.onnx.export then shares or folds those identical initializers, which is
        # not what a trained checkpoint exports. Perturb every 1-D parameter.
        generator = torch.Generator(device=device).manual_seed(1)
        with torch.no_grad():
            for _, parameter in sorted(model.named_parameters(), key=lambda kv: kv[0]):
                if parameter.dim() == 1:
                    parameter.add_(torch.randn(parameter.shape, generator=generator,
                                               device=device) * 0.1)
    return model.to(dtype).eval()


def gather_external_data(path):
    """Above 2 GB torch.onnx.export writes one external file per tensor; dsc reads them, but one
    `model.onnx_data` beside the graph is what the fixtures and optimum use, and is tidier."""
    import onnx
    folder = path.parent
    extra = [p for p in folder.iterdir() if p.name not in ("model.onnx", "model.json")]
    if not extra:
        return
    model = onnx.load(str(path), load_external_data=True)
    gathered = folder / "gathered"
    gathered.mkdir(exist_ok=True)
    onnx.save_model(model, str(gathered / "model.onnx"), save_as_external_data=True,
                    all_tensors_to_one_file=True, location="model.onnx_data")
    del model
    for p in extra:
        p.unlink()
    for p in gathered.iterdir():
        p.replace(folder / p.name)
    gathered.rmdir()


def export(args):
    import torch
    import export_hf  # tools/fixtures: the fixtures' wrappers and export call
    out = Path(args.dir)
    out.mkdir(parents=True, exist_ok=True)
    model = build(args.name, torch.float32, "cpu")
    # The no-cache export (the fixtures' "-op14" form at opset 17): dsc derives the prefill and
    # decode programs with the session's KV cache from its recognised attention, and this form
    # needs no Cache objects at the border, which transformers keeps changing.
    variant = export_hf.Variant(args.name, args.name.split("-")[0], 17, "nocache")
    spec = {"position_ids": MODELS[args.name][3]}
    start = time.perf_counter()
    path, _, _ = export_hf.export_torchscript(variant, model, spec, out)
    gather_external_data(path)
    parameters = sum(p.numel() for p in model.parameters())
    (out / "model.json").write_text(json.dumps(
        {"name": args.name, "parameters": parameters, "onnx": str(path),
         "export_seconds": time.perf_counter() - start}, indent=2))
    print(f"{args.name}: {parameters / 1e6:.0f}M parameters exported to {path}")


def run_tool(command, log):
    import subprocess
    result = subprocess.run(command, capture_output=True, text=True)
    log.write("$ " + " ".join(map(str, command)) + "\n" + result.stdout + result.stderr)
    log.flush()
    return result


def correctness(args):
    """Real shapes with random weights: for each weight dtype, the plan's GPU session
    against its CPU session on the first prompts of test/quant/prompts.txt and 16 decode
    steps (dseval --device cuda), and the greedy tokens of both (dsrun). Writes
    realistic.md and realistic.json under --out; exits 1 when a bound is exceeded or a run
    fails."""
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    prompts = work / "prompts.txt"
    lines = [l for l in (REPO / "test/quant/prompts.txt").read_text().splitlines()
             if l.strip() and not l.startswith("#")]
    prompts.write_text("\n".join(lines[:args.prompts]) + "\n")
    greedy_prompts = [l.split(",") for l in lines[:2]]
    rows, failed = [], False
    with open(work / "correctness.log", "a") as log:
        for name in args.names:
            folder = work / name
            if not (folder / "model.json").exists():
                result = run_tool([sys.executable, __file__, "export", name, str(folder)], log)
                if result.returncode != 0:
                    rows.append(dict(model=name, dtype="-", error="export failed"))
                    failed = True
                    continue
            onnx_path = json.loads((folder / "model.json").read_text())["onnx"]
            for dtype in args.dtypes.split(","):
                row = dict(model=name, dtype=dtype, bound=CORRECTNESS_BOUNDS[dtype])
                plan = folder / f"{dtype}.dsp"
                if not plan.exists():
                    result = run_tool(["dsc", "compile", onnx_path, "-o", str(plan),
                                       "--dtype", dtype, "--max-batch", "4",
                                       "--max-seq-len", "96"], log)
                    if result.returncode != 0:
                        row["error"] = "dsc: " + (result.stderr.strip().splitlines() or ["?"])[-1]
                        rows.append(row)
                        failed = True
                        continue
                result = run_tool(["dseval", str(plan), "--reference", str(plan),
                                   "--prompts", str(prompts), "--device", "cuda",
                                   "--decode-steps", str(args.decode_steps), "--json"], log)
                try:
                    summary = json.loads(result.stdout.strip().splitlines()[-1])
                    row.update(rows_compared=summary["rows"], top1=summary["top1_agree"],
                               max_abs=summary["max_abs_error"],
                               mean_abs=summary.get("mean_abs_error"))
                    row["ok"] = row["max_abs"] <= row["bound"] and math.isfinite(row["max_abs"])
                except (ValueError, KeyError, IndexError):
                    row["error"] = "dseval: " + (result.stderr.strip().splitlines() or ["?"])[-1]
                    row["ok"] = False
                greedy = []
                for device in ("cuda", "cpu"):
                    command = ["dsrun", str(plan), "--device", device, "--max-new-tokens", "16",
                               "--ignore-eos"]
                    for prompt in greedy_prompts:
                        command += ["--prompt-ids", ",".join(prompt)]
                    greedy.append(run_tool(command, log).stdout)
                tokens = [[l for l in g.splitlines() if l.startswith("sequence ")] for g in greedy]
                row["greedy_equal"] = bool(tokens[0]) and tokens[0] == tokens[1]
                failed |= not row.get("ok", False)
                rows.append(row)
                print(json.dumps(row), flush=True)
    lines = ["| model | dtype | rows | top-1 | max abs (bound) | mean abs | greedy GPU = CPU |",
             "|---|---|---:|---:|---:|---:|---|"]
    for r in rows:
        if "error" in r and "max_abs" not in r:
            lines.append(f"| {r['model']} | {r['dtype']} | | | {r['error']} | | |")
            continue
        lines.append(f"| {r['model']} | {r['dtype']} | {r['rows_compared']} | {r['top1']} | "
                     f"{r['max_abs']:.3g} ({r['bound']:g}){'' if r['ok'] else ' EXCEEDED'} | "
                     f"{r['mean_abs']:.3g} | {'yes' if r['greedy_equal'] else 'NO'} |")
    table = "\n".join(lines)
    print(table)
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "realistic.md").write_text(table + "\n")
        (Path(args.out) / "realistic.json").write_text(json.dumps(rows, indent=1))
    return 1 if failed else 0


def percentiles(samples):
    ordered = sorted(samples)

    def at(fraction):
        rank = max(1, math.ceil(fraction * len(ordered)))
        return ordered[min(len(ordered), rank) - 1]
    return {"avg": statistics.fmean(ordered), "p50": at(0.5), "p90": at(0.9), "p99": at(0.99)}


def time_decode(forward, prompt_len, new_tokens, iterations, warmup, vocab, device="cuda"):
    """Prefill of a batch-1 prompt, then single-token steps through the KV cache, each step
    timed alone with the GPU synchronised around it (as dsbench times dsrt_session_run)."""
    import torch
    synchronize = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    generator = torch.Generator(device=device).manual_seed(20240601)
    prefill_ms, step_ms = [], []
    for iteration in range(warmup + iterations):
        ids = torch.randint(0, vocab, (1, prompt_len), device=device, generator=generator)
        mask = torch.ones_like(ids)
        synchronize()
        start = time.perf_counter()
        with torch.inference_mode():
            out = forward(input_ids=ids, attention_mask=mask, use_cache=True)
        synchronize()
        if iteration >= warmup:
            prefill_ms.append(1e3 * (time.perf_counter() - start))
        past = out.past_key_values
        for step in range(new_tokens):
            token = torch.randint(0, vocab, (1, 1), device=device, generator=generator)
            mask = torch.ones((1, prompt_len + step + 1), dtype=torch.long, device=device)
            start = time.perf_counter()
            with torch.inference_mode():
                out = forward(input_ids=token, attention_mask=mask, past_key_values=past,
                              use_cache=True)
            synchronize()
            if iteration >= warmup:
                step_ms.append(1e3 * (time.perf_counter() - start))
            past = out.past_key_values
    return {"prefill_ms": percentiles(prefill_ms), "decode_ms": percentiles(step_ms)}


def hf(args):
    import torch
    import transformers
    result = {"name": args.name, "transformers": transformers.__version__,
              "torch": torch.__version__, "device": torch.cuda.get_device_name(0),
              "prompt_len": args.prompt_len, "new_tokens": args.new_tokens}
    model = build(args.name, torch.float16, "cuda")
    result["parameters"] = sum(p.numel() for p in model.parameters())
    vocab = model.config.vocab_size
    measure = lambda forward: time_decode(forward, args.prompt_len, args.new_tokens,
                                          args.iterations, args.warmup, vocab)
    try:
        result["eager"] = measure(model)
    except Exception as error:  # noqa: BLE001 - report, do not stop the other runs
        result["eager_error"] = f"{type(error).__name__}: {error}"[:500]
    if not args.no_compile:
        try:
            compiled = torch.compile(model, dynamic=True)
            result["compile"] = measure(compiled)
        except Exception as error:  # noqa: BLE001
            result["compile_error"] = f"{type(error).__name__}: {error}"[:500]
    Path(args.json).write_text(json.dumps(result, indent=2))
    print(json.dumps({k: v for k, v in result.items() if k in ("eager", "compile")}, indent=1))


def load(path):
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def dsc_fields(dsc):
    """The columns a dsbench JSON result fills."""
    return dict(dsc_ms=dsc["decode_ms"]["avg"], dsc_p50_ms=dsc["decode_ms"]["p50"],
                dsc_p99_ms=dsc["decode_ms"]["p99"], prefill_ms=dsc["prefill_ms"]["avg"],
                weight_gb_per_s=dsc["weight_bandwidth_bytes_per_s"] / 1e9,
                copy_gb_per_s=dsc["copy_bandwidth_bytes_per_s"] / 1e9,
                fraction=dsc["bandwidth_fraction"], device=dsc["device_name"],
                load_ms=dsc["load_ms"],
                # What a decode step reads (older dsbench: the whole section).
                weight_bytes=dsc.get("decode_weight_bytes") or dsc.get("weight_bytes_per_rank"))


def int8_row(work, name, fp16_row):
    """The int8 plan of `name` timed like its fp16 plan (run.sh), or None when run.sh left
    no int8 result or error. speedup_vs_fp16 is the fp16 row's ms/token over this row's."""
    folder = work / name
    dsc = load(folder / "dsbench-int8.json")
    error = folder / "error-int8.txt"
    if not dsc and not error.exists():
        return None
    row = {"model": f"{name} int8", "parameters": fp16_row.get("parameters"), "dtype": "int8"}
    if dsc:
        row.update(dsc_fields(dsc))
        if fp16_row.get("dsc_ms") and row["dsc_ms"]:
            row["speedup_vs_fp16"] = fp16_row["dsc_ms"] / row["dsc_ms"]
        if fp16_row.get("weight_bytes") and row.get("weight_bytes"):
            row["weight_ratio_vs_fp16"] = row["weight_bytes"] / fp16_row["weight_bytes"]
    else:
        row["dsc_error"] = error.read_text()[-300:].strip()
    return row


def report(args):
    work = Path(args.work)
    rows = []
    for name in args.names:
        meta = load(work / name / "model.json") or {}
        dsc = load(work / name / "dsbench.json")
        reference = load(work / name / "hf.json") or {}
        row = {"model": name, "parameters": meta.get("parameters") or
               reference.get("parameters"), "dtype": "fp16"}
        if dsc:
            row.update(dsc_fields(dsc))
        else:
            row["dsc_error"] = (work / name / "error.txt").read_text()[-300:] \
                if (work / name / "error.txt").exists() else "no dsbench result"
        for mode in ("eager", "compile"):
            if mode in reference:
                row[f"hf_{mode}_ms"] = reference[mode]["decode_ms"]["avg"]
                row[f"hf_{mode}_prefill_ms"] = reference[mode]["prefill_ms"]["avg"]
            elif f"{mode}_error" in reference:
                row[f"hf_{mode}_error"] = reference[f"{mode}_error"]
        best = min([row[k] for k in ("hf_eager_ms", "hf_compile_ms") if k in row],
                   default=None)
        if best and row.get("dsc_ms"):
            row["speedup"] = best / row["dsc_ms"]
        rows.append(row)
        quantized = int8_row(work, name, row)
        if quantized:
            if best and quantized.get("dsc_ms"):
                quantized["speedup"] = best / quantized["dsc_ms"]
            rows.append(quantized)

    def cell(row, key, form):
        return form.format(row[key]) if row.get(key) is not None else "-"
    header = ("| model | params | dsc ms/token | HF eager ms/token | HF compile ms/token | "
              "speedup (best HF / dsc) | int8 speedup (fp16 / int8) | decode weight MB | "
              "weight GB/s | % of copy BW | dsc prefill ms |")
    lines = [header, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for row in rows:
        params = f"{row['parameters'] / 1e6:.0f}M" if row.get("parameters") else "-"
        percent = f"{100 * row['fraction']:.0f}%" if row.get("fraction") else "-"
        megabytes = f"{row['weight_bytes'] / 1e6:.1f}" if row.get("weight_bytes") else "-"
        lines.append(f"| {row['model']} | {params} | {cell(row, 'dsc_ms', '{:.3f}')} | "
                     f"{cell(row, 'hf_eager_ms', '{:.3f}')} | "
                     f"{cell(row, 'hf_compile_ms', '{:.3f}')} | "
                     f"{cell(row, 'speedup', '{:.2f}x')} | "
                     f"{cell(row, 'speedup_vs_fp16', '{:.2f}x')} | {megabytes} | "
                     f"{cell(row, 'weight_gb_per_s', '{:.1f}')} | {percent} | "
                     f"{cell(row, 'prefill_ms', '{:.2f}')} |")
    notes = [f"- {row['model']}: {key}: {row[key]}" for row in rows
             for key in ("dsc_error", "hf_eager_error", "hf_compile_error") if key in row]
    # The target for int8 weight-only decode (docs/int8.md).
    notes += [f"- {row['model']}: {row['speedup_vs_fp16']:.2f}x over fp16, target 1.60x for "
              f"1B+ parameters: {'met' if row['speedup_vs_fp16'] >= 1.6 else 'NOT met'}"
              for row in rows if row.get("speedup_vs_fp16") and
              (row.get("parameters") or 0) >= 1e9]
    device = next((row["device"] for row in rows if row.get("device")), "?")
    copy = next((row["copy_gb_per_s"] for row in rows if row.get("copy_gb_per_s")), None)
    title = (f"Decode at batch 1, fp16 weights (int8 rows: --dtype int8 weight-only), on {device}"
             + (f" (copy bandwidth {copy:.0f} GB/s, read + write)" if copy else ""))
    text = "\n".join([title, "", *lines, *([""] + notes if notes else [])]) + "\n"
    print(text)
    if os.environ.get("OUT"):
        out = Path(os.environ["OUT"])
        out.mkdir(parents=True, exist_ok=True)
        (out / "gpu-bench.md").write_text(text)
        (out / "gpu-bench.json").write_text(json.dumps(rows, indent=2))


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    p = commands.add_parser("export")
    p.add_argument("name", choices=sorted(MODELS))
    p.add_argument("dir")
    p.set_defaults(run=export)
    p = commands.add_parser("hf")
    p.add_argument("name", choices=sorted(MODELS))
    p.add_argument("json")
    p.add_argument("--prompt-len", type=int, default=128)
    p.add_argument("--new-tokens", type=int, default=128)
    p.add_argument("--iterations", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--no-compile", action="store_true")
    p.set_defaults(run=hf)
    p = commands.add_parser("correctness")
    p.add_argument("work")
    p.add_argument("names", nargs="+")
    p.add_argument("--out")
    p.add_argument("--dtypes", default="fp32,fp16,bf16,int8")
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--decode-steps", type=int, default=16)
    p.set_defaults(run=correctness)
    p = commands.add_parser("report")
    p.add_argument("work")
    p.add_argument("names", nargs="+")
    p.set_defaults(run=report)
    args = parser.parse_args()
    sys.exit(args.run(args) or 0)


if __name__ == "__main__":
    main()
