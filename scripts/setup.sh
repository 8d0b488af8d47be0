#!/usr/bin/env bash
# Shared by build.sh and test.sh: installs the Debian packages the build needs (only when
# one is missing), then configures build/ with ninja (only once; ninja re-runs CMake itself).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${DSC_BUILD_DIR:-$ROOT/build}"

PACKAGES=(
  cmake ninja-build g++ python3
  python3-venv python3-dev  # python/run_tests.sh builds the package in a venv of its own
  llvm-22-dev llvm-22-tools libmlir-22-dev mlir-22-tools
  libonnx-dev libprotobuf-dev libgtest-dev libonnx-testdata
  flatbuffers-compiler libflatbuffers-dev libxxhash-dev
  zlib1g-dev libzstd-dev libtinfo-dev nlohmann-json3-dev
  libcli11-dev libfmt-dev  # the tools' command line (tools/common)
  libopenmpi-dev openmpi-bin
  libdnnl2  # oneDNN: the CPU backend's sgemm, opened at run time (ops/fast/Linear.cpp)
)
# More for some builds: .ci/run adds clang-22 and libFuzzer for its sanitised fuzz build.
read -r -a extra <<< "${DSC_EXTRA_PACKAGES:-}"
PACKAGES+=("${extra[@]}")

missing=()
for package in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" ||
    missing+=("$package")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
fi

if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  cmake -G Ninja -S "$ROOT" -B "$BUILD_DIR" \
    -DLLVM_EXTERNAL_LIT=/usr/lib/llvm-22/bin/lit ${DSC_CMAKE_ARGS:-}
fi
