"""Tool calls read out of a model's own output (OpenAI's ``tool_choice: "auto"``), as vLLM's
``--tool-call-parser`` reads them: each family writes its calls in its own format, which its
chat template teaches it.

* ``hermes`` (Qwen 2.5 and 3, Hermes 2 and 3): ``<tool_call>{"name": ..., "arguments":
  {...}}</tool_call>``, any number, after the answer's text;
* ``llama3_json`` (Llama 3.1-3.3): the output is a JSON object ``{"name": ..., "parameters":
  {...}}`` (after ``<|python_tag|>`` or not), several separated by ``;``;
* ``mistral`` (Mistral's instruct models): ``[TOOL_CALLS]`` then a JSON list of ``{"name",
  "arguments"}``, or (tokenizers from v11) ``[TOOL_CALLS]name[ARGS]{...}`` per call.

``detect`` names the format a chat template teaches, so that a server given no option
parses what its model writes. ``ToolCallStream`` reads an output as it grows: the text
before the calls streams as content, each call goes out once it is whole, and an output that
turns out not to be a call (a JSON answer without a name, a call cut off by max_tokens) is
given back as content, so that a stream and a whole answer say the same."""
from __future__ import annotations

import json
import secrets
import string
from typing import Any, Optional

# A call's id: 9 letters and digits, which every template takes back in the next turn
# (Mistral's refuses any other; ids are opaque to OpenAI's clients). 62**9 of them.
_ID_CHARACTERS = string.ascii_letters + string.digits


def tool_call(name: str, arguments: str) -> dict[str, Any]:
    """An OpenAI tool call of `name` with `arguments` (a JSON object's text)."""
    return {"id": "".join(secrets.choice(_ID_CHARACTERS) for _ in range(9)),
            "type": "function", "function": {"name": name, "arguments": arguments}}


class NotACall(Exception):
    """What began like a call is not one: the output is content."""


_DECODER = json.JSONDecoder()


def _decode(text: str, at: int, final: bool) -> tuple[Optional[Any], int]:
    """The JSON value at `at` of `text` and where it ends; (None, at) where it does not
    parse yet (more tokens may complete it), or NotACall where the output has ended."""
    try:
        return _DECODER.raw_decode(text, at)
    except json.JSONDecodeError as error:
        if final:
            raise NotACall(str(error)) from None
        return None, at


def _call_of(value: Any, arguments_keys: tuple[str, ...]) -> tuple[str, str]:
    """(name, arguments as JSON text) of a decoded call, or NotACall."""
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        raise NotACall("not an object with a name")
    arguments: Any = {}
    for key in arguments_keys:
        if key in value:
            arguments = value[key]
            break
    if isinstance(arguments, str):  # some models write the arguments' JSON as a string
        try:
            arguments = json.loads(arguments)
        except ValueError:
            raise NotACall("arguments that are not JSON") from None
    if not isinstance(arguments, dict):
        raise NotACall("arguments that are not an object")
    return value["name"], json.dumps(arguments, ensure_ascii=False)


def _held(text: str, marker: str) -> int:
    """How many characters at the end of `text` could begin `marker`."""
    for length in range(min(len(marker) - 1, len(text)), 0, -1):
        if marker.startswith(text[-length:]):
            return length
    return 0


class ToolParser:
    name = ""
    # A call can only become whole with one of these characters: other tokens need no new
    # parse (each parse reads the calls from their start).
    closers = "}]"
    # vLLM keeps special tokens in the text of requests it parses for these formats: their
    # markers are special tokens in some tokenizers (Mistral's [TOOL_CALLS]).
    keeps_special_tokens = False

    def begin(self, text: str) -> tuple[Optional[int], int]:
        """Where the calls begin in `text` (None: not yet), and how much of the text before
        it is content whatever comes next."""
        raise NotImplementedError

    def calls(self, region: str, final: bool) -> list[tuple[str, str]]:
        """The calls whole in `region` (the text from where they begin): with `final`, the
        output has ended. NotACall where the region is not calls."""
        raise NotImplementedError


class _MarkedParser(ToolParser):
    """Calls that begin at a marker, anywhere in the output (text may come before)."""
    START = ""

    def begin(self, text):
        at = text.find(self.START)
        if at >= 0:
            return at, at
        return None, len(text) - _held(text, self.START)


class HermesParser(_MarkedParser):
    name = "hermes"
    closers = ">"
    keeps_special_tokens = True
    START, END = "<tool_call>", "</tool_call>"

    def calls(self, region, final):
        found, at = [], 0
        while region.startswith(self.START, at):
            end = region.find(self.END, at)
            body = region[at + len(self.START):end if end >= 0 else len(region)]
            if end < 0 and not final:
                break
            found.append(_call_of(json.loads(body) if _whole_json(body) else None,
                                  ("arguments", "parameters")))
            if end < 0:
                break
            # Text between calls (a newline) is not content: vLLM keeps only what precedes.
            at = region.find(self.START, end + len(self.END))
            if at < 0:
                break
        return found


def _whole_json(text: str) -> bool:
    try:
        json.loads(text)
        return True
    except ValueError:
        return False


class Llama3JsonParser(ToolParser):
    name = "llama3_json"
    TAG = "<|python_tag|>"

    def begin(self, text):
        stripped = text.lstrip()
        if not stripped or self.TAG.startswith(stripped):
            return None, 0  # undecided: held
        if stripped.startswith(("{", self.TAG)):
            at = len(text) - len(stripped)
            return at, at
        return None, len(text)  # a text answer: content to the end

    def calls(self, region, final):
        at = len(self.TAG) if region.startswith(self.TAG) else 0
        found = []
        while True:
            while at < len(region) and region[at] in " \t\r\n;":
                at += 1
            if at >= len(region):
                break
            value, end = _decode(region, at, final)
            if value is None:
                break
            found.append(_call_of(value, ("parameters", "arguments")))
            at = end
        return found


class MistralParser(_MarkedParser):
    name = "mistral"
    keeps_special_tokens = True
    START, ARGS = "[TOOL_CALLS]", "[ARGS]"

    def calls(self, region, final):
        body = region[len(self.START):].lstrip()
        if body.startswith("["):  # a JSON list of calls
            value, _ = _decode(body, 0, final)
            if value is None:
                return []
            if not isinstance(value, list):
                raise NotACall("not a list")
            return [_call_of(item, ("arguments", "parameters")) for item in value]
        found = []  # name[ARGS]{...}, each after its own [TOOL_CALLS]
        for piece in region.split(self.START)[1:]:
            name, marker, rest = piece.partition(self.ARGS)
            if not marker:
                if final or len(name) > 256:
                    raise NotACall("a call without [ARGS]")
                break
            value, _ = _decode(rest, len(rest) - len(rest.lstrip()), final)
            if value is None:
                break
            found.append(_call_of({"name": name.strip(), "arguments": value}, ("arguments",)))
        return found


PARSERS: dict[str, type[ToolParser]] = {
    parser.name: parser for parser in (HermesParser, Llama3JsonParser, MistralParser)}


def detect(template: Optional[str]) -> Optional[str]:
    """The format a chat template teaches its model to call tools in, or None."""
    if not template:
        return None
    if MistralParser.START in template:
        return MistralParser.name
    if HermesParser.START in template:
        return HermesParser.name
    if Llama3JsonParser.TAG in template:
        return Llama3JsonParser.name
    return None


class ToolCallStream:
    """One output read as it grows. ``feed`` and ``finish`` return (content, calls): the
    content text to send now and the calls (OpenAI's, with ids) whole since the last time."""

    def __init__(self, parser: ToolParser):
        self.parser = parser
        self.text = ""
        self.sent = 0             # of the text, this much went out as content
        self.start: Optional[int] = None  # where the calls begin
        self.calls_sent = 0
        self.content_only = False
        self.content = ""         # all content sent
        self.tool_calls: list[dict[str, Any]] = []  # all calls sent

    def feed(self, delta: str, final: bool = False) -> tuple[str, list[dict[str, Any]]]:
        self.text += delta
        if (self.start is not None and not self.content_only and not final
                and not any(c in delta for c in self.parser.closers)):
            return "", []
        if not self.content_only and self.start is None:
            start, certain = self.parser.begin(self.text)
            if start is None:
                return self._content(len(self.text) if final else certain), []
            self.start = start
            content = self._content(start)
        else:
            content = ""
        if self.content_only:
            return self._content(len(self.text)), []
        try:
            found = self.parser.calls(self.text[self.start:], final)
        except (NotACall, ValueError, RecursionError):  # JSON nested past Python's stack
            found = None
        if found is None or (final and not found):
            if self.calls_sent:  # calls went out: the rest is not a call, and not content
                return content, []
            # Not calls after all: what was held is the answer's text.
            self.content_only = True
            return content + self._content(len(self.text)), []
        new = [tool_call(name, arguments) for name, arguments in found[self.calls_sent:]]
        self.calls_sent = len(found)
        self.tool_calls += new
        return content, new

    def finish(self) -> tuple[str, list[dict[str, Any]]]:
        return self.feed("", final=True)

    def _content(self, end: int) -> str:
        out = self.text[self.sent:end]
        self.sent = max(self.sent, end)
        if self.start is not None and not self.content_only and not out.strip() \
                and not self.content:
            return ""  # only blanks before the calls: no content
        self.content += out
        return out
