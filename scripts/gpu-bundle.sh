#!/bin/sh
# Gathers what the GPU machine needs beside the working tree into one ignored folder
# (default build-gpu-bundle/, under the repository root; /build*/ is in .gitignore), so that
# `bench/gpu/run.sh` and the GPU test suite can run there without LLVM, flatc or network:
#
#   bin/dsc                  this build's compiler (MLIR is linked in statically), its
#                            RUNPATH set to $ORIGIN/../lib with patchelf
#   lib/                     the shared libraries dsc needs that are not part of glibc:
#                            libonnx, libonnx_proto, libprotobuf (and libz)
#   generated/plan_generated.h   flatc's output for schemas/plan.fbs (no flatc there)
#   include/                 header-only dependencies of libdsrt and the tools: flatbuffers/
#                            (the version whose flatc generated the header), nlohmann/,
#                            xxhash.h, CLI/ (CLI11) and fmt/ (used header-only there)
#   lit/, bin/lit            LLVM's lit (pure Python) for the GPU test suite (test/gpu)
#   tests/                   the GPU unit tests (dsrt-cuda-tests, dsrt-cuda-linear-tests,
#                            dsrt-nccl-gpu-tests), which only libc and libstdc++ link
#   MANIFEST                 what is here, with sizes and where it came from
#
# The runtime itself (libdsrt, dsrun, dsbench, dsp-dump) is built on the GPU machine from
# the working tree: cmake -DDSC_RUNTIME_ONLY=ON -DDSC_PLAN_GENERATED_DIR=<bundle>/generated
# -DDSC_BUNDLED_INCLUDE_DIR=<bundle>/include -DDSC_EXTRA_TOOLS_DIR=<bundle>/bin
# -DLLVM_EXTERNAL_LIT=<bundle>/bin/lit (bench/gpu/run.sh does it; `ctest -L gpu` then runs
# the GPU suite).
#
# usage: scripts/gpu-bundle.sh [--carry] [BUNDLE_DIR]   (DSC_BUILD_DIR: the build with dsc;
#        default build/; it is brought up to date with ninja -j1 dsc)
# --carry also packs the bundle as build-gpu-carry/bundle.tar.xz, what a GPU call carries:
# the working tree and what it carries share 64 MiB, and the tree alone is ~45 MiB, so the
# bundle travels compressed (bench/gpu/sweep.sh and run.sh unpack it).
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
build=${DSC_BUILD_DIR:-$root/build}
case "$build" in /*) ;; *) build=$root/$build ;; esac
carry=0
[ "${1:-}" = "--carry" ] && { carry=1; shift; }
bundle=${1:-$root/build-gpu-bundle}
limit_mib=60

[ -f "$build/build.ninja" ] || { echo "gpu-bundle: $build is not a configured build (build.sh)" >&2; exit 2; }
ninja_log=$(mktemp)
ninja -C "$build" -j1 dsc dsp_schema_generate >"$ninja_log" 2>&1 ||
  { tail -40 "$ninja_log" >&2; rm -f "$ninja_log"; echo "gpu-bundle: building dsc failed" >&2; exit 1; }
rm -f "$ninja_log"

if ! command -v patchelf >/dev/null 2>&1; then
  echo "gpu-bundle: installing patchelf" >&2
  apt-get install -y -q patchelf >/dev/null 2>&1 ||
    { apt-get update -q >/dev/null && apt-get install -y -q patchelf >/dev/null; }
fi

rm -rf "$bundle.tmp"
mkdir -p "$bundle.tmp/bin" "$bundle.tmp/lib" "$bundle.tmp/generated" "$bundle.tmp/include"

cp "$build/bin/dsc" "$bundle.tmp/bin/dsc"
strip --strip-unneeded "$bundle.tmp/bin/dsc"
# Every library dsc loads except glibc's own and the C++ runtime (the GPU machine's are
# newer than this Debian's, and a second libstdc++ next to theirs would be older).
ldd "$build/bin/dsc" | awk '/=> \// { print $3 }' | while read -r library; do
  case "$(basename "$library")" in
    libc.so*|libm.so*|libgcc_s.so*|libstdc++.so*|ld-linux*|libdl.so*|libpthread.so*|librt.so*) ;;
    *) cp -L "$library" "$bundle.tmp/lib/" ;;
  esac
done
for library in "$bundle.tmp"/lib/*; do
  strip --strip-unneeded "$library"
  patchelf --set-rpath '$ORIGIN' "$library"
done
patchelf --set-rpath '$ORIGIN/../lib' "$bundle.tmp/bin/dsc"

cp "$build/schemas/plan_generated.h" "$bundle.tmp/generated/"
# The GPU unit tests, built here (the runtime-only build there has only the lit suite):
# bench/gpu/sweep.sh runs them with the plans it compiles.
mkdir -p "$bundle.tmp/tests"
for test in dsrt-cuda-tests dsrt-cuda-linear-tests dsrt-nccl-gpu-tests; do
  ninja -C "$build" -j1 "$test" >/dev/null 2>&1 || true
  [ -x "$build/bin/$test" ] && cp "$build/bin/$test" "$bundle.tmp/tests/" &&
    strip --strip-unneeded "$bundle.tmp/tests/$test"
done
# The library loader's test copies this tiny library around (DSRT_TEST_FAKE_GPU_LIBRARY).
ninja -C "$build" -j1 dsrt-fake-gpu-library >/dev/null 2>&1 || true
[ -f "$build/runtime/test/cuda/libdsrt-fake-gpu-library.so" ] &&
  cp "$build/runtime/test/cuda/libdsrt-fake-gpu-library.so" "$bundle.tmp/tests/"
# FileCheck for the GPU lit suite. Debian's links libz3 for a solver FileCheck never calls:
# the reference is dropped (lazy binding) rather than carrying 23 MB of Z3.
cp /usr/lib/llvm-22/bin/FileCheck "$bundle.tmp/bin/FileCheck"
patchelf --remove-needed libz3.so.4 "$bundle.tmp/bin/FileCheck"
strip --strip-unneeded "$bundle.tmp/bin/FileCheck"
patchelf --set-rpath '$ORIGIN/../lib' "$bundle.tmp/bin/FileCheck"
for library in libzstd.so.1 libz.so.1; do
  [ -f "$bundle.tmp/lib/$library" ] || cp -L "/lib/x86_64-linux-gnu/$library" "$bundle.tmp/lib/"
done
cp -r /usr/include/flatbuffers /usr/include/nlohmann /usr/include/xxhash.h /usr/include/CLI \
  /usr/include/fmt "$bundle.tmp/include/"

lit_root=$(sed -n 's/^sys.path.insert(1, *"\(.*\)")$/\1/p' "$(command -v lit || echo /usr/lib/llvm-22/bin/lit)" | head -1)
[ -d "$lit_root/lit" ] || lit_root=/usr/lib/llvm-22/utils/lit
mkdir -p "$bundle.tmp/lit"
cp -r "$lit_root/lit" "$bundle.tmp/lit/"
find "$bundle.tmp/lit" -name __pycache__ -prune -exec rm -rf {} +
cat > "$bundle.tmp/bin/lit" <<'LIT'
#!/usr/bin/env python3
import os, sys
sys.path.insert(1, os.path.join(os.path.dirname(os.path.realpath(__file__)), "..", "lit"))
from lit.main import main
if __name__ == "__main__":
    main()
LIT
chmod +x "$bundle.tmp/bin/lit"

# The bundled dsc must run without the system's copies of its libraries.
LD_LIBRARY_PATH= "$bundle.tmp/bin/dsc" --version >/dev/null 2>&1 ||
  LD_LIBRARY_PATH= "$bundle.tmp/bin/dsc" --help >/dev/null

{
  echo "gpu bundle for $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?') (working tree may differ), made $(date -u +%FT%TZ)"
  echo "dsc from $build/bin/dsc; flatc $(flatc --version 2>/dev/null | awk '{print $3}');"
  echo "headers from /usr/include (flatbuffers, nlohmann, xxhash.h, CLI, fmt); lit from $lit_root"
  (cd "$bundle.tmp" && find . -type f -printf '%s\t%p\n' | sort -k2)
} > "$bundle.tmp/MANIFEST"

size_kib=$(du -sk "$bundle.tmp" | awk '{print $1}')
if [ "$size_kib" -gt $((limit_mib * 1024)) ]; then
  echo "gpu-bundle: $((size_kib / 1024)) MiB is over the ${limit_mib} MiB budget" >&2
  exit 1
fi
rm -rf "$bundle"
mv "$bundle.tmp" "$bundle"
echo "gpu-bundle: $bundle, $((size_kib / 1024)) MiB ($size_kib KiB)"

# The runtime too is built here, runtime-only as on the GPU machine (no MPI, no GoogleTest,
# the bundle's header and includes), so that no device time goes to compiling it. Its build
# tree names this checkout's absolute path; bench/gpu/sweep.sh links that path to its own
# root where they differ.
runtime_build=$root/build-gpu-rt
if [ ! -f "$runtime_build/build.ninja" ]; then
  cmake -G Ninja -S "$root" -B "$runtime_build" -DCMAKE_BUILD_TYPE=Release -DDSC_RUNTIME_ONLY=ON \
        -DDSC_PLAN_GENERATED_DIR="$bundle/generated" -DDSC_BUNDLED_INCLUDE_DIR="$bundle/include" \
        -DDSC_EXTRA_TOOLS_DIR="$bundle/bin" -DLLVM_EXTERNAL_LIT="$bundle/bin/lit" \
        -DCMAKE_DISABLE_FIND_PACKAGE_MPI=ON -DCMAKE_DISABLE_FIND_PACKAGE_GTest=ON >/dev/null ||
    { echo "gpu-bundle: configuring the runtime-only build failed" >&2; exit 1; }
fi
ninja -C "$runtime_build" dsrt dsrun dsbench dsp-dump dsp-roofline dseval >/dev/null ||
  { echo "gpu-bundle: building the runtime failed (ninja -C $runtime_build)" >&2; exit 1; }
echo "gpu-bundle: runtime built in $runtime_build"
if [ "$carry" = 1 ]; then
  mkdir -p "$root/build-gpu-carry"
  tar --exclude='*.o' --exclude='*.a' -cJf "$root/build-gpu-carry/bundle.tar.xz.tmp" \
      -C "$(dirname "$bundle")" "$(basename "$bundle")" -C "$root" build-gpu-rt
  mv "$root/build-gpu-carry/bundle.tar.xz.tmp" "$root/build-gpu-carry/bundle.tar.xz"
  packed_kib=$(du -sk "$root/build-gpu-carry/bundle.tar.xz" | awk '{print $1}')
  echo "gpu-bundle: build-gpu-carry/bundle.tar.xz, $((packed_kib / 1024)) MiB: carry build-gpu-carry"
fi
