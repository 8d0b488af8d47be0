"""vLLM's ``use_beam_search`` on dsserve's completions and chat routes: the n best of n
beams (beam_search.py), answered whole."""
from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from typing import Optional

from fastapi import Request
from fastapi.responses import JSONResponse, Response

from . import _dsrt
from .beam_search import BeamSearchParams, run_beam_search, shown_tokens
from .protocol import usage
from .server_state import Answer, Refused, Server


async def beam_answer(server: Server, threads: concurrent.futures.Executor, request: Request,
                      body, prompts: list[list[int]], max_tokens: Optional[int],
                      chat: bool) -> Response:
    """vLLM's use_beam_search: body.n beams per prompt (beam_search.py), the best n
    answered as its choices, whole; each prompt's search on a worker thread, since it
    waits on the engine step by step."""
    if body.stream:
        raise Refused(400, "use_beam_search answers whole: ask without stream",
                      param="stream")
    if (body.logprobs is not None and body.logprobs is not False) or \
            getattr(body, "echo", False):
        raise Refused(400, "use_beam_search reports no logprobs and no echo",
                      param="use_beam_search")
    searches = []
    for ids in prompts:
        # The request's checks (context, priority, a grammar that does not compile), once.
        checked = server.params(body, max_tokens, len(ids), None)
        if checked.structured_outputs is not None or getattr(body, "tools", None):
            raise Refused(400, "use_beam_search follows no grammar and calls no tools",
                          param="use_beam_search")
        searches.append((ids, BeamSearchParams(
            beam_width=body.n, max_tokens=checked.max_tokens, ignore_eos=body.ignore_eos,
            temperature=float(body.temperature or 0.0),
            length_penalty=float(body.length_penalty),
            include_stop_str_in_output=body.include_stop_str_in_output)))

    stop = threading.Event()

    def search_all():
        return [run_beam_search(server.engine, [ids], params, server.engine.max_seq_len,
                                stop)[0] for ids, params in searches]
    server.in_flight += 1
    try:
        task = asyncio.get_running_loop().run_in_executor(threads, search_all)
        # A client that goes away stops the search before its next step.
        while not task.done():
            await asyncio.wait({task}, timeout=0.1)
            if not task.done() and await request.is_disconnected():
                stop.set()
        results = task.result()
    except _dsrt.Error as error:
        raise Refused(400, str(error).split(": ", 1)[-1], param="use_beam_search")
    finally:
        stop.set()
        server.in_flight -= 1
    choices, generated = [], 0
    for (ids, params), output in zip(searches, results):
        for beam in output.sequences:
            tokens = shown_tokens(beam, params, len(ids))
            generated += len(beam.tokens) - len(ids)
            text = server.tokenizer.decode(tokens) if server.has_tokenizer else ""
            choice = {"index": len(choices), "finish_reason": beam.finish_reason,
                      "logprobs": None}
            if chat:
                choice["message"] = {"role": "assistant", "content": text}
            else:
                choice["text"] = text
                if not server.has_tokenizer:
                    choice["token_ids"] = tokens
            choices.append(choice)
    answer = Answer("chatcmpl" if chat else "cmpl", "", body, server.model_name)
    return JSONResponse(answer.whole("chat.completion" if chat else "text_completion",
                                     choices, usage(sum(len(ids) for ids in prompts),
                                                    generated)))
