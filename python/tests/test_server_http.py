"""dsserve's HTTP surface in process, through httpx's ASGI transport: called from a browser's
page (CORS: a preflight is answered, also where the server asks for a key, and origins can
be limited), vLLM's /version, and speculative decoding's counters in /metrics."""
import asyncio

import httpx
import pytest

from dsrt.engine import EngineLoop
from dsrt.server import Cors, create_app, main
from dsrt.server_state import Server

PAGE = "http://page.example"
PREFLIGHT = {"Origin": PAGE, "Access-Control-Request-Method": "POST",
             "Access-Control-Request-Headers": "authorization, content-type"}


@pytest.fixture(scope="module")
def engine(plan):
    loop = EngineLoop(plan)
    yield loop
    loop.close()


def calls(app, *requests) -> list:
    """Each (method, path, headers, json) in turn against `app`."""
    async def run():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://x") as client:
            return [await client.request(method, path, headers=headers, json=body)
                    for method, path, headers, body in requests]
    return asyncio.run(run())


def test_any_page_may_call_by_default(engine):
    app = create_app(Server(engine, "m", 8))
    preflight, models, completion = calls(
        app, ("OPTIONS", "/v1/chat/completions", PREFLIGHT, None),
        ("GET", "/v1/models", {"Origin": PAGE}, None),
        ("POST", "/v1/completions", {"Origin": PAGE},
         {"prompt": [1, 2, 3], "max_tokens": 2, "temperature": 0}))
    assert preflight.status_code == 200
    assert preflight.headers["access-control-allow-origin"] == "*"
    assert "POST" in preflight.headers["access-control-allow-methods"]
    assert "authorization" in preflight.headers["access-control-allow-headers"].lower()
    for answer in (models, completion):
        assert answer.status_code == 200
        assert answer.headers["access-control-allow-origin"] == "*"


def test_a_preflight_needs_no_key_and_a_401_is_readable(engine):
    app = create_app(Server(engine, "m", 8), api_key="secret")
    preflight, refused, allowed = calls(
        app, ("OPTIONS", "/v1/completions", PREFLIGHT, None),
        ("POST", "/v1/completions", {"Origin": PAGE}, {"prompt": [1, 2], "max_tokens": 1}),
        ("POST", "/v1/completions", {"Origin": PAGE, "Authorization": "Bearer secret"},
         {"prompt": [1, 2], "max_tokens": 1}))
    assert preflight.status_code == 200
    assert refused.status_code == 401 and refused.headers["access-control-allow-origin"] == "*"
    assert allowed.status_code == 200


def test_origins_can_be_limited(engine):
    app = create_app(Server(engine, "m", 8), cors=Cors(allowed_origins=[PAGE]))
    other = dict(PREFLIGHT, Origin="http://other.example")
    ours, theirs, their_get = calls(
        app, ("OPTIONS", "/v1/completions", PREFLIGHT, None),
        ("OPTIONS", "/v1/completions", other, None),
        ("GET", "/v1/models", {"Origin": "http://other.example"}, None))
    assert ours.status_code == 200 and ours.headers["access-control-allow-origin"] == PAGE
    assert theirs.status_code == 400 and "access-control-allow-origin" not in theirs.headers
    assert "access-control-allow-origin" not in their_get.headers


def test_version_is_the_library_s(engine):
    import dsrt
    (answer,) = calls(create_app(Server(engine, "m", 8)), ("GET", "/version", {}, None))
    assert answer.status_code == 200 and answer.json() == {"version": dsrt.__version__}


def test_origins_that_are_not_a_json_list_are_refused(capsys):
    with pytest.raises(SystemExit) as exit:
        main(["plan.dsp", "--allowed-origins", "http://page.example"])
    assert exit.value.code == 2
    assert "--allowed-origins: must be a JSON list of strings" in capsys.readouterr().err


def test_speculative_decoding_is_counted_in_metrics(plan, reference):
    loop = EngineLoop(plan, speculative_config={"method": "ngram",
                                                "num_speculative_tokens": 4})
    try:
        prompt = reference["prompts"][0]
        answer, metrics = calls(
            create_app(Server(loop, "m", 8)),
            ("POST", "/v1/completions", {}, {"prompt": prompt["ids"], "temperature": 0,
                                             "max_tokens": reference["max_new_tokens"],
                                             "ignore_eos": True}),
            ("GET", "/metrics", {}, None))
    finally:
        loop.close()
    assert answer.json()["choices"][0]["text"] == loop.tokenizer.decode(prompt["generated"])
    counts = dict(line.rsplit(" ", 1) for line in metrics.text.splitlines()
                  if line.startswith("dsrt:spec_decode_num_"))
    assert 0 < float(counts["dsrt:spec_decode_num_accepted_tokens_total"]) <= \
        float(counts["dsrt:spec_decode_num_draft_tokens_total"])


def test_a_speculative_config_that_is_not_json_is_refused(capsys):
    with pytest.raises(SystemExit) as exit:
        main(["plan.dsp", "--speculative-config", "ngram"])
    assert exit.value.code == 2
    assert "--speculative-config: must be a JSON object" in capsys.readouterr().err


@pytest.mark.parametrize("flags, reason", [
    (["--gpu-memory-utilization", "0.9"], "--kv-cache-memory-fraction is a share of what"),
    (["--quantization", "awq"], "compile quantized weights with --dtype"),
    (["--enable-lora"], "LoRA adapters are not served"),
    (["--lora-modules", "a=/adapters/a"], "LoRA adapters are not served"),
    (["--pipeline-parallel-size", "2"], "by tensor parallelism"),
    (["--no-enable-chunked-prefill"], "prompts are always chunked"),
])
def test_vllm_flags_dsserve_cannot_honour_are_refused_with_what_to_use(capsys, flags, reason):
    # Refused before anything is loaded (the plan does not exist), exit 2, saying why.
    assert main(["missing.dsp", "--trust-remote-code", *flags]) == 2
    assert reason in capsys.readouterr().err


def test_the_model_is_given_once(capsys):
    for argv in ([], ["a.dsp", "--model", "b.dsp"]):
        with pytest.raises(SystemExit) as exit:
            main(argv)
        assert exit.value.code == 2
        assert "give the model once" in capsys.readouterr().err


def test_a_vllm_command_line_serves_and_its_seed_repeats_unseeded_requests(plan):
    """`vllm serve`'s flags as scripts pass them: --model, flags with no effect here (each
    said once at the start), --uvicorn-log-level, --enforce-eager and --seed, under which
    the same unseeded sampled requests in the same order give the same text on two
    servers."""
    from conftest import ServerProcess
    import requests
    flags = ("--model", plan, "--disable-log-requests", "--disable-log-stats",
             "--enable-chunked-prefill", "--swap-space", "4", "--uvicorn-log-level",
             "warning", "--enforce-eager", "--seed", "7", "--pipeline-parallel-size", "1")
    texts, logs = [], []
    for _ in range(2):
        server = ServerProcess("--trust-remote-code", *flags)  # the first in place of a plan
        try:
            texts.append([requests.post(server.url + "/v1/completions", timeout=60, json={
                "prompt": [5, 6, 7], "max_tokens": 12, "temperature": 1.0,
                "ignore_eos": True}).json()["choices"][0]["text"] for _ in range(3)])
        finally:
            logs.append(server.stop())
    assert texts[0] == texts[1]
    assert len(set(texts[0])) > 1  # each request its own draw from the stream
    for flag in ("--trust-remote-code", "--swap-space", "--enable-chunked-prefill"):
        assert f"dsserve: {flag}: taken" in logs[0]
