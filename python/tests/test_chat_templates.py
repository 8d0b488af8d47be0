"""dsrt.chat.ChatTemplate must render exactly what transformers' apply_chat_template does.

The reference side builds a tokenizer offline (a one-word WordLevel model: the
vocabulary is irrelevant for tokenize=False) carrying the model's real chat
template and special-token strings. Fixtures: tests/chat_templates/ (see SOURCES.md).
Needs: pytest, jinja2, transformers, tokenizers (no torch).
"""

import json
from datetime import datetime
from pathlib import Path

import pytest

from dsrt.chat import ChatTemplate, ChatTemplateError

import jinja2
import tokenizers
import transformers

TEMPLATE_DIR = Path(__file__).parent / "chat_templates"
SPECIAL_TOKENS = json.loads((TEMPLATE_DIR / "special_tokens.json").read_text(encoding="utf-8"))
TEMPLATES = sorted(SPECIAL_TOKENS)

# Templates that reject a system message via raise_exception (by design, upstream).
REFUSES_SYSTEM = {"google-gemma-2-2b-it"}

SYSTEM = {"role": "system", "content": "You are terse. Ünïcödé ✓ <b>&amp;</b>"}
CONVERSATION = [
    {"role": "user", "content": "héllo — 日本"},
    {"role": "assistant", "content": "Bonjour ! こんにちは 👋 \"quoted\" & <tag>"},
    # Surrounding whitespace exercises templates that `| trim` content.
    {"role": "user", "content": "  Und jetzt? 'single' \\ backslash\n"},
]
TOOLS = [{
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Météo à Tōkyō — <now>",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "e.g. 東京 & \"Zürich\""}},
            "required": ["city"],
        },
    },
}]


def _source(stem):
    # Read bytes and decode without newline translation so the fixture is used verbatim.
    return (TEMPLATE_DIR / f"{stem}.jinja").read_bytes().decode("utf-8")


def _hf_tokenizer(source, special_tokens):
    model = tokenizers.models.WordLevel({"<unk>": 0}, unk_token="<unk>")
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=tokenizers.Tokenizer(model), chat_template=source, **special_tokens)


def _both(stem, messages, **kwargs):
    """Return (reference, ours); each is the rendered str or the exception raised."""
    source, special = _source(stem), SPECIAL_TOKENS[stem]
    results = []
    for render in (
        lambda: _hf_tokenizer(source, special).apply_chat_template(messages, tokenize=False, **kwargs),
        lambda: ChatTemplate(source, special).render(messages, **kwargs),
    ):
        try:
            results.append(render())
        except Exception as e:  # compared by the caller
            results.append(e)
    return results


@pytest.mark.parametrize("add_generation_prompt", [False, True], ids=["no_gen", "gen"])
@pytest.mark.parametrize("with_system", [False, True], ids=["no_system", "system"])
@pytest.mark.parametrize("stem", TEMPLATES)
def test_matches_transformers(stem, with_system, add_generation_prompt):
    messages = ([SYSTEM] if with_system else []) + CONVERSATION
    ref, ours = _both(stem, messages, add_generation_prompt=add_generation_prompt)
    if with_system and stem in REFUSES_SYSTEM:
        assert isinstance(ref, jinja2.TemplateError), ref
        assert isinstance(ours, ChatTemplateError), ours
        assert str(ours) == str(ref)
        return
    assert isinstance(ref, str), f"transformers failed: {ref!r}"
    assert isinstance(ours, str), f"ChatTemplate failed: {ours!r}"
    assert ours == ref
    assert "héllo — 日本" in ours


@pytest.mark.parametrize("stem", sorted(set(TEMPLATES) - REFUSES_SYSTEM))
def test_matches_transformers_with_tools(stem):
    # Tool schemas go through tojson in the Llama/Qwen/Mistral templates; non-ASCII
    # and HTML-ish characters catch any difference from transformers' json.dumps.
    ref, ours = _both(stem, [SYSTEM] + CONVERSATION, tools=TOOLS, add_generation_prompt=True)
    assert isinstance(ref, str), f"transformers failed: {ref!r}"
    assert ours == ref


# A tool round trip as OpenAI's clients send it: the assistant's call with its arguments as
# a JSON string, then the tool's answer.
TOOL_TURN = [
    {"role": "user", "content": "Weather in Zürich?"},
    {"role": "assistant", "content": None, "tool_calls": [{
        "id": "call9abcd", "type": "function",
        "function": {"name": "get_weather", "arguments": "{\"city\": \"Zürich\"}"}}]},
    {"role": "tool", "tool_call_id": "call9abcd", "name": "get_weather",
     "content": "12 °C"},
]


@pytest.mark.parametrize("stem", sorted(set(TEMPLATES) - REFUSES_SYSTEM))
def test_openai_tool_calls_render_as_transformers_dict_arguments(stem):
    # vLLM's reading: the arguments' JSON string is parsed to the dict the templates and
    # transformers' convention expect (a string would be quoted again by tojson). The
    # reference gets the dict; ours the string, through openai_messages.
    from dsrt.chat import openai_messages
    with_dict = json.loads(json.dumps(TOOL_TURN))
    call = with_dict[1]["tool_calls"][0]["function"]
    call["arguments"] = json.loads(call["arguments"])
    source, special = _source(stem), SPECIAL_TOKENS[stem]
    try:
        ref = _hf_tokenizer(source, special).apply_chat_template(
            with_dict, tokenize=False, tools=TOOLS, add_generation_prompt=True)
    except Exception as error:  # a template without tool turns refuses both alike
        with pytest.raises(ChatTemplateError):
            ChatTemplate(source, special).render(openai_messages(TOOL_TURN), tools=TOOLS,
                                                 add_generation_prompt=True)
        return
    ours = ChatTemplate(source, special).render(openai_messages(TOOL_TURN), tools=TOOLS,
                                                add_generation_prompt=True)
    assert ours == ref
    assert TOOL_TURN[1]["tool_calls"][0]["function"]["arguments"].startswith("{")  # unchanged


@pytest.mark.parametrize("expr", [
    "x | tojson",
    "x | tojson(indent=2)",
    "x | tojson(indent=4, sort_keys=True)",
    "x | tojson(separators=(',', ':'))",
    "x | tojson(ensure_ascii=True)",
])
def test_tojson_filter_matches_transformers(expr):
    source = "{{ " + expr + " }}"
    x = {"z": "日本 <&> 'q' \"d\"", "a": [1, 2.5, None, True], "é": {"k": "v"}}
    messages = [{"role": "user", "content": "hi"}]
    expected = _hf_tokenizer(source, {}).apply_chat_template(messages, tokenize=False, x=x)
    assert ChatTemplate(source).render(messages, x=x) == expected


@pytest.mark.parametrize("source", [
    # trim_blocks / lstrip_blocks: the real fixtures mostly use {%- -%}, so check them here.
    "{% for m in messages %}\n    {% if m.role == 'user' %}\n  U: {{ m.content }}\n    {% endif %}\n{% endfor %}\n",
    # jinja2.ext.loopcontrols
    "{% for m in messages %}{% if loop.index > 2 %}{% break %}{% endif %}{% if m.role == 'assistant' %}{% continue %}{% endif %}[{{ m.content }}]{% endfor %}",
    # transformers' {% generation %} tag, including its block scoping
    "{% for m in messages %}{% generation %}{{ m.content }}{% set leaked = 1 %}{% endgeneration %}{% endfor %}{{ leaked is defined }}",
], ids=["whitespace", "loopcontrols", "generation"])
def test_environment_features_match_transformers(source):
    expected = _hf_tokenizer(source, {}).apply_chat_template(CONVERSATION, tokenize=False)
    assert ChatTemplate(source).render(CONVERSATION) == expected


def test_special_tokens_and_extra_variables():
    source = "{{ bos_token }}|{{ eos_token }}|{{ bos_token is defined }}|{{ custom }}"
    messages = [{"role": "user", "content": "hi"}]
    out = ChatTemplate(source, {"bos_token": None, "eos_token": "</s>"}).render(messages, custom=7)
    assert out == "|</s>|False|7"


def test_strftime_now():
    out = ChatTemplate("{{ strftime_now('%Y') }}").render([{"role": "user", "content": ""}])
    assert out == datetime.now().strftime("%Y")


def test_raise_exception_surfaces_as_chat_template_error():
    source = "{% if messages[0].role != 'user' %}{{ raise_exception('first role was ' + messages[0].role) }}{% endif %}ok"
    template = ChatTemplate(source)
    assert template.render([{"role": "user", "content": "x"}]) == "ok"
    with pytest.raises(ChatTemplateError) as info:
        template.render([{"role": "tool", "content": "x"}])
    assert str(info.value) == "first role was tool"
    assert isinstance(info.value, ValueError)


def test_real_template_refusal_message():
    stem = "google-gemma-2-2b-it"
    with pytest.raises(ChatTemplateError, match="^System role not supported$"):
        ChatTemplate(_source(stem), SPECIAL_TOKENS[stem]).render([SYSTEM] + CONVERSATION)


@pytest.mark.parametrize("messages", [
    None,
    "hello",
    {"role": "user", "content": "not in a list"},
    ["hello"],
    [{"content": "no role"}],
    [{"role": None, "content": "null role"}],
    [{"role": 3, "content": "int role"}],
    [{"role": "user", "content": "fine"}, ("assistant", "tuple")],
], ids=["none", "str", "dict", "list_of_str", "missing_role", "none_role", "int_role", "tuple_item"])
def test_malformed_messages(messages):
    template = ChatTemplate(_source("Qwen-Qwen2.5-7B-Instruct"))
    with pytest.raises(ChatTemplateError):
        template.render(messages)


def test_a_template_failing_on_its_input_is_chat_template_error():
    # Qwen's template concatenates the content: a dict content made Jinja raise TypeError,
    # which LLM.chat let out as it was.
    template = ChatTemplate(_source("Qwen-Qwen2.5-7B-Instruct"))
    with pytest.raises(ChatTemplateError, match="failed to render"):
        template.render([{"role": "system", "content": {"a": 1}}])


def test_syntax_error_is_chat_template_error():
    with pytest.raises(ChatTemplateError):
        ChatTemplate("{% for m in messages %}{{ m.content }}")


# An answer begun for the model (a "prefill"): the template leaves it open.
PREFILLED = CONVERSATION + [{"role": "assistant", "content": "Sure — the answer is "}]


@pytest.mark.parametrize("stem", TEMPLATES)
def test_continue_final_message_matches_transformers(stem):
    ref, ours = _both(stem, PREFILLED, continue_final_message=True,
                      add_generation_prompt=False)
    if isinstance(ref, Exception):  # a template that refuses the turn order, say
        assert isinstance(ours, ChatTemplateError), (ref, ours)
        return
    assert ours == ref
    assert ours.endswith("the answer is") or ours.endswith("the answer is ")
    with pytest.raises(ChatTemplateError, match="not compatible"):
        ChatTemplate(_source(stem), SPECIAL_TOKENS[stem]).render(
            PREFILLED, continue_final_message=True, add_generation_prompt=True)
