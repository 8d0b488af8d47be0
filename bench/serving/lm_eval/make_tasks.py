#!/usr/bin/env python3
"""Two small lm-evaluation-harness tasks over local JSON (no dataset download), for driving
dsserve with lm_eval's own client (`--model local-completions`): `dsmc`, 20 multiple-choice
questions (loglikelihood: echo with logprobs, token-id prompts), and `dsgen`, 8 prompts
(generate_until with a stop string). The questions are nonsense on purpose: what is checked
is the client's path and the numbers it reads (check.py), not a model's accuracy.

    python make_tasks.py DIR    # then: lm_eval ... --tasks dsmc,dsgen --include_path DIR
"""
import json
import random
import sys
from pathlib import Path

out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
random.seed(0)
parts = ["the runtime", "the compiler", "a plan", "the engine", "the tokenizer", "a kernel",
         "the server", "a session"]
questions = []
for _ in range(20):
    choices = random.sample(parts, 4)
    questions.append({"question": f"Which part loads {choices[0]}?", "choices": choices,
                      "answer": random.randrange(4)})
(out / "mc.jsonl").write_text("\n".join(json.dumps(q) for q in questions) + "\n")
(out / "gen.jsonl").write_text("\n".join(json.dumps({"prompt": f"The {p} is", "target": "fast"})
                                         for p in parts) + "\n")


def write_task(name: str, data: str, output_type: str, fields: str) -> None:
    (out / f"{name}.yaml").write_text(f"""task: {name}
dataset_path: json
dataset_kwargs:
  data_files:
    test: {(out / data).resolve()}
test_split: test
output_type: {output_type}
{fields}""")


write_task("dsmc", "mc.jsonl", "multiple_choice", """doc_to_text: "{{question}}"
doc_to_choice: "{{choices}}"
doc_to_target: "{{answer}}"
metric_list:
  - metric: acc
""")
write_task("dsgen", "gen.jsonl", "generate_until", """doc_to_text: "{{prompt}}"
doc_to_target: "{{target}}"
generation_kwargs:
  until: ["\\n"]
  max_gen_toks: 16
metric_list:
  - metric: exact_match
""")
