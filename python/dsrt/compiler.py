"""``dsrt.compile``: runs ``dsc compile``."""
from __future__ import annotations

import os
import shutil
import subprocess
from typing import Optional, Sequence

from . import _dsrt


def _dsc() -> str:
    # $DSC, then the dsc of the build this package was made from, then the PATH's.
    if os.environ.get("DSC"):
        return os.environ["DSC"]
    try:
        from ._build_info import DSC
        if os.path.exists(DSC):
            return DSC
    except ImportError:
        pass
    found = shutil.which("dsc")
    if not found:
        raise _dsrt.Error("DSRT_UNSUPPORTED: dsc is not found: set $DSC or put it on PATH")
    return found


def compile(model: str, output: str, *, tp: int = 1, dtype: Optional[str] = None,
            max_batch: Optional[int] = None, max_seq_len: Optional[int] = None,
            serving: bool = False, max_tokens_per_step: Optional[int] = None,
            extra_args: Sequence[str] = ()) -> str:
    """Compiles an ONNX model (its tokenizer, config and chat template found beside it) to a
    plan at ``output``, as ``dsc compile model --tp N --dtype D -o output`` does; returns
    ``output``. ``serving=True`` adds the step program the serving engine (``LLM``,
    ``dsserve``) runs best, of 256 rows (the tokens one engine step computes);
    ``max_tokens_per_step`` sets another number apart from ``max_batch``, and implies it. A failure raises ``dsrt.Error`` with dsc's message."""
    command = [_dsc(), "compile", model, "-o", output, "--tp", str(tp)]
    if dtype:
        command += ["--dtype", dtype]
    if max_batch:
        command += ["--max-batch", str(max_batch)]
    if max_seq_len:
        command += ["--max-seq-len", str(max_seq_len)]
    if serving:
        command.append("--serving")
    if max_tokens_per_step:
        command += ["--max-tokens-per-step", str(max_tokens_per_step)]
    command += list(extra_args)
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise _dsrt.Error(f"dsc compile failed ({done.returncode}): {done.stderr.strip()}")
    return output
