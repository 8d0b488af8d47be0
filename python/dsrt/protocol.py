"""The OpenAI protocol's request bodies (validated by pydantic) and response shapes, as
``dsserve`` speaks them. Fields OpenAI has and dsrt cannot honour are refused by name
rather than ignored; vLLM's extensions (``top_k``, ``min_p``, ``repetition_penalty``,
``ignore_eos``, ``chat_template_kwargs``, ``structured_outputs`` and the ``guided_*`` fields
before it) are taken."""
from __future__ import annotations

import time
import uuid
from typing import Any, Literal, Optional, Union

from pydantic import (BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr,
                      field_validator)

from .server_tools import ToolChoice
from .structured import StructuredOutputsParams

Number = Union[StrictInt, StrictFloat]


class StreamOptions(BaseModel):
    include_usage: StrictBool = False
    # vLLM's: with include_usage, every chunk carries the usage so far.
    continuous_usage_stats: StrictBool = False


class _Common(BaseModel):
    # Unknown fields are ignored, as OpenAI's server does; known ones must have their type.
    model_config = ConfigDict(extra="allow")
    model: Optional[StrictStr] = None
    temperature: Optional[Number] = Field(default=None, ge=0, le=2)
    top_p: Optional[Number] = Field(default=None, gt=0, le=1)
    top_k: Optional[StrictInt] = Field(default=None, ge=-1)
    # vLLM's bounds (a 64-bit signed integer): the engine takes the seed's 64 bits, so a
    # larger one would have shared its stream with another.
    seed: Optional[StrictInt] = Field(default=None, ge=-2 ** 63, le=2 ** 63 - 1)
    stop: Union[StrictStr, list[StrictStr], None] = None
    # Choices per prompt: each its own engine request (the prompt's blocks shared by the
    # prefix cache). A bound, so that one body cannot queue thousands of requests.
    n: StrictInt = Field(default=1, ge=1, le=64)
    best_of: Optional[StrictInt] = None
    stream: StrictBool = False
    stream_options: Optional[StreamOptions] = None
    ignore_eos: StrictBool = False
    presence_penalty: Optional[Number] = Field(default=None, ge=-2, le=2)
    frequency_penalty: Optional[Number] = Field(default=None, ge=-2, le=2)
    repetition_penalty: Optional[Number] = Field(default=None, gt=0)
    min_p: Optional[Number] = Field(default=None, ge=0, le=1)
    # OpenAI's: token id (JSON keys are strings) to a bias in [-100, 100].
    logit_bias: Optional[dict[str, Number]] = None
    # vLLM's: more tokens that stop, and whether special tokens are left out of the text.
    stop_token_ids: Optional[list[StrictInt]] = None
    min_tokens: StrictInt = Field(default=0, ge=0)
    include_stop_str_in_output: StrictBool = False
    skip_special_tokens: StrictBool = True
    # OpenAI's structured output ({"type": "json_object"} or "json_schema"), llama.cpp's
    # (grammar, json_schema), and vLLM's
    # (structured_outputs: {"json" | "regex" | "choice" | "grammar" | "json_object": ...},
    # and its earlier guided_json, guided_regex, guided_choice, guided_grammar).
    response_format: Optional[dict[str, Any]] = None
    structured_outputs: Optional[dict[str, Any]] = None
    guided_json: Union[StrictStr, dict[str, Any], None] = None
    guided_regex: Optional[StrictStr] = None
    guided_choice: Optional[list[StrictStr]] = None
    guided_grammar: Optional[StrictStr] = None
    # llama.cpp's server's extensions: a GBNF grammar, a JSON schema.
    grammar: Optional[StrictStr] = None
    json_schema: Optional[dict[str, Any]] = None
    # vLLM's: only these token ids may be drawn; these words may not be written.
    allowed_token_ids: Optional[list[StrictInt]] = None
    bad_words: Optional[list[StrictStr]] = None
    # vLLM's: only the prompt's last k tokens are kept; -1 keeps the context's length.
    truncate_prompt_tokens: Optional[StrictInt] = Field(default=None, ge=-1)
    # vLLM's: logprobs name their tokens "token_id:N" (None: the server's default).
    return_tokens_as_token_ids: Optional[StrictBool] = None
    # vLLM's: each choice's token_ids, and the prompt's (prompt_token_ids: per choice for
    # completions, the response's for chat), in the answer.
    return_token_ids: Optional[StrictBool] = None
    # vLLM's beam search: n beams, the best n answered (not streamed).
    use_beam_search: StrictBool = False
    length_penalty: Number = 1.0
    # vLLM's: lower is scheduled first, under --scheduling-policy priority.
    priority: StrictInt = Field(default=0, ge=-2 ** 31, le=2 ** 31 - 1)
    user: Optional[StrictStr] = None

    def structured(self) -> Optional[StructuredOutputsParams]:
        """The grammar the output must follow, if the body asks for one (ValueError naming
        what is wrong otherwise)."""
        asked = []
        kind = (self.response_format or {}).get("type", "text")
        if kind == "json_object":
            asked.append(StructuredOutputsParams(json_object=True))
        elif kind == "json_schema":
            spec = self.response_format.get("json_schema")
            schema = spec.get("schema") if isinstance(spec, dict) else None
            if not isinstance(schema, dict):
                raise ValueError("response_format json_schema needs json_schema.schema, a "
                                 "JSON schema object")
            asked.append(StructuredOutputsParams(json=schema))
        elif kind != "text":
            raise ValueError(f"response_format type must be text, json_object or "
                             f"json_schema, not {kind!r}")
        if self.structured_outputs is not None:
            known = {"json", "regex", "choice", "grammar", "json_object",
                     "disable_any_whitespace"}
            unknown = sorted(set(self.structured_outputs) - known)
            if unknown:
                raise ValueError(f"structured_outputs takes {sorted(known)}, not {unknown}")
            asked.append(StructuredOutputsParams(**self.structured_outputs))
        guided = {name: getattr(self, "guided_" + name)
                  for name in ("json", "regex", "choice", "grammar")
                  if getattr(self, "guided_" + name) is not None}
        if guided:
            asked.append(StructuredOutputsParams(**guided))
        if self.grammar is not None:
            asked.append(StructuredOutputsParams(grammar=self.grammar))
        if self.json_schema is not None:
            asked.append(StructuredOutputsParams(json=self.json_schema))
        if len(asked) > 1:
            raise ValueError("ask for one structured output: response_format, "
                             "structured_outputs, a guided_* field, grammar or json_schema")
        return asked[0] if asked else None

    def unsupported(self) -> Optional[str]:
        """The first field asked of dsrt that it does not do, as an error message."""
        if self.best_of is not None and self.best_of != self.n:
            return ("best_of is not supported: dsrt returns the n choices it samples "
                    "(best_of must be absent or equal n)")
        for token in self.logit_bias or {}:
            if not token.lstrip("-").isdigit():
                return f"logit_bias keys must be token ids, not {token!r}"
        return None


class CompletionRequest(_Common):
    prompt: Union[StrictStr, list[StrictStr], list[StrictInt], list[list[StrictInt]]]
    # 0 only with echo: the prompt scored, nothing generated (server.py).
    max_tokens: Optional[StrictInt] = Field(default=16, ge=0)
    logprobs: Optional[StrictInt] = Field(default=None, ge=0, le=20)
    echo: StrictBool = False
    suffix: Optional[StrictStr] = None

    @field_validator("max_tokens", mode="before")
    @classmethod
    def _null_is_the_default(cls, value):
        # OpenAI's completions default, which vLLM also gives a null max_tokens (it once
        # read null as the rest of the context, as chat still does).
        return 16 if value is None else value

    def unsupported(self) -> Optional[str]:
        if self.suffix:
            return "suffix is not supported"
        return super().unsupported()


class TextPart(BaseModel):
    type: Literal["text"]
    text: StrictStr


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: StrictStr
    content: Union[StrictStr, list[TextPart], None] = None

    def for_template(self) -> dict[str, Any]:
        message = self.model_dump(exclude_none=True)
        if isinstance(self.content, list):
            message["content"] = "".join(part.text for part in self.content)
        return message


class ChatRequest(_Common):
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: Optional[StrictInt] = Field(default=None, ge=1)
    max_completion_tokens: Optional[StrictInt] = Field(default=None, ge=1)
    logprobs: StrictBool = False
    top_logprobs: Optional[StrictInt] = Field(default=None, ge=0, le=20)
    tools: Optional[list[dict[str, Any]]] = None
    # "required" or a named function force tool calls; "auto" (the default with tools) reads
    # the model's own calls where the server has a tool-call parser (server_tools.py).
    tool_choice: Union[StrictStr, dict[str, Any], None] = None
    # False: at most one call is answered (the first), as OpenAI's and vLLM's.
    parallel_tool_calls: StrictBool = True
    add_generation_prompt: StrictBool = True
    # vLLM's: the last message (an answer begun) stays open for the model to go on with;
    # add_generation_prompt must then be false.
    continue_final_message: StrictBool = False
    chat_template_kwargs: Optional[dict[str, Any]] = None

    def tool_call(self, parser: Optional[str] = None) -> ToolChoice:
        return ToolChoice(self.tools, self.tool_choice, parser, self.parallel_tool_calls)

    def structured(self) -> Optional[StructuredOutputsParams]:
        # Only a forced choice has a grammar (the server refused "auto" without a parser).
        forced = (self.tool_call().structured()
                  if self.tool_choice not in (None, "auto", "none") else None)
        asked = super().structured()
        if forced is not None and asked is not None:
            raise ValueError("a forced tool_choice cannot be combined with response_format, "
                             "structured_outputs or guided_* fields")
        return forced or asked


class TokenizeRequest(BaseModel):
    """vLLM's /tokenize: a prompt, or chat messages rendered by the chat template."""
    model: Optional[StrictStr] = None
    prompt: Optional[StrictStr] = None
    messages: Optional[list[ChatMessage]] = None
    add_special_tokens: Optional[StrictBool] = None
    add_generation_prompt: StrictBool = True
    continue_final_message: StrictBool = False
    chat_template_kwargs: Optional[dict[str, Any]] = None

    def unsupported(self) -> Optional[str]:
        if (self.prompt is None) == (self.messages is None):
            return "give either prompt or messages"
        return None


class DetokenizeRequest(BaseModel):
    model: Optional[StrictStr] = None
    tokens: list[StrictInt]

    def unsupported(self) -> Optional[str]:
        return None


def error_body(message: str, kind: str = "invalid_request_error",
               param: Optional[str] = None, code: Optional[int] = None) -> dict:
    """OpenAI's error object, which its clients parse into their exceptions."""
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def now() -> int:
    return int(time.time())


def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0) -> dict:
    """OpenAI's usage, with the prompt tokens served from the prefix cache as its
    prompt_tokens_details.cached_tokens (vLLM's --enable-prompt-tokens-details)."""
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": cached_tokens}}
