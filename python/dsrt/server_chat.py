"""One chat choice's output as OpenAI's answer: its stream's deltas or its whole message,
with the thinking of a reasoning model apart (reasoning.py), the model's own tool calls
read out (tool_parsers.py), or a forced call (server_tools.py)."""
from __future__ import annotations

from typing import Any, Optional

from .reasoning import ReasoningStream
from .server_tools import ToolChoice
from .tool_parsers import ToolCallStream


class ChoiceReader:
    def __init__(self, tools: ToolChoice, reasoning_parser: Optional[str], prompt: str,
                 parallel_tool_calls: bool = True):
        self.tools = tools
        self.most_calls = None if parallel_tool_calls else 1
        self.forced = tools.mode in ("named", "required")
        # None where there is no thinking to read (the server's Server.thinking).
        self.thinking = ReasoningStream(reasoning_parser, prompt) if reasoning_parser else None
        self.calls = ToolCallStream(tools.parser) if tools.mode == "auto" else None
        self.text = ""  # a forced call's text, answered whole at its end

    def delta(self, text: str, finish: Optional[str], streamed: bool = True,
              ) -> tuple[dict[str, Any], Optional[str]]:
        """What `text`, new output, adds to the answer (finish: the output ended with it),
        and the choice's finish reason."""
        delta: dict[str, Any] = {}
        content = text
        if self.thinking:
            reasoning, content = self.thinking.feed(text)
            if finish:
                more_reasoning, more_content = self.thinking.finish()
                reasoning, content = reasoning + more_reasoning, content + more_content
            if reasoning:  # DeepSeek's name, which clients read, and vLLM's newer one
                delta["reasoning_content"] = delta["reasoning"] = reasoning
        if self.forced:
            self.text += content
            if not finish:
                return delta, None
            message, finish = self.tools.message(self.text, finish, streamed)
            del message["role"]
            return {**delta, **message}, finish
        if self.calls:
            content, calls = self.calls.feed(content)
            if finish:
                more_content, more_calls = self.calls.finish(stopped=finish == "stop")
                content, calls = content + more_content, calls + more_calls
            first = len(self.calls.tool_calls) - len(calls)
            if self.most_calls is not None:  # parallel_tool_calls false: the first call only
                calls = calls[:max(0, self.most_calls - first)]
            if calls:
                delta["tool_calls"] = ([dict(call, index=first + k)
                                        for k, call in enumerate(calls)] if streamed else calls)
            if self.calls.tool_calls and finish == "stop":
                finish = "tool_calls"  # the model's own calls end its turn, as OpenAI says
        if content:
            delta["content"] = content
        return delta, finish

    def message(self, text: str, finish: str) -> tuple[dict[str, Any], str]:
        """The whole answer's message for the whole output."""
        delta, finish = self.delta(text, finish, streamed=False)
        message = {"role": "assistant", **delta}
        if "tool_calls" in message:
            if not (message.get("content") or "").strip():
                message["content"] = None  # only blanks before the calls
        elif "reasoning_content" in message and not message.get("content"):
            message["content"] = None  # all thinking (vLLM's answer too)
        else:
            message.setdefault("content", "")
        return message, finish
