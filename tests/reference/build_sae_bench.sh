#!/usr/bin/env bash
# Build the sae-bench reference environment (git-ignored) and regenerate tests/reference/sae_bench_metrics.json.
#
#   bash tests/reference/build_sae_bench.sh         # build .ref/sae-bench if missing, then regenerate
#
# sae-bench 0.6.0 pins numpy < 2 and datasets < 4 and pulls sae-lens, transformer-lens, sae-probes and
# torchvision, so it lives in its own venv (2.8 GB) with CPU torch installed first and kept by a constraint
# (an unpinned torch pulls a multi-GB CUDA build). torchvision is removed again: the PyPI build that
# matches torch 2.13 is a CUDA one, and with CPU torch its `torchvision::nms` operator fails to register,
# which breaks `import transformers` models (sae-bench's two evals used here never import torchvision).
# A fresh build takes about 3.5-4 minutes here (torch 1 min, sae-bench and its dependencies 2.5 min; 3m43s
# measured under a load average of 7 on 2 cores). sae_bench_metrics.py sets JAXTYPING_DISABLE=1: with the
# jaxtyping 0.3.11 and beartype 0.23.1 this resolves to, sae-bench's own top-k probing raises a shape-hint error.
# The inputs (tests/reference/sae_bench/) come from interplab's side: .venv/bin/python tests/reference/sae_bench_inputs.py
# tests/evals/test_reference_sae_bench.py reruns tests/reference/sae_bench_metrics.py whenever .ref/sae-bench
# exists and compares with the committed fixture.
set -euo pipefail
cd "$(dirname "$0")/../.."
VENV=.ref/sae-bench
if [ ! -x "$VENV/bin/python" ] || [ ! -f "$VENV/.built" ]; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet torch==2.13.0
  echo "torch==2.13.0" > "$VENV/constraints.txt"
  "$VENV/bin/pip" install --quiet "sae-bench==0.6.0" -c "$VENV/constraints.txt"
  "$VENV/bin/pip" uninstall --quiet --yes torchvision
  touch "$VENV/.built"
fi
[ "${BUILD_ONLY:-}" = 1 ] && exit 0  # `make refs`: the environment only; the tests regenerate into a temp folder
"$VENV/bin/python" tests/reference/sae_bench_metrics.py "${@:-tests/reference/sae_bench_metrics.json}"
