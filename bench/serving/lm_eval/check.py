#!/usr/bin/env python3
"""lm_eval's loglikelihoods (its --log_samples of the dsmc task, read through dsserve)
against ONNX Runtime on the same ONNX model, each continuation's log-probability summed
over its tokens as lm_eval sums them.

    python check.py SAMPLES_DIR MODEL_DIR    # MODEL_DIR: model.onnx with an empty cache
                                             # input per layer, and tokenizer.json
"""
import glob
import json
import sys

import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer

samples_dir, model_dir = sys.argv[1], sys.argv[2]
tokenizer = Tokenizer.from_file(f"{model_dir}/tokenizer.json")
session = ort.InferenceSession(f"{model_dir}/model.onnx")
caches = session.get_inputs()[3:]


def encode(text):
    return tokenizer.encode(text, add_special_tokens=False).ids


def loglikelihood(context, continuation):
    # lm_eval's split: the whole text encoded, the context's tokens first where they agree.
    ctx, whole = encode(context), encode(context + continuation)
    cont = whole[len(ctx):] if whole[:len(ctx)] == ctx else encode(continuation)
    ids = ctx + cont
    n = len(ids)
    feeds = {"input_ids": np.array([ids], np.int64), "attention_mask": np.ones((1, n), np.int64),
             "position_ids": np.arange(n, dtype=np.int64)[None]}
    for cache in caches:
        feeds[cache.name] = np.zeros((1, cache.shape[1], 0, cache.shape[3]), np.float32)
    logits = session.run(["logits"], feeds)[0][0].astype(np.float64)
    logp = logits - logits.max(-1, keepdims=True)
    logp -= np.log(np.exp(logp).sum(-1, keepdims=True))
    return sum(logp[n - len(cont) - 1 + k, cont[k]] for k in range(len(cont)))


worst, count = 0.0, 0
for path in glob.glob(f"{samples_dir}/**/samples_dsmc*.jsonl", recursive=True):
    for line in open(path):
        sample = json.loads(line)
        for args, response in zip(sample["arguments"].values(), sample["resps"]):
            got = float(response[0][0])
            worst = max(worst, abs(got - loglikelihood(args["arg_0"], args["arg_1"])))
            count += 1
print(f"{count} loglikelihoods, max |served - onnxruntime| = {worst:.2e}")
sys.exit(0 if count else 1)
