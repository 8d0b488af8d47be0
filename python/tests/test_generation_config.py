"""The model's sampling defaults (its generation_config.json, embedded by dsc): what a request
or a call leaves out is the model's, as vLLM's --generation-config auto takes it; "vllm"
keeps OpenAI's defaults; values equal to transformers' own are no preference; a bad value
is left out."""
import json
import shutil

import pytest

import dsrt
from conftest import asgi_post as post
from dsrt.engine import EngineLoop
from dsrt.server import create_app
from dsrt.server_state import Server

CONFIG = {"do_sample": True, "temperature": 0.6, "top_p": 0.9, "top_k": 20, "min_p": 0.05,
          "repetition_penalty": 1.1, "max_new_tokens": 5,
          "length_penalty": 2.0}  # not a sampling default: not taken
DEFAULTS = {"temperature": 0.6, "top_p": 0.9, "top_k": 20, "min_p": 0.05,
            "repetition_penalty": 1.1, "max_tokens": 5}


def plan_with(tmp_path_factory, model_dir, config, name):
    directory = tmp_path_factory.mktemp(name)
    for item in model_dir.iterdir():
        shutil.copy(item, directory / item.name)
    (directory / "generation_config.json").write_text(json.dumps(config))
    return dsrt.compile(str(directory / "model.onnx"), str(directory / "m.dsp"),
                        max_tokens_per_step=8, max_batch=2, max_seq_len=64)


@pytest.fixture(scope="module")
def sampled_plan(tmp_path_factory, model_dir):
    return plan_with(tmp_path_factory, model_dir, CONFIG, "sampled")


def test_the_model_s_defaults_are_what_a_call_leaves_out(sampled_plan, plan):
    # Seeded: the model's sampling may draw EOS before max_new_tokens, and an unseeded run
    # had done so in one of the CI runs. Of 16 prompts, each stops at EOS or at 5 tokens.
    with dsrt.LLM(sampled_plan, seed=0) as llm:
        defaults = llm.get_default_sampling_params()
        assert {k: getattr(defaults, k) for k in DEFAULTS} == DEFAULTS
        outs = [o.outputs[0] for o in llm.generate([f"Hello {i}" for i in range(16)])]
        # max_new_tokens, not SamplingParams' 16
        assert all(len(o.token_ids) == 5 for o in outs if o.finish_reason == "length")
        assert all(len(o.token_ids) <= 5 and o.finish_reason in ("length", "stop")
                   for o in outs)
        assert sum(o.finish_reason == "length" for o in outs) > 0
    with dsrt.LLM(sampled_plan, generation_config="vllm") as llm:
        assert llm.get_default_sampling_params() == dsrt.SamplingParams()
    with dsrt.LLM(plan) as llm:  # the fixture's own config sets no sampling
        assert llm.get_default_sampling_params() == dsrt.SamplingParams()
    with pytest.raises(ValueError, match="generation_config"):
        dsrt.LLM(sampled_plan, generation_config="hf")


def test_the_server_takes_them_where_the_request_gives_none(sampled_plan):
    loop = EngineLoop(sampled_plan)
    try:
        body = {"prompt": "Once upon a time", "max_tokens": 12, "seed": 7}
        model = create_app(Server(loop, "m", 8))
        openai = create_app(Server(loop, "m", 8, generation_config="vllm"))
        as_model = post(model, "/v1/completions", body).json()["choices"][0]["text"]
        as_openai = post(openai, "/v1/completions", body).json()["choices"][0]["text"]
        explicit = post(openai, "/v1/completions", {**body, **{
            k: v for k, v in DEFAULTS.items() if k != "max_tokens"}}).json()["choices"][0]["text"]
        assert as_model == explicit != as_openai
        # A request's own value wins.
        greedy = post(model, "/v1/completions", {**body, "temperature": 0}).json()
        plain = post(openai, "/v1/completions", {**body, "temperature": 0, "top_k": 20,
                                                 "repetition_penalty": 1.1}).json()
        assert greedy["choices"][0]["text"] == plain["choices"][0]["text"]
        # Chat without max_tokens: the model's max_new_tokens.
        chat = post(model, "/v1/chat/completions", {
            "messages": [{"role": "user", "content": "Hi"}], "seed": 1}).json()
        assert chat["usage"]["completion_tokens"] <= 5
    finally:
        loop.close()


def test_transformers_defaults_and_bad_values_are_not_taken(tmp_path_factory, model_dir, capfd):
    config = {"temperature": 1.0, "top_k": 50, "top_p": -3, "repetition_penalty": "high",
              "min_p": 0.1}
    with dsrt.LLM(plan_with(tmp_path_factory, model_dir, config, "odd")) as llm:
        defaults = llm.get_default_sampling_params()
    assert defaults == dsrt.SamplingParams(min_p=0.1)
    err = capfd.readouterr().err
    assert "top_p -3" in err and "repetition_penalty 'high'" in err
