#!/usr/bin/env python3
"""llama.cpp as a peer of dsc on the CPU (issues 43 and 47): the same weights in both, one
run, the two systems interleaved (A B A B ...), every round kept.

  llamacpp.py prepare NAME WORK [--ggufs F32,BF16,Q8_0,Q4_0]
                                [--plans fp32,bf16,int8,int4,serve-fp32]
                                           the models, once (WORK/NAME/...)
  llamacpp.py run NAME WORK OUT [--lengths 512,2048,8192] [--rounds 2] [--dtypes fp32,bf16]
                                [--quant-rounds 3] [--skip-long] [--skip-quant]
                                [--llama-args '--poll 0'] [--ort]
                                [--first-round 1]
                                           the measurements, into the folder OUT

The command of the committed run (bench/cpu/RESULTS.md), from the repository root:

  export LLAMA_CPP=/work/llamacpp/llama_cpp_python-0.3.36/vendor/llama.cpp
  export DSC_BIN_DIR=/work/wt-bench/build/bin
  /work/today-venv/bin/python bench/cpu/llamacpp.py prepare llama-244m /tmp/llamacpp-bench
  /work/today-venv/bin/python bench/cpu/llamacpp.py run llama-244m /tmp/llamacpp-bench \\
      bench/cpu/llamacpp-2026-12-02

prepare:
1. Builds the HF model NAME (bench.py's MODELS: random seeded weights, nothing downloaded)
   and saves it (save_pretrained, fp32 safetensors) in WORK/NAME/hf, with a tokenizer made
   here (write_tokenizer: a byte-level BPE of exactly the model's vocabulary size; the
   weights never see text, every benchmark feeds token ids). Checks that a second build
   gives the same weights, so that the ONNX export below (bench.py export, which builds the
   model again) holds the same weights as the saved folder.
2. Converts WORK/NAME/hf with llama.cpp's convert_hf_to_gguf.py to F32 and BF16 GGUF, and
   quantizes the F32 one with llama-quantize to Q8_0 and Q4_0 (WORK/NAME/gguf/). The
   converter refuses a BPE tokenizer whose pre-tokenizer it does not know by hash; ours is
   GPT-2's (byte-level), so the conversion runs with get_vocab_base_pre answering "gpt-2"
   for our tokenizer's hash (convert_child below; nothing of llama.cpp is edited).
3. Exports WORK/NAME/nocache/model.onnx (bench.py export) and compiles the dsc plans
   (WORK/NAME/plans/): fp32 and bf16 (`--max-batch 1 --max-seq-len 8232 --arch none`),
   int8 and int4 (`--max-seq-len 64`), and the serving plan (fp32, `--serving --max-batch
   64 --max-seq-len 1024`, for bench/serving/llamacpp_server.py).

run (batch 1, 2 threads, each measurement a process of its own under /usr/bin/time -v):
* long prompts, per length N, dtype (fp32: dsc fp32 plan against F32 GGUF; bf16: dsc bf16
  plan against BF16 GGUF) and round: dsc `dsbench PLAN --device cpu --batch 1 --prompt-len
  N --new-tokens 32 --warmup W --iterations I --json` (prefill, then the average of the 32
  decode steps after it); llama.cpp `llama-bench -m GGUF -p N -n 0 -t 2 -r I -o json`
  (prefill; --no-warmup where W is 0) and `llama-bench -m GGUF -p 0 -n 32 -d N -t 2 -r I
  -o json` (32 decode steps after an N-token context, the context filled untimed). W, I:
  1, 3 below 2048 tokens; 1, 2 at 2048; 0, 1 above. Odd rounds run dsc first, even rounds
  llama.cpp first. Peak RSS: dsbench's own (VmHWM before its bandwidth probe) and the
  llama-bench prefill process's maximum resident set (/usr/bin/time -v).
* quantized, prompt 32 and 32 decode steps: dsc int4 against Q4_0 and dsc int8 against
  Q8_0 (dsbench --warmup 1 --iterations 3; llama-bench -p 32 -n 32 -r 3, which times the
  prompt and the 32 steps as separate tests).
* --ort: ONNX Runtime as a third system on the fp32 long prompts, after the other two in
  every round (bench.py ort on WORK/NAME/past: the same weights, KV cache in and out, I/O
  binding, ORT_ENABLE_ALL, 2 threads; its peak RSS from /usr/bin/time -v). A length where
  it fails (memory: its attention holds the [heads, N, N] scores) is logged and skipped.
The 1-minute load average is recorded as each run starts. OUT gets runs.jsonl (one object
per run, with the raw JSON of the tool), runs.log (every command, its start and load) and
summary.md (the tables). Nothing asserts on time.

Environment: LLAMA_CPP (the llama.cpp source folder with build/bin), DSC_BIN_DIR (dsc,
dsbench; default build/bin). Python needs torch, transformers, onnx, tokenizers (and the
converter: sentencepiece importable, e.g. PYTHONPATH=/work/llamacpp/pydeps; LLAMACPP_PYDEPS
adds a folder to the converter's path).
"""
import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BIN = Path(os.environ.get("DSC_BIN_DIR", REPO / "build/bin"))
LLAMA = Path(os.environ.get("LLAMA_CPP", "/work/llamacpp/llama_cpp_python-0.3.36/vendor/llama.cpp"))
LLAMA_BIN = LLAMA / "build/bin"
PYDEPS = os.environ.get("LLAMACPP_PYDEPS", "/work/llamacpp/pydeps")
THREADS = 2
LONG_SEQ = 8232  # 8192 + 32 decode steps, rounded up


# --------------------------------------------------------------------------------------------
# prepare
# --------------------------------------------------------------------------------------------

def bytes_to_unicode():
    """GPT-2's byte -> printable character map (byte-level BPE's alphabet)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs)))


def write_tokenizer(folder: Path, vocab_size: int):
    """A byte-level BPE (GPT-2's pre-tokenizer and decoder) of exactly vocab_size tokens: the
    256 byte symbols, then merges built breadth-first over printable ASCII (and GPT-2's
    space symbol): all pairs, then triples, until the vocabulary is full; the last id is
    <|endoftext|>. Every merge's parts are in the vocabulary, so the tokenizer is valid; it
    was never trained (the models are random, and the benchmarks feed token ids). Merged
    pieces are ASCII, so decoded outputs are rarely incomplete UTF-8 (a server holds those
    back)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, AddedToken
    byte_symbols = list(bytes_to_unicode().values())
    vocab = {s: i for i, s in enumerate(byte_symbols)}
    merges = []
    alphabet = [bytes_to_unicode()[b] for b in range(32, 127)]  # 'Ġ' is the space
    want = vocab_size - 1
    level = alphabet
    while len(vocab) < want:
        grown = []
        for left in level:
            for right in alphabet:
                piece = left + right
                if piece in vocab:
                    continue
                vocab[piece] = len(vocab)
                merges.append((left, right))
                grown.append(piece)
                if len(vocab) == want:
                    break
            if len(vocab) == want:
                break
        level = grown
    vocab["<|endoftext|>"] = len(vocab)
    assert len(vocab) == vocab_size
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens([AddedToken("<|endoftext|>", special=True)])
    tokenizer.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<|endoftext|>",
        "eos_token": "<|endoftext|>", "model_max_length": 1 << 20}, indent=1))
    return tokenizer


def weights_digest(model):
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().contiguous().numpy().tobytes())
    return digest.hexdigest()


def convert_child(hf, out, outtype):
    """Runs llama.cpp's convert_hf_to_gguf.py in this process, with our tokenizer's
    pre-tokenizer (byte-level, GPT-2's regex) named "gpt-2" where the converter does not
    know its hash. Called as a subprocess: `llamacpp.py --convert HF OUT TYPE`."""
    sys.path[:0] = [str(LLAMA), str(LLAMA / "gguf-py"), PYDEPS]
    import conversion.base as base
    original = base.TextModel.get_vocab_base_pre

    def get_vocab_base_pre(self, tokenizer):
        try:
            return original(self, tokenizer)
        except NotImplementedError:
            return "gpt-2"

    base.TextModel.get_vocab_base_pre = get_vocab_base_pre
    import runpy
    sys.argv = ["convert_hf_to_gguf.py", str(hf), "--outfile", str(out), "--outtype", outtype]
    runpy.run_path(str(LLAMA / "convert_hf_to_gguf.py"), run_name="__main__")


def prepare(args):
    sys.path.insert(0, str(REPO / "bench/cpu"))
    import bench  # noqa: E402
    folder = Path(args.work) / args.name
    hf = folder / "hf"
    meta_path = folder / "prepare.json"
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
    if not (hf / "model.safetensors").exists() and not list(hf.glob("model*.safetensors")):
        model = bench.build_model(args.name)
        model.save_pretrained(hf)
        meta["weights_sha256"] = weights_digest(model)
        meta["parameters"] = sum(p.numel() for p in model.parameters())
        del model
        again = weights_digest(bench.build_model(args.name))
        assert again == meta["weights_sha256"], "build_model is not deterministic"
        meta["rebuild_same_weights"] = True
        print(f"{args.name}: HF model saved ({meta['parameters'] / 1e6:.0f}M parameters), "
              f"a second build has the same weights", flush=True)
    config = json.loads((hf / "config.json").read_text())
    vocab = config["vocab_size"]
    if not (hf / "tokenizer.json").exists():
        write_tokenizer(hf, vocab)
        print(f"{args.name}: tokenizer of {vocab} tokens", flush=True)
    gguf = folder / "gguf"
    gguf.mkdir(exist_ok=True)
    wanted = args.ggufs.split(",")
    for outtype in ("f32", "bf16"):
        out = gguf / f"{args.name}-{outtype.upper()}.gguf"
        if outtype == "bf16" and "BF16" not in wanted:
            continue
        if not out.exists():
            start = time.perf_counter()
            subprocess.run(["nice", "-n", "5", sys.executable, __file__, "--convert", str(hf),
                            str(out), outtype], check=True)
            meta[f"convert_{outtype}_s"] = time.perf_counter() - start
    for quant in ("Q8_0", "Q4_0"):
        out = gguf / f"{args.name}-{quant}.gguf"
        if quant in wanted and not out.exists():
            subprocess.run(["nice", "-n", "5", str(LLAMA_BIN / "llama-quantize"),
                            str(gguf / f"{args.name}-F32.gguf"), str(out), quant, str(THREADS)],
                           check=True, capture_output=True)
    onnx = folder / "nocache/model.onnx"
    if not onnx.exists():
        subprocess.run(["nice", "-n", "5", sys.executable, str(REPO / "bench/cpu/bench.py"),
                        "export", args.name, str(folder)], check=True)
    plans = folder / "plans"
    plans.mkdir(exist_ok=True)
    compiles = {
        "fp32": ["--dtype", "fp32", "--max-batch", "1", "--max-seq-len", str(LONG_SEQ)],
        "bf16": ["--dtype", "bf16", "--max-batch", "1", "--max-seq-len", str(LONG_SEQ)],
        "int8": ["--dtype", "int8", "--max-batch", "1", "--max-seq-len", "64"],
        "int4": ["--dtype", "int4", "--max-batch", "1", "--max-seq-len", "64"],
        "serve-fp32": ["--dtype", "fp32", "--serving", "--max-batch", "64", "--max-seq-len",
                       "1024"],
    }
    for kind, options in compiles.items():
        if kind not in args.plans.split(","):
            continue
        plan = plans / f"{args.name}-{kind}.dsp"
        if plan.exists() and plan.stat().st_mtime > (BIN / "dsc").stat().st_mtime:
            continue
        command = [str(BIN / "dsc"), "compile", str(onnx), "-o", str(plan), "--arch",
                   "none"] + options
        start = time.perf_counter()
        subprocess.run(["nice", "-n", "5"] + command, check=True, capture_output=True)
        meta.setdefault("compiles", {})[kind] = {"command": " ".join(command),
                                                 "seconds": time.perf_counter() - start}
        print(f"{args.name}: plan {kind} in {time.perf_counter() - start:.0f} s", flush=True)
    meta["files"] = {p.name: p.stat().st_size for p in sorted(gguf.iterdir())}
    meta["files"].update({p.name: p.stat().st_size for p in sorted(plans.iterdir())})
    meta_path.write_text(json.dumps(meta, indent=1))
    print(json.dumps(meta["files"], indent=1))


# --------------------------------------------------------------------------------------------
# run
# --------------------------------------------------------------------------------------------

def load():
    return float(open("/proc/loadavg").read().split()[0])


def timed(command, log):
    """Runs command under /usr/bin/time -v: (stdout, stderr, max RSS MiB, load at start)."""
    start_load = load()
    stamp = datetime.now(timezone.utc).strftime("%H:%M:%S")
    log.write(f"{stamp} load {start_load:.2f}: {' '.join(command)}\n")
    log.flush()
    result = subprocess.run(["/usr/bin/time", "-v"] + command, capture_output=True, text=True)
    if result.returncode != 0:
        log.write(result.stdout[-2000:] + result.stderr[-4000:])
        raise SystemExit(f"failed: {' '.join(command)}\n{result.stderr[-3000:]}")
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", result.stderr)
    return result.stdout, result.stderr, int(rss.group(1)) / 1024 if rss else None, start_load, stamp


def warmup_iterations(n):
    if n < 2048:
        return 1, 3
    if n == 2048:
        return 1, 2
    return 0, 1


def run_dsc(plan, n, new_tokens, warmup, iterations, log):
    out, _, rss, start_load, stamp = timed(
        [str(BIN / "dsbench"), str(plan), "--device", "cpu", "--batch", "1", "--prompt-len",
         str(n), "--new-tokens", str(new_tokens), "--warmup", str(warmup), "--iterations",
         str(iterations), "--json"], log)
    d = json.loads(out)
    avg = lambda v: v["avg"] if isinstance(v, dict) else v  # noqa: E731
    return {"system": "dsc", "prefill_ms": avg(d["prefill_ms"]), "decode_ms": avg(d["decode_ms"]),
            "rss_mib": d["peak_resident_bytes"] / 2**20, "time_rss_mib": rss,
            "load": start_load, "start": stamp, "raw": d}


def run_ort(name, folder, n, new_tokens, warmup, iterations, log):
    """ONNX Runtime on the same export with a KV cache (bench.py ort: WORK/NAME/past, I/O
    binding, ORT_ENABLE_ALL, 2 threads): an N-token prompt, then 32 decode steps. None where
    it does not run (at 8192 tokens its attention holds [heads, N, N] scores)."""
    json_path = Path(log.name).parent / f"ort-{n}.json"
    command = [sys.executable, str(REPO / "bench" / "cpu" / "bench.py"), "ort", name,
               str(folder), str(json_path), "--prompt-len", str(n), "--new-tokens",
               str(new_tokens), "--warmup", str(warmup), "--iterations", str(iterations),
               "--threads", str(THREADS)]
    try:
        _, _, rss, start_load, stamp = timed(command, log)
    except SystemExit as failure:
        log.write(f"onnxruntime did not run at {n} tokens: {str(failure)[-500:]}\n")
        return None
    d = json.loads(json_path.read_text())
    json_path.unlink()
    return {"system": "onnxruntime", "prefill_ms": d["prefill_ms"]["avg"],
            "decode_ms": d["decode_ms"]["avg"], "rss_mib": rss, "load": start_load,
            "start": stamp, "raw": {"prefill_ms": d["prefill_ms"], "decode_ms": d["decode_ms"],
                                    "onnxruntime": d.get("onnxruntime")}}


LLAMA_EXTRA = []  # run --llama-args


def run_llama(gguf, n_prompt, n_gen, depth, reps, warmup, log):
    command = [str(LLAMA_BIN / "llama-bench"), "-m", str(gguf), "-p", str(n_prompt), "-n",
               str(n_gen), "-t", str(THREADS), "-r", str(reps), "-o", "json"] + LLAMA_EXTRA
    if depth:
        command += ["-d", str(depth)]
    if not warmup:
        command.append("--no-warmup")
    out, _, rss, start_load, stamp = timed(command, log)
    tests = json.loads(out)
    result = {"system": "llama.cpp", "rss_mib": rss, "load": start_load, "start": stamp,
              "raw": tests}
    for t in tests:
        samples = [s / 1e6 for s in t["samples_ns"]]
        if t["n_prompt"] > 0:
            result["prefill_ms"] = sum(samples) / len(samples)
            result["prefill_samples_ms"] = samples
        else:
            per_token = [s / t["n_gen"] for s in samples]
            result["decode_ms"] = sum(per_token) / len(per_token)
            result["decode_samples_ms"] = per_token
    return result


def run(args):
    LLAMA_EXTRA[:] = args.llama_args.split()
    folder = Path(args.work) / args.name
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    records = (out / "runs.jsonl").open("a")
    log = (out / "runs.log").open("a")
    log.write(f"# {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC: {' '.join(sys.argv)}\n")

    def keep(record):
        record.update(model=args.name)
        records.write(json.dumps(record) + "\n")
        records.flush()
        print(f"{record['start']} load {record['load']:.2f} {record['kind']:>5} "
              f"{record.get('n', ''):>5} r{record['round']} {record['system']:>9}: prefill "
              f"{record.get('prefill_ms', float('nan')):9.1f} ms, decode "
              f"{record.get('decode_ms', float('nan')):7.2f} ms, RSS "
              f"{record['rss_mib'] or 0:6.0f} MiB", flush=True)

    plans = folder / "plans"
    gguf = folder / "gguf"
    ggufs = {"fp32": "F32", "bf16": "BF16", "int8": "Q8_0", "int4": "Q4_0"}
    lengths = [int(x) for x in args.lengths.split(",")] if not args.skip_long else []
    for n in lengths:
        warmup, iterations = warmup_iterations(n)
        for dtype in args.dtypes.split(","):
            plan = plans / f"{args.name}-{dtype}.dsp"
            model = gguf / f"{args.name}-{ggufs[dtype]}.gguf"
            for round_ in range(args.first_round, args.first_round + args.rounds):
                def dsc():
                    r = run_dsc(plan, n, 32, warmup, iterations, log)
                    keep({"kind": dtype, "n": n, "round": round_, **r})

                def llama():
                    p = run_llama(model, n, 0, 0, iterations, warmup, log)
                    keep({"kind": dtype, "n": n, "round": round_, "test": "prefill", **p})
                    d = run_llama(model, 0, 32, n, iterations, True, log)
                    keep({"kind": dtype, "n": n, "round": round_, "test": "decode", **d})

                def ort():
                    r = run_ort(args.name, folder, n, 32, warmup, iterations, log)
                    if r:
                        keep({"kind": dtype, "n": n, "round": round_, **r})

                order = [dsc, llama] if round_ % 2 else [llama, dsc]
                if args.ort and dtype == "fp32":
                    order.append(ort)
                for step in order:
                    step()
    if not args.skip_quant:
        for round_ in range(args.first_round, args.first_round + args.quant_rounds):
            for dtype in ("int4", "int8"):
                plan = plans / f"{args.name}-{dtype}.dsp"
                model = gguf / f"{args.name}-{ggufs[dtype]}.gguf"

                def dsc():
                    keep({"kind": dtype, "n": 32, "round": round_,
                          **run_dsc(plan, 32, 32, 1, 3, log)})

                def llama():
                    keep({"kind": dtype, "n": 32, "round": round_,
                          **run_llama(model, 32, 32, 0, 3, True, log)})

                for step in ((dsc, llama) if round_ % 2 else (llama, dsc)):
                    step()
    records.close()
    summarize(out)


def medians(r):
    """(prefill, decode) medians of one run's samples: dsbench's p50 over its iterations'
    prefills and its decode steps; llama-bench's median over its repetitions (a decode
    repetition's per-token time)."""
    import statistics
    if r["system"] in ("dsc", "onnxruntime"):
        p, d = r["raw"]["prefill_ms"], r["raw"]["decode_ms"]
        return (p.get("p50") if isinstance(p, dict) else p, d.get("p50") if isinstance(d, dict) else d)
    pm = statistics.median(r["prefill_samples_ms"]) if r.get("prefill_samples_ms") else None
    dm = statistics.median(r["decode_samples_ms"]) if r.get("decode_samples_ms") else None
    return pm, dm


def summarize(out: Path):
    rows = [json.loads(line) for line in (out / "runs.jsonl").read_text().splitlines() if line]
    lines = ["Each run: the mean of its iterations (dsbench) or repetitions (llama-bench), and in "
             "brackets their median; llama.cpp's prefill and decode are two processes "
             "(llama-bench -p N -n 0, and -p 0 -n 32 -d N).", ""]
    fmt = lambda v, d=0: "-" if v is None else f"{v:.{d}f}"  # noqa: E731
    long_rows = [r for r in rows if r["kind"] in ("fp32", "bf16")]
    if long_rows:
        lines += ["| prompt | dtype | round | system | start | load | prefill ms [median] | "
                  "decode step ms [median] | peak RSS MiB |",
                  "|---:|---|---:|---|---|---:|---:|---:|---:|"]
        for r in long_rows:
            system = r["system"] + (f" ({r['test']})" if r.get("test") else "")
            pm, dm = medians(r)
            pre = "-" if r.get("prefill_ms") is None else f"{r['prefill_ms']:.0f} [{pm:.0f}]"
            dec = "-" if r.get("decode_ms") is None else f"{r['decode_ms']:.2f} [{dm:.2f}]"
            lines.append(f"| {r['n']} | {r['kind']} | {r['round']} | {system} | {r['start']} | "
                         f"{r['load']:.2f} | {pre} | {dec} | {fmt(r['rss_mib'])} |")
        lines.append("")
    quant = [r for r in rows if r["kind"] in ("int4", "int8")]
    if quant:
        lines += ["| dtype | round | system | start | load | prefill 32 ms [median] | "
                  "decode step ms [median] | peak RSS MiB |", "|---|---:|---|---|---:|---:|---:|---:|"]
        for r in quant:
            label = {"int4": {"dsc": "dsc int4", "llama.cpp": "llama.cpp Q4_0"},
                     "int8": {"dsc": "dsc int8", "llama.cpp": "llama.cpp Q8_0"}}[r["kind"]]
            pm, dm = medians(r)
            lines.append(f"| {r['kind']} | {r['round']} | {label[r['system']]} | {r['start']} | "
                         f"{r['load']:.2f} | {r['prefill_ms']:.1f} [{pm:.1f}] | "
                         f"{r['decode_ms']:.2f} [{dm:.2f}] | {fmt(r['rss_mib'])} |")
        lines.append("")
    # Ranges over the rounds, per (dtype, prompt, system): of the runs' means and medians.
    groups = {}
    for r in rows:
        key = (r["kind"], r["n"], r["system"])
        g = groups.setdefault(key, {k: [] for k in ("prefill", "decode", "prefill_med",
                                                    "decode_med", "rss", "load")})
        pm, dm = medians(r)
        if r.get("prefill_ms") is not None:
            g["prefill"].append(r["prefill_ms"])
            g["prefill_med"].append(pm)
        if r.get("decode_ms") is not None:
            g["decode"].append(r["decode_ms"])
            g["decode_med"].append(dm)
        if r.get("rss_mib") and (r["system"] == "dsc" or r.get("test") != "decode"):
            g["rss"].append(r["rss_mib"])
        g["load"].append(r["load"])
    rng = lambda v, d=0: "-" if not v else (  # noqa: E731
        f"{min(v):.{d}f}" if len(v) == 1 or f"{min(v):.{d}f}" == f"{max(v):.{d}f}"
        else f"{min(v):.{d}f}-{max(v):.{d}f}")
    lines += ["| dtype | prompt | system | prefill ms: means | medians | decode step ms: means | "
              "medians | peak RSS MiB | load | rounds |",
              "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for (kind, n, system), g in groups.items():
        rounds = len(g["prefill"]) or len(g["decode"])
        lines.append(f"| {kind} | {n} | {system} | {rng(g['prefill'])} | {rng(g['prefill_med'])} | "
                     f"{rng(g['decode'], 2)} | {rng(g['decode_med'], 2)} | {rng(g['rss'])} | "
                     f"{rng(g['load'], 2)} | {rounds} |")
    (out / "summary.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def main():
    if len(sys.argv) == 5 and sys.argv[1] == "--convert":
        return convert_child(*sys.argv[2:])
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("name")
    p.add_argument("work")
    p.add_argument("--ggufs", default="F32,BF16,Q8_0,Q4_0")
    p.add_argument("--plans", default="fp32,bf16,int8,int4,serve-fp32")
    r = sub.add_parser("run")
    r.add_argument("name")
    r.add_argument("work")
    r.add_argument("out")
    r.add_argument("--lengths", default="512,2048,8192")
    r.add_argument("--dtypes", default="fp32,bf16")
    r.add_argument("--rounds", type=int, default=2)
    r.add_argument("--quant-rounds", type=int, default=3)
    r.add_argument("--first-round", type=int, default=1,
                   help="number the rounds from here (a second run into the same OUT)")
    r.add_argument("--llama-args", default="",
                   help="more llama-bench options, e.g. '--poll 0' (one string)")
    r.add_argument("--skip-long", action="store_true")
    r.add_argument("--ort", action="store_true",
                   help="ONNX Runtime too, on fp32 long prompts (bench.py ort, after both)")
    r.add_argument("--skip-quant", action="store_true")
    s = sub.add_parser("summary")
    s.add_argument("out")
    args = parser.parse_args()
    if args.command == "prepare":
        prepare(args)
    elif args.command == "run":
        run(args)
    else:
        summarize(Path(args.out))


if __name__ == "__main__":
    main()
