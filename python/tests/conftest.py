"""Plans for the package's tests, compiled once per run by the repository's dsc from the
GPT-2 fixture (test/models/gpt2-optimum), whose generation.json holds transformers' greedy
tokens and prefill logits: the independent reference."""
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FIXTURE = REPO / "test" / "models" / "gpt2-optimum"
TEMPLATES = Path(__file__).parent / "chat_templates"
BUILD = Path(os.environ.get("DSRT_BUILD_DIR", REPO / "build"))


def dsc() -> str:
    path = os.environ.get("DSC", str(BUILD / "bin" / "dsc"))
    assert os.path.exists(path), f"{path} is missing: build the repository first (./build.sh)"
    return path


@pytest.fixture(scope="session")
def reference():
    """transformers' greedy generation on the fixture (generation.json)."""
    return json.loads((FIXTURE / "generation.json").read_text())


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory) -> Path:
    """The GPT-2 fixture with a tokenizer_config.json carrying Phi-3.5's chat template (a
    short one: the fixture has 64 positions), as a model published with one would be."""
    directory = tmp_path_factory.mktemp("gpt2-chat")
    for item in FIXTURE.iterdir():
        if item.is_file():
            shutil.copy(item, directory / item.name)
    special = json.loads((TEMPLATES / "special_tokens.json").read_text())
    tokens = special["microsoft-Phi-3.5-mini-instruct"]
    config = {"chat_template": (TEMPLATES / "microsoft-Phi-3.5-mini-instruct.jinja").read_text(),
              "bos_token": {"content": tokens["bos_token"], "__type": "AddedToken"},
              "eos_token": tokens["eos_token"], "unk_token": tokens["unk_token"],
              "pad_token": None}
    (directory / "tokenizer_config.json").write_text(json.dumps(config))
    return directory


@pytest.fixture(scope="session")
def plan(model_dir, tmp_path_factory) -> str:
    """A serving plan of the fixture: a step program of 8 rows (the engine's tokens per
    step), static programs of 2 sequences, its 64 positions."""
    os.environ.setdefault("DSC", dsc())
    import dsrt
    output = str(tmp_path_factory.mktemp("plans") / "gpt2-chat.dsp")
    return dsrt.compile(str(model_dir / "model.onnx"), output, max_tokens_per_step=8,
                        max_batch=2, max_seq_len=64)


@pytest.fixture(scope="session")
def llm(plan):
    import dsrt
    with dsrt.LLM(plan) as engine:
        yield engine


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    """`python -m dsrt.server` (what the dsserve script runs) on a loopback port."""

    def __init__(self, plan: str, *args: str, launcher: tuple = (), env: dict = None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process = subprocess.Popen(
            [*launcher, sys.executable, "-m", "dsrt.server", plan, "--port", str(self.port),
             *args], env=env,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        import requests
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"dsserve exited: {self.process.stdout.read()}")
            try:
                if requests.get(self.url + "/health", timeout=1).status_code == 200:
                    return
            except requests.ConnectionError:
                time.sleep(0.1)
        raise RuntimeError("dsserve did not come up in 60 s")

    def stop(self) -> str:
        if self.process.poll() is None:
            self.process.terminate()
        try:
            out, _ = self.process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            out, _ = self.process.communicate()
        return out


@pytest.fixture(scope="module")
def server(plan):
    # vLLM's flags among them (the default prefix caching, a cap on running sequences):
    # dsserve takes them as `vllm serve` does.
    process = ServerProcess(plan, "--max-concurrent-requests", "3",
                            "--served-model-name", "gpt2-fixture",
                            "--enable-prefix-caching", "--max-num-seqs", "8")
    yield process
    process.stop()


@pytest.fixture(scope="session")
def long_plan(tmp_path_factory) -> str:
    """A plan whose requests run for seconds: the Llama fixture (rotary positions, so the
    context may exceed its 128 trained ones) with 8192 positions. Requests held in flight
    by it show the cap, disconnects and draining."""
    os.environ.setdefault("DSC", dsc())
    import dsrt
    output = str(tmp_path_factory.mktemp("plans") / "llama-long.dsp")
    return dsrt.compile(str(REPO / "test" / "models" / "llama-op18" / "model.onnx"), output,
                        serving=True, max_batch=4, max_seq_len=8192)


@pytest.fixture(scope="session")
def plan_without_tokenizer(tmp_path_factory) -> str:
    """A plan of a model with no tokenizer.json beside it."""
    os.environ.setdefault("DSC", dsc())
    import dsrt
    output = str(tmp_path_factory.mktemp("plans") / "llama-no-tokenizer.dsp")
    return dsrt.compile(str(REPO / "test" / "models" / "llama-dynamo" / "model.onnx"), output,
                        serving=True, max_batch=4, max_seq_len=64)


@pytest.fixture(scope="session")
def tp2_plan(model_dir, tmp_path_factory) -> str:
    """The chat fixture split over two tensor-parallel ranks."""
    os.environ.setdefault("DSC", dsc())
    import dsrt
    output = str(tmp_path_factory.mktemp("plans") / "gpt2-tp2.dsp")
    return dsrt.compile(str(model_dir / "model.onnx"), output, tp=2, serving=True,
                        max_batch=8, max_seq_len=64)


def asgi_post(app, path: str, body: dict):
    """POSTs `body` to an app in this process (no server, no port)."""
    import asyncio
    import httpx

    async def run():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://x") as client:
            return await client.post(path, json=body)
    return asyncio.run(run())
