#!/usr/bin/env python3
"""Sends a request stream (dsbench serve --dump-requests) to an OpenAI-compatible server as
closed-loop clients, each sending its next request when its last one finished, streamed
/v1/completions with the prompt's token ids, max_tokens and ignore_eos (vLLM's extension, so
every request makes the tokens it was drawn with). Reports what dsbench serve reports:
output tokens/s, TTFT and TPOT at P50/P99.

    python bench/serving/http_load.py --url http://127.0.0.1:8000 --requests-file r.json \
        [--clients 16] [--json]

Standard library only: the client must cost the server's CPU as little as it can.
"""
import argparse
import http.client
import json
import math
import threading
import time
import urllib.parse


def percentile(values, p):
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(p * len(ordered)) - 1))]


def send(host, port, request):
    """One streamed completion: (seconds to the first token, to the last, tokens)."""
    body = json.dumps({"prompt": request["prompt"], "max_tokens": request["max_tokens"],
                       "temperature": 0, "ignore_eos": True, "stream": True,
                       "stream_options": {"include_usage": True}})
    connection = http.client.HTTPConnection(host, port, timeout=600)
    sent = time.monotonic()
    connection.request("POST", "/v1/completions", body,
                       {"Content-Type": "application/json"})
    response = connection.getresponse()
    if response.status != 200:
        raise RuntimeError(f"HTTP {response.status}: {response.read()[:300]!r}")
    first = last = None
    tokens = 0
    for line in response:
        if not line.startswith(b"data: {"):
            continue
        now = time.monotonic()
        if b'"choices": []' in line:  # the usage chunk
            tokens = json.loads(line[6:])["usage"]["completion_tokens"]
            continue
        first = first or now
        last = now
    connection.close()
    return first - sent, last - sent, tokens


def closed_loop(send_one, requests, clients, name):
    """Runs `requests` through `clients` closed-loop clients, each calling send_one(request)
    (-> seconds to the first token, to the last, tokens[, more]) for its next request when its
    last one finished; dsbench serve's summary of the results (bench/serving/llamacpp_server.py
    runs llama-server's stream through it too)."""
    results = [None] * len(requests)
    next_index = iter(range(len(requests)))
    lock = threading.Lock()
    errors = []

    def client():
        while True:
            with lock:
                index = next(next_index, None)
            if index is None:
                return
            try:
                results[index] = send_one(requests[index])
            except Exception as error:  # reported, not hidden: the run is void
                errors.append(f"request {index}: {error}")
                return

    start = time.monotonic()
    threads = [threading.Thread(target=client) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    seconds = time.monotonic() - start
    if errors:
        raise SystemExit(f"{name}: " + "; ".join(errors[:5]))
    tokens = sum(r[2] for r in results)
    ttft = [r[0] for r in results]
    tpot = [(r[1] - r[0]) / (r[2] - 1) for r in results if r[2] > 1]
    return {"name": name, "seconds": seconds, "results": results,
            "requests_per_s": len(results) / seconds, "output_tokens_per_s": tokens / seconds,
            "output_tokens": tokens,
            "ttft_p50_ms": 1e3 * percentile(ttft, 0.5), "ttft_p99_ms": 1e3 * percentile(ttft, 0.99),
            "tpot_p50_ms": 1e3 * percentile(tpot, 0.5), "tpot_p99_ms": 1e3 * percentile(tpot, 0.99)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--requests-file", required=True)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    url = urllib.parse.urlparse(args.url)
    with open(args.requests_file) as file:
        requests = json.load(file)

    summary = closed_loop(lambda request: send(url.hostname, url.port, request), requests,
                          args.clients, f"dsserve over HTTP, {args.clients} clients")
    del summary["results"]
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print(f"{summary['name']}: {summary['requests_per_s']:.2f} req/s, "
              f"{summary['output_tokens_per_s']:.1f} out tok/s, TTFT p50 "
              f"{summary['ttft_p50_ms']:.0f} ms p99 {summary['ttft_p99_ms']:.0f} ms, TPOT p50 "
              f"{summary['tpot_p50_ms']:.1f} ms p99 {summary['tpot_p99_ms']:.1f} ms")


if __name__ == "__main__":
    main()
