#!/usr/bin/env python3
"""llama.cpp's server beside `dsbench serve` on the same seeded request stream (issue 41),
the two alternating in rounds (odd rounds dsc first), every round kept.

    python bench/serving/llamacpp_server.py --plan SERVE.dsp --gguf MODEL-F32.gguf --out DIR \\
        [--requests 64] [--clients 16] [--rounds 2] [--ctx 16384] [--port 8766]
        [--first-round 1]

The command of the committed run (bench/serving/RESULTS.md), from the repository root, after
`bench/cpu/llamacpp.py prepare llama-244m /tmp/llamacpp-bench` (which makes both files):

    DSC_BIN_DIR=/work/wt-bench/build/bin \\
    LLAMA_CPP=/work/llamacpp/llama_cpp_python-0.3.36/vendor/llama.cpp \\
    /work/today-venv/bin/python bench/serving/llamacpp_server.py \\
        --plan /tmp/llamacpp-bench/llama-244m/plans/llama-244m-serve-fp32.dsp \\
        --gguf /tmp/llamacpp-bench/llama-244m/gguf/llama-244m-F32.gguf \\
        --out bench/serving/llamacpp-2026-12-02

Each round:
* dsc: `dsbench serve PLAN --requests N --clients C --skip-static --skip-alone --json
  --dump-requests DIR/requests.json` (the engine in process; the stream: prompts 8-400 and
  outputs 8-160 tokens log-uniform, random ids, seed 1; tools/dsbench/Serve.cpp).
* llama.cpp: `llama-server -m GGUF -np C -c CTX --cont-batching -t 2 --host 127.0.0.1
  --port PORT --no-webui`, started fresh, and C closed-loop clients (threads here, each
  sending its next request when its last finished, as dsbench serve's clients do) sending
  the dumped requests in order: POST /completion with the prompt as an array of token ids,
  n_predict = the request's output length, ignore_eos, temperature 0 (greedy),
  cache_prompt false, streamed. TTFT: the request's send to its first streamed token;
  TPOT: (last - first) / (tokens - 1); throughput: output tokens over the run's wall time
  (dsbench serve's definitions). The server's own counts (tokens_evaluated,
  tokens_predicted) are summed and checked against dsbench's prompt and output tokens.
Writes DIR/runs.jsonl (one object per run), DIR/summary.md, DIR/requests.json is removed
after the run (it is large; its totals are in runs.jsonl) and the servers' logs' tails.
Standard library only for the client. Nothing asserts on time.
"""
import argparse
import http.client
import json
import os
import subprocess
import sys
import time
import urllib.request
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from http_load import closed_loop  # noqa: E402  (the same clients and summary as dsserve's)

REPO = Path(__file__).resolve().parents[2]
BIN = Path(os.environ.get("DSC_BIN_DIR", REPO / "build/bin"))
LLAMA = Path(os.environ.get("LLAMA_CPP", "/work/llamacpp/llama_cpp_python-0.3.36/vendor/llama.cpp"))


def load():
    return float(open("/proc/loadavg").read().split()[0])


def send(port, request):
    """One streamed /completion: (s to the first token, s to the last, tokens, prompt n)."""
    body = json.dumps({"prompt": request["prompt"], "n_predict": request["max_tokens"],
                       "ignore_eos": True, "temperature": 0, "cache_prompt": False,
                       "stream": True, "return_tokens": True})
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=1200)
    sent = time.monotonic()
    connection.request("POST", "/completion", body, {"Content-Type": "application/json"})
    response = connection.getresponse()
    if response.status != 200:
        raise RuntimeError(f"HTTP {response.status}: {response.read()[:300]!r}")
    first = last = None
    tokens = evaluated = 0
    for line in response:
        if not line.startswith(b"data: {"):
            continue
        now = time.monotonic()
        chunk = json.loads(line[6:])
        if chunk.get("tokens") or chunk.get("content"):
            first = first or now
            last = now
        if chunk.get("stop"):
            tokens = chunk.get("tokens_predicted", 0)
            evaluated = chunk.get("tokens_evaluated", 0)
            last = now
            first = first or now
    connection.close()
    return first - sent, last - sent, tokens, evaluated


def drive(port, requests, clients):
    summary = closed_loop(lambda request: send(port, request), requests, clients,
                          f"llama-server, {clients} clients")
    summary["prompt_tokens_evaluated"] = sum(r[3] for r in summary.pop("results"))
    return summary


def vm_hwm(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--plan", required=True)
    parser.add_argument("--gguf", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--ctx", type=int, default=16384)
    parser.add_argument("--port", type=int, default=8766)
    parser.add_argument("--first-round", type=int, default=1,
                        help="number the rounds from here (a second run into the same DIR)")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stream = out / "requests.json"
    records = (out / "runs.jsonl").open("a")
    log = (out / "runs.log").open("a")
    log.write(f"# {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC: {vars(args)}\n")
    totals = {}

    def keep(record):
        records.write(json.dumps(record) + "\n")
        records.flush()
        print(f"{record['start']} load {record['load']:.2f} r{record['round']} "
              f"{record['system']:>9}: {record['requests_per_s']:.2f} req/s, "
              f"{record['output_tokens_per_s']:.1f} out tok/s, TTFT p50 "
              f"{record['ttft_p50_ms']:.0f} p99 {record['ttft_p99_ms']:.0f} ms, TPOT p50 "
              f"{record['tpot_p50_ms']:.1f} p99 {record['tpot_p99_ms']:.1f} ms", flush=True)

    def dsc(round_):
        command = [str(BIN / "dsbench"), "serve", args.plan, "--requests", str(args.requests),
                   "--clients", str(args.clients), "--skip-static", "--skip-alone", "--json",
                   "--dump-requests", str(stream)]
        stamp, start_load = datetime.now(timezone.utc).strftime("%H:%M:%S"), load()
        log.write(f"{stamp} load {start_load:.2f}: {' '.join(command)}\n")
        log.flush()
        result = subprocess.run(["/usr/bin/time", "-f", "%M"] + command, capture_output=True,
                                text=True, check=True)
        d = json.loads(result.stdout)
        totals.update(prompt_tokens=d["prompt_tokens"], output_tokens=d["output_tokens"])
        engine = d["runs"][0]
        keep({"system": "dsc", "round": round_, "start": stamp, "load": start_load,
              "prompt_tokens": d["prompt_tokens"], "output_tokens_stream": d["output_tokens"],
              "max_rss_mib": int(result.stderr.strip().splitlines()[-1]) / 1024,
              **{k: engine[k] for k in ("seconds", "requests_per_s", "output_tokens_per_s",
                                        "ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms",
                                        "tpot_p99_ms", "peak_kv_blocks", "kv_blocks",
                                        "preemptions")}, "raw": d})

    def llama(round_):
        if not stream.exists():  # an even first round: dsbench has not dumped the stream yet
            dsc(0)
        requests = json.loads(stream.read_text())
        assert sum(len(r["prompt"]) for r in requests) == totals["prompt_tokens"]
        assert sum(r["max_tokens"] for r in requests) == totals["output_tokens"]
        command = [str(LLAMA / "build/bin/llama-server"), "-m", args.gguf, "-np",
                   str(args.clients), "-c", str(args.ctx), "--cont-batching", "-t", "2",
                   "--host", "127.0.0.1", "--port", str(args.port), "--no-webui"]
        server_log = (out / f"llama-server-{round_}.log").open("w")
        server = subprocess.Popen(command, stdout=server_log, stderr=subprocess.STDOUT)
        try:
            deadline = time.time() + 300
            while True:
                try:
                    urllib.request.urlopen(f"http://127.0.0.1:{args.port}/health", timeout=5)
                    break
                except Exception:
                    if server.poll() is not None or time.time() > deadline:
                        raise SystemExit(f"llama-server did not start: {command}")
                    time.sleep(0.5)
            stamp, start_load = datetime.now(timezone.utc).strftime("%H:%M:%S"), load()
            log.write(f"{stamp} load {start_load:.2f}: {' '.join(command)}\n")
            log.flush()
            r = drive(args.port, requests, args.clients)
            rss = vm_hwm(server.pid)
        finally:
            server.terminate()
            server.wait(timeout=60)
            server_log.close()
        keep({"system": "llama.cpp", "round": round_, "start": stamp, "load": start_load,
              "command": " ".join(command), "max_rss_mib": rss,
              "prompt_tokens": sum(len(x["prompt"]) for x in requests),
              "output_tokens_stream": sum(x["max_tokens"] for x in requests), **r})
        if r["output_tokens"] != totals["output_tokens"] or \
                r["prompt_tokens_evaluated"] != totals["prompt_tokens"]:
            print(f"  note: the server counted {r['prompt_tokens_evaluated']} prompt and "
                  f"{r['output_tokens']} output tokens; the stream has "
                  f"{totals['prompt_tokens']} and {totals['output_tokens']}", flush=True)
        # The server log's tail (its settings: KV types, batch sizes, slots) once.
        text = (out / f"llama-server-{round_}.log").read_text(errors="replace").splitlines()
        (out / f"llama-server-{round_}.log").write_text("\n".join(text[:150]) + "\n")

    for round_ in range(args.first_round, args.first_round + args.rounds):
        for step in ((dsc, llama) if round_ % 2 else (llama, dsc)):
            step(round_)
    records.close()
    stream.unlink(missing_ok=True)
    rows = [json.loads(line) for line in (out / "runs.jsonl").read_text().splitlines() if line]
    lines = ["| round | system | start (UTC) | load | req/s | out tok/s | TTFT p50 ms | "
             "TTFT p99 ms | TPOT p50 ms | TPOT p99 ms | max RSS MiB |",
             "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['round']} | {r['system']} | {r['start']} | {r['load']:.2f} | "
                     f"{r['requests_per_s']:.2f} | {r['output_tokens_per_s']:.1f} | "
                     f"{r['ttft_p50_ms']:.0f} | {r['ttft_p99_ms']:.0f} | {r['tpot_p50_ms']:.1f} | "
                     f"{r['tpot_p99_ms']:.1f} | {r['max_rss_mib'] or 0:.0f} |")
    (out / "summary.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
