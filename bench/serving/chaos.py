"""Chaos load against a running dsserve: a seeded mix of greedy and seeded-sampling
requests (streamed and whole), clients that vanish, and bad requests, at a fixed
concurrency. Checks: no 5xx, every good request's answer equals the same request sent
alone before the storm, every bad one a 4xx with an error body, the server healthy and
its engine empty afterwards."""
import argparse
import asyncio
import json
import random
import sys
import time

import httpx

PROMPTS = [
    "The quick brown fox", "Once upon a time", "In the beginning", "def main():",
    "Hello, my name is", "The capital of France is", "1, 2, 3, 4,", "Tokens are",
    "A long time ago in a galaxy far, far away, there was a small ship that",
    "x" * 40, "the the the the the the the the the the the the",
]


def chat_request(rng: random.Random) -> dict:
    body = {"messages": [{"role": "system", "content": "You are terse."},
                         {"role": "user", "content": rng.choice(PROMPTS)}],
            "max_tokens": rng.randint(1, 48), "temperature": 0}
    kind = rng.choice(["plain", "logprobs", "n2", "json", "stop"])
    if kind == "logprobs":
        body.update(logprobs=True, top_logprobs=rng.randint(0, 3))
    elif kind == "n2":
        body.update(n=2, temperature=0.8, seed=rng.randint(0, 9))
    elif kind == "json":
        body.update(response_format={"type": "json_object"})
    elif kind == "stop":
        body.update(stop=["e"])
    return body


def good_request(rng: random.Random) -> dict:
    kind = rng.choice(["greedy", "greedy", "seeded", "logprobs", "stop", "n2", "echo"])
    body = {"prompt": rng.choice(PROMPTS), "max_tokens": rng.randint(1, 48)}
    if kind == "greedy":
        body["temperature"] = 0
    elif kind == "seeded":
        body.update(temperature=rng.choice([0.7, 1.0, 1.3]), seed=rng.randint(0, 5),
                    top_p=rng.choice([1.0, 0.9]), top_k=rng.choice([-1, 20]))
    elif kind == "logprobs":
        body.update(temperature=0, logprobs=rng.randint(0, 5))
    elif kind == "stop":
        body.update(temperature=0, stop=[rng.choice(["e", "th", ".", "\n"])])
    elif kind == "n2":
        body.update(temperature=0.9, seed=rng.randint(0, 3), n=2)
    elif kind == "echo":
        body.update(temperature=0, echo=True, max_tokens=rng.choice([0, 3]), logprobs=1)
    return body


BAD = [
    {"prompt": "x", "max_tokens": -1},
    {"prompt": "x", "max_tokens": 4, "temperature": -1},
    {"prompt": "x", "max_tokens": 4, "top_p": 2},
    {"prompt": "x", "max_tokens": 4, "seed": 1.5},
    {"prompt": "x", "max_tokens": 4, "n": 0},
    {"prompt": "x", "max_tokens": 4, "logprobs": 1000},
    {"prompt": "word " * 5000, "max_tokens": 4},
    {"prompt": [999999], "max_tokens": 4},
    {"prompt": "", "max_tokens": 4},
    {"prompt": "x", "max_tokens": 100000},
    {"prompt": "x", "stop": 5},
    "not json",
    {"prompt": "x", "max_tokens": 4, "frequency_penalty": 9},
]


def normalise(answer: dict) -> list:
    """What must not depend on the batch: each choice's text, finish and log-probs."""
    out = []
    for choice in sorted(answer["choices"], key=lambda c: c["index"]):
        if "message" in choice:  # chat: its text and finish
            out.append((choice["message"]["content"], choice["finish_reason"], None))
            continue
        lp = choice.get("logprobs")
        if lp:
            lp = (lp.get("tokens"), lp.get("token_logprobs", []))
        out.append((choice["text"], choice["finish_reason"], lp))
    return out


# An f32 plan is batch-invariant within f32 rounding, not bit for bit (docs/serving.md,
# "Batch invariance"): its log-probabilities may differ in the last bits.
LOGPROB_TOLERANCE = 1e-4
# The largest log-probability difference seen among requests whose tokens were equal.
widest = [0.0]


def same(got: list, want: list) -> bool:
    if len(got) != len(want):
        return False
    for (text, finish, lp), (text2, finish2, lp2) in zip(got, want):
        if text != text2 or finish != finish2 or (lp is None) != (lp2 is None):
            return False
        if lp is not None:
            if lp[0] != lp2[0] or len(lp[1]) != len(lp2[1]):
                return False
            for a, b in zip(lp[1], lp2[1]):
                if (a is None) != (b is None):
                    return False
                if a is not None:
                    widest[0] = max(widest[0], abs(a - b))
                    if abs(a - b) > LOGPROB_TOLERANCE:
                        return False
    return True


def route(body: dict) -> str:
    return "/v1/chat/completions" if "messages" in body else "/v1/completions"


def describe(failure: tuple) -> str:
    """A failure, a differing answer shown from its first difference."""
    if len(failure) == 5 and isinstance(failure[3], list):
        kind, body, _, got, want = failure
        for i, (choice, wanted) in enumerate(zip(got, want)):
            for field, (g, w) in enumerate(zip(choice, wanted)):
                if g != w:
                    return (f"{kind} {json.dumps(body)[:200]}: choice {i}, "
                            f"{('text', 'finish', 'logprobs')[field]}: {g!r:.300} "
                            f"!= alone {w!r:.300}")
    return json.dumps(failure, default=str)[:600]


async def whole(client, url, body):
    r = await client.post(url + route(body), json=body)
    return r


async def streamed(client, url, body, stop_after=None):
    """Joins a stream's chunks into the shape of a whole answer; stop_after chunks, leaves."""
    body = dict(body, stream=True)
    texts, finish, count = {}, {}, 0
    async with client.stream("POST", url + route(body), json=body) as r:
        if r.status_code != 200:
            await r.aread()
            return r.status_code, None
        async for line in r.aiter_lines():
            if not line.startswith("data: "):
                continue
            if line == "data: [DONE]":
                break
            chunk = json.loads(line[6:])
            for c in chunk["choices"]:
                piece = c["delta"].get("content") or "" if "delta" in c else c["text"]
                texts[c["index"]] = texts.get(c["index"], "") + piece
                if c["finish_reason"]:
                    finish[c["index"]] = c["finish_reason"]
            count += 1
            if stop_after is not None and count >= stop_after:
                return 200, "left"
    return 200, [(texts[i], finish.get(i), None) for i in sorted(texts)]


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", default="http://127.0.0.1:8123")
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--chat", type=float, default=0.0,
                    help="the share of good requests sent as chat (the model needs a template)")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    plan = []

    def good(rng):
        return chat_request(rng) if rng.random() < args.chat else good_request(rng)
    for i in range(args.requests):
        roll = rng.random()
        if roll < 0.12:
            plan.append(("bad", rng.choice(BAD)))
        elif roll < 0.27:
            plan.append(("vanish-stream", good(rng), rng.randint(0, 4)))
        elif roll < 0.35:
            plan.append(("vanish-whole", good(rng), rng.uniform(0.0, 0.3)))
        elif roll < 0.65:
            plan.append(("stream", good(rng)))
        else:
            plan.append(("whole", good(rng)))
    timeout = httpx.Timeout(300.0)
    limits = httpx.Limits(max_connections=args.concurrency * 2)
    async with httpx.AsyncClient(timeout=timeout, limits=limits) as client:
        # The reference: every good request alone, before the storm.
        alone = {}
        keyed = [p[1] for p in plan if p[0] != "bad"]
        t0 = time.time()
        for body in keyed:
            key = json.dumps(body, sort_keys=True)
            if key in alone:
                continue
            r = await whole(client, args.url, body)
            assert r.status_code == 200, (body, r.status_code, r.text)
            alone[key] = normalise(r.json())
        print(f"{len(alone)} distinct requests alone in {time.time() - t0:.1f} s")

        failures = []
        counts = {}
        sem = asyncio.Semaphore(args.concurrency)

        async def one(item):
            async with sem:
                kind = item[0]
                counts[kind] = counts.get(kind, 0) + 1
                try:
                    if kind == "bad":
                        if isinstance(item[1], str):
                            r = await client.post(args.url + "/v1/completions", content=item[1],
                                                  headers={"content-type": "application/json"})
                        else:
                            r = await whole(client, args.url, item[1])
                        if not (400 <= r.status_code < 500) or "error" not in r.json():
                            failures.append(("bad accepted", item[1] if isinstance(item[1], str)
                                             else {k: str(v)[:30] for k, v in item[1].items()},
                                             r.status_code, r.text[:200]))
                        return
                    body = item[1]
                    key = json.dumps(body, sort_keys=True)
                    if kind == "vanish-stream" and item[2]:  # after item[2] chunks
                        await streamed(client, args.url, body, stop_after=item[2])
                        return
                    if kind == "vanish-stream":  # before the first chunk, most likely
                        await asyncio.wait_for(streamed(client, args.url, body), 0.05)
                        return
                    if kind == "vanish-whole":
                        await asyncio.wait_for(whole(client, args.url, body), item[2])
                        return
                    if kind == "stream":
                        status, got = await streamed(client, args.url, body)
                        want = [(t, f, None) for t, f, _ in alone[key]]
                    else:
                        r = await whole(client, args.url, body)
                        status, got = r.status_code, (normalise(r.json()) if r.status_code == 200
                                                      else r.text)
                        want = alone[key]
                    if status != 200 or not same(got, want):
                        failures.append((kind, body, status, got, want))
                except asyncio.TimeoutError:
                    if not kind.startswith("vanish"):
                        failures.append((kind, "timeout"))
                except Exception as error:  # noqa: BLE001 - every surprise is a finding
                    failures.append((kind, repr(error)))

        t0 = time.time()
        await asyncio.gather(*(one(item) for item in plan))
        print(f"storm of {len(plan)} in {time.time() - t0:.1f} s: {counts}")
        await asyncio.sleep(1.0)
        health = await client.get(args.url + "/health")
        metrics = (await client.get(args.url + "/metrics")).text
        gauges = [l for l in metrics.splitlines()
                  if not l.startswith("#") and ("running" in l or "waiting" in l
                                                or "usage" in l or "in_flight" in l)]
        print("health", health.status_code)
        print("\n".join(gauges))
        # After the storm, the same requests alone again (the prefix cache now full of it).
        again = 0
        for body in keyed[:60]:
            key = json.dumps(body, sort_keys=True)
            r = await whole(client, args.url, body)
            if r.status_code != 200 or not same(normalise(r.json()), alone[key]):
                failures.append(("after", body, r.status_code, r.text[:300]))
            again += 1
        print(f"{again} re-checked after the storm")
    for failure in failures[:20]:
        print("FAIL", describe(failure))
    print(f"largest log-probability difference from alone: {widest[0]:.2e}")
    print(f"{len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
