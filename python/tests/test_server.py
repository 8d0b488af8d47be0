"""dsserve through the `openai` client on loopback: completions and chat, streamed and
not, usage, greedy text equal to LLM.generate's and transformers', logprobs, /metrics,
the concurrency cap, disconnects, the 4xx answers, and draining on SIGTERM."""
import json
import math
import os
import random
import shutil
import tempfile
import re
import signal
import socket
import time

import openai
import pytest
import requests

import dsrt
from conftest import REPO, ServerProcess

GREEDY = {"temperature": 0}
NO_EOS = {"ignore_eos": True}  # vLLM's extension: exactly max_tokens come


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0)


def metrics(url: str) -> dict:
    """Prometheus' text as {name{labels}: value}."""
    values = {}
    for line in requests.get(url + "/metrics", timeout=10).text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            values[name] = float(value)
    return values


def test_models_and_health(server, client):
    assert requests.get(server.url + "/health", timeout=10).status_code == 200
    models = client.models.list().data
    assert [m.id for m in models] == ["gpt2-fixture"]


def test_completion_is_llm_and_transformers_greedy(client, llm, reference):
    for prompt in reference["prompts"]:
        n = reference["max_new_tokens"]
        answer = client.completions.create(model="gpt2-fixture", prompt=prompt["ids"],
                                           max_tokens=n, extra_body=NO_EOS, **GREEDY)
        expected = llm.tokenizer.decode(prompt["generated"])
        assert answer.choices[0].text == expected
        assert answer.choices[0].finish_reason == "length"
        local = llm.generate([prompt["ids"]], dsrt.SamplingParams(max_tokens=n, temperature=0,
                                                                  ignore_eos=True))
        assert local[0].outputs[0].text == expected
        assert answer.usage.prompt_tokens == len(prompt["ids"])
        assert answer.usage.completion_tokens == n
        assert answer.usage.total_tokens == len(prompt["ids"]) + n


def test_completion_stream_is_the_whole_answer(client, reference):
    ids = reference["prompts"][1]["ids"]
    whole = client.completions.create(model="m", prompt=ids, max_tokens=20, extra_body=NO_EOS,
                                      **GREEDY)
    chunks = list(client.completions.create(model="m", prompt=ids, max_tokens=20, stream=True,
                                            stream_options={"include_usage": True},
                                            extra_body=NO_EOS, **GREEDY))
    text_chunks = [c for c in chunks if c.choices]
    # One per token; the finish on the last token's, or alone after it.
    assert len(text_chunks) in (20, 21)
    assert "".join(c.choices[0].text for c in text_chunks) == whole.choices[0].text
    assert text_chunks[-1].choices[0].finish_reason == "length"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 20
    assert chunks[-1].usage.prompt_tokens == len(ids)


def test_text_prompt_counts_its_tokens(client, llm):
    answer = client.completions.create(model="m", prompt="Hello there", max_tokens=3,
                                       extra_body=NO_EOS, **GREEDY)
    assert answer.usage.prompt_tokens == len(llm.tokenizer.encode("Hello there"))
    assert answer.usage.completion_tokens == 3


def test_chat_uses_the_plans_template(client, llm):
    messages = [{"role": "system", "content": "Be"}, {"role": "user", "content": "hé"}]
    answer = client.chat.completions.create(model="m", messages=messages, max_tokens=6,
                                            extra_body=NO_EOS, **GREEDY)
    prompt = llm.tokenizer.encode(llm.apply_chat_template(messages), add_special_tokens=False)
    local = llm.chat(messages, dsrt.SamplingParams(max_tokens=6, temperature=0,
                                                   ignore_eos=True))[0].outputs[0]
    assert answer.choices[0].message.role == "assistant"
    assert answer.choices[0].message.content == local.text
    assert answer.usage.prompt_tokens == len(prompt)
    assert answer.usage.completion_tokens == 6
    stream = list(client.chat.completions.create(model="m", messages=messages, max_tokens=6,
                                                 stream=True, extra_body=NO_EOS, **GREEDY))
    assert stream[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in stream) == local.text
    assert stream[-1].choices[0].finish_reason == "length"


def test_logprobs_are_transformers_log_softmax(client, reference):
    prompt = reference["prompts"][0]
    logits = prompt["prefill_last_logits"]
    norm = max(logits) + math.log(sum(math.exp(x - max(logits)) for x in logits))
    answer = client.completions.create(model="m", prompt=prompt["ids"], max_tokens=2,
                                       logprobs=3, extra_body=NO_EOS, **GREEDY)
    first = answer.choices[0].logprobs
    # fp32 on both sides: 1e-4 as the fixture's logits tests.
    assert first.token_logprobs[0] == pytest.approx(logits[prompt["generated"][0]] - norm,
                                                    abs=1e-4)
    assert len(first.top_logprobs[0]) <= 3 and len(first.tokens) == 2
    chat = client.chat.completions.create(model="m", messages=[{"role": "user",
                                                                "content": "hi"}],
                                          max_tokens=2, logprobs=True, top_logprobs=2,
                                          extra_body=NO_EOS, **GREEDY)
    content = chat.choices[0].logprobs.content
    assert len(content) == 2 and len(content[0].top_logprobs) == 2
    assert content[0].top_logprobs[0].logprob == pytest.approx(content[0].logprob)


def test_stop_string_ends_the_answer(client, reference):
    ids = reference["prompts"][0]["ids"]
    whole = client.completions.create(model="m", prompt=ids, max_tokens=24, extra_body=NO_EOS,
                                      **GREEDY).choices[0].text
    stop = whole[3:5]
    cut = client.completions.create(model="m", prompt=ids, max_tokens=24, stop=[stop],
                                    extra_body=NO_EOS, **GREEDY).choices[0]
    assert cut.finish_reason == "stop" and cut.text == whole[:whole.find(stop)]
    kept = client.completions.create(model="m", prompt=ids, max_tokens=24, stop=[stop],
                                     extra_body={**NO_EOS, "include_stop_str_in_output": True},
                                     **GREEDY).choices[0]
    assert kept.text == whole[:whole.find(stop) + len(stop)]


def test_metrics_move_as_requests_run(server, client):
    before = metrics(server.url)
    client.completions.create(model="m", prompt=[5, 6, 7], max_tokens=5, extra_body=NO_EOS,
                              **GREEDY)
    after = metrics(server.url)
    assert after["dsrt:prompt_tokens_total"] - before["dsrt:prompt_tokens_total"] == 3
    assert after["dsrt:generation_tokens_total"] - before["dsrt:generation_tokens_total"] == 5
    key = 'dsrt:request_success_total{finished_reason="length"}'
    assert after[key] - before.get(key, 0) == 1
    for histogram in ("time_to_first_token_seconds", "e2e_request_latency_seconds",
                      "time_per_output_token_seconds"):
        name = f"dsrt:{histogram}_count"
        assert after[name] - before[name] == 1
    assert after["dsrt:engine_steps_total"] > before["dsrt:engine_steps_total"]
    assert after["dsrt:kv_blocks_total"] > 0
    assert after["dsrt:num_requests_running"] == 0
    assert after["dsrt:num_requests_waiting"] == 0


@pytest.mark.parametrize("body, status, words", [
    (b"{not json", 400, "not valid JSON"),
    (b"[1, 2]", 400, "JSON object"),
    (json.dumps({"prompt": "x", "max_tokens": "ten"}).encode(), 400, "max_tokens"),
    (json.dumps({"prompt": "x", "temperature": "hot"}).encode(), 400, "temperature"),
    (json.dumps({"max_tokens": 3}).encode(), 400, "prompt"),
    (json.dumps({"prompt": [1] * 60, "max_tokens": 10}).encode(), 400,
     "maximum context length is 64"),
    (json.dumps({"prompt": [10 ** 6], "max_tokens": 1}).encode(), 400, "vocabulary"),
    (json.dumps({"prompt": "x", "n": 0}).encode(), 400, "n:"),
    (json.dumps({"prompt": "x", "n": 2, "best_of": 3}).encode(), 400, "best_of"),
    (json.dumps({"prompt": "x", "frequency_penalty": 3}).encode(), 400, "frequency_penalty"),
    (json.dumps({"prompt": "x", "repetition_penalty": 0}).encode(), 400,
     "repetition_penalty"),
    (json.dumps({"prompt": "x", "min_p": 1.5}).encode(), 400, "min_p"),
    (json.dumps({"prompt": "x", "response_format": {"type": "xml"}}).encode(), 400,
     "response_format"),
    (json.dumps({"prompt": "x", "guided_choice": []}).encode(), 400, "choice"),
    (json.dumps({"prompt": "x", "logit_bias": {"a": 1}}).encode(), 400, "logit_bias"),
    (json.dumps({"prompt": "x", "logit_bias": {"5": 500}}).encode(), 400, "logit_bias"),
    # Integers past what the C API takes (they had reached it and answered 500).
    (json.dumps({"prompt": "x", "top_k": 2 ** 63}).encode(), 400, "top_k"),
    (json.dumps({"prompt": "x", "min_tokens": 2 ** 40}).encode(), 400, "min_tokens"),
    (json.dumps({"prompt": "x", "stop_token_ids": [2 ** 64]}).encode(), 400, "stop_token_ids"),
    (json.dumps({"prompt": "x", "seed": 2 ** 64}).encode(), 400, "seed"),
    (json.dumps({"prompt": "x", "seed": -2 ** 63 - 1}).encode(), 400, "seed"),
    (json.dumps({"prompt": [2 ** 63], "max_tokens": 1}).encode(), 400, "prompt token"),
    (json.dumps({"prompt": "x", "logit_bias": {str(2 ** 70): 1}}).encode(), 400,
     "logit_bias"),
])
def test_bad_requests_get_openai_errors_and_serving_goes_on(server, client, body, status,
                                                            words):
    answer = requests.post(server.url + "/v1/completions", data=body, timeout=30,
                           headers={"Content-Type": "application/json"})
    assert answer.status_code == status
    error = answer.json()["error"]
    assert words in error["message"] and error["type"] == "invalid_request_error"
    assert client.completions.create(model="m", prompt=[1, 2], max_tokens=1).choices


def test_odd_field_values_never_answer_5xx(server, client):
    # Every field set alone to each of values of any type and size (huge and negative
    # integers, floats at 1e308, wrong containers, odd unicode), then seeded random pairs:
    # each body is answered 200 or 400 with OpenAI's error body, never 5xx (a top_k of 2**63
    # had reached the C API and answered 500), and greedy text is the same after them.
    values = [None, True, -1, 0, 2, 64, 65, 2 ** 31, 2 ** 63, -2 ** 63, 2 ** 64, 0.5, 2.5,
              1e308, -1e308, "", "a", "\u0000\U0001F600", [], [1, -1], [2 ** 63], [[1], []],
              {"type": "json_object"}, {"99": 1e9}, {str(2 ** 70): 1}, {"include_usage": 1}]
    fields = ["max_tokens", "temperature", "top_p", "top_k", "min_p", "seed", "stop", "n",
              "best_of", "logprobs", "echo", "logit_bias", "presence_penalty",
              "frequency_penalty", "repetition_penalty", "stop_token_ids", "min_tokens",
              "ignore_eos", "stream_options", "response_format", "prompt", "suffix",
              "structured_outputs", "guided_json", "guided_regex", "guided_choice",
              "guided_grammar", "allowed_token_ids", "bad_words"]
    rng = random.Random(41)
    bodies = [{name: value} for name in fields for value in values]
    bodies += [dict(zip(rng.sample(fields, 2), rng.choices(values, k=2))) for _ in range(100)]
    greedy = {"prompt": [5, 6, 7], "max_tokens": 6, "temperature": 0}
    before = requests.post(server.url + "/v1/completions", json=greedy, timeout=30).json()
    for fields_set in bodies:
        body = {"prompt": "Hello", "max_tokens": 3, **fields_set}
        answer = requests.post(server.url + "/v1/completions", json=body, timeout=30)
        assert answer.status_code in (200, 400), (body, answer.text)
        if answer.status_code == 400:
            assert answer.json()["error"]["message"], body
    after = requests.post(server.url + "/v1/completions", json=greedy, timeout=30).json()
    assert after["choices"][0]["text"] == before["choices"][0]["text"]


def test_n_choices_are_the_llms_with_seeds_counted_once(client, llm):
    """n=3 sampled choices of each of two prompts: choice i * 3 + j is LLM.generate's output
    j of prompt i with the same seed (output j draws from seed + j), and the usage counts each
    prompt's tokens once."""
    prompts = [[5, 6, 7], [8, 9]]
    answer = client.completions.create(model="m", prompt=prompts, max_tokens=6, n=3,
                                       temperature=1.0, seed=11, extra_body={"ignore_eos": True})
    assert [c.index for c in answer.choices] == list(range(6))
    expected = llm.generate(prompts, dsrt.SamplingParams(max_tokens=6, temperature=1.0, seed=11,
                                                         n=3, ignore_eos=True))
    for choice in answer.choices:
        assert choice.text == expected[choice.index // 3].outputs[choice.index % 3].text
    assert len({c.text for c in answer.choices[:3]}) > 1, "three samples all alike"
    assert answer.usage.prompt_tokens == 5 and answer.usage.completion_tokens == 36


def test_continue_final_message_goes_on_with_the_answer_begun(server, client, llm):
    """vLLM's continue_final_message: the last message, an answer begun, stays open (the
    template's end of turn cut, as transformers' apply_chat_template cuts it) and the
    model goes on with it."""
    messages = [{"role": "user", "content": "hé"}, {"role": "assistant", "content": "Yes,"}]
    open_prompt = llm.apply_chat_template(messages, add_generation_prompt=False,
                                          continue_final_message=True)
    closed = llm.apply_chat_template(messages, add_generation_prompt=False)
    assert open_prompt.endswith("Yes,") and closed.startswith(open_prompt) and closed != open_prompt
    body = {"add_generation_prompt": False, "continue_final_message": True, **NO_EOS}
    answer = client.chat.completions.create(model="m", messages=messages, max_tokens=4,
                                            extra_body=body, **GREEDY)
    local = llm.chat(messages, dsrt.SamplingParams(max_tokens=4, temperature=0,
                                                   ignore_eos=True),
                     add_generation_prompt=False, continue_final_message=True)[0].outputs[0]
    assert answer.choices[0].message.content == local.text
    assert answer.usage.prompt_tokens == len(
        llm.tokenizer.encode(open_prompt, add_special_tokens=False))
    counted = requests.post(server.url + "/tokenize", timeout=10, json={
        "messages": messages, **body}).json()
    assert counted["count"] == answer.usage.prompt_tokens
    refused = requests.post(server.url + "/v1/chat/completions", timeout=10, json={
        "messages": messages, "continue_final_message": True})  # add_generation_prompt: True
    assert refused.status_code == 400 and "not compatible" in refused.json()["error"]["message"]


def test_tokenize_and_detokenize_are_the_plans_tokenizer(server, client, llm):
    # vLLM's endpoints: a prompt's tokens as completions count them, chat messages as the
    # chat template renders them, and back to text.
    text = "Hello, wörld! The engine batches"
    answer = requests.post(server.url + "/tokenize", timeout=10, json={"prompt": text}).json()
    assert answer["tokens"] == llm.tokenizer.encode(text)
    assert answer["count"] == len(answer["tokens"]) and answer["max_model_len"] == 64
    back = requests.post(server.url + "/detokenize", timeout=10,
                         json={"tokens": answer["tokens"]}).json()
    assert back == {"prompt": text}
    messages = [{"role": "user", "content": "Hi"}]
    counted = requests.post(server.url + "/tokenize", timeout=10,
                            json={"messages": messages}).json()
    chat = client.chat.completions.create(model="gpt2-fixture", messages=messages, max_tokens=1)
    assert counted["count"] == chat.usage.prompt_tokens
    for body in ({}, {"prompt": "x", "messages": messages}, {"prompt": 3}):
        refused = requests.post(server.url + "/tokenize", timeout=10, json=body)
        assert refused.status_code == 400, body
    for tokens in ([10 ** 9], [2 ** 63]):  # outside the vocabulary; past int64 (had been 500)
        refused = requests.post(server.url + "/detokenize", timeout=10, json={"tokens": tokens})
        assert refused.status_code == 400 and "error" in refused.json(), tokens


def test_chat_n_streams_every_choice(client):
    stream = client.chat.completions.create(model="m", n=2, max_tokens=4, temperature=0,
                                            messages=[{"role": "user", "content": "hi"}],
                                            stream=True, extra_body={"ignore_eos": True})
    texts, finished = ["", ""], [None, None]
    for chunk in stream:
        for choice in chunk.choices:
            texts[choice.index] += choice.delta.content or ""
            finished[choice.index] = choice.finish_reason or finished[choice.index]
    # Greedy: both choices are the same text, each ended by its own length.
    assert texts[0] and texts[0] == texts[1] and finished == ["length", "length"]


def test_penalties_reach_the_engine(client, llm):
    """The server's penalty and min_p fields are the LLM's SamplingParams (test_llm checks
    the penalised tokens against the prefill logits)."""
    settings = dict(repetition_penalty=1.8, presence_penalty=1.5, frequency_penalty=1.0)
    answer = client.completions.create(model="m", prompt=[5, 6, 7, 5, 6], max_tokens=8,
                                       temperature=0, presence_penalty=1.5,
                                       frequency_penalty=1.0,
                                       extra_body={"ignore_eos": True,
                                                   "repetition_penalty": 1.8, "min_p": 0.1})
    expected = llm.generate([[5, 6, 7, 5, 6]], dsrt.SamplingParams(
        max_tokens=8, temperature=0, ignore_eos=True, min_p=0.1, **settings))[0].outputs[0]
    plain = llm.generate([[5, 6, 7, 5, 6]], dsrt.SamplingParams(
        max_tokens=8, temperature=0, ignore_eos=True))[0].outputs[0]
    assert answer.choices[0].text == expected.text
    assert expected.token_ids != plain.token_ids, "the penalties changed nothing"


def test_logit_bias_and_stop_token_ids_reach_the_engine(client, llm):
    prompt = [5, 6, 7]
    plain = llm.generate([prompt], dsrt.SamplingParams(max_tokens=4, temperature=0,
                                                       ignore_eos=True))[0].outputs[0]
    answer = client.completions.create(model="m", prompt=prompt, max_tokens=4, temperature=0,
                                       logit_bias={str(plain.token_ids[0]): -100},
                                       extra_body={"ignore_eos": True})
    banned = llm.generate([prompt], dsrt.SamplingParams(
        max_tokens=4, temperature=0, ignore_eos=True,
        logit_bias={plain.token_ids[0]: -100}))[0].outputs[0]
    assert answer.choices[0].text == banned.text != plain.text
    stopped = client.completions.create(model="m", prompt=prompt, max_tokens=4, temperature=0,
                                        extra_body={"ignore_eos": True,
                                                    "stop_token_ids": [plain.token_ids[1]]})
    assert stopped.choices[0].finish_reason == "stop"


def test_echo_returns_the_prompt_and_its_logprobs(server, llm):
    """echo with logprobs, as lm-evaluation-harness's loglikelihood asks it: the text starts
    with the prompt's, the first token's logprob is null and the others are the LLM's
    prompt_logprobs; without logprobs the prompt's text alone is prepended."""
    prompt = [5, 6, 7, 8, 9, 10]
    answer = requests.post(server.url + "/v1/completions", timeout=60, json={
        "prompt": prompt, "max_tokens": 1, "logprobs": 1, "echo": True,
        "temperature": 0}).json()
    choice = answer["choices"][0]
    expected = llm.generate([prompt], dsrt.SamplingParams(max_tokens=1, temperature=0,
                                                          logprobs=1, prompt_logprobs=1))[0]
    assert choice["text"] == llm.tokenizer.decode(prompt) + expected.outputs[0].text
    values = choice["logprobs"]["token_logprobs"]
    assert len(values) == len(prompt) + 1 and values[0] is None
    for value, entry in zip(values[1:len(prompt)], expected.prompt_logprobs[1:]):
        assert value == pytest.approx(entry.logprob, abs=1e-5)
    assert values[-1] == pytest.approx(expected.outputs[0].logprobs[0].logprob, abs=1e-5)
    plain = requests.post(server.url + "/v1/completions", timeout=60, json={
        "prompt": "Hello there", "max_tokens": 2, "echo": True, "temperature": 0}).json()
    assert plain["choices"][0]["text"].startswith("Hello there")
    assert plain["choices"][0]["logprobs"] is None


def test_api_key_guards_the_openai_routes(plan):
    # vLLM's --api-key: /v1/... needs the key (the openai client sends its api_key as a
    # bearer token), /health stays open for probes.
    process = ServerProcess(plan, "--api-key", "sesame")
    try:
        keyed = openai.OpenAI(base_url=process.url + "/v1", api_key="sesame", max_retries=0)
        assert keyed.completions.create(model="m", prompt=[5, 6], max_tokens=2,
                                        extra_body=NO_EOS, **GREEDY).usage.completion_tokens == 2
        streamed = keyed.completions.create(model="m", prompt=[5, 6], max_tokens=3, stream=True,
                                            extra_body=NO_EOS, **GREEDY)
        assert [c.choices[0].finish_reason for c in streamed][-1] == "length"
        wrong = openai.OpenAI(base_url=process.url + "/v1", api_key="none", max_retries=0)
        with pytest.raises(openai.AuthenticationError, match="API key"):
            wrong.models.list()
        bare = requests.post(process.url + "/v1/completions", timeout=10,
                             json={"prompt": [5], "max_tokens": 1})
        assert bare.status_code == 401
        assert bare.json()["error"]["type"] == "authentication_error"
        assert requests.get(process.url + "/health", timeout=10).status_code == 200
    finally:
        process.stop()


def test_chat_template_option_replaces_the_plans(plan, llm, tmp_path):
    """--chat-template FILE (vLLM's option): the chat answer is the completion of the text
    that template renders; a template that does not parse stops dsserve with its reason."""
    template = tmp_path / "plain.jinja"
    template.write_text("{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}"
                        "{% if add_generation_prompt %}[assistant] {% endif %}")
    process = ServerProcess(plan, "--chat-template", str(template))
    try:
        answer = requests.post(process.url + "/v1/chat/completions", timeout=60, json={
            "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5,
            "temperature": 0, "ignore_eos": True}).json()
    finally:
        process.stop()
    text = "[user] hi\n[assistant] "
    expected = llm.generate([llm.tokenizer.encode(text, add_special_tokens=False)],
                            dsrt.SamplingParams(max_tokens=5, temperature=0,
                                                ignore_eos=True))[0].outputs[0]
    assert answer["choices"][0]["message"]["content"] == expected.text
    broken = tmp_path / "broken.jinja"
    broken.write_text("{% for m in messages %}")
    import subprocess
    import sys
    run = subprocess.run([sys.executable, "-m", "dsrt.server", plan, "--chat-template",
                          str(broken)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and "broken.jinja" in run.stderr and "chat template" in run.stderr


@pytest.mark.parametrize("flag, value", [("--port", "99999"), ("--port", "0"),
                                         ("--max-concurrent-requests", "0")])
def test_out_of_range_flags_stop_dsserve_at_start(plan, flag, value):
    # A port of 99999 had been taken, the server listening somewhere else; a cap of 0 had
    # answered every request 429.
    import subprocess
    import sys
    run = subprocess.run([sys.executable, "-m", "dsrt.server", plan, flag, value],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and flag in run.stderr and "must be in" in run.stderr


def test_a_null_max_tokens_is_openai_s_default_for_every_prompt(server):
    """A null max_tokens is OpenAI's default of 16 (as vLLM reads it), for each prompt of the
    request; one that leaves fewer positions than that is refused by name."""
    answer = requests.post(server.url + "/v1/completions", timeout=60, json={
        "prompt": [[1, 2, 3], [4] * 40], "max_tokens": None, "temperature": 0,
        "ignore_eos": True}).json()
    assert [len(c["text"]) > 0 for c in answer["choices"]] == [True, True]
    assert answer["usage"]["completion_tokens"] == 16 + 16
    full = requests.post(server.url + "/v1/completions", timeout=60, json={
        "prompt": [4] * 50, "max_tokens": None, "temperature": 0})
    assert full.status_code == 400 and "maximum context length is 64" in full.text


def test_openai_client_raises_on_4xx(client):
    with pytest.raises(openai.BadRequestError, match="maximum context length"):
        client.chat.completions.create(model="m", messages=[{"role": "user",
                                                             "content": "x" * 200}])


# -- behaviour under load: a plan whose requests run for seconds


@pytest.fixture(scope="module")
def long_server(long_plan):
    process = ServerProcess(long_plan, "--max-concurrent-requests", "3")
    yield process
    process.stop()


def open_stream(url: str, max_tokens: int):
    """A streamed completion whose first token has come, and its line iterator (kept: a
    dropped iterator closes the connection)."""
    response = requests.post(url + "/v1/completions", stream=True, timeout=60, json={
        "prompt": [1, 2, 3, 4, 5] * 8, "max_tokens": max_tokens, "stream": True,
        "stream_options": {"include_usage": True}, "ignore_eos": True, "temperature": 0})
    assert response.status_code == 200
    lines = response.iter_lines()
    next(lines)  # the first token is out: the request holds its blocks
    return response, lines


def wait_for(predicate, seconds=30.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def test_cap_answers_429_and_disconnects_free_their_blocks(long_server):
    streams = [open_stream(long_server.url, 8000) for _ in range(3)]
    held = metrics(long_server.url)
    assert held["dsrt:kv_blocks_used"] > 0 and held["dsrt:http_requests_in_flight"] == 3
    over = requests.post(long_server.url + "/v1/completions", timeout=30,
                         json={"prompt": [1, 2], "max_tokens": 2})
    assert over.status_code == 429
    assert "at most 3" in over.json()["error"]["message"]
    for response, _ in streams:
        response.close()  # the client goes away mid-answer
    assert wait_for(lambda: metrics(long_server.url)["dsrt:kv_blocks_used"] == 0)
    after = metrics(long_server.url)
    assert after['dsrt:request_success_total{finished_reason="abort"}'] == 3
    # Far fewer than the 3 x 8000 tokens asked for: the engine stopped them.
    assert after["dsrt:generation_tokens_total"] < 3 * 8000
    assert after["dsrt:http_requests_in_flight"] == 0
    ok = requests.post(long_server.url + "/v1/completions", timeout=30,
                       json={"prompt": [1, 2], "max_tokens": 2})
    assert ok.status_code == 200


def test_client_gone_before_its_first_token_is_released(long_server):
    """A client that sends a long streamed request and leaves at once, before any chunk:
    its engine request is cancelled and its place under the cap comes back."""
    before = metrics(long_server.url)['dsrt:request_success_total{finished_reason="abort"}']
    body = json.dumps({"prompt": [1, 2, 3] * 100, "max_tokens": 7000, "stream": True,
                       "ignore_eos": True}).encode()
    with socket.create_connection(("127.0.0.1", long_server.port)) as connection:
        connection.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                           b"Content-Type: application/json\r\n"
                           b"Content-Length: %d\r\n\r\n" % len(body) + body)
    assert wait_for(lambda: metrics(long_server.url)[
        'dsrt:request_success_total{finished_reason="abort"}'] == before + 1)
    after = metrics(long_server.url)
    assert after["dsrt:http_requests_in_flight"] == 0
    assert wait_for(lambda: metrics(long_server.url)["dsrt:kv_blocks_used"] == 0)


def test_clients_that_vanish_leave_a_clean_log(long_plan):
    """Clients that leave mid-stream, and one that leaves before its body was sent: the
    server answers the others and logs no traceback, and not asyncio's "socket.send()
    raised exception.". That line is written from the fifth write into a connection already
    lost: a stream whose tokens were queued wrote them all without once letting the loop
    run, so the loss's callback never ran, and the stream went on writing (and logging) as
    long as the engine made tokens, holding every other client; with the log on a pipe
    nobody read, the server stopped answering at all."""
    process = ServerProcess(long_plan, "--max-concurrent-requests", "64")
    try:
        body = json.dumps({"prompt": [1, 2, 3, 4, 5] * 8, "max_tokens": 4000, "stream": True,
                           "ignore_eos": True}).encode()
        head = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body))
        for _ in range(3):
            connections = []
            for _ in range(16):
                connection = socket.create_connection(("127.0.0.1", process.port), 30)
                connection.sendall(head + body)
                connections.append(connection)
            for connection in connections:
                connection.recv(4096)  # the stream has begun
            time.sleep(0.5)  # chunks pile up unread
            for connection in connections:
                # A reset, as a client killed mid-answer leaves it.
                connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                      b"\x01\x00\x00\x00\x00\x00\x00\x00")
                connection.close()
        with socket.create_connection(("127.0.0.1", process.port), 30) as connection:
            connection.sendall(head + body[:10])  # leaves before the rest of its body
        assert wait_for(lambda: metrics(process.url)["dsrt:http_requests_in_flight"] == 0)
        assert wait_for(lambda: metrics(process.url)["dsrt:kv_blocks_used"] == 0)
        ok = requests.post(process.url + "/v1/completions", timeout=30,
                           json={"prompt": [1, 2], "max_tokens": 2})
        assert ok.status_code == 200
    finally:
        log = process.stop()
    assert "Traceback" not in log, log[-3000:]
    assert "socket.send() raised exception" not in log, log[-3000:]


def test_sigterm_drains_running_requests(long_plan):
    process = ServerProcess(long_plan)
    _, lines = open_stream(process.url, 3000)
    process.process.send_signal(signal.SIGTERM)
    finish, used = None, None
    for line in lines:
        if line.startswith(b"data: {"):
            chunk = json.loads(line[6:])
            if chunk["choices"]:
                finish = chunk["choices"][0]["finish_reason"] or finish
            used = chunk["usage"] or used
        elif line == b"data: [DONE]":
            break
    # Every token asked for came, though SIGTERM arrived after the first.
    assert finish == "length" and used["completion_tokens"] == 3000
    assert process.process.wait(timeout=60) == 0
    with pytest.raises(requests.ConnectionError):
        requests.get(process.url + "/health", timeout=5)


def test_plan_without_tokenizer_answers_token_ids(plan_without_tokenizer, llm):
    process = ServerProcess(plan_without_tokenizer)
    try:
        answer = requests.post(process.url + "/v1/completions", timeout=30, json={
            "prompt": [1, 2, 3], "max_tokens": 4, "temperature": 0, "ignore_eos": True}).json()
        with dsrt.LLM(plan_without_tokenizer) as local:
            expected = local.generate([[1, 2, 3]], dsrt.SamplingParams(
                max_tokens=4, temperature=0, ignore_eos=True))[0].outputs[0].token_ids
        assert answer["choices"][0]["token_ids"] == expected
        text = requests.post(process.url + "/v1/completions", timeout=30,
                             json={"prompt": "words", "max_tokens": 1})
        assert text.status_code == 400 and "no tokenizer" in text.json()["error"]["message"]
    finally:
        process.stop()


def test_an_onnx_model_is_served_by_its_folders_name(model_dir, llm, reference, tmp_path):
    # dsserve model.onnx compiles a serving plan once (the cache, shared with LLM) and names
    # the model after its folder, as vLLM names it after its path.
    env = dict(os.environ, DSRT_CACHE_DIR=str(tmp_path / "cache"))
    process = ServerProcess(str(model_dir / "model.onnx"), "--max-model-len", "48", env=env)
    try:
        models = requests.get(process.url + "/v1/models", timeout=10).json()["data"]
        assert [m["id"] for m in models] == [model_dir.name]
        assert models[0]["max_model_len"] == 48  # vLLM's option name, compiled in
        prompt = reference["prompts"][0]
        answer = requests.post(process.url + "/v1/completions", timeout=30, json={
            "prompt": prompt["ids"], "max_tokens": reference["max_new_tokens"],
            **GREEDY, **NO_EOS}).json()
        assert answer["choices"][0]["text"] == llm.tokenizer.decode(prompt["generated"])
    finally:
        log = process.stop()
    assert "compiling" in log and len(list((tmp_path / "cache").glob("*.dsp"))) == 1
    import subprocess
    import sys
    done = subprocess.run([sys.executable, "-m", "dsrt.server", str(tmp_path / "none.onnx")],
                          capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 1 and "no such plan, ONNX model or model folder" in done.stderr


def test_mpirun_serves_from_rank_0(tp2_plan, reference):
    """dsserve under mpirun: one process per rank, rank 0 serves, the tokens are those of
    the same TP-2 plan's ranks as threads of one process."""
    assert shutil.which("mpirun"), "Open MPI's mpirun (scripts/setup.sh installs it)"
    # mpirun itself, not test/models/mpirun.sh: a shell would not pass SIGTERM on to it.
    # Its session directory of its own, as that script says why.
    launcher = ("mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2")
    session = tempfile.mkdtemp(prefix="dsc-mpi.", dir="/tmp")
    process = ServerProcess(tp2_plan, launcher=launcher, env=dict(os.environ, TMPDIR=session))
    try:
        client = openai.OpenAI(base_url=process.url + "/v1", api_key="none", max_retries=0)
        ids = reference["prompts"][1]["ids"]
        answer = client.completions.create(model="m", prompt=ids, max_tokens=12, logprobs=0,
                                           extra_body=NO_EOS, **GREEDY)
        with dsrt.LLM(tp2_plan) as local:
            expected = local.generate([ids], dsrt.SamplingParams(
                max_tokens=12, temperature=0, ignore_eos=True))[0].outputs[0]
        assert answer.choices[0].text == expected.text
        assert answer.usage.completion_tokens == 12
    finally:
        output = process.stop()
        shutil.rmtree(session, ignore_errors=True)
    # Both ranks ended with rank 0's engine (mpirun's own status says it was signalled).
    assert process.process.returncode is not None
    assert "Traceback" not in output and "abort" not in output.lower(), output


def test_mpirun_compiles_a_model_once_for_every_rank(model_dir, reference, tmp_path):
    """`mpirun -np 2 dsserve model.onnx --tp 2`: both ranks ask for the plan at once. Each
    had compiled its own, to its own temporary name, which the plan records in its command
    line: the ranks then refused each other's plan (their checksums differ). One compiles
    now, the other waits for it."""
    launcher = ("mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2")
    session = tempfile.mkdtemp(prefix="dsc-mpi.", dir="/tmp")
    env = dict(os.environ, TMPDIR=session, DSRT_CACHE_DIR=str(tmp_path / "cache"))
    process = ServerProcess(str(model_dir / "model.onnx"), "--tp", "2", launcher=launcher,
                            env=env)
    try:
        prompt = reference["prompts"][0]
        answer = requests.post(process.url + "/v1/completions", timeout=30, json={
            "prompt": prompt["ids"], "max_tokens": reference["max_new_tokens"],
            "return_token_ids": True, **GREEDY, **NO_EOS}).json()
        assert answer["choices"][0]["token_ids"] == prompt["generated"]
    finally:
        output = process.stop()
        shutil.rmtree(session, ignore_errors=True)
    assert output.count("dsrt: compiling") == 1, output
    assert len(list((tmp_path / "cache").glob("*.dsp"))) == 1


def test_usage_reports_the_prompt_tokens_served_from_the_cache(client):
    # 40 tokens of their own (nothing else starts with token 299): the first request
    # computes them, the next find the 2 full 16-token blocks before the last token cached.
    # With n = 2 the prompt counts once, as its tokens do.
    prompt = [299] + list(range(200, 239))
    first = client.completions.create(model="gpt2-fixture", prompt=prompt, max_tokens=2,
                                      extra_body=NO_EOS, **GREEDY)
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    again = client.completions.create(model="gpt2-fixture", prompt=prompt, max_tokens=2, n=2,
                                      extra_body=NO_EOS, **GREEDY)
    assert again.usage.prompt_tokens == 40
    assert again.usage.prompt_tokens_details.cached_tokens == 32
    chunks = list(client.completions.create(model="gpt2-fixture", prompt=prompt, max_tokens=2,
                                            stream=True, extra_body=NO_EOS,
                                            stream_options={"include_usage": True}, **GREEDY))
    assert chunks[-1].usage.prompt_tokens_details.cached_tokens == 32


def test_reset_prefix_cache_answers_when_idle(server):
    # vLLM's endpoint: the engine is idle between these tests, so the reset is done.
    assert requests.post(server.url + "/reset_prefix_cache", timeout=10).status_code == 200
