"""The CPU kernels' threads from Python: set and read back, refused out of range, and by
default the CPUs the process may run on (its affinity mask), not the machine's count."""
import os
import shutil
import subprocess
import sys

import pytest

import dsrt

COUNT = "import dsrt; print(dsrt.cpu_threads())"


def test_set_cpu_threads_and_back_to_the_default(llm, reference):
    default = dsrt.cpu_threads()
    assert default >= 1
    prompt = reference["prompts"][0]
    params = dsrt.SamplingParams(max_tokens=reference["max_new_tokens"], temperature=0,
                                 ignore_eos=True)
    try:
        dsrt.set_cpu_threads(3)
        assert dsrt.cpu_threads() == 3
        # The tokens do not depend on the threads that computed them.
        out = llm.generate([prompt["ids"]], params)[0]
        assert out.outputs[0].token_ids == prompt["generated"]
        with pytest.raises(dsrt.Error, match="not -1"):
            dsrt.set_cpu_threads(-1)
        assert dsrt.cpu_threads() == 3
    finally:
        dsrt.set_cpu_threads(0)
    assert dsrt.cpu_threads() == default


def _threads_in(env=None, prefix=()):
    done = subprocess.run([*prefix, sys.executable, "-c", COUNT], capture_output=True,
                          text=True, env={**os.environ, **(env or {})}, check=True)
    return int(done.stdout.strip()), done.stderr


def test_the_environment_sets_the_default():
    assert _threads_in({"DSRT_NUM_THREADS": "3"})[0] == 3
    count, warning = _threads_in({"DSRT_NUM_THREADS": "many"})
    assert count >= 1 and "DSRT_NUM_THREADS=many is not a thread count" in warning


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or shutil.which("taskset") is None,
                    reason="needs Linux's affinity masks and taskset")
def test_the_default_follows_the_affinity_mask():
    first = min(os.sched_getaffinity(0))
    env = {"DSRT_NUM_THREADS": ""}
    assert _threads_in(env, ("taskset", "-c", str(first)))[0] == 1


def test_dsserve_threads_option(capsys, tmp_path):
    from dsrt.server_cli import main
    with pytest.raises(SystemExit) as exit:
        main([str(tmp_path / "plan.dsp"), "--threads", "-1"])
    assert exit.value.code == 2
    try:
        # Set before the plan opens (here it does not exist, so main stops there).
        assert main([str(tmp_path / "plan.dsp"), "--threads", "3"]) == 1
        assert dsrt.cpu_threads() == 3
    finally:
        dsrt.set_cpu_threads(0)
