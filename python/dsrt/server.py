"""``dsserve plan.dsp``: the OpenAI-compatible HTTP server over the serving engine.

FastAPI on uvicorn over ``dsrt.EngineLoop``: every HTTP request is one engine request; the
engine batches them per iteration. Under mpirun (a tensor-parallel plan, one rank per
process) rank 0 serves and the other ranks follow its steps. docs/server.md says why the
server is Python (jinja2 renders the models' own chat templates exactly as transformers
does; FastAPI/uvicorn and prometheus_client are what vLLM's server stands on).
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import functools
import hmac
import json
import sys
from typing import Optional

from fastapi import FastAPI, Request
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.background import BackgroundTask
from starlette.requests import ClientDisconnect
from pydantic import BaseModel, ValidationError

from . import _dsrt
from .engine import TokenLogprob
from .reasoning import END as THINKING_END
from .server_beams import beam_answer
from .server_chat import ChoiceReader
from .server_responses import ResponseWriter, ResponsesRequest
from .protocol import (ChatRequest, CompletionRequest, DetokenizeRequest, TokenizeRequest,
                       error_body, now)
from .server_state import (Answer, Generation, Refused, Server, chat_logprobs,
                           completion_logprobs, echo_logprobs, joined_logprobs, sse)


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
                response = self.refused(Refused(
                    401, "this server needs its API key: Authorization: Bearer <key>",
                    kind="authentication_error"))
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


# Prompts of at least this many characters are encoded on a worker thread (below, a thread's
# hand-off costs more than the encoding: about 1.5 ms of text).
_ENCODE_ON_A_THREAD_CHARS = 16384


@dataclasses.dataclass
class Cors:
    """Who may call the server from a browser's page (vLLM's --allowed-origins and the rest,
    with its defaults: any origin, no credentials)."""
    allowed_origins: list = dataclasses.field(default_factory=lambda: ["*"])
    allow_credentials: bool = False
    allowed_methods: list = dataclasses.field(default_factory=lambda: ["*"])
    allowed_headers: list = dataclasses.field(default_factory=lambda: ["*"])


def create_app(server: Server, api_key: Optional[str] = None,
               cors: Optional[Cors] = None) -> FastAPI:
    app = FastAPI(title="dsserve", docs_url=None, redoc_url=None)
    # The native tokenizer releases the GIL, so a long prompt encoded here lets the event
    # loop stream every other request's tokens meanwhile (inline, 62k tokens held them all
    # for 22 ms); vLLM tokenizes off its event loop for the same reason.
    tokenizing = concurrent.futures.ThreadPoolExecutor(2, thread_name_prefix="dsrt-tokenize")
    # Beam searches wait on the engine a step at a time, each on a thread of its own.
    beam_threads = concurrent.futures.ThreadPoolExecutor(8, thread_name_prefix="dsrt-beams")

    def refused(error: Refused) -> JSONResponse:
        server.metrics.rejected.labels(status=str(error.status)).inc()
        return JSONResponse(error_body(str(error), error.kind, error.param, error.status),
                            status_code=error.status)

    if api_key:
        app.add_middleware(_ApiKey, key=api_key, refused=refused)
    # Outermost: a browser's preflight (OPTIONS, without the key) is answered here before the
    # key is asked for, and every answer, a 401 too, carries the headers the page needs.
    cors = cors or Cors()
    app.add_middleware(CORSMiddleware, allow_origins=cors.allowed_origins,
                       allow_credentials=cors.allow_credentials,
                       allow_methods=cors.allowed_methods, allow_headers=cors.allowed_headers)

    def check_cap() -> None:
        if server.in_flight >= server.max_concurrent:
            raise Refused(429, f"too many concurrent requests: this server serves at most "
                                f"{server.max_concurrent} at once (--max-concurrent-requests)",
                           kind="rate_limit_error")

    async def encode(text: str, add_special_tokens: bool = True) -> list[int]:
        if len(text) < _ENCODE_ON_A_THREAD_CHARS:
            return server.tokenizer.encode(text, add_special_tokens=add_special_tokens)
        return await asyncio.get_running_loop().run_in_executor(tokenizing, functools.partial(
            server.tokenizer.encode, text, add_special_tokens=add_special_tokens))

    async def parse(request: Request, model: type[BaseModel], capped: bool = True):
        try:
            raw = await request.body()
        except ClientDisconnect:
            # Nobody reads the answer; without this, the route's exception is a traceback.
            raise Refused(499, "the client left before its request was read")
        try:
            data = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as error:
            raise Refused(400, f"the body is not valid JSON: {error}")
        if not isinstance(data, dict):
            raise Refused(400, "the body must be a JSON object")
        try:
            body = model.model_validate(data)
        except ValidationError as error:
            first = error.errors()[0]
            where = ".".join(str(part) for part in first["loc"])
            raise Refused(400, f"{where}: {first['msg']}", param=where)
        problem = body.unsupported()
        if problem:
            raise Refused(400, problem)
        if capped:
            check_cap()
        return body

    async def respond(request: Request, generation: Generation, stream: bool,
                      chunks, whole, done: bool = True) -> Response:
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
                        # Chunks already queued would otherwise all be written before the
                        # loop runs a lost connection's callback, into a closed socket
                        # (which asyncio logs from the fifth write on).
                        await asyncio.sleep(0)
                    if done:
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

    @app.get("/version")  # vLLM's: the server's version, for clients that check it
    async def version():
        return {"version": _dsrt.version()}

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
                ids = await encode(server.render_chat(body), add_special_tokens=bool(
                    body.add_special_tokens))
            else:
                ids = await encode(body.prompt, add_special_tokens=(
                    True if body.add_special_tokens is None else body.add_special_tokens))
        except Refused as error:
            return refused(error)
        return {"count": len(ids), "max_model_len": server.engine.max_seq_len, "tokens": ids}

    # vLLM's: forgets the prefix cache. Refused (409) while requests run: the engine resets
    # only between them.
    @app.post("/reset_prefix_cache")
    async def reset_prefix_cache():
        try:
            server.engine.reset_prefix_cache()
        except _dsrt.Error as error:
            return refused(Refused(409, str(error).split(": ", 1)[-1]))
        return Response(status_code=200)

    @app.post("/detokenize")
    async def detokenize(request: Request):
        try:
            body = await parse(request, DetokenizeRequest, capped=False)
            server.require_tokenizer()
            try:
                text = server.tokenizer.decode(body.tokens, skip_special_tokens=False)
            except _dsrt.Error as error:
                raise Refused(400, str(error).split(": ", 1)[-1], param="tokens")
        except Refused as error:
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
                prompts = [await encode(p) if isinstance(p, str) else list(p) for p in prompt]
            except _dsrt.Error as error:
                raise Refused(400, str(error).split(": ", 1)[-1], param="prompt")
            check_cap()  # again: others may have come in while a long prompt was encoded
            if not prompts or any(not p for p in prompts):
                raise Refused(400, "the prompt is empty", param="prompt")
            if body.truncate_prompt_tokens is not None:
                prompts = [server.truncated(body, p) for p in prompts]
                # echo gives the prompt the model saw.
                prompt = prompts
            # echo with max_tokens 0 scores the prompt (vLLM's, as the legacy OpenAI API and
            # lm-evaluation-harness use it): its text and log-probabilities come back, and
            # the one token computed to get them is not shown (usage still counts it).
            scoring = body.echo and body.max_tokens == 0
            if body.max_tokens == 0 and (not body.echo or body.use_beam_search):
                raise Refused(400, "max_tokens must be at least 1 (0 only with echo and "
                                   "without beam search: the prompt scored, nothing "
                                   "generated)", param="max_tokens")
            if body.use_beam_search:
                return await beam_answer(server, beam_threads, request, body, prompts,
                                         body.max_tokens, chat=False)
            params = [server.params(body, 1 if scoring else body.max_tokens, len(p),
                                    body.logprobs)
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
        except Refused as error:
            return refused(error)
        answer = Answer("cmpl", "text_completion", body, server.model_name)
        chunk = answer.chunk
        names = server.token_names(body)

        async def shown(gen: Generation):
            """The updates as answered: when scoring, the prompt alone."""
            async for index, update in gen.updates():
                if scoring:
                    update = dataclasses.replace(update, text="", token_ids=[], logprobs=[])
                yield index, update

        async def chunks(gen: Generation):
            offsets = [0] * choice_count
            started = [False] * choice_count
            async for index, update in shown(gen):
                # The echo rides on each choice's first chunk.
                head, text = None, update.text
                head_of_choice = not started[index]
                if body.echo and not started[index]:
                    text = echoed[index] + text
                    if body.logprobs is not None:
                        head = echo_logprobs(names, gen.prompts[index],
                                              update.prompt_logprobs)
                        offsets[index] = sum(len(t) for t in head["tokens"])
                started[index] = True
                logprobs = None
                if body.logprobs is not None:
                    logprobs = joined_logprobs(head, completion_logprobs(
                        names, update.logprobs, offsets[index]))
                offsets[index] += len(update.text)
                choice = {"index": index, "text": text, "logprobs": logprobs,
                          "finish_reason": update.finish_reason}
                if not server.has_tokenizer or body.return_token_ids:
                    choice["token_ids"] = update.token_ids
                if body.return_token_ids and head_of_choice:
                    choice["prompt_token_ids"] = gen.prompts[index]
                yield sse(chunk([choice], generation=gen))
            if answer.include_usage:
                yield sse(chunk([], gen.usage()))

        async def whole(gen: Generation):
            texts = [""] * choice_count
            token_ids: list[list[int]] = [[] for _ in range(choice_count)]
            entries: list[list[TokenLogprob]] = [[] for _ in range(choice_count)]
            prompt_entries: list[list[TokenLogprob]] = [[] for _ in range(choice_count)]
            async for index, update in shown(gen):
                texts[index] += update.text
                token_ids[index] += update.token_ids
                entries[index] += update.logprobs
                prompt_entries[index] += update.prompt_logprobs

            def logprobs(i: int) -> Optional[dict]:
                if body.logprobs is None:
                    return None
                if not body.echo:
                    return completion_logprobs(names, entries[i], 0)
                head = echo_logprobs(names, gen.prompts[i], prompt_entries[i])
                return joined_logprobs(head, completion_logprobs(
                    names, entries[i], sum(len(t) for t in head["tokens"])))
            choices = [{"index": i, "text": echoed[i] + texts[i], "finish_reason": gen.finish[i],
                        "logprobs": logprobs(i)} for i in range(choice_count)]
            # Without a tokenizer the answer is its token ids; return_token_ids asks for them.
            if not server.has_tokenizer or body.return_token_ids:
                for choice, ids in zip(choices, token_ids):
                    choice["token_ids"] = ids
            if body.return_token_ids:
                for index, choice in enumerate(choices):
                    choice["prompt_token_ids"] = gen.prompts[index]
            return answer.whole("text_completion", choices, gen.usage())

        return await respond(request, generation, body.stream, chunks, whole)

    async def prepare_chat(body: ChatRequest):
        """A chat request's engine requests: (its tools, its rendered prompt, the
        generation, how its thinking is read)."""
        try:
            tools = body.tool_call(server.tool_call_parser)
        except ValueError as error:
            raise Refused(400, str(error), param="tool_choice")
        prompt = server.render_chat(body)
        ids = server.truncated(body, await encode(prompt, add_special_tokens=False))
        check_cap()  # again, as for completions
        top = body.top_logprobs or 0
        params = server.params(body, body.max_completion_tokens or body.max_tokens,
                               len(ids), top if body.logprobs else None)
        if tools.mode == "auto" and tools.parser.keeps_special_tokens:
            # As vLLM: the format's markers are special tokens in some tokenizers.
            params = dataclasses.replace(params, skip_special_tokens=False)
        thinking = server.thinking(prompt)
        if thinking == "first" and params.structured_outputs is not None:
            # The grammar holds for the answer, after the thinking, as vLLM's.
            params = dataclasses.replace(params, grammar_after=THINKING_END)
        return tools, prompt, server.choices([ids], [params], body.n), thinking

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        try:
            body = await parse(request, ChatRequest)
            if body.use_beam_search:
                ids = server.truncated(body, await encode(server.render_chat(body),
                                                          add_special_tokens=False))
                return await beam_answer(server, beam_threads, request, body, [ids],
                                         body.max_completion_tokens or body.max_tokens,
                                         chat=True)
            tools, prompt, generation, thinking = await prepare_chat(body)
        except Refused as error:
            return refused(error)
        answer = Answer("chatcmpl", "chat.completion.chunk", body, server.model_name)
        chunk = answer.chunk
        names = server.token_names(body)
        readers = [ChoiceReader(tools, server.reasoning_parser if thinking else None, prompt,
                                body.parallel_tool_calls) for _ in range(body.n)]

        async def chunks(gen: Generation):
            for index in range(body.n):
                role = chunk([{"index": index, "delta": {"role": "assistant", "content": ""},
                               "logprobs": None, "finish_reason": None}], generation=gen)
                if body.return_token_ids and index == 0:
                    role["prompt_token_ids"] = gen.prompts[0]
                yield sse(role)
            # A choice's tokens whose text is held (a tool call or tag it may begin) go out
            # with the next chunk it sends.
            held: list[list[int]] = [[] for _ in range(body.n)]
            async for index, update in gen.updates():
                delta, finish = readers[index].delta(update.text, update.finish_reason)
                logprobs = chat_logprobs(names, update.logprobs) if body.logprobs else None
                if body.return_token_ids:
                    held[index] += update.token_ids
                if not (delta or logprobs or finish):
                    continue  # text held while it may begin a tool call or a tag
                choice = {"index": index, "delta": delta, "logprobs": logprobs,
                          "finish_reason": finish}
                if body.return_token_ids:
                    choice["token_ids"], held[index] = held[index], []
                yield sse(chunk([choice], generation=gen))
            if answer.include_usage:
                yield sse(chunk([], gen.usage()))

        async def whole(gen: Generation):
            texts, entries = [""] * body.n, [[] for _ in range(body.n)]
            token_ids: list[list[int]] = [[] for _ in range(body.n)]
            async for index, update in gen.updates():
                texts[index] += update.text
                entries[index] += update.logprobs
                token_ids[index] += update.token_ids
            choices = []
            for index in range(body.n):
                message, finish = readers[index].message(texts[index], gen.finish[index])
                choices.append({
                    "index": index, "message": message,
                    "logprobs": chat_logprobs(names, entries[index]) if body.logprobs else None,
                    "finish_reason": finish})
                if body.return_token_ids:
                    choices[-1]["token_ids"] = token_ids[index]
            whole_answer = answer.whole("chat.completion", choices, gen.usage())
            if body.return_token_ids:
                whole_answer["prompt_token_ids"] = gen.prompts[0]
            return whole_answer

        return await respond(request, generation, body.stream, chunks, whole)

    @app.post("/v1/responses")
    async def responses(request: Request):
        try:
            asked = await parse(request, ResponsesRequest)
            try:
                body = asked.chat()
            except ValueError as error:  # pydantic's ValidationError among them
                raise Refused(400, str(error), param="input")
            tools, prompt, generation, thinking = await prepare_chat(body)
        except Refused as error:
            return refused(error)
        reader = ChoiceReader(tools, server.reasoning_parser if thinking else None, prompt,
                              body.parallel_tool_calls)
        writer = ResponseWriter(asked, server.model_name)

        async def events(gen: Generation):
            for event in writer.start():
                yield event
            async for _, update in gen.updates():
                delta, finish = reader.delta(update.text, update.finish_reason)
                for event in writer.delta(delta):
                    yield event
                if finish:
                    for event in writer.finish(finish, writer.usage(gen.usage())):
                        yield event

        async def whole(gen: Generation):
            text = ""
            async for _, update in gen.updates():
                text += update.text
            message, finish = reader.message(text, gen.finish[0])
            return writer.whole(message, finish, writer.usage(gen.usage()))

        # The Responses API's stream ends with its last event, not [DONE].
        return await respond(request, generation, asked.stream, events, whole, done=False)

    return app


def main(argv: Optional[list[str]] = None) -> int:
    """``dsserve``: the command line (server_cli.py) over create_app."""
    from .server_cli import main as run
    return run(argv)


if __name__ == "__main__":
    sys.exit(main())
