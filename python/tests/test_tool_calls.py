"""Tool calls the model writes itself (tool_choice "auto", vLLM's --tool-call-parser): the
three formats read whole and token by token alike, the format detected from published chat
templates, and dsserve answering the calls of an output forced (by a choice grammar) to be
each format's call, through the template that teaches it."""
import json
import re
from pathlib import Path

import httpx
import pytest

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


def read(parser: str, text: str, pieces: int):
    """(content, [(name, arguments)]) of `text` fed in pieces of `pieces` characters."""
    reader = ToolCallStream(PARSERS[parser]())
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
]


@pytest.mark.parametrize("parser,text,content,calls", READS)
def test_each_format_reads_the_same_whole_and_in_pieces(parser, text, content, calls):
    for pieces in (len(text), 1, 3, 7):
        assert read(parser, text, pieces) == (content, calls), pieces


def test_the_format_is_the_one_the_chat_template_teaches():
    taught = {"Qwen-Qwen2.5-7B-Instruct.jinja": "hermes",
              "meta-llama-Llama-3.3-70B-Instruct.jinja": "llama3_json",
              "mistralai-Mistral-Nemo-Instruct-2407.jinja": "mistral",
              "microsoft-Phi-3.5-mini-instruct.jinja": None,
              "google-gemma-2-2b-it.jinja": None}
    for name, parser in taught.items():
        assert detect((TEMPLATES / name).read_text(encoding="utf-8")) == parser, name


# Each format's call, written by the model as its template shows it, with text before it
# where the format allows.
WRITTEN = [
    ("Qwen-Qwen2.5-7B-Instruct.jinja", "hermes", f"Checking.\n<tool_call>\n{CALL}\n</tool_call>",
     "Checking.\n"),
    ("meta-llama-Llama-3.3-70B-Instruct.jinja", "llama3_json",
     json.dumps({"name": "get_weather", "parameters": ARGUMENTS}), None),
    ("mistralai-Mistral-Nemo-Instruct-2407.jinja", "mistral",
     f"[TOOL_CALLS][{json.dumps({'name': 'get_weather', 'arguments': ARGUMENTS})}]", None),
]


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
            # The fixture has no tokenizer_config.json to give the templates these.
            "chat_template_kwargs": {"bos_token": "<s>", "eos_token": "</s>"},
            "stream": stream, **body}

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


@pytest.mark.parametrize("template,parser,output,content", WRITTEN)
def test_a_server_answers_the_calls_the_model_writes(engine, template, parser, output, content):
    source = (TEMPLATES / template).read_text(encoding="utf-8")
    server = Server(engine, "m", 8, chat_template=source)
    assert server.tool_call_parser == parser  # detected: no option given
    app = create_app(server)
    for choice in ({}, {"tool_choice": "auto"}):  # OpenAI's default with tools is "auto"
        answer = chat(app, output, **choice)
        assert answer.status_code == 200, answer.text
        (whole,) = answer.json()["choices"]
        assert whole["finish_reason"] == "tool_calls", whole
        message = whole["message"]
        assert message["content"] == content
        (call,) = message["tool_calls"]
        assert re.fullmatch("[A-Za-z0-9]{9}", call["id"]) and call["type"] == "function"
        assert call["function"]["name"] == "get_weather"
        assert json.loads(call["function"]["arguments"]) == ARGUMENTS

    # Streamed: the text before the call as content, then the call whole, numbered.
    chunks = [c["choices"][0] for c in chat(app, output, stream=True) if c["choices"]]
    streamed = "".join(c["delta"].get("content") or "" for c in chunks)
    calls = [call for c in chunks for call in c["delta"].get("tool_calls", [])]
    assert streamed == (content or "")
    assert [(c["index"], c["function"]["name"], json.loads(c["function"]["arguments"]))
            for c in calls] == [(0, "get_weather", ARGUMENTS)]
    assert chunks[-1]["finish_reason"] == "tool_calls"

    # A text answer stays text; a call cut off by max_tokens is answered as its text.
    answer = chat(app, "It is sunny.").json()["choices"][0]
    assert answer["message"] == {"role": "assistant", "content": "It is sunny."}
    assert answer["finish_reason"] == "stop"
    cut = chat(app, output, max_tokens=len(output) // 2).json()["choices"][0]
    assert cut["finish_reason"] == "length" and "tool_calls" not in cut["message"]
    assert output.startswith(cut["message"]["content"]) and cut["message"]["content"]


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
    source = (TEMPLATES / "Qwen-Qwen2.5-7B-Instruct.jinja").read_text(encoding="utf-8")
    assert Server(engine, "m", 8, chat_template=source,
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
