"""vLLM's ``LLM.beam_search`` over the serving engine: each step asks the engine for one
token of every live beam with its 2 x beam_width likeliest alternatives, and keeps each
prompt's best beams. The beams' shared prefixes are the prefix cache's hits, so a step
computes little more than each beam's last, unfilled KV block. vLLM's algorithm and scores
(a sequence's summed log-probability over its length, prompt included, to the power
length_penalty; a beam that draws EOS is finished); static generation's beam search
(``Session.generate(num_beams=)``) is transformers' instead."""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Optional, Sequence

from . import _dsrt

if TYPE_CHECKING:
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


def beam_search(llm: "LLM", prompts: Sequence, params: BeamSearchParams,
                use_tqdm: bool = False) -> list[BeamSearchOutput]:
    from .llm import SamplingParams  # llm imports this module
    _check(params)
    eos = set() if params.ignore_eos else set(llm._loop.eos_token_ids)

    def score(beam: BeamSearchSequence) -> float:
        length = len(beam.tokens) - (1 if beam.tokens[-1] in eos else 0)
        return beam.cum_logprob / (length ** params.length_penalty)

    starts = [llm._prompt_text_and_ids(p)[1] for p in prompts]
    for ids in starts:
        if len(ids) + params.max_tokens > llm.max_seq_len:
            raise _dsrt.Error(f"DSRT_INVALID_ARGUMENT: a prompt of {len(ids)} tokens and "
                              f"{params.max_tokens} new ones exceeds the model's "
                              f"{llm.max_seq_len} positions")
    beams = [[BeamSearchSequence(list(ids), [])] for ids in starts]
    finished: list[list[BeamSearchSequence]] = [[] for _ in starts]
    step = SamplingParams(max_tokens=1, temperature=params.temperature,
                          logprobs=2 * params.beam_width, ignore_eos=True)
    for _ in range(params.max_tokens):
        live = [(i, beam) for i, group in enumerate(beams) for beam in group]
        if not live:
            break
        outputs = llm.generate([beam.tokens for _, beam in live], step)
        candidates: list[list[BeamSearchSequence]] = [[] for _ in starts]
        for (i, beam), output in zip(live, outputs):
            drawn = output.outputs[0].logprobs[0]
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
    for i, ids in enumerate(starts):
        best = sorted(finished[i] + beams[i], key=score, reverse=True)[:params.beam_width]
        for beam in best:
            beam.finish_reason = beam.finish_reason or "length"
            shown = beam.tokens if params.include_stop_str_in_output or \
                beam.finish_reason != "stop" else beam.tokens[:-1]
            beam.text = llm.tokenizer.decode(shown)
        results.append(BeamSearchOutput(best))
    return results
