#!/usr/bin/env python3
"""Writes docs/coverage.md, the recognition coverage of every committed fixture:

    python3 scripts/coverage-doc.py [--build-dir build] [--table FILE] > docs/coverage.md

Standard library only. The table is scripts/coverage.py's, the script that measures it;
this one adds the page around it (a title, when and on what it was made, what each column
means). Every column but `fixture` and `versions` is measured, not read: coverage.py
compiles each fixture of test/models/ with the build's dsc (fp32, `--tp 2`, `--dtype
int8`), runs the plans with dsrun, dseval and test/models/check_generation.py against the
fixture's committed references (test_data_set_*/, generation.json) and parses what the
tools print. Only `fixture` (the folder) and `versions` (meta.json's torch and
transformers) come from files alone; no file in the repository records the other columns
(there is no committed recognition report per fixture), so they need a build (`./build.sh`)
and take a few minutes on two cores.

--table FILE takes a table that `python3 scripts/coverage.py > FILE` printed before,
instead of running it again. Other options go to coverage.py (--only, --models-dir).
"""
import argparse
import datetime
import os
import platform
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

COLUMNS = """\
* **blocks**: `dsc`'s "recognised N/M blocks" with no options (the defaults must give a
  plan that works).
* **session**: whether the plan has `prefill` and `decode` programs (the KV cache in the
  session).
* **forward**: every test data set through `dsrun` against PyTorch's outputs, |ours - torch|
  <= 1e-4 + 1e-4 * |torch| (the largest difference), or the tolerance in the fixture's
  meta.json (a half export's references are the half model's own outputs).
* **greedy**: 24 tokens against `transformers.generate`, three prompts alone and as one
  left-padded batch (`test/models/check_generation.py`; where the plan has session
  programs, also the prefill logits, `--prefill`).
* **serving**: the `--serving` plan through `dsrt-engine-check`: every request's greedy
  tokens under continuous batching over the paged cache equal the same request alone
  through the static path (block sizes 1, 16 and 7; all at once, staggered with prefix
  hits, forced preemption, cancellations), at TP 1, then at TP 2 (block sizes 16 and 7).
* **tp2**: the `--tp 2` plan, its ranks in-process: forward against PyTorch, and greedy
  through the distributed argmax. "declined": nothing was sharded, with tp-shard's reason;
  "partly replicated": the attentions stayed replicated (the reason) and the MLPs and LM
  head were sharded.
* **int8**: top-1 agreement of the `--dtype int8` plan's next-token logits with the fp32
  plan's over `test/quant/prompts.txt` (`dseval`), and the largest logit difference.

The encoder-decoders (T5 v1.0, T5 v1.1, BART: `bart-*`, `t5-*`, `t5v11-*`) are compiled from
their folder: blocks are the encoder's and the decoder's; forward runs the encoder's data
sets through `encode` and the decoder's through `forward`; greedy is 12 tokens, alone and
right-padded in a batch; tp2's greedy gathers the logits; int8 compares the int8 plan's
greedy tokens with the fp32 plan's over generation.json's prompts (the first token, and all
of them)."""


def git(*args):
    try:
        result = subprocess.run(["git", "-C", ROOT, *args], capture_output=True, text=True)
    except OSError:
        return ""
    return result.stdout.strip() if result.returncode == 0 else ""


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    parser.add_argument("--table", help="a table scripts/coverage.py printed before")
    args, rest = parser.parse_known_args()

    if args.table:
        with open(args.table) as saved:
            table = saved.read()
        source = "`scripts/coverage.py`'s table from `{}`".format(os.path.basename(args.table))
    else:
        command = [sys.executable, os.path.join(ROOT, "scripts", "coverage.py"),
                   "--build-dir", args.build_dir, *rest]
        result = subprocess.run(command, stdout=subprocess.PIPE, text=True)
        if result.returncode != 0:
            sys.exit("coverage-doc: scripts/coverage.py failed ({})".format(result.returncode))
        table = result.stdout
    rows = [line for line in table.splitlines() if line.startswith("|")]
    if len(rows) < 3:
        sys.exit("coverage-doc: no table rows")

    commit = git("rev-parse", "--short", "HEAD")
    if commit and git("status", "--porcelain", "--untracked-files=no"):
        commit += " with uncommitted changes"
    made = "`scripts/coverage.py --build-dir build`" if not args.table else source
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    print("# Recognition coverage\n")
    print("Generated by `python3 scripts/coverage-doc.py > docs/coverage.md`; do not edit it by "
          "hand.")
    print("Made on {} from {} on {} {} cores ({}){}.\n".format(
        when, made, os.cpu_count(), platform.machine(), platform.system(),
        ", commit " + commit if commit else ""))
    print("One row per committed fixture of `test/models/` (family x export form;\n"
          "[testing.md](testing.md), \"Test models\"), on the CPU. Exports beyond the fixtures:\n"
          "[recognition-log.md](recognition-log.md).\n")
    print(COLUMNS + "\n")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
