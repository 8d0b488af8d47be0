"""Tool calls read out of a model's own output (OpenAI's ``tool_choice: "auto"``), as vLLM's
``--tool-call-parser`` reads them: each family writes its calls in its own format, which its
chat template teaches it.

* ``hermes`` (Qwen 2.5 and 3, QwQ, Hermes 2 and 3, Granite 4): ``<tool_call>{"name": ...,
  "arguments": {...}}</tool_call>``, any number, after the answer's text;
* ``qwen3_coder`` (Qwen3-Coder, Qwen3.5, Nemotron 3): ``<tool_call><function=NAME>
  <parameter=KEY>value</parameter></function></tool_call>``, and ``glm45`` (GLM-4.5 to 4.7):
  ``<tool_call>NAME<arg_key>KEY</arg_key><arg_value>value</arg_value></tool_call>``, whose
  values are text, typed by the tool's parameter schema;
* ``llama3_json`` (Llama 3.1-3.3): the output is a JSON object ``{"name": ..., "parameters":
  {...}}`` (after ``<|python_tag|>`` or not), several separated by ``;``;
* ``mistral`` (Mistral's instruct models): ``[TOOL_CALLS]`` then a JSON list of ``{"name",
  "arguments"}``, or (tokenizers from v11) ``[TOOL_CALLS]name[ARGS]{...}`` per call
  (``name[CALL_ID]id[ARGS]{...}`` in Mistral Small 3.2).

``detect`` names the format a chat template teaches, so that a server given no option
parses what its model writes. ``ToolCallStream`` reads an output as it grows: the text
before the calls streams as content, each call goes out once it is whole, and an output that
turns out not to be a call (a JSON answer without a name, a call cut off by max_tokens) is
given back as content, so that a stream and a whole answer say the same."""
from __future__ import annotations

import ast
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


def held_tail(text: str, marker: str) -> int:
    """How many characters at the end of `text` could begin `marker`."""
    for length in range(min(len(marker) - 1, len(text)), 0, -1):
        if marker.startswith(text[-length:]):
            return length
    return 0


class ToolParser:
    """A format's reader; `schemas` are the request's tools' parameter schemas by name,
    for formats that write arguments as text."""
    name = ""
    # A call can only become whole with one of these characters: other tokens need no new
    # parse (each parse reads the calls from their start).
    closers = "}]"
    # vLLM keeps special tokens in the text of requests it parses for these formats: their
    # markers are special tokens in some tokenizers (Mistral's [TOOL_CALLS]).
    keeps_special_tokens = False

    def __init__(self, schemas: Optional[dict[str, dict]] = None):
        self.schemas = schemas or {}

    def begin(self, text: str, sent: int = 0) -> tuple[Optional[int], int]:
        """Where the calls begin in `text` (None: not yet), and how much of the text before
        it is content whatever comes next. The first `sent` characters went out as content
        already (what an earlier call said was), so no call begins there."""
        raise NotImplementedError

    def calls(self, region: str, final: bool) -> list[tuple[str, str]]:
        """The calls whole in `region` (the text from where they begin): with `final`, the
        output has ended. NotACall where the region is not calls."""
        raise NotImplementedError


class _MarkedParser(ToolParser):
    """Calls that begin at a marker, anywhere in the output (text may come before)."""
    START = ""

    def begin(self, text, sent=0):
        at = text.find(self.START, sent)  # each token's call reads only the new text
        if at >= 0:
            return at, at
        return None, len(text) - held_tail(text, self.START)


class _TaggedParser(_MarkedParser):
    """Calls each inside <tool_call>...</tool_call>, whole when the end tag comes (or the
    output ends); `call` reads one's body."""
    closers = ">"
    keeps_special_tokens = True
    START, END = "<tool_call>", "</tool_call>"

    def calls(self, region, final):
        found, at = [], 0
        while region.startswith(self.START, at):
            end = region.find(self.END, at)
            if end < 0 and not final:
                break
            found.append(self.call(region[at + len(self.START):end if end >= 0 else None]))
            if end < 0:
                break
            # Text between calls (a newline) is not content: vLLM keeps only what precedes.
            at = region.find(self.START, end + len(self.END))
            if at < 0:
                break
        return found

    def call(self, body: str) -> tuple[str, str]:
        raise NotImplementedError

    def typed(self, name: str, key: str, text: str) -> Any:
        """An argument written as text, as the function's schema types it (these formats
        write strings bare and other values as JSON or Python literals)."""
        kind = ((self.schemas.get(name) or {}).get("properties") or {}).get(key, {})
        kind = kind.get("type") if isinstance(kind, dict) else None
        if kind == "string":
            return text
        if text.strip().lower() == "null":
            return None
        if kind == "boolean" and text.strip().lower() in ("true", "false"):
            return text.strip().lower() == "true"
        try:
            return json.loads(text)
        except ValueError:
            pass
        try:
            return ast.literal_eval(text.strip())
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            return text


class HermesParser(_TaggedParser):
    """<tool_call>{"name": ..., "arguments": {...}}</tool_call>"""
    name = "hermes"

    def call(self, body):
        try:
            value = json.loads(body)
        except ValueError:
            raise NotACall("not JSON") from None
        return _call_of(value, ("arguments", "parameters"))


class Qwen3CoderParser(_TaggedParser):
    """<tool_call><function=NAME><parameter=KEY>value</parameter>...</function></tool_call>
    (Qwen3-Coder, Qwen3.5, Nemotron 3, Step 3.5)."""
    name = "qwen3_coder"

    def call(self, body):
        head = body.find("<function=")
        if head < 0:
            raise NotACall("no <function=")
        body = body[head + len("<function="):].split("</function>")[0]
        name, marker, rest = body.partition(">")
        if not marker or not name.strip():
            raise NotACall("a function without a name")
        name, arguments = name.strip(), {}
        for piece in rest.split("<parameter=")[1:]:
            key, marker, value = piece.partition(">")
            if not marker:
                raise NotACall("a parameter without a name")
            value = value.split("</parameter>")[0]
            # The format puts each value on its own lines.
            value = value[1:] if value.startswith("\n") else value
            value = value[:-1] if value.endswith("\n") else value
            arguments[key.strip()] = self.typed(name, key.strip(), value)
        return name, json.dumps(arguments, ensure_ascii=False)


class Glm45Parser(_TaggedParser):
    """<tool_call>NAME<arg_key>KEY</arg_key><arg_value>value</arg_value>...</tool_call>
    (GLM-4.5 to 4.7, Ling 3)."""
    name = "glm45"

    def call(self, body):
        name, _, rest = body.partition("<arg_key>")
        name = name.strip()
        if not name or "<" in name or "\n" in name:
            raise NotACall("a call without a name")
        arguments = {}
        for piece in ("<arg_key>" + rest).split("<arg_key>")[1:] if rest else []:
            key, marker, value = piece.partition("</arg_key>")
            value = value.split("<arg_value>", 1)[-1].split("</arg_value>")[0]
            if not marker:
                raise NotACall("an argument without its value")
            arguments[key.strip()] = self.typed(name, key.strip(), value)
        return name, json.dumps(arguments, ensure_ascii=False)


class Llama3JsonParser(ToolParser):
    name = "llama3_json"
    TAG = "<|python_tag|>"

    def begin(self, text, sent=0):
        if sent:
            return None, len(text)  # content went out: a text answer
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
            # Mistral Small 3.2 writes name[CALL_ID]id[ARGS]{...}.
            name = name.split("[CALL_ID]")[0].strip()
            found.append(_call_of({"name": name, "arguments": value}, ("arguments",)))
        return found


PARSERS: dict[str, type[ToolParser]] = {
    parser.name: parser for parser in (HermesParser, Qwen3CoderParser, Glm45Parser,
                                       Llama3JsonParser, MistralParser)}


def detect(template: Optional[str]) -> Optional[str]:
    """The format a chat template teaches its model to call tools in, or None: read from
    the markers it writes a call with."""
    if not template:
        return None
    if MistralParser.START in template:
        return MistralParser.name
    if _TaggedParser.START in template:
        if "<function=" in template and "<parameter=" in template:
            return Qwen3CoderParser.name
        if "<arg_key>" in template:
            return Glm45Parser.name
        # JSON inside the tags; not MiniMax's <invoke name=...> nor Apriel's <tool_calls>[...]
        if "arguments" in template and "<invoke" not in template and "<tool_calls>" not in template:
            return HermesParser.name
        return None
    if "<function=" in template:  # functionary's <function=NAME>{...}</function>
        return None
    if Llama3JsonParser.TAG in template or (
            "<|start_header_id|>" in template and '"parameters": ' in template):
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

    def feed(self, delta: str, final: bool = False, stopped: bool = True,
             ) -> tuple[str, list[dict[str, Any]]]:
        self.text += delta
        if (self.start is not None and not self.content_only and not final
                and not any(c in delta for c in self.parser.closers)):
            return "", []
        if not self.content_only and self.start is None:
            start, certain = self.parser.begin(self.text, self.sent)
            if start is None:
                # Blanks wait for what follows them: before a call they are no content.
                return self._content(len(self.text) if final else
                                     len(self.text[:certain].rstrip())), []
            self.start = start
            content = self._content(start)
        else:
            content = ""
        if self.content_only:
            return self._content(len(self.text)), []
        try:
            # An output cut off (max_tokens) has only its closed calls: an open one may lack
            # arguments that were still to come.
            found = self.parser.calls(self.text[self.start:], final and stopped)
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

    def finish(self, stopped: bool = True) -> tuple[str, list[dict[str, Any]]]:
        """The rest, the output having ended: `stopped` by the model, or cut off."""
        return self.feed("", final=True, stopped=stopped)

    def _content(self, end: int) -> str:
        out = self.text[self.sent:end]
        self.sent = max(self.sent, end)
        if self.start is not None and not self.content_only and not out.strip() \
                and not self.content:
            return ""  # only blanks before the calls: no content
        self.content += out
        return out
