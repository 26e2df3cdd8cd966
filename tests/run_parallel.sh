#!/usr/bin/env bash
# `make test`'s runner: three pytest processes share the 2 cores, one torch thread each: the notebooks (marker
# `notebook`, each in its own kernel), the first half of the suite's folders (with the browser tests, then the
# notebooks they export) and the second half (with the NDIF tests, which start one server per run, and the Binder
# rehearsal). Single-threaded processes time-share the cores without
# the spin-waits of an oversubscribed two-threaded torch; one serial run no longer fits 30 minutes on 2 cores.
# Each run prints its 15 slowest tests; the two background runs' reports follow the foreground one's. Extra
# arguments go to every run. Exits non-zero if any run fails.
set -u
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
LOGS=build/test-logs
mkdir -p "$LOGS"
rm -f "$LOGS/notebook-peaks.jsonl"  # tests/notebooks/test_notebooks.py appends each notebook kernel's memory
FIRST=(tests/autointerp tests/browser tests/circuits tests/das tests/data tests/devices tests/docs tests/evals
       tests/export tests/features)
SECOND=()
for folder in tests/*/; do
  folder=${folder%/}
  [[ " ${FIRST[*]} " == *" $folder "* ]] || SECOND+=("$folder")
done

ok() { [ "$1" -eq 0 ] || [ "$1" -eq 5 ]; }  # 5: no test selected in that run (e.g. PYTEST_ARGS="-k lens")

# The notebooks run leaves tests/browser's notebook tests to the first half, which runs them after its own.
"$PY" -m pytest -p no:cacheprovider --durations=15 -m notebook --ignore=tests/browser "$@" > "$LOGS/notebooks.log" 2>&1 &
notebooks=$!
{
  "$PY" -m pytest -p no:cacheprovider --durations=15 -m "not notebook" "${FIRST[@]}" "$@"
  rc=$?
  "$PY" -m pytest -p no:cacheprovider --durations=15 -m notebook tests/browser "$@"
  browser_rc=$?
  ok "$rc" && ok "$browser_rc"
} > "$LOGS/first.log" 2>&1 &
first=$!
"$PY" -m pytest --durations=15 -m "not notebook" "${SECOND[@]}" "$@"
second_rc=$?
wait "$first"; first_rc=$?
wait "$notebooks"; notebooks_rc=$?
for log in first notebooks; do
  echo "---- $log (pytest log $LOGS/$log.log) ----"
  cat "$LOGS/$log.log"
done
echo "---- notebook kernels' memory, kB ($LOGS/notebook-peaks.jsonl) ----"
cat "$LOGS/notebook-peaks.jsonl" 2>/dev/null
echo "exit codes: first half $first_rc, second half $second_rc, notebooks $notebooks_rc"
ok "$first_rc" && ok "$second_rc" && ok "$notebooks_rc"
