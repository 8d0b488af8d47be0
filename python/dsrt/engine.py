"""The serving engine from Python: one native engine stepping on its own thread, and one
Python thread that routes its token events to the requests that wait for them.

The engine's thread never takes the GIL (its callback queues events in C++); the routing
thread collects them in batches with the GIL released while it waits, detokenizes, applies
stop strings, and hands each request's updates to the request's ``notify`` (a queue for
``LLM``, the event loop for the server)."""
from __future__ import annotations

import atexit
import dataclasses
import os
import sys
import threading
import weakref
from typing import Callable, Optional, Sequence, Union

from . import _dsrt
from ._limits import INT32, INT64, within
from .structured import (AfterMarker, Grammars, MaskChain, StructuredOutputsParams, TokenFilter,
                         TokenMask, bad_word_sequences)
from .text_side import TextSide, folder_text_side, over_plan, plan_text_side
from .tokenizer import IncrementalDetokenizer

# The engine's batch_invariant levels: False, True (integer weights bit for bit, float ones
# within f32 rounding) and "exact" (float weights bit for bit too).
_BATCH_INVARIANCE = {False: 0, True: 1, "exact": 2}

# dsrt_request_state
_LENGTH, _STOP, _CANCELLED = 0, 1, 3
FINISH_REASONS = {_LENGTH: "length", _STOP: "stop", _CANCELLED: "abort"}


@dataclasses.dataclass
class TokenLogprob:
    """A generated token's log-probability (log-softmax of the raw logits) and the likeliest
    alternatives as (token id, log-probability), likeliest first."""
    token_id: int
    logprob: float
    top: list[tuple[int, float]]


@dataclasses.dataclass
class Update:
    """What one batch of events added to a request: new text, new token ids, their
    log-probabilities (when asked for), and the finish reason once it has finished."""
    text: str = ""
    token_ids: list[int] = dataclasses.field(default_factory=list)
    logprobs: list[TokenLogprob] = dataclasses.field(default_factory=list)
    finish_reason: Optional[str] = None
    # The prompt tokens whose KV came from the prefix cache (vLLM's num_cached_tokens:
    # whole blocks, as the request's first scheduling found them); with the first token.
    num_cached_tokens: Optional[int] = None
    # With RequestParams.prompt_logprobs: prompt tokens 1, 2, ... each with its
    # log-probability given the ones before it; they come with the first update.
    prompt_logprobs: list[TokenLogprob] = dataclasses.field(default_factory=list)


# dsrt_request_state's DSRT_REQUEST_PROMPT: an event of a prompt token's log-probability.
_PROMPT_EVENT = -2


@dataclasses.dataclass
class RequestParams:
    """A request's sampling and stopping, as the engine and the stop-string check take them."""
    max_tokens: int = 16
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    seed: Optional[int] = None
    stop: Sequence[str] = ()
    stop_token_ids: Sequence[int] = ()
    ignore_eos: bool = False
    logprobs: Optional[int] = None
    skip_special_tokens: bool = True
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    prompt_logprobs: Optional[int] = None
    logit_bias: Optional[dict[int, float]] = None
    min_tokens: int = 0
    # vLLM's: the stop string that ended the text is kept at its end.
    include_stop_str_in_output: bool = False
    # The grammar the output follows (structured.py), or None; with grammar_after, only the
    # output after that text (a reasoning model's "</think>").
    structured_outputs: Optional[StructuredOutputsParams] = None
    grammar_after: Optional[str] = None
    # vLLM's: only these tokens may be drawn (None: any); these words may not be written.
    allowed_token_ids: Optional[Sequence[int]] = None
    bad_words: Sequence[str] = ()
    # vLLM's: lower values are scheduled first (and preempted last); 0 for all is FCFS.
    priority: int = 0


class Request:
    """One request's state on the routing thread: its text so far and its stop strings."""

    def __init__(self, loop: "EngineLoop", prompt_ids: Sequence[int], params: RequestParams,
                 notify: Callable[[Update], None]):
        self.loop = loop
        self.prompt_ids = list(prompt_ids)
        self.params = params
        self.notify = notify
        self.id = -1
        self.finished = False
        self._detokenizer = IncrementalDetokenizer(loop.tokenizer, self.prompt_ids,
                                                  params.skip_special_tokens)
        self._text = ""       # all text so far
        self._emitted = 0     # of which this much was handed out
        self._hold = max((len(s) for s in params.stop), default=1) - 1
        self._prompt_logprobs: list[TokenLogprob] = []  # until the next update takes them
        self._generated = 0   # tokens so far: stop strings wait for min_tokens, as vLLM's
        # The token that ends the request (EOS, a stop token id) is in its token ids but not
        # in its text unless include_stop_str_in_output, as vLLM's detokenizer leaves it out
        # (an EOS that is not a special token would otherwise end every text: "#", "</s>").
        self._stop_tokens = (frozenset(params.stop_token_ids) |
                             (frozenset() if params.ignore_eos else loop.eos_token_ids))
        self.num_cached_tokens: Optional[int] = None  # Update.num_cached_tokens, once known
        # structured output's grammar state, allowed_token_ids and bad_words
        self.mask: Optional[Union[TokenMask, TokenFilter, MaskChain]] = None

    def on_events(self, events: list) -> None:
        """One update per token (a stream's chunk); the finish rides on the last token's
        when both come in one batch (they do unless the router woke between them)."""
        i = 0
        while i < len(events) and not self.finished:
            _, token, state, logprob, top, cached = events[i]
            if state == _PROMPT_EVENT:
                self._prompt_logprobs.append(TokenLogprob(token, logprob, list(top)))
                i += 1
                continue
            update = Update()
            update.prompt_logprobs, self._prompt_logprobs = self._prompt_logprobs, []
            if cached >= 0 and self.num_cached_tokens is None:
                self.num_cached_tokens = update.num_cached_tokens = cached
            if token >= 0:
                self._take(update, token, logprob, top)
                if update.finish_reason is None and i + 1 < len(events) and events[i + 1][1] < 0:
                    i += 1
                    token, state = -1, events[i][2]
            if token < 0 and update.finish_reason is None:
                self._text += self._detokenizer.flush()
                update.finish_reason = ("stop" if self._stopped_by_string()
                                        else FINISH_REASONS.get(state, "abort"))
                if self.mask is not None and self.mask.error:
                    print(f"dsrt: request {self.id} ended: {self.mask.error}", file=sys.stderr)
            # Text that might be the start of a stop string waits until it cannot be.
            end = len(self._text) if update.finish_reason else max(
                self._emitted, len(self._text) - self._hold)
            update.text = self._text[self._emitted:end]
            self._emitted = end
            self.finished = update.finish_reason is not None
            self.notify(update)
            i += 1

    def fail(self, error: BaseException) -> None:
        """Ends a request whose tokens could not be routed (its text could not be made): it
        is cancelled and finishes as "abort", and the router goes on with the others. Said
        on stderr, since nothing else would show it."""
        print(f"dsrt: request {self.id} failed while its tokens were routed, cancelled: "
              f"{error!r}", file=sys.stderr)
        if self.finished:
            return
        self.finished = True
        self.loop.cancel(self.id)
        try:
            self.notify(Update(finish_reason="abort"))
        except Exception:
            pass

    def _take(self, update: Update, token: int, logprob, top) -> None:
        update.token_ids.append(token)
        self._generated += 1
        if logprob is not None:
            update.logprobs.append(TokenLogprob(token, logprob, list(top)))
        if token in self._stop_tokens and not self.params.include_stop_str_in_output:
            return  # the engine's finish follows: no text, and no stop string to look for
        self._text += self._detokenizer.add(token)
        if self._stopped_by_string():
            update.finish_reason = "stop"
            self.loop.cancel(self.id)

    def _stopped_by_string(self) -> bool:
        if self._generated < self.params.min_tokens:
            return False
        # Only the tail can hold a new match: the text before it was checked already.
        window = len(self._text) - self._emitted
        start = max(0, len(self._text) - window - self._hold)
        found = [(at, -len(s)) for s in self.params.stop
                 if (at := self._text.find(s, start)) >= 0]
        if not found:
            return False
        # The earliest match (the longest of those that start there).
        at, minus_length = min(found)
        self._text = self._text[:at - minus_length if self.params.include_stop_str_in_output
                                else at]
        self._emitted = min(self._emitted, len(self._text))
        return True


def _check_engine_options(**options) -> None:
    """dsrt.Error naming an engine option of the wrong type or past what the C API takes
    (nanobind's own refusal names no option: a block_size of 1.5 or 2**40 was an
    "incompatible function arguments" TypeError listing every parameter). Values inside
    the range are the engine's to judge, with its own messages."""
    def refuse(name: str, kind: str) -> None:
        raise _dsrt.Error(f"DSRT_INVALID_ARGUMENT: {name} must be {kind}, not "
                          f"{options[name]!r}")
    for name in ("prefix_caching", "mpi"):
        if not isinstance(options[name], bool):
            refuse(name, "True or False")
    if not isinstance(options["batch_invariant"], bool) and options["batch_invariant"] != "exact":
        refuse("batch_invariant", 'True, False or "exact"')
    for name in ("block_size", "max_tokens_per_step", "max_running", "speculative_tokens",
                 "prompt_lookup_max", "prompt_lookup_min", "speculative_max_batch"):
        if name not in options:  # an engine option left to the C API's default
            continue
        if not isinstance(options[name], int) or isinstance(options[name], bool):
            refuse(name, "an integer")
        within(name, (options[name],), INT32)
    bytes_ = options["kv_cache_bytes"]
    if not isinstance(bytes_, int) or isinstance(bytes_, bool) or not 0 <= bytes_ < 1 << 64:
        refuse("kv_cache_bytes", "an integer in [0, 2**64)")
    fraction = options["kv_cache_memory_fraction"]
    if not isinstance(fraction, (int, float)) or isinstance(fraction, bool):
        refuse("kv_cache_memory_fraction", "a number")


def speculative_options(config: Optional[dict]) -> dict:
    """vLLM's speculative_config for prompt lookup ({"method": "ngram",
    "num_speculative_tokens": k, "prompt_lookup_max": n, "prompt_lookup_min": m,
    "disable_by_batch_size": b}) as the engine's options (speculative_tokens,
    prompt_lookup_max, prompt_lookup_min, speculative_max_batch: drafts only in steps of at
    most b decode sequences, where vLLM counts the requests queued). None: off. Another
    method (a draft model, EAGLE, MTP) or an unknown key is refused by name."""
    if config is None:
        return {}
    if not isinstance(config, dict):
        raise _dsrt.Error(f"DSRT_INVALID_ARGUMENT: speculative_config must be a dict, not "
                          f"{config!r}")
    known = {"method", "num_speculative_tokens", "prompt_lookup_max", "prompt_lookup_min",
             "disable_by_batch_size"}
    unknown = sorted(set(config) - known)
    if unknown:
        raise _dsrt.Error(f"DSRT_INVALID_ARGUMENT: speculative_config takes {sorted(known)}, "
                          f"not {unknown}")
    if config.get("method", "ngram") not in ("ngram", "prompt_lookup"):
        raise _dsrt.Error(f"DSRT_INVALID_ARGUMENT: speculative_config method "
                          f"{config['method']!r}: dsrt drafts by prompt lookup only "
                          f"(\"ngram\")")
    if "num_speculative_tokens" not in config:
        raise _dsrt.Error("DSRT_INVALID_ARGUMENT: speculative_config needs "
                          "num_speculative_tokens")
    # The keys not given keep the C API's defaults (the native Engine's keyword defaults).
    names = {"num_speculative_tokens": "speculative_tokens",
             "prompt_lookup_max": "prompt_lookup_max",
             "prompt_lookup_min": "prompt_lookup_min",
             "disable_by_batch_size": "speculative_max_batch"}
    return {names[key]: value for key, value in config.items() if key in names}


def _has_program(plan: "_dsrt.Plan", name: str) -> bool:
    try:
        plan.io(name, False)
        return True
    except _dsrt.Error:
        return False


class EngineLoop:
    """A native engine and the thread that routes its events. ``mpi=True`` makes this
    process one rank of a tensor-parallel plan under mpirun: rank 0 takes requests, the
    others call ``follow()``."""

    def __init__(self, plan: str, *, device: str = "cpu", block_size: int = 16,
                 kv_cache_bytes: int = 0, max_tokens_per_step: int = 0, max_running: int = 0,
                 prefix_caching: bool = True, batch_invariant: Union[bool, str] = True,
                 kv_cache_dtype: str = "auto", mpi: bool = False,
                 kv_cache_memory_fraction: float = 0.0, max_seq_len: Optional[int] = None,
                 speculative_config: Optional[dict] = None, tokenizer: Optional[str] = None):
        speculation = speculative_options(speculative_config)
        _check_engine_options(block_size=block_size, kv_cache_bytes=kv_cache_bytes,
                              max_tokens_per_step=max_tokens_per_step, max_running=max_running,
                              prefix_caching=prefix_caching, batch_invariant=batch_invariant,
                              mpi=mpi, kv_cache_memory_fraction=kv_cache_memory_fraction,
                              **speculation)
        self.plan = _dsrt.Plan(plan)
        self.max_batch, self.max_seq_len = self.plan.limits
        # vLLM's max_model_len over a plan of more positions: a cap on each request's prompt
        # and new tokens (the KV budget's default stays the plan's).
        if max_seq_len is not None:
            if not 1 <= max_seq_len <= self.max_seq_len:
                raise _dsrt.Error(f"DSRT_INVALID_ARGUMENT: max_seq_len {max_seq_len} must be "
                                  f"between 1 and the plan's {self.max_seq_len} positions "
                                  f"(more needs the model compiled again)")
            self.max_seq_len = max_seq_len
        # A tokenizer of the user's is read (and refused) before the engine starts.
        given = (folder_text_side(tokenizer, self.plan.vocabulary()[0])
                 if tokenizer is not None else None)
        self._native = _dsrt.Engine(self.plan, device, block_size, kv_cache_bytes,
                                    max_tokens_per_step, max_running, prefix_caching,
                                    _BATCH_INVARIANCE[batch_invariant], kv_cache_dtype, mpi,
                                    kv_cache_memory_fraction, **speculation)
        self.rank = self._native.rank
        # The text side: the plan's, or a tokenizer folder's (vLLM's --tokenizer), whose
        # templates and special tokens take the plan's place where it has them.
        self.text: Optional[TextSide] = (over_plan(given, plan_text_side(self.plan))
                                         if self.rank == 0 else None)
        self.tokenizer = self.text.tokenizer if self.text else None
        self._grammars = Grammars(self.plan, given.tokenizer_json if given else None)
        # The tokens that end a request as the engine's stopsAt does (with stop_token_ids).
        self.eos_token_ids = frozenset(self.plan.vocabulary()[1])
        if self.rank == 0 and not _has_program(self.plan, "step"):
            # It serves, but a step computes only max_batch tokens: a prompt of 400 takes
            # 100 steps before its first token.
            print(f"dsrt: warning: {plan} has no step program (compiled without --serving): "
                  f"the engine computes at most {self._native.stats()['max_tokens_per_step']} "
                  f"tokens a step, its max_batch; dsc compile --serving gives 256",
                  file=sys.stderr)
        self._requests: dict[int, Request] = {}
        self._lock = threading.Lock()
        self._closing = False
        self._router: Optional[threading.Thread] = None
        # Stopped before the interpreter tears down, not by the router thread's end.
        atexit.register(EngineLoop._close_if_alive, weakref.ref(self))
        if self.rank == 0:
            self._native.start()
            self._router = threading.Thread(target=self._route, name="dsrt-router",
                                            daemon=True)
            self._router.start()

    def submit(self, prompt_ids: Sequence[int], params: RequestParams,
               notify: Callable[[Update], None]) -> Request:
        """Queues a request; ``notify`` gets its updates on the routing thread. A refused
        request (a prompt over the context, bad options) raises ``dsrt.Error``."""
        if self._closing:
            raise _dsrt.Error("DSRT_INVALID_ARGUMENT: the engine is shut down")
        within("a prompt token", prompt_ids, INT64)
        within("stop_token_ids", params.stop_token_ids, INT64)
        within("a logit_bias token", params.logit_bias or (), INT64)
        for name in ("max_tokens", "top_k", "min_tokens", "priority"):
            within(name, (getattr(params, name),), INT32)
        for name in ("logprobs", "prompt_logprobs"):
            if getattr(params, name) is not None:
                within(name, (getattr(params, name),), INT32)
        if len(prompt_ids) + params.max_tokens > self.max_seq_len:
            raise _dsrt.Error(f"DSRT_INVALID_ARGUMENT: a request of {len(prompt_ids)} prompt "
                              f"tokens and {params.max_tokens} new tokens exceeds the maximum "
                              f"sequence length {self.max_seq_len}")
        request = Request(self, prompt_ids, params, notify)
        masks = []
        if params.structured_outputs is not None:
            grammar = self._grammars.mask(params.structured_outputs, params.ignore_eos)
            masks.append(grammar if not params.grammar_after else
                         AfterMarker(grammar, params.grammar_after, self.tokenizer))
        if params.allowed_token_ids is not None or params.bad_words:
            vocab = self.plan.vocabulary()[0]
            masks.append(TokenFilter((vocab + 31) // 32, vocab, params.allowed_token_ids,
                                     bad_word_sequences(self.tokenizer, params.bad_words)))
        if masks:
            request.mask = masks[0] if len(masks) == 1 else MaskChain(masks)
        seed = params.seed if params.seed is not None else int.from_bytes(os.urandom(8), "little")
        logprobs = -1 if params.logprobs is None else params.logprobs
        # Registered under the lock the router takes: no event can come before its request.
        with self._lock:
            request.id = self._native.add_request(
                request.prompt_ids, params.max_tokens, params.temperature, params.top_k,
                params.top_p, seed & 0xFFFFFFFFFFFFFFFF, list(params.stop_token_ids),
                params.ignore_eos, logprobs, params.min_p, params.repetition_penalty,
                params.presence_penalty, params.frequency_penalty,
                -1 if params.prompt_logprobs is None else params.prompt_logprobs,
                [int(t) for t in (params.logit_bias or {})],
                [float(v) for v in (params.logit_bias or {}).values()], params.min_tokens,
                request.mask, params.priority)
            self._requests[request.id] = request
        return request

    def cancel(self, request_id: int) -> None:
        """Stops a request and frees its KV blocks; nothing if it has finished."""
        with self._lock:
            self._requests.pop(request_id, None)
        try:
            self._native.cancel(request_id)
        except _dsrt.Error:
            pass  # it finished first

    def reset_prefix_cache(self) -> None:
        """Forgets every cached KV block (vLLM's reset_prefix_cache): later requests hit
        nothing computed before. A dsrt.Error while requests run."""
        self._native.reset_prefix_cache()

    def stats(self) -> dict:
        return self._native.stats()

    def follow(self) -> None:
        """A follower rank's loop: runs rank 0's steps until rank 0 shuts down."""
        self._native.follow()

    def close(self) -> None:
        """Stops the engine and the router; requests still running get no more tokens."""
        if self._closing:
            return
        self._closing = True
        if self._router:
            self._native.interrupt()
            self._router.join()
        self._native.stop()

    @staticmethod
    def _close_if_alive(loop_ref: "weakref.ref[EngineLoop]") -> None:
        loop = loop_ref()
        if loop is not None:
            loop.close()

    def _route(self) -> None:
        while not self._closing:
            events = self._native.wait_events(0.25)
            if not events:
                continue
            batches: dict[int, list] = {}
            with self._lock:
                for event in events:
                    if event[0] in self._requests:
                        batches.setdefault(event[0], []).append(event)
                requests = {rid: self._requests[rid] for rid in batches}
                for rid, batch in batches.items():
                    if batch[-1][1] < 0:
                        del self._requests[rid]
            for rid, batch in batches.items():
                try:
                    requests[rid].on_events(batch)
                except Exception as error:  # one request's failure must not stop the others'
                    requests[rid].fail(error)


def truncate_prompt(ids: list[int], keep: Optional[int], max_seq_len: int,
                    name: str = "truncate_prompt_tokens") -> list[int]:
    """vLLM's truncate_prompt_tokens: the last `keep` ids (-1: the context's length of
    them); None keeps them all. dsrt.Error names a value that is not -1 or at least 1, or
    one past the context, as vLLM refuses it."""
    if keep is None:
        return ids
    if not isinstance(keep, int) or isinstance(keep, bool) or keep == 0 or keep < -1:
        raise _dsrt.Error(f"DSRT_INVALID_ARGUMENT: {name} must be -1 (the model's context "
                          f"length) or at least 1, not {keep!r}")
    if keep == -1:
        keep = max_seq_len
    if keep > max_seq_len:
        raise _dsrt.Error(f"DSRT_INVALID_ARGUMENT: {name} {keep} is greater than the model's "
                          f"context length of {max_seq_len} tokens; select a smaller "
                          f"truncation size")
    return ids[-keep:]
