#!/usr/bin/env bash
# Build the pyvene reference environment (git-ignored) and regenerate tests/reference/pyvene_das.json.
#
#   bash tests/reference/build_pyvene.sh            # build .ref/pyvene if missing, then regenerate
#
# pyvene 0.1.8 pins an older transformers than interplab's, so it lives in its own venv with CPU torch
# installed first (an unpinned torch pulls a multi-GB CUDA build). tests/das/test_reference.py reruns
# tests/reference/pyvene_das.py whenever .ref/pyvene exists and compares with the committed fixture.
set -euo pipefail
cd "$(dirname "$0")/../.."
VENV=.ref/pyvene
if [ ! -x "$VENV/bin/python" ] || [ ! -f "$VENV/.built" ]; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet torch==2.13.0
  "$VENV/bin/pip" install --quiet pyvene==0.1.8 "transformers==4.51.3" safetensors
  touch "$VENV/.built"
fi
[ "${BUILD_ONLY:-}" = 1 ] && exit 0  # `make refs`: the environment only; the tests regenerate into a temp folder
"$VENV/bin/python" tests/reference/pyvene_das.py "${@:-tests/reference/pyvene_das.json}"
