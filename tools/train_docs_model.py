#!/usr/bin/env python3
"""Trains models/docs-gpt2: the small GPT-2 that ./build.sh compiles and generates from, so
that a first run shows text, not the noise of random weights.

It is a 4-layer, 128-wide GPT-2 (1.1M parameters) with a byte-level BPE tokenizer of 2,048
tokens, both trained from scratch on this repository's own documentation (README.md and
docs/*.md but its generated tables, at the commit given, default HEAD): text the project
owns, so nothing downloaded and no licence to track. It writes sentences that read like
the docs; it knows nothing else, and nothing it says is meant to be true.

    python tools/train_docs_model.py [--commit REV] [--steps 3000] [--out models/docs-gpt2]

Deterministic for pinned versions on one machine (seeded, 2 threads); about twelve minutes
on two cores. Needs torch, transformers, tokenizers, onnx and onnxruntime (tools/fixtures/
requirements-today.txt). Writes model.onnx (HF's with-past layout, opset 17, TorchScript
exporter, as tools/fixtures/export_today.py's fixtures), config.json, generation_config.json,
tokenizer.json, meta.json (what was trained on and how) and generation.json (transformers'
greedy tokens for a few prompts, which the tests compare dsc's plan against).
"""
import argparse
import json
import math
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import onnxruntime as ort
import torch
import transformers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools" / "fixtures"))
from export_today import PosWrapper, onnx_export  # noqa: E402
EOS = "<|endoftext|>"
PROMPTS = ["The serving engine", "A plan is", "dsc compile", "The CPU backend"]


def corpus(commit: str) -> tuple[str, str, list[str]]:
    """README.md and docs/*.md at `commit`, separated by EOS: (text, resolved commit, files)."""
    def git(*args):
        return subprocess.run(["git", "-C", str(ROOT), *args], check=True,
                              capture_output=True, text=True).stdout
    resolved = git("rev-parse", commit).strip()
    # The prose: the generated tables (coverage, the recognition log) teach it only pipes.
    names = ["README.md"] + sorted(
        n for n in git("ls-tree", "--name-only", resolved, "docs/").split()
        if n.endswith(".md") and n not in ("docs/coverage.md", "docs/recognition-log.md"))
    texts = [git("show", f"{resolved}:{name}") for name in names]
    return f"\n{EOS}\n".join(texts), resolved, names


def train_tokenizer(text: str, vocab: int) -> Tokenizer:
    """GPT-2's layout (byte-level pre-tokenizer, decoder and post-processor), trained here."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=[EOS], min_frequency=2,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tokenizer.train_from_iterator(text.split(f"\n{EOS}\n"), trainer)
    return tokenizer


def batches(ids: torch.Tensor, batch: int, length: int, generator: torch.Generator):
    while True:
        starts = torch.randint(0, len(ids) - length - 1, (batch,), generator=generator)
        chunk = torch.stack([ids[s:s + length + 1] for s in starts.tolist()])
        yield chunk[:, :-1], chunk[:, 1:]


def export(model, config, path: Path) -> None:
    """HF's with-past layout (the "today" fixtures' wrapper and TorchScript exporter, opset
    17), checked against ONNX Runtime."""
    layers, heads = config.n_layer, config.n_head
    head_dim = config.n_embd // heads
    batch, seq, past = 2, 5, 3
    rng = np.random.default_rng(7)
    feeds = {"input_ids": rng.integers(0, config.vocab_size, (batch, seq)),
             "attention_mask": np.ones((batch, past + seq), np.int64),
             "position_ids": np.tile(np.arange(past, past + seq), (batch, 1))}
    for layer in range(layers):
        for kind in ("key", "value"):
            feeds[f"past_key_values.{layer}.{kind}"] = rng.standard_normal(
                (batch, heads, past, head_dim)).astype(np.float32)
    names = list(feeds)
    outputs = ["logits"] + [f"present.{layer}.{kind}" for layer in range(layers)
                            for kind in ("key", "value")]
    axes = {"input_ids": {0: "batch", 1: "sequence"},
            "attention_mask": {0: "batch", 1: "past_sequence + sequence"},
            "position_ids": {0: "batch", 1: "sequence"}, "logits": {0: "batch", 1: "sequence"}}
    axes.update({n: {0: "batch", 2: "past_sequence"} for n in names if n.startswith("past")})
    axes.update({n: {0: "batch", 2: "past_sequence + sequence"} for n in outputs[1:]})
    module = PosWrapper(model).eval()
    args = tuple(torch.from_numpy(np.asarray(feeds[n])) for n in names)
    exported = onnx_export(SimpleNamespace(dynamo=False, opset=17), module, args, path.parent,
                           names, outputs, axes)
    assert exported == path
    with torch.no_grad():
        expected = module(*args)[0].numpy()
    got = ort.InferenceSession(str(path)).run(["logits"], feeds)[0]
    worst = float(np.abs(got - expected).max())
    assert worst < 1e-4, f"ONNX Runtime differs from torch by {worst}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commit", default="HEAD")
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--out", type=Path, default=ROOT / "models" / "docs-gpt2")
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(2)
    text, commit, files = corpus(args.commit)
    tokenizer = train_tokenizer(text, 2048)
    ids = torch.tensor(tokenizer.encode(text).ids, dtype=torch.long)
    split = int(len(ids) * 0.95)
    train_ids, held_ids = ids[:split], ids[split:]

    config = transformers.GPT2Config(
        vocab_size=tokenizer.get_vocab_size(), n_positions=256, n_embd=128, n_layer=4,
        n_head=4, bos_token_id=0, eos_token_id=0, pad_token_id=0,
        # No dropout: the corpus is small and the aim is fluent text from it, not a model
        # that generalises beyond it.
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = transformers.GPT2LMHeadModel(config)
    parameters = sum(p.numel() for p in model.parameters())
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3, betas=(0.9, 0.95),
                                  weight_decay=0.1)
    warmup = 100
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(
        1.0, (step + 1) / warmup) * (0.05 + 0.95 * 0.5 * (1 + math.cos(
            math.pi * min(1.0, step / args.steps)))))
    generator = torch.Generator().manual_seed(0)
    data = batches(train_ids, 16, 128, generator)
    start = time.time()
    model.train()
    for step in range(args.steps):
        inputs, targets = next(data)
        loss = torch.nn.functional.cross_entropy(
            model(input_ids=inputs).logits.flatten(0, 1), targets.flatten())
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        if step % 100 == 0 or step == args.steps - 1:
            print(f"step {step}: loss {loss.item():.3f} ({time.time() - start:.0f} s)",
                  flush=True)
    model.eval()
    with torch.no_grad():
        held = [torch.nn.functional.cross_entropy(
            model(input_ids=held_ids[s:s + 128][None]).logits[0, :-1],
            held_ids[s + 1:s + 128]).item() for s in range(0, len(held_ids) - 129, 128)]
    held_loss = sum(held) / len(held)
    print(f"held-out loss {held_loss:.3f} over {len(held) * 128} tokens")

    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    export(model, config, out / "model.onnx")
    config.to_json_file(out / "config.json")
    model.generation_config.to_json_file(out / "generation_config.json")
    tokenizer.save(str(out / "tokenizer.json"))
    # The references check_generation.py compares a plan with: greedy ids with EOS off (so
    # exactly max_new_tokens come), the prefill's last logits, and the text `dsrun --prompt`
    # prints (the prompt, then what was generated).
    model.generation_config.eos_token_id = None
    prompts, texts = [], []
    for prompt in PROMPTS:
        prompt_ids = tokenizer.encode(prompt).ids
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([prompt_ids])).logits[0, -1]
            generated = model.generate(torch.tensor([prompt_ids]), do_sample=False,
                                       max_new_tokens=24, pad_token_id=0)[0, len(prompt_ids):]
        generated = generated.tolist()
        prompts.append({"ids": prompt_ids, "generated": generated,
                        "prefill_last_logits": logits.tolist()})
        texts.append({"text": prompt, "ids": prompt_ids, "generated": generated,
                      "decoded": tokenizer.decode(prompt_ids + generated)})
        print(f"{prompt!r} -> {texts[-1]['decoded']!r}")
    (out / "generation.json").write_text(json.dumps({
        "how": "model.generate(do_sample=False, max_new_tokens=24) with "
               "generation_config.eos_token_id=None, so exactly max_new_tokens come",
        "max_new_tokens": 24, "prompts": prompts, "text_prompts": texts}) + "\n")
    (out / "meta.json").write_text(json.dumps({
        "what": "GPT-2 trained from scratch on the repository's README.md and docs/*.md",
        "corpus_commit": commit, "corpus_files": files, "corpus_tokens": len(ids),
        "parameters": parameters, "steps": args.steps, "batch": "16 x 128 tokens",
        "final_train_loss": loss.item(), "held_out_loss": held_loss,
        "seconds": round(time.time() - start), "script": "tools/train_docs_model.py",
        "versions": {"python": sys.version.split()[0], "torch": torch.__version__,
                     "transformers": transformers.__version__}}, indent=1) + "\n")


if __name__ == "__main__":
    main()
