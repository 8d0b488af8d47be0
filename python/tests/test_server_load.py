"""dsserve under load: a flood of clients at once, as vLLM's benchmark sends them at
--request-rate inf (every one answered, within the process's open-file limit), and long
prompts encoded off the event loop that streams the others."""
import asyncio
import json
import resource
import sys
import threading

import httpx
import pytest

from conftest import ServerProcess
from dsrt.engine import EngineLoop
from dsrt.server import create_app
from dsrt.server_state import Server

# Sets RLIMIT_NOFILE to (soft, hard) = argv[1:3], then runs the rest of argv.
WITH_FILE_LIMIT = ("import os, resource, sys; resource.setrlimit(resource.RLIMIT_NOFILE, "
                   "(int(sys.argv[1]), int(sys.argv[2]))); os.execv(sys.argv[3], sys.argv[3:])")


def limited(soft: int, hard: int) -> tuple:
    return (sys.executable, "-c", WITH_FILE_LIMIT, str(soft), str(hard))


async def stream_once(port: int, index: int) -> tuple:
    """One streamed completion on its own connection: (status line, whether [DONE] came)."""
    body = json.dumps({"prompt": f"client {index} asks", "max_tokens": 2, "stream": True,
                       "temperature": 0}).encode()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                     b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                     % len(body) + body)
        await writer.drain()
        answer = await reader.read()
    except OSError as error:  # a connection the server could not take
        return type(error).__name__, False
    finally:
        writer.close()
    return answer.split(b"\r\n", 1)[0].decode(errors="replace"), b"data: [DONE]" in answer


async def flood(port: int, clients: int) -> list:
    async def bounded(index: int) -> tuple:
        # Without the raised limit, some connections waited in the listen queue for good.
        try:
            return await asyncio.wait_for(stream_once(port, index), 60)
        except asyncio.TimeoutError:
            return "no answer in 60 s", False
    return await asyncio.gather(*(bounded(i) for i in range(clients)))


def test_a_flood_past_the_soft_file_limit_is_answered(plan):
    """600 clients at once against a server started with a soft limit of 256 open files
    (Linux's default soft limit is 1024, its hard one far higher): before dsserve raised the
    soft limit to the hard one, 1500 clients at 1024 got connection resets and 500s."""
    clients = 600
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = clients + 256  # this process's sockets and files, as the server's
    if hard != resource.RLIM_INFINITY and hard < needed:
        pytest.skip(f"the hard open-file limit {hard} is below the {needed} this test needs")
    if soft != resource.RLIM_INFINITY and soft < needed:
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
    server = ServerProcess(plan, launcher=limited(256, hard))
    try:
        answers = asyncio.run(flood(server.port, clients))
    finally:
        log = server.stop()
    statuses = {}
    for status, _ in answers:
        statuses[status] = statuses.get(status, 0) + 1
    assert statuses == {"HTTP/1.1 200 OK": clients}, (statuses, log[-2000:])
    assert all(done for _, done in answers)
    assert "warning" not in log


def test_a_hard_file_limit_below_the_cap_is_said_at_the_start(plan):
    server = ServerProcess(plan, "--max-concurrent-requests", "1000",
                           launcher=limited(300, 300))
    log = server.stop()
    assert "may open 300 files" in log and "--max-concurrent-requests 1000" in log, log


class ThreadsOfEncode:
    """The plan's tokenizer, noting the thread of each encode."""

    def __init__(self, tokenizer):
        self.tokenizer, self.threads = tokenizer, []

    def encode(self, text, add_special_tokens=True):
        self.threads.append((len(text), threading.get_ident()))
        return self.tokenizer.encode(text, add_special_tokens=add_special_tokens)

    def __getattr__(self, name):
        return getattr(self.tokenizer, name)


def test_a_long_prompt_is_encoded_off_the_event_loop(long_plan):
    """The tokenizer releases the GIL: encoded on a worker thread, a long prompt leaves the
    event loop free to stream the other requests' tokens. Short ones stay on the loop."""
    engine = EngineLoop(long_plan)
    try:
        server = Server(engine, "long", 8)
        tokenizer = server.tokenizer = ThreadsOfEncode(server.tokenizer)
        app = create_app(server)
        # 20,000 characters: 15,003 tokens of this fixture's small vocabulary, more than its
        # 8192 positions, which the answer then says.
        long_text = "the quick brown fox " * 1000

        async def main():
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://x") as client:
                answers = [await client.post("/v1/completions", json={
                    "prompt": prompt, "max_tokens": 2, "temperature": 0})
                    for prompt in (long_text, "a short prompt")]
                counted = await client.post("/tokenize", json={"prompt": long_text})
            return threading.get_ident(), answers, counted
        loop_thread, answers, counted = asyncio.run(main())
    finally:
        engine.close()
    assert [a.status_code for a in answers] == [400, 200], [a.text for a in answers]
    count = counted.json()["count"]
    assert count > 8192 and f"({count} in the messages" in answers[0].json()["error"]["message"]
    (long_length, long_thread), (_, short_thread), (_, tokenize_thread) = tokenizer.threads
    assert long_length == len(long_text)
    assert long_thread != loop_thread and tokenize_thread != loop_thread
    assert short_thread == loop_thread
