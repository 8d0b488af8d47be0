#!/usr/bin/env python3
"""ONNX backend node tests through the whole product: `dsc compile` + `dsrun` on the CPU.

For every test directory under the node-test data (Debian's libonnx-testdata), the model is
compiled to a plan; a model the importer refuses as unsupported is counted as such (its op
is outside dsc's op set) and skipped. A model of an opset outside 13-23 (the exporters' range
that dsc accepts) is counted apart; with --require-all (a set chosen for ops dsc runs) both
are failures. Every other test must pass on each test_data_set_*:
outputs equal within rtol/atol for floats (exact for integers and bools), or be listed in
the exclusion file with a reason. Prints how many ran, passed, failed, were excluded and
were unsupported; exits 1 when any test that is not excluded fails.
"""
import argparse
import concurrent.futures
import os
import subprocess
import sys
import tempfile

# The tolerances of ONNX's own backend test runner.
RTOL = 1e-3
ATOL = 1e-7


def read_exclusions(path):
    excluded = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            name, _, reason = line.partition("#")
            excluded[name.strip()] = reason.strip()
    return excluded


def run_one(args, test_dir, work):
    name = os.path.basename(test_dir)
    plan = os.path.join(work, name + ".dsp")
    compile_ = subprocess.run(
        [args.dsc, "compile", os.path.join(test_dir, "model.onnx"), "-o", plan] + args.dsc_arg,
        capture_output=True, text=True)
    if compile_.returncode != 0:
        if "unsupported ONNX operator" in compile_.stderr:
            return name, "unsupported", compile_.stderr.strip().splitlines()[-1]
        if ("of the default ONNX domain is not supported" in compile_.stderr
                or "imports no opset of the default ONNX domain" in compile_.stderr):
            return name, "other_opset", compile_.stderr.strip().splitlines()[-1]
        return name, "failed", "dsc: " + compile_.stderr.strip()[:2000]
    for data_set in sorted(d for d in os.listdir(test_dir) if d.startswith("test_data_set")):
        data = os.path.join(test_dir, data_set)
        run = subprocess.run(
            [args.dsrun, plan, "--input-dir", data, "--expect-dir", data,
             "--rtol", str(RTOL), "--atol", str(ATOL)],
            capture_output=True, text=True)
        if run.returncode != 0:
            return name, "failed", f"dsrun on {data_set}: " + (run.stdout + run.stderr).strip()[:2000]
    os.remove(plan)
    return name, "passed", ""


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--dsc", required=True)
    parser.add_argument("--dsrun", required=True)
    parser.add_argument("--node-dir", default="/usr/include/onnx/backend/test/data/node")
    parser.add_argument("--exclusions", required=True)
    parser.add_argument("--filter", default="")
    parser.add_argument("--dsc-arg", action="append", default=[],
                        help="an extra argument of `dsc compile` (repeatable)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--require-all", action="store_true",
                        help="a test of an unsupported op or opset fails")
    args = parser.parse_args()

    if not os.path.isdir(args.node_dir):
        print(f"node tests not found at {args.node_dir} (install libonnx-testdata)")
        return 1
    excluded = read_exclusions(args.exclusions)
    tests = sorted(os.path.join(args.node_dir, d) for d in os.listdir(args.node_dir)
                   if args.filter in d and os.path.isfile(os.path.join(args.node_dir, d, "model.onnx")))
    results = {}
    with tempfile.TemporaryDirectory() as work, \
            concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        for name, outcome, detail in pool.map(lambda t: run_one(args, t, work), tests):
            results[name] = (outcome, detail)

    counts = {"passed": 0, "failed": 0, "excluded": 0, "unsupported": 0, "other_opset": 0,
              "fixed": 0}
    failures = []
    for name, (outcome, detail) in sorted(results.items()):
        if name in excluded:
            counts["excluded"] += 1
            if outcome == "passed":
                counts["fixed"] += 1
                print(f"NOTE {name} passes but is excluded ({excluded[name]}): remove it from the list")
            continue
        if args.require_all and outcome in ("unsupported", "other_opset"):
            outcome = "failed"
        counts[outcome] += 1
        if outcome == "failed":
            failures.append((name, detail))
    for name, detail in failures:
        print(f"FAIL {name}\n    {detail}")
    ran = counts["passed"] + counts["failed"]
    print(f"ONNX node tests through dsc + dsrun (CPU): {len(tests)} found, {counts['unsupported']} "
          f"use ops outside dsc's set, {counts['other_opset']} are models of opsets outside 13-23 "
          f"(or of other domains), {counts['excluded']} excluded, {ran} ran")
    print(f"{counts['passed']} passed, {counts['failed']} failed")
    return 1 if counts["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
