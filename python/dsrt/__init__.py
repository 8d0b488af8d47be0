"""dsrt: run dsc plans from Python.

* ``LLM(plan)`` generates over the serving engine (continuous batching, paged KV cache):
  ``generate``, ``stream``, ``chat``. ``AsyncLLM(plan)`` is the same engine from asyncio:
  ``async for output in engine.generate(...)``, ``abort``.
* ``SamplingParams(structured_outputs=StructuredOutputsParams(json=schema))`` makes the
  output follow a JSON schema, regex, choice or grammar (with llguidance installed).
* ``Tokenizer`` is the plan's own tokenizer; ``Session`` runs a program with numpy arrays.
* ``compile`` runs ``dsc``; ``dsserve`` (``dsrt.server``) is the OpenAI-compatible server.
* ``set_cpu_threads(n)`` sets the CPU kernels' threads for the process (0: the CPUs it may
  run on, its affinity mask and cgroup quota; DSRT_NUM_THREADS sets the default);
  ``cpu_threads()`` is the count in effect.

Failures of the library are ``dsrt.Error`` with its message.
"""
from ._dsrt import Error, cpu_threads, set_cpu_threads, version as _version
from .compiler import compile
from .async_llm import AsyncLLM
from .beam_search import BeamSearchOutput, BeamSearchParams, BeamSearchSequence
from .llm import LLM, CompletionOutput, RequestOutput, RequestOutputKind, SamplingParams
from .session import Session
from .structured import GuidedDecodingParams, StructuredOutputsParams
from .tokenizer import Tokenizer

__version__ = _version()
__all__ = ["Error", "LLM", "AsyncLLM", "SamplingParams", "RequestOutput", "RequestOutputKind",
           "CompletionOutput", "Tokenizer", "Session", "compile", "cpu_threads",
           "set_cpu_threads", "StructuredOutputsParams", "GuidedDecodingParams",
           "BeamSearchParams", "BeamSearchOutput", "BeamSearchSequence"]
