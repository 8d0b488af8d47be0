"""A reasoning model's thinking answered apart from its answer (vLLM's --reasoning-parser):
the reading in pieces equals the whole one, where the thinking begins follows the rendered
prompt of published templates, and dsserve answers reasoning_content and content, whole and
streamed alike, also before a tool call."""
import json
from pathlib import Path

import httpx
import pytest

from dsrt.chat import ChatTemplate
from dsrt.engine import EngineLoop
from dsrt.reasoning import ReasoningStream, detect, opens_thinking
from dsrt.server import create_app
from dsrt.server_state import Server

TEMPLATES = Path(__file__).parent / "chat_templates"
USER = [{"role": "user", "content": "2 + 2?"}]

READS = [
    # (parser, prompt, output, reasoning, content)
    ("qwen3", "", "<think>\nAdd them.\n</think>\n\nIt is 4.", "\nAdd them.\n", "\n\nIt is 4."),
    ("qwen3", "", "It is 4.", "", "It is 4."),
    ("qwen3", "", "  <thi", "", "  <thi"),
    ("qwen3", "", "<think>\nStill thinking wh", "\nStill thinking wh", ""),
    ("qwen3", "<|im_start|>assistant\n<think>\n", "Add them.\n</think>\n\nIt is 4.",
     "Add them.\n", "\n\nIt is 4."),
    ("qwen3", "<think>\n\n</think>\n\n", "It is 4. </think> is a tag", "",
     "It is 4. </think> is a tag"),
    ("deepseek_r1", "", "Add them.\n</think>\n\nIt is 4.", "Add them.\n", "\n\nIt is 4."),
    ("deepseek_r1", "", "Add them, and", "Add them, and", ""),
]


def read(parser, prompt, text, pieces):
    stream = ReasoningStream(parser, prompt)
    reasoning = content = ""
    for at in range(0, len(text), pieces):
        r, c = stream.feed(text[at:at + pieces])
        reasoning, content = reasoning + r, content + c
    r, c = stream.finish()
    return reasoning + r, content + c


@pytest.mark.parametrize("parser,prompt,text,reasoning,content", READS)
def test_reading_in_pieces_equals_the_whole(parser, prompt, text, reasoning, content):
    for pieces in (len(text) or 1, 1, 2, 5):
        assert read(parser, prompt, text, pieces) == (reasoning, content), pieces


def render(name, **variables):
    template = ChatTemplate((TEMPLATES / name).read_text(encoding="utf-8"),
                            {"bos_token": "<s>", "eos_token": "</s>"})
    return template.render(USER, add_generation_prompt=True, **variables)


def test_where_thinking_begins_follows_the_prompt():
    assert detect((TEMPLATES / "Qwen-Qwen3-0.6B.jinja").read_text()) == "qwen3"
    assert detect((TEMPLATES / "Qwen-Qwen2.5-7B-Instruct.jinja").read_text()) is None
    # Qwen3 lets the model open <think> itself, and closes an empty one when thinking is off.
    assert not opens_thinking(render("Qwen-Qwen3-0.6B.jinja"))
    assert not opens_thinking(render("Qwen-Qwen3-0.6B.jinja", enable_thinking=False))
    # Qwen3.5, QwQ and DeepSeek-R1 open it in the generation prompt.
    assert opens_thinking(render("Qwen3.5-4B.jinja"))
    assert not opens_thinking(render("Qwen3.5-4B.jinja", enable_thinking=False))
    assert opens_thinking(render("Qwen-QwQ-32B.jinja", enable_thinking=True))
    assert opens_thinking(render("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja",
                                 enable_thinking=True))


@pytest.fixture(scope="module")
def engine(long_plan):
    pytest.importorskip("llguidance")  # the choice grammar that makes the model write it
    loop = EngineLoop(long_plan)
    yield loop
    loop.close()


def chat(app, output, stream=False, **body):
    body = {"messages": USER, "max_tokens": 200, "temperature": 0,
            "structured_outputs": {"choice": [output]}, "stream": stream, **body}
    body["chat_template_kwargs"] = {"bos_token": "<s>", "eos_token": "</s>",
                                    **body.get("chat_template_kwargs", {})}

    async def run():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://x") as client:
            if not stream:
                answer = await client.post("/v1/chat/completions", json=body)
                assert answer.status_code == 200, answer.text
                return answer.json()["choices"][0]
            async with client.stream("POST", "/v1/chat/completions", json=body) as answer:
                chunks = [json.loads(line[6:]) async for line in answer.aiter_lines()
                          if line.startswith("data: {")]
            deltas = [c["choices"][0] for c in chunks if c["choices"]]
            return ("".join(d["delta"].get("reasoning_content") or "" for d in deltas),
                    "".join(d["delta"].get("content") or "" for d in deltas),
                    [t for d in deltas for t in d["delta"].get("tool_calls", [])],
                    deltas[-1]["finish_reason"])
    import asyncio
    return asyncio.run(run())


CASES = [
    # (template variables, output, reasoning, content): Qwen3's model opens <think> itself.
    ({}, "<think>\nAdd them.\n</think>\n\nIt is 4.", "\nAdd them.\n", "\n\nIt is 4."),
    ({"enable_thinking": False}, "It is 4.", None, "It is 4."),
]


@pytest.mark.parametrize("variables,output,reasoning,content", CASES)
def test_a_server_answers_the_thinking_apart(engine, variables, output, reasoning, content):
    server = Server(engine, "m", 8, chat_template=(TEMPLATES / "Qwen-Qwen3-0.6B.jinja").read_text(
        encoding="utf-8"))
    assert server.reasoning_parser == "qwen3"  # detected: no option given
    app = create_app(server)
    whole = chat(app, output, chat_template_kwargs=variables)
    message = whole["message"]
    assert message.get("reasoning_content") == reasoning and message.get("reasoning") == reasoning
    assert message["content"] == content and whole["finish_reason"] == "stop"
    assert chat(app, output, stream=True, chat_template_kwargs=variables) == (
        reasoning or "", content, [], "stop")


@pytest.mark.parametrize("name,variables", [
    ("Qwen3.5-4B.jinja", {}),
    ("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", {"enable_thinking": True})])
def test_an_output_that_starts_inside_the_thinking_is_reasoning(engine, name, variables):
    """Where the prompt opens <think>, the output is thinking until </think>, which the
    random-weight fixture does not write: its free greedy text, read with no parser, is all
    reasoning_content."""
    source = (TEMPLATES / name).read_text(encoding="utf-8")
    body = {"chat_template_kwargs": variables, "structured_outputs": None, "max_tokens": 24}
    raw = chat(create_app(Server(engine, "m", 8, chat_template=source, reasoning_parser="none")),
               "", **body)["message"]["content"]
    app = create_app(Server(engine, "m", 8, chat_template=source))
    message = chat(app, "", **body)["message"]
    assert raw and "</think>" not in raw
    assert message["reasoning_content"] == raw and message["content"] is None
    assert chat(app, "", stream=True, **body)[:2] == (raw, "")


def test_thinking_before_a_tool_call_and_the_parser_options(engine):
    source = (TEMPLATES / "Qwen-Qwen3-0.6B.jinja").read_text(encoding="utf-8")
    app = create_app(Server(engine, "m", 8, chat_template=source))
    call = json.dumps({"name": "get_time", "arguments": {"zone": "UTC"}})
    output = f"<think>\nI need the time.\n</think>\n\n<tool_call>\n{call}\n</tool_call>"
    tools = [{"type": "function", "function": {"name": "get_time", "parameters": {
        "type": "object", "properties": {"zone": {"type": "string"}}}}}]
    whole = chat(app, output, tools=tools)
    assert whole["finish_reason"] == "tool_calls"
    message = whole["message"]
    assert message["reasoning_content"] == "\nI need the time.\n" and message["content"] is None
    assert [(t["function"]["name"], json.loads(t["function"]["arguments"]))
            for t in message["tool_calls"]] == [("get_time", {"zone": "UTC"})]
    reasoning, content, calls, finish = chat(app, output, stream=True, tools=tools)
    assert (reasoning, content, finish) == ("\nI need the time.\n", "", "tool_calls")
    assert [(t["index"], t["function"]["name"]) for t in calls] == [(0, "get_time")]
    # The same free output: Qwen3's reading (no <think> at its start) answers it as
    # content, deepseek_r1's as thinking whatever the prompt, none reads nothing.
    body = {"structured_outputs": None, "max_tokens": 16}
    raw = chat(create_app(Server(engine, "m", 8, chat_template=source, reasoning_parser="none")),
               "", **body)["message"]
    assert "reasoning_content" not in raw and not raw["content"].startswith("<think>")
    assert chat(app, "", **body)["message"] == raw
    app = create_app(Server(engine, "m", 8, chat_template=source, reasoning_parser="deepseek_r1"))
    message = chat(app, "", **body)["message"]
    assert message["reasoning_content"] == raw["content"] and message["content"] is None
