"""dsrt.Session.generate: static generation from Python, encoder-decoders and beam search
included, against transformers' references: T5's text prompts decoded as transformers
decoded its greedy tokens (generation.json), and BART's and GPT-2's beam searches and logits
processors equal to transformers' (beam_search.json, tools/fixtures/beam_refs.py)."""
import json

import pytest

import dsrt
from conftest import REPO, dsc

MODELS = REPO / "test" / "models"


def compiled(tmp_path_factory, fixture, **options):
    import os
    os.environ.setdefault("DSC", dsc())
    path = MODELS / fixture
    source = path if (path / "encoder_model.onnx").exists() or not (
        path / "model.onnx").exists() else path / "model.onnx"
    return dsrt.compile(str(source), str(tmp_path_factory.mktemp(fixture) / "m.dsp"),
                        **options)


def test_an_encoder_decoder_answers_text_as_transformers(tmp_path_factory):
    plan = compiled(tmp_path_factory, "t5-optimum-onnx", max_batch=2, max_seq_len=32)
    reference = json.loads((MODELS / "t5-optimum-onnx" / "generation.json").read_text())
    session = dsrt.Session(plan)
    for case in reference["text_prompts"]:
        (out,) = session.generate([case["text"]], max_new_tokens=len(case["generated"]),
                                  ignore_eos=True)
        assert out.token_ids == case["generated"] and out.text == case["decoded"]
        assert out.finish_reason == "length"
    # The serving engine is for decoders: its refusal says where an encoder-decoder goes.
    with pytest.raises(dsrt.Error, match=r"dsrt.Session\(plan\).generate"):
        dsrt.LLM(plan)


@pytest.mark.parametrize("fixture", ["bart-optimum-onnx", "gpt2-op17"])
def test_beam_search_and_logits_processors_are_transformers(tmp_path_factory, fixture):
    plan = compiled(tmp_path_factory, fixture, max_batch=12, max_seq_len=48)
    reference = json.loads((MODELS / fixture / "beam_search.json").read_text())
    session = dsrt.Session(plan)
    stop = reference["stop_token"]
    for case in reference["cases"]:
        processors = {k: case[k] for k in ("repetition_penalty", "no_repeat_ngram_size",
                                           "min_new_tokens", "forced_bos_token_id",
                                           "forced_eos_token_id") if k in case}
        outs = session.generate(reference["prompts"], max_new_tokens=case["max_new_tokens"],
                                num_beams=case["num_beams"],
                                length_penalty=case["length_penalty"],
                                early_stopping=case["early_stopping"], ignore_eos=True,
                                stop_token_ids=[stop], generation_config="none",
                                **processors)
        assert [o.token_ids for o in outs] == case["outputs"], case
        assert [o.finish_reason for o in outs] == [
            "stop" if tokens[-1] == stop else "length" for tokens in case["outputs"]]
    with pytest.raises(ValueError, match="early_stopping"):
        session.generate([[5, 6]], num_beams=2, early_stopping="sometimes")
    with pytest.raises(dsrt.Error, match="temperature 0"):
        session.generate([[5, 6]], num_beams=2, temperature=0.5)


@pytest.mark.parametrize("fixture", ["bart-optimum-onnx", "gpt2-op17"])
def test_what_is_left_out_is_the_model_s(tmp_path_factory, fixture):
    """Its generation_config.json read as transformers' generate() reads it: the model's
    beams and processors with no argument, as one batch."""
    import shutil
    reference = json.loads((MODELS / fixture / "beam_search.json").read_text())
    copy = tmp_path_factory.mktemp(fixture + "-defaults") / fixture
    shutil.copytree(MODELS / fixture, copy)
    (copy / "generation_config.json").write_text(
        json.dumps(reference["model_defaults"]["generation_config"]))
    source = copy if (copy / "encoder_model.onnx").exists() else copy / "model.onnx"
    plan = dsrt.compile(str(source), str(copy.parent / "m.dsp"), max_batch=12,
                        max_seq_len=48)
    outs = dsrt.Session(plan).generate(reference["prompts"])
    assert [o.token_ids for o in outs] == reference["model_defaults"]["outputs"]
    with pytest.raises(ValueError, match="generation_config"):
        dsrt.Session(plan).generate([[5]], generation_config="hf")

