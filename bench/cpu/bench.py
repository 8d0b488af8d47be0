#!/usr/bin/env python3
"""The CPU benchmark's Python side (bench/cpu/run.sh drives it): dsbench --device cpu against
ONNX Runtime and PyTorch eager on the same model, the same weights, the same prompt length,
step count and thread count, in one table.

  bench.py export NAME DIR        the HF model NAME with random weights (seeded; built from a
                                  config, nothing downloaded: bench/gpu/bench.py's MODELS and
                                  build) exported twice from the one built model:
                                  DIR/nocache/model.onnx (what dsc compiles, as bench/gpu) and
                                  DIR/past/model.onnx (with past: input_ids, attention_mask,
                                  [position_ids], past_key_values.{i}.key/value -> logits,
                                  present.{i}.key/value; what ONNX Runtime runs); DIR/model.json
                                  says what was exported and checks the with-past export
                                  against PyTorch on a short prompt
  bench.py ort NAME DIR JSON [--batch B] [--prompt-len P] [--new-tokens N] [--iterations I]
                                  [--warmup W] [--threads T]
                                  ONNX Runtime (CPU provider, intra_op_num_threads T) on
                                  DIR/past/model.onnx: a B x P prompt with an empty past
                                  (length 0), then N single-token steps feeding the presents
                                  back as the next past (I/O binding, no copies), each timed
                                  alone; W iterations discarded
  bench.py torch NAME JSON [same options]
                                  transformers' model (fp32, eager PyTorch, its DynamicCache):
                                  one forward over the prompt, then N single-token steps with
                                  past_key_values, torch.set_num_threads(T)
  bench.py report WORK --models M,.. --dtypes D,.. --batches B,.. [--out DIR] ...
                                  one table from the results under WORK (run.sh's layout),
                                  printed and written as cpu-bench.md and cpu-bench.json

The models are bench/gpu/bench.py's MODELS (that file is imported by path as gpu_bench) plus
"llama-0.5b" (Qwen2.5-0.5B's shape as a LlamaConfig) added here. Needs torch, transformers,
onnx, onnxruntime, numpy.
"""
import argparse
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _load_gpu_bench():
    spec = importlib.util.spec_from_file_location("gpu_bench", REPO / "bench/gpu/bench.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # also puts tools/fixtures on sys.path (export_hf)
    return module


gpu_bench = _load_gpu_bench()
MODELS = gpu_bench.MODELS
# Qwen2.5-0.5B's shape (grouped-query attention 14:2, heads of 64, 152k vocabulary, tied head,
# rope theta 1e6) as a plain Llama: Qwen2's q/k/v biases are left out. About 494M parameters.
MODELS["llama-0.5b"] = (
    "LlamaForCausalLM", "LlamaConfig",
    dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
         num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True,
         max_position_embeddings=32768, rms_norm_eps=1e-6,
         rope_parameters=dict(rope_type="default", rope_theta=1000000.0),
         bos_token_id=151643, eos_token_id=151643),
    True)

SEED = 20240601  # the prompts' and decode tokens' ids


def percentiles(samples):
    return gpu_bench.percentiles(samples) if samples else {}


# --------------------------------------------------------------------------------------------
# export
# --------------------------------------------------------------------------------------------

def _install_cache_wrapper(export_hf):
    """export_hf.py is pinned to transformers 4.46, whose models took the past as tuples of
    (key, value); transformers 5 wants a Cache object. Swap its PastWrapper for one that
    builds a DynamicCache from the flat past inputs and returns every layer's keys and values
    (tools/fixtures/export_today.py's _run_with_cache): the graph's inputs and outputs are
    export_hf's, unchanged."""
    import torch
    import export_today

    class CachePastWrapper(torch.nn.Module):
        def __init__(self, model, use_pos, n_layers):
            super().__init__()
            self.model, self.use_pos, self.n_layers = model, use_pos, n_layers

        def forward(self, input_ids, attention_mask, *rest):
            positions = None
            if self.use_pos:
                positions, rest = rest[0], rest[1:]
            assert len(rest) == 2 * self.n_layers
            return export_today._run_with_cache(self.model, input_ids, attention_mask,
                                                positions, rest)

    export_hf.PastWrapper = CachePastWrapper


def decode_weight_bytes(model):
    """The fp32 bytes a decode step reads, counted as dsbench counts its plan's: every
    parameter but the embedding tables (a step reads a row of them per token), plus the LM
    head, also when it shares the token embedding's matrix."""
    import torch
    embeddings = {id(m.weight) for m in model.modules() if isinstance(m, torch.nn.Embedding)}
    total = sum(p.numel() * 4 for p in model.parameters() if id(p) not in embeddings)
    head = model.get_output_embeddings()
    if head is not None and id(head.weight) in embeddings:
        total += head.weight.numel() * 4
    return total


def check_past_export(path, model, use_pos):
    """The with-past graph against PyTorch: a 5-token prompt with an empty past, then one step
    fed with its presents. Returns the largest difference of the logits."""
    import numpy as np
    import onnxruntime as ort
    import torch
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    inputs = {i.name: i for i in session.get_inputs()}
    outputs = [o.name for o in session.get_outputs()]
    ids = np.random.default_rng(1).integers(0, model.config.vocab_size, (1, 6), dtype=np.int64)
    feeds = {"input_ids": ids[:, :5], "attention_mask": np.ones((1, 5), np.int64)}
    if use_pos:
        feeds["position_ids"] = np.arange(5, dtype=np.int64)[None]
    for name, info in inputs.items():
        if name.startswith("past_key_values."):
            feeds[name] = np.zeros((1, info.shape[1], 0, info.shape[3]), np.float32)
    first = session.run(None, feeds)
    feeds = {"input_ids": ids[:, 5:], "attention_mask": np.ones((1, 6), np.int64)}
    if use_pos:
        feeds["position_ids"] = np.array([[5]], np.int64)
    for name, value in zip(outputs[1:], first[1:]):
        feeds[name.replace("present.", "past_key_values.")] = value
    second = session.run(None, feeds)
    with torch.inference_mode():
        reference = model(input_ids=torch.from_numpy(ids), use_cache=False).logits.numpy()
    return max(float(np.abs(first[0] - reference[:, :5]).max()),
               float(np.abs(second[0] - reference[:, 5:]).max()))


def export(args):
    import torch
    import export_hf  # tools/fixtures: the fixtures' wrappers and export call
    _install_cache_wrapper(export_hf)
    out = Path(args.dir)
    start = time.perf_counter()
    model = build_model(args.name)
    parameters = sum(p.numel() for p in model.parameters())
    use_pos = MODELS[args.name][3]
    meta = {"name": args.name, "parameters": parameters,
            "decode_weight_bytes_fp32": decode_weight_bytes(model),
            "build_seconds": time.perf_counter() - start}
    for kind in ("nocache", "past"):
        folder = out / kind
        folder.mkdir(parents=True, exist_ok=True)
        for stale in folder.iterdir():
            stale.unlink()  # external data files would be appended to
        start = time.perf_counter()
        variant = export_hf.Variant(args.name, args.name.split("-")[0], 17, kind)
        path, _, _ = export_hf.export_torchscript(variant, model, {"position_ids": use_pos},
                                                  folder)
        gpu_bench.gather_external_data(path)
        meta[kind] = {"onnx": str(path), "export_seconds": time.perf_counter() - start,
                      "bytes": sum(p.stat().st_size for p in folder.iterdir())}
        print(f"{args.name}: {kind} export {meta[kind]['bytes'] / 1e6:.0f} MB in "
              f"{meta[kind]['export_seconds']:.0f} s: {path}", flush=True)
    meta["past_check_max_abs"] = check_past_export(meta["past"]["onnx"], model, use_pos)
    print(f"{args.name}: with-past export against PyTorch, max abs diff of the logits "
          f"{meta['past_check_max_abs']:.2e}")
    (out / "model.json").write_text(json.dumps(meta, indent=2))
    print(f"{args.name}: {parameters / 1e6:.0f}M parameters")


def build_model(name):
    import torch
    import transformers
    transformers.logging.set_verbosity_error()
    return gpu_bench.build(name, torch.float32, "cpu")


# --------------------------------------------------------------------------------------------
# ONNX Runtime and PyTorch: the same loop as dsbench's (prefill of a B x P prompt of random
# ids, then N single-token steps, each timed alone, the first W iterations discarded)
# --------------------------------------------------------------------------------------------

def write_result(args, result, prefill_ms, decode_ms):
    step = statistics.fmean(decode_ms) if decode_ms else 0.0
    result.update(batch=args.batch, prompt_len=args.prompt_len, new_tokens=args.new_tokens,
                  warmup=args.warmup, iterations=args.iterations, threads=args.threads,
                  prefill_ms=percentiles(prefill_ms), decode_ms=percentiles(decode_ms),
                  tokens_per_second=args.batch / (step / 1e3) if step else 0.0)
    Path(args.json).write_text(json.dumps(result, indent=2))
    print(json.dumps({k: result[k] for k in ("load_ms", "prefill_ms", "decode_ms",
                                             "tokens_per_second")}, indent=1))


def ort_bench(args):
    import numpy as np
    import onnxruntime as ort
    path = Path(args.dir) / "past" / "model.onnx"
    options = ort.SessionOptions()
    options.intra_op_num_threads = args.threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    start = time.perf_counter()
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    load_ms = 1e3 * (time.perf_counter() - start)
    inputs = {i.name: i for i in session.get_inputs()}
    outputs = [o.name for o in session.get_outputs()]
    pasts = [n for n in inputs if n.startswith("past_key_values.")]
    present = {n: n.replace("past_key_values.", "present.") for n in pasts}
    vocab = session.get_outputs()[0].shape[-1]
    use_pos = "position_ids" in inputs
    b, p = args.batch, args.prompt_len
    rng = np.random.default_rng(SEED)

    def run(ids, total, position, past):
        """One run through I/O binding: the presents stay ORT's, and go back in as they are."""
        binding = session.io_binding()
        mask = np.ones((b, total), np.int64)
        binding.bind_cpu_input("input_ids", ids)
        binding.bind_cpu_input("attention_mask", mask)
        if use_pos:
            positions = np.broadcast_to(np.arange(position, position + ids.shape[1],
                                                  dtype=np.int64), ids.shape).copy()
            binding.bind_cpu_input("position_ids", positions)
        for name in pasts:
            if past is None:
                shape = inputs[name].shape
                binding.bind_cpu_input(name, np.zeros((b, shape[1], 0, shape[3]), np.float32))
            else:
                binding.bind_ortvalue_input(name, past[present[name]])
        for name in outputs:
            binding.bind_output(name, "cpu")
        start = time.perf_counter()
        session.run_with_iobinding(binding)
        elapsed = 1e3 * (time.perf_counter() - start)
        return elapsed, dict(zip(outputs, binding.get_outputs()))

    prefill_ms, decode_ms = [], []
    for iteration in range(args.warmup + args.iterations):
        keep = iteration >= args.warmup
        ids = rng.integers(0, vocab, (b, p), dtype=np.int64)
        elapsed, past = run(ids, p, 0, None)
        if keep:
            prefill_ms.append(elapsed)
        for step in range(args.new_tokens):
            token = rng.integers(0, vocab, (b, 1), dtype=np.int64)
            elapsed, past = run(token, p + step + 1, p + step, past)
            if keep:
                decode_ms.append(elapsed)
        del past
    result = {"runtime": "onnxruntime", "name": args.name, "onnx": str(path),
              "onnxruntime": ort.__version__, "load_ms": load_ms,
              "intra_op_num_threads": args.threads,
              "graph_optimization_level": "ORT_ENABLE_ALL", "io_binding": True}
    write_result(args, result, prefill_ms, decode_ms)


def torch_bench(args):
    import torch
    import transformers
    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    model = build_model(args.name)
    load_ms = 1e3 * (time.perf_counter() - start)
    vocab = model.config.vocab_size
    b, p = args.batch, args.prompt_len
    generator = torch.Generator().manual_seed(SEED)
    prefill_ms, decode_ms = [], []
    with torch.inference_mode():
        for iteration in range(args.warmup + args.iterations):
            keep = iteration >= args.warmup
            ids = torch.randint(0, vocab, (b, p), generator=generator)
            start = time.perf_counter()
            out = model(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=True)
            if keep:
                prefill_ms.append(1e3 * (time.perf_counter() - start))
            past = out.past_key_values
            for step in range(args.new_tokens):
                token = torch.randint(0, vocab, (b, 1), generator=generator)
                mask = torch.ones((b, p + step + 1), dtype=torch.long)
                start = time.perf_counter()
                out = model(input_ids=token, attention_mask=mask, past_key_values=past,
                            use_cache=True)
                if keep:
                    decode_ms.append(1e3 * (time.perf_counter() - start))
                past = out.past_key_values
            del out, past
    result = {"runtime": "torch eager", "name": args.name, "torch": torch.__version__,
              "transformers": transformers.__version__, "load_ms": load_ms,
              "torch_threads": torch.get_num_threads(),
              "attn_implementation": getattr(model.config, "_attn_implementation", None)}
    write_result(args, result, prefill_ms, decode_ms)


# --------------------------------------------------------------------------------------------
# report
# --------------------------------------------------------------------------------------------

load = gpu_bench.load  # a JSON file, or None


def read_text(path):
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def process_usage(stem):
    """run.sh's STEM.rss (/usr/bin/time -f "%M %e %U %S": peak RSS in KiB, elapsed, user and
    system seconds; a failed command's status line comes first) and STEM.cpu (/proc/stat's
    busy ticks of every CPU before and after, ticks per second): the peak RSS in bytes, and
    the cores the other processes kept busy meanwhile."""
    usage = {}
    text = read_text(f"{stem}.rss")
    try:
        fields = text.splitlines()[-1].split() if text else []
        if fields:
            usage["peak_rss_bytes"] = int(fields[0]) * 1024
        if len(fields) >= 4:
            elapsed, own = float(fields[1]), float(fields[2]) + float(fields[3])
            before, after, tick = map(float, read_text(f"{stem}.cpu").split())
            usage["elapsed_s"] = elapsed
            if elapsed > 0:
                usage["others_cores"] = max(0.0, ((after - before) / tick - own) / elapsed)
    except (ValueError, AttributeError):
        pass
    return usage


def machine():
    info = {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count()}
    try:
        lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        fields = dict(line.split(":", 1) for line in lscpu.splitlines() if ":" in line)
        fields = {k.strip(): v.strip() for k, v in fields.items()}
        info["cpu"] = fields.get("Model name", info["cpu"])
        info["cores"] = int(fields.get("Core(s) per socket", 0)) * \
            int(fields.get("Socket(s)", 0)) or info["cores"]
        info["threads"] = int(fields.get("CPU(s)", 0)) or os.cpu_count()
        flags = set(fields.get("Flags", "").split())
        info["avx2"] = "avx2" in flags
        info["avx512"] = sorted(f for f in flags if f.startswith("avx512"))
        info["l3"] = fields.get("L3 cache")
    except (OSError, ValueError):
        pass
    try:
        meminfo = Path("/proc/meminfo").read_text().split()
        info["memory_gib"] = int(meminfo[meminfo.index("MemTotal:") + 1]) / 2**20
    except (OSError, ValueError):
        pass
    return info


def git_revision():
    try:
        head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain",
                                "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip()
        return head + (" (with uncommitted changes)" if dirty else "")
    except OSError:
        return "?"


def mib(n):
    return n / 2**20


def median_round(base, rounds):
    """The round (BASE-rK, K = 1..ROUNDS) whose decode step is the median of those that
    finished, with its result, and the rounds' range of decode steps and of prefills."""
    finished = []
    for k in range(1, rounds + 1):
        result = load(f"{base}-r{k}.json")
        if result is not None:
            finished.append((result["decode_ms"]["avg"], k, result))
    if not finished:
        return f"{base}-r1", None, {}
    finished.sort(key=lambda entry: entry[0])
    _, k, result = finished[(len(finished) - 1) // 2]
    decode = [entry[0] for entry in finished]
    prefill = [entry[2]["prefill_ms"]["avg"] for entry in finished]
    return f"{base}-r{k}", result, {"rounds": len(finished),
                                    "decode_range_ms": [decode[0], decode[-1]],
                                    "prefill_range_ms": [min(prefill), max(prefill)]}


def report(args):
    work = Path(args.work)
    results = work / "results"
    models = [m for m in args.models.split(",") if m]
    dtypes = [d for d in args.dtypes.split(",") if d]
    batches = [int(b) for b in args.batches.split(",") if b]
    runtimes = [("dsbench", d) for d in dtypes]
    if args.ort:
        runtimes.append(("onnxruntime", "fp32"))
    if args.torch:
        runtimes.append(("torch eager", "fp32"))
    tags = {"dsbench": "dsbench", "onnxruntime": "ort", "torch eager": "torch"}

    rows = []
    for name in models:
        meta = load(work / name / "model.json") or {}
        export_error = read_text(work / name / "export.err")
        for batch in batches:
            group = []
            for runtime, dtype in runtimes:
                base = results / f"{name}-{tags[runtime]}-{dtype}-b{batch}"
                stem, result, spread = median_round(base, args.rounds)
                row = {"model": name, "dtype": dtype, "batch": batch, "runtime": runtime,
                       "parameters": meta.get("parameters"), **spread}
                row.update(process_usage(stem))
                command = read_text(f"{stem}.cmd")
                if command:
                    row["command"] = command
                if result is None:
                    compile_error = read_text(work / name / f"compile-{dtype}.err") \
                        if runtime == "dsbench" else None
                    row["error"] = (read_text(f"{stem}.err") or compile_error or
                                    (export_error if runtime != "torch eager" else None) or
                                    "no result")
                    group.append(row)
                    continue
                row.update(prefill_ms=result["prefill_ms"].get("avg"),
                           decode_ms=result["decode_ms"].get("avg"),
                           decode_p50_ms=result["decode_ms"].get("p50"),
                           tokens_per_second=result["tokens_per_second"],
                           load_ms=result.get("load_ms"))
                if runtime == "dsbench":
                    # dsbench's own count stops before its bandwidth probe's buffers, which
                    # /usr/bin/time's peak includes.
                    if result.get("peak_resident_bytes"):
                        row["peak_rss_bytes"] = result["peak_resident_bytes"]
                    memory = result["memory_per_rank"][0]
                    row.update(decode_weight_bytes=result["decode_weight_bytes"],
                               copy_bandwidth_bytes_per_s=result["copy_bandwidth_bytes_per_s"],
                               bandwidth_fraction=result["bandwidth_fraction"],
                               memory=memory,
                               plan_bytes=memory["weights"] + memory["arena"] +
                               memory["kv_cache"],
                               plan=result.get("plan"))
                    if row.get("peak_rss_bytes"):
                        row["rss_over_plan"] = row["peak_rss_bytes"] / row["plan_bytes"]
                else:
                    row.update({k: result[k] for k in ("onnxruntime", "torch", "transformers",
                                                       "attn_implementation") if k in result})
                group.append(row)
            # ORT and torch: the weight bytes of the fp32 plan's decode step (or, without an
            # fp32 dsbench result, the same count from the model), over dsbench's copy
            # bandwidth of this model and batch (the fp32 run's, else any dtype's).
            measured = [r for r in group if r["runtime"] == "dsbench" and "decode_ms" in r]
            fp32 = next((r for r in measured if r["dtype"] == "fp32"), None)
            weight_bytes = fp32["decode_weight_bytes"] if fp32 else \
                meta.get("decode_weight_bytes_fp32")
            copy_source = fp32 or (measured[0] if measured else None)
            for row in group:
                if row["runtime"] == "dsbench" or "decode_ms" not in row:
                    continue
                row["decode_weight_bytes"] = weight_bytes
                if copy_source and weight_bytes and row["decode_ms"]:
                    copy = copy_source["copy_bandwidth_bytes_per_s"]
                    row["copy_bandwidth_bytes_per_s"] = copy
                    row["bandwidth_fraction"] = weight_bytes / (row["decode_ms"] / 1e3) / copy
            rows.extend(group)
    # Without a dsbench result of their model and batch: the median of the run's dsbench
    # copy bandwidths.
    copies = sorted(r["copy_bandwidth_bytes_per_s"] for r in rows
                    if r["runtime"] == "dsbench" and r.get("copy_bandwidth_bytes_per_s"))
    for row in rows:
        if (row["runtime"] != "dsbench" and row.get("decode_ms") and copies and
                row.get("decode_weight_bytes") and "bandwidth_fraction" not in row):
            row["copy_bandwidth_bytes_per_s"] = copies[len(copies) // 2]
            row["bandwidth_fraction"] = (row["decode_weight_bytes"] / (row["decode_ms"] / 1e3)
                                         / row["copy_bandwidth_bytes_per_s"])

    def number(value, form):
        return form.format(value) if value is not None else "-"

    lines = ["| model | dtype | batch | runtime | prefill ms | decode step ms (avg) | "
             "decode range (rounds) | tokens/s | "
             "% of copy BW | peak RSS MiB | plan weights + arena + KV MiB | RSS / plan | "
             "others' CPU (cores) |",
             "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for row in rows:
        head = f"| {row['model']} | {row['dtype']} | {row['batch']} | {row['runtime']} |"
        rss = number(mib(row["peak_rss_bytes"]) if row.get("peak_rss_bytes") else None,
                     "{:.0f}")
        others = number(row.get("others_cores"), "{:.2f}")
        if "error" in row:
            error = " ".join(row["error"].split())[-160:].replace("|", "\\|")
            lines.append(f"{head} FAILED: {error} | - | - | - | - | {rss} | - | - | {others} |")
            continue
        fraction = row.get("bandwidth_fraction")
        spread = "-"
        if row.get("decode_range_ms"):
            low, high = row["decode_range_ms"]
            spread = f"{low:.2f}-{high:.2f} ({row['rounds']})"
        plan = "-"
        if row.get("memory"):
            m = row["memory"]
            plan = (f"{mib(m['weights']):.0f} + {mib(m['arena']):.0f} + "
                    f"{mib(m['kv_cache']):.0f} = {mib(row['plan_bytes']):.0f}")
        lines.append(f"{head} {number(row['prefill_ms'], '{:.1f}')} | "
                     f"{number(row['decode_ms'], '{:.2f}')} | "
                     f"{spread} | "
                     f"{number(row['tokens_per_second'], '{:.1f}')} | "
                     f"{number(100 * fraction if fraction else None, '{:.0f}%')} | {rss} | "
                     f"{plan} | {number(row.get('rss_over_plan'), '{:.2f}')} | {others} |")

    info = machine()
    copies = [r["copy_bandwidth_bytes_per_s"] for r in rows
              if r["runtime"] == "dsbench" and r.get("copy_bandwidth_bytes_per_s")]
    versions = {}
    for row in rows:
        for key in ("onnxruntime", "torch", "transformers"):
            if row.get(key):
                versions[key] = row[key]
    # What made the rows: the exports and plans, then every row's run.
    commands = [c for name in models for c in
                [read_text(work / name / "export.cmd")] +
                [read_text(work / name / f"compile-{d}.cmd") for d in dtypes] if c]
    commands += [r["command"] for r in rows if r.get("command")]
    avx512 = ", ".join(info.get("avx512", [])) or "no"
    header = {
        "machine": f"{info.get('cpu')}, {info.get('cores')} cores ({info.get('threads')} "
                   f"hardware threads), L3 {info.get('l3')}, "
                   f"{info.get('memory_gib', 0):.0f} GiB memory; "
                   f"avx2: {'yes' if info.get('avx2') else 'no'}; avx512: {avx512}",
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "threads": f"{args.threads} (dsbench: every hardware thread, {info.get('threads')}; "
                   f"onnxruntime: intra_op_num_threads={args.threads}, inter_op 1, "
                   f"sequential; torch: torch.set_num_threads({args.threads}))",
        "workload": f"prompt {args.prompt_len} tokens (prefill from an empty KV cache), "
                    f"then {args.new_tokens} new tokens (single-token decode steps, each timed "
                    f"alone); warmup {args.warmup}, iterations {args.iterations}; random ids, "
                    f"random seeded weights (the same in every runtime)",
        "copy bandwidth": ("dsbench's, read + write, "
                           f"{min(copies) / 1e9:.1f} to {max(copies) / 1e9:.1f} GB/s over its "
                           "runs" if copies else "-"),
        "versions": ", ".join([f"dsc/libdsrt {git_revision()}"] +
                              [f"{k} {v}" for k, v in versions.items()]),
        "command": args.invocation or "-",
    }
    notes = [
        "dtype: the plan's weight storage (`dsc compile --dtype`; int8 is weight-only); "
        "onnxruntime and torch run the fp32 weights.",
        "prefill ms: one forward over the batch x prompt tokens with an empty cache "
        "(onnxruntime and torch compute the logits of every prompt position); decode step ms: "
        "the average single-token step; tokens/s: batch / decode step.",
        "% of copy BW: the bytes of weights one decode step reads (dsbench: the plan's "
        "decode_weight_bytes; onnxruntime and torch: the fp32 plan's) / decode step / the copy "
        "bandwidth dsbench measured (onnxruntime and torch rows: the fp32 dsbench run of the "
        "same model and batch, else the median of the dsbench runs). The copy bandwidth counts the bytes read and written, so a "
        "step that only reads its weights can go above 100%.",
        "peak RSS: dsbench's peak_resident_bytes (the process's VmHWM after its runs, before "
        "its bandwidth probe allocates 2 x 256 MiB); onnxruntime and torch: /usr/bin/time -f "
        "%M of the whole process (torch's includes building the model and importing torch; "
        "onnxruntime's includes loading and optimizing the graph); plan: memory_per_rank's "
        "weights + arena + kv_cache; RSS / plan: peak RSS over that.",
        "rounds: dsbench and onnxruntime take turns (run.sh --rounds), as the machine's memory "
        "bandwidth drifts within minutes; each row is the round with the median decode step, "
        "and the decode range is over all its rounds.",
        "others' CPU: the cores the machine's other processes kept busy during the run "
        "(/proc/stat's busy time less the process's own user + system time, over its "
        "elapsed time); well above 0 means the row was measured on a shared machine and is "
        "slower than it should be.",
    ]
    attention = sorted({r["attn_implementation"] for r in rows if r.get("attn_implementation")})
    if attention:
        notes.append("torch eager: transformers' default attention implementation ("
                     + ", ".join(attention) + "), its DynamicCache, torch.inference_mode().")
    exports = [f"{name}: with-past export vs PyTorch, max abs diff of the logits "
               f"{meta['past_check_max_abs']:.1e}"
               for name in models if (meta := load(work / name / "model.json")) and
               "past_check_max_abs" in meta]
    text = "\n".join(
        ["# CPU decode: dsbench vs ONNX Runtime vs PyTorch eager", ""] +
        [f"- {key}: {value}" for key, value in header.items()] + ["", *lines, ""] +
        [f"- {note}" for note in notes + exports] + ["", "Commands run:", "", "```"] +
        commands + ["```"]) + "\n"
    print(text)
    out = Path(args.out or work)
    out.mkdir(parents=True, exist_ok=True)
    (out / "cpu-bench.md").write_text(text)
    (out / "cpu-bench.json").write_text(json.dumps(
        {"header": header, "machine": info, "prompt_len": args.prompt_len,
         "new_tokens": args.new_tokens, "warmup": args.warmup, "iterations": args.iterations,
         "threads": args.threads, "commands": commands, "rows": rows}, indent=2))
    print(f"written: {out / 'cpu-bench.md'}, {out / 'cpu-bench.json'}")


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    p = commands.add_parser("export")
    p.add_argument("name", choices=sorted(MODELS))
    p.add_argument("dir")
    p.set_defaults(run=export)

    def timing(p):
        p.add_argument("--batch", type=int, default=1)
        p.add_argument("--prompt-len", type=int, default=32)
        p.add_argument("--new-tokens", type=int, default=32)
        p.add_argument("--iterations", type=int, default=3)
        p.add_argument("--warmup", type=int, default=1)
        p.add_argument("--threads", type=int, default=os.cpu_count())
    p = commands.add_parser("ort")
    p.add_argument("name", choices=sorted(MODELS))
    p.add_argument("dir")
    p.add_argument("json")
    timing(p)
    p.set_defaults(run=ort_bench)
    p = commands.add_parser("torch")
    p.add_argument("name", choices=sorted(MODELS))
    p.add_argument("json")
    timing(p)
    p.set_defaults(run=torch_bench)
    p = commands.add_parser("report")
    p.add_argument("work")
    p.add_argument("--models", required=True)
    p.add_argument("--dtypes", required=True)
    p.add_argument("--batches", required=True)
    p.add_argument("--out")
    p.add_argument("--no-ort", dest="ort", action="store_false")
    p.add_argument("--no-torch", dest="torch", action="store_false")
    p.add_argument("--invocation")
    p.add_argument("--rounds", type=int, default=1)
    timing(p)
    p.set_defaults(run=report)
    args = parser.parse_args()
    sys.exit(args.run(args) or 0)


if __name__ == "__main__":
    main()
