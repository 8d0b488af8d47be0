"""``dsserve plan.dsp``: the OpenAI-compatible HTTP server over the serving engine.

FastAPI on uvicorn over ``dsrt.EngineLoop``: every HTTP request is one engine request; the
engine batches them per iteration. Under mpirun (a tensor-parallel plan, one rank per
process) rank 0 serves and the other ranks follow its steps. docs/serving.md says why the
server is Python (jinja2 renders the models' own chat templates exactly as transformers
does; FastAPI/uvicorn and prometheus_client are what vLLM's server stands on).
"""
from __future__ import annotations

import argparse
import asyncio
import dataclasses
import hmac
import json
import os
import signal
import sys
import time
from typing import AsyncIterator, Optional

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.background import BackgroundTask
from pydantic import BaseModel, ValidationError

from . import _dsrt
from .chat import ChatTemplate, ChatTemplateError
from .compiler import _model_name, plan_for
from .engine import EngineLoop, RequestParams, TokenLogprob, Update
from .protocol import (ChatRequest, CompletionRequest, DetokenizeRequest, TokenizeRequest,
                       error_body, new_id, now, usage)
from .server_metrics import ServerMetrics
from .tokenizer import NoTokenizer


class _Refused(Exception):
    """A request answered with an OpenAI error body and an HTTP status."""

    def __init__(self, status: int, message: str, kind: str = "invalid_request_error",
                 param: Optional[str] = None):
        super().__init__(message)
        self.status, self.kind, self.param = status, kind, param


class _Generation:
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
            raise _Refused(400, str(error).split(": ", 1)[-1]) from error

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
                 chat_template: Optional[str] = None):
        self.engine = engine
        self.tokenizer = engine.tokenizer
        self.has_tokenizer = not isinstance(engine.tokenizer, NoTokenizer)
        self.model_name = model_name
        self.max_concurrent = max_concurrent
        self.in_flight = 0
        self.metrics = ServerMetrics(engine.stats, lambda: self.in_flight)
        templates = dict(engine.plan.chat_templates())
        special = {name: engine.plan.special_token(name)
                   for name in ("bos_token", "eos_token", "unk_token", "pad_token")}
        # --chat-template (vLLM's option) wins over the plan's: base models have none, and a
        # published template is sometimes wrong.
        source = chat_template if chat_template is not None else templates.get("default")
        self.template = (ChatTemplate(source, {k: v for k, v in special.items() if v is not None})
                         if source is not None else None)

    # -- requests to engine requests

    def render_chat(self, body) -> str:
        """The messages of `body` (a chat or tokenize request) through the chat template."""
        if self.template is None:
            raise _Refused(400, "this plan has no chat template: its model had no "
                                "chat_template in tokenizer_config.json; use "
                                "/v1/completions", param="messages")
        try:
            return self.template.render(
                [m.for_template() for m in body.messages],
                add_generation_prompt=body.add_generation_prompt,
                tools=getattr(body, "tools", None), **(body.chat_template_kwargs or {}))
        except ChatTemplateError as error:
            raise _Refused(400, f"the chat template refused the messages: {error}",
                           param="messages")

    def require_tokenizer(self) -> None:
        if not self.has_tokenizer:
            raise _Refused(400, "this plan has no tokenizer (its model had no tokenizer.json "
                                "beside it)")

    def params(self, body, max_tokens: Optional[int], prompt_length: int,
               logprobs: Optional[int]) -> RequestParams:
        context = self.engine.max_seq_len
        if max_tokens is None:
            max_tokens = max(1, context - prompt_length)
        if prompt_length + max_tokens > context:
            raise _Refused(400, f"This model's maximum context length is {context} tokens. "
                                f"However, you requested {prompt_length + max_tokens} tokens "
                                f"({prompt_length} in the messages, {max_tokens} in the "
                                f"completion). Please reduce the length of the messages or "
                                f"completion.", param="max_tokens")
        stop = [body.stop] if isinstance(body.stop, str) else list(body.stop or [])
        if any(not s for s in stop):
            raise _Refused(400, "stop strings must not be empty", param="stop")
        def number(value, default: float) -> float:
            return default if value is None else float(value)
        return RequestParams(
            max_tokens=max_tokens, temperature=number(body.temperature, 1.0),
            top_p=number(body.top_p, 1.0), top_k=max(0, body.top_k or 0), seed=body.seed,
            stop=stop, ignore_eos=body.ignore_eos, logprobs=logprobs,
            min_p=number(body.min_p, 0.0),
            repetition_penalty=number(body.repetition_penalty, 1.0),
            presence_penalty=number(body.presence_penalty, 0.0),
            frequency_penalty=number(body.frequency_penalty, 0.0),
            logit_bias={int(t): float(v) for t, v in (body.logit_bias or {}).items()} or None,
            stop_token_ids=list(body.stop_token_ids or ()),
            skip_special_tokens=body.skip_special_tokens, min_tokens=body.min_tokens,
            include_stop_str_in_output=body.include_stop_str_in_output)

    def choices(self, prompts: list[list[int]], params: list[RequestParams], n: int,
                ) -> _Generation:
        """n engine requests per prompt, choice i * n + j the j-th of prompt i (OpenAI's
        order); with a seed, choice j draws from seed + j so that the n differ."""
        expanded, expanded_params = [], []
        for ids, request in zip(prompts, params):
            for j in range(n):
                expanded.append(ids)
                expanded_params.append(request if j == 0 or request.seed is None else
                                       dataclasses.replace(request, seed=request.seed + j))
        return _Generation(self, expanded, expanded_params, sum(len(p) for p in prompts), n)

    def token_text(self, token: int) -> tuple[str, list[int]]:
        raw = self.tokenizer.decode_bytes([token], skip_special_tokens=False)
        return raw.decode("utf-8", errors="replace"), list(raw)


def _completion_logprobs(server: Server, entries: list[TokenLogprob], offset: int) -> dict:
    tokens, values, tops, offsets = [], [], [], []
    for entry in entries:
        text, _ = server.token_text(entry.token_id)
        tokens.append(text)
        values.append(entry.logprob)
        tops.append({server.token_text(t)[0]: lp for t, lp in entry.top})
        offsets.append(offset)
        offset += len(text)
    return {"tokens": tokens, "token_logprobs": values, "top_logprobs": tops,
            "text_offset": offsets}


def _echo_logprobs(server: Server, prompt: list[int], entries: list[TokenLogprob]) -> dict:
    """The prompt's part of an echoed completion's logprobs: its first token has none (null,
    as OpenAI and vLLM write it), every later one its log-probability given those before."""
    first, _ = server.token_text(prompt[0])
    rest = _completion_logprobs(server, entries, len(first))
    return {"tokens": [first] + rest["tokens"],
            "token_logprobs": [None] + rest["token_logprobs"],
            "top_logprobs": [None] + rest["top_logprobs"],
            "text_offset": [0] + rest["text_offset"]}


def _joined_logprobs(head: Optional[dict], tail: dict) -> dict:
    if head is None:
        return tail
    return {key: head[key] + tail[key] for key in tail}


def _chat_logprobs(server: Server, entries: list[TokenLogprob]) -> dict:
    content = []
    for entry in entries:
        text, raw = server.token_text(entry.token_id)
        top = []
        for token, logprob in entry.top:
            top_text, top_raw = server.token_text(token)
            top.append({"token": top_text, "logprob": logprob, "bytes": top_raw})
        content.append({"token": text, "logprob": entry.logprob, "bytes": raw,
                        "top_logprobs": top})
    return {"content": content}


class _Answer:
    """One answer's id, creation time and model, shared by its streamed chunks (`object`
    `chunk_kind`; `usage` in each when the client asked for it, null until the last, as
    OpenAI sends it) and its whole form."""

    def __init__(self, prefix: str, chunk_kind: str, body, model: str):
        self.head = {"id": new_id(prefix), "object": chunk_kind, "created": now(),
                     "model": model}
        self.include_usage = bool(body.stream_options and body.stream_options.include_usage)

    def chunk(self, choices: list, usage_value: Optional[dict] = None) -> dict:
        payload = dict(self.head, choices=choices)
        if self.include_usage:
            payload["usage"] = usage_value
        return payload

    def whole(self, kind: str, choices: list, usage_value: dict) -> dict:
        return dict(self.head, object=kind, choices=choices, usage=usage_value)


def _sse(payload) -> str:
    return f"data: {json.dumps(payload, ensure_ascii=False)}\n\n"


class _ApiKey:
    """vLLM's --api-key: the OpenAI routes (/v1/...) answer 401 without
    ``Authorization: Bearer KEY``; /health, /metrics and the rest stay open to probes and
    scrapers. Plain ASGI: starlette's BaseHTTPMiddleware would stand between a streamed
    response and the disconnect it must notice."""

    def __init__(self, app, key: str, refused):
        self.app, self.expected, self.refused = app, f"Bearer {key}".encode(), refused

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["path"].startswith("/v1"):
            given = dict(scope["headers"]).get(b"authorization", b"")
            if not hmac.compare_digest(given, self.expected):
                response = self.refused(_Refused(
                    401, "this server needs its API key: Authorization: Bearer <key>",
                    kind="authentication_error"))
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def create_app(server: Server, api_key: Optional[str] = None) -> FastAPI:
    app = FastAPI(title="dsserve", docs_url=None, redoc_url=None)

    def refused(error: _Refused) -> JSONResponse:
        server.metrics.rejected.labels(status=str(error.status)).inc()
        return JSONResponse(error_body(str(error), error.kind, error.param, error.status),
                            status_code=error.status)

    if api_key:
        app.add_middleware(_ApiKey, key=api_key, refused=refused)

    async def parse(request: Request, model: type[BaseModel], capped: bool = True):
        try:
            data = json.loads(await request.body())
        except (ValueError, UnicodeDecodeError) as error:
            raise _Refused(400, f"the body is not valid JSON: {error}")
        if not isinstance(data, dict):
            raise _Refused(400, "the body must be a JSON object")
        try:
            body = model.model_validate(data)
        except ValidationError as error:
            first = error.errors()[0]
            where = ".".join(str(part) for part in first["loc"])
            raise _Refused(400, f"{where}: {first['msg']}", param=where)
        problem = body.unsupported()
        if problem:
            raise _Refused(400, problem)
        if capped and server.in_flight >= server.max_concurrent:
            raise _Refused(429, f"too many concurrent requests: this server serves at most "
                                f"{server.max_concurrent} at once (--max-concurrent-requests)",
                           kind="rate_limit_error")
        return body

    async def respond(request: Request, generation: _Generation, stream: bool,
                      chunks, whole) -> Response:
        """Streams `chunks(generation)` as SSE, or waits for the whole answer; either way a
        client that goes away cancels the engine requests (their KV blocks are freed)."""
        server.in_flight += 1
        released = False

        def release():
            nonlocal released
            if not released:
                released = True
                generation.cancel()
                server.in_flight -= 1

        if stream:
            async def body():
                try:
                    async for chunk in chunks(generation):
                        yield chunk
                    yield "data: [DONE]\n\n"
                finally:
                    release()
            # The background task releases too: a client gone before the first chunk leaves
            # the generator unstarted, and an unstarted generator runs no `finally`.
            return StreamingResponse(body(), media_type="text/event-stream",
                                     background=BackgroundTask(release))
        try:
            task = asyncio.ensure_future(whole(generation))
            while not task.done():
                await asyncio.wait({task}, timeout=0.1)
                if not task.done() and await request.is_disconnected():
                    task.cancel()
                    return Response(status_code=499)
            return JSONResponse(task.result())
        finally:
            release()

    @app.get("/health")
    async def health():
        return {"status": "ok"}

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [{
            "id": server.model_name, "object": "model", "created": now(), "owned_by": "dsrt",
            "max_model_len": server.engine.max_seq_len}]}

    @app.get("/metrics")
    async def metrics():
        return Response(generate_latest(server.metrics.registry),
                        media_type=CONTENT_TYPE_LATEST)

    # vLLM's /tokenize and /detokenize, which clients use to count a prompt's tokens against
    # max_model_len: the plan's own tokenizer and chat template.
    @app.post("/tokenize")
    async def tokenize(request: Request):
        try:
            body = await parse(request, TokenizeRequest, capped=False)
            server.require_tokenizer()
            if body.messages is not None:
                # The template writes the special tokens itself, as for chat completions.
                ids = server.tokenizer.encode(server.render_chat(body), add_special_tokens=bool(
                    body.add_special_tokens))
            else:
                ids = server.tokenizer.encode(body.prompt, add_special_tokens=(
                    True if body.add_special_tokens is None else body.add_special_tokens))
        except _Refused as error:
            return refused(error)
        return {"count": len(ids), "max_model_len": server.engine.max_seq_len, "tokens": ids}

    # vLLM's: forgets the prefix cache. Refused (409) while requests run: the engine resets
    # only between them.
    @app.post("/reset_prefix_cache")
    async def reset_prefix_cache():
        try:
            server.engine.reset_prefix_cache()
        except _dsrt.Error as error:
            return refused(_Refused(409, str(error).split(": ", 1)[-1]))
        return Response(status_code=200)

    @app.post("/detokenize")
    async def detokenize(request: Request):
        try:
            body = await parse(request, DetokenizeRequest, capped=False)
            server.require_tokenizer()
            try:
                text = server.tokenizer.decode(body.tokens, skip_special_tokens=False)
            except _dsrt.Error as error:
                raise _Refused(400, str(error).split(": ", 1)[-1], param="tokens")
        except _Refused as error:
            return refused(error)
        return {"prompt": text}

    @app.post("/v1/completions")
    async def completions(request: Request):
        try:
            body = await parse(request, CompletionRequest)
            prompt = body.prompt
            if isinstance(prompt, str) or (prompt and isinstance(prompt[0], int)):
                prompt = [prompt]
            try:
                prompts = [server.tokenizer.encode(p) if isinstance(p, str) else list(p)
                           for p in prompt]
            except _dsrt.Error as error:
                raise _Refused(400, str(error).split(": ", 1)[-1], param="prompt")
            if not prompts or any(not p for p in prompts):
                raise _Refused(400, "the prompt is empty", param="prompt")
            params = [server.params(body, body.max_tokens, len(p), body.logprobs)
                      for p in prompts]
            if body.echo and body.logprobs is not None:
                # The prompt's own log-probabilities (each prompt token given those before).
                params = [dataclasses.replace(p, prompt_logprobs=body.logprobs) for p in params]
            generation = server.choices(prompts, params, body.n)
            choice_count = len(generation.prompts)
            # echo: each choice's text starts with its prompt's (as given, or decoded ids).
            echoed = [""] * choice_count
            if body.echo:
                texts = [p if isinstance(p, str) else server.tokenizer.decode(list(p))
                         for p in prompt] if server.has_tokenizer else [""] * len(prompts)
                echoed = [texts[i // body.n] for i in range(choice_count)]
        except _Refused as error:
            return refused(error)
        answer = _Answer("cmpl", "text_completion", body, server.model_name)
        chunk = answer.chunk

        async def chunks(gen: _Generation):
            offsets = [0] * choice_count
            started = [False] * choice_count
            async for index, update in gen.updates():
                # The echo rides on each choice's first chunk.
                head, text = None, update.text
                if body.echo and not started[index]:
                    text = echoed[index] + text
                    if body.logprobs is not None:
                        head = _echo_logprobs(server, gen.prompts[index],
                                              update.prompt_logprobs)
                        offsets[index] = sum(len(t) for t in head["tokens"])
                started[index] = True
                logprobs = None
                if body.logprobs is not None:
                    logprobs = _joined_logprobs(head, _completion_logprobs(
                        server, update.logprobs, offsets[index]))
                offsets[index] += len(update.text)
                choice = {"index": index, "text": text, "logprobs": logprobs,
                          "finish_reason": update.finish_reason}
                if not server.has_tokenizer:
                    choice["token_ids"] = update.token_ids
                yield _sse(chunk([choice]))
            if answer.include_usage:
                yield _sse(chunk([], gen.usage()))

        async def whole(gen: _Generation):
            texts = [""] * choice_count
            token_ids: list[list[int]] = [[] for _ in range(choice_count)]
            entries: list[list[TokenLogprob]] = [[] for _ in range(choice_count)]
            prompt_entries: list[list[TokenLogprob]] = [[] for _ in range(choice_count)]
            async for index, update in gen.updates():
                texts[index] += update.text
                token_ids[index] += update.token_ids
                entries[index] += update.logprobs
                prompt_entries[index] += update.prompt_logprobs

            def logprobs(i: int) -> Optional[dict]:
                if body.logprobs is None:
                    return None
                if not body.echo:
                    return _completion_logprobs(server, entries[i], 0)
                head = _echo_logprobs(server, gen.prompts[i], prompt_entries[i])
                return _joined_logprobs(head, _completion_logprobs(
                    server, entries[i], sum(len(t) for t in head["tokens"])))
            choices = [{"index": i, "text": echoed[i] + texts[i], "finish_reason": gen.finish[i],
                        "logprobs": logprobs(i)} for i in range(choice_count)]
            if not server.has_tokenizer:  # no text: the answer is its token ids
                for choice, ids in zip(choices, token_ids):
                    choice["token_ids"] = ids
            return answer.whole("text_completion", choices, gen.usage())

        return await respond(request, generation, body.stream, chunks, whole)

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        try:
            body = await parse(request, ChatRequest)
            ids = server.tokenizer.encode(server.render_chat(body), add_special_tokens=False)
            top = body.top_logprobs or 0
            params = server.params(body, body.max_completion_tokens or body.max_tokens,
                                   len(ids), top if body.logprobs else None)
            generation = server.choices([ids], [params], body.n)
        except _Refused as error:
            return refused(error)
        answer = _Answer("chatcmpl", "chat.completion.chunk", body, server.model_name)
        chunk = answer.chunk

        async def chunks(gen: _Generation):
            for index in range(body.n):
                yield _sse(chunk([{"index": index, "delta": {"role": "assistant", "content": ""},
                                   "logprobs": None, "finish_reason": None}]))
            async for index, update in gen.updates():
                delta = {"content": update.text} if update.text else {}
                logprobs = _chat_logprobs(server, update.logprobs) if body.logprobs else None
                yield _sse(chunk([{"index": index, "delta": delta, "logprobs": logprobs,
                                   "finish_reason": update.finish_reason}]))
            if answer.include_usage:
                yield _sse(chunk([], gen.usage()))

        async def whole(gen: _Generation):
            texts, entries = [""] * body.n, [[] for _ in range(body.n)]
            async for index, update in gen.updates():
                texts[index] += update.text
                entries[index] += update.logprobs
            return answer.whole("chat.completion", [{
                "index": index, "message": {"role": "assistant", "content": texts[index]},
                "logprobs": _chat_logprobs(server, entries[index]) if body.logprobs else None,
                "finish_reason": gen.finish[index]} for index in range(body.n)], gen.usage())

        return await respond(request, generation, body.stream, chunks, whole)

    return app


def _mpi_world() -> int:
    for name in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"):
        if os.environ.get(name, "").isdigit():
            return int(os.environ[name])
    return 1


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="dsserve", description="Serve a dsc plan over HTTP with the OpenAI protocol "
        "(/v1/completions, /v1/chat/completions, /v1/models, /health, /metrics; vLLM's "
        "/tokenize and /detokenize). Under "
        "mpirun a tensor-parallel plan runs one rank per process; rank 0 serves.")
    parser.add_argument("model", metavar="MODEL",
                        help="the plan (dsc compile --serving model.onnx -o plan.dsp), or an "
                        "ONNX model or its folder, compiled once to a serving plan kept in "
                        "$DSRT_CACHE_DIR (default ~/.cache/dsrt/plans)")
    parser.add_argument("--dtype", help="compiling a model: the weights' dtype (dsc --dtype: "
                        "fp32, fp16, bf16, int8, int4; default the model's)")
    parser.add_argument("--tp", "--tensor-parallel-size", type=int, dest="tp",
                        help="compiling a model: tensor-parallel ranks")
    parser.add_argument("--max-seq-len", "--max-model-len", type=int, dest="max_seq_len",
                        help="compiling a model: positions per sequence (default the model's)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cpu-reference")
    parser.add_argument("--served-model-name", help="the model's id in /v1/models "
                        "(default: the plan file's name without .dsp)")
    parser.add_argument("--max-concurrent-requests", type=int, default=256,
                        help="requests served at once; more are answered 429")
    parser.add_argument("--block-size", type=int, default=16)
    parser.add_argument("--kv-cache-bytes", type=int, default=0,
                        help="the KV cache's bytes (0: a whole sequence for every row of "
                        "the plan's step, at most a quarter of the memory)")
    parser.add_argument("--kv-cache-memory-fraction", type=float, default=0.0,
                        help="the KV cache as this fraction (0 to 1) of the memory free at "
                        "the start (a GPU's: once the weights are on it), instead of "
                        "--kv-cache-bytes")
    parser.add_argument("--max-tokens-per-step", "--max-num-batched-tokens", type=int,
                        default=0, dest="max_tokens_per_step",
                        help="tokens one engine step computes at most (0: the plan's step rows)")
    parser.add_argument("--max-running", "--max-num-seqs", type=int, default=0,
                        dest="max_running",
                        help="sequences holding KV at once (0: --max-tokens-per-step)")
    parser.add_argument("--no-prefix-caching", "--no-enable-prefix-caching",
                        action="store_true", dest="no_prefix_caching")
    parser.add_argument("--enable-prefix-caching", action="store_false",
                        dest="no_prefix_caching", help="(the default; vLLM's flag)")
    parser.add_argument("--no-batch-invariant", action="store_true",
                        help="let long steps of half and quantized plans take faster bf16 "
                        "arithmetic (a token may then differ from the request's alone)")
    parser.add_argument("--kv-cache-dtype", choices=("auto", "int8"), default="auto",
                        help="the KV cache's dtype: the plan's, or int8 with a scale per 32 "
                        "values (about half an f16 cache's bytes; CPU only)")
    parser.add_argument("--chat-template", metavar="FILE",
                        help="a Jinja chat template for /v1/chat/completions instead of the "
                        "plan's (the model's tokenizer_config.json's)")
    parser.add_argument("--api-key", default=os.environ.get("DSSERVE_API_KEY") or None,
                        help="the key /v1/... requests must carry (Authorization: Bearer "
                        "KEY), as vLLM's; default $DSSERVE_API_KEY, else none")
    parser.add_argument("--log-level", default="warning")
    args = parser.parse_args(argv)
    chat_template = None
    if args.chat_template:
        try:
            with open(args.chat_template, encoding="utf-8") as file:
                chat_template = file.read()
            ChatTemplate(chat_template, {})  # a template that does not parse fails here
        except (OSError, ChatTemplateError) as error:
            print(f"dsserve: --chat-template {args.chat_template}: {error}", file=sys.stderr)
            return 2

    try:
        plan = plan_for(args.model, tp=args.tp, dtype=args.dtype, max_seq_len=args.max_seq_len)
        engine = EngineLoop(plan, device=args.device, block_size=args.block_size,
                            kv_cache_bytes=args.kv_cache_bytes,
                            max_tokens_per_step=args.max_tokens_per_step,
                            max_running=args.max_running,
                            prefix_caching=not args.no_prefix_caching,
                            batch_invariant=not args.no_batch_invariant,
                            kv_cache_dtype=args.kv_cache_dtype, mpi=_mpi_world() > 1,
                            kv_cache_memory_fraction=args.kv_cache_memory_fraction)
    except _dsrt.Error as error:
        print(f"dsserve: {error}", file=sys.stderr)
        return 1
    if engine.rank != 0:
        # mpirun forwards SIGTERM to every rank; a follower stays until rank 0 has drained
        # its requests (they need this rank's steps) and ended its engine, which ends this.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        engine.follow()
        return 0

    import uvicorn
    name = args.served_model_name or _model_name(args.model)
    app = create_app(Server(engine, name, args.max_concurrent_requests, chat_template),
                     api_key=args.api_key)
    # uvicorn's SIGTERM/SIGINT handling stops accepting and waits for the requests in
    # flight (timeout_graceful_shutdown None) before the engine is closed.
    config = uvicorn.Config(app, host=args.host, port=args.port, log_level=args.log_level,
                            timeout_graceful_shutdown=None)

    class DrainingServer(uvicorn.Server):
        # uvicorn re-raises the signal once drained, so the exit status would say "killed";
        # a server that drained and stopped as asked exits 0.
        def handle_exit(self, sig, frame):
            super().handle_exit(sig, frame)
            getattr(self, "_captured_signals", []).clear()

    try:
        DrainingServer(config).run()
    finally:
        engine.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
