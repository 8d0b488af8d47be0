"""vLLM's request fields and options on dsserve beyond OpenAI's: truncate_prompt_tokens,
priority (--scheduling-policy priority), return_tokens_as_token_ids, return_token_ids,
stream_options.continuous_usage_stats, and echo with max_tokens 0."""
import json
import math

import openai
import pytest
import requests

import dsrt
from test_server import GREEDY, NO_EOS


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0)


def test_truncate_prompt_tokens_serves_the_prompts_last_tokens(server, client, llm, reference):
    """vLLM's truncate_prompt_tokens on completions and chat: the answer and its usage are
    those of the prompt's last k tokens; echo gives the prompt the model saw; a value vLLM
    refuses is a 400 naming the field."""
    ids = reference["prompts"][0]["ids"]
    keep = len(ids) // 2
    sliced = client.completions.create(model="m", prompt=ids[-keep:], max_tokens=4,
                                       extra_body=NO_EOS, **GREEDY)
    cut = client.completions.create(model="m", prompt=ids, max_tokens=4, echo=True,
                                    extra_body={**NO_EOS, "truncate_prompt_tokens": keep},
                                    **GREEDY)
    assert cut.usage.prompt_tokens == keep
    assert cut.choices[0].text == llm.tokenizer.decode(ids[-keep:]) + sliced.choices[0].text
    messages = [{"role": "user", "content": "tell me a long story about a lighthouse"}]
    whole = client.chat.completions.create(model="m", messages=messages, max_tokens=3,
                                           extra_body=NO_EOS, **GREEDY)
    short = client.chat.completions.create(model="m", messages=messages, max_tokens=3,
                                           extra_body={**NO_EOS, "truncate_prompt_tokens": 4},
                                           **GREEDY)
    assert whole.usage.prompt_tokens > 4 and short.usage.prompt_tokens == 4
    for bad in (0, -2, 10 ** 6):
        answer = requests.post(server.url + "/v1/completions", timeout=60, json={
            "prompt": ids, "max_tokens": 1, "truncate_prompt_tokens": bad})
        assert answer.status_code == 400, bad
        assert "truncate_prompt_tokens" in answer.text


def test_priority_needs_the_priority_policy(server):
    """vLLM's: a request's priority other than 0 is refused (400, naming it) unless dsserve
    runs --scheduling-policy priority; 0 is every request's default."""
    for route, body in (("/v1/completions", {"prompt": [5, 6], "max_tokens": 1}),
                        ("/v1/chat/completions",
                         {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1})):
        answer = requests.post(server.url + route, timeout=60, json={**body, "priority": 3})
        assert answer.status_code == 400
        assert "--scheduling-policy priority" in answer.json()["error"]["message"]
        assert requests.post(server.url + route, timeout=60,
                             json={**body, "priority": 0}).status_code == 200


def test_priority_reaches_the_engine_under_the_priority_policy(plan):
    from conftest import asgi_post
    from dsrt.engine import EngineLoop
    from dsrt.server import create_app
    from dsrt.server_state import Server
    engine = EngineLoop(plan)
    seen = []
    submit = engine.submit
    engine.submit = lambda ids, params, notify: (seen.append(params.priority),
                                                 submit(ids, params, notify))[1]
    try:
        app = create_app(Server(engine, "m", 8, scheduling_policy="priority"))
        answer = asgi_post(app, "/v1/completions", {"prompt": [5, 6], "max_tokens": 2,
                                                    "priority": -3, "n": 2})
        assert answer.status_code == 200, answer.text
        assert seen == [-3, -3]
        answer = asgi_post(app, "/v1/completions", {"prompt": [5, 6], "priority": 2 ** 31})
        assert answer.status_code == 400 and "priority" in answer.text
    finally:
        engine.close()


def test_return_tokens_as_token_ids_names_logprobs_tokens_by_id(server, llm, reference):
    """vLLM's return_tokens_as_token_ids: logprobs name each token (and each alternative)
    "token_id:N", N the generated token's id; off by default."""
    ids = reference["prompts"][0]["ids"]
    local = llm.generate([ids], dsrt.SamplingParams(max_tokens=3, temperature=0,
                                                    ignore_eos=True, logprobs=2))[0]
    expected = [f"token_id:{e.token_id}" for e in local.outputs[0].logprobs]
    body = {"prompt": ids, "max_tokens": 3, "temperature": 0, "ignore_eos": True,
            "logprobs": 2}
    named = requests.post(server.url + "/v1/completions", timeout=60,
                          json={**body, "return_tokens_as_token_ids": True}).json()
    logprobs = named["choices"][0]["logprobs"]
    assert logprobs["tokens"] == expected
    for top, entry in zip(logprobs["top_logprobs"], local.outputs[0].logprobs):
        assert set(top) == {f"token_id:{t}" for t, _ in entry.top}
    plain = requests.post(server.url + "/v1/completions", timeout=60, json=body).json()
    assert not any(t.startswith("token_id:") for t in plain["choices"][0]["logprobs"]["tokens"])
    chat = requests.post(server.url + "/v1/chat/completions", timeout=60, json={
        "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "logprobs": True,
        "return_tokens_as_token_ids": True}).json()
    assert all(c["token"].startswith("token_id:")
               for c in chat["choices"][0]["logprobs"]["content"])


def test_continuous_usage_stats_count_every_chunk(client, reference):
    """vLLM's stream_options.continuous_usage_stats: each chunk carries the usage so far,
    its completion tokens one more per token; the last chunk the whole usage."""
    ids = reference["prompts"][1]["ids"]
    chunks = list(client.completions.create(
        model="m", prompt=ids, max_tokens=6, stream=True, extra_body=NO_EOS,
        stream_options={"include_usage": True, "continuous_usage_stats": True}, **GREEDY))
    counted = [c.usage.completion_tokens for c in chunks if c.choices]
    assert counted[:6] == [1, 2, 3, 4, 5, 6]
    assert all(c.usage.prompt_tokens == len(ids) for c in chunks)
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 6


def test_echo_without_new_tokens_scores_the_prompt(server, client, llm, reference):
    """vLLM's echo with max_tokens 0, the legacy API's scoring (lm-evaluation-harness's
    loglikelihood): the prompt's text and the log-probability of each token given those
    before come back, and nothing generated. The last token's is transformers' (the
    fixture's prefill logits at the prompt's end, to 1e-4: the fp32 plan's logits are within
    1e-5 of them)."""
    prompt = reference["prompts"][0]
    ids = prompt["ids"] + prompt["generated"][:1]
    logits = prompt["prefill_last_logits"]
    top = max(logits)
    expected = logits[ids[-1]] - top - math.log(sum(math.exp(v - top) for v in logits))
    scored = client.completions.create(model="m", prompt=ids, max_tokens=0, echo=True,
                                       logprobs=1, **GREEDY).choices[0]
    assert scored.text == llm.tokenizer.decode(ids)
    assert len(scored.logprobs.tokens) == len(ids) and scored.logprobs.token_logprobs[0] is None
    assert abs(scored.logprobs.token_logprobs[-1] - expected) < 1e-4
    # The prompt's part of an answer that goes on to generate.
    generated = client.completions.create(model="m", prompt=ids, max_tokens=1, echo=True,
                                          logprobs=1, **GREEDY).choices[0]
    assert generated.logprobs.token_logprobs[:len(ids)] == pytest.approx(
        [None] + scored.logprobs.token_logprobs[1:], abs=1e-5)
    # Streamed: the echo and the finish, no token after it.
    chunks = list(client.completions.create(model="m", prompt=ids, max_tokens=0, echo=True,
                                            stream=True, **GREEDY))
    assert "".join(c.choices[0].text for c in chunks) == llm.tokenizer.decode(ids)
    with pytest.raises(openai.BadRequestError, match="max_tokens must be at least 1"):
        client.completions.create(model="m", prompt=ids, max_tokens=0, **GREEDY)


def test_return_token_ids_gives_each_choice_s_tokens_and_the_prompt_s(server, llm, reference):
    """vLLM's return_token_ids: completions carry each choice's generated ids (transformers'
    greedy tokens here) and its prompt's, whole and streamed (the prompt's once, in the
    choice's first chunk); chat carries the choice's ids and, on the response, the rendered
    prompt's; without it, no ids (the plan has a tokenizer)."""
    prompt = reference["prompts"][0]
    url = server.url + "/v1/completions"
    body = {"prompt": prompt["ids"], "max_tokens": 6, "return_token_ids": True, **NO_EOS,
            **GREEDY}
    choice = requests.post(url, json=body, timeout=60).json()["choices"][0]
    assert choice["token_ids"] == prompt["generated"][:6]
    assert choice["prompt_token_ids"] == prompt["ids"]
    assert choice["text"] == llm.tokenizer.decode(choice["token_ids"])
    chunks = [c["choices"][0] for c in streamed(url, {**body, "stream": True})]
    assert sum((c["token_ids"] for c in chunks), []) == prompt["generated"][:6]
    assert [c.get("prompt_token_ids") for c in chunks if "prompt_token_ids" in c] == [prompt["ids"]]
    plain = requests.post(url, json={**body, "return_token_ids": False}, timeout=60).json()
    assert "token_ids" not in plain["choices"][0]

    chat_url = server.url + "/v1/chat/completions"
    chat = {"messages": [{"role": "user", "content": "Say hi"}], "max_tokens": 6,
            "return_token_ids": True, **NO_EOS, **GREEDY}
    whole = requests.post(chat_url, json=chat, timeout=60).json()
    ids = whole["choices"][0]["token_ids"]
    assert len(ids) == whole["usage"]["completion_tokens"] == 6
    assert len(whole["prompt_token_ids"]) == whole["usage"]["prompt_tokens"]
    assert whole["choices"][0]["message"]["content"] == llm.tokenizer.decode(ids)
    pieces = list(streamed(chat_url, {**chat, "stream": True}))
    assert sum((c["choices"][0].get("token_ids", []) for c in pieces), []) == ids
    assert pieces[0]["prompt_token_ids"] == whole["prompt_token_ids"]


def streamed(url, body):
    """The JSON chunks of a streamed answer, up to [DONE]."""
    with requests.post(url, json=body, stream=True, timeout=60) as answer:
        for line in answer.iter_lines():
            if line.startswith(b"data: ") and line != b"data: [DONE]":
                yield json.loads(line[len(b"data: "):])
