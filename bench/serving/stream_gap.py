"""How long one stream stalls while another client sends a long prompt: a benchmark, not a
test. Streams MAX_TOKENS token ids from a running dsserve and, 0.3 s in, posts a prompt of
CHARS characters from another thread; prints that request's status and time, and the
stream's longest and p99 gap between chunks.

    python bench/serving/stream_gap.py http://127.0.0.1:8000 [CHARS] [MAX_TOKENS]
"""
import sys
import threading
import time

import requests


def main() -> None:
    url = sys.argv[1]
    chars = int(sys.argv[2]) if len(sys.argv) > 2 else 4_000_000
    max_tokens = int(sys.argv[3]) if len(sys.argv) > 3 else 8000

    def long_prompt() -> None:
        time.sleep(0.3)
        start = time.time()
        answer = requests.post(url + "/v1/completions", timeout=600, json={
            "prompt": ("the quick brown fox " * (chars // 20 + 1))[:chars], "max_tokens": 1})
        print(f"long prompt: {answer.status_code} in {time.time() - start:.3f} s")

    threading.Thread(target=long_prompt).start()
    stream = requests.post(url + "/v1/completions", stream=True, timeout=600, json={
        "prompt": [1, 2, 3] * 10, "max_tokens": max_tokens, "stream": True,
        "ignore_eos": True, "temperature": 0})
    last, gaps = None, []
    for _ in stream.iter_lines():
        now = time.time()
        if last is not None:
            gaps.append(now - last)
        last = now
    gaps.sort()
    print(f"stream: {len(gaps)} gaps, longest {gaps[-1] * 1000:.0f} ms, "
          f"p99 {gaps[int(len(gaps) * 0.99)] * 1000:.1f} ms")


if __name__ == "__main__":
    main()
