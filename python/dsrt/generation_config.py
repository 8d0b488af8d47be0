"""The model's own sampling defaults: its generation_config.json (dsc embeds it in the plan),
which the serving faces take where a request gives none, as vLLM does by default (its
``--generation-config auto``; ``vllm`` there, ``"vllm"`` here, keeps OpenAI's defaults).

The keys are vLLM's: temperature, top_p, top_k, min_p, repetition_penalty, and
max_new_tokens as max_tokens. As vLLM reads the config against transformers' defaults, a
value equal to transformers' own (temperature 1, top_p 1, top_k 50, repetition_penalty 1)
is no preference and is not taken; do_sample is not read (vLLM does not either)."""
from __future__ import annotations

import json
import math
import sys
from typing import Any, Optional

# generation_config.json's name -> (the request's, transformers' default, valid value?)
_KEYS = {
    "temperature": ("temperature", 1.0, lambda v: v >= 0),
    "top_p": ("top_p", 1.0, lambda v: 0 < v <= 1),
    "top_k": ("top_k", 50, lambda v: v == int(v) and v >= 0),
    "min_p": ("min_p", None, lambda v: 0 <= v <= 1),
    "repetition_penalty": ("repetition_penalty", 1.0, lambda v: v > 0),
    "max_new_tokens": ("max_tokens", None, lambda v: v == int(v) and v >= 1),
}


def sampling_defaults(plan, mode: str = "auto") -> dict[str, Any]:
    """The request defaults `plan`'s model sets ({} with mode "vllm", or none set). A value
    of the wrong type or range is left out, said once on stderr."""
    if mode not in ("auto", "vllm"):
        raise ValueError(f"generation_config must be 'auto' (the model's defaults) or 'vllm' "
                         f"(OpenAI's), not {mode!r}")
    raw: Optional[bytes] = plan.generation_config_json() if mode == "auto" else None
    if not raw:
        return {}
    try:
        config = json.loads(raw)
    except ValueError:
        return {}
    defaults = {}
    for key, (name, transformers_default, valid) in _KEYS.items():
        value = config.get(key) if isinstance(config, dict) else None
        if value is None or value == transformers_default:
            continue
        if (isinstance(value, bool) or not isinstance(value, (int, float))
                or not math.isfinite(value) or not valid(value)):
            print(f"dsrt: warning: generation_config.json's {key} {value!r} is not a valid "
                  f"default; left out", file=sys.stderr)
            continue
        defaults[name] = int(value) if name in ("top_k", "max_tokens") else float(value)
    return defaults


def describe(defaults: dict[str, Any]) -> str:
    return ", ".join(f"{name} {value}" for name, value in defaults.items())
