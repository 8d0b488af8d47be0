# lit configuration of dsc's regression tests (test/dialects, test/frontends, test/models).
import os
import shutil
import sys

import lit.formats

config.name = "dsc"
config.test_format = lit.formats.ShTest(execute_external=True)
config.suffixes = [".mlir", ".onnxtxt", ".test"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.dsc_obj_root, "test")
config.excludes = ["Inputs", "unit", "tools", "CMakeLists.txt", "lit.cfg.py", "lit.site.cfg.py",
                   "check_generation.py"]

config.environment["PATH"] = os.pathsep.join(
    [config.dsc_tools_dir, config.llvm_tools_dir, os.environ.get("PATH", "")])
# Tensor-parallel model tests also run their ranks as MPI processes where mpirun exists.
if shutil.which("mpirun"):
    config.available_features.add("mpirun")
# int8 activations need AVX-512 VNNI (runtime/src/ops/fast/Linear.cpp): a test of what they
# make bit for bit names this feature.
try:
    with open("/proc/cpuinfo") as cpuinfo:
        flags = next((line.split() for line in cpuinfo if line.startswith("flags")), [])
    if "avx512_vnni" in flags and "avx512bw" in flags and not os.environ.get("DSRT_CPU_ISA"):
        config.available_features.add("avx512-vnni")
except OSError:
    pass
# mpirun with a session directory of its own (test/models/mpirun.sh says why).
config.substitutions.append(
    ("%mpirun", "sh " + os.path.join(config.dsc_src_root, "test", "models", "mpirun.sh")))
# Test scripts use the standard library only.
config.substitutions.append(("%python", sys.executable))
config.substitutions.append(("%models", os.path.join(config.dsc_src_root, "test", "models")))
# The shipped, trained model (models/docs-gpt2), which build.sh generates from.
config.substitutions.append(("%shipped", os.path.join(config.dsc_src_root, "models")))
