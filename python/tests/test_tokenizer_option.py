"""vLLM's --tokenizer (LLM(tokenizer=)): a local tokenizer folder in place of the plan's, with
its chat template and special tokens; a plan compiled without a tokenizer then takes text.
The reference is transformers' greedy generation on the fixture (generation.json) and the
plan that embeds the same folder's tokenizer."""
import json
import shutil

import pytest

import dsrt
from conftest import FIXTURE
from conftest import asgi_post as post
from dsrt.engine import EngineLoop
from dsrt.server import create_app
from dsrt.server_cli import main
from dsrt.server_state import Server

GREEDY = dict(temperature=0.0, ignore_eos=True)
MESSAGES = [{"role": "user", "content": "Say hi"}]


@pytest.fixture(scope="module")
def bare_plan(tmp_path_factory):
    """The fixture compiled as `plan` is, from a folder with no tokenizer.json."""
    directory = tmp_path_factory.mktemp("no-tokenizer")
    for item in FIXTURE.iterdir():
        if item.is_file() and item.name != "tokenizer.json":
            shutil.copy(item, directory / item.name)
    return dsrt.compile(str(directory / "model.onnx"), str(directory / "bare.dsp"),
                        max_tokens_per_step=8, max_batch=2, max_seq_len=64)


def test_a_plan_without_a_tokenizer_serves_text_with_one_given(bare_plan, model_dir, plan,
                                                                reference):
    prompt = reference["prompts"][0]
    tokenizer = dsrt.Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    params = dsrt.SamplingParams(max_tokens=reference["max_new_tokens"], **GREEDY)
    with dsrt.LLM(bare_plan) as bare:
        with pytest.raises(dsrt.Error, match="has no tokenizer"):
            bare.generate("Hello world")
        assert bare.generate({"prompt_token_ids": prompt["ids"]}, params)[0].outputs[0].text == ""
    with dsrt.LLM(bare_plan, tokenizer=str(model_dir)) as given, dsrt.LLM(plan) as embedded:
        out = given.generate({"prompt_token_ids": prompt["ids"]}, params)[0].outputs[0]
        assert list(out.token_ids) == prompt["generated"]
        assert out.text == tokenizer.decode(prompt["generated"])
        text = given.generate("Hello world", params)[0].outputs[0]
        assert text.text and text.token_ids == \
            embedded.generate("Hello world", params)[0].outputs[0].token_ids
        # The folder's chat template and special tokens (Phi-3.5's), as dsc embedded them.
        assert given.apply_chat_template(MESSAGES) == embedded.apply_chat_template(MESSAGES)


def test_a_tokenizer_file_alone_serves_text_without_a_chat_template(bare_plan, model_dir,
                                                                     tmp_path):
    shutil.copy(model_dir / "tokenizer.json", tmp_path / "tokenizer.json")
    with dsrt.LLM(bare_plan, tokenizer=str(tmp_path / "tokenizer.json")) as llm:
        assert llm.generate("Hello", dsrt.SamplingParams(max_tokens=3, **GREEDY))[0].outputs[0].text
        with pytest.raises(dsrt.Error, match="chat_template"):
            llm.apply_chat_template(MESSAGES)


def test_the_server_serves_text_and_chat_through_the_given_tokenizer(bare_plan, model_dir, plan):
    body = {"prompt": "Once upon a time", "max_tokens": 6, "temperature": 0}
    chat = {"messages": MESSAGES, "max_tokens": 6, "temperature": 0}
    given, embedded = EngineLoop(bare_plan, tokenizer=str(model_dir)), EngineLoop(plan)
    try:
        apps = create_app(Server(given, "m", 8)), create_app(Server(embedded, "m", 8))
        texts = [post(app, "/v1/completions", body).json()["choices"][0]["text"] for app in apps]
        assert texts[0] and texts[0] == texts[1]
        chats = [post(app, "/v1/chat/completions", chat).json()["choices"][0]["message"]
                 for app in apps]
        assert chats[0] == chats[1]
    finally:
        given.close()
        embedded.close()


def test_another_model_s_tokenizer_is_refused_by_name(bare_plan, model_dir, tmp_path):
    vocab_size = dsrt._dsrt.Plan(bare_plan).vocabulary()[0]
    tokenizer = json.loads((model_dir / "tokenizer.json").read_text())
    tokenizer["added_tokens"].append({"id": vocab_size, "content": "<past>", "special": True,
                                      "single_word": False, "lstrip": False, "rstrip": False,
                                      "normalized": False})
    (tmp_path / "tokenizer.json").write_text(json.dumps(tokenizer))
    with pytest.raises(dsrt.Error, match=f"token ids up to {vocab_size}, past the model's "
                                         f"vocabulary of {vocab_size}"):
        dsrt.LLM(bare_plan, tokenizer=str(tmp_path))
    with pytest.raises(dsrt.Error, match="no tokenizer.json there"):
        dsrt.LLM(bare_plan, tokenizer=str(tmp_path / "missing"))


def test_dsserve_says_what_is_wrong_with_its_tokenizer(bare_plan, tmp_path, capsys):
    (tmp_path / "tokenizer.json").write_text("{not json")
    assert main([bare_plan, "--tokenizer", str(tmp_path)]) == 1
    assert "tokenizer.json: is not valid JSON" in capsys.readouterr().err
