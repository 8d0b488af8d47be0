"""vLLM's ``LLM.beam_search`` over the serving engine: each step asks the engine for one
token of every live beam with its 2 x beam_width likeliest alternatives, and keeps each
prompt's best beams. The beams' shared prefixes are the prefix cache's hits, so a step
computes little more than each beam's last, unfilled KV block. vLLM's algorithm and scores
(a sequence's summed log-probability over its length, prompt included, to the power
length_penalty; a beam that draws EOS is finished); static generation's beam search
(``Session.generate(num_beams=)``) is transformers' instead."""
from __future__ import annotations

import dataclasses
import queue
import threading
from typing import TYPE_CHECKING, Optional, Sequence

from . import _dsrt

if TYPE_CHECKING:
    from .engine import EngineLoop, RequestParams, TokenLogprob
    from .llm import LLM

# 2 x beam_width alternatives per beam, and the engine reports at most 20.
MAX_BEAM_WIDTH = 10


@dataclasses.dataclass
class BeamSearchParams:
    """vLLM's: ``beam_width`` beams per prompt for ``max_tokens`` steps."""
    beam_width: int
    max_tokens: int
    ignore_eos: bool = False
    temperature: float = 0.0
    length_penalty: float = 1.0
    include_stop_str_in_output: bool = False


@dataclasses.dataclass
class BeamSearchSequence:
    """One beam: its tokens (the prompt's, then the generated ones), each generated token's
    alternatives as {token id: log-probability}, their sum, and its text (the prompt's
    included, as vLLM's); finish_reason "stop" where it drew EOS, else "length"."""
    tokens: list[int]
    logprobs: list[dict[int, float]]
    cum_logprob: float = 0.0
    text: Optional[str] = None
    finish_reason: Optional[str] = None


@dataclasses.dataclass
class BeamSearchOutput:
    """A prompt's best beams, best first."""
    sequences: list[BeamSearchSequence]


def _check(params: BeamSearchParams) -> None:
    def integer(value) -> bool:
        return isinstance(value, int) and not isinstance(value, bool)
    if not integer(params.beam_width) or not 1 <= params.beam_width <= MAX_BEAM_WIDTH:
        raise _dsrt.Error(f"DSRT_INVALID_ARGUMENT: beam_width must be an integer in [1, "
                          f"{MAX_BEAM_WIDTH}] (each beam asks for 2 x beam_width "
                          f"alternatives, at most 20), not {params.beam_width!r}")
    if not integer(params.max_tokens) or params.max_tokens < 1:
        raise _dsrt.Error(f"DSRT_INVALID_ARGUMENT: max_tokens must be an integer of at least "
                          f"1, not {params.max_tokens!r}")
    for name in ("temperature", "length_penalty"):
        value = getattr(params, name)
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise _dsrt.Error(f"DSRT_INVALID_ARGUMENT: BeamSearchParams.{name} must be a "
                              f"number, not {value!r}")


def first_tokens(loop: "EngineLoop", prompts: list[list[int]],
                 params: "RequestParams") -> list["TokenLogprob"]:
    """One engine request per prompt for one token with its alternatives (params asks
    max_tokens 1 and logprobs); waits on this thread for them all. A request that ends
    without a token (cancelled) is a dsrt.Error; the others are then cancelled."""
    answers: "queue.Queue[tuple[int, object]]" = queue.Queue()
    requests = []
    try:
        for index, ids in enumerate(prompts):
            requests.append(loop.submit(ids, params, lambda update, index=index: answers.put(
                (index, update))))
        drawn: list = [None] * len(prompts)
        pending = len(prompts)
        while pending:
            index, update = answers.get()
            if update.logprobs and drawn[index] is None:
                drawn[index] = update.logprobs[0]
            if update.finish_reason is not None:
                pending -= 1
                if drawn[index] is None:
                    raise _dsrt.Error(f"DSRT_CANCELLED: a beam's step ended without a token "
                                      f"({update.finish_reason})")
        return drawn
    except BaseException:
        for request in requests:
            if not request.finished:
                loop.cancel(request.id)
        raise


def run_beam_search(loop: "EngineLoop", starts: list[list[int]], params: BeamSearchParams,
                    max_seq_len: int, stop: Optional[threading.Event] = None
                    ) -> list[BeamSearchOutput]:
    """Each prompt's best beams (their texts not yet made), best first. `stop` set (a
    client that went away) ends the search before its next step, as a dsrt.Error."""
    from .engine import RequestParams  # engine imports nothing of this module's
    _check(params)
    eos = set() if params.ignore_eos else set(loop.eos_token_ids)

    def score(beam: BeamSearchSequence) -> float:
        length = len(beam.tokens) - (1 if beam.tokens[-1] in eos else 0)
        return beam.cum_logprob / (length ** params.length_penalty)

    for ids in starts:
        if not ids:
            raise _dsrt.Error("DSRT_INVALID_ARGUMENT: a prompt is empty")
        if len(ids) + params.max_tokens > max_seq_len:
            raise _dsrt.Error(f"DSRT_INVALID_ARGUMENT: a prompt of {len(ids)} tokens and "
                              f"{params.max_tokens} new ones exceeds the model's "
                              f"{max_seq_len} positions")
    beams = [[BeamSearchSequence(list(ids), [])] for ids in starts]
    finished: list[list[BeamSearchSequence]] = [[] for _ in starts]
    step = RequestParams(max_tokens=1, temperature=float(params.temperature),
                         logprobs=2 * params.beam_width, ignore_eos=True)
    for _ in range(params.max_tokens):
        live = [(i, beam) for i, group in enumerate(beams) for beam in group]
        if not live:
            break
        if stop is not None and stop.is_set():
            raise _dsrt.Error("DSRT_CANCELLED: the beam search was stopped")
        drawn_tokens = first_tokens(loop, [beam.tokens for _, beam in live], step)
        candidates: list[list[BeamSearchSequence]] = [[] for _ in starts]
        for (i, beam), drawn in zip(live, drawn_tokens):
            alternatives = dict(drawn.top)
            alternatives[drawn.token_id] = drawn.logprob
            for token, logprob in alternatives.items():
                extended = BeamSearchSequence(beam.tokens + [token],
                                              beam.logprobs + [alternatives],
                                              beam.cum_logprob + logprob)
                if token in eos:
                    extended.finish_reason = "stop"
                    finished[i].append(extended)
                else:
                    candidates[i].append(extended)
        beams = [sorted(group, key=score, reverse=True)[:params.beam_width]
                 for group in candidates]
    results = []
    for i in range(len(starts)):
        best = sorted(finished[i] + beams[i], key=score, reverse=True)[:params.beam_width]
        for beam in best:
            beam.finish_reason = beam.finish_reason or "length"
        results.append(BeamSearchOutput(best))
    return results


def shown_tokens(beam: BeamSearchSequence, params: BeamSearchParams, start: int = 0
                 ) -> list[int]:
    """The tokens a beam's text is made of, from `start`: without the EOS that finished it
    unless include_stop_str_in_output."""
    end = len(beam.tokens) - (1 if beam.finish_reason == "stop" and
                              not params.include_stop_str_in_output else 0)
    return beam.tokens[start:end]


def beam_search(llm: "LLM", prompts: Sequence, params: BeamSearchParams,
                use_tqdm: bool = False) -> list[BeamSearchOutput]:
    """LLM.beam_search: each beam's text is its whole sequence's, the prompt's included
    (vLLM's LLM.beam_search; its server answers only the generated text)."""
    starts = [llm._prompt_text_and_ids(p)[1] for p in prompts]
    results = run_beam_search(llm._loop, starts, params, llm.max_seq_len)
    for output in results:
        for beam in output.sequences:
            beam.text = llm.tokenizer.decode(shown_tokens(beam, params))
    return results
