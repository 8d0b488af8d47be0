"""A plan's session: its programs run with numpy arrays, and static generation (greedy,
sampled or beam search; encoder-decoders too) over a batch of prompts."""
from __future__ import annotations

from typing import Mapping, Optional, Sequence, Union

import numpy as np

from . import _dsrt

# The plan format's element types (dsrt_dtype) as numpy's; bf16 comes back widened to f32.
_NUMPY = {1: np.float32, 2: np.float16, 3: np.uint16, 4: np.float64, 5: np.int64, 6: np.int32,
          7: np.int16, 8: np.int8, 9: np.uint8, 10: np.bool_, 11: np.uint16, 12: np.uint32,
          13: np.uint64}
_BF16 = 3


class Session:
    """Runs a plan's programs (``forward``, ``prefill``, ``decode``, ...) on one device.

    A tensor-parallel plan runs all its ranks on threads of this process; outputs are rank
    0's. ``device`` is ``"cpu"``, ``"cuda"`` or ``"cpu-reference"``.
    """

    def __init__(self, plan: Union[str, "_dsrt.Plan"], device: str = "cpu"):
        self._plan = _dsrt.Plan(plan) if isinstance(plan, str) else plan
        self._native = _dsrt.Session(self._plan, device)

    def input_names(self, program: str) -> list[str]:
        return [name for name, _, _ in self._plan.io(program, False)]

    def output_names(self, program: str) -> list[str]:
        return [name for name, _, _ in self._plan.io(program, True)]

    def run(self, program: str, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Runs ``program`` on ``inputs`` (every input, by name) and returns its outputs by
        name, as numpy arrays the caller owns. The GIL is released while it runs."""
        names = self.input_names(program)
        missing = [name for name in names if name not in inputs]
        unknown = [name for name in inputs if name not in names]
        if missing or unknown:
            raise _dsrt.Error(
                f"DSRT_INVALID_ARGUMENT: {program} takes {names}; missing {missing}, "
                f"unknown {unknown}")
        for index, name in enumerate(names):
            self._native.set_input(program, index, np.ascontiguousarray(inputs[name]))
        self._native.run(program)
        outputs = {}
        for index, name in enumerate(self.output_names(program)):
            data, dtype, shape = self._native.output(program, index)
            array = np.frombuffer(data, dtype=_NUMPY[dtype]).reshape(shape)
            if dtype == _BF16:
                array = (array.astype(np.uint32) << 16).view(np.float32)
            outputs[name] = array.copy()
        return outputs

    def generate(self, prompts: Sequence[Union[str, Sequence[int]]], *,
                 max_new_tokens: Optional[int] = None, temperature: Optional[float] = None,
                 top_k: Optional[int] = None, top_p: Optional[float] = None, seed: int = 0,
                 stop_token_ids: Sequence[int] = (), ignore_eos: bool = False,
                 num_beams: Optional[int] = None, length_penalty: Optional[float] = None,
                 early_stopping: Union[bool, str, None] = None,
                 repetition_penalty: Optional[float] = None,
                 no_repeat_ngram_size: Optional[int] = None,
                 min_new_tokens: Optional[int] = None,
                 forced_bos_token_id: Optional[int] = None,
                 forced_eos_token_id: Optional[int] = None,
                 generation_config: str = "auto") -> list["Generated"]:
        """dsrt_generate over the prompts as one static batch (docs/transformer-ops.md,
        "Generation"): text (through the plan's tokenizer) or token ids; greedy at
        temperature 0, else sampled; ``num_beams`` > 1 is transformers' beam search
        (``length_penalty``, ``early_stopping`` False, True or "never"); transformers'
        logits processors ``repetition_penalty``, ``no_repeat_ngram_size``,
        ``min_new_tokens``, ``forced_bos_token_id`` and ``forced_eos_token_id``. An
        encoder-decoder (T5, BART) answers each prompt; a decoder continues it. Each
        result has the new ``token_ids``, their ``text`` (where the plan has a tokenizer)
        and the ``finish_reason``. What is left out (None) is the model's own
        (generation_config.json, read as transformers' generate() reads it: beams,
        sampling, processors, lengths), as dsrun does; ``generation_config="none"`` leaves
        the model's out (greedy, 32 tokens, no processor). The GIL is released while it
        runs."""
        modes = {False: 0, True: 1, "never": 2}
        if early_stopping is not None and early_stopping not in modes:
            raise ValueError(f"early_stopping must be False, True or 'never', not "
                             f"{early_stopping!r}")
        if generation_config not in ("auto", "none"):
            raise ValueError(f"generation_config must be 'auto' (the model's defaults) or "
                             f"'none', not {generation_config!r}")
        base = dict(self._plan.generate_defaults(model=generation_config == "auto"))
        def pick(name, value, kind=int):
            return kind(base[name]) if value is None else value
        early = base["early_stopping"] if early_stopping is None else modes[early_stopping]
        tokenizer = self._tokenizer()
        ids = []
        for prompt in prompts:
            if isinstance(prompt, str):
                if tokenizer is None:
                    raise _dsrt.Error("DSRT_INVALID_ARGUMENT: this plan has no tokenizer: "
                                      "give token ids")
                ids.append(tokenizer.encode(prompt))
            else:
                ids.append([int(t) for t in prompt])
        results = self._native.generate(
            ids, pick("max_new_tokens", max_new_tokens), pick("temperature", temperature, float),
            pick("top_k", top_k), pick("top_p", top_p, float), seed, list(stop_token_ids),
            ignore_eos, pick("num_beams", num_beams),
            pick("length_penalty", length_penalty, float), int(early),
            pick("repetition_penalty", repetition_penalty, float),
            pick("no_repeat_ngram_size", no_repeat_ngram_size),
            pick("min_new_tokens", min_new_tokens),
            pick("forced_bos_token_id", forced_bos_token_id),
            pick("forced_eos_token_id", forced_eos_token_id))
        # The stop token is in the ids, not in the text (as the engine's outputs, vLLM's).
        return [Generated(tokens, reason, tokenizer.decode(
                    tokens[:-1] if reason == "stop" else tokens) if tokenizer else None)
                for tokens, reason in results]

    def _tokenizer(self):
        """The plan's tokenizer (None without one), built once: a large vocabulary's table
        takes a while."""
        if not hasattr(self, "_text"):
            from .tokenizer import NoTokenizer, plan_tokenizer
            tokenizer = plan_tokenizer(self._plan)
            self._text = None if isinstance(tokenizer, NoTokenizer) else tokenizer
        return self._text


class Generated:
    """One prompt's result of :meth:`Session.generate`."""

    def __init__(self, token_ids: list[int], finish_reason: str, text: Optional[str]):
        self.token_ids, self.finish_reason, self.text = token_ids, finish_reason, text

    def __repr__(self) -> str:
        return (f"Generated(token_ids={self.token_ids!r}, finish_reason="
                f"{self.finish_reason!r}, text={self.text!r})")
