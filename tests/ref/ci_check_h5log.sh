#!/bin/sh
# CI for the independent reader of the run log (tests/ref/check_h5log.py, h5py): the
# files tests/test_h5log writes with DLLM_H5LOG_EXPORT (the exact values the C tests
# check, and a synthetic run) and the log of a short `train` run on a random tiny
# model (2 GRPO steps with an evaluation each), each read back with h5py; and the studies'
# mismatch script (notebooks_export/mismatch_windows.py) on fabricated and real logs.
#   sh tests/ref/ci_check_h5log.sh BUILD_DIR
# h5py and numpy go to a throwaway virtual environment (removed at exit).
# Exit status: 0 pass, 1 a check failed, 2 bad arguments, 77 skipped (no virtual
# environment or no packages: the reason is printed).
set -eu
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
if [ $# -ne 1 ] || [ ! -x "$1/dllm-rl" ] || [ ! -x "$1/tests/test_h5log" ]; then
  echo "usage: $0 BUILD_DIR (with dllm-rl and tests/test_h5log built: make check)" >&2
  exit 2
fi
BUILD=$(cd "$1" && pwd)
t0=$(date +%s)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/dllm-h5log-ci.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

if ! python3 -m venv "$WORK/venv" >"$WORK/venv.log" 2>&1; then
  echo "SKIP: check_h5log: python3 -m venv failed (Debian: apt-get install python3-venv):"
  tail -n 3 "$WORK/venv.log"
  exit 77
fi
PY=$WORK/venv/bin/python3
if ! "$PY" -m pip install -q --disable-pip-version-check h5py numpy >"$WORK/pip.log" 2>&1; then
  echo "SKIP: check_h5log: pip could not install h5py and numpy (no network or no wheel):"
  tail -n 3 "$WORK/pip.log"
  exit 77
fi
t1=$(date +%s)

cd "$WORK"
# the export is written before the suite runs (which `make check` runs anyway)
DLLM_H5LOG_EXPORT=$WORK DLLM_BIN=$BUILD/dllm-rl "$BUILD/tests/test_h5log" >h5log_test.out 2>&1 || true
if [ ! -s test_values.h5 ] || [ ! -s demo.h5 ]; then
  cat h5log_test.out
  echo "check_h5log: tests/test_h5log wrote no test_values.h5 and demo.h5" >&2
  exit 1
fi
"$BUILD/dllm-rl" init-model --arch llada --preset tiny --seed 3 --out model >/dev/null
cat > run.yaml <<EOF
experiment: h5
seed: 1
model: {path: model}
task: {name: sudoku, format: plain, chat: plain, train: {n: 16}, max_blanks: 6}
rollout: {precision: fp8, group_size: 4, gen_length: 12, block_length: 12, steps: 6}
grpo: {steps: 2, prompts_per_step: 2, inner_steps: 1}
correction: {method: ais}
eval: {every: 1, n: 4, gen_length: 12, block_length: 12, steps: 6}
log: {dir: runs}
checkpoint: {every: 0}
EOF
OMP_NUM_THREADS=1 "$BUILD/dllm-rl" train run.yaml --quiet

fail=0
"$PY" "$ROOT/tests/ref/check_h5log.py" test_values.h5 --test-values || fail=1
"$PY" "$ROOT/tests/ref/check_h5log.py" demo.h5 || fail=1
"$PY" "$ROOT/tests/ref/check_h5log.py" runs/h5/log.h5 || fail=1
# the studies' mismatch script: on fabricated logs with a known mismatch, then on this
# real run's log (its windows parse)
"$PY" "$ROOT/tests/ref/test_mismatch_windows.py" || fail=1
"$PY" "$ROOT/notebooks_export/mismatch_windows.py" runs/h5 --window 1 >windows.out || fail=1
t2=$(date +%s)
echo "check_h5log: packages $((t1 - t0)) s, logs and checks $((t2 - t1)) s"
[ $fail -eq 0 ] && echo "check_h5log: every log read back with h5py as the schema says"
exit $fail
