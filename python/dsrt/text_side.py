"""Where a served model's text comes from: its tokenizer, chat templates and special tokens.

By default they are the plan's (dsc embeds what was beside the model). vLLM's ``--tokenizer``
(``LLM(tokenizer=)``) names a tokenizer of the user's instead, here a local folder with
``tokenizer.json`` (and, as transformers saves them, ``tokenizer_config.json`` and
``chat_template.jinja``) or a ``tokenizer.json`` file: a plan compiled without a tokenizer
then serves text, and a published tokenizer can replace the one in the plan. The folder is
read as dsc reads the model's (compiler/lowering/ChatTemplates.cpp), so the two give the
same templates and special tokens.
"""
from __future__ import annotations

import dataclasses
import json
import os
from typing import Optional, Union

from . import _dsrt
from .tokenizer import NoTokenizer, Tokenizer, plan_tokenizer

SPECIAL_TOKEN_NAMES = ("bos_token", "eos_token", "unk_token", "pad_token")


@dataclasses.dataclass
class TextSide:
    tokenizer: Union[Tokenizer, NoTokenizer]
    chat_templates: dict[str, str]      # name -> Jinja source ("default" is the default)
    special_tokens: dict[str, str]      # SPECIAL_TOKEN_NAMES that the model has -> text
    tokenizer_json: Optional[bytes] = None  # the tokenizer's file, where it is not the plan's


def plan_text_side(plan: "_dsrt.Plan") -> TextSide:
    special = {name: plan.special_token(name) for name in SPECIAL_TOKEN_NAMES}
    return TextSide(plan_tokenizer(plan), dict(plan.chat_templates()),
                    {name: text for name, text in special.items() if text is not None})


def over_plan(given: Optional[TextSide], plan: TextSide) -> TextSide:
    """A tokenizer folder's text side where one was given, the plan's templates and special
    tokens standing where the folder has none."""
    if given is None:
        return plan
    return TextSide(given.tokenizer, given.chat_templates or plan.chat_templates,
                    given.special_tokens or plan.special_tokens, given.tokenizer_json)


def _refuse(path: str, why: str) -> _dsrt.Error:
    return _dsrt.Error(f"DSRT_INVALID_ARGUMENT: tokenizer {path}: {why}")


def _read_bytes(path: str) -> bytes:
    try:
        with open(path, "rb") as file:
            return file.read()
    except OSError as error:
        raise _refuse(path, f"cannot be read ({error})") from None


def _read_json(path: str, text: Optional[bytes] = None):
    try:
        return json.loads(_read_bytes(path) if text is None else text)
    except ValueError as error:
        raise _refuse(path, f"is not valid JSON ({error})") from None


def _largest_id(tokenizer_json: dict, path: str) -> int:
    """The largest token id the tokenizer can produce: its model's vocabulary (a mapping of
    token to id for BPE and WordPiece, a list of [piece, score] for Unigram) and its added
    tokens."""
    model = tokenizer_json.get("model") if isinstance(tokenizer_json, dict) else None
    vocab = model.get("vocab") if isinstance(model, dict) else None
    if isinstance(vocab, dict):
        ids = [i for i in vocab.values() if isinstance(i, int)]
    elif isinstance(vocab, list):
        ids = [len(vocab) - 1] if vocab else []
    else:
        raise _refuse(path, "has no model vocabulary (not a HuggingFace tokenizer.json)")
    ids += [t["id"] for t in tokenizer_json.get("added_tokens") or []
            if isinstance(t, dict) and isinstance(t.get("id"), int)]
    return max(ids, default=-1)


def _templates(config: dict, config_path: str) -> dict[str, str]:
    """transformers keeps one template as a string, several as [{"name", "template"}]."""
    value = config.get("chat_template")
    if value is None:
        return {}
    if isinstance(value, str):
        return {"default": value}
    if not isinstance(value, list):
        raise _refuse(config_path, 'chat_template must be a string or a list of '
                                   '{"name", "template"}')
    templates = {}
    for entry in value:
        if not (isinstance(entry, dict) and isinstance(entry.get("name"), str)
                and isinstance(entry.get("template"), str)):
            raise _refuse(config_path, 'each chat_template entry needs a string "name" and a '
                                       'string "template"')
        templates[entry["name"]] = entry["template"]
    return templates


def _special_tokens(config: dict, config_path: str) -> dict[str, str]:
    """A special token is its text, or an AddedToken object whose "content" is the text."""
    tokens = {}
    for name in SPECIAL_TOKEN_NAMES:
        value = config.get(name)
        if isinstance(value, dict):
            value = value.get("content")
        elif value is not None and not isinstance(value, str):
            raise _refuse(config_path, f'{name} must be a string or an object with a string '
                                       f'"content"')
        if isinstance(value, str):
            tokens[name] = value
    return tokens


def folder_text_side(path: str, vocab_size: int) -> TextSide:
    """The tokenizer at ``path`` (a folder with tokenizer.json, or the file), with the chat
    templates and special tokens of its folder's tokenizer_config.json and
    chat_template.jinja. A tokenizer whose ids reach past the model's ``vocab_size`` logits is
    refused: it is another model's."""
    if os.path.isdir(path):
        folder, file = path, os.path.join(path, "tokenizer.json")
    else:
        folder, file = os.path.dirname(path) or ".", path
    if not os.path.isfile(file):
        raise _refuse(path, "no tokenizer.json there (a local folder or file; nothing is "
                            "downloaded)")
    text = _read_bytes(file)
    largest = _largest_id(_read_json(file, text), file)
    if largest >= vocab_size:
        raise _refuse(path, f"has token ids up to {largest}, past the model's vocabulary of "
                            f"{vocab_size}: it is not this model's tokenizer")
    try:
        tokenizer = Tokenizer.from_file(file)
    except _dsrt.Error as error:
        raise _refuse(path, str(error)) from None
    templates, special = {}, {}
    config_path = os.path.join(folder, "tokenizer_config.json")
    if os.path.isfile(config_path):
        config = _read_json(config_path)
        if not isinstance(config, dict):
            raise _refuse(config_path, "expected a JSON object")
        templates = _templates(config, config_path)
        special = _special_tokens(config, config_path)
    jinja_path = os.path.join(folder, "chat_template.jinja")
    if os.path.isfile(jinja_path):
        with open(jinja_path, encoding="utf-8") as jinja:
            templates["default"] = jinja.read()
    return TextSide(tokenizer, templates, special, text)
