"""What ``dsserve``'s HTTP requests are to the engine: the server's state (the engine, the
plan's tokenizer and chat template, the cap), one HTTP request's engine requests as one
stream of updates, and the OpenAI answer pieces built from them (logprobs, chunks, SSE).
The routes are server.py's."""
from __future__ import annotations

import asyncio
import dataclasses
import json
import random
import time
from typing import AsyncIterator, Optional

from . import _dsrt
from .chat import ChatTemplate, ChatTemplateError, openai_messages
from .engine import EngineLoop, RequestParams, TokenLogprob, Update, truncate_prompt
from .generation_config import sampling_defaults
from .protocol import new_id, now, usage
from .server_metrics import ServerMetrics
from .tokenizer import NoTokenizer
from .reasoning import detect as detect_reasoning, opens_thinking
from .tool_parsers import detect as detect_tool_format


class Refused(Exception):
    """A request answered with an OpenAI error body and an HTTP status."""

    def __init__(self, status: int, message: str, kind: str = "invalid_request_error",
                 param: Optional[str] = None):
        super().__init__(message)
        self.status, self.kind, self.param = status, kind, param


class Generation:
    """The engine requests of one HTTP request (one per prompt), as one stream of
    (prompt index, Update)."""

    def __init__(self, server: "Server", prompts: list[list[int]],
                 params: list[RequestParams], prompt_tokens: Optional[int] = None,
                 choices_per_prompt: int = 1):
        self.server = server
        self.prompts = prompts
        self.choices_per_prompt = choices_per_prompt
        # Each choice's prompt tokens found in the prefix cache, once its first token came.
        self.cached: list[Optional[int]] = [None] * len(prompts)
        # n choices of a prompt are n engine requests, but OpenAI counts its tokens once.
        self.prompt_tokens = (sum(len(p) for p in prompts) if prompt_tokens is None
                              else prompt_tokens)
        self.queue: "asyncio.Queue[tuple[int, Update]]" = asyncio.Queue()
        self.arrival = time.monotonic()
        self.first: list[Optional[float]] = [None] * len(prompts)
        self.generated = [0] * len(prompts)
        self.finish: list[Optional[str]] = [None] * len(prompts)
        loop = asyncio.get_running_loop()
        self.requests = []
        try:
            for index, ids in enumerate(prompts):
                self.requests.append(server.engine.submit(
                    ids, params[index], lambda update, index=index: loop.call_soon_threadsafe(
                        self.queue.put_nowait, (index, update))))
        except _dsrt.Error as error:
            self.cancel()
            raise Refused(400, str(error).split(": ", 1)[-1]) from error

    async def updates(self) -> AsyncIterator[tuple[int, Update]]:
        pending = len(self.prompts)
        while pending:
            index, update = await self.queue.get()
            if update.token_ids and self.first[index] is None:
                self.first[index] = time.monotonic()
            if update.num_cached_tokens is not None:
                self.cached[index] = update.num_cached_tokens
            self.generated[index] += len(update.token_ids)
            if update.finish_reason:
                pending -= 1
                self.finish[index] = update.finish_reason
                self._observe(index)
            yield index, update

    def _observe(self, index: int) -> None:
        done = time.monotonic()
        first = self.first[index] or done
        self.server.metrics.observe(len(self.prompts[index]), self.generated[index],
                                    first - self.arrival, done - self.arrival,
                                    self.finish[index] or "abort")

    def cancel(self) -> None:
        for index, request in enumerate(self.requests):
            if not request.finished:
                self.server.engine.cancel(request.id)
                if self.finish[index] is None:
                    self.finish[index] = "abort"
                    self._observe(index)

    def usage(self) -> dict:
        # Cached tokens as the prompt tokens are counted: once per prompt (its first choice).
        cached = sum(c or 0 for c in self.cached[::self.choices_per_prompt])
        return usage(self.prompt_tokens, sum(self.generated), cached)


class Server:
    """The server's state: the engine, the plan's tokenizer and chat template, the cap."""

    def __init__(self, engine: EngineLoop, model_name: str, max_concurrent: int,
                 chat_template: Optional[str] = None, disable_any_whitespace: bool = False,
                 tool_call_parser: Optional[str] = None, reasoning_parser: Optional[str] = None,
                 generation_config: str = "auto", scheduling_policy: str = "fcfs",
                 seed: Optional[int] = None, tokens_as_ids: bool = False):
        self.engine = engine
        self.tokens_as_ids = tokens_as_ids  # vLLM's --return-tokens-as-token-ids
        self.scheduling_policy = scheduling_policy
        # vLLM's --seed: requests without a seed draw theirs from this stream.
        self._seeds = random.Random(seed) if seed is not None else None
        # vLLM's --structured-outputs-config disable_any_whitespace: compact JSON outputs.
        self.disable_any_whitespace = disable_any_whitespace
        self.tokenizer = engine.tokenizer
        self.has_tokenizer = not isinstance(engine.tokenizer, NoTokenizer)
        self.model_name = model_name
        # The model's sampling defaults for what a request leaves out (vLLM's
        # --generation-config auto).
        self.defaults = sampling_defaults(engine.plan, generation_config)
        self.max_concurrent = max_concurrent
        self.in_flight = 0
        self.metrics = ServerMetrics(engine.stats, lambda: self.in_flight)
        templates = engine.text.chat_templates
        special = engine.text.special_tokens
        # --chat-template (vLLM's option) wins over the plan's: base models have none, and a
        # published template is sometimes wrong.
        source = chat_template if chat_template is not None else templates.get("default")
        self.template = ChatTemplate(source, special) if source is not None else None
        # How the model's own tool calls are read (tool_choice "auto"): named, or the format
        # its chat template teaches; "none" reads none.
        self.tool_call_parser = (detect_tool_format(source) if tool_call_parser is None else
                                 None if tool_call_parser == "none" else tool_call_parser)
        # How a reasoning model's thinking is told from its answer, likewise.
        self.reasoning_parser = (detect_reasoning(source) if reasoning_parser is None else
                                 None if reasoning_parser == "none" else reasoning_parser)

    # -- requests to engine requests

    def render_chat(self, body) -> str:
        """The messages of `body` (a chat or tokenize request) through the chat template."""
        if self.template is None:
            raise Refused(400, "this plan has no chat template: its model had no "
                                "chat_template in tokenizer_config.json; use "
                                "/v1/completions", param="messages")
        try:
            return self.template.render(
                openai_messages([m.for_template() for m in body.messages]),
                add_generation_prompt=body.add_generation_prompt,
                continue_final_message=getattr(body, "continue_final_message", False),
                tools=getattr(body, "tools", None), **(body.chat_template_kwargs or {}))
        except ChatTemplateError as error:
            raise Refused(400, f"the chat template refused the messages: {error}",
                           param="messages")

    def thinking(self, prompt: str) -> Optional[str]:
        """How a chat output's thinking is read: "first" where it has begun when the output
        does (the prompt opened it, or deepseek_r1 says so), "maybe" where the model may open
        it, None without a reasoning parser."""
        if not self.reasoning_parser:
            return None
        if self.reasoning_parser == "deepseek_r1" or opens_thinking(prompt):
            return "first"
        return "maybe"

    def require_tokenizer(self) -> None:
        if not self.has_tokenizer:
            raise Refused(400, "this plan has no tokenizer (its model had no tokenizer.json "
                                "beside it)")

    def truncated(self, body, ids: list[int]) -> list[int]:
        """A prompt's ids as the body's truncate_prompt_tokens leaves them."""
        try:
            return truncate_prompt(ids, body.truncate_prompt_tokens, self.engine.max_seq_len)
        except _dsrt.Error as error:
            raise Refused(400, str(error).split(": ", 1)[-1], param="truncate_prompt_tokens")

    def params(self, body, max_tokens: Optional[int], prompt_length: int,
               logprobs: Optional[int]) -> RequestParams:
        context = self.engine.max_seq_len
        if max_tokens is None:
            max_tokens = max(1, context - prompt_length)
            if "max_tokens" in self.defaults:
                max_tokens = min(max_tokens, self.defaults["max_tokens"])
        if prompt_length + max_tokens > context:
            raise Refused(400, f"This model's maximum context length is {context} tokens. "
                                f"However, you requested {prompt_length + max_tokens} tokens "
                                f"({prompt_length} in the messages, {max_tokens} in the "
                                f"completion). Please reduce the length of the messages or "
                                f"completion.", param="max_tokens")
        if body.priority != 0 and self.scheduling_policy != "priority":
            raise Refused(400, f"got priority {body.priority}, but priority scheduling is not "
                               f"enabled: start dsserve with --scheduling-policy priority",
                          param="priority")
        stop = [body.stop] if isinstance(body.stop, str) else list(body.stop or [])
        if any(not s for s in stop):
            raise Refused(400, "stop strings must not be empty", param="stop")
        def number(value, default: float, name: str) -> float:
            return self.defaults.get(name, default) if value is None else float(value)
        try:
            structured = body.structured()
        except (ValueError, TypeError) as error:
            raise Refused(400, f"structured output: {error}", param="response_format")
        if structured is not None and self.disable_any_whitespace:
            structured.disable_any_whitespace = True
        return RequestParams(
            max_tokens=max_tokens, temperature=number(body.temperature, 1.0, "temperature"),
            top_p=number(body.top_p, 1.0, "top_p"),
            top_k=max(0, self.defaults.get("top_k", 0) if body.top_k is None else body.top_k),
            seed=body.seed if body.seed is not None or self._seeds is None
            else self._seeds.getrandbits(64),
            stop=stop, ignore_eos=body.ignore_eos, logprobs=logprobs,
            min_p=number(body.min_p, 0.0, "min_p"),
            repetition_penalty=number(body.repetition_penalty, 1.0, "repetition_penalty"),
            presence_penalty=number(body.presence_penalty, 0.0, "presence_penalty"),
            frequency_penalty=number(body.frequency_penalty, 0.0, "frequency_penalty"),
            logit_bias={int(t): float(v) for t, v in (body.logit_bias or {}).items()} or None,
            stop_token_ids=list(body.stop_token_ids or ()),
            skip_special_tokens=body.skip_special_tokens, min_tokens=body.min_tokens,
            include_stop_str_in_output=body.include_stop_str_in_output,
            structured_outputs=structured, allowed_token_ids=body.allowed_token_ids,
            bad_words=list(body.bad_words or ()), priority=body.priority)

    def choices(self, prompts: list[list[int]], params: list[RequestParams], n: int,
                ) -> Generation:
        """n engine requests per prompt, choice i * n + j the j-th of prompt i (OpenAI's
        order); with a seed, choice j draws from seed + j so that the n differ."""
        expanded, expanded_params = [], []
        for ids, request in zip(prompts, params):
            for j in range(n):
                expanded.append(ids)
                expanded_params.append(request if j == 0 or request.seed is None else
                                       dataclasses.replace(request, seed=request.seed + j))
        return Generation(self, expanded, expanded_params, sum(len(p) for p in prompts), n)

    def token_text(self, token: int) -> tuple[str, list[int]]:
        raw = self.tokenizer.decode_bytes([token], skip_special_tokens=False)
        return raw.decode("utf-8", errors="replace"), list(raw)

    def token_names(self, body) -> "Server | TokenIds":
        """What names the tokens of a body's logprobs: their text, or "token_id:N" where the
        body or the server asks (vLLM's return_tokens_as_token_ids)."""
        asked = getattr(body, "return_tokens_as_token_ids", None)
        return TokenIds() if (self.tokens_as_ids if asked is None else asked) else self


class TokenIds:
    """Tokens named by their ids in logprobs, as vLLM's return_tokens_as_token_ids: text
    that is not a whole character is then still told apart."""

    @staticmethod
    def token_text(token: int) -> tuple[str, list[int]]:
        name = f"token_id:{token}"
        return name, list(name.encode())


def completion_logprobs(names: "Server | TokenIds", entries: list[TokenLogprob],
                        offset: int) -> dict:
    tokens, values, tops, offsets = [], [], [], []
    for entry in entries:
        text, _ = names.token_text(entry.token_id)
        tokens.append(text)
        values.append(entry.logprob)
        tops.append({names.token_text(t)[0]: lp for t, lp in entry.top})
        offsets.append(offset)
        offset += len(text)
    return {"tokens": tokens, "token_logprobs": values, "top_logprobs": tops,
            "text_offset": offsets}


def echo_logprobs(names: "Server | TokenIds", prompt: list[int],
                  entries: list[TokenLogprob]) -> dict:
    """The prompt's part of an echoed completion's logprobs: its first token has none (null,
    as OpenAI and vLLM write it), every later one its log-probability given those before."""
    first, _ = names.token_text(prompt[0])
    rest = completion_logprobs(names, entries, len(first))
    return {"tokens": [first] + rest["tokens"],
            "token_logprobs": [None] + rest["token_logprobs"],
            "top_logprobs": [None] + rest["top_logprobs"],
            "text_offset": [0] + rest["text_offset"]}


def joined_logprobs(head: Optional[dict], tail: dict) -> dict:
    if head is None:
        return tail
    return {key: head[key] + tail[key] for key in tail}


def chat_logprobs(names: "Server | TokenIds", entries: list[TokenLogprob]) -> dict:
    content = []
    for entry in entries:
        text, raw = names.token_text(entry.token_id)
        top = []
        for token, logprob in entry.top:
            top_text, top_raw = names.token_text(token)
            top.append({"token": top_text, "logprob": logprob, "bytes": top_raw})
        content.append({"token": text, "logprob": entry.logprob, "bytes": raw,
                        "top_logprobs": top})
    return {"content": content}


class Answer:
    """One answer's id, creation time and model, shared by its streamed chunks (`object`
    `chunk_kind`; `usage` in each when the client asked for it, null until the last, as
    OpenAI sends it) and its whole form."""

    def __init__(self, prefix: str, chunk_kind: str, body, model: str):
        self.head = {"id": new_id(prefix), "object": chunk_kind, "created": now(),
                     "model": model}
        self.include_usage = bool(body.stream_options and body.stream_options.include_usage)
        self.continuous = self.include_usage and body.stream_options.continuous_usage_stats

    def chunk(self, choices: list, usage_value: Optional[dict] = None,
              generation: Optional[Generation] = None) -> dict:
        """`generation` gives the usage so far, for continuous_usage_stats."""
        payload = dict(self.head, choices=choices)
        if self.include_usage:
            if usage_value is None and self.continuous and generation is not None:
                usage_value = generation.usage()
            payload["usage"] = usage_value
        return payload

    def whole(self, kind: str, choices: list, usage_value: dict) -> dict:
        return dict(self.head, object=kind, choices=choices, usage=usage_value)


def sse(payload) -> str:
    return f"data: {json.dumps(payload, ensure_ascii=False)}\n\n"
