"""OpenAI's Responses API (``POST /v1/responses``) over the chat path: the request becomes a
chat request (its input items the messages, its function tools the tools, ``text.format``
the structured output), and the chat output's reading (server_chat.py: the thinking, the
answer, the tool calls) becomes the response's output items, whole or as the API's stream
of typed events. Stateless, as vLLM is without a response store: ``previous_response_id``
and ``conversation`` are refused by name, and a client sends the conversation as input."""
from __future__ import annotations

import json
import time
import uuid
from typing import Any, Optional, Union

from pydantic import Field, StrictBool, StrictInt, StrictStr

from .protocol import ChatRequest, _Common


def _id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


class ResponsesRequest(_Common):
    input: Union[StrictStr, list[dict[str, Any]]]
    instructions: Optional[StrictStr] = None
    max_output_tokens: Optional[StrictInt] = Field(default=None, ge=1)
    tools: Optional[list[dict[str, Any]]] = None
    tool_choice: Union[StrictStr, dict[str, Any], None] = None
    parallel_tool_calls: StrictBool = True
    text: Optional[dict[str, Any]] = None
    reasoning: Optional[dict[str, Any]] = None  # effort: the template's own switch decides
    store: Optional[StrictBool] = None
    previous_response_id: Optional[StrictStr] = None
    conversation: Any = None
    background: Optional[StrictBool] = None
    metadata: Optional[dict[str, StrictStr]] = None
    chat_template_kwargs: Optional[dict[str, Any]] = None

    def unsupported(self) -> Optional[str]:
        if self.previous_response_id is not None or self.conversation is not None:
            return ("previous_response_id and conversation need stored responses, which "
                    "dsserve does not keep: send the conversation's items as input")
        if self.background:
            return "background responses are not supported"
        if self.n != 1:
            return "n is not a Responses API field: a response has one output"
        return super().unsupported()

    def chat(self) -> ChatRequest:
        """The chat request this asks for (ValueError naming what cannot be one)."""
        data = self.model_dump(exclude_none=True, exclude={
            "input", "instructions", "max_output_tokens", "tools", "tool_choice", "text",
            "reasoning", "store", "previous_response_id", "conversation", "background",
            "metadata", "stream", "stream_options"})
        data["messages"] = self.messages()
        data["max_tokens"] = self.max_output_tokens
        if self.tools is not None:
            data["tools"] = [_chat_tool(tool) for tool in self.tools]
        if self.tool_choice is not None:
            data["tool_choice"] = _chat_tool_choice(self.tool_choice)
        form = (self.text or {}).get("format")
        if form is not None:
            if not isinstance(form, dict) or form.get("type") not in (
                    "text", "json_object", "json_schema"):
                raise ValueError("text.format must be {\"type\": \"text\"}, \"json_object\" or "
                                 "\"json_schema\" with its schema")
            if form["type"] == "json_schema":
                data["response_format"] = {"type": "json_schema",
                                           "json_schema": {"schema": form.get("schema")}}
            elif form["type"] == "json_object":
                data["response_format"] = {"type": "json_object"}
        return ChatRequest.model_validate(data)

    def messages(self) -> list[dict[str, Any]]:
        messages: list[dict[str, Any]] = []
        if self.instructions:
            messages.append({"role": "system", "content": self.instructions})
        items = ([{"role": "user", "content": self.input}] if isinstance(self.input, str)
                 else self.input)
        for item in items:
            kind = item.get("type", "message" if "role" in item else None)
            if kind == "message":
                role = {"developer": "system"}.get(item.get("role"), item.get("role"))
                if role not in ("system", "user", "assistant"):
                    raise ValueError(f"an input message's role must be user, assistant, system "
                                     f"or developer, not {item.get('role')!r}")
                messages.append({"role": role, "content": _text(item.get("content"))})
            elif kind == "function_call":
                call = {"id": item.get("call_id"), "type": "function",
                        "function": {"name": item.get("name"),
                                     "arguments": item.get("arguments", "{}")}}
                if not isinstance(call["id"], str) or not isinstance(
                        call["function"]["name"], str):
                    raise ValueError("a function_call item needs its call_id and name")
                last = messages[-1] if messages else None
                if last and last["role"] == "assistant" and "tool_calls" in last:
                    last["tool_calls"].append(call)  # the calls of one turn, together
                else:
                    messages.append({"role": "assistant", "content": "", "tool_calls": [call]})
            elif kind == "function_call_output":
                output = item.get("output")
                messages.append({"role": "tool", "tool_call_id": item.get("call_id"),
                                 "content": output if isinstance(output, str) else
                                 _text(output)})
            elif kind == "reasoning":
                continue  # earlier thinking: chat templates drop it from the history
            else:
                raise ValueError(f"input items of type {kind!r} are not supported: message, "
                                 f"function_call, function_call_output and reasoning are")
        return messages


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise ValueError("a message's content must be text or a list of text parts")
    parts = []
    for part in content:
        if not isinstance(part, dict) or part.get("type") not in (
                "input_text", "output_text", "text") or not isinstance(part.get("text"), str):
            raise ValueError(f"only text content parts are supported, not "
                             f"{part.get('type') if isinstance(part, dict) else part!r}")
        parts.append(part["text"])
    return "".join(parts)


def _chat_tool(tool: Any) -> dict[str, Any]:
    if not isinstance(tool, dict) or tool.get("type") != "function":
        kind = tool.get("type") if isinstance(tool, dict) else tool
        raise ValueError(f"tools of type {kind!r} are not supported: dsserve runs no tools "
                         f"itself, the model calls function tools")
    return {"type": "function", "function": {
        key: tool[key] for key in ("name", "description", "parameters") if key in tool}}


def _chat_tool_choice(choice: Any) -> Any:
    if isinstance(choice, dict):
        if choice.get("type") != "function":
            raise ValueError("tool_choice must be \"auto\", \"none\", \"required\" or "
                             "{\"type\": \"function\", \"name\": ...}")
        return {"type": "function", "function": {"name": choice.get("name")}}
    return choice


class ResponseWriter:
    """One response's object and, for a stream, its events (each numbered) from the chat
    reader's deltas: reasoning text opens a reasoning item, answer text a message item, and
    each tool call is a function_call item."""

    def __init__(self, body: ResponsesRequest, model: str):
        self.body = body
        self.model = model
        self.id = _id("resp")
        self.created_at = int(time.time())
        self.output: list[dict[str, Any]] = []
        self.open: Optional[dict[str, Any]] = None  # the item text is going to
        self.sequence = 0

    def response(self, status: str, usage: Optional[dict] = None) -> dict[str, Any]:
        body = self.body
        return {
            "id": self.id, "object": "response", "created_at": self.created_at,
            "status": status,
            "error": ({"code": "server_error", "message": "the generation was cancelled (its "
                       "grammar failed, or the server is stopping)"} if status == "failed"
                      else None),
            "incomplete_details": ({"reason": "max_output_tokens"} if status == "incomplete"
                                   else None),
            "instructions": body.instructions, "max_output_tokens": body.max_output_tokens,
            "model": self.model, "output": self.output,
            "parallel_tool_calls": body.parallel_tool_calls,
            "temperature": body.temperature, "top_p": body.top_p,
            "tool_choice": body.tool_choice if body.tool_choice is not None else "auto",
            "tools": body.tools or [], "text": body.text or {"format": {"type": "text"}},
            "reasoning": body.reasoning, "store": False, "metadata": body.metadata or {},
            "usage": usage}

    @staticmethod
    def usage(chat_usage: dict) -> dict[str, Any]:
        return {"input_tokens": chat_usage["prompt_tokens"],
                "input_tokens_details": {
                    "cached_tokens": chat_usage["prompt_tokens_details"]["cached_tokens"],
                    "cache_write_tokens": 0},
                "output_tokens": chat_usage["completion_tokens"],
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": chat_usage["total_tokens"]}

    def event(self, kind: str, **fields) -> str:
        fields = {"type": kind, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        return f"event: {kind}\ndata: {json.dumps(fields, ensure_ascii=False)}\n\n"

    # -- a stream

    def start(self) -> list[str]:
        created = self.response("in_progress")
        return [self.event("response.created", response=created),
                self.event("response.in_progress", response=created)]

    def delta(self, delta: dict[str, Any]) -> list[str]:
        events = []
        if delta.get("reasoning_content"):
            events += self._text("reasoning", delta["reasoning_content"])
        if delta.get("content"):
            events += self._text("message", delta["content"])
        for call in delta.get("tool_calls", []):
            events += self._close()
            item = {"type": "function_call", "id": _id("fc"), "call_id": call["id"],
                    "name": call["function"]["name"], "arguments": "", "status": "in_progress"}
            index = len(self.output)
            self.output.append(item)
            arguments = call["function"]["arguments"]
            events.append(self.event("response.output_item.added", output_index=index,
                                     item=dict(item)))
            events.append(self.event("response.function_call_arguments.delta",
                                     item_id=item["id"], output_index=index, delta=arguments))
            item.update(arguments=arguments, status="completed")
            events.append(self.event("response.function_call_arguments.done",
                                     item_id=item["id"], output_index=index,
                                     arguments=arguments))
            events.append(self.event("response.output_item.done", output_index=index,
                                     item=item))
        return events

    def finish(self, finish: str, usage: dict) -> list[str]:
        events = self._close()
        status = _STATUS.get(finish, "completed")
        return events + [self.event(f"response.{status}", response=self.response(status, usage))]

    def _text(self, kind: str, text: str) -> list[str]:
        events = []
        if self.open is None or self.open["type"] != kind:
            events += self._close()
            part_kind = "reasoning_text" if kind == "reasoning" else "output_text"
            item = ({"type": "reasoning", "id": _id("rs"), "summary": [], "content": [],
                     "status": "in_progress"} if kind == "reasoning" else
                    {"type": "message", "id": _id("msg"), "role": "assistant", "content": [],
                     "status": "in_progress"})
            self.open = item
            self.output.append(item)
            index = len(self.output) - 1
            events.append(self.event("response.output_item.added", output_index=index,
                                     item=dict(item, content=[])))
            part = {"type": part_kind, "text": ""}
            if kind == "message":
                part.update(annotations=[], logprobs=[])
            item["content"].append(part)
            events.append(self.event("response.content_part.added", item_id=item["id"],
                                     output_index=index, content_index=0, part=dict(part)))
        item, index = self.open, len(self.output) - 1
        item["content"][0]["text"] += text
        if kind == "reasoning":
            events.append(self.event("response.reasoning_text.delta", item_id=item["id"],
                                     output_index=index, content_index=0, delta=text))
        else:
            events.append(self.event("response.output_text.delta", item_id=item["id"],
                                     output_index=index, content_index=0, delta=text,
                                     logprobs=[]))
        return events

    def _close(self) -> list[str]:
        item, self.open = self.open, None
        if item is None:
            return []
        index, part = self.output.index(item), item["content"][0]
        done = ("response.reasoning_text.done" if item["type"] == "reasoning"
                else "response.output_text.done")
        extra = {} if item["type"] == "reasoning" else {"logprobs": []}
        item["status"] = "completed"
        return [self.event(done, item_id=item["id"], output_index=index, content_index=0,
                           text=part["text"], **extra),
                self.event("response.content_part.done", item_id=item["id"],
                           output_index=index, content_index=0, part=part),
                self.event("response.output_item.done", output_index=index, item=item)]

    # -- a whole response

    def whole(self, message: dict[str, Any], finish: str, usage: dict) -> dict[str, Any]:
        self.delta({"reasoning_content": message.get("reasoning_content"),
                    "content": message.get("content") or (
                        None if message.get("tool_calls") or message.get("reasoning_content")
                        else ""),
                    "tool_calls": message.get("tool_calls") or []})
        if not self.output:  # an empty answer is still a message
            self._text("message", "")
        self._close()
        return self.response(_STATUS.get(finish, "completed"), usage)


# The chat finish reasons that do not complete a response ("stop" and "tool_calls" do).
_STATUS = {"length": "incomplete", "abort": "failed"}
