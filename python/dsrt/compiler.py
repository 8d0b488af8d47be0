"""``dsrt.compile``: runs ``dsc compile``; ``plan_for``: a model's serving plan, compiled once."""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
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


_PLAN_MAGIC = b"DSPLAN"


def is_plan(path: str) -> bool:
    """Whether ``path`` is a plan file (it starts with the plan's magic)."""
    try:
        with open(path, "rb") as file:
            return file.read(len(_PLAN_MAGIC)) == _PLAN_MAGIC
    except OSError:
        return False


def _cache_dir() -> str:
    if os.environ.get("DSRT_CACHE_DIR"):
        return os.environ["DSRT_CACHE_DIR"]
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "dsrt", "plans")


def _model_name(model: str) -> str:
    """A model's name: a plan's file name without .dsp; an ONNX model's folder (the one
    above onnx/ in the Hub's transformers.js layout)."""
    path = os.path.normpath(os.path.abspath(model))
    if path.endswith(".onnx"):
        path = os.path.dirname(path)
    if os.path.basename(path) == "onnx":
        path = os.path.dirname(path)
    return os.path.basename(path).removesuffix(".dsp")


def _model_key(model: str, dsc: str, options: dict) -> str:
    # The model's folder (its weights, external data, config, tokenizer and chat template
    # are read from there), dsc itself and the options: a change to any compiles again.
    # The Hub's transformers.js layout keeps the exports in onnx/ and the rest above it.
    folder = model if os.path.isdir(model) else os.path.dirname(model) or "."
    folders = [folder]
    if os.path.basename(os.path.abspath(folder)) == "onnx":
        folders.append(os.path.dirname(os.path.abspath(folder)))
    if os.path.isdir(os.path.join(folder, "onnx")):
        folders.append(os.path.join(folder, "onnx"))
    files = []
    for where in folders:
        for name in sorted(os.listdir(where)):
            path = os.path.join(where, name)
            if os.path.isfile(path):
                stat = os.stat(path)
                files.append([path, stat.st_size, stat.st_mtime_ns])
    dsc_stat = os.stat(dsc)
    identity = {"model": os.path.abspath(model), "files": files,
                "dsc": [os.path.abspath(dsc), dsc_stat.st_size, dsc_stat.st_mtime_ns],
                "options": options}
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:20]


# vLLM's and PyTorch's names for dsc's dtypes; "auto" is the model's own (dsc's default).
_DTYPE_NAMES = {"auto": None, "float32": "fp32", "float": "fp32", "float16": "fp16",
                "half": "fp16", "bfloat16": "bf16"}


def _check_plan_agrees(plan: str, tp: Optional[int], dtype: Optional[str]) -> None:
    """Options that choose how a model is compiled, given with a plan: taken where they say
    what the plan is (vLLM scripts pass tensor_parallel_size=1), refused, naming the plan's,
    where they would need the model compiled again. max_seq_len is EngineLoop's to judge:
    less than the plan's caps the requests."""
    if dtype is not None:
        raise _dsrt.Error(f"DSRT_INVALID_ARGUMENT: dtype {dtype!r} chooses how a model is "
                          f"compiled, and {plan} is already a plan: give the ONNX model, or "
                          f"no dtype")
    ranks = _dsrt.Plan(plan).rank_count if tp is not None else tp
    if tp != ranks:
        raise _dsrt.Error(f"DSRT_INVALID_ARGUMENT: tp {tp}, but {plan} is a plan of {ranks} "
                          f"rank(s): give the ONNX model to compile it for {tp}")


def plan_for(model: str, *, tp: Optional[int] = None, dtype: Optional[str] = None,
             max_seq_len: Optional[int] = None) -> str:
    """The plan that serves ``model``: ``model`` itself when it is a plan; for an ONNX
    model (a file, or a folder ``dsc compile`` takes), a serving plan (``dsc compile
    --serving``, with ``tp``, ``dtype`` and ``max_seq_len`` when given, else the model's
    defaults) compiled on first use and kept in ``$DSRT_CACHE_DIR`` (default
    ``~/.cache/dsrt/plans``), keyed by the model folder's files, dsc and the options."""
    dtype = _DTYPE_NAMES.get(dtype, dtype) if dtype is not None else None
    options = {"tp": tp, "dtype": dtype, "max_seq_len": max_seq_len}
    # A .dsp that is not a plan goes to the runtime too, whose error says what is wrong.
    if os.path.isfile(model) and (model.endswith(".dsp") or is_plan(model)):
        _check_plan_agrees(model, tp, dtype)
        return model
    if not os.path.exists(model):
        raise _dsrt.Error(f"DSRT_INVALID_ARGUMENT: {model}: no such plan, ONNX model or model folder")
    dsc = _dsc()
    cache = _cache_dir()
    os.makedirs(cache, exist_ok=True)
    name = _model_name(model)
    plan = os.path.join(cache, f"{name}-{_model_key(model, dsc, options)}.dsp")
    if is_plan(plan):
        return plan
    # One compile per plan, whoever asks: the ranks of `mpirun -np 2 dsserve model --tp 2`
    # ask at once, and two compiles are two plans (each records its own command line, so
    # their checksums differ) of which each rank could have loaded another. The others
    # wait on the lock and find the plan made.
    with open(plan + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if is_plan(plan):
            return plan
        print(f"dsrt: compiling {model} to {plan} (once; dsc compile --serving)",
              file=sys.stderr)
        # Written beside and renamed, so that a reader that takes no lock (LLM given the
        # plan's path) sees a whole plan or none.
        partial = plan + ".partial"
        try:
            compile(model, partial, tp=tp or 1, dtype=dtype, max_seq_len=max_seq_len,
                    serving=True)
            os.replace(partial, plan)
        finally:
            if os.path.exists(partial):
                os.remove(partial)
    return plan
