#!/usr/bin/env bash
# ctest's python-package test: the README's Python steps, as a new user takes them, in a
# venv of the build's own (BUILD_DIR/python-venv, made once): `pip install './python[test]'`
# from PyPI, then the package's pytest suite against this build's libdsrt and dsc.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD_DIR="$(cd "${1:-$ROOT/build}" && pwd)"
VENV="$BUILD_DIR/python-venv"
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
# Uninstalled first: the version does not change between builds, so pip would keep the
# package built from an older libdsrt.
"$VENV/bin/pip" uninstall -q -y dsrt >/dev/null 2>&1 || true
DSRT_BUILD_DIR="$BUILD_DIR" "$VENV/bin/pip" install -q --disable-pip-version-check \
    "$ROOT/python[test]"
cd "$BUILD_DIR"
DSRT_BUILD_DIR="$BUILD_DIR" exec "$VENV/bin/python" -m pytest -q -p no:cacheprovider \
    "$ROOT/python/tests"
