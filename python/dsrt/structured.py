"""Structured output: a grammar decides which tokens a request may draw next (vLLM's
``structured_outputs``, formerly ``guided_decoding``; OpenAI's ``response_format``;
llama.cpp's ``grammar``). The grammars are llguidance's, over the plan's own tokenizer.json;
the engine asks a request's mask before each of its draws (dsrt_token_mask_fn), so the
sampling, penalties and seeds work as without one, within what the grammar allows."""
from __future__ import annotations

import dataclasses
import json
import threading
from typing import Any, Optional, Sequence, Union

from . import _dsrt


@dataclasses.dataclass
class StructuredOutputsParams:
    """Exactly one of: ``json`` (a JSON schema, as a dict or its text), ``json_object``
    (any JSON object), ``regex``, ``choice`` (one of these strings) or ``grammar`` (Lark, as
    llguidance reads it, or llama.cpp's GBNF). ``disable_any_whitespace`` makes JSON compact
    (vLLM's option)."""
    json: Union[str, dict, None] = None
    regex: Optional[str] = None
    choice: Optional[Sequence[str]] = None
    grammar: Optional[str] = None
    json_object: Optional[bool] = None
    disable_any_whitespace: bool = False

    def _grammar(self) -> str:
        """The llguidance grammar, or dsrt.Error naming what is wrong."""
        import llguidance
        given = [name for name in ("json", "regex", "choice", "grammar", "json_object")
                 if getattr(self, name) not in (None, False)]
        if len(given) != 1:
            raise _dsrt.Error(f"DSRT_INVALID_ARGUMENT: structured outputs take exactly one "
                              f"of json, json_object, regex, choice and grammar, not "
                              f"{given or 'none'}")
        try:
            if self.choice is not None:
                if (isinstance(self.choice, str) or not self.choice
                        or not all(isinstance(c, str) for c in self.choice)):
                    raise ValueError("choice must be a non-empty list of strings")
                return llguidance.grammar_from("choice", list(self.choice))
            if self.regex is not None:
                return llguidance.LLMatcher.grammar_from_regex(self.regex)
            if self.grammar is not None:
                return llguidance.grammar_from("grammar", self.grammar)
            schema: Any = {"type": "object"} if self.json_object else self.json
            if isinstance(schema, str):
                schema = json.loads(schema)
            if not isinstance(schema, dict):
                raise ValueError("a JSON schema is an object")
            overrides = {"whitespace_flexible": False} if self.disable_any_whitespace else None
            return llguidance.LLMatcher.grammar_from_json_schema(schema, overrides=overrides)
        except (ValueError, TypeError) as error:
            raise _dsrt.Error(f"DSRT_INVALID_ARGUMENT: structured output: {error}") from None


# vLLM's earlier name for the same parameters.
GuidedDecodingParams = StructuredOutputsParams


class TokenMask:
    """One request's grammar state: told each draw's tokens, it gives the next draw's
    allowed tokens (MaskHolder in module.cpp calls it on the engine's thread)."""

    def __init__(self, tokenizer, grammar: str, words: int):
        import llguidance
        import numpy
        self._matcher = llguidance.LLMatcher(tokenizer, grammar, log_level=0)
        if self._matcher.is_error():
            raise _dsrt.Error(f"DSRT_INVALID_ARGUMENT: structured output: "
                              f"{self._matcher.get_error()}")
        self._words = numpy.full((1, words), -1, dtype=numpy.int32)
        self.error: Optional[str] = None  # why the request was ended, if it was

    def __call__(self, new_tokens: list[int]):
        import llguidance.numpy
        try:
            if new_tokens and not self._matcher.consume_tokens(new_tokens):
                raise RuntimeError(f"the grammar refused a token: {self._matcher.get_error()}")
            llguidance.numpy.fill_next_token_bitmask(self._matcher, self._words)
            return self._words[0]
        except Exception as error:  # the engine ends the request; its router says why
            self.error = str(error)
            raise


class AfterMarker:
    """A grammar that holds only once `marker` is written: a reasoning model thinks freely
    until its </think>, and its answer follows the grammar (vLLM starts structured output
    after the thinking). Each call is told the tokens drawn since the last."""

    def __init__(self, grammar, marker: str, tokenizer):
        from .tokenizer import IncrementalDetokenizer
        self._grammar = grammar
        self._marker = marker
        self._text = IncrementalDetokenizer(tokenizer, (), skip_special_tokens=False)
        self._tail = ""  # the last characters written, where the marker may be forming
        self._before = True

    @property
    def error(self) -> Optional[str]:
        return self._grammar.error

    def __call__(self, new_tokens: list[int]):
        if self._before:
            for k, token in enumerate(new_tokens):
                self._tail = (self._tail + self._text.add(token))[-4 * len(self._marker):]
                if self._marker in self._tail:
                    self._before = False
                    new_tokens = new_tokens[k + 1:]
                    break
            else:
                return None  # still thinking: any token
        return self._grammar(new_tokens)


class Grammars:
    """A plan's token table for llguidance, built on first use (a 150k vocabulary takes
    about a second) and shared by every request of the engine."""

    def __init__(self, plan: "_dsrt.Plan", tokenizer_json: Optional[bytes] = None):
        self._plan = plan
        self._tokenizer_json = tokenizer_json  # a tokenizer of the user's, else the plan's
        self._tokenizer = None
        self._lock = threading.Lock()

    def mask(self, params: StructuredOutputsParams, ignore_eos: bool) -> TokenMask:
        if not isinstance(params, StructuredOutputsParams):
            raise _dsrt.Error(f"DSRT_INVALID_ARGUMENT: structured_outputs must be a "
                              f"StructuredOutputsParams, not {params!r}")
        try:
            import llguidance  # noqa: F401
        except ImportError:
            raise _dsrt.Error("DSRT_UNSUPPORTED: structured outputs need llguidance: "
                              "pip install 'dsrt[structured]' (or llguidance)") from None
        vocab, eos = self._plan.vocabulary()
        if not eos:
            raise _dsrt.Error("DSRT_UNSUPPORTED: structured outputs need an EOS token to end "
                              "the output where the grammar does, and this plan has none")
        if ignore_eos:
            raise _dsrt.Error("DSRT_INVALID_ARGUMENT: ignore_eos cannot be combined with "
                              "structured outputs: the output ends with EOS where the grammar "
                              "is complete")
        grammar = params._grammar()
        with self._lock:
            if self._tokenizer is None:
                import llguidance
                text = self._tokenizer_json or self._plan.tokenizer_json()
                if text is None:
                    raise _dsrt.Error("DSRT_UNSUPPORTED: structured outputs need the plan's "
                                      "tokenizer, and this plan has none")
                self._tokenizer = llguidance.LLTokenizer(text.decode("utf-8"), n_vocab=vocab,
                                                         eos_token=list(eos))
        return TokenMask(self._tokenizer, grammar, (vocab + 31) // 32)


class TokenFilter:
    """vLLM's ``allowed_token_ids`` (only those may be drawn) and ``bad_words`` (a word's
    last token is banned where the tokens before it were just drawn, with and without a
    leading space), as a token mask. Needs no grammar library."""

    def __init__(self, words: int, vocab: int, allowed: Optional[Sequence[int]],
                 bad: Sequence[Sequence[int]]):
        import numpy
        if allowed is not None:
            if not allowed or any(not 0 <= t < vocab for t in allowed):
                raise _dsrt.Error(f"DSRT_INVALID_ARGUMENT: allowed_token_ids must be token ids "
                                  f"in [0, {vocab}), at least one")
            self._base = numpy.zeros(words, dtype=numpy.uint32)
            ids = numpy.asarray(sorted(set(allowed)), dtype=numpy.int64)
            numpy.bitwise_or.at(self._base, ids // 32,
                                numpy.left_shift(numpy.uint32(1), (ids % 32).astype(numpy.uint32)))
        else:
            self._base = numpy.full(words, 0xFFFFFFFF, dtype=numpy.uint32)
        self._bad = [list(sequence) for sequence in bad if sequence]
        self._generated: list[int] = []
        self.error: Optional[str] = None

    def __call__(self, new_tokens: list[int]):
        self._generated += new_tokens
        mask = self._base
        for sequence in self._bad:
            *before, last = sequence
            if not before or self._generated[-len(before):] == before:
                if mask is self._base:
                    mask = self._base.copy()
                mask[last // 32] &= ~(1 << (last % 32)) & 0xFFFFFFFF
        return mask.view("int32")


class MaskChain:
    """Several masks of one request: a token must pass all of them."""

    def __init__(self, masks):
        self._masks = masks
        self.error: Optional[str] = None

    def __call__(self, new_tokens: list[int]):
        import numpy
        combined = None
        try:
            for mask in self._masks:
                words = mask(new_tokens)
                if words is not None:
                    combined = (words.copy() if combined is None
                                else numpy.bitwise_and(combined, words))
        except Exception as error:
            self.error = next((m.error for m in self._masks if m.error), None) or str(error)
            raise
        return combined


def bad_word_sequences(tokenizer, words: Sequence[str]) -> list[list[int]]:
    """Each bad word's tokens as it would follow a space and as it would start the text
    (vLLM's reading of bad_words)."""
    sequences = []
    for word in words:
        if not isinstance(word, str) or not word.strip():
            raise _dsrt.Error(f"DSRT_INVALID_ARGUMENT: bad_words must be non-empty strings, "
                              f"not {word!r}")
        for text in (word, " " + word.lstrip()):
            ids = tokenizer.encode(text, add_special_tokens=False)
            if ids and ids not in sequences:
                sequences.append(ids)
    return sequences

