"""Render HuggingFace chat templates the way ``transformers`` does.

``ChatTemplate(src).render(messages)`` returns the same string as
``tokenizer.apply_chat_template(messages, tokenize=False)`` for a tokenizer whose
``chat_template`` is ``src``. The Jinja environment below copies the one built by
``transformers.utils.chat_template_utils._compile_jinja_template`` (transformers 5.x);
any deviation changes the prompt the model sees, so keep them in lockstep.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

__all__ = ["ChatTemplate", "ChatTemplateError"]


class ChatTemplateError(ValueError):
    """A chat template could not be compiled or rendered.

    Raised for invalid ``messages``, Jinja syntax/runtime errors, and whenever a
    template calls ``raise_exception(msg)`` (``str(err) == msg`` in that case).
    """


def _raise_exception(message: str) -> None:
    # transformers raises jinja2.TemplateError here; we raise our own ValueError
    # subclass so callers can catch template refusals without importing jinja2.
    raise ChatTemplateError(message)


def _tojson(x: Any, ensure_ascii: bool = False, indent: int | None = None,
            separators: tuple[str, str] | None = None, sort_keys: bool = False) -> str:
    # Jinja's built-in tojson HTML-escapes <, >, &, ' and sorts keys; transformers
    # replaces it with plain json.dumps using exactly these defaults.
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent,
                      separators=separators, sort_keys=sort_keys)


def _strftime_now(format: str) -> str:  # noqa: A002 - name is part of the template API
    return datetime.now().strftime(format)


class _GenerationTag(jinja2.ext.Extension):
    # transformers registers an extension for {% generation %}...{% endgeneration %}
    # (used to build assistant-token masks). Without it such templates fail to
    # parse. Rendering goes through a CallBlock like theirs, so the body gets the
    # same scoping; we only skip the index tracking.
    tags = {"generation"}

    def parse(self, parser: jinja2.parser.Parser) -> jinja2.nodes.CallBlock:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller: Any) -> str:
        return caller()


def _environment() -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True,
        extensions=[_GenerationTag, jinja2.ext.loopcontrols],
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


def _check_messages(messages: Any) -> list:
    if not isinstance(messages, (list, tuple)):
        raise ChatTemplateError(
            f"messages must be a list of dicts, got {type(messages).__name__}")
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise ChatTemplateError(
                f"messages[{i}] must be a dict, got {type(message).__name__}")
        if not isinstance(message.get("role"), str):
            raise ChatTemplateError(f"messages[{i}] must have a str 'role' (got {message!r})")
    return list(messages)


def openai_messages(messages: Any) -> Any:
    """OpenAI's messages as chat templates read them (vLLM's reading, transformers'
    convention): an assistant message's tool-call arguments, a JSON string in OpenAI's
    protocol, become the dict the templates expect (Llama 3's and Qwen 2.5's write them
    with ``tojson``, which would quote a string again). Arguments that are not a JSON
    object's text stay as they are; the caller's messages are not changed."""
    if not isinstance(messages, (list, tuple)):
        return messages
    result = []
    for message in messages:
        if (isinstance(message, Mapping) and message.get("role") == "assistant"
                and isinstance(message.get("tool_calls"), list)):
            message = dict(message, tool_calls=[_parsed_call(call)
                                                for call in message["tool_calls"]])
        result.append(message)
    return result


def _parsed_call(call: Any) -> Any:
    function = call.get("function") if isinstance(call, Mapping) else None
    arguments = function.get("arguments") if isinstance(function, Mapping) else None
    if not isinstance(arguments, str):
        return call
    try:
        parsed = json.loads(arguments)
    except ValueError:
        return call
    if not isinstance(parsed, dict):
        return call
    return dict(call, function=dict(function, arguments=parsed))


def _open_final_message(rendered: str, messages: list[dict]) -> str:
    """`rendered` cut right after the final message's text, as transformers' apply_chat_template
    (continue_final_message=True) cuts it: templates close a message after its text (an
    end-of-turn token), which the model must not see when it is to go on with the text."""
    final = messages[-1].get("content") if messages else None
    if isinstance(final, (list, tuple)):  # content parts: the last one with text
        final = next((part["text"] for part in reversed(final)
                      if isinstance(part, Mapping) and "text" in part), None)
    if not isinstance(final, str):
        raise ChatTemplateError("continue_final_message: the final message has no text to "
                                "continue")
    if final.strip() not in rendered:
        raise ChatTemplateError("continue_final_message: the final message does not appear in "
                                "the rendered chat (the template changed it)")
    at = rendered.rindex(final.strip())
    # Where the template kept the text's trailing blanks, they stay; where it trimmed them,
    # the cut is after the text.
    if rendered[at:at + len(final.lstrip())] == final:
        return rendered[:at + len(final.lstrip())]
    return rendered[:at + len(final.strip())]


class ChatTemplate:
    """A compiled HuggingFace chat template (the ``chat_template`` string of a
    model's ``tokenizer_config.json`` or ``chat_template.jinja``).

    ``special_tokens`` are exposed to the template as variables, as transformers
    does with ``tokenizer.special_tokens_map``, e.g. ``{"bos_token": "<s>",
    "eos_token": "</s>"}``. Entries whose value is ``None`` are dropped so that
    ``bos_token is defined`` behaves as for a tokenizer without that token.
    """

    def __init__(self, source: str, special_tokens: dict[str, str] | None = None):
        if not isinstance(source, str):
            raise ChatTemplateError(f"template source must be a str, got {type(source).__name__}")
        self.source = source
        self.special_tokens = {k: v for k, v in (special_tokens or {}).items() if v is not None}
        try:
            self._template = _environment().from_string(source)
        except jinja2.TemplateError as e:
            raise ChatTemplateError(f"invalid chat template: {e}") from e

    def render(self, messages: list[dict], *, add_generation_prompt: bool = False,
               tools: list | None = None, documents: list | None = None,
               continue_final_message: bool = False, **extra: Any) -> str:
        """Render ``messages`` to the prompt string.

        Equivalent to ``apply_chat_template(messages, tokenize=False,
        add_generation_prompt=..., tools=..., documents=..., continue_final_message=...,
        **extra)``. ``tools`` must already be JSON-schema dicts (transformers also
        accepts Python functions; we do not). ``extra`` keys become template variables
        and override special tokens of the same name. ``continue_final_message`` leaves
        the last message open (the prompt ends with its text), for the model to go on
        with it: an answer begun for it ("prefill").
        """
        if continue_final_message and add_generation_prompt:
            raise ChatTemplateError("continue_final_message and add_generation_prompt are not "
                                    "compatible: the first continues the final message, the "
                                    "second begins a new assistant message")
        rendered = self._render(messages, add_generation_prompt, tools, documents, extra)
        return _open_final_message(rendered, messages) if continue_final_message else rendered

    def _render(self, messages, add_generation_prompt, tools, documents, extra) -> str:
        messages = _check_messages(messages)
        if tools is not None and not all(isinstance(t, Mapping) for t in tools):
            raise ChatTemplateError("tools must be a list of JSON-schema dicts")
        if documents is not None and not all(isinstance(d, Mapping) for d in documents):
            raise ChatTemplateError("documents must be a list of dicts with 'title' and 'text' keys")
        # Same merge order as transformers: explicit kwargs win over special tokens.
        variables = {**self.special_tokens, **extra}
        try:
            return self._template.render(
                messages=messages, tools=tools, documents=documents,
                add_generation_prompt=add_generation_prompt, **variables)
        except (jinja2.TemplateError, TypeError) as e:
            # TypeError: the template's own operations on what it was given (a content that
            # is not a string, concatenated), which transformers lets out as it is.
            raise ChatTemplateError(f"chat template failed to render: {e}") from e
