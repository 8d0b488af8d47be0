"""A reasoning model's thinking read apart from its answer (vLLM's ``--reasoning-parser``):
DeepSeek-R1 and its distillations, QwQ and Qwen3 think inside ``<think>...</think>`` before
they answer, and a chat answer carries the thinking as ``reasoning_content`` (DeepSeek's API
name, which clients read) and ``reasoning`` (vLLM's newer one), the rest as ``content``.

Where the thinking begins is read from the prompt as well as the output: templates that
open ``<think>`` in the generation prompt (DeepSeek-R1-0528, QwQ, Qwen3's thinking models)
make the model start inside it, and a Qwen3 prompt rendered with ``enable_thinking=False``
closes an empty one, so that the output is all answer. ``deepseek_r1`` takes the output as
thinking until ``</think>`` whatever the prompt, as vLLM's parser of that name does."""
from __future__ import annotations

from typing import Optional

from .tool_parsers import held_tail

START, END = "<think>", "</think>"
PARSERS = ("deepseek_r1", "qwen3")


def detect(template: Optional[str]) -> Optional[str]:
    """The reasoning format a chat template knows, or None: its templates strip the thinking
    of earlier turns, so they name the closing tag."""
    return "qwen3" if template and END in template else None


def opens_thinking(prompt: str) -> bool:
    """Whether the rendered prompt leaves a <think> open: the output starts inside it."""
    return prompt.rfind(START) > prompt.rfind(END)


class ReasoningStream:
    """One output read as it grows: ``feed`` and ``finish`` return (reasoning, content) to
    send now. Text that could begin a tag waits until it cannot."""

    def __init__(self, parser: str, prompt: str):
        self.state = "reasoning" if parser == "deepseek_r1" or opens_thinking(prompt) else "start"
        self.pending = ""  # text not yet sent
        self.reasoning = ""  # all reasoning sent

    def feed(self, delta: str, final: bool = False) -> tuple[str, str]:
        self.pending += delta
        reasoning = content = ""
        if self.state == "start":
            head = self.pending.lstrip()
            if head.startswith(START):
                self.state, self.pending = "reasoning", head[len(START):]
            elif final or not START.startswith(head):
                self.state = "content"
            # else: held, it may still be <think>
        if self.state == "reasoning":
            end = self.pending.find(END)
            if end >= 0:
                reasoning = self.pending[:end]
                self.state, self.pending = "content", self.pending[end + len(END):]
            else:
                keep = 0 if final else held_tail(self.pending, END)
                reasoning = self.pending[:len(self.pending) - keep]
                self.pending = self.pending[len(self.pending) - keep:]
        if self.state == "content":
            content, self.pending = self.pending, ""
        self.reasoning += reasoning
        return reasoning, content

    def finish(self) -> tuple[str, str]:
        return self.feed("", final=True)
