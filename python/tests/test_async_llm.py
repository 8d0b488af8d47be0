"""dsrt.AsyncLLM against transformers' greedy tokens on the fixture (generation.json) and
against LLM.generate: concurrent generate calls, the three output kinds, abort, and a caller
that leaves early."""
import asyncio
import time

import pytest

import dsrt
from dsrt import RequestOutputKind

GREEDY = dict(temperature=0, ignore_eos=True)


@pytest.fixture(scope="module")
def engine(plan):
    with dsrt.AsyncLLM(plan) as engine:
        yield engine


@pytest.fixture(scope="module")
def long_engine(long_plan):
    """Requests of thousands of tokens, which run for seconds: abort and leaving early meet
    them running."""
    with dsrt.AsyncLLM(long_plan) as engine:
        yield engine


def run(coroutine, seconds=60):
    """asyncio.run with a bound: a request that never finishes fails the test."""
    return asyncio.run(asyncio.wait_for(coroutine, seconds))


async def collect(engine, prompt, params, request_id=None) -> list:
    return [output async for output in engine.generate(prompt, params, request_id)]


def assert_same_outputs(got, expected):
    """Tokens, text and finish exactly; log-probabilities within 1e-5. Requests computed in
    different steps of an f32 plan may differ in the last bits of their logits: its few-row
    dot kernels and sgemm order their f32 sums differently (docs/serving.md, "Batch
    invariance"), which the tokens, not the bits, are checked against."""
    assert len(got) == len(expected)
    for a, b in zip(got, expected):
        assert (a.index, a.token_ids, a.text, a.finish_reason) == \
            (b.index, b.token_ids, b.text, b.finish_reason)
        assert (a.logprobs is None) == (b.logprobs is None)
        for x, y in zip(a.logprobs or [], b.logprobs or []):
            assert x.token_id == y.token_id and abs(x.logprob - y.logprob) <= 1e-5
            assert [t for t, _ in x.top] == [t for t, _ in y.top]


def wait_idle(engine, seconds=30.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        stats = engine._llm._loop.stats()
        if stats["running"] == 0 and stats["waiting"] == 0:
            return True
        time.sleep(0.02)
    return False


def test_concurrent_generates_are_transformers_greedy(engine, reference):
    params = dsrt.SamplingParams(max_tokens=reference["max_new_tokens"], **GREEDY)

    async def main():
        return await asyncio.gather(*(collect(engine, p["ids"], params)
                                      for p in reference["prompts"]))
    streams = run(main())
    for outputs, expected in zip(streams, reference["prompts"]):
        # Cumulative: each output extends the one before, and only the last is finished.
        for before, after in zip(outputs, outputs[1:]):
            assert after.outputs[0].token_ids[:len(before.outputs[0].token_ids)] == \
                before.outputs[0].token_ids
            assert not before.finished
        last = outputs[-1]
        assert last.finished and last.outputs[0].finish_reason == "length"
        assert last.prompt_token_ids == expected["ids"]
        assert last.outputs[0].token_ids == expected["generated"]
        assert last.outputs[0].text == engine.tokenizer.decode(expected["generated"])
    assert len({s[-1].request_id for s in streams}) == len(streams)


def test_delta_pieces_make_the_final_output(engine, llm, reference):
    prompt = reference["prompts"][0]["ids"]
    kinds = {kind: dsrt.SamplingParams(max_tokens=12, temperature=0.9, seed=7, n=2,
                                       logprobs=2, ignore_eos=True, output_kind=kind)
             for kind in RequestOutputKind}

    async def main():
        return await asyncio.gather(*(collect(engine, prompt, p) for p in kinds.values()))
    cumulative, delta, final = run(main())
    assert len(final) == 1 and final[0].finished
    assert_same_outputs(cumulative[-1].outputs, final[0].outputs)
    texts, ids, logprobs, finish = ["", ""], [[], []], [[], []], [None, None]
    for output in delta:
        assert len(output.outputs) == 1
        piece = output.outputs[0]
        assert finish[piece.index] is None  # nothing after an output's finish
        texts[piece.index] += piece.text
        ids[piece.index] += piece.token_ids
        logprobs[piece.index] += piece.logprobs
        finish[piece.index] = piece.finish_reason
    assert_same_outputs([dsrt.CompletionOutput(j, texts[j], ids[j], finish[j], logprobs[j])
                         for j in range(2)], final[0].outputs)
    assert delta[-1].finished and not delta[0].finished
    # The same seeds give LLM.generate the same outputs, and the two outputs differ.
    assert_same_outputs(llm.generate(prompt, kinds[RequestOutputKind.FINAL_ONLY])[0].outputs,
                        final[0].outputs)
    assert final[0].outputs[0].token_ids != final[0].outputs[1].token_ids


def test_abort_ends_a_request_and_the_others_run_on(long_engine):
    greedy = dsrt.SamplingParams(max_tokens=12, **GREEDY)
    alone = run(collect(long_engine, [5, 6, 7, 8], greedy))[-1]

    async def main():
        long = long_engine.generate([1, 2, 3] * 10, dsrt.SamplingParams(
            max_tokens=7000, **GREEDY), request_id="long")
        first = await long.__anext__()
        beside = asyncio.create_task(collect(long_engine, [5, 6, 7, 8], greedy))
        await long_engine.abort("long")
        rest = [output async for output in long]
        return first, rest, await beside
    first, rest, beside = run(main())
    assert not first.finished
    last = (rest or [first])[-1]
    assert last.finished and last.outputs[0].finish_reason == "abort"
    assert len(last.outputs[0].token_ids) < 7000
    assert_same_outputs(beside[-1].outputs, alone.outputs)
    assert wait_idle(long_engine)
    # The id is free again once its request has ended.
    assert run(collect(long_engine, [4, 5], greedy, "long"))[-1].finished


def test_leaving_early_cancels_the_request(long_engine):
    """Within a loop that goes on: a loop that closes ends its requests anyway."""
    stats = long_engine._llm._loop.stats
    before = stats()["generated_tokens"]

    async def main():
        async for output in long_engine.generate([9, 8, 7] * 5, dsrt.SamplingParams(
                max_tokens=7000, **GREEDY)):
            break
        while stats()["running"] or stats()["waiting"]:
            await asyncio.sleep(0.01)
        return output
    first = run(main())
    assert not first.finished
    # Without the cancel the request would have run to its 7000 tokens.
    assert stats()["generated_tokens"] - before < 7000


def test_refusals(long_engine):
    async def twice():
        running = long_engine.generate([1, 2, 3], dsrt.SamplingParams(max_tokens=7000),
                                       request_id="same")
        await running.__anext__()
        try:
            with pytest.raises(ValueError, match="already running"):
                await collect(long_engine, [1, 2], dsrt.SamplingParams(), "same")
        finally:
            await running.aclose()
    run(twice())
    with pytest.raises(dsrt.Error, match="exceeds the maximum sequence length 8192"):
        run(collect(long_engine, [1] * 9000, dsrt.SamplingParams(max_tokens=1)))
    with pytest.raises(dsrt.Error, match="output_kind"):
        run(collect(long_engine, [1, 2], dsrt.SamplingParams(output_kind="delta")))
    assert wait_idle(long_engine)


def test_structured_outputs_from_asyncio(engine):
    # The same SamplingParams as LLM's: each concurrent request follows its own grammar.
    pytest.importorskip("llguidance")
    choices = {"a": ["yes", "no"], "b": ["left", "right", "up"]}

    async def one(name):
        params = dsrt.SamplingParams(max_tokens=8, temperature=1.0, seed=len(name),
                                     structured_outputs=dsrt.StructuredOutputsParams(
                                         choice=choices[name]))
        final = None
        async for output in engine.generate("Hello", params, request_id=name):
            final = output
        return final.outputs[0]

    async def both():
        return await asyncio.gather(one("a"), one("b"))
    first, second = asyncio.run(both())
    assert first.text in choices["a"] and first.finish_reason == "stop"
    assert second.text in choices["b"] and second.finish_reason == "stop"


def test_priority_scheduling_serves_lower_values_first(long_plan):
    """vLLM's scheduling_policy="priority": with one sequence at a time, requests queued
    behind a running one are served by priority (lower first), not by arrival, and each
    still gives its greedy tokens; under "fcfs" a priority other than 0 is refused."""
    async def serve(engine, priorities):
        order = []

        async def one(name, prompt, max_tokens, priority):
            params = dsrt.SamplingParams(max_tokens=max_tokens, **GREEDY)
            outputs = [o async for o in engine.generate(prompt, params, priority=priority)]
            order.append(name)
            return outputs[-1].outputs[0].token_ids

        first = asyncio.ensure_future(one("first", [1, 2, 3], 256, 0))
        while engine._llm._loop.stats()["running"] == 0:  # it holds the only sequence
            await asyncio.sleep(0.001)
        queued = [asyncio.ensure_future(one(p, [4 + p, 5, 6], 4, p)) for p in priorities]
        results = await asyncio.gather(first, *queued)
        return order, results[1:]

    with dsrt.AsyncLLM(long_plan, max_num_seqs=1, scheduling_policy="priority") as engine:
        order, tokens = run(serve(engine, [2, 0, 1]))
        assert order == ["first", 0, 1, 2]
        alone = engine._llm.generate([[4 + p, 5, 6] for p in [2, 0, 1]],
                                     dsrt.SamplingParams(max_tokens=4, **GREEDY))
        assert tokens == [o.outputs[0].token_ids for o in alone]
    with dsrt.AsyncLLM(long_plan, max_num_seqs=1) as engine:
        with pytest.raises(dsrt.Error, match="priority scheduling is not enabled"):
            run(collect_priority(engine, 1))
    with pytest.raises(ValueError, match="scheduling_policy"):
        dsrt.AsyncLLM(long_plan, scheduling_policy="lifo")


async def collect_priority(engine, priority):
    return [o async for o in engine.generate([1, 2], dsrt.SamplingParams(max_tokens=2),
                                             priority=priority)]


