#!/usr/bin/env bash
# Build the circuit-tracer reference environment (git-ignored) and regenerate tests/reference/circuit_tracer_graph.*
# and tests/reference/circuit_tracer_clt_graph.* (a cross-layer transcoder)
#
#   bash tests/reference/build_circuit_tracer.sh          # build .ref/circuit-tracer if missing, then regenerate
#
# circuit-tracer 0.5.0 pins transformers >= 4.56, <= 4.57.3, nnsight >= 0.6 and transformer-lens >= 2.16, so it
# lives in its own venv with CPU torch installed first (an unpinned torch pulls a multi-GB CUDA build).
# tests/circuits/test_reference_circuit_tracer.py reruns tests/reference/circuit_tracer_graph.py whenever
# .ref/circuit-tracer exists and compares interplab's graph with the committed fixtures.
set -euo pipefail
cd "$(dirname "$0")/../.."
VENV=.ref/circuit-tracer
if [ ! -x "$VENV/bin/python" ] || [ ! -f "$VENV/.built" ]; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet torch==2.13.0
  "$VENV/bin/pip" install --quiet circuit-tracer==0.5.0 "transformers==4.57.3" "nnsight==0.6.3" \
    "transformer-lens==2.18.0" safetensors
  touch "$VENV/.built"
fi
[ "${BUILD_ONLY:-}" = 1 ] && exit 0  # `make refs`: the environment only; the tests regenerate into a temp folder
"$VENV/bin/python" tests/reference/circuit_tracer_graph.py "${@:-tests/reference/circuit_tracer_graph.json}"
# the cross-layer transcoder's graph (reads the tiny models the line above wrote)
"$VENV/bin/python" tests/reference/circuit_tracer_clt_graph.py tests/reference/circuit_tracer_clt_graph.json
