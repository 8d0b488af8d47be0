#!/usr/bin/env python3
"""Recognition coverage over the committed fixtures: one row per fixture (family x export
form) with what dsc recognised and whether each path agrees with its reference.

    scripts/coverage.py [--build-dir build] [--only NAME,...] [--json FILE]

Columns:
* blocks: dsc's "recognised N/M blocks" with default options (no --max-batch or
  --max-seq-len: the defaults must give a plan that works);
* session: whether the plan has prefill/decode programs (KV cache in the session);
* forward: every test data set through dsrun against the PyTorch outputs,
  |ours - torch| <= 1e-4 + 1e-4 * |torch| (the largest difference), or the fixture's
  meta.json "tolerance" (a half export's references are the half model's own outputs);
* greedy: test/models/check_generation.py --prefill against transformers' generate
  (24 tokens, three prompts alone and as one left-padded batch);
* tp2: the --tp 2 plan, its ranks in-process: forward against PyTorch and greedy through
  the distributed argmax;
* serving: the --serving plan (default limits) through build/bin/dsrt-engine-check: every
  request's greedy tokens under continuous batching over the paged cache equal the same
  request alone through the static path, at block sizes 1, 16 and 7, all at once, staggered,
  with prefix hits, under forced preemption and with cancellations; then the --serving
  --tp 2 plan at block sizes 16 and 7, its ranks in-process (decoders with session
  programs only);
* int8: top-1 agreement of the --dtype int8 plan's next-token logits with the fp32 plan's
  over test/quant/prompts.txt (dseval), and the largest logit difference. For an
  encoder-decoder (whose folder holds an encoder and a decoder, not model.onnx): the greedy
  tokens of the int8 plan against the fp32 plan's over generation.json's prompts (the
  first token, and all of them).

An encoder-decoder's blocks are the encoder's and the decoder's; its forward runs the
encoder_test_data_set_* through `encode` and the decoder_test_data_set_* through the decoder.

A held-out export's meta.json may carry dsc_options (added to every dsc compile) and
dsrt_env (set for every run): tools/fixtures/heldout_ortgenai.py compares a quantized export
in f32 compute and activations, where its references are exact.

A reporting tool, not a test: it prints what it finds and exits 0 unless it cannot run.
"""
import argparse
import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = os.path.join(ROOT, "test", "models")


def run(command):
    result = subprocess.run(command, capture_output=True, text=True)
    return result.returncode, result.stdout + result.stderr


def data_sets(model_dir):
    """(folder, program) of each test data set: an encoder-decoder's run through `encode`
    and `forward`, everything else's through `forward`."""
    sets = []
    for prefix, program in (("test_data_set_", "forward"), ("encoder_test_data_set_", "encode"),
                            ("decoder_test_data_set_", "forward")):
        sets += [(d, program) for d in sorted(os.listdir(model_dir)) if d.startswith(prefix)]
    return sets


def tolerance(model_dir):
    """(atol, rtol) of the forward and prefill comparisons: 1e-4 each, or what a half
    export's meta.json says (its references are the half model's own outputs)."""
    meta = json.load(open(os.path.join(model_dir, "meta.json")))
    given = meta.get("tolerance")
    return (given["atol"], given["rtol"]) if given else (1e-4, 1e-4)


def forward(dsrun, plan, model_dir, extra=()):
    sets = data_sets(model_dir)
    worst = 0.0
    atol, rtol = tolerance(model_dir)
    for data_set, program in sets:
        path = os.path.join(model_dir, data_set)
        code, out = run([dsrun, plan, "--program", program, "--input-dir", path,
                         "--expect-dir", path, "--rtol", str(rtol), "--atol", str(atol), *extra])
        for diff in re.findall(r"max abs diff ([0-9.e+-]+)", out):
            worst = max(worst, float(diff))
        if code != 0:
            return "FAIL ({})".format(out.strip().splitlines()[-1][:80] if out.strip() else code)
    return "ok ({:.1e})".format(worst) if sets else "n/a"


def greedy(dsrun, dump, plan, model_dir, extra=()):
    reference = os.path.join(model_dir, "generation.json")
    if not os.path.exists(reference):
        return "n/a"
    # --prefill compares the prefill program's logits of a decoder's prompt: only plans
    # with session programs, and not an encoder-decoder's (whose prefill takes the encoder's
    # output and the decoder's start token; its greedy ids come from it all the same).
    code, out = run([dump, plan])
    # Optimum's merged decoder has no position_ids input and was traced without them: left
    # padding shifts its positions, so only prompts alone compare, unless its session
    # programs (which take position_ids) run.
    meta = json.load(open(os.path.join(model_dir, "meta.json")))
    if meta.get("kind") == "merged" and '"prefill"' not in out:
        extra = (*extra, "--alone-only")
    # Only references from transformers carry the prefill logits (not onnxruntime's).
    has_logits = all("prefill_last_logits" in p
                     for p in json.load(open(reference)).get("prompts", []))
    prefill = (["--prefill"] if '"prefill"' in out and '"encode"' not in out and has_logits
               else [])
    if prefill and "tolerance" in meta:
        atol, rtol = tolerance(model_dir)
        prefill += ["--atol", str(atol), "--rtol", str(rtol)]
    code, out = run([sys.executable, os.path.join(MODELS, "check_generation.py"),
                     "--dsrun", dsrun, "--plan", plan, "--reference", reference, *prefill,
                     *extra])
    if code != 0:
        return "FAIL"
    return "ok (alone)" if "--alone-only" in extra else "ok"


def greedy_ids(dsrun, plan, prompts, max_new):
    command = [dsrun, plan, "--max-new-tokens", str(max_new), "--ignore-eos"]
    for prompt in prompts:
        command += ["--prompt-ids", ",".join(map(str, prompt))]
    code, out = run(command)
    rows = re.findall(r"sequence \d+:((?: \d+)*)", out)
    return [[int(t) for t in r.split()] for r in rows] if code == 0 else None


def int8_greedy(dsrun, fp32, int8, model_dir):
    reference = json.load(open(os.path.join(model_dir, "generation.json")))
    prompts = [p["ids"] for p in reference["prompts"]]
    ours, theirs = (greedy_ids(dsrun, plan, prompts, reference["max_new_tokens"])
                    for plan in (int8, fp32))
    if not ours or not theirs:
        return "FAIL"
    first = sum(a[0] == b[0] for a, b in zip(ours, theirs))
    same = sum(x == y for a, b in zip(ours, theirs) for x, y in zip(a, b))
    total = sum(len(b) for b in theirs)
    return "greedy: first token {}/{}, all tokens {}/{}".format(first, len(theirs), same, total)


@contextlib.contextmanager
def environment(values):
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def serving(build, model, scratch, name, options=()):
    dsc = os.path.join(build, "bin", "dsc")
    check = os.path.join(build, "bin", "dsrt-engine-check")
    verdicts = []
    for tp, blocks in ((1, "1,16,7"), (2, "16,7")):
        plan = os.path.join(scratch, "{}-serving-tp{}.dsp".format(name, tp))
        code, out = run([dsc, "compile", model, "-o", plan, "--arch", "none", "--serving",
                         "--tp", str(tp), *options])
        if code != 0:
            verdicts.append("tp{} compile FAIL".format(tp))
            continue
        code, out = run([check, plan, "--block-sizes", blocks])
        last = out.strip().splitlines()[-1] if out.strip() else str(code)
        verdicts.append("tp{} {}".format(tp, "ok" if code == 0 else "FAIL ({})".format(last[:80])))
    return ", ".join(verdicts)


def row(name, build, scratch, models=MODELS):
    meta = json.load(open(os.path.join(models, name, "meta.json")))
    with environment(meta.get("dsrt_env", {})):
        return checked_row(name, build, scratch, models, meta, meta.get("dsc_options", []))


def checked_row(name, build, scratch, models, meta, options):
    model_dir = os.path.join(models, name)
    dsc = os.path.join(build, "bin", "dsc")
    dsrun = os.path.join(build, "bin", "dsrun")
    dseval = os.path.join(build, "bin", "dseval")
    dump = os.path.join(build, "bin", "dsp-dump")
    model = os.path.join(model_dir, "model.onnx")
    encoder_decoder = not os.path.exists(model)
    if encoder_decoder:
        model = model_dir
    result = {"fixture": name, "family": meta.get("family", "?"),
              "form": meta.get("form") or meta.get("kind", "?"),
              "versions": "torch {} / transformers {}".format(
                  meta.get("versions", {}).get("torch", "?").split("+")[0],
                  meta.get("versions", {}).get("transformers", "?"))}
    fp32 = os.path.join(scratch, name + ".dsp")
    code, out = run([dsc, "compile", model, "-o", fp32, "--arch", "none", *options])
    if code != 0 and "go with --dtype int8 or int4" in out:
        # The export's codes make no quantized plan (dsc said why): a float plan is exact.
        options = []
        code, out = run([dsc, "compile", model, "-o", fp32, "--arch", "none"])
    found = re.findall(r"(?:(encoder|decoder): )?recognised (\d+/\d+) blocks", out)
    result["blocks"] = (", ".join((part + " " if part else "") + blocks for part, blocks in found)
                        if found else ("none" if code == 0 else "compile FAIL"))
    if code != 0:
        result["error"] = out.strip().splitlines()[-1] if out.strip() else str(code)
        return result
    code, out = run([dump, fp32])
    result["session"] = "yes" if '"decode"' in out else "no"
    result["forward"] = forward(dsrun, fp32, model_dir)
    decoder = os.path.exists(os.path.join(model_dir, "generation.json"))
    result["greedy"] = greedy(dsrun, dump, fp32, model_dir) if decoder else "n/a"
    result["serving"] = (serving(build, model, scratch, name, options)
                         if result["session"] == "yes" and decoder and not encoder_decoder
                         else "n/a")
    tp2 = os.path.join(scratch, name + "-tp2.dsp")
    code, out = run([dsc, "compile", model, "-o", tp2, "--arch", "none", "--tp", "2",
                     *options])
    declined = re.search(r"stays replicated: (.*)", out)
    if code != 0:
        result["tp2"] = "compile FAIL"
    elif "nothing was sharded" in out:
        result["tp2"] = "declined: " + (declined.group(1) if declined else "see dsc's warnings")
    else:
        inprocess = ("--ranks", "inprocess")
        fwd = forward(dsrun, tp2, model_dir, inprocess)
        # Greedy through the distributed argmax where the plan has its programs (session
        # programs: not Optimum's merged decoder, which gathers the logits instead).
        code, listing = run([dump, tp2])
        argmax = ("--distributed-argmax", "2") if '"prefill_greedy"' in listing else ()
        gen = greedy(dsrun, dump, tp2, model_dir,
                     (*argmax, "--dsrun-arg=--ranks", "--dsrun-arg=inprocess")) \
            if decoder else "n/a"
        result["tp2"] = "forward {}, greedy {}".format(fwd.split(" ")[0], gen)
        if declined:
            result["tp2"] += " (partly replicated: {})".format(declined.group(1))
    int8 = os.path.join(scratch, name + "-int8.dsp")
    code, out = run([dsc, "compile", model, "-o", int8, "--arch", "none", "--dtype", "int8"])
    if code != 0:
        result["int8"] = "compile FAIL"
    elif encoder_decoder:
        result["int8"] = int8_greedy(dsrun, fp32, int8, model_dir)
    elif decoder:
        code, out = run([dseval, int8, "--reference", fp32, "--prompts",
                         os.path.join(ROOT, "test", "quant", "prompts.txt"), "--json"])
        try:
            summary = json.loads(out.strip().splitlines()[-1])
            # dseval reports no largest difference (null) where either plan gave a NaN.
            largest = summary["max_abs_error"]
            result["int8"] = "top-1 {}/{}, max {}".format(
                summary["top1_agree"], summary["rows"],
                "NaN" if largest is None or summary.get("nan") else "{:.3f}".format(largest))
        except (ValueError, KeyError, IndexError):
            result["int8"] = "FAIL ({})".format(out.strip()[-80:])
    else:
        result["int8"] = "n/a"
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    parser.add_argument("--only", default="")
    parser.add_argument("--models-dir", default=MODELS,
                        help="fixtures in the layout of test/models (tools/fixtures/heldout.py "
                             "writes such a folder)")
    parser.add_argument("--json")
    args = parser.parse_args()
    models = os.path.abspath(args.models_dir)
    names = sorted(d for d in os.listdir(models)
                   if os.path.exists(os.path.join(models, d, "meta.json")))
    if args.only:
        wanted = set(args.only.split(","))
        names = [n for n in names if n in wanted]
    rows = []
    columns = ["fixture", "versions", "blocks", "session", "forward", "greedy", "serving", "tp2",
               "int8"]
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    with tempfile.TemporaryDirectory() as scratch:
        for name in names:
            result = row(name, os.path.abspath(args.build_dir), scratch, models)
            rows.append(result)
            print("| " + " | ".join(str(result.get(c, "")) for c in columns) + " |", flush=True)
    if args.json:
        with open(args.json, "w") as out:
            json.dump(rows, out, indent=1)


if __name__ == "__main__":
    main()
