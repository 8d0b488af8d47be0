#!/usr/bin/env python3
"""Fails if an object file defines a weak function with instructions past x86-64's baseline.

A weak function (an inline function or a template instantiation emitted out of line) has one
copy per object file that uses it, and the linker keeps any one of them for the whole
program. One compiled for AVX2 or AVX-512 then runs on every CPU: on 2026-12-04 an AMD EPYC
without AVX-512 died of SIGILL in std::vector<int>::assign, whose copy came from a kernel
file compiled with -mavx512f. The kernel files now compile only their own functions for
their instruction set (runtime/src/ops/fast/TargetRegion.h); this checks that it holds, on
every object given (the runtime's libraries), for whichever compiler and flags built them.

    check_shared_code.py OBJECT...   (an argument may be a ;-separated list: CMake's)

It also checks that it can see what it looks for: the objects must hold some non-weak
function with such instructions (the kernels), or the disassembly was not read.
"""
import re
import subprocess
import sys

# VEX and EVEX mnemonics start with v (vmovups, vpdpbusd); AVX-512's mask registers' with k
# (kmovw); AMX's are ldtilecfg, sttilecfg, tileloadd, tilestored, tilezero, tdpb*.
BEYOND_BASELINE = re.compile(r"^(v[a-z0-9]+|k(mov|or|and|not|xor|shift|test|add|unpck)[a-z]*|"
                             r"ldtilecfg|sttilecfg|tile[a-z0-9]+|tdp[a-z0-9]+)$")
FUNCTION = re.compile(r"^[0-9a-f]+ <(.+)>:$")
INSTRUCTION = re.compile(r"^\s+[0-9a-f]+:\s+(?:(?:lock|rep|repz|repnz|notrack|bnd|data16)\s+)*"
                         r"([a-z][a-z0-9]*)")


def weak_functions(path):
    out = subprocess.run(["nm", "--defined-only", "-P", path], check=True,
                         capture_output=True, text=True).stdout
    return {fields[0] for fields in (line.split() for line in out.splitlines())
            if len(fields) >= 2 and fields[1] == "W"}


def functions_beyond_baseline(path):
    out = subprocess.run(["objdump", "-d", "--no-show-raw-insn", path], check=True,
                         capture_output=True, text=True).stdout
    found, current = {}, None
    for line in out.splitlines():
        match = FUNCTION.match(line)
        if match:
            current = match.group(1)
            continue
        match = INSTRUCTION.match(line)
        if current and match and BEYOND_BASELINE.match(match.group(1)):
            found.setdefault(current, match.group(1))
    return found


def demangle(names):
    if not names:
        return []
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True)
    return out.stdout.splitlines() if out.returncode == 0 else names


def main(paths):
    offenders, kernels = [], 0
    for path in paths:
        weak = weak_functions(path)
        for name, instruction in sorted(functions_beyond_baseline(path).items()):
            if name in weak:
                offenders.append((path, name, instruction))
            else:
                kernels += 1
    if offenders:
        print("weak functions compiled past x86-64's baseline (the linker may run them on any "
              "CPU; see runtime/src/ops/fast/TargetRegion.h):")
        for (path, _, instruction), name in zip(offenders,
                                                demangle([o[1] for o in offenders])):
            print(f"  {path}: {name} ({instruction})")
        return 1
    if kernels == 0:
        print("no function with instructions past the baseline in any object: "
              "the disassembly was not read as expected")
        return 1
    print(f"{len(paths)} objects: {kernels} non-weak functions past the baseline (the "
          "kernels), no weak one")
    return 0


if __name__ == "__main__":
    sys.exit(main([path for argument in sys.argv[1:] for path in argument.split(";") if path]))
