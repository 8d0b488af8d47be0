"""Structured output (vLLM's structured_outputs, OpenAI's response_format) on the GPT-2
fixture: outputs that follow a JSON schema, a choice or a regex, checked by jsonschema and
re, and every drawn token replayed through an independent llguidance matcher: each was
allowed, and a greedy one is the likeliest allowed (against the request's own top-20
log-probabilities, which stay the model's)."""
import json
import re
from pathlib import Path

import httpx
import pytest

import dsrt
from conftest import asgi_post as post
from dsrt.engine import EngineLoop
from dsrt.server import create_app
from dsrt.server_state import Server

jsonschema = pytest.importorskip("jsonschema")
llguidance = pytest.importorskip("llguidance")

# Short keys: the fixture's tokens are mostly single bytes, and it has 64 positions.
SCHEMA = {"type": "object",
          "properties": {"n": {"type": "string", "maxLength": 3},
                         "a": {"type": "integer", "minimum": 0, "maximum": 99},
                         "c": {"enum": ["red", "green", "blue"]},
                         "ok": {"type": "boolean"}},
          "required": ["n", "a", "c", "ok"], "additionalProperties": False}


def compact(**what) -> dsrt.StructuredOutputsParams:
    return dsrt.StructuredOutputsParams(disable_any_whitespace=True, **what)


def replay(plan, params, output):
    """Each of the output's tokens through a matcher of its own: allowed where drawn, and
    (greedy) no allowed token among the top-20 likelier than the one drawn."""
    native = dsrt._dsrt.Plan(plan)
    vocab, eos = native.vocabulary()
    tokenizer = llguidance.LLTokenizer(native.tokenizer_json().decode(), n_vocab=vocab,
                                       eos_token=list(eos))
    matcher = llguidance.LLMatcher(tokenizer, params._grammar(), log_level=0)
    for token, entry in zip(output.token_ids, output.logprobs):
        allowed = matcher.compute_bitmask()
        def ok(t):
            return bool(allowed[t // 8] >> (t % 8) & 1)
        assert ok(token), f"token {token} was not allowed"
        likelier = [t for t, lp in entry.top if lp > entry.logprob + 1e-6 and ok(t)]
        assert not likelier, f"greedy drew {token}, the allowed {likelier} are likelier"
        if token not in eos:
            assert matcher.consume_token(token)


def test_json_schema_outputs_validate_and_each_greedy_token_is_the_likeliest_allowed(
        llm, plan):
    params = compact(json=SCHEMA)
    outs = llm.generate(["Hello", "Bonjour", "The"], dsrt.SamplingParams(
        max_tokens=56, temperature=0, logprobs=20, structured_outputs=params))
    for out in outs:
        choice = out.outputs[0]
        assert choice.finish_reason == "stop", choice.text
        jsonschema.validate(json.loads(choice.text), SCHEMA)
        replay(plan, params, choice)


def test_sampled_outputs_validate_and_repeat_with_their_seed(llm):
    params = dsrt.SamplingParams(max_tokens=56, temperature=1.0, seed=5, n=3,
                                 structured_outputs=compact(json=SCHEMA))
    first = llm.generate(["Hello"], params)[0].outputs
    again = llm.generate(["Hello"], params)[0].outputs
    assert [c.text for c in first] == [c.text for c in again]
    for choice in first:
        assert choice.finish_reason == "stop"
        jsonschema.validate(json.loads(choice.text), SCHEMA)


def test_choice_regex_and_grammar(llm):
    options = ["yes", "no", "maybe"]
    outs = llm.generate(["a", "b", "c", "d"], dsrt.SamplingParams(
        max_tokens=8, temperature=1.0, seed=2,
        guided_decoding=dsrt.GuidedDecodingParams(choice=options)))
    assert all(o.outputs[0].text in options for o in outs)
    outs = llm.generate(["a", "b"], dsrt.SamplingParams(
        max_tokens=16, temperature=1.0, seed=3,
        structured_outputs=dsrt.StructuredOutputsParams(regex=r"[0-9]{3}-[a-z]{2}")))
    assert all(re.fullmatch(r"[0-9]{3}-[a-z]{2}", o.outputs[0].text) for o in outs)
    # llama.cpp's GBNF, as llguidance converts it.
    outs = llm.generate(["a"], dsrt.SamplingParams(
        max_tokens=16, temperature=1.0, seed=4, structured_outputs=dsrt.StructuredOutputsParams(
            grammar='root ::= "x" [0-9] [0-9]')))
    assert re.fullmatch(r"x[0-9]{2}", outs[0].outputs[0].text)


def test_bad_structured_outputs_are_refused_by_name(llm, plan_without_tokenizer):
    def refused(match, **sampling):
        with pytest.raises(dsrt.Error, match=match):
            llm.generate(["a"], dsrt.SamplingParams(max_tokens=4, **sampling))
    refused("exactly one of", structured_outputs=dsrt.StructuredOutputsParams(
        regex="a", choice=["b"]))
    refused("exactly one of", structured_outputs=dsrt.StructuredOutputsParams())
    refused("structured output", structured_outputs=dsrt.StructuredOutputsParams(
        json="{not json"))
    refused("structured output", structured_outputs=dsrt.StructuredOutputsParams(regex="(("))
    refused("ignore_eos", ignore_eos=True,
            structured_outputs=dsrt.StructuredOutputsParams(choice=["a"]))
    refused("structured_outputs must be", structured_outputs={"json": {}})
    refused("not both", structured_outputs=dsrt.StructuredOutputsParams(choice=["a"]),
            guided_decoding=dsrt.StructuredOutputsParams(choice=["a"]))
    # The engine goes on serving.
    assert llm.generate(["a"], dsrt.SamplingParams(max_tokens=2))[0].outputs[0].token_ids
    with dsrt.LLM(plan_without_tokenizer) as bare:
        with pytest.raises(dsrt.Error, match="tokenizer"):
            bare.generate([[1, 2]], dsrt.SamplingParams(
                max_tokens=2, structured_outputs=dsrt.StructuredOutputsParams(choice=["a"])))


def test_server_response_format_and_vllm_fields(plan):
    loop = EngineLoop(plan)
    try:
        app = create_app(Server(loop, "m", 8, disable_any_whitespace=True))
        answer = post(app, "/v1/completions", {
            "prompt": "Hello", "max_tokens": 56, "temperature": 0,
            "response_format": {"type": "json_schema",
                                "json_schema": {"name": "person", "schema": SCHEMA}}})
        assert answer.status_code == 200, answer.text
        choice = answer.json()["choices"][0]
        assert choice["finish_reason"] == "stop"
        jsonschema.validate(json.loads(choice["text"]), SCHEMA)
        answer = post(app, "/v1/completions", {
            "prompt": "Hello", "max_tokens": 56, "temperature": 0.7, "seed": 1,
            "response_format": {"type": "json_object"}})
        assert answer.status_code == 200, answer.text
        text = answer.json()["choices"][0]["text"]
        if answer.json()["choices"][0]["finish_reason"] == "stop":
            assert isinstance(json.loads(text), dict)
        else:
            assert text.startswith("{")
        answer = post(app, "/v1/completions", {
            "prompt": ["a", "b"], "max_tokens": 8, "temperature": 1.0, "seed": 3,
            "structured_outputs": {"choice": ["left", "right"]}})
        assert [c["text"] for c in answer.json()["choices"]] in (
            [a, b] for a in ("left", "right") for b in ("left", "right"))
        answer = post(app, "/v1/completions", {
            "prompt": "a", "max_tokens": 8, "temperature": 1.0, "guided_regex": "[ab]{4}"})
        assert re.fullmatch("[ab]{4}", answer.json()["choices"][0]["text"])
        # llama.cpp's server's fields.
        answer = post(app, "/v1/completions", {
            "prompt": "a", "max_tokens": 8, "temperature": 1.0, "seed": 2,
            "grammar": 'root ::= ("ab" | "cd") [0-9]'})
        assert re.fullmatch("(ab|cd)[0-9]", answer.json()["choices"][0]["text"])
        answer = post(app, "/v1/completions", {"prompt": "a", "max_tokens": 56,
                                               "temperature": 0, "json_schema": SCHEMA})
        jsonschema.validate(json.loads(answer.json()["choices"][0]["text"]), SCHEMA)
        for body, message in [
                ({"response_format": {"type": "json_schema"}}, "json_schema.schema"),
                ({"response_format": {"type": "xml"}}, "json_object or json_schema"),
                ({"structured_outputs": {"regexp": "a"}}, "structured_outputs takes"),
                ({"guided_regex": "a", "response_format": {"type": "json_object"}},
                 "ask for one"),
                ({"grammar": "a", "json_schema": {}}, "ask for one"),
                ({"guided_regex": "(("}, "structured output")]:
            answer = post(app, "/v1/completions", {"prompt": "a", "max_tokens": 4, **body})
            assert answer.status_code == 400 and message in answer.json()["error"]["message"]
    finally:
        loop.close()


TOOLS = [{"type": "function", "function": {
             "name": "get_weather",
             "parameters": {"type": "object",
                            "properties": {"city": {"enum": ["Paris", "Oslo"]},
                                           "days": {"type": "integer", "minimum": 1,
                                                    "maximum": 9}},
                            "required": ["city", "days"], "additionalProperties": False}}},
         {"type": "function", "function": {
             "name": "noop", "parameters": {"type": "object", "properties": {},
                                            "additionalProperties": False}}}]
TEMPLATE = "{% for m in messages %}{{ m['content'] }}\n{% endfor %}"


@pytest.fixture(scope="module")
def tool_app(long_plan):
    # The Llama fixture: 8192 positions, room for a list of calls of byte-sized tokens.
    loop = EngineLoop(long_plan)
    yield create_app(Server(loop, "m", 8, chat_template=TEMPLATE, disable_any_whitespace=True))
    loop.close()


def chat(app, **body):
    return post(app, "/v1/chat/completions",
                {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 200,
                 "tools": TOOLS, **body})


def schema_of(name):
    return next(t["function"]["parameters"] for t in TOOLS if t["function"]["name"] == name)


def test_a_named_tool_choice_answers_that_call(tool_app):
    answer = chat(tool_app, temperature=0,
                  tool_choice={"type": "function", "function": {"name": "get_weather"}})
    assert answer.status_code == 200, answer.text
    choice = answer.json()["choices"][0]
    assert choice["finish_reason"] == "stop" and choice["message"]["content"] is None
    (call,) = choice["message"]["tool_calls"]
    assert call["type"] == "function" and call["function"]["name"] == "get_weather"
    assert re.fullmatch("[A-Za-z0-9]{9}", call["id"]) and "index" not in call
    jsonschema.validate(json.loads(call["function"]["arguments"]), schema_of("get_weather"))


def test_required_tool_choice_answers_calls_of_the_tools(tool_app):
    for seed in range(3):
        answer = chat(tool_app, temperature=0.8, seed=seed, tool_choice="required")
        choice = answer.json()["choices"][0]
        assert choice["finish_reason"] == "tool_calls", choice
        assert choice["message"]["tool_calls"]
        for call in choice["message"]["tool_calls"]:
            jsonschema.validate(json.loads(call["function"]["arguments"]),
                                schema_of(call["function"]["name"]))
    # Streamed: the calls come whole in one delta, numbered, with the finish.
    async def stream():
        transport = httpx.ASGITransport(app=tool_app)
        async with httpx.AsyncClient(transport=transport, base_url="http://x") as client:
            async with client.stream("POST", "/v1/chat/completions", json={
                    "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 200,
                    "tools": TOOLS, "tool_choice": "required", "temperature": 0.8, "seed": 0,
                    "stream": True}) as response:
                return [json.loads(line[6:]) async for line in response.aiter_lines()
                        if line.startswith("data: {")]
    import asyncio
    chunks = asyncio.run(stream())
    calls = [c["choices"][0] for c in chunks if c["choices"][0]["delta"].get("tool_calls")]
    assert len(calls) == 1 and calls[0]["finish_reason"] == "tool_calls"
    assert [c["index"] for c in calls[0]["delta"]["tool_calls"]] == list(
        range(len(calls[0]["delta"]["tool_calls"])))
    assert not any(c["choices"][0]["delta"].get("content") for c in chunks)


def test_tool_choice_none_is_free_text_and_bad_choices_are_refused(tool_app):
    answer = chat(tool_app, temperature=0, max_tokens=8, tool_choice="none")
    message = answer.json()["choices"][0]["message"]
    assert "tool_calls" not in message and isinstance(message["content"], str)
    for body, words in [
            ({"tool_choice": "auto"}, "--tool-call-parser"),
            ({"tool_choice": {"type": "function", "function": {"name": "nope"}}},
             "not among the tools"),
            ({"tool_choice": "sometimes"}, "tool_choice must be"),
            ({"tool_choice": "required", "tools": None}, "needs tools"),
            ({"tool_choice": "required", "tools": [{"type": "function"}]}, "each tool must be"),
            ({"tool_choice": "required", "response_format": {"type": "json_object"}},
             "cannot be combined")]:
        answer = chat(tool_app, max_tokens=4, **body)
        assert answer.status_code == 400 and words in answer.json()["error"]["message"], (
            body, answer.text)


def contains(tokens, sequence):
    return any(tokens[i:i + len(sequence)] == sequence
               for i in range(len(tokens) - len(sequence) + 1))


def test_allowed_token_ids_and_bad_words(llm):
    tokenizer = llm.get_tokenizer()
    allowed = tokenizer.encode("abc def", add_special_tokens=False)
    outs = llm.generate(["Hello", "The"], dsrt.SamplingParams(
        max_tokens=12, temperature=1.0, seed=1, n=2, allowed_token_ids=allowed))
    for out in outs:
        for choice in out.outputs:
            assert set(choice.token_ids) <= set(allowed), choice.token_ids
    greedy = dict(max_tokens=12, temperature=0, ignore_eos=True)
    free = llm.generate(["Hello"], dsrt.SamplingParams(**greedy))[0].outputs[0].token_ids
    word = tokenizer.decode(free[:2])
    sequences = dsrt.structured.bad_word_sequences(tokenizer, [word])
    banned = llm.generate(["Hello"], dsrt.SamplingParams(bad_words=[word], **greedy))
    tokens = banned[0].outputs[0].token_ids
    assert not any(contains(tokens, s) for s in sequences), (word, sequences, tokens)
    if free[:2] in sequences:  # the free output began with the word: the banned one cannot
        assert tokens != free
    # Beside a grammar: both hold.
    yes = tokenizer.encode("yes", add_special_tokens=False)
    eos = llm._loop.plan.vocabulary()[1]
    out = llm.generate(["a"], dsrt.SamplingParams(
        max_tokens=8, temperature=1.0, seed=3, allowed_token_ids=yes + list(eos),
        structured_outputs=dsrt.StructuredOutputsParams(choice=["yes", "no"])))
    assert out[0].outputs[0].text == "yes"


def test_bad_token_filters_are_refused(llm):
    for sampling, words in [({"allowed_token_ids": []}, "allowed_token_ids"),
                            ({"allowed_token_ids": [-1]}, "allowed_token_ids"),
                            ({"allowed_token_ids": [10 ** 9]}, "allowed_token_ids"),
                            ({"allowed_token_ids": ["a"]}, "allowed_token_ids"),
                            ({"bad_words": [""]}, "bad_words"),
                            ({"bad_words": "word"}, "bad_words")]:
        with pytest.raises(dsrt.Error, match=words):
            llm.generate(["a"], dsrt.SamplingParams(max_tokens=2, **sampling))


def test_server_token_filters(plan):
    loop = EngineLoop(plan)
    try:
        app = create_app(Server(loop, "m", 8))
        allowed = [65, 66, 67]
        answer = post(app, "/v1/completions", {"prompt": [5, 6], "max_tokens": 6,
                                               "temperature": 1.0, "seed": 1,
                                               "allowed_token_ids": allowed, "logprobs": 0})
        assert answer.status_code == 200, answer.text
        text = answer.json()["choices"][0]["text"]
        assert set(loop.tokenizer.encode(text, add_special_tokens=False)) <= set(allowed)
        answer = post(app, "/v1/completions", {"prompt": "a", "max_tokens": 4,
                                               "bad_words": [""]})
        assert answer.status_code == 400 and "bad_words" in answer.json()["error"]["message"]
    finally:
        loop.close()


def test_a_forced_call_comes_back_through_a_mistral_template(long_plan):
    # The next turn carries the call and the tool's answer; Mistral's template refuses a
    # call id that is not 9 letters and digits.
    source = (Path(__file__).parent / "chat_templates" /
              "mistralai-Mistral-Nemo-Instruct-2407.jinja").read_text(encoding="utf-8")
    loop = EngineLoop(long_plan)
    try:
        app = create_app(Server(loop, "m", 8, chat_template=source, disable_any_whitespace=True))
        first = chat(app, temperature=0,
                     tool_choice={"type": "function", "function": {"name": "get_weather"}})
        message = first.json()["choices"][0]["message"]
        answer = post(app, "/v1/chat/completions", {
            "messages": [{"role": "user", "content": "Hi"}, message,
                         {"role": "tool", "tool_call_id": message["tool_calls"][0]["id"],
                          "content": "12 C"}],
            "tools": TOOLS, "max_tokens": 4,
            # The fixture has no tokenizer_config.json to give the template its EOS text.
            "chat_template_kwargs": {"eos_token": "</s>"}})
        assert answer.status_code == 200, answer.text
    finally:
        loop.close()
