"""``LLM``: the offline face of the serving engine, shaped as vLLM's and TensorRT-LLM's."""
from __future__ import annotations

import dataclasses
import enum
import queue
import random
from typing import Any, Iterator, Mapping, Optional, Sequence, Union

from . import _dsrt
from .chat import ChatTemplate, ChatTemplateError, openai_messages
from .compiler import plan_for
from .engine import EngineLoop, RequestParams, TokenLogprob, Update, truncate_prompt
from .generation_config import sampling_defaults
from .beam_search import BeamSearchOutput, BeamSearchParams, beam_search
from .structured import StructuredOutputsParams

# Text, token ids, or vLLM's TextPrompt / TokensPrompt: {"prompt": text} or
# {"prompt_token_ids": ids}.
Prompt = Union[str, Sequence[int], Mapping[str, Any]]


# SamplingParams.n's bound: outputs of one prompt, each an engine request.
MAX_OUTPUTS_PER_PROMPT = 4096


class RequestOutputKind(enum.Enum):
    """What ``AsyncLLM.generate`` yields as tokens come (vLLM's names and values): the whole
    output so far each time, only what is new, or the finished output once.
    ``LLM.generate`` returns finished outputs whatever the kind."""
    CUMULATIVE = 0
    DELTA = 1
    FINAL_ONLY = 2


@dataclasses.dataclass
class SamplingParams:
    """How one request samples and stops (vLLM's names and defaults).

    ``temperature=0`` is greedy; ``top_k`` 0 or -1 is no limit; ``seed`` makes a sampled
    request reproducible whatever runs beside it; ``stop`` strings end the text before
    them; ``logprobs=k`` reports each token's log-probability and the k likeliest (k <= 20);
    ``max_tokens=None`` runs to the plan's context. ``n`` samples that many outputs of each
    prompt (each its own engine request; the prompt's KV blocks are shared by the prefix
    cache; with a ``seed``, output j draws from ``seed + j``). ``min_p`` drops tokens below
    that fraction of the likeliest's probability; ``repetition_penalty`` (1: none),
    ``presence_penalty`` and ``frequency_penalty`` (0: none, [-2, 2]) are vLLM's and apply to
    greedy requests too; log-probabilities stay the model's.
    """
    max_tokens: Optional[int] = 16
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    seed: Optional[int] = None
    stop: Union[str, Sequence[str], None] = None
    stop_token_ids: Sequence[int] = ()
    ignore_eos: bool = False
    logprobs: Optional[int] = None
    skip_special_tokens: bool = True
    n: int = 1
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    # vLLM's: each prompt token after the first with its log-probability given those before
    # it and the k likeliest (RequestOutput.prompt_logprobs; None for the first token). Such
    # a request computes its whole prompt (no prefix-cache hits).
    prompt_logprobs: Optional[int] = None
    # OpenAI's: {token id: bias in [-100, 100]} added to the logits (-100 bans a token).
    logit_bias: Optional[dict[int, float]] = None
    # vLLM's: EOS and stop tokens cannot end the output before this many tokens.
    min_tokens: int = 0
    # vLLM's: the stop string that ended the text is kept at its end.
    include_stop_str_in_output: bool = False
    # vLLM's: what AsyncLLM.generate yields (RequestOutputKind).
    output_kind: RequestOutputKind = RequestOutputKind.CUMULATIVE
    # vLLM's structured output: a JSON schema, regex, choice or grammar the text must follow
    # (dsrt.StructuredOutputsParams; needs llguidance). guided_decoding is its earlier name.
    structured_outputs: Optional[StructuredOutputsParams] = None
    guided_decoding: Optional[StructuredOutputsParams] = None
    # vLLM's: only these token ids may be drawn; these words may not be written (each
    # word's tokens, with and without a leading space).
    allowed_token_ids: Optional[Sequence[int]] = None
    bad_words: Optional[Sequence[str]] = None
    # vLLM's: only the prompt's last k tokens are kept (left truncation); -1 keeps the
    # model's context length of them.
    truncate_prompt_tokens: Optional[int] = None

    def _truncated(self, ids: list[int], max_seq_len: int) -> list[int]:
        """The prompt's ids as truncate_prompt_tokens leaves them."""
        return truncate_prompt(ids, self.truncate_prompt_tokens, max_seq_len,
                               "SamplingParams.truncate_prompt_tokens")

    def _copies(self) -> int:
        # A bound: the copies are made before any is queued, and n = 2**63 had taken all of
        # the machine's memory (the server's n stops at 64, as its protocol says).
        if (not isinstance(self.n, int) or isinstance(self.n, bool)
                or not 1 <= self.n <= MAX_OUTPUTS_PER_PROMPT):
            raise _dsrt.Error(f"DSRT_INVALID_ARGUMENT: n must be an integer in [1, "
                              f"{MAX_OUTPUTS_PER_PROMPT}], not {self.n!r}")
        return self.n

    def _check_types(self) -> None:
        """dsrt.Error naming the first field of the wrong type: a skip_special_tokens of None
        had passed here and failed later, on the thread that routes every request's tokens."""
        def refuse(name: str, kind: str) -> None:
            raise _dsrt.Error(f"DSRT_INVALID_ARGUMENT: SamplingParams.{name} must be {kind}, "
                              f"not {getattr(self, name)!r}")
        def integer(value) -> bool:
            return isinstance(value, int) and not isinstance(value, bool)
        for name in ("ignore_eos", "skip_special_tokens", "include_stop_str_in_output"):
            if not isinstance(getattr(self, name), bool):
                refuse(name, "True or False")
        for name in ("top_k", "min_tokens"):
            if not integer(getattr(self, name)):
                refuse(name, "an integer")
        for name in ("max_tokens", "seed", "logprobs", "prompt_logprobs"):
            if getattr(self, name) is not None and not integer(getattr(self, name)):
                refuse(name, "an integer or None")
        for name in ("temperature", "top_p", "min_p", "repetition_penalty",
                     "presence_penalty", "frequency_penalty"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and not isinstance(value, bool)):
                refuse(name, "a number")
        if not (self.stop is None or isinstance(self.stop, str) or
                (isinstance(self.stop, Sequence) and all(isinstance(s, str) for s in self.stop))):
            refuse("stop", "a string, a list of strings or None")
        if not (isinstance(self.stop_token_ids, Sequence) and
                all(integer(t) for t in self.stop_token_ids)):
            refuse("stop_token_ids", "a list of token ids")
        if not isinstance(self.output_kind, RequestOutputKind):
            refuse("output_kind", "a dsrt.RequestOutputKind")
        for name in ("structured_outputs", "guided_decoding"):
            if not (getattr(self, name) is None or
                    isinstance(getattr(self, name), StructuredOutputsParams)):
                refuse(name, "a dsrt.StructuredOutputsParams or None")
        if not (self.allowed_token_ids is None or (
                isinstance(self.allowed_token_ids, Sequence)
                and all(integer(t) for t in self.allowed_token_ids))):
            refuse("allowed_token_ids", "a list of token ids or None")
        if not (self.bad_words is None or (
                isinstance(self.bad_words, Sequence) and not isinstance(self.bad_words, str)
                and all(isinstance(w, str) for w in self.bad_words))):
            refuse("bad_words", "a list of strings or None")
        if self.structured_outputs is not None and self.guided_decoding is not None:
            raise _dsrt.Error("DSRT_INVALID_ARGUMENT: SamplingParams takes structured_outputs "
                              "or guided_decoding (its earlier name), not both")
        if not (self.logit_bias is None or (isinstance(self.logit_bias, Mapping) and all(
                integer(t) and isinstance(v, (int, float)) and not isinstance(v, bool)
                for t, v in self.logit_bias.items()))):
            refuse("logit_bias", "a dict of token id to bias, or None")

    def _request(self, prompt_length: int, max_seq_len: int, copy: int = 0) -> RequestParams:
        self._check_types()
        stop = [self.stop] if isinstance(self.stop, str) else list(self.stop or ())
        if any(not s for s in stop):
            raise _dsrt.Error("DSRT_INVALID_ARGUMENT: a stop string is empty")
        max_tokens = self.max_tokens
        if max_tokens is None:
            max_tokens = max(1, max_seq_len - prompt_length)
        return RequestParams(max_tokens=max_tokens, temperature=self.temperature,
                             top_p=self.top_p, top_k=max(0, self.top_k),
                             seed=None if self.seed is None else self.seed + copy,
                             stop=stop, stop_token_ids=list(self.stop_token_ids),
                             ignore_eos=self.ignore_eos, logprobs=self.logprobs,
                             skip_special_tokens=self.skip_special_tokens, min_p=self.min_p,
                             repetition_penalty=self.repetition_penalty,
                             presence_penalty=self.presence_penalty,
                             frequency_penalty=self.frequency_penalty,
                             # The prompt's are the same for every copy: the first asks.
                             prompt_logprobs=self.prompt_logprobs if copy == 0 else None,
                             logit_bias=self.logit_bias, min_tokens=self.min_tokens,
                             include_stop_str_in_output=self.include_stop_str_in_output,
                             structured_outputs=self.structured_outputs or self.guided_decoding,
                             allowed_token_ids=self.allowed_token_ids,
                             bad_words=list(self.bad_words or ()))


@dataclasses.dataclass
class CompletionOutput:
    """One generated sequence: its text, token ids, why it ended ("stop", "length",
    "abort"), and per token log-probabilities when asked for."""
    index: int
    text: str
    token_ids: list[int]
    finish_reason: Optional[str]
    logprobs: Optional[list[TokenLogprob]] = None

    @property
    def cumulative_logprob(self) -> Optional[float]:
        return None if self.logprobs is None else sum(t.logprob for t in self.logprobs)


@dataclasses.dataclass
class RequestOutput:
    """A prompt and what was generated for it."""
    prompt: Optional[str]
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
    finished: bool = True
    # With SamplingParams.prompt_logprobs: None for the first prompt token, then each one's.
    prompt_logprobs: Optional[list[Optional[TokenLogprob]]] = None
    # The engine's id of the request (of its first output where n > 1), as vLLM's string.
    request_id: str = ""
    # vLLM's: the prompt tokens whose KV came from the prefix cache (whole blocks, never the
    # last token), as the first output's request found them; None if it made no token.
    num_cached_tokens: Optional[int] = None


def _empty_output(text: Optional[str], ids: list[int], params: SamplingParams,
                  copies: int) -> RequestOutput:
    """A prompt's RequestOutput before any token: `copies` empty outputs."""
    return RequestOutput(text, ids, [
        CompletionOutput(j, "", [], None, [] if params.logprobs is not None else None)
        for j in range(copies)], False,
        [None] if params.prompt_logprobs is not None else None)


def _add_update(result: RequestOutput, j: int, update: Update) -> bool:
    """Adds an update of output j to `result`; True when it finished that output (an update
    after its finish, as an abort's beside the router's last one, is dropped)."""
    output = result.outputs[j]
    if output.finish_reason is not None:
        return False
    if j == 0 and result.prompt_logprobs is not None:
        result.prompt_logprobs += update.prompt_logprobs
    if j == 0 and update.num_cached_tokens is not None:
        result.num_cached_tokens = update.num_cached_tokens
    output.text += update.text
    output.token_ids += update.token_ids
    if output.logprobs is not None:
        output.logprobs += update.logprobs
    if not update.finish_reason:
        return False
    output.finish_reason = update.finish_reason
    result.finished = all(o.finish_reason is not None for o in result.outputs)
    return True


def _is_one_prompt(prompts: Any) -> bool:
    return (isinstance(prompts, (str, Mapping))
            or (isinstance(prompts, Sequence) and len(prompts) > 0
                and isinstance(prompts[0], int)))


class LLM:
    """A plan served by the engine (continuous batching over a paged KV cache) in this
    process.

    >>> llm = dsrt.LLM("model.dsp")          # or an ONNX model, or its folder
    >>> llm.generate(["Hello"], dsrt.SamplingParams(temperature=0, max_tokens=8))[0].outputs[0].text

    Options are the engine's (docs/serving.md): ``block_size`` positions per KV block,
    ``kv_cache_bytes`` (0: a whole sequence for every row of the plan's step, or of its static
    batch if more, at most a quarter of the memory, or on a GPU 0.9 of what the weights leave)
    or ``kv_cache_memory_fraction`` (in (0, 1]: that fraction of the memory free at the start,
    a GPU's once the weights are on it), ``max_tokens_per_step`` (0: the step's
    rows: ``dsc --serving``'s 256 or ``--max-tokens-per-step``), ``prefix_caching``, and
    ``batch_invariant`` (default: each request's tokens as it would get them alone; False lets
    long steps of half and quantized plans take faster bf16 arithmetic; "exact": the
    log-probabilities too, bit for bit, for f32 and half weights as for integer ones, slower
    on long steps), and ``kv_cache_dtype``
    ("auto": the plan's; "int8": a scale per 32 values, about half an f16 cache's bytes, on
    the CPU). The GIL is released while the engine steps.

    ``seed`` (vLLM's): the requests that give no seed of their own draw theirs from a
    generator seeded with it, in the order they are submitted, so that a script run again
    samples the same outputs (None: each from the OS's randomness).

    vLLM's names are taken as well: ``tensor_parallel_size`` (``tp``), ``max_model_len``
    (``max_seq_len``), ``enable_prefix_caching``, ``max_num_seqs`` (``max_running``: the
    sequences holding KV at once) and ``max_num_batched_tokens`` (``max_tokens_per_step``),
    and ``dtype`` as "auto", "float16", "bfloat16" or "float32".

    ``speculative_config`` (vLLM's, prompt lookup only: ``{"method": "ngram",
    "num_speculative_tokens": 4, "prompt_lookup_max": 3}``) lets each decode token also
    compute up to that many drafts, the tokens that followed the latest
    earlier occurrence of its last n tokens; a draft counts where the row's draw (greedy, or
    from the request's seed, penalties applied) is the draft, so the outputs are what they
    are without (docs/serving.md, "Speculative decoding"). CPU only.

    With a plan, ``tensor_parallel_size`` may only say its rank count, and ``max_model_len``
    at most its positions, which then caps every request (as a vLLM script passes them);
    ``dtype`` other than "auto" needs the ONNX model.

    ``tokenizer`` (vLLM's) is a local folder with ``tokenizer.json`` (or the file) to use
    instead of the plan's, with its folder's chat templates and special tokens where it has
    them; ids past the model's vocabulary refuse it. A plan compiled without a tokenizer then
    takes text.

    ``model`` is a plan, or an ONNX model (``model.onnx``, or a folder ``dsc compile``
    takes) which is compiled once to a serving plan (``dsc compile --serving``, with
    ``dtype``, ``tp`` and ``max_seq_len`` when given, else the model's defaults) and kept in
    ``$DSRT_CACHE_DIR`` (default ``~/.cache/dsrt/plans``): ``dsrt.compiler.plan_for``.
    """

    def __init__(self, model: str, *, device: str = "cpu", block_size: int = 16,
                 kv_cache_bytes: int = 0, max_tokens_per_step: int = 0,
                 prefix_caching: bool = True, batch_invariant: Union[bool, str] = True,
                 kv_cache_dtype: str = "auto", dtype: Optional[str] = None,
                 tp: Optional[int] = None, max_seq_len: Optional[int] = None,
                 kv_cache_memory_fraction: float = 0.0, max_running: int = 0,
                 tensor_parallel_size: Optional[int] = None,
                 max_model_len: Optional[int] = None,
                 enable_prefix_caching: Optional[bool] = None,
                 max_num_seqs: Optional[int] = None,
                 max_num_batched_tokens: Optional[int] = None,
                 seed: Optional[int] = None,
                 speculative_config: Optional[dict] = None,
                 generation_config: str = "auto",
                 scheduling_policy: str = "fcfs",
                 tokenizer: Optional[str] = None):
        def either(name: str, value, default, vllm_name: str, vllm_value):
            if vllm_value is None:
                return value
            if value != default and value != vllm_value:
                raise ValueError(f"{name}={value!r} and {vllm_name}={vllm_value!r} disagree: "
                                 f"give one")
            return vllm_value
        tp = either("tp", tp, None, "tensor_parallel_size", tensor_parallel_size)
        max_seq_len = either("max_seq_len", max_seq_len, None, "max_model_len", max_model_len)
        prefix_caching = either("prefix_caching", prefix_caching, True,
                                "enable_prefix_caching", enable_prefix_caching)
        max_running = either("max_running", max_running, 0, "max_num_seqs", max_num_seqs)
        max_tokens_per_step = either("max_tokens_per_step", max_tokens_per_step, 0,
                                     "max_num_batched_tokens", max_num_batched_tokens)
        if generation_config not in ("auto", "vllm"):
            raise ValueError(f"generation_config must be 'auto' (the model's sampling "
                             f"defaults) or 'vllm' (OpenAI's), not {generation_config!r}")
        if scheduling_policy not in ("fcfs", "priority"):
            raise ValueError(f"scheduling_policy must be 'fcfs' (first come, first served) or "
                             f"'priority' (each request's, lower first), not "
                             f"{scheduling_policy!r}")
        self.scheduling_policy = scheduling_policy
        plan = plan_for(model, tp=tp, dtype=dtype, max_seq_len=max_seq_len)
        self._loop = EngineLoop(plan, device=device, block_size=block_size,
                                kv_cache_bytes=kv_cache_bytes,
                                max_tokens_per_step=max_tokens_per_step,
                                max_running=max_running,
                                prefix_caching=prefix_caching,
                                batch_invariant=batch_invariant,
                                kv_cache_dtype=kv_cache_dtype,
                                kv_cache_memory_fraction=kv_cache_memory_fraction,
                                max_seq_len=max_seq_len,
                                speculative_config=speculative_config,
                                tokenizer=tokenizer)
        self.tokenizer = self._loop.tokenizer
        self._defaults = sampling_defaults(self._loop.plan, generation_config)
        self._seeds = random.Random(seed) if seed is not None else None
        self._templates = dict(self._loop.text.chat_templates)
        self._special_tokens = dict(self._loop.text.special_tokens)

    @property
    def max_seq_len(self) -> int:
        return self._loop.max_seq_len

    def reset_prefix_cache(self) -> None:
        """Forgets the engine's prefix cache, as vLLM's ``LLM.reset_prefix_cache``: later
        prompts hit no KV block computed before (for benchmarks, or after the meaning of
        prompts changed). A :class:`dsrt.Error` while requests run."""
        self._loop.reset_prefix_cache()

    def close(self) -> None:
        """Stops the engine (also on ``with`` exit)."""
        self._loop.close()

    def __enter__(self) -> "LLM":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def get_tokenizer(self):
        """The plan's tokenizer (vLLM's ``LLM.get_tokenizer``): ``encode`` and ``decode``."""
        return self.tokenizer

    def _prompt_text_and_ids(self, prompt: Prompt) -> tuple[Optional[str], list[int]]:
        if isinstance(prompt, Mapping):
            if "prompt_token_ids" in prompt:
                return prompt.get("prompt"), [int(t) for t in prompt["prompt_token_ids"]]
            if isinstance(prompt.get("prompt"), str):
                return prompt["prompt"], self.tokenizer.encode(prompt["prompt"])
            raise _dsrt.Error("DSRT_INVALID_ARGUMENT: a prompt dict needs \"prompt\" (text) or "
                              "\"prompt_token_ids\", not " + ", ".join(map(repr, prompt)))
        if isinstance(prompt, str):
            return prompt, self.tokenizer.encode(prompt)
        return None, list(prompt)

    def _seeded(self, request: RequestParams) -> RequestParams:
        if request.seed is None and self._seeds is not None:
            request.seed = self._seeds.getrandbits(64)
        return request

    def _engine_requests(self, params: SamplingParams, ids: list[int],
                         priority: int = 0) -> list[RequestParams]:
        """The n engine requests of a prompt's params (output j seeded seed + j)."""
        self._check_priority(priority)
        requests = [self._seeded(params._request(len(ids), self.max_seq_len, j))
                    for j in range(params._copies())]
        for request in requests:
            request.priority = priority
        return requests

    def _check_priority(self, priority) -> None:
        if not isinstance(priority, int) or isinstance(priority, bool):
            raise _dsrt.Error(f"DSRT_INVALID_ARGUMENT: a priority must be an integer, not "
                              f"{priority!r}")
        if priority != 0 and self.scheduling_policy != "priority":
            raise _dsrt.Error(f"DSRT_INVALID_ARGUMENT: got priority {priority}, but priority "
                              f"scheduling is not enabled: make the LLM with "
                              f"scheduling_policy=\"priority\"")

    def _prompt_ids(self, prompt: Prompt) -> list[int]:
        return self._prompt_text_and_ids(prompt)[1]

    def get_default_sampling_params(self) -> SamplingParams:
        """vLLM's: the sampling parameters a call without any uses, the model's own
        (generation_config.json's temperature, top_p, top_k, min_p, repetition_penalty and
        max_new_tokens) unless the LLM was made with generation_config="vllm"."""
        return SamplingParams(**self._defaults)

    def generate(self, prompts: Union[Prompt, Sequence[Prompt]],
                 sampling_params: Union[SamplingParams, Sequence[SamplingParams], None] = None,
                 *, use_tqdm: bool = False,
                 priority: Optional[Sequence[int]] = None) -> list[RequestOutput]:
        """Generates for every prompt (text, token ids, or vLLM's ``{"prompt": ...}`` /
        ``{"prompt_token_ids": ...}``) at once, each as its own request of the engine;
        returns them in the prompts' order. ``sampling_params`` is one for all, or one per
        prompt. ``priority``, one per prompt (lower first), needs
        ``scheduling_policy="priority"``. ``use_tqdm`` is taken for vLLM's signature; no
        progress bar is drawn."""
        if _is_one_prompt(prompts):
            prompts = [prompts]
        prompts = list(prompts)
        priorities = [0] * len(prompts) if priority is None else list(priority)
        if len(priorities) != len(prompts):
            raise ValueError(f"{len(prompts)} prompts and {len(priorities)} priorities: give "
                             f"one per prompt")
        if isinstance(sampling_params, Sequence):
            if len(sampling_params) != len(prompts):
                raise ValueError(f"{len(prompts)} prompts and {len(sampling_params)} "
                                 f"sampling_params: give one for all, or one per prompt")
            per_prompt = list(sampling_params)
        else:
            per_prompt = [sampling_params or self.get_default_sampling_params()] * len(prompts)
        updates: "queue.Queue[tuple[int, int, Update]]" = queue.Queue()
        results, requests = [], []
        try:
            for index, (prompt, params) in enumerate(zip(prompts, per_prompt)):
                text, ids = self._prompt_text_and_ids(prompt)
                ids = params._truncated(ids, self.max_seq_len)
                copies = self._engine_requests(params, ids, priorities[index])
                results.append(_empty_output(text, ids, params, len(copies)))
                for j, request in enumerate(copies):
                    requests.append(self._loop.submit(
                        ids, request,
                        lambda update, index=index, j=j: updates.put((index, j, update))))
                    if j == 0:
                        results[index].request_id = str(requests[-1].id)
            pending = len(requests)
            while pending:
                index, j, update = updates.get()
                if _add_update(results[index], j, update):
                    pending -= 1
        except BaseException:
            for request in requests:
                self._loop.cancel(request.id)
            raise
        return results

    def beam_search(self, prompts: Sequence[Prompt], params: BeamSearchParams, *,
                    use_tqdm: bool = False) -> list[BeamSearchOutput]:
        """vLLM's beam search over the engine (beam_search.py): each prompt's best
        ``params.beam_width`` sequences after ``params.max_tokens`` steps, best first. Each
        step is one engine request per beam; the prefix cache holds what the beams share."""
        if _is_one_prompt(prompts):
            prompts = [prompts]
        return beam_search(self, list(prompts), params, use_tqdm)

    def stream(self, prompt: Prompt, sampling_params: Optional[SamplingParams] = None
               ) -> Iterator[str]:
        """The text of one request, piece by piece as tokens come (a character cut across
        tokens comes whole). Closing the iterator early cancels the request."""
        sampling = sampling_params or self.get_default_sampling_params()
        ids = sampling._truncated(self._prompt_ids(prompt), self.max_seq_len)
        if sampling._copies() != 1:
            raise _dsrt.Error("DSRT_INVALID_ARGUMENT: stream() streams one output: n must be 1 "
                              "(generate() takes n > 1)")
        params = self._seeded(sampling._request(len(ids), self.max_seq_len))
        updates: "queue.Queue[Update]" = queue.Queue()
        request = self._loop.submit(ids, params, updates.put)
        try:
            while True:
                update = updates.get()
                if update.text:
                    yield update.text
                if update.finish_reason:
                    return
        finally:
            if not request.finished:
                self._loop.cancel(request.id)

    def chat_template(self, name: Optional[str] = None) -> ChatTemplate:
        """The plan's chat template (the model's tokenizer_config.json's, which dsc
        embedded), or ``name``d one; a plan without one raises ``dsrt.Error``."""
        source = self._templates.get(name or "default")
        if source is None:
            known = ", ".join(sorted(self._templates)) or "none"
            raise _dsrt.Error(f"DSRT_INVALID_ARGUMENT: the plan has no chat template "
                              f"{name or 'default'!r} (it has: {known}); compile a model "
                              f"whose tokenizer_config.json has chat_template")
        return ChatTemplate(source, self._special_tokens)

    def apply_chat_template(self, messages: list[dict], add_generation_prompt: bool = True,
                            *, chat_template: Optional[str] = None,
                            chat_template_kwargs: Optional[Mapping[str, Any]] = None,
                            **kwargs) -> str:
        """The prompt text the plan's template (or ``chat_template``, a Jinja source, as
        vLLM takes it) makes of ``messages``; ``chat_template_kwargs`` and the other keyword
        arguments (``tools``, ...) are the template's variables."""
        template = (ChatTemplate(chat_template, self._special_tokens)
                    if chat_template is not None
                    else self.chat_template(kwargs.pop("chat_template_name", None)))
        return template.render(openai_messages(messages),
                               add_generation_prompt=add_generation_prompt,
                               **{**(chat_template_kwargs or {}), **kwargs})

    def chat(self, messages: Union[list[dict], Sequence[list[dict]]],
             sampling_params: Union[SamplingParams, Sequence[SamplingParams], None] = None,
             add_generation_prompt: bool = True, use_tqdm: bool = False,
             continue_final_message: bool = False,
             **template_kwargs) -> list[RequestOutput]:
        """Generates the assistant's reply to a conversation (a list of {"role", "content"}
        dicts), or to each of several, with the prompt the plan's chat template renders
        (``chat_template=``, ``chat_template_kwargs=``, ``tools=``: vLLM's, as
        apply_chat_template takes them; ``continue_final_message``: the last message, an
        answer begun, stays open for the model to go on with, with add_generation_prompt
        False). The template writes the special tokens itself, so the tokenizer adds none."""
        if isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, Sequence):
            raise ChatTemplateError("messages must be a list of {'role': ..., 'content': ...} "
                                    "dicts, or a list of such lists, not "
                                    f"{type(messages).__name__}")
        conversations = ([messages] if not messages or isinstance(messages[0], Mapping)
                         else list(messages))
        prompts = []
        for conversation in conversations:
            text = self.apply_chat_template(conversation, add_generation_prompt,
                                            continue_final_message=continue_final_message,
                                            **template_kwargs)
            prompts.append(self.tokenizer.encode(text, add_special_tokens=False))
        outputs = self.generate(prompts, sampling_params)
        return outputs
