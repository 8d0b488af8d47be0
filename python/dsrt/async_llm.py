"""``AsyncLLM``: the serving engine from asyncio, shaped as vLLM's ``AsyncLLM``
(``AsyncLLMEngine``), for a Python program that serves requests of its own (a web framework,
a queue worker) and wants each one's tokens as they come without a thread per request."""
from __future__ import annotations

import asyncio
import dataclasses
import itertools
import threading
from typing import AsyncIterator, Iterable, Optional, Union

from .beam_search import BeamSearchParams, run_beam_search, shown_tokens
from .engine import TokenLogprob, Update
from .llm import (LLM, CompletionOutput, Prompt, RequestOutput, RequestOutputKind,
                  SamplingParams, _add_update, _empty_output)


class _Live:
    """One generate() call's engine requests and where their updates go."""

    def __init__(self, loop: asyncio.AbstractEventLoop, result: RequestOutput):
        self.loop = loop
        self.result = result  # the outputs so far: an output with a finish_reason is done
        self.updates: "asyncio.Queue[tuple[int, Update]]" = asyncio.Queue()
        self.requests: list = []

    def unfinished(self) -> list[int]:
        return [j for j, output in enumerate(self.result.outputs) if output.finish_reason is None]

    def post(self, j: int, update: Update) -> None:
        """From any thread (the engine's router): output j's update, to the caller's loop."""
        self.loop.call_soon_threadsafe(self.updates.put_nowait, (j, update))


class AsyncLLM:
    """A plan served by the engine in this process, from asyncio.

    >>> engine = dsrt.AsyncLLM("model.dsp")     # LLM's options
    >>> async for output in engine.generate("Hello", dsrt.SamplingParams(max_tokens=8)):
    ...     print(output.outputs[0].text)

    ``generate`` is an async generator of :class:`RequestOutput`, one as each batch of
    tokens comes: by default the whole output so far (vLLM's
    ``RequestOutputKind.CUMULATIVE``); ``SamplingParams(output_kind=DELTA)`` yields only the
    new part of the output that moved, and ``FINAL_ONLY`` the finished output once. The last
    one has ``finished`` True. Leaving the ``async for`` early (``break``, an exception, the
    task cancelled) cancels the request and frees its KV blocks; ``abort(request_id)`` ends
    it from elsewhere, its outputs then finishing as "abort". Many ``generate`` calls run at
    once, batched per iteration by the engine; the engine steps on its own thread, so the
    event loop never waits on a step.
    """

    def __init__(self, model: str, **options):
        self._llm = LLM(model, **options)
        self.tokenizer = self._llm.tokenizer
        self._live: dict[str, _Live] = {}
        self._suffixes = itertools.count(1)

    @property
    def max_seq_len(self) -> int:
        return self._llm.max_seq_len

    def get_tokenizer(self):
        return self._llm.get_tokenizer()

    def get_default_sampling_params(self) -> SamplingParams:
        return self._llm.get_default_sampling_params()

    def apply_chat_template(self, messages: list[dict], add_generation_prompt: bool = True,
                            **kwargs) -> str:
        """The plan's chat template over ``messages`` (LLM.apply_chat_template's)."""
        return self._llm.apply_chat_template(messages, add_generation_prompt, **kwargs)

    async def generate(self, prompt: Prompt, sampling_params: Optional[SamplingParams] = None,
                       request_id: Optional[str] = None,
                       priority: int = 0) -> AsyncIterator[RequestOutput]:
        """The outputs of one prompt (text, token ids, or vLLM's ``{"prompt": ...}`` /
        ``{"prompt_token_ids": ...}``) as they come. ``request_id`` names it for
        ``abort``; by default the engine's id of its first output. A refused request (a
        prompt over the context, a bad option) raises :class:`dsrt.Error`, a request id in
        use ValueError. ``priority`` (lower first) needs ``scheduling_policy="priority"``."""
        params = sampling_params or self._llm.get_default_sampling_params()
        if request_id is not None and request_id in self._live:
            raise ValueError(f"request id {request_id!r} is already running")
        text, ids = self._llm._prompt_text_and_ids(prompt)
        ids = params._truncated(ids, self._llm.max_seq_len)
        copies = self._llm._engine_requests(params, ids, priority)
        result = _empty_output(text, ids, params, len(copies))
        live = _Live(asyncio.get_running_loop(), result)
        try:
            for j, request in enumerate(copies):
                live.requests.append(self._llm._loop.submit(
                    ids, request, lambda update, j=j: live.post(j, update)))
            if request_id is None:
                request_id = str(live.requests[0].id)
                if request_id in self._live:  # a caller's own id took the engine's
                    request_id += f".{next(self._suffixes)}"
            result.request_id = request_id
            self._live[request_id] = live
            async for output in self._outputs(result, live, params.output_kind):
                yield output
        finally:
            if self._live.get(request_id) is live:
                del self._live[request_id]
            self._cancel(live)

    async def beam_search(self, prompt: Prompt, request_id: Optional[str] = None,
                          params: Optional[BeamSearchParams] = None
                          ) -> AsyncIterator[RequestOutput]:
        """vLLM's ``AsyncLLM.beam_search``: one RequestOutput once the search is done, its
        outputs the best ``params.beam_width`` beams, best first (each the generated tokens
        and text, each token's log-probability among its alternatives, so that
        ``cumulative_logprob`` is the beam's; "stop" where EOS ended it). The search
        waits on the engine step by step on a worker thread; the event loop does not."""
        if params is None:
            raise ValueError("beam_search needs params: a dsrt.BeamSearchParams")
        text, ids = self._llm._prompt_text_and_ids(prompt)
        stop = threading.Event()  # set when the caller leaves: the search ends at its next step
        try:
            found = await asyncio.get_running_loop().run_in_executor(
                None, run_beam_search, self._llm._loop, [ids], params, self._llm.max_seq_len,
                stop)
        finally:
            stop.set()
        outputs = []
        for j, beam in enumerate(found[0].sequences):
            generated = beam.tokens[len(ids):]
            # Each token with the alternatives it was chosen among: cumulative_logprob is
            # then the beam's.
            logprobs = [TokenLogprob(token, alternatives[token],
                                     sorted(alternatives.items(), key=lambda a: -a[1]))
                        for token, alternatives in zip(generated, beam.logprobs)]
            outputs.append(CompletionOutput(
                j, self.tokenizer.decode(shown_tokens(beam, params, len(ids))), generated,
                beam.finish_reason, logprobs))
        yield RequestOutput(text, ids, outputs, True, request_id=request_id or "")

    async def abort(self, request_id: Union[str, Iterable[str]]) -> None:
        """Ends running requests (vLLM's ``abort``): their outputs finish as "abort" and
        their KV blocks are freed. Ids that are not running are ignored."""
        ids = [request_id] if isinstance(request_id, str) else list(request_id)
        for rid in ids:
            live = self._live.get(rid)
            if live is None:
                continue
            self._cancel(live)
            for j in live.unfinished():
                live.post(j, Update(finish_reason="abort"))

    def reset_prefix_cache(self) -> None:
        self._llm.reset_prefix_cache()

    def shutdown(self) -> None:
        """Stops the engine (vLLM's name; ``close`` and ``with`` as well)."""
        self._llm.close()

    close = shutdown

    def __enter__(self) -> "AsyncLLM":
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()

    def _cancel(self, live: _Live) -> None:
        for j in live.unfinished():
            if j < len(live.requests):  # submitted before a refusal, if one came
                self._llm._loop.cancel(live.requests[j].id)

    async def _outputs(self, result: RequestOutput, live: _Live,
                       kind: RequestOutputKind) -> AsyncIterator[RequestOutput]:
        while not result.finished:
            j, update = await live.updates.get()
            moved = [(j, update)]
            # What else has come meanwhile goes out with it: one cumulative output per
            # wake-up (a delta per update, each `finished` as of its own).
            while not live.updates.empty():
                moved.append(live.updates.get_nowait())
            for j, update in moved:
                # An update after its output's finish (an abort's beside the last) is dropped.
                running = result.outputs[j].finish_reason is None
                _add_update(result, j, update)
                if running and kind is RequestOutputKind.DELTA:
                    yield _delta(result, j, update)
            if kind is RequestOutputKind.CUMULATIVE:
                yield _snapshot(result)
        if kind is RequestOutputKind.FINAL_ONLY:
            yield result


def _snapshot(result: RequestOutput) -> RequestOutput:
    """`result` as it is now: the caller may keep it while later tokens come."""
    return dataclasses.replace(result, prompt_logprobs=(
        None if result.prompt_logprobs is None else list(result.prompt_logprobs)), outputs=[
        dataclasses.replace(o, token_ids=list(o.token_ids),
                            logprobs=None if o.logprobs is None else list(o.logprobs))
        for o in result.outputs])


def _delta(result: RequestOutput, j: int, update: Update) -> RequestOutput:
    """Output j's new text and tokens alone (vLLM's DELTA: the outputs that moved)."""
    logprobs = None if result.outputs[j].logprobs is None else list(update.logprobs)
    prompt_logprobs = None
    if result.prompt_logprobs is not None and j == 0 and update.prompt_logprobs:
        prompt_logprobs = [None] + list(update.prompt_logprobs)
    return dataclasses.replace(
        result, prompt_logprobs=prompt_logprobs, outputs=[CompletionOutput(
            j, update.text, list(update.token_ids), update.finish_reason, logprobs)])
