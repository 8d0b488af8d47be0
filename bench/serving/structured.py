"""Structured output's cost in the engine: one stream of requests through dsrt.LLM, free and
then under a JSON schema (llguidance's token masks, docs/serving.md "Structured output"),
alternating, each run on a fresh prefix cache. A benchmark, not a test: nothing asserts.

    python bench/serving/structured.py PLAN [--requests 64] [--clients 16] [--max-tokens 96]
                                            [--rounds 2]

The plan needs a tokenizer and an EOS token. The outputs' text is checked as JSON where a
request ended on EOS (without the EOS token's own text: a random-weight model's config may
name an ordinary token)."""
import argparse
import json
import random
import time

import dsrt

SCHEMA = {"type": "object",
          "properties": {"name": {"type": "string"},
                         "tags": {"type": "array", "items": {"type": "string"}}},
          "required": ["name", "tags"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("plan")
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--clients", type=int, default=16, help="sequences in flight at most")
    parser.add_argument("--max-tokens", type=int, default=96)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    llm = dsrt.LLM(args.plan, max_num_seqs=args.clients)
    tokenizer = llm.get_tokenizer()
    rng = random.Random(0)
    prompts = [[rng.randrange(100, 30000) for _ in range(rng.randint(8, 120))]
               for _ in range(args.requests)]

    def run(structured: bool):
        params = dsrt.SamplingParams(
            max_tokens=args.max_tokens, temperature=0.8, seed=1,
            structured_outputs=dsrt.StructuredOutputsParams(json=SCHEMA) if structured else None)
        llm.reset_prefix_cache()
        start = time.perf_counter()
        outs = llm.generate(prompts, params)
        seconds = time.perf_counter() - start
        tokens = sum(len(o.outputs[0].token_ids) for o in outs)
        ended = [o.outputs[0] for o in outs if o.outputs[0].finish_reason == "stop"]
        valid = sum(isinstance(json.loads(tokenizer.decode(c.token_ids[:-1])), dict)
                    for c in ended)
        return tokens, seconds, len(ended), valid

    llm.generate(prompts[:2], dsrt.SamplingParams(max_tokens=4))
    run(True)  # the grammar's token table is built once, at the first structured request
    print(f"{args.plan}: {args.requests} requests, {args.clients} at once, at most "
          f"{args.max_tokens} tokens each, temperature 0.8; {dsrt.cpu_threads()} CPU threads")
    for _ in range(args.rounds):
        for structured in (False, True):
            tokens, seconds, ended, valid = run(structured)
            what = "json schema" if structured else "free"
            line = f"{what:>12}: {tokens} tokens in {seconds:.2f} s, {tokens / seconds:.1f} tok/s"
            if structured:
                line += f"; {ended} ended on EOS, {valid} of them valid JSON"
            print(line)


if __name__ == "__main__":
    main()
