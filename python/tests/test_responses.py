"""OpenAI's Responses API (/v1/responses) through the openai client itself: its answers
validate as the client's own types, its text equals the chat route's for the same
conversation (greedy), its stream's events add up to its whole answer, and tool calls,
thinking, structured output and the refusals come as the API says."""
import asyncio
import json
from pathlib import Path

import httpx
import pytest

from conftest import asgi_post as post
from dsrt.engine import EngineLoop
from dsrt.server import create_app
from dsrt.server_state import Server

openai = pytest.importorskip("openai")
from openai.types.responses import Response  # noqa: E402

TEMPLATES = Path(__file__).parent / "chat_templates"
KWARGS = {"bos_token": "<s>", "eos_token": "</s>"}


@pytest.fixture(scope="module")
def engine(long_plan):
    loop = EngineLoop(long_plan)
    yield loop
    loop.close()


def app_for(engine, template="Qwen-Qwen2.5-7B-Instruct.jinja"):
    return create_app(Server(engine, "m", 8,
                             chat_template=(TEMPLATES / template).read_text(encoding="utf-8")))


def run(app, call):
    """`call(client)` with an AsyncOpenAI client talking to `app` in process."""
    async def go():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://x/v1") as http:
            client = openai.AsyncOpenAI(base_url="http://x/v1", api_key="k", http_client=http)
            return await call(client)
    return asyncio.run(go())


GREEDY = {"temperature": 0, "extra_body": {"chat_template_kwargs": KWARGS}}


def test_a_response_is_the_chat_answer_in_the_api_s_shape(engine):
    app = app_for(engine)
    answer = post(app, "/v1/responses", {"input": "Hi there", "max_output_tokens": 12,
                                         "temperature": 0, "chat_template_kwargs": KWARGS})
    assert answer.status_code == 200, answer.text
    response = Response.model_validate(answer.json())  # the client's own type, strictly
    chat = post(app, "/v1/chat/completions", {
        "messages": [{"role": "user", "content": "Hi there"}], "max_tokens": 12,
        "temperature": 0, "chat_template_kwargs": KWARGS}).json()
    assert response.output_text == chat["choices"][0]["message"]["content"]
    assert response.status == "incomplete" and response.incomplete_details.reason == (
        "max_output_tokens")  # the random-weight fixture runs to its limit
    assert response.usage.output_tokens == chat["usage"]["completion_tokens"] == 12
    assert response.usage.input_tokens == chat["usage"]["prompt_tokens"]
    assert response.id.startswith("resp_") and response.output[0].type == "message"


def test_the_stream_s_events_add_up_to_the_whole_response(engine):
    app = app_for(engine)

    async def both(client):
        whole = await client.responses.create(model="m", input="Hello", max_output_tokens=10,
                                              **GREEDY)
        events = [event async for event in await client.responses.create(
            model="m", input="Hello", max_output_tokens=10, stream=True, **GREEDY)]
        # The client's stream helper, which checks the events' order and identity. It
        # keeps get_final_response() for response.completed; this one ends incomplete.
        async with client.responses.stream(model="m", input="Hello", max_output_tokens=10,
                                           **GREEDY) as stream:
            final = [event async for event in stream][-1].response
        return whole, events, final
    whole, events, final = run(app, both)
    kinds = [event.type for event in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.incomplete"
    assert [event.sequence_number for event in events] == list(range(len(events)))
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == whole.output_text == final.output_text == events[-1].response.output_text
    done = next(e for e in events if e.type == "response.output_text.done")
    assert done.text == deltas


def test_input_items_are_the_conversation(engine):
    """instructions, a developer message, a function call and its output: the prompt the
    chat route renders for the same messages (greedy text equal)."""
    app = app_for(engine)
    call = {"type": "function_call", "call_id": "c1", "name": "get_weather",
            "arguments": json.dumps({"city": "Paris"})}
    items = [{"role": "developer", "content": "Be brief."},
             {"type": "message", "role": "user",
              "content": [{"type": "input_text", "text": "Weather in Paris?"}]},
             call, {"type": "function_call_output", "call_id": "c1", "output": "12 C"}]
    messages = [{"role": "system", "content": "You help."},
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Weather in Paris?"},
                {"role": "assistant", "content": "", "tool_calls": [{
                    "id": "c1", "type": "function",
                    "function": {"name": "get_weather", "arguments": call["arguments"]}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "12 C"}]
    response = post(app, "/v1/responses", {"instructions": "You help.", "input": items,
                                           "max_output_tokens": 8, "temperature": 0,
                                           "chat_template_kwargs": KWARGS}).json()
    chat = post(app, "/v1/chat/completions", {"messages": messages, "max_tokens": 8,
                                              "temperature": 0,
                                              "chat_template_kwargs": KWARGS}).json()
    assert Response.model_validate(response).output_text == (
        chat["choices"][0]["message"]["content"])
    assert response["usage"]["input_tokens"] == chat["usage"]["prompt_tokens"]


def test_tool_calls_thinking_and_json(engine):
    pytest.importorskip("llguidance")  # the choice grammar that makes the model write them
    tools = [{"type": "function", "name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]
    call = json.dumps({"name": "get_weather", "arguments": {"city": "Paris"}})
    output = f"<think>\nWeather: a tool.\n</think>\n\n<tool_call>\n{call}\n</tool_call>"
    app = app_for(engine, "Qwen-Qwen3-0.6B.jinja")
    body = {"input": "Weather in Paris?", "tools": tools, "temperature": 0,
            "max_output_tokens": 200, "structured_outputs": {"choice": [output]},
            "chat_template_kwargs": KWARGS}
    response = Response.model_validate(post(app, "/v1/responses", body).json())
    assert response.status == "completed"
    assert [item.type for item in response.output] == ["reasoning", "function_call"]
    assert response.output[0].content[0].text == "\nWeather: a tool.\n"
    function = response.output[1]
    assert (function.name, json.loads(function.arguments)) == ("get_weather", {"city": "Paris"})
    assert function.call_id and function.id.startswith("fc_")

    async def stream(client):
        return [event async for event in await client.responses.create(
            model="m", stream=True, **{k: v for k, v in body.items() if k in (
                "input", "tools", "temperature", "max_output_tokens")},
            extra_body={k: body[k] for k in ("structured_outputs", "chat_template_kwargs")})]
    events = run(app, stream)
    reasoning = "".join(e.delta for e in events if e.type == "response.reasoning_text.delta")
    arguments = [e.arguments for e in events if e.type == "response.function_call_arguments.done"]
    assert reasoning == "\nWeather: a tool.\n" and json.loads(arguments[0]) == {"city": "Paris"}
    assert events[-1].type == "response.completed"
    assert [i.type for i in events[-1].response.output] == ["reasoning", "function_call"]

    # text.format: a JSON schema's answer.
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"],
              "additionalProperties": False}
    compact = create_app(Server(engine, "m", 8, disable_any_whitespace=True, chat_template=(
        TEMPLATES / "Qwen-Qwen2.5-7B-Instruct.jinja").read_text(encoding="utf-8")))
    answer = post(compact, "/v1/responses", {
        "input": "A number", "max_output_tokens": 40, "temperature": 0,
        "chat_template_kwargs": KWARGS, "structured_outputs": None,
        "text": {"format": {"type": "json_schema", "name": "n", "schema": schema}}}).json()
    value = json.loads(Response.model_validate(answer).output_text)
    assert isinstance(value["a"], int) and set(value) == {"a"}


def test_what_a_stateless_server_cannot_do_is_refused_by_name(engine):
    app = app_for(engine)
    for body, words in [
            ({"previous_response_id": "resp_1"}, "previous_response_id"),
            ({"tools": [{"type": "web_search"}]}, "web_search"),
            ({"input": [{"role": "user", "content": [{"type": "input_image",
                                                      "image_url": "x"}]}]}, "input_image"),
            ({"input": [{"type": "computer_call"}]}, "computer_call"),
            ({"text": {"format": {"type": "xml"}}}, "text.format"),
            ({"background": True}, "background")]:
        answer = post(app, "/v1/responses", {"input": "Hi", **body})
        assert answer.status_code == 400 and words in answer.json()["error"]["message"], (
            body, answer.text)
