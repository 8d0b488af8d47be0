#!/usr/bin/env python3
"""Smoke test of dsbench on a compiled fixture (CPU): the JSON report has every field, the
values are sane (positive, percentiles ordered, the bandwidth fraction in (0, inf)), the
counters are there (zeros on the CPU; on a GPU no fallback step, and with one rank decode
graphs captured and replayed), the table prints, --strict --stats runs and prints them, and a run past the plan's sequence limit fails with a message. Time values
are never compared with any bound beyond positivity: the machine's load varies.

usage: check_dsbench.py DSBENCH PLAN [DSBENCH OPTIONS...]
  PLAN compiled with --max-batch 2 --max-seq-len 16. The options (--device cuda, --ranks
  inprocess) are passed on; with --device cuda the session must be on a GPU, not the CPU
  fallback (test/gpu/dsbench.test).
"""
import json
import math
import os
import re
import subprocess
import sys

dsbench, plan, extra = sys.argv[1], sys.argv[2], sys.argv[3:]
cuda = "cuda" in extra
in_process = "inprocess" in extra
failures = []


def expect(condition, what):
    if not condition:
        failures.append(what)


def positive(value):
    return isinstance(value, (int, float)) and math.isfinite(value) and value > 0


batch, prompt, new, warmup, iterations = 2, 4, 5, 1, 3
command = [dsbench, plan, "--batch", str(batch), "--prompt-len", str(prompt), "--new-tokens",
           str(new), "--warmup", str(warmup), "--iterations", str(iterations),
           "--copy-bytes", str(16 << 20)] + extra + ["--json"]
result = subprocess.run(command, capture_output=True, text=True)
if result.returncode != 0:
    sys.exit(f"FAIL: {' '.join(command)} exited {result.returncode}\n{result.stderr}")
report = json.loads(result.stdout)

if cuda:
    expect(report["device"] == "cuda" and report["device_name"].startswith("cuda:"),
           f"runs on a GPU, not the CPU fallback: {report['device_name']}")
else:
    expect(report["device"] == "cpu" and report["device_name"] == "cpu", "device is the CPU")
# The CPU kernels chosen at run time, after the features they were chosen on; with
# DSRT_CPU_ISA=avx2 (set by some runs) the kernels say so.
kernels = report["cpu_kernels"]
expect(kernels.startswith("cpu") and "; kernels: " in kernels, f"cpu_kernels = {kernels!r}")
cap = os.environ.get("DSRT_CPU_ISA")
if cap in ("avx2", "scalar"):
    expect(kernels.endswith(cap), f"kernels capped to {cap}: {kernels!r}")
expect(report["ranks"] == 2 if in_process else report["ranks"] == 1,
       f"rank count {report['ranks']} (the in-process tests use TP=2 plans)")
expect([report[k] for k in ("batch", "prompt_len", "new_tokens", "warmup", "iterations")] ==
       [batch, prompt, new, warmup, iterations], "the options are echoed")
for key in ("load_ms", "tokens_per_second", "weight_bytes_per_rank",
            "weight_bandwidth_bytes_per_s", "copy_bandwidth_bytes_per_s", "bandwidth_fraction"):
    expect(positive(report[key]), f"{key} = {report[key]} is positive")
expect(positive(report["prefill_ms"]["avg"]) and positive(report["prefill_ms"]["p50"]),
       "prefill times are positive")
decode = report["decode_ms"]
expect(decode["samples"] == new * iterations, f"{new * iterations} decode steps were timed")
percentiles = [decode[k] for k in ("p50", "p90", "p95", "p99", "p999")]
expect(all(positive(p) for p in percentiles) and positive(decode["avg"]),
       "decode times are positive")
expect(percentiles == sorted(percentiles), f"decode percentiles are ordered: {percentiles}")
# tokens/s and the bandwidth follow from the average step; recompute them independently.
step_seconds = decode["avg"] / 1e3
expect(abs(report["tokens_per_second"] - batch / step_seconds) <= 1e-6 * batch / step_seconds,
       "tokens/s = batch / average step")
expect(abs(report["weight_bandwidth_bytes_per_s"] * step_seconds -
           report["decode_weight_bytes"]) <= 1e-6 * report["decode_weight_bytes"],
       "weight bandwidth = the decode step's weight bytes / average step")
# A decode step reads every weight but the embedding tables (a row per token); recomputed
# from dsp-dump's listing of the plan when DSP_DUMP names it: the largest rank's section
# bytes without the tables tfm.embedding steps of `decode` read.
expect(0 < report["decode_weight_bytes"] < report["weight_bytes_per_rank"],
       "a decode step reads less than the section (not the embedding tables)")
if os.environ.get("DSP_DUMP"):
    dump = subprocess.run([os.environ["DSP_DUMP"], plan], capture_output=True, text=True).stdout
    decode_listing = dump.split('"decode":', 1)[1].split("\n  program ", 1)[0]
    tables = set(re.findall(r"tfm\.embedding\([^,]+, ([^)]+)\)", decode_listing))
    expected = 0
    for section in re.split(r"\n  rank \d+:", dump.split("\nsections (", 1)[1])[1:]:
        total = 0
        for name, size in re.findall(r"\n    \d+ (\S+)(?: \[[^\n]*\])?: [^\n]* (\d+) bytes", section):
            total += 0 if name in tables else int(size)
        expected = max(expected, total)
    expect(tables and report["decode_weight_bytes"] == expected,
           f"decode weight bytes {report['decode_weight_bytes']} = the sections' {expected} "
           f"without the embedding tables {sorted(tables)}")
memory = report["memory_per_rank"]
expect(len(memory) == report["ranks"] and all(m is not None for m in memory),
       "memory of every rank")
if memory and memory[0]:
    expect(memory[0]["weights"] == report["weight_bytes_per_rank"], "weights match")
    expect(memory[0]["arena"] > 0 and memory[0]["kv_cache"] > 0, "arena and KV cache held")
    expect(memory[0]["total"] == sum(memory[0][k] for k in
                                     ("weights", "arena", "kv_cache", "other")), "total")

stats = report["stats"]
expect(sorted(stats) == sorted(["kernel_launches", "fallback_steps", "graph_captures",
                                "graph_replays", "bytes_uploaded", "bytes_downloaded"]) and
       all(isinstance(v, int) and v >= 0 for v in stats.values()), f"stats: {stats}")
if cuda:
    # Every step on the GPU; a decode graph per bucket, replayed (not with in-process ranks,
    # whose collectives are staged through host memory and never captured).
    expect(stats["fallback_steps"] == 0 and stats["kernel_launches"] > 0 and
           stats["bytes_uploaded"] > 0, f"GPU stats: {stats}")
    if not in_process:
        expect(stats["graph_captures"] >= 1 and stats["graph_replays"] > 0,
               f"decode is captured and replayed: {stats}")
else:
    expect(all(v == 0 for v in stats.values()), f"the CPU counts nothing: {stats}")

table = subprocess.run(command[:-1], capture_output=True, text=True)
expect(table.returncode == 0 and "decode step P99 / P99.9" in table.stdout and
       "achieved weight bandwidth" in table.stdout, "the table prints")
strict = subprocess.run(command[:-1] + ["--strict", "--stats"], capture_output=True, text=True)
expect(strict.returncode == 0 and "fallback steps 0" in strict.stdout and
       "graph replays" in strict.stdout,
       f"--strict --stats: exit {strict.returncode}, {strict.stderr.strip()}")

# 8 prompt tokens + 16 new ones exceed --max-seq-len 16: an error, not a crash or a number.
over = subprocess.run([dsbench, plan, "--prompt-len", "8", "--new-tokens", "16", "--warmup",
                       "0", "--iterations", "1"] + extra + ["--json"], capture_output=True, text=True)
expect(over.returncode == 2 and "dsbench: error:" in over.stderr and not over.stdout,
       f"past the sequence limit: exit {over.returncode}, {over.stderr.strip()}")

if failures:
    print(json.dumps(report, indent=2))
    sys.exit("FAIL:\n  " + "\n  ".join(failures))
print(f"ok: decode avg {decode['avg']:.3f} ms, P50 {decode['p50']:.3f} ms, "
      f"{report['tokens_per_second']:.0f} tokens/s, "
      f"{100 * report['bandwidth_fraction']:.1f}% of copy bandwidth")
