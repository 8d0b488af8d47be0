"""Tool calls the model writes itself (tool_choice "auto", vLLM's --tool-call-parser): the
formats read whole and in pieces alike; the format detected from published chat templates;
each template's own rendering of a call read back as that call; and dsserve answering the
calls of an output forced (by a choice grammar) to be what the template writes."""
import json
import os
import re
from pathlib import Path

import httpx
import pytest

from dsrt.chat import ChatTemplate
from dsrt.engine import EngineLoop
from dsrt.server import create_app
from dsrt.server_state import Server
from dsrt.tool_parsers import PARSERS, ToolCallStream, detect

TEMPLATES = Path(__file__).parent / "chat_templates"
ARGUMENTS = {"city": "Paris", "days": 3}
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "The weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                    "days": {"type": "integer"}},
                   "required": ["city"]}}}]


SCHEMAS = {tool["function"]["name"]: tool["function"]["parameters"] for tool in TOOLS}


def read(parser: str, text: str, pieces: int):
    """(content, [(name, arguments)]) of `text` fed in pieces of `pieces` characters."""
    reader = ToolCallStream(PARSERS[parser](SCHEMAS))
    content, calls = "", []
    for at in range(0, len(text), pieces):
        more, new = reader.feed(text[at:at + pieces])
        content, calls = content + more, calls + new
    more, new = reader.finish()
    return content + more, [(c["function"]["name"], json.loads(c["function"]["arguments"]))
                            for c in calls + new]


CALL = json.dumps({"name": "get_weather", "arguments": ARGUMENTS})
READS = [
    # (parser, output, content, calls)
    ("hermes", f"Let me look.\n<tool_call>\n{CALL}\n</tool_call>\n<tool_call>"
               '{"name": "noop", "arguments": {}}</tool_call>',
     "Let me look.\n", [("get_weather", ARGUMENTS), ("noop", {})]),
    ("hermes", "An answer with < and <tool", "An answer with < and <tool", []),
    ("hermes", f"<tool_call>{CALL}", "", [("get_weather", ARGUMENTS)]),  # EOS before the end tag
    ("hermes", '<tool_call>{"name": "get_weather", "argu', '<tool_call>{"name": "get_weather", "argu',
     []),  # cut off by max_tokens: its text is the answer
    ("hermes", "a <tool_call>not JSON</tool_call>", "a <tool_call>not JSON</tool_call>", []),
    ("llama3_json", json.dumps({"name": "get_weather", "parameters": ARGUMENTS}), "",
     [("get_weather", ARGUMENTS)]),
    ("llama3_json", '<|python_tag|>{"name": "a", "parameters": {}}; {"name": "b", '
                    '"parameters": {"x": true}}', "", [("a", {}), ("b", {"x": True})]),
    ("llama3_json", "  Hello there {", "  Hello there {", []),
    ("llama3_json", '{"answer": 42}', '{"answer": 42}', []),  # JSON, but not a call
    ("llama3_json", '{"name": "a", "parameters": {"x": tr', '{"name": "a", "parameters": {"x": tr',
     []),
    ("mistral", f"[TOOL_CALLS][{json.dumps({'name': 'get_weather', 'arguments': ARGUMENTS})}, "
                '{"name": "noop", "arguments": "{}"}]', "",
     [("get_weather", ARGUMENTS), ("noop", {})]),
    ("mistral", 'Sure. [TOOL_CALLS]get_weather[ARGS]{"city": "Paris", "days": 3}'
                "[TOOL_CALLS]noop[ARGS]{}", "Sure. ", [("get_weather", ARGUMENTS), ("noop", {})]),
    ("mistral", "no calls [TOOL", "no calls [TOOL", []),
    ("mistral", '[TOOL_CALLS]get_weather[CALL_ID]a1B2c3D4e[ARGS]{"city": "Paris", "days": 3}', "",
     [("get_weather", ARGUMENTS)]),
    ("qwen3_coder", "Sure.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n"
                    "</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>",
     "Sure.\n", [("get_weather", ARGUMENTS)]),
    ("qwen3_coder", "<tool_call>\n<function=get_weather>\n<parameter=city>\n42\n</parameter>\n"
                    "<parameter=days>\n3", "", [("get_weather", {"city": "42", "days": 3})]),
    ("qwen3_coder", "<tool_call>\n<parameter=city>\nParis", "<tool_call>\n<parameter=city>\nParis",
     []),
    ("glm45", "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n"
              "<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n</tool_call>", "",
     [("get_weather", ARGUMENTS)]),
    ("glm45", "<tool_call>noop</tool_call>", "", [("noop", {})]),
]


@pytest.mark.parametrize("parser,text,content,calls", READS)
def test_each_format_reads_the_same_whole_and_in_pieces(parser, text, content, calls):
    for pieces in (len(text), 1, 3, 7):
        assert read(parser, text, pieces) == (content, calls), pieces


# The format each published template teaches (None: one dsserve does not read).
TAUGHT = {"Qwen-Qwen2.5-7B-Instruct.jinja": "hermes", "Qwen-Qwen3-0.6B.jinja": "hermes",
          "Qwen-QwQ-32B.jinja": "hermes", "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja": "hermes",
          "Qwen3.5-4B.jinja": "qwen3_coder", "GLM-4.7-Flash.jinja": "glm45",
          "meta-llama-Llama-3.3-70B-Instruct.jinja": "llama3_json",
          "meta-llama-Llama-3.2-3B-Instruct.jinja": "llama3_json",
          "mistralai-Mistral-Nemo-Instruct-2407.jinja": "mistral",
          "Mistral-Small-3.2-24B-Instruct-2506.jinja": "mistral",
          "microsoft-Phi-3.5-mini-instruct.jinja": None, "google-gemma-2-2b-it.jinja": None,
          "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja": None,
          # MiniMax's <invoke name=...> and functionary's <function=NAME>{...}: not read.
          "MiniMax-M3.jinja": None, "meetkai-functionary-medium-v3.1.jinja": None}


def source(name: str) -> str:
    return (TEMPLATES / name).read_text(encoding="utf-8")


def test_the_format_is_the_one_the_chat_template_teaches():
    assert sorted(TAUGHT) == sorted(p.name for p in TEMPLATES.glob("*.jinja"))
    for name, parser in TAUGHT.items():
        assert detect(source(name)) == parser, name


CALLED = {"id": "a1B2c3D4e", "type": "function",
          "function": {"name": "get_weather", "arguments": ARGUMENTS}}


def written(name: str, **variables) -> str:
    """The text of a call as the template writes it in an assistant turn: what its model
    learned to write after the generation prompt."""
    template = ChatTemplate(source(name), {"bos_token": "<s>", "eos_token": "</s>"})
    user = [{"role": "user", "content": "Weather in Paris?"}]
    prompt = template.render(user, add_generation_prompt=True, tools=TOOLS, **variables)
    turn = template.render(user + [{"role": "assistant", "content": "", "tool_calls": [CALLED]}],
                           add_generation_prompt=False, tools=TOOLS, **variables)
    common = len(os.path.commonprefix([prompt, turn]))
    if common < len(prompt):  # the generation prompt goes on past the turn's header
        common = max(turn.rfind("\n", 0, common), turn.rfind(">", 0, common)) + 1
    return turn[common:]


@pytest.mark.parametrize("name", [n for n, parser in TAUGHT.items() if parser])
def test_each_template_s_own_call_reads_back(name):
    """The independent reference: the template itself writes the call."""
    text = written(name)
    assert "get_weather" in text, text
    for pieces in (len(text), 1, 5):
        _, calls = read(TAUGHT[name], text, pieces)
        assert calls == [("get_weather", ARGUMENTS)], (pieces, text)


# Templates whose calls go through the server, each format once (Mistral's two forms).
SERVED = ["Qwen-Qwen3-0.6B.jinja", "Qwen3.5-4B.jinja", "GLM-4.7-Flash.jinja",
          "meta-llama-Llama-3.3-70B-Instruct.jinja", "mistralai-Mistral-Nemo-Instruct-2407.jinja",
          "Mistral-Small-3.2-24B-Instruct-2506.jinja"]


@pytest.fixture(scope="module")
def engine(long_plan):
    # The Llama fixture: 8192 positions, room for a template's tool prompt.
    pytest.importorskip("llguidance")  # the choice grammar that makes the model write a call
    loop = EngineLoop(long_plan)
    yield loop
    loop.close()


def chat(app, output: str, stream: bool = False, **body):
    """A chat request with the tools, whose output the model is made to write: `output`."""
    body = {"messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": TOOLS,
            "max_tokens": 200, "temperature": 0, "structured_outputs": {"choice": [output]},
            "stream": stream, **body}
    # The fixture has no tokenizer_config.json to give the templates these.
    body["chat_template_kwargs"] = {"bos_token": "<s>", "eos_token": "</s>", **QUIET,
                                    **body.get("chat_template_kwargs", {})}

    async def run():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://x") as client:
            if not stream:
                return await client.post("/v1/chat/completions", json=body)
            async with client.stream("POST", "/v1/chat/completions", json=body) as answer:
                assert answer.status_code == 200
                return [json.loads(line[6:]) async for line in answer.aiter_lines()
                        if line.startswith("data: {")]
    import asyncio
    return asyncio.run(run())


# Thinking off: where a template opens <think>, a grammar (the tests' way of making the
# model write a call) holds only after it is closed (test_reasoning.py).
QUIET = {"enable_thinking": False}


def spoken(name: str) -> str:
    """What the model writes for the call, without the end-of-turn text the template adds
    after it (the model's EOS token, which the engine does not put in the text)."""
    text = written(name, **QUIET)
    end = text.rfind("</tool_call>")
    return text[:max(text.rfind("}"), text.rfind("]"), end + len("</tool_call>") - 1 if end >= 0
                     else -1) + 1]


@pytest.mark.parametrize("name", SERVED)
def test_a_server_answers_the_calls_the_model_writes(engine, name):
    output = spoken(name)
    server = Server(engine, "m", 8, chat_template=source(name))
    assert server.tool_call_parser == TAUGHT[name]  # detected: no option given
    app = create_app(server)
    for choice in ({}, {"tool_choice": "auto"}):  # OpenAI's default with tools is "auto"
        answer = chat(app, output, **choice)
        assert answer.status_code == 200, answer.text
        (whole,) = answer.json()["choices"]
        assert whole["finish_reason"] == "tool_calls", whole
        message = whole["message"]
        assert message["content"] is None, message
        (call,) = message["tool_calls"]
        assert re.fullmatch("[A-Za-z0-9]{9}", call["id"]) and call["type"] == "function"
        assert call["function"]["name"] == "get_weather"
        assert json.loads(call["function"]["arguments"]) == ARGUMENTS

    # Streamed: the call whole, numbered, and nothing as content.
    chunks = [c["choices"][0] for c in chat(app, output, stream=True) if c["choices"]]
    calls = [call for c in chunks for call in c["delta"].get("tool_calls", [])]
    assert not "".join(c["delta"].get("content") or "" for c in chunks)
    assert [(c["index"], c["function"]["name"], json.loads(c["function"]["arguments"]))
            for c in calls] == [(0, "get_weather", ARGUMENTS)]
    assert chunks[-1]["finish_reason"] == "tool_calls"

    # A text answer stays text; a call cut off by max_tokens is answered as its text.
    answer = chat(app, "It is sunny.", chat_template_kwargs={"enable_thinking": False},
                  ).json()["choices"][0]
    assert answer["message"]["content"] == "It is sunny." and "tool_calls" not in answer["message"]
    assert answer["finish_reason"] == "stop"
    cut = chat(app, output, max_tokens=len(output) // 2).json()["choices"][0]
    assert cut["finish_reason"] == "length" and "tool_calls" not in cut["message"]


def test_text_before_a_call_is_content(engine):
    app = create_app(Server(engine, "m", 8, chat_template=source("Qwen-Qwen2.5-7B-Instruct.jinja")))
    output = "Checking.\n" + spoken("Qwen-Qwen2.5-7B-Instruct.jinja")
    message = chat(app, output).json()["choices"][0]["message"]
    assert message["content"] == "Checking.\n" and len(message["tool_calls"]) == 1
    chunks = [c["choices"][0] for c in chat(app, output, stream=True) if c["choices"]]
    assert "".join(c["delta"].get("content") or "" for c in chunks) == "Checking.\n"


def test_auto_without_a_format_is_refused_and_none_reads_nothing(engine):
    plain = "{% for m in messages %}{{ m['content'] }}\n{% endfor %}"
    app = create_app(Server(engine, "m", 8, chat_template=plain))
    answer = chat(app, "Hi", tool_choice="auto")
    assert answer.status_code == 400 and "--tool-call-parser" in answer.json()["error"]["message"]
    # Tools alone, and no format: free text, as before.
    assert chat(app, "Hi").json()["choices"][0]["message"]["content"] == "Hi"
    # Named on the server, the format is read with any template; "none" reads none.
    app = create_app(Server(engine, "m", 8, chat_template=plain, tool_call_parser="hermes"))
    output = f"<tool_call>{CALL}</tool_call>"
    assert chat(app, output).json()["choices"][0]["message"]["tool_calls"]
    message = chat(app, output, tool_choice="none").json()["choices"][0]["message"]
    assert message == {"role": "assistant", "content": output}
    assert Server(engine, "m", 8, chat_template=source("Qwen-Qwen2.5-7B-Instruct.jinja"),
                  tool_call_parser="none").tool_call_parser is None


def test_dsserve_flags(plan):
    import subprocess
    import sys
    # The fixture's template (Phi-3.5's) teaches no tool-call format: vLLM's flag that asks
    # for "auto" stops the server, naming the option that would give one.
    run = subprocess.run([sys.executable, "-m", "dsrt.server", plan, "--port", "1",
                          "--enable-auto-tool-choice"], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 2 and "--tool-call-parser" in run.stderr, run.stderr
    run = subprocess.run([sys.executable, "-m", "dsrt.server", plan, "--port", "1",
                          "--tool-call-parser", "nope"], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 2 and "hermes" in run.stderr, run.stderr


def test_parallel_tool_calls_false_answers_one_call(engine):
    app = create_app(Server(engine, "m", 8, chat_template=source("Qwen-Qwen2.5-7B-Instruct.jinja")))
    one = f"<tool_call>\n{CALL}\n</tool_call>"
    two = one + "\n" + one.replace("Paris", "Rome")
    message = chat(app, two).json()["choices"][0]["message"]
    assert len(message["tool_calls"]) == 2
    for stream in (False, True):
        answer = chat(app, two, stream=stream, parallel_tool_calls=False)
        if stream:
            calls = [t for c in answer if c["choices"] for t in
                     c["choices"][0]["delta"].get("tool_calls", [])]
        else:
            calls = answer.json()["choices"][0]["message"]["tool_calls"]
        assert [json.loads(c["function"]["arguments"]) for c in calls] == [ARGUMENTS], stream
    # "required": the grammar itself allows one call.
    jsonschema = pytest.importorskip("jsonschema")
    from dsrt.server_tools import ToolChoice
    listed = [{"name": "get_weather", "parameters": ARGUMENTS}] * 2
    for parallel, valid in ((True, 2), (False, 1)):
        schema = ToolChoice(TOOLS, "required", parallel=parallel).structured().json
        jsonschema.validate(listed[:valid], schema)
        if valid == 1:
            with pytest.raises(jsonschema.ValidationError):
                jsonschema.validate(listed, schema)
