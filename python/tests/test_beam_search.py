"""vLLM's beam search over the serving engine (beam_search.py): LLM.beam_search against
static generation's transformers beam search, AsyncLLM.beam_search, and dsserve's
use_beam_search."""
import threading

import pytest
import requests

import dsrt
from test_async_llm import run


@pytest.fixture(scope="module")
def engine(plan):
    with dsrt.AsyncLLM(plan) as engine:
        yield engine


def test_beam_search_keeps_transformers_best_beam(model_dir, reference, tmp_path):
    """vLLM's LLM.beam_search over the engine. Without EOS every beam has the same length,
    so vLLM's scores rank as transformers' do, and the best beam is static generation's
    beam search (Session.generate, checked against transformers by beam-search.test) for
    2 and 4 beams and length penalties 1 and 0; the beams come best first by summed
    log-probability, each that many alternatives' sum; EOS finishes a beam."""
    plan = dsrt.compile(str(model_dir / "model.onnx"), str(tmp_path / "beams.dsp"),
                        max_tokens_per_step=8, max_batch=4, max_seq_len=64)
    session = dsrt.Session(plan)
    prompts = [p["ids"] for p in reference["prompts"][:2]]
    with dsrt.LLM(plan) as llm:
        for width, penalty in ((2, 1.0), (4, 1.0), (4, 0.0)):
            outputs = llm.beam_search(
                [{"prompt_token_ids": ids} for ids in prompts],
                dsrt.BeamSearchParams(beam_width=width, max_tokens=6, ignore_eos=True,
                                      length_penalty=penalty))
            for ids, output in zip(prompts, outputs):
                static = session.generate([ids], num_beams=width, max_new_tokens=6,
                                          length_penalty=penalty, ignore_eos=True,
                                          generation_config="none")[0]
                best = output.sequences[0]
                assert len(output.sequences) == width
                assert best.tokens == ids + static.token_ids, (width, penalty)
                assert best.text == llm.tokenizer.decode(best.tokens)
                sums = [s.cum_logprob for s in output.sequences]
                assert sums == sorted(sums, reverse=True)
                for sequence in output.sequences:
                    assert sequence.finish_reason == "length"
                    drawn = [alts[t] for alts, t in zip(sequence.logprobs,
                                                        sequence.tokens[len(ids):])]
                    assert sequence.cum_logprob == pytest.approx(sum(drawn), abs=1e-4)
        # With EOS: a beam that draws it is finished and kept if it scores among the best.
        eos = next(iter(llm._loop.eos_token_ids))
        biased = llm.beam_search([prompts[0]], dsrt.BeamSearchParams(beam_width=2,
                                                                     max_tokens=4))
        assert all(s.finish_reason in ("stop", "length") for s in biased[0].sequences)
        for s in biased[0].sequences:
            assert (s.finish_reason == "stop") == (s.tokens[-1] == eos)
        # A stopped search (its client gone) ends before its next step, sending nothing.
        from dsrt.beam_search import run_beam_search
        stop = threading.Event()
        stop.set()
        steps = llm._loop.stats()["steps"]
        with pytest.raises(dsrt.Error, match="stopped"):
            run_beam_search(llm._loop, [prompts[0]], dsrt.BeamSearchParams(2, 4),
                            llm.max_seq_len, stop)
        assert llm._loop.stats()["steps"] == steps
        for bad in (dsrt.BeamSearchParams(beam_width=11, max_tokens=2),
                    dsrt.BeamSearchParams(beam_width=2, max_tokens=0),
                    dsrt.BeamSearchParams(beam_width=2, max_tokens=64)):
            with pytest.raises(dsrt.Error):
                llm.beam_search([prompts[0]], bad)


def test_beam_search_yields_llm_beam_searchs_beams(engine, reference):
    """vLLM's AsyncLLM.beam_search: one finished RequestOutput whose outputs are
    LLM.beam_search's beams, best first: the generated tokens, their text and the beam's
    cumulative log-probability."""
    ids = reference["prompts"][0]["ids"]
    params = dsrt.BeamSearchParams(beam_width=3, max_tokens=5, ignore_eos=True)

    async def search():
        return [o async for o in engine.beam_search({"prompt_token_ids": ids}, "b", params)]
    outputs = run(search())
    assert len(outputs) == 1 and outputs[0].finished and outputs[0].request_id == "b"
    expected = engine._llm.beam_search([ids], params)[0].sequences
    assert [o.token_ids for o in outputs[0].outputs] == [b.tokens[len(ids):] for b in expected]
    for output, beam in zip(outputs[0].outputs, expected):
        assert output.text == engine.tokenizer.decode(beam.tokens[len(ids):])
        assert output.cumulative_logprob == pytest.approx(beam.cum_logprob, abs=1e-5)
        assert output.finish_reason == "length"


def test_use_beam_search_answers_the_n_best_beams(server, llm, reference):
    """vLLM's use_beam_search: n beams, answered whole as n choices, best first, each the
    generated text of LLM.beam_search's beam (without the prompt, as vLLM's server);
    refused with stream, logprobs, or more beams than the engine's alternatives allow."""
    ids = reference["prompts"][0]["ids"]
    expected = llm.beam_search([ids], dsrt.BeamSearchParams(beam_width=3, max_tokens=5,
                                                            ignore_eos=True))[0]
    answer = requests.post(server.url + "/v1/completions", timeout=60, json={
        "prompt": ids, "max_tokens": 5, "n": 3, "use_beam_search": True,
        "ignore_eos": True}).json()
    assert [c["text"] for c in answer["choices"]] == [
        llm.tokenizer.decode(b.tokens[len(ids):]) for b in expected.sequences]
    assert [c["index"] for c in answer["choices"]] == [0, 1, 2]
    assert answer["usage"]["prompt_tokens"] == len(ids)
    assert answer["usage"]["completion_tokens"] == 15
    chat = requests.post(server.url + "/v1/chat/completions", timeout=60, json={
        "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "n": 2,
        "use_beam_search": True, "ignore_eos": True}).json()
    assert len(chat["choices"]) == 2
    assert all(c["message"]["role"] == "assistant" for c in chat["choices"])
    for extra in ({"stream": True}, {"logprobs": 0}, {"n": 11}):
        refused = requests.post(server.url + "/v1/completions", timeout=60, json={
            "prompt": ids, "max_tokens": 2, "n": 2, "use_beam_search": True, **extra})
        assert refused.status_code == 400, extra
