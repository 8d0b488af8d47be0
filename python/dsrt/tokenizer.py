"""The plan's tokenizer, and the incremental detokenizer that streams text token by token."""
from __future__ import annotations

from typing import Sequence, Union

from . import _dsrt
from ._limits import INT64, within


class Tokenizer:
    """A HuggingFace ``tokenizer.json`` tokenizer (byte-level BPE, SentencePiece BPE).

    ``Tokenizer(plan_path_or_plan)`` takes the one dsc embedded in a plan;
    ``Tokenizer.from_file("tokenizer.json")`` reads one.
    """

    def __init__(self, plan: Union[str, "_dsrt.Plan"]):
        native_plan = _dsrt.Plan(plan) if isinstance(plan, str) else plan
        self._native = _dsrt.Tokenizer.from_plan(native_plan)

    @classmethod
    def from_file(cls, path: str) -> "Tokenizer":
        """The tokenizer of a ``tokenizer.json`` file."""
        tokenizer = cls.__new__(cls)
        tokenizer._native = _dsrt.Tokenizer.from_file(path)
        return tokenizer

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """Token ids of ``text``; ``add_special_tokens`` adds what the post-processor adds
        (Llama's BOS)."""
        return self._native.encode(text, add_special_tokens)

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        """Text of ``ids``; bytes that do not form UTF-8 (a cut character) become U+FFFD."""
        return self.decode_bytes(ids, skip_special_tokens).decode("utf-8", errors="replace")

    def decode_bytes(self, ids: Sequence[int], skip_special_tokens: bool = True) -> bytes:
        """The UTF-8 bytes ``ids`` stand for, a cut character left cut."""
        ids = list(ids)
        within("a token id", ids, INT64)
        return self._native.decode_bytes(ids, skip_special_tokens)


class NoTokenizer:
    """Stands for the tokenizer of a plan that has none (its model had no tokenizer.json):
    prompts must be token ids, and text is empty (the server answers with token ids, as
    vLLM's --skip-tokenizer-init does)."""

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        raise _dsrt.Error("DSRT_INVALID_ARGUMENT: the plan has no tokenizer (its model had no "
                          "tokenizer.json beside it): give the prompt as token ids")

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return ""

    def decode_bytes(self, ids: Sequence[int], skip_special_tokens: bool = True) -> bytes:
        return b""


def plan_tokenizer(plan: "_dsrt.Plan") -> Union[Tokenizer, NoTokenizer]:
    """The plan's tokenizer, or a NoTokenizer when it has none."""
    try:
        return Tokenizer(plan)
    except _dsrt.Error as error:
        if "has no tokenizer" not in str(error):
            raise
        return NoTokenizer()


class IncrementalDetokenizer:
    """Turns a growing list of token ids into text pieces whose concatenation is what
    ``decode`` makes of all of them.

    Byte-level BPE splits characters across tokens, and decoding is lossy as in
    HuggingFace's tokenizers (a cut character reads U+FFFD), so the text after the last whole
    character is held back until more tokens complete it; text before it goes out at once,
    so bytes that never form a character cannot stall the stream. Each step decodes only
    the tokens since the last whole character, with the ones before them as context
    (SentencePiece drops a word's leading space when it is decoded alone).
    """

    def __init__(self, tokenizer: Tokenizer, prompt_ids: Sequence[int] = (),
                 skip_special_tokens: bool = True):
        self._tokenizer = tokenizer
        self._skip = skip_special_tokens
        # A few prompt tokens as context, so the first piece reads as it does after the
        # prompt.
        self._ids: list[int] = list(prompt_ids[-4:])
        self._prefix = 0              # context of the open window
        self._read = len(self._ids)   # where the open window starts
        self._shown = 0               # characters of the open window handed out

    def add(self, token: int) -> str:
        """The text ``token`` completes (maybe ``""``)."""
        self._ids.append(token)
        return self._advance(final=False)

    def flush(self) -> str:
        """What is held back at the end (a cut character shows as U+FFFD)."""
        return self._advance(final=True)

    def _advance(self, final: bool) -> str:
        decode = self._tokenizer.decode
        before = decode(self._ids[self._prefix:self._read], self._skip)
        after = decode(self._ids[self._prefix:], self._skip)
        if not after.startswith(before):
            # The new tokens change how the context reads (it ends in a cut character they
            # complete differently): decode the window alone.
            self._prefix = self._read
            before, after = "", decode(self._ids[self._read:], self._skip)
        window = after[len(before):]
        ready = window if final else window.rstrip("\ufffd")
        piece = ready[self._shown:]
        if len(ready) == len(window):
            # The window ends on a whole character: the next one starts after it.
            self._prefix, self._read, self._shown = self._read, len(self._ids), 0
        else:
            self._shown = max(self._shown, len(ready))
        return piece
