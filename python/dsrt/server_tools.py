"""OpenAI's tool calls where the request forces one, as vLLM answers them without a model's
tool-call parser: ``tool_choice`` naming a function makes the output that function's
arguments (its ``parameters`` schema, through structured output), ``"required"`` makes it a
JSON list of ``{"name", "parameters"}`` calls of the given tools; the answer carries them as
``tool_calls``. ``"auto"`` needs a parser of the model's own tool-call format, which dsrt does
not have: it is refused, naming the choices that work; ``"none"`` and no choice leave the
output free (the tools still reach the chat template)."""
from __future__ import annotations

import json
import secrets
import string
from typing import Any, Optional

from .structured import StructuredOutputsParams


class ToolChoice:
    """What a chat request's tools and tool_choice ask of the output (ValueError naming what
    is wrong otherwise)."""

    def __init__(self, tools: Optional[list[dict[str, Any]]], choice: Any):
        self.mode: Optional[str] = None  # "named", "required", or None (free text)
        self.name: Optional[str] = None
        self._parameters: dict[str, dict] = {}
        for tool in tools or []:
            function = tool.get("function") if isinstance(tool, dict) else None
            if (tool.get("type", "function") != "function" or not isinstance(function, dict)
                    or not isinstance(function.get("name"), str) or not function["name"]):
                raise ValueError("each tool must be {\"type\": \"function\", \"function\": "
                                 "{\"name\": ..., \"parameters\": {...}}}")
            parameters = function.get("parameters", {"type": "object"})
            if not isinstance(parameters, dict):
                raise ValueError(f"tool {function['name']!r}: parameters must be a JSON schema "
                                 f"object")
            self._parameters[function["name"]] = parameters
        if choice is None or choice == "none":
            return
        if choice == "auto":
            raise ValueError("tool_choice \"auto\" needs a parser of the model's own tool-call "
                             "format, which dsrt does not have; use \"required\", a named "
                             "function or \"none\"")
        if not self._parameters:
            raise ValueError("tool_choice needs tools")
        if choice == "required":
            self.mode = "required"
            return
        function = choice.get("function") if isinstance(choice, dict) else None
        name = function.get("name") if isinstance(function, dict) else None
        if not isinstance(name, str):
            raise ValueError("tool_choice must be \"none\", \"auto\", \"required\" or "
                             "{\"type\": \"function\", \"function\": {\"name\": ...}}")
        if name not in self._parameters:
            raise ValueError(f"tool_choice names {name!r}, which is not among the tools "
                             f"{sorted(self._parameters)}")
        self.mode, self.name = "named", name

    def structured(self) -> Optional[StructuredOutputsParams]:
        """The grammar of the forced call(s): the named function's arguments, or a list of
        at least one call of any tool (vLLM's schema for "required")."""
        if self.mode == "named":
            return StructuredOutputsParams(json=self._parameters[self.name])
        if self.mode == "required":
            calls = [{"type": "object",
                      "properties": {"name": {"type": "string", "enum": [name]},
                                     "parameters": parameters},
                      "required": ["name", "parameters"], "additionalProperties": False}
                     for name, parameters in self._parameters.items()]
            return StructuredOutputsParams(json={"type": "array", "minItems": 1,
                                                 "items": {"anyOf": calls}})
        return None

    def calls(self, text: str) -> Optional[list[dict[str, Any]]]:
        """The answer's tool_calls from the output's text, or None where it is not a whole
        call (the output ran out of tokens first)."""
        if self.mode == "named":
            try:
                json.loads(text)
            except ValueError:
                return None
            return [_call(self.name, text)]
        if self.mode == "required":
            try:
                listed = json.loads(text)
            except ValueError:
                return None
            return [_call(call["name"], json.dumps(call["parameters"], ensure_ascii=False))
                    for call in listed]
        return None


# A call's id: 9 letters and digits, which every template takes back in the next turn
# (Mistral's refuses any other; ids are opaque to OpenAI's clients). 62**9 of them.
_ID_CHARACTERS = string.ascii_letters + string.digits


def _call(name: str, arguments: str) -> dict[str, Any]:
    return {"id": "".join(secrets.choice(_ID_CHARACTERS) for _ in range(9)),
            "type": "function", "function": {"name": name, "arguments": arguments}}
