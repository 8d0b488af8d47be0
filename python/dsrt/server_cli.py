"""``dsserve``'s command line: its flags (vLLM's names where they mean the same), the
engine and app it builds from them, the process's open-file limit, and uvicorn's run. The
routes are server.py's."""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from typing import Optional

from . import _dsrt
from .chat import ChatTemplate, ChatTemplateError
from .compiler import _model_name, plan_for
from .engine import EngineLoop
from .server import Cors, create_app
from .server_state import Server
from .generation_config import describe
from .reasoning import PARSERS as REASONING_PARSERS
from .tool_parsers import PARSERS


def _mpi_world() -> int:
    for name in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"):
        if os.environ.get(name, "").isdigit():
            return int(os.environ[name])
    return 1


# Files beside the connections: the plan, the libraries, Python's imports, the engine's own.
_FILES_BESIDE_CONNECTIONS = 128


def _raise_open_file_limit(max_concurrent: int) -> None:
    """Each client holds a socket, also one answered 429, and Linux's default soft limit of
    1024 open files made a flood of 1500 streaming clients fail with connection resets and
    500s (EMFILE at accept and in starlette's lazy imports). As vLLM does, the soft limit is
    raised to the hard one; a hard limit below the cap is said at the start."""
    try:
        import resource
    except ImportError:  # not a POSIX system
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = max_concurrent + _FILES_BESIDE_CONNECTIONS
    # An unlimited hard limit is taken as far as the cap needs, and at least vLLM's 65535.
    target = hard if hard != resource.RLIM_INFINITY else max(wanted, 65535)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    if soft != resource.RLIM_INFINITY and soft < wanted:
        print(f"dsserve: warning: this process may open {soft} files (ulimit -n; hard limit "
              f"{'unlimited' if hard == resource.RLIM_INFINITY else hard}), fewer than "
              f"--max-concurrent-requests {max_concurrent} needs: past about "
              f"{max(soft - _FILES_BESIDE_CONNECTIONS, 0)} clients at once, new connections "
              f"fail instead of being answered; raise `ulimit -Hn` or lower the cap",
              file=sys.stderr)


def _int_within(low: int, high: int):
    """An argparse type: an integer in [low, high]. A --port of 99999 had been taken and the
    server listened on another port; a cap of 0 answered every request 429."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be in [{low}, {high}], not {value}")
        return value
    return parse


def _json(what: str, fits):
    """An argparse type: JSON that `fits` (vLLM's flags take JSON: --allowed-origins a list
    of strings, --speculative-config an object); `what` names it in the refusal."""
    def parse(text: str):
        try:
            value = json.loads(text)
        except ValueError:
            value = None
        if not fits(value):
            raise argparse.ArgumentTypeError(f"must be {what}, not {text!r}")
        return value
    return parse


_json_strings = _json("a JSON list of strings such as '[\"*\"]'", lambda v: isinstance(
    v, list) and all(isinstance(s, str) for s in v))
_json_object = _json("a JSON object", lambda v: isinstance(v, dict))


# vLLM's flags that ask for nothing dsserve does otherwise: taken, so that a `vllm serve`
# command line runs unchanged, and said once at the start.
_WITHOUT_EFFECT = {
    "--trust-remote-code": "taken; dsrt runs no model code (the plan is the compiled graph)",
    "--disable-log-requests": "taken; dsserve does not log requests",
    "--disable-log-stats": "taken; dsserve does not log statistics (/metrics has them)",
    "--enable-chunked-prefill": "taken; prompts are always chunked",
    "--disable-frontend-multiprocessing": "taken; the server and engine share one process",
    "--swap-space": "taken; a preempted sequence is recomputed, never swapped to host memory",
}
# vLLM's flags that ask for what dsserve cannot do: refused with what to use instead.
_REFUSED = {
    "gpu_memory_utilization": "--gpu-memory-utilization is not taken: it is a share of the "
                              "whole GPU with the weights; --kv-cache-memory-fraction is a "
                              "share of what the weights leave (--kv-cache-bytes: an amount)",
    "quantization": "--quantization is not taken: compile quantized weights with --dtype "
                    "int8 or int4 (or serve an ONNX Runtime-quantized model as it is)",
    "enable_lora": "LoRA adapters are not served (--enable-lora, --lora-modules)",
    "pipeline_parallel_size": "--pipeline-parallel-size is not taken: dsrt splits a model "
                              "by tensor parallelism (--tensor-parallel-size)",
    "no_enable_chunked_prefill": "--no-enable-chunked-prefill is not taken: prompts are "
                                 "always chunked under --max-num-batched-tokens",
}


class _AppendFlag(argparse.Action):
    """Lists the flag given (whatever its value) in `dest`."""

    def __call__(self, parser, namespace, values, option_string=None):
        getattr(namespace, self.dest).append(option_string)


def _vllm_flags_without_effect(parser: argparse.ArgumentParser) -> None:
    for flag in _WITHOUT_EFFECT:
        if flag == "--swap-space":  # GiB of host memory per GPU
            parser.add_argument(flag, action=_AppendFlag, type=float, dest="without_effect",
                                help=argparse.SUPPRESS)
        else:
            parser.add_argument(flag, action=_AppendFlag, nargs=0, dest="without_effect",
                                help=argparse.SUPPRESS)
    parser.set_defaults(without_effect=[])
    for name in _REFUSED:
        flag = "--" + name.replace("_", "-")
        if name == "enable_lora":
            parser.add_argument(flag, "--lora-modules", nargs="*", dest=name,
                                help=argparse.SUPPRESS)
        elif name == "no_enable_chunked_prefill":
            parser.add_argument(flag, action="store_true", dest=name, help=argparse.SUPPRESS)
        else:
            parser.add_argument(flag, dest=name, help=argparse.SUPPRESS)


def _refused_vllm_flag(args: argparse.Namespace) -> Optional[str]:
    for name, reason in _REFUSED.items():
        value = getattr(args, name)
        if value not in (None, False) and not (name == "pipeline_parallel_size"
                                               and value == "1"):
            return reason
    return None


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="dsserve", description="Serve a dsc plan over HTTP with the OpenAI protocol "
        "(/v1/completions, /v1/chat/completions, /v1/models, /health, /metrics; vLLM's "
        "/tokenize, /detokenize and /version). Under "
        "mpirun a tensor-parallel plan runs one rank per process; rank 0 serves.")
    parser.add_argument("model", metavar="MODEL", nargs="?",
                        help="the plan (dsc compile --serving model.onnx -o plan.dsp), or an "
                        "ONNX model or its folder, compiled once to a serving plan kept in "
                        "$DSRT_CACHE_DIR (default ~/.cache/dsrt/plans); or --model MODEL, as "
                        "vLLM's api_server takes it")
    parser.add_argument("--model", dest="model_flag", metavar="MODEL", help=argparse.SUPPRESS)
    parser.add_argument("--dtype", help="compiling a model: the weights' dtype (dsc --dtype: "
                        "fp32, fp16, bf16, int8, int4; default the model's)")
    parser.add_argument("--tp", "--tensor-parallel-size", type=int, dest="tp",
                        help="compiling a model: tensor-parallel ranks (with a plan, its own "
                        "rank count or nothing)")
    parser.add_argument("--max-seq-len", "--max-model-len", type=int, dest="max_seq_len",
                        help="compiling a model: positions per sequence (default the model's); "
                        "with a plan, at most its positions: a cap on each request")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=_int_within(1, 65535), default=8000)
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cpu-reference")
    parser.add_argument("--served-model-name", help="the model's id in /v1/models "
                        "(default: the plan file's name without .dsp)")
    parser.add_argument("--max-concurrent-requests", type=_int_within(1, 1 << 31),
                        default=4096, help="requests served at once (the engine queues "
                        "those past --max-num-seqs); more are answered 429")
    parser.add_argument("--block-size", type=int, default=16)
    parser.add_argument("--kv-cache-bytes", type=int, default=0,
                        help="the KV cache's bytes (0: a whole sequence for every row of "
                        "the plan's step, at most a quarter of the memory)")
    parser.add_argument("--kv-cache-memory-fraction", type=float, default=0.0,
                        help="the KV cache as this fraction (0 to 1) of the memory free at "
                        "the start (a GPU's: once the weights are on it), instead of "
                        "--kv-cache-bytes")
    parser.add_argument("--max-tokens-per-step", "--max-num-batched-tokens", type=int,
                        default=0, dest="max_tokens_per_step",
                        help="tokens one engine step computes at most (0: the plan's step rows)")
    parser.add_argument("--max-running", "--max-num-seqs", type=int, default=0,
                        dest="max_running",
                        help="sequences holding KV at once (0: --max-tokens-per-step)")
    parser.add_argument("--no-prefix-caching", "--no-enable-prefix-caching",
                        action="store_true", dest="no_prefix_caching")
    parser.add_argument("--enable-prefix-caching", action="store_false",
                        dest="no_prefix_caching", help="(the default; vLLM's flag)")
    invariance = parser.add_mutually_exclusive_group()
    invariance.add_argument("--no-batch-invariant", action="store_true",
                            help="let long steps of half and quantized plans take faster bf16 "
                            "arithmetic (a token may then differ from the request's alone)")
    invariance.add_argument("--exact-batch-invariance", action="store_true",
                            help="f32 and half weights too sum every row as a row alone, so a "
                            "request's log-probabilities are the same bits in any batch (slower on "
                            "long steps; vLLM's VLLM_BATCH_INVARIANT)")
    parser.add_argument("--kv-cache-dtype", choices=("auto", "int8"), default="auto",
                        help="the KV cache's dtype: the plan's, or int8 with a scale per 32 "
                        "values (about half an f16 cache's bytes; CPU only)")
    parser.add_argument("--speculative-config", type=_json_object, metavar="JSON",
                        help="speculative decoding, vLLM's form, prompt lookup only: "
                        "'{\"method\": \"ngram\", \"num_speculative_tokens\": 4, "
                        "\"prompt_lookup_max\": 3}' (the same tokens; CPU only)")
    parser.add_argument("--structured-outputs-config", type=_json_object, metavar="JSON",
                        default={}, help="vLLM's: '{\"disable_any_whitespace\": true}' makes "
                        "structured JSON outputs compact (response_format, structured_outputs)")
    parser.add_argument("--threads", type=_int_within(0, 4096), default=0,
                        help="threads of the CPU kernels (0: $DSRT_NUM_THREADS, else the CPUs "
                        "this process may run on: its affinity mask and cgroup CPU quota)")
    parser.add_argument("--chat-template", metavar="FILE",
                        help="a Jinja chat template for /v1/chat/completions instead of the "
                        "plan's (the model's tokenizer_config.json's)")
    parser.add_argument("--tool-call-parser", choices=[*PARSERS, "none"],
                        help="how the model writes its tool calls, read for tool_choice "
                        "\"auto\" (vLLM's names); default: the format its chat template "
                        "teaches, where dsserve knows it; none reads no calls")
    parser.add_argument("--reasoning-parser", choices=[*REASONING_PARSERS, "none"],
                        help="how a reasoning model's thinking (<think>...</think>) is told "
                        "from its answer, answered as reasoning_content (vLLM's names); "
                        "default: qwen3's reading where the chat template knows the tags "
                        "(thinking where the prompt or output opens it); deepseek_r1 takes "
                        "the output as thinking until </think>; none reads none")
    parser.add_argument("--generation-config", choices=["auto", "vllm"], default="auto",
                        help="vLLM's: auto (default) takes the model's generation_config.json "
                        "(temperature, top_p, top_k, min_p, repetition_penalty, max_new_tokens) "
                        "for what a request leaves out; vllm keeps OpenAI's defaults")
    parser.add_argument("--scheduling-policy", choices=["fcfs", "priority"], default="fcfs",
                        help="vLLM's: fcfs (default) serves requests in arrival order; "
                        "priority takes each request's \"priority\" (lower first, then by "
                        "arrival), which fcfs refuses unless it is 0")
    parser.add_argument("--enable-auto-tool-choice", action="store_true",
                        help="vLLM's: tool_choice \"auto\" (always on where a tool-call "
                        "format is named or detected); with it, a server that finds none "
                        "does not start")
    parser.add_argument("--api-key", default=os.environ.get("DSSERVE_API_KEY") or None,
                        help="the key /v1/... requests must carry (Authorization: Bearer "
                        "KEY), as vLLM's; default $DSSERVE_API_KEY, else none")
    parser.add_argument("--allowed-origins", type=_json_strings, default=["*"],
                        help="origins whose pages may call the server from a browser (CORS), "
                        "a JSON list; default any, as vLLM's")
    parser.add_argument("--allow-credentials", action="store_true",
                        help="let those pages send cookies and HTTP authentication (CORS)")
    parser.add_argument("--allowed-methods", type=_json_strings, default=["*"],
                        help="HTTP methods those pages may use, a JSON list (default any)")
    parser.add_argument("--allowed-headers", type=_json_strings, default=["*"],
                        help="request headers those pages may send, a JSON list (default any)")
    parser.add_argument("--log-level", "--uvicorn-log-level", default="warning",
                        dest="log_level")
    parser.add_argument("--seed", type=_int_within(0, 2 ** 64 - 1),
                        help="vLLM's: requests without a seed draw from a stream seeded by "
                        "this, so that the same requests in the same order repeat (default: "
                        "each its own random seed)")
    parser.add_argument("--enforce-eager", action="store_true",
                        help="vLLM's: no CUDA graphs; every GPU step is launched eagerly")
    parser.add_argument("--return-tokens-as-token-ids", action="store_true",
                        help="vLLM's: logprobs name their tokens \"token_id:N\" (a request's "
                        "return_tokens_as_token_ids decides for it)")
    parser.add_argument("--tokenizer",
                        help="vLLM's: a local folder with tokenizer.json (or the file) to use "
                        "instead of the plan's, with its tokenizer_config.json's chat template "
                        "and special tokens where it has them (a plan compiled without a "
                        "tokenizer then serves text)")
    parser.add_argument("--root-path", default="",
                        help="the path prefix a proxy serves this under (uvicorn's)")
    parser.add_argument("--ssl-keyfile", help="serve HTTPS with this key (uvicorn's)")
    parser.add_argument("--ssl-certfile", help="and this certificate")
    _vllm_flags_without_effect(parser)
    args = parser.parse_args(argv)
    if (args.model is None) == (args.model_flag is None):
        parser.error("give the model once: dsserve MODEL, or --model MODEL")
    args.model = args.model or args.model_flag
    refused = _refused_vllm_flag(args)
    if refused:
        print(f"dsserve: {refused}", file=sys.stderr)
        return 2
    for flag in args.without_effect:
        print(f"dsserve: {flag}: {_WITHOUT_EFFECT[flag]}", file=sys.stderr)
    if args.enforce_eager:
        os.environ["DSRT_CUDA_GRAPHS"] = "0"  # read by each CUDA session as it is made
    unknown = sorted(set(args.structured_outputs_config) - {"disable_any_whitespace", "backend"})
    if unknown or args.structured_outputs_config.get("backend", "guidance") not in (
            "auto", "guidance"):
        print(f"dsserve: --structured-outputs-config takes disable_any_whitespace (and backend "
              f"guidance), not {unknown or args.structured_outputs_config['backend']}",
              file=sys.stderr)
        return 2
    chat_template = None
    if args.chat_template:
        try:
            with open(args.chat_template, encoding="utf-8") as file:
                chat_template = file.read()
            ChatTemplate(chat_template, {})  # a template that does not parse fails here
        except (OSError, ChatTemplateError) as error:
            print(f"dsserve: --chat-template {args.chat_template}: {error}", file=sys.stderr)
            return 2

    try:
        if args.threads:
            _dsrt.set_cpu_threads(args.threads)
        plan = plan_for(args.model, tp=args.tp, dtype=args.dtype, max_seq_len=args.max_seq_len)
        engine = EngineLoop(plan, device=args.device, block_size=args.block_size,
                            kv_cache_bytes=args.kv_cache_bytes,
                            max_tokens_per_step=args.max_tokens_per_step,
                            max_running=args.max_running,
                            prefix_caching=not args.no_prefix_caching,
                            batch_invariant=("exact" if args.exact_batch_invariance
                                             else not args.no_batch_invariant),
                            kv_cache_dtype=args.kv_cache_dtype, mpi=_mpi_world() > 1,
                            kv_cache_memory_fraction=args.kv_cache_memory_fraction,
                            max_seq_len=args.max_seq_len,
                            speculative_config=args.speculative_config,
                            tokenizer=args.tokenizer)
    except _dsrt.Error as error:
        print(f"dsserve: {error}", file=sys.stderr)
        return 1
    if engine.rank != 0:
        # mpirun forwards SIGTERM to every rank; a follower stays until rank 0 has drained
        # its requests (they need this rank's steps) and ended its engine, which ends this.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        engine.follow()
        return 0

    import uvicorn
    _raise_open_file_limit(args.max_concurrent_requests)
    name = args.served_model_name or _model_name(args.model)
    server = Server(engine, name, args.max_concurrent_requests, chat_template,
                    bool(args.structured_outputs_config.get("disable_any_whitespace")),
                    tool_call_parser=args.tool_call_parser,
                    reasoning_parser=args.reasoning_parser,
                    generation_config=args.generation_config,
                    scheduling_policy=args.scheduling_policy, seed=args.seed,
                    tokens_as_ids=args.return_tokens_as_token_ids)
    if args.enable_auto_tool_choice and not server.tool_call_parser:
        print("dsserve: --enable-auto-tool-choice: the chat template teaches no tool-call "
              f"format dsserve knows; name one with --tool-call-parser ({', '.join(PARSERS)})",
              file=sys.stderr)
        engine.close()
        return 2
    if server.tool_call_parser:
        how = "named" if args.tool_call_parser else "the chat template's"
        print(f"dsserve: tool calls read as {server.tool_call_parser} ({how}; "
              f"--tool-call-parser none reads none)", file=sys.stderr)
    if server.defaults:
        print(f"dsserve: the model's generation_config.json sets the defaults of what a "
              f"request leaves out: {describe(server.defaults)} (--generation-config vllm: "
              f"OpenAI's)", file=sys.stderr)
    if server.reasoning_parser:
        how = "named" if args.reasoning_parser else "the chat template's <think> tags"
        print(f"dsserve: reasoning read as {server.reasoning_parser} ({how}; "
              f"--reasoning-parser none reads none)", file=sys.stderr)
    app = create_app(server,
                     api_key=args.api_key,
                     cors=Cors(args.allowed_origins, args.allow_credentials,
                               args.allowed_methods, args.allowed_headers))
    # uvicorn's SIGTERM/SIGINT handling stops accepting and waits for the requests in
    # flight (timeout_graceful_shutdown None) before the engine is closed.
    config = uvicorn.Config(app, host=args.host, port=args.port, log_level=args.log_level,
                            timeout_graceful_shutdown=None, root_path=args.root_path,
                            ssl_keyfile=args.ssl_keyfile, ssl_certfile=args.ssl_certfile)

    class DrainingServer(uvicorn.Server):
        # uvicorn re-raises the signal once drained, so the exit status would say "killed";
        # a server that drained and stopped as asked exits 0.
        def handle_exit(self, sig, frame):
            super().handle_exit(sig, frame)
            getattr(self, "_captured_signals", []).clear()

    try:
        DrainingServer(config).run()
    finally:
        engine.close()
    return 0
