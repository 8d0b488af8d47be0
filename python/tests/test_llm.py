"""dsrt.LLM, Tokenizer, Session and compile against transformers' outputs on the fixture
(generation.json: greedy tokens with EOS off, and the prefill's last logits)."""
import json
import math

import numpy as np
import pytest

import dsrt
from dsrt.chat import ChatTemplate

GREEDY = dict(temperature=0, ignore_eos=True)


def log_softmax(logits):
    peak = max(logits)
    total = math.log(sum(math.exp(x - peak) for x in logits)) + peak
    return [x - total for x in logits]


def test_generate_is_transformers_greedy(llm, reference):
    prompts = [p["ids"] for p in reference["prompts"]]
    outputs = llm.generate(prompts, dsrt.SamplingParams(
        max_tokens=reference["max_new_tokens"], **GREEDY))
    assert len(outputs) == len(prompts)
    for output, expected in zip(outputs, reference["prompts"]):
        assert output.prompt_token_ids == expected["ids"]
        assert output.outputs[0].token_ids == expected["generated"]
        assert output.outputs[0].finish_reason == "length"
        assert output.outputs[0].text == llm.tokenizer.decode(expected["generated"])


def test_vllm_prompt_forms_and_one_sampling_params_per_prompt(llm, reference):
    # vLLM's generate takes {"prompt_token_ids": ids} and {"prompt": text} beside plain
    # prompts, and a list of SamplingParams, one per prompt.
    first, second = reference["prompts"][0], reference["prompts"][1]
    text = llm.tokenizer.decode(second["ids"])
    lengths = [3, 5, 2]
    outputs = llm.generate(
        [{"prompt_token_ids": first["ids"]}, {"prompt": text}, first["ids"]],
        [dsrt.SamplingParams(max_tokens=n, **GREEDY) for n in lengths])
    assert [len(o.outputs[0].token_ids) for o in outputs] == lengths
    assert outputs[0].prompt is None and outputs[0].prompt_token_ids == first["ids"]
    assert outputs[0].outputs[0].token_ids == first["generated"][:3]
    assert outputs[2].outputs[0].token_ids == first["generated"][:2]
    assert outputs[1].prompt == text
    assert outputs[1].prompt_token_ids == llm.get_tokenizer().encode(text)
    alone = llm.generate(text, dsrt.SamplingParams(max_tokens=5, **GREEDY))[0]
    assert outputs[1].outputs[0].token_ids == alone.outputs[0].token_ids
    ids = [o.request_id for o in outputs]
    assert all(ids) and len(set(ids)) == len(ids)
    with pytest.raises(ValueError, match="3 prompts and 2 sampling_params"):
        llm.generate([first["ids"]] * 3, [dsrt.SamplingParams()] * 2)
    with pytest.raises(dsrt.Error, match="prompt_token_ids"):
        llm.generate({"text": "no such key"})


def test_vllm_engine_argument_names_reach_the_engine(plan, reference):
    # tensor_parallel_size, max_model_len, dtype="auto", enable_prefix_caching, max_num_seqs
    # and max_num_batched_tokens as vLLM's LLM takes them.
    ids = reference["prompts"][0]["ids"]
    # Blocks of 2 positions: the 5-token prompt fills two, which a cache would hit.
    with dsrt.LLM(plan, dtype="auto", enable_prefix_caching=False, max_num_seqs=1,
                  max_num_batched_tokens=8, block_size=2) as engine:
        outputs = engine.generate([ids, ids, ids], dsrt.SamplingParams(max_tokens=4, **GREEDY))
        stats = engine._loop.stats()
    assert all(o.outputs[0].token_ids == reference["prompts"][0]["generated"][:4]
               for o in outputs)
    assert stats["peak_running"] == 1 and stats["max_tokens_per_step"] == 8
    assert stats["prefix_hits"] == 0
    with pytest.raises(ValueError, match="tp=1 and tensor_parallel_size=2 disagree"):
        dsrt.LLM(plan, tp=1, tensor_parallel_size=2)


def test_without_batch_invariance_an_fp32_plan_is_still_greedy(plan, reference):
    # batch_invariant=False changes only half and quantized plans' long steps (docs/serving.md):
    # the option reaches the engine, and an fp32 plan keeps transformers' tokens.
    prompts = [p["ids"] for p in reference["prompts"]]
    with dsrt.LLM(plan, batch_invariant=False) as engine:
        outputs = engine.generate(prompts, dsrt.SamplingParams(
            max_tokens=reference["max_new_tokens"], **GREEDY))
    for output, expected in zip(outputs, reference["prompts"]):
        assert output.outputs[0].token_ids == expected["generated"]


def test_exact_batch_invariance_gives_a_request_its_logprobs_alone_bit_for_bit(plan, reference):
    # batch_invariant="exact" (docs/serving.md, "Batch invariance"): f32 weights sum every row
    # as a row alone, so a request's log-probabilities in a batch are the very floats it gets
    # alone; the default keeps f32 plans' within f32 rounding only (their kernels sum in an
    # order of their own for 1, 2-4 and 5-8 rows).
    prompts = [p["ids"] for p in reference["prompts"]]
    params = dsrt.SamplingParams(max_tokens=6, logprobs=5, **GREEDY)

    def logprobs(outputs):
        return [[(t.token_id, t.logprob, t.top) for t in o.outputs[0].logprobs] for o in outputs]

    with dsrt.LLM(plan, batch_invariant="exact") as engine:
        alone = [logprobs(engine.generate([p], params))[0] for p in prompts]
        together = logprobs(engine.generate(prompts, params))
    assert together == alone
    with pytest.raises(dsrt.Error, match='batch_invariant must be True, False or "exact"'):
        dsrt.LLM(plan, batch_invariant="fast")


def test_int8_kv_cache_reaches_the_engine_and_bad_dtypes_are_refused(plan, reference):
    # The int8 cache's numerics are test/ops' and its batch invariance test/serving's; here the
    # option reaches the engine (its blocks take fewer bytes than the plan's f32 ones) and
    # the first greedy token, whose logits move by the cache's rounding only, is transformers'.
    from dsrt.engine import EngineLoop
    plain, int8 = EngineLoop(plan), EngineLoop(plan, kv_cache_dtype="int8")
    try:
        assert int8.stats()["bytes_per_block"] < plain.stats()["bytes_per_block"]
    finally:
        plain.close()
        int8.close()
    prompts = [p["ids"] for p in reference["prompts"]]
    with dsrt.LLM(plan, kv_cache_dtype="int8") as engine:
        outputs = engine.generate(prompts, dsrt.SamplingParams(max_tokens=1, **GREEDY))
    for output, expected in zip(outputs, reference["prompts"]):
        assert output.outputs[0].token_ids == expected["generated"][:1]
    with pytest.raises(ValueError, match="kv_cache_dtype"):
        dsrt.LLM(plan, kv_cache_dtype="fp8")


def test_kv_cache_memory_fraction_reaches_the_engine_and_bad_ones_are_refused(plan):
    # The budget's arithmetic is dsrt-engine-check's (test/serving); here the option reaches
    # the engine from Python: a hundredth of the free memory holds more blocks than a
    # thousandth, and a fraction out of (0, 1] or beside kv_cache_bytes is refused by name.
    from dsrt.engine import EngineLoop
    small = EngineLoop(plan, kv_cache_memory_fraction=0.001)
    large = EngineLoop(plan, kv_cache_memory_fraction=0.01)
    try:
        assert 0 < small.stats()["total_blocks"] < large.stats()["total_blocks"]
    finally:
        small.close()
        large.close()
    with pytest.raises(dsrt.Error, match="kv_cache_memory_fraction must be more than 0"):
        dsrt.LLM(plan, kv_cache_memory_fraction=1.5)
    with pytest.raises(dsrt.Error, match="both set the KV budget"):
        dsrt.LLM(plan, kv_cache_memory_fraction=0.01, kv_cache_bytes=1 << 20)


def test_logprobs_are_transformers_log_softmax(llm, reference):
    # fp32 on both sides: 1e-4 as the fixture's logits tests (check_generation.py).
    for prompt in reference["prompts"]:
        out = llm.generate([prompt["ids"]], dsrt.SamplingParams(max_tokens=1, logprobs=5,
                                                                **GREEDY))[0].outputs[0]
        expected = log_softmax(prompt["prefill_last_logits"])
        first = out.logprobs[0]
        assert first.token_id == prompt["generated"][0]
        assert first.logprob == pytest.approx(expected[first.token_id], abs=1e-4)
        likeliest = sorted(range(len(expected)), key=lambda i: -expected[i])[:5]
        assert [t for t, _ in first.top] == likeliest
        for token, value in first.top:
            assert value == pytest.approx(expected[token], abs=1e-4)


def test_stream_pieces_make_the_generated_text(llm, reference):
    ids = reference["prompts"][1]["ids"]
    params = dsrt.SamplingParams(max_tokens=20, **GREEDY)
    pieces = list(llm.stream(ids, params))
    assert len(pieces) > 1
    assert "".join(pieces) == llm.generate([ids], params)[0].outputs[0].text


def test_stop_string_ends_the_text_before_it(llm, reference):
    ids = reference["prompts"][0]["ids"]
    whole = llm.generate([ids], dsrt.SamplingParams(max_tokens=24, **GREEDY))[0].outputs[0]
    # A stop string from the middle of what greedy decoding writes.
    stop = whole.text[3:5]
    assert stop and stop in whole.text
    cut = llm.generate([ids], dsrt.SamplingParams(max_tokens=24, stop=stop,
                                                  **GREEDY))[0].outputs[0]
    assert cut.finish_reason == "stop"
    assert cut.text == whole.text[:whole.text.find(stop)]
    assert len(cut.token_ids) < len(whole.token_ids)
    # vLLM's include_stop_str_in_output keeps it, with the same tokens.
    kept = llm.generate([ids], dsrt.SamplingParams(max_tokens=24, stop=stop,
                                                   include_stop_str_in_output=True,
                                                   **GREEDY))[0].outputs[0]
    assert kept.finish_reason == "stop"
    assert kept.text == whole.text[:whole.text.find(stop) + len(stop)]
    assert kept.token_ids == cut.token_ids


def test_seeded_sampling_repeats_and_differs_by_seed(llm, reference):
    ids = reference["prompts"][2]["ids"]

    def sample(seed):
        params = dsrt.SamplingParams(max_tokens=16, temperature=1.0, seed=seed,
                                     ignore_eos=True)
        return llm.generate([ids], params)[0].outputs[0].token_ids

    assert sample(7) == sample(7)
    assert any(sample(7) != sample(seed) for seed in (8, 9, 10))


def test_an_llm_seed_makes_unseeded_requests_repeat(plan, reference):
    # vLLM's LLM(seed=): a script run again samples the same outputs; another seed others.
    ids = [p["ids"] for p in reference["prompts"]]
    params = dsrt.SamplingParams(max_tokens=12, temperature=1.0, ignore_eos=True, n=2)

    def run(seed):
        with dsrt.LLM(plan, seed=seed) as engine:
            return [[o.token_ids for o in r.outputs] for r in engine.generate(ids, params)]

    first = run(7)
    assert run(7) == first
    assert run(8) != first


def test_n_outputs_sample_from_consecutive_seeds(llm, reference):
    ids = reference["prompts"][2]["ids"]
    params = dict(max_tokens=8, temperature=1.0, ignore_eos=True)
    many = llm.generate([ids], dsrt.SamplingParams(n=3, seed=7, **params))[0]
    assert [o.index for o in many.outputs] == [0, 1, 2] and many.finished
    for j, output in enumerate(many.outputs):
        alone = llm.generate([ids], dsrt.SamplingParams(seed=7 + j, **params))[0].outputs[0]
        assert output.token_ids == alone.token_ids


def penalised_argmax(logits, prompt, output, repetition, presence, frequency):
    """vLLM's rule, written here: the repetition penalty over the prompt's and the output's
    tokens, then presence and frequency over the output's."""
    logits = np.array(logits, dtype=np.float64)
    for token in set(prompt) | set(output):
        logits[token] = logits[token] / repetition if logits[token] > 0 else \
            logits[token] * repetition
    for token in set(output):
        logits[token] -= presence + frequency * output.count(token)
    return int(np.argmax(logits))


def test_penalised_greedy_is_the_argmax_of_penalised_logits(llm, plan):
    """Each greedy token under the penalties is the argmax of the prefill program's logits
    for the prompt and the tokens before it, penalised as vLLM does (computed here); the
    penalties must change at least one choice, or the test proves nothing."""
    prompt = [5, 6, 7, 5, 6, 7, 5]
    settings = dict(repetition_penalty=1.8, presence_penalty=1.5, frequency_penalty=1.0)
    out = llm.generate([prompt], dsrt.SamplingParams(max_tokens=8, temperature=0,
                                                     ignore_eos=True, **settings))[0]
    session = dsrt.Session(plan)
    changed = False
    for i, token in enumerate(out.outputs[0].token_ids):
        ids = np.array([prompt + out.outputs[0].token_ids[:i]], dtype=np.int64)
        logits = session.run("prefill", {
            "input_ids": ids, "attention_mask": np.ones_like(ids),
            "position_ids": np.arange(ids.shape[1], dtype=np.int64)[None, :]})["logits"][0, -1]
        want = penalised_argmax(logits, prompt, out.outputs[0].token_ids[:i],
                                settings["repetition_penalty"], settings["presence_penalty"],
                                settings["frequency_penalty"])
        assert token == want, f"token {i}"
        changed |= want != int(np.argmax(logits))
    assert changed


def test_logit_bias_bans_and_forces_tokens(llm, reference):
    ids = reference["prompts"][0]["ids"]
    plain = llm.generate([ids], dsrt.SamplingParams(max_tokens=4, **GREEDY))[0].outputs[0]
    first = plain.token_ids[0]
    banned = llm.generate([ids], dsrt.SamplingParams(max_tokens=4, logit_bias={first: -100},
                                                     **GREEDY))[0].outputs[0]
    assert first not in banned.token_ids
    forced = llm.generate([ids], dsrt.SamplingParams(max_tokens=4, logit_bias={17: 100},
                                                     temperature=1.0, seed=3,
                                                     ignore_eos=True))[0].outputs[0]
    assert forced.token_ids == [17] * 4
    with pytest.raises(dsrt.Error, match="logit_bias"):
        llm.generate([ids], dsrt.SamplingParams(logit_bias={17: 101}))
    with pytest.raises(dsrt.Error, match="logit_bias"):
        llm.generate([ids], dsrt.SamplingParams(logit_bias={10 ** 6: 1}))


def test_min_tokens_holds_back_eos_and_stop_tokens(llm, reference):
    """vLLM's min_tokens: a stop token that greedy would draw first cannot end the output
    before min_tokens; until then the draw is the argmax of the others (what banning it by
    logit_bias gives)."""
    ids = reference["prompts"][0]["ids"]
    first = llm.generate([ids], dsrt.SamplingParams(max_tokens=1, **GREEDY),
                         use_tqdm=False)[0].outputs[0].token_ids[0]
    stopped = llm.generate([ids], dsrt.SamplingParams(max_tokens=6, stop_token_ids=[first],
                                                      **GREEDY))[0].outputs[0]
    assert stopped.token_ids == [first] and stopped.finish_reason == "stop"
    held = llm.generate([ids], dsrt.SamplingParams(max_tokens=6, stop_token_ids=[first],
                                                   min_tokens=3, **GREEDY))[0].outputs[0]
    banned = llm.generate([ids], dsrt.SamplingParams(max_tokens=3, logit_bias={first: -100},
                                                     **GREEDY))[0].outputs[0]
    assert len(held.token_ids) >= 3 and first not in held.token_ids[:3]
    assert held.token_ids[:3] == banned.token_ids
    with pytest.raises(dsrt.Error, match="min_tokens"):
        llm.generate([ids], dsrt.SamplingParams(max_tokens=2, min_tokens=5))


def test_the_stop_token_is_in_the_token_ids_but_not_the_text(llm, reference):
    """vLLM's detokenizer leaves out the token that ended the request (EOS or a stop token
    id) unless include_stop_str_in_output, special or not: an EOS such as "</s>" read as
    text, or a plain token as here, would otherwise end every output's text."""
    ids = reference["prompts"][0]["ids"]
    free = llm.generate([ids], dsrt.SamplingParams(max_tokens=4, **GREEDY),
                        use_tqdm=False)[0].outputs[0]
    stop = free.token_ids[2]
    tokenizer = llm.get_tokenizer()
    assert tokenizer.decode(free.token_ids[:3]) != tokenizer.decode(free.token_ids[:2])
    for keep in (False, True):
        for skip in (True, False):
            out = llm.generate([ids], dsrt.SamplingParams(
                max_tokens=6, stop_token_ids=[stop], skip_special_tokens=skip,
                include_stop_str_in_output=keep, **GREEDY), use_tqdm=False)[0].outputs[0]
            assert out.token_ids == free.token_ids[:3] and out.finish_reason == "stop"
            assert out.text == tokenizer.decode(free.token_ids[:3 if keep else 2]), (keep, skip)


def test_truncate_prompt_tokens_keeps_the_prompts_last_tokens(llm, reference):
    """vLLM's truncate_prompt_tokens: the request is the prompt's last k tokens, as if only
    they had been given (the first k would give other tokens), through generate, stream
    and chat; -1 keeps the context's length, and values vLLM refuses are refused by name."""
    ids = reference["prompts"][0]["ids"]
    assert len(ids) >= 4
    keep = len(ids) // 2
    sliced = llm.generate([ids[-keep:]], dsrt.SamplingParams(max_tokens=5, **GREEDY))[0]
    head = llm.generate([ids[:keep]], dsrt.SamplingParams(max_tokens=5, **GREEDY))[0]
    assert sliced.outputs[0].token_ids != head.outputs[0].token_ids
    cut = llm.generate([ids], dsrt.SamplingParams(max_tokens=5, truncate_prompt_tokens=keep,
                                                  **GREEDY))[0]
    assert cut.prompt_token_ids == ids[-keep:]
    assert cut.outputs[0].token_ids == sliced.outputs[0].token_ids
    streamed = "".join(llm.stream(ids, dsrt.SamplingParams(
        max_tokens=5, truncate_prompt_tokens=keep, **GREEDY)))
    assert streamed == sliced.outputs[0].text
    whole = llm.generate([ids], dsrt.SamplingParams(max_tokens=5, truncate_prompt_tokens=-1,
                                                    **GREEDY))[0]
    assert whole.prompt_token_ids == ids
    for bad in (0, -2, llm.max_seq_len + 1):
        with pytest.raises(dsrt.Error, match="truncate_prompt_tokens"):
            llm.generate([ids], dsrt.SamplingParams(truncate_prompt_tokens=bad))


def prefix_logprobs(plan, prompt):
    """log_softmax of the prefill program's last logits for each prefix of `prompt`: entry p
    is token p + 1's distribution given tokens 0..p (computed here, one prefill per prefix)."""
    session = dsrt.Session(plan)
    rows = []
    for p in range(len(prompt) - 1):
        ids = np.array([prompt[:p + 1]], dtype=np.int64)
        logits = session.run("prefill", {
            "input_ids": ids, "attention_mask": np.ones_like(ids),
            "position_ids": np.arange(ids.shape[1], dtype=np.int64)[None, :]})["logits"][0, -1]
        rows.append(log_softmax(list(map(float, logits))))
    return rows


def test_prompt_logprobs_are_each_prefixs_log_softmax(llm, plan):
    """A 20-token prompt, in chunks of the plan's 8 tokens per step, after the same prompt
    was served (its blocks are cached: a request that wants prompt log-probabilities must
    still compute every position). fp32 on both sides: 1e-4."""
    prompt = [(7 * i + 3) % 50 + 1 for i in range(20)]
    llm.generate([prompt], dsrt.SamplingParams(max_tokens=1, **GREEDY))
    out = llm.generate([prompt], dsrt.SamplingParams(max_tokens=2, prompt_logprobs=3,
                                                     **GREEDY))[0]
    expected = prefix_logprobs(plan, prompt)
    assert out.prompt_logprobs[0] is None and len(out.prompt_logprobs) == len(prompt)
    for p, entry in enumerate(out.prompt_logprobs[1:]):
        assert entry.token_id == prompt[p + 1]
        assert entry.logprob == pytest.approx(expected[p][prompt[p + 1]], abs=1e-4)
        likeliest = sorted(range(len(expected[p])), key=lambda i: -expected[p][i])[:3]
        assert [t for t, _ in entry.top] == likeliest
    with pytest.raises(dsrt.Error, match="prompt_logprobs"):
        llm.generate([prompt], dsrt.SamplingParams(prompt_logprobs=21))


def test_chat_renders_the_plans_template(llm, model_dir):
    messages = [{"role": "system", "content": "Be"}, {"role": "user", "content": "hé"}]
    config = json.loads((model_dir / "tokenizer_config.json").read_text())
    template = ChatTemplate(config["chat_template"], {"bos_token": "<s>", "eos_token":
                                                      "<|endoftext|>", "unk_token": "<unk>"})
    text = llm.apply_chat_template(messages)
    assert text.startswith("<|system|>\nBe<|end|>\n<|user|>\nhé<|end|>\n")
    assert text.endswith("<|assistant|>\n")
    assert text == template.render(messages, add_generation_prompt=True)
    params = dsrt.SamplingParams(max_tokens=6, **GREEDY)
    chat = llm.chat(messages, params)[0]
    direct = llm.generate([llm.tokenizer.encode(text, add_special_tokens=False)], params)[0]
    assert chat.prompt_token_ids == direct.prompt_token_ids
    assert chat.outputs[0].token_ids == direct.outputs[0].token_ids


def test_chat_takes_vllms_template_arguments(llm):
    # chat_template= replaces the plan's; chat_template_kwargs= are the template's
    # variables (both had been passed on as variables named so, and ignored).
    messages = [{"role": "user", "content": "hi"}]
    own = "{% for m in messages %}[{{ m.role }}:{{ m.content }}]{% endfor %}{{ suffix }}"
    text = llm.apply_chat_template(messages, chat_template=own,
                                   chat_template_kwargs={"suffix": "!"})
    assert text == "[user:hi]!"
    params = dsrt.SamplingParams(max_tokens=2, **GREEDY)
    chat = llm.chat(messages, params, chat_template=own, chat_template_kwargs={"suffix": "!"})
    assert chat[0].prompt_token_ids == llm.tokenizer.encode("[user:hi]!",
                                                            add_special_tokens=False)
    # One message instead of a list of them: a ValueError that says what to give (it had
    # been a KeyError).
    for wrong in ({"role": "user", "content": "hi"}, "hi", None):
        with pytest.raises(ValueError, match="messages must be a list"):
            llm.chat(wrong, params)


@pytest.mark.parametrize("option, value", [
    ("block_size", 1.5), ("block_size", 2 ** 40), ("kv_cache_bytes", -1),
    ("kv_cache_bytes", 2 ** 64), ("max_tokens_per_step", 2 ** 40),
    ("kv_cache_memory_fraction", "half"), ("prefix_caching", "yes")])
def test_engine_options_of_the_wrong_type_are_refused_by_name(plan, option, value):
    # They had reached the native constructor, whose TypeError names no option.
    with pytest.raises(dsrt.Error, match=f"{option} must be"):
        dsrt.LLM(plan, **{option: value})


def test_refusals_are_dsrt_errors(llm):
    with pytest.raises(dsrt.Error, match="maximum sequence length 64"):
        llm.generate([[1] * 60], dsrt.SamplingParams(max_tokens=10))
    with pytest.raises(dsrt.Error, match="vocabulary"):
        llm.generate([[10**6]], dsrt.SamplingParams(max_tokens=1))
    with pytest.raises(dsrt.Error, match=r"n must be an integer in \[1, 4096\]"):
        llm.generate(["x"], dsrt.SamplingParams(n=0))
    # Refused before any copy is made: 2**63 copies had taken all of the memory.
    with pytest.raises(dsrt.Error, match="n must be an integer"):
        llm.generate(["x"], dsrt.SamplingParams(n=2 ** 63))
    with pytest.raises(dsrt.Error, match="top_k must be within"):
        llm.generate(["x"], dsrt.SamplingParams(top_k=2 ** 31))
    # Types are checked before the request is queued (a skip_special_tokens of None had
    # failed later, on the thread that routes every request's tokens).
    for wrong in ({"skip_special_tokens": None}, {"logit_bias": [1, -1]}, {"top_k": 1.5},
                  {"stop": [3]}, {"temperature": "hot"}, {"stop_token_ids": [None]}):
        with pytest.raises(dsrt.Error, match=f"SamplingParams.{next(iter(wrong))} must be"):
            llm.generate(["x"], dsrt.SamplingParams(**wrong))
    with pytest.raises(dsrt.Error, match="frequency_penalty"):
        llm.generate(["x"], dsrt.SamplingParams(frequency_penalty=2.5))
    with pytest.raises(dsrt.Error, match="repetition_penalty"):
        llm.generate(["x"], dsrt.SamplingParams(repetition_penalty=0))
    with pytest.raises(dsrt.Error, match="no chat template 'tool_use'"):
        llm.chat_template("tool_use")
    # The engine serves on after refusals.
    assert llm.generate(["x"], dsrt.SamplingParams(max_tokens=2, **GREEDY))[0].outputs[0].token_ids


def test_a_request_whose_tokens_cannot_be_routed_fails_alone(llm, reference):
    # Past SamplingParams' checks (the engine loop's own RequestParams): the router cannot
    # make the request's text, cancels it and finishes it as "abort", and keeps routing the
    # others' tokens (an exception there had stopped every request of the process).
    from dsrt.engine import RequestParams
    import queue
    updates = queue.Queue()
    llm._loop.submit(reference["prompts"][0]["ids"],
                     RequestParams(max_tokens=4, temperature=0, ignore_eos=True,
                                   skip_special_tokens=None), updates.put)
    last = updates.get(timeout=30)
    while last.finish_reason is None:
        last = updates.get(timeout=30)
    assert last.finish_reason == "abort"
    prompt = reference["prompts"][0]
    n = reference["max_new_tokens"]
    assert llm.generate([prompt["ids"]], dsrt.SamplingParams(max_tokens=n, **GREEDY))[0] \
        .outputs[0].token_ids == prompt["generated"]


def test_tokenizer_round_trip(plan):
    tokenizer = dsrt.Tokenizer(plan)
    text = "Hello, wörld!"
    assert tokenizer.decode(tokenizer.encode(text)) == text


def test_session_prefill_matches_transformers_logits(plan, reference):
    session = dsrt.Session(plan)
    prompt = reference["prompts"][0]
    ids = np.array([prompt["ids"]], dtype=np.int64)
    outputs = session.run("prefill", {
        "input_ids": ids, "attention_mask": np.ones_like(ids),
        "position_ids": np.arange(ids.shape[1], dtype=np.int64)[None, :]})
    last = outputs["logits"][0, -1]
    np.testing.assert_allclose(last, prompt["prefill_last_logits"], atol=1e-4, rtol=1e-4)
    with pytest.raises(dsrt.Error, match="missing"):
        session.run("prefill", {"input_ids": ids})


def test_compile_failure_is_a_dsrt_error(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    with pytest.raises(dsrt.Error, match="dsc compile failed"):
        dsrt.compile(str(bad), str(tmp_path / "bad.dsp"))
    assert not (tmp_path / "bad.dsp").exists()


def test_type_stubs_are_the_modules(tmp_path):
    # dsrt/_dsrt.pyi is nanobind's stubgen output; regenerate it when the module changes:
    #   python -m nanobind.stubgen -m dsrt._dsrt -o python/dsrt/_dsrt.pyi
    import pathlib
    import subprocess
    import sys
    out = tmp_path / "_dsrt.pyi"
    subprocess.run([sys.executable, "-m", "nanobind.stubgen", "-q", "-m", "dsrt._dsrt", "-o",
                    str(out)], check=True)
    committed = pathlib.Path(__file__).parents[1] / "dsrt" / "_dsrt.pyi"
    assert out.read_text() == committed.read_text()


def test_plan_without_tokenizer_takes_token_ids(plan_without_tokenizer):
    with dsrt.LLM(plan_without_tokenizer) as llm:
        out = llm.generate([[1, 2, 3]], dsrt.SamplingParams(max_tokens=4, **GREEDY))[0]
        assert len(out.outputs[0].token_ids) == 4 and out.outputs[0].text == ""
        with pytest.raises(dsrt.Error, match="no tokenizer.*token ids"):
            llm.generate(["text"], dsrt.SamplingParams(max_tokens=1))


def test_an_onnx_model_is_compiled_once_and_served(model_dir, reference, tmp_path, monkeypatch):
    # LLM("model.onnx") as vLLM's LLM("folder"): a serving plan compiled with the model's
    # defaults (the fixture's 64 positions), kept in the cache and reused.
    monkeypatch.setenv("DSRT_CACHE_DIR", str(tmp_path / "cache"))
    prompt = reference["prompts"][0]
    params = dsrt.SamplingParams(max_tokens=reference["max_new_tokens"], **GREEDY)
    with dsrt.LLM(str(model_dir / "model.onnx")) as llm:
        assert llm.max_seq_len == 64
        assert llm.generate([prompt["ids"]], params)[0].outputs[0].token_ids == \
            prompt["generated"]
    plans = sorted((tmp_path / "cache").glob("*.dsp"))
    assert len(plans) == 1 and dsrt.compiler.is_plan(str(plans[0]))
    made = plans[0].stat().st_mtime_ns
    with dsrt.LLM(str(model_dir)) as by_folder:  # another key: the folder, compiled anew
        assert by_folder.generate([prompt["ids"]], params)[0].outputs[0].token_ids == \
            prompt["generated"]
    with dsrt.LLM(str(model_dir / "model.onnx")):
        pass
    plans = sorted((tmp_path / "cache").glob("*.dsp"))
    assert len(plans) == 2
    assert plans[0].stat().st_mtime_ns == made or plans[1].stat().st_mtime_ns == made


def test_compile_options_given_with_a_plan_are_refused(plan, tmp_path):
    with pytest.raises(dsrt.Error, match="dtype 'int8' chooses how a model is compiled"):
        dsrt.LLM(plan, dtype="int8")
    with pytest.raises(dsrt.Error, match="tp 2, but .* is a plan of 1 rank"):
        dsrt.LLM(plan, tensor_parallel_size=2)
    with pytest.raises(dsrt.Error, match="max_seq_len 65 must be between 1 and .*'s 64"):
        dsrt.LLM(plan, max_model_len=65)
    with pytest.raises(dsrt.Error, match="no such plan, ONNX model or model folder"):
        dsrt.LLM(str(tmp_path / "missing.onnx"))
    corrupt = tmp_path / "corrupt.dsp"
    corrupt.write_bytes(b"not a plan at all")
    with pytest.raises(dsrt.Error, match="DSRT_CORRUPT_PLAN"):
        dsrt.LLM(str(corrupt))


def test_a_plan_without_a_step_program_is_served_with_a_warning(model_dir, tmp_path, capsys,
                                                                reference):
    # Compiled without --serving, the engine steps over the decode program's max_batch rows:
    # it works, slowly, and says so.
    static = dsrt.compile(str(model_dir / "model.onnx"), str(tmp_path / "static.dsp"),
                          max_batch=2)
    prompt = reference["prompts"][0]
    with dsrt.LLM(static) as llm:
        assert "has no step program (compiled without --serving)" in capsys.readouterr().err
        params = dsrt.SamplingParams(max_tokens=reference["max_new_tokens"], **GREEDY)
        assert llm.generate([prompt["ids"]], params)[0].outputs[0].token_ids == \
            prompt["generated"]
    with dsrt.LLM(dsrt.compile(str(model_dir / "model.onnx"), str(tmp_path / "serve.dsp"),
                               serving=True)):
        assert "step program" not in capsys.readouterr().err


def test_reset_prefix_cache_forgets_computed_blocks(plan, reference):
    # A prompt of 2 full blocks (block size 4) and one token more, twice: the second hits
    # both blocks; after reset_prefix_cache the third hits nothing, and every run is greedy.
    with dsrt.LLM(plan, block_size=4) as llm:
        prompt = (reference["prompts"][0]["ids"] * 9)[:9]
        params = dsrt.SamplingParams(max_tokens=3, **GREEDY)
        hits = lambda: llm._loop.stats()["prefix_hits"]
        result = llm.generate([prompt], params)[0]
        first = result.outputs[0].token_ids
        assert result.num_cached_tokens == 0
        before = hits()
        result = llm.generate([prompt], params)[0]
        assert result.outputs[0].token_ids == first
        assert hits() == before + 2
        # vLLM's num_cached_tokens: the two hit blocks' tokens.
        assert result.num_cached_tokens == 8
        llm.reset_prefix_cache()
        result = llm.generate([prompt], params)[0]
        assert result.outputs[0].token_ids == first
        assert hits() == before + 2
        assert result.num_cached_tokens == 0


def test_cached_tokens_come_with_a_request_a_stop_string_ends(plan, reference):
    # A request that a stop string ends is cancelled after its first token, and gets no
    # finish from the engine: its cached tokens must have come with that token.
    with dsrt.LLM(plan, block_size=4) as llm:
        prompt = (reference["prompts"][0]["ids"] * 9)[:9]
        greedy = llm.generate([prompt], dsrt.SamplingParams(max_tokens=4, **GREEDY))[0]
        stop = llm.tokenizer.decode(greedy.outputs[0].token_ids[:1])
        assert stop.strip(), "the first greedy token must be text for this test"
        result = llm.generate([prompt], dsrt.SamplingParams(max_tokens=4, stop=[stop],
                                                            **GREEDY))[0]
        assert result.outputs[0].finish_reason == "stop"
        assert result.num_cached_tokens == 8


def test_vllm_options_that_agree_with_a_plan_are_taken(plan, reference):
    """vLLM scripts pass tensor_parallel_size=1 and a max_model_len: with a plan of one rank
    they run, and max_model_len below the plan's positions caps every request."""
    prompt = reference["prompts"][0]
    with dsrt.LLM(plan, tensor_parallel_size=1, max_model_len=24) as llm:
        assert llm.max_seq_len == 24
        whole = llm.generate([prompt["ids"]], dsrt.SamplingParams(max_tokens=None, **GREEDY))
        assert len(prompt["ids"]) + len(whole[0].outputs[0].token_ids) == 24
        assert whole[0].outputs[0].token_ids == \
            prompt["generated"][:24 - len(prompt["ids"])]
        with pytest.raises(dsrt.Error, match="exceeds the maximum sequence length 24"):
            llm.generate([prompt["ids"]], dsrt.SamplingParams(
                max_tokens=25 - len(prompt["ids"])))


def test_speculative_decoding_gives_transformers_greedy_tokens(plan, reference):
    """Prompt lookup drafts (vLLM's speculative_config, "ngram"): the greedy tokens stay
    transformers', the model confirmed some drafts, and a seeded sampled request, which
    drafts too, draws what it draws without them."""
    config = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3}
    greedy = dsrt.SamplingParams(max_tokens=reference["max_new_tokens"], **GREEDY)
    # Sampled at 0.2: most draws are not the greedy token, and some repeat enough to confirm
    # drafts, which must leave the request's random stream where it is without them.
    sampled = dsrt.SamplingParams(max_tokens=40, temperature=0.2, seed=0, ignore_eos=True)
    prompts = [p["ids"] for p in reference["prompts"]]
    with dsrt.LLM(plan, speculative_config=config) as llm:
        together = llm.generate(prompts, greedy)
        alone = [llm.generate(p, greedy)[0] for p in prompts]
        stats = llm._loop.stats()
        drawn = llm.generate(prompts[0], sampled)[0].outputs[0].token_ids
        assert llm._loop.stats()["accepted_draft_tokens"] > stats["accepted_draft_tokens"]
    for outputs in (together, alone):
        for output, expected in zip(outputs, reference["prompts"]):
            assert output.outputs[0].token_ids == expected["generated"]
    assert 0 < stats["accepted_draft_tokens"] <= stats["draft_tokens"]
    # Every emitted token, a confirmed draft's too, has its log-probability, the one it has
    # without drafts within 1e-4 (a draft's row is computed in a chunk of rows, which an f32
    # plan's kernels sum in another order: docs/serving.md, "Batch invariance").
    with dsrt.LLM(plan, speculative_config=config) as llm:
        first = reference["prompts"][0]
        output = llm.generate(first["ids"], dsrt.SamplingParams(
            max_tokens=reference["max_new_tokens"], logprobs=2, **GREEDY))[0].outputs[0]
        assert llm._loop.stats()["accepted_draft_tokens"] > 0
    assert [e.token_id for e in output.logprobs] == first["generated"]
    with dsrt.LLM(plan) as plain:
        expected = plain.generate(first["ids"], dsrt.SamplingParams(
            max_tokens=reference["max_new_tokens"], logprobs=2, **GREEDY))[0].outputs[0]
    for got, want in zip(output.logprobs, expected.logprobs):
        assert abs(got.logprob - want.logprob) <= 1e-4
        assert [t for t, _ in got.top] == [t for t, _ in want.top]
    with dsrt.LLM(plan) as plain:
        assert plain.generate(prompts[0], sampled)[0].outputs[0].token_ids == drawn
        greedy40 = plain.generate(prompts[0], dsrt.SamplingParams(max_tokens=40, **GREEDY))
        assert greedy40[0].outputs[0].token_ids != drawn


def test_speculative_configs_dsrt_cannot_serve_are_refused(plan):
    for config, message in (
            ({"method": "eagle", "num_speculative_tokens": 2}, "prompt lookup only"),
            ({"num_speculative_tokens": 2, "model": "draft"}, "not \\['model'\\]"),
            ({"method": "ngram"}, "needs num_speculative_tokens"),
            ({"num_speculative_tokens": 17}, "speculative_tokens must be between 0 .* 16"),
            ({"num_speculative_tokens": 2, "prompt_lookup_min": 3, "prompt_lookup_max": 2},
             "prompt_lookup_min and prompt_lookup_max must satisfy"),
            ({"num_speculative_tokens": 2.5}, "speculative_tokens must be an integer"),
            ({"num_speculative_tokens": 2, "disable_by_batch_size": 0},
             "speculative_max_batch must be at least 1")):
        with pytest.raises(dsrt.Error, match=message):
            dsrt.LLM(plan, speculative_config=config)


@pytest.mark.parametrize("options", [
    {"repetition_penalty": 1.05}, {"frequency_penalty": 0.1}, {"logit_bias": "second"},
    {"presence_penalty": 0.2, "temperature": 0.2, "seed": 1}, {"min_tokens": "fourth"},
    {"repetition_penalty": 1.02, "temperature": 0.2, "seed": 4, "logprobs": 2}])
def test_speculative_decoding_keeps_penalties_and_min_tokens(plan, reference, options):
    """A draft's row draws after the penalties and min_tokens of the tokens before it in the
    step, so a request with them confirms drafts and keeps the tokens it has without."""
    greedy = reference["prompts"][0]["generated"]
    if options.get("logit_bias") == "second":  # a bias that changes what is drawn
        options = {"logit_bias": {greedy[1]: 4.0}}
    if options.get("min_tokens") == "fourth":  # a stop token held back for 20 tokens
        options = {"min_tokens": 20, "stop_token_ids": [greedy[3]]}
    params = dsrt.SamplingParams(**{"max_tokens": 40, "temperature": 0, "ignore_eos": True,
                                    **options})
    prompt = reference["prompts"][0]["ids"]
    with dsrt.LLM(plan, speculative_config={"num_speculative_tokens": 4}) as llm:
        drafted = llm.generate(prompt, params)[0].outputs[0]
        assert llm._loop.stats()["accepted_draft_tokens"] > 0
    with dsrt.LLM(plan) as plain:
        expected = plain.generate(prompt, params)[0].outputs[0]
    assert drafted.token_ids == expected.token_ids


