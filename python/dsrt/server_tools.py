"""What a chat request's ``tools`` and ``tool_choice`` ask of its output, as vLLM answers
them. ``tool_choice`` naming a function makes the output that function's arguments (its
``parameters`` schema, through structured output), ``"required"`` makes it a JSON list of
``{"name", "parameters"}`` calls of the given tools; the answer carries them as
``tool_calls``. ``"auto"`` (and tools with no choice, OpenAI's default) leaves the output
free and reads the calls the model writes in its own format (tool_parsers.py), where the
server has a parser for it; ``"none"`` leaves the output free and unread (the tools still
reach the chat template)."""
from __future__ import annotations

import json
from typing import Any, Optional

from .structured import StructuredOutputsParams
from .tool_parsers import PARSERS, ToolParser, tool_call


class ToolChoice:
    """What a chat request's tools and tool_choice ask of the output (ValueError naming what
    is wrong otherwise)."""

    def __init__(self, tools: Optional[list[dict[str, Any]]], choice: Any,
                 parser: Optional[str] = None, parallel: bool = True):
        # "named", "required", "auto" (free text read by `parser`) or None (free text)
        self.mode: Optional[str] = None
        self.name: Optional[str] = None
        self.parser: Optional[ToolParser] = None
        self.parallel = parallel  # False: one call at most
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
        if choice == "none" or (choice in (None, "auto") and not self._parameters):
            return
        if choice in ("auto", None):
            if not parser:
                # Tools alone and no parser: free text (vLLM refuses it; a client that sends
                # its tools with every request keeps working).
                if choice is None:
                    return
                raise ValueError("tool_choice \"auto\" needs the model's tool-call format: "
                                 "its chat template names none that dsserve knows; start "
                                 f"dsserve with --tool-call-parser ({', '.join(PARSERS)}), "
                                 "or use \"required\", a named function or \"none\"")
            self.mode, self.parser = "auto", PARSERS[parser](self._parameters)
            return
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
            listed = {"type": "array", "minItems": 1, "items": {"anyOf": calls}}
            if not self.parallel:
                listed["maxItems"] = 1
            return StructuredOutputsParams(json=listed)
        return None

    def calls(self, text: str) -> Optional[list[dict[str, Any]]]:
        """The answer's tool_calls from the output's text, or None where it is not a whole
        call (the output ran out of tokens first)."""
        if self.mode == "named":
            try:
                json.loads(text)
            except ValueError:
                return None
            return [tool_call(self.name, text)]
        if self.mode == "required":
            try:
                listed = json.loads(text)
            except ValueError:
                return None
            return [tool_call(call["name"], json.dumps(call["parameters"], ensure_ascii=False))
                    for call in listed]
        return None

    def message(self, text: str, finish: str, streamed: bool) -> tuple[dict, str]:
        """A forced call's message: its tool_calls (vLLM's finish reasons: "stop" for a
        named function, "tool_calls" for "required"; a stream's delta numbers them), or the
        text where the output ran out before the call was whole."""
        calls = self.calls(text)
        if calls is None:
            return {"role": "assistant", "content": text}, finish
        if streamed:
            calls = [dict(call, index=k) for k, call in enumerate(calls)]
        return ({"role": "assistant", "content": None, "tool_calls": calls},
                "tool_calls" if self.mode == "required" and finish == "stop" else finish)
