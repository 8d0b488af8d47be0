#!/usr/bin/env python3
"""ONNX Runtime GenAI as a peer of dsc on the CPU (issue 43): one model, one run, one table.

  ortgenai.py NAME WORK [--prompt-len P] [--new-tokens N] [--iterations I] [--warmup W]
                        [--threads T]

1. Builds the HF model NAME (bench.py's MODELS, random seeded weights, nothing downloaded),
   saves it, and runs ORT GenAI's model builder on it: WORK/NAME/ortgenai-fp32 and
   WORK/NAME/ortgenai-int4 (`-p fp32|int4 -e cpu`, the builder's defaults: int4 in blocks of
   32, accuracy_level 4, i.e. int8 activations).
2. Times og.Generator on each (batch 1: a P-token prompt through append_tokens, then N
   generate_next_token steps, each timed alone; W iterations discarded), with
   intra_op_num_threads T.
3. Compiles each builder model with dsc, without options (the int4 one keeps its codes:
   docs/ortgenai.md), and the fp32 one also at --dtype int8, and runs dsbench on each plan
   with the same P, N, I and W.
Every run is a process of its own under /usr/bin/time (peak RSS). Prints a table and writes
WORK/NAME/ortgenai-bench.json. Nothing asserts on time.

Python needs torch, transformers, onnx, onnxruntime and onnxruntime-genai (0.18.0).
dsc and dsbench come from build/bin (or DSC_BIN_DIR).
"""
import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BIN = Path(os.environ.get("DSC_BIN_DIR", REPO / "build/bin"))
TOKENIZER = REPO / "test/models/llama-op18/tokenizer.json"  # the builder wants one; unused


def timed(command):
    """Runs command under /usr/bin/time; (stdout, peak RSS in MiB)."""
    result = subprocess.run(["/usr/bin/time", "-f", "%M"] + command, capture_output=True,
                            text=True)
    if result.returncode != 0:
        sys.exit(f"failed: {' '.join(command)}\n{result.stdout}{result.stderr}")
    rss = int(result.stderr.strip().splitlines()[-1]) / 1024
    return result.stdout, rss


def export(name, folder: Path):
    sys.path.insert(0, str(REPO / "bench/cpu"))
    import bench  # noqa: E402  bench.py's MODELS and build_model
    hf = folder / "hf"
    if not (hf / "config.json").exists():
        model = bench.build_model(name)
        model.save_pretrained(hf)
        shutil.copy(TOKENIZER, hf / "tokenizer.json")
    for precision in ("fp32", "int4"):
        out = folder / f"ortgenai-{precision}"
        if (out / "model.onnx").exists():
            continue
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "onnxruntime_genai.models.builder", "-m", str(hf),
                        "-i", str(hf), "-o", str(out), "-p", precision, "-e", "cpu",
                        "-c", str(folder / "cache")], check=True, capture_output=True)
        print(f"{name}: builder -p {precision} in {time.perf_counter() - start:.0f} s", flush=True)


def og_child(args):
    """One og.Generator timing (in its own process, so that its RSS is its own)."""
    import numpy as np
    import onnxruntime_genai as og
    config_path = Path(args.og) / "genai_config.json"
    config = json.loads(config_path.read_text())
    options = config["model"]["decoder"].setdefault("session_options", {})
    options["intra_op_num_threads"] = args.threads
    config_path.write_text(json.dumps(config, indent=4))
    start = time.perf_counter()
    model = og.Model(args.og)
    load_ms = (time.perf_counter() - start) * 1e3
    vocab = config["model"]["vocab_size"]
    rng = np.random.default_rng(20240601)
    prefill, decode = [], []
    for iteration in range(args.warmup + args.iterations):
        ids = rng.integers(0, vocab, size=args.prompt_len).tolist()
        params = og.GeneratorParams(model)
        length = args.prompt_len + args.new_tokens
        params.set_search_options(do_sample=False, max_length=length, min_length=length)
        generator = og.Generator(model, params)
        start = time.perf_counter()
        generator.append_tokens(ids)
        first = (time.perf_counter() - start) * 1e3
        steps = []
        for _ in range(args.new_tokens):
            start = time.perf_counter()
            generator.generate_next_token()
            steps.append((time.perf_counter() - start) * 1e3)
        if iteration >= args.warmup:
            prefill.append(first)
            decode += steps
    print(json.dumps({"load_ms": load_ms, "prefill_ms": statistics.median(prefill),
                      "decode_ms": statistics.fmean(decode)}))


def dsbench(plan, args):
    out, rss = timed([str(BIN / "dsbench"), str(plan), "--device", "cpu", "--batch", "1",
                      "--prompt-len", str(args.prompt_len), "--new-tokens", str(args.new_tokens),
                      "--warmup", str(args.warmup), "--iterations", str(args.iterations)])
    prefill = re.search(r"prefill[^\n]*?([0-9.]+) ms", out)
    decode = re.search(r"decode step[^\n]*?([0-9.]+) ms", out)
    # dsbench's own peak, taken before its bandwidth probe copies 256 MiB.
    peak = re.search(r"peak resident memory\s+([0-9.]+) (KiB|MiB|GiB)", out)
    if peak:
        rss = float(peak.group(1)) * {"KiB": 1 / 1024, "MiB": 1, "GiB": 1024}[peak.group(2)]
    return {"prefill_ms": float(prefill.group(1)) if prefill else None,
            "decode_ms": float(decode.group(1)) if decode else None, "rss_mib": rss,
            "output": out}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("name", nargs="?")
    parser.add_argument("work", nargs="?", default="/tmp/dsc-ortgenai-bench")
    parser.add_argument("--prompt-len", type=int, default=32)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--og", help=argparse.SUPPRESS)  # the child process: time og here
    args = parser.parse_args()
    if args.og:
        return og_child(args)
    folder = Path(args.work) / args.name
    folder.mkdir(parents=True, exist_ok=True)
    export(args.name, folder)
    rows = []
    for precision in ("fp32", "int4"):
        og_folder = folder / f"ortgenai-{precision}"
        out, rss = timed([sys.executable, __file__, "--og", str(og_folder),
                          "--prompt-len", str(args.prompt_len),
                          "--new-tokens", str(args.new_tokens), "--iterations",
                          str(args.iterations), "--warmup", str(args.warmup),
                          "--threads", str(args.threads)])
        og_result = json.loads(out.strip().splitlines()[-1])
        rows.append({"runtime": "ORT GenAI", "model": f"builder {precision}",
                     "prefill_ms": og_result["prefill_ms"], "decode_ms": og_result["decode_ms"],
                     "rss_mib": rss})
        variants = [("", [])] + ([("-int8", ["--dtype", "int8"])] if precision == "fp32" else [])
        for suffix, options in variants:
            plan = folder / f"dsc-{precision}{suffix}.dsp"
            subprocess.run([str(BIN / "dsc"), "compile", str(og_folder / "model.onnx"), "-o",
                            str(plan), "--arch", "none", "--max-batch", "1", "--max-seq-len",
                            str(args.prompt_len + args.new_tokens)] + options, check=True,
                           capture_output=True)
            result = dsbench(plan, args)
            label = "int4 (codes kept)" if precision == "int4" else (
                "int8" if suffix else "fp32")
            rows.append({"runtime": "dsc", "model": f"builder {precision} -> {label}",
                         **{k: result[k] for k in ("prefill_ms", "decode_ms", "rss_mib")}})
    flags = open("/proc/cpuinfo").read()
    kinds = [k for k in ("avx2", "avx512f", "avx512_vnni", "amx_int8") if f" {k}" in flags]
    cpu = re.search(r"model name\s*:\s*(.*)", flags)
    print(f"\n{args.name}, batch 1, prompt {args.prompt_len}, {args.new_tokens} steps, "
          f"{args.threads} threads; {cpu.group(1) if cpu else platform.processor()} "
          f"({', '.join(kinds)})")
    print("| runtime | model | prefill ms | decode step ms | peak RSS MiB |")
    print("|---|---|---:|---:|---:|")
    for row in rows:
        print(f"| {row['runtime']} | {row['model']} | {row['prefill_ms']:.1f} | "
              f"{row['decode_ms']:.2f} | {row['rss_mib']:.0f} |")
    (folder / "ortgenai-bench.json").write_text(json.dumps(
        {"name": args.name, "cpu": cpu.group(1) if cpu else "", "cpu_kinds": kinds,
         "threads": args.threads, "prompt_len": args.prompt_len, "new_tokens": args.new_tokens,
         "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
