#!/usr/bin/env bash
# Build SAEDashboard's reference environment (git-ignored) and regenerate tests/reference/neuronpedia_batch.json.
#
#   bash tests/reference/build_sae_dashboard.sh     # build .ref/sae_dashboard if missing, then regenerate
#
# sae-dashboard 0.8.0 declares transformer-lens, sae-lens and more; its Neuronpedia batch classes
# (sae_dashboard/neuronpedia/neuronpedia_dashboard.py) need numpy only, so the wheel goes in without its
# dependencies. The fixture is interplab's export of tests/features/test_neuronpedia.py's data, read by those classes
# and written back by them; tests/features/test_neuronpedia.py compares the export with it (and reruns the round trip
# whenever .ref/sae_dashboard exists).
set -euo pipefail
cd "$(dirname "$0")/../.."
VENV=.ref/sae_dashboard
if [ ! -x "$VENV/bin/python" ] || [ ! -f "$VENV/.built" ]; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet numpy
  "$VENV/bin/pip" install --quiet --no-deps sae-dashboard==0.8.0
  touch "$VENV/.built"
fi
[ "${BUILD_ONLY:-}" = 1 ] && exit 0  # `make refs`: the environment only
PY=${PY:-.venv/bin/python}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
"$PY" -c "import sys; sys.path.insert(0, '.'); from tests.features.test_neuronpedia import exported; exported(sys.argv[1])" "$OUT"
"$VENV/bin/python" tests/reference/sae_dashboard_batch.py "$OUT/batch-0.json" tests/reference/neuronpedia_batch.json
