#!/bin/sh
# CI for the sweep notebook: runs a tiny sweep with the built binary (a random tiny
# LLaDA model, 2 arms x 2 seeds, 3 GRPO steps, an 8-item eval every step, one thread
# per run), renders the notebook over it headless, and fails unless every figure
# exists and is not empty, the executed notebook has no error output and no metric
# was reported absent; then the reproduction study's tables (repro_tables.py) over it.
#   sh notebooks_export/ci_sweep_notebook.sh BUILD_DIR
# Python packages go to a virtual environment, created when missing: NB_VENV
# (default build-nb/venv under the repository root). KEEP=1 keeps the work directory.
# Exit status: 0 pass, 1 a check failed, 2 bad arguments or a missing tool.
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
if [ $# -ne 1 ]; then
  echo "usage: $0 BUILD_DIR" >&2
  exit 2
fi
if [ ! -x "$1/dllm-rl" ]; then
  echo "ci_sweep_notebook: $1/dllm-rl: no built binary there (build first)" >&2
  exit 2
fi
BIN=$(cd "$1" && pwd)/dllm-rl
VENV=${NB_VENV:-$ROOT/build-nb/venv}
PY=$VENV/bin/python3
t0=$(date +%s)

if ! "$PY" -c 'import h5py, nbformat, nbclient, nbconvert, ipykernel, matplotlib, yaml, pandas' \
    2>/dev/null; then
  echo "ci_sweep_notebook: installing the notebook's packages into $VENV"
  python3 -m venv "$VENV" || {
    echo "ci_sweep_notebook: python3 -m venv failed (Debian: apt-get install python3-venv)" >&2
    exit 2
  }
  "$PY" -m pip install -q --disable-pip-version-check \
    h5py nbformat nbconvert nbclient ipykernel matplotlib pyyaml pandas
fi
t1=$(date +%s)

WORK=$(mktemp -d "${TMPDIR:-/tmp}/dllm-nb-ci.XXXXXX")
if [ "${KEEP:-0}" = 1 ]; then
  echo "ci_sweep_notebook: work directory $WORK kept"
else
  trap 'rm -rf "$WORK"' EXIT
fi
cd "$WORK"
"$BIN" init-model --arch llada --preset tiny --seed 3 --out model >/dev/null
cat > base.yaml <<EOF
experiment: x
seed: 1
model: {path: model}
task: {name: sudoku, format: plain, chat: plain, train: {n: 64}, max_blanks: 6}
rollout: {precision: fp8, group_size: 4, gen_length: 12, block_length: 12, steps: 6,
          temperature: 1.0}
likelihood: {mc_samples: 2}
grpo: {steps: 3, prompts_per_step: 2, inner_steps: 1}
# every completion: the tiny runs' groups are mostly flat, and the figures need diagnostics
correction: {method: ais, estimator: elbo, ais: {population: all}}
optim: {lr: 3e-3}
eval: {every: 1, n: 8, gen_length: 12, block_length: 12, steps: 6}
log: {dir: runs}
checkpoint: {every: 3, keep: 1}
EOF
# the reference arm's weights are exactly 1 (|d| = 0): the notebook's zero case
cat > tiny.yaml <<EOF
name: tiny
base: base.yaml
arms:
  - {name: reference, rollout.precision: trainer, correction.method: none}
  - {name: fp8-ais, rollout.precision: fp8, correction.method: ais}
grid:
  seed: [1, 2]
EOF
OMP_NUM_THREADS=2 "$BIN" sweep tiny.yaml --jobs 2
t2=$(date +%s)

"$PY" "$ROOT/notebooks_export/render_sweep.py" runs/tiny --out nb --check --strict
fail=0
for f in $("$PY" -c "import sys; sys.path.insert(0, '$ROOT/notebooks_export'); \
import build_sweep; print(' '.join(build_sweep.FIGURES))"); do
  if [ ! -s "nb/sweep_figures/$f.png" ]; then
    echo "ci_sweep_notebook: figure $f.png is missing or empty" >&2
    fail=1
  fi
done
for f in nb/sweep.ipynb nb/sweep.html; do
  [ -s "$f" ] || { echo "ci_sweep_notebook: $f is missing or empty" >&2; fail=1; }
done
if grep -q '"output_type": "error"' nb/sweep.ipynb; then
  echo "ci_sweep_notebook: the executed notebook has an error output" >&2
  fail=1
fi
# the committed executed copy must hold the builder's current cells
if ! "$PY" - "$ROOT/notebooks_export" <<'PYEOF'
import sys
import nbformat
sys.path.insert(0, sys.argv[1])
import build_sweep
kept = nbformat.read(sys.argv[1] + "/sweep.ipynb", as_version=4)
src = lambda nb: [c.source for c in nb.cells[1:]]  # the first cell says what it ran on
if src(kept) != src(build_sweep.build()):
    sys.exit("ci_sweep_notebook: notebooks_export/sweep.ipynb is older than build_sweep.py: "
             "render it again (notebooks_export/README.md, 'The committed copy')")
PYEOF
then
  fail=1
fi
# the reproduction study's tables (docs/REPRODUCTION.md) over the same sweep: every
# arm has a row in each table
"$PY" "$ROOT/notebooks_export/repro_tables.py" runs/tiny --window 1 > tables.md || {
  echo "ci_sweep_notebook: repro_tables.py failed" >&2
  fail=1
}
for arm in reference fp8-ais; do
  n=$(grep -c "^| $arm | 2 | " tables.md || true)
  if [ "$n" -ne 4 ]; then
    echo "ci_sweep_notebook: repro_tables.py: $n rows for $arm, expected 4 (two windows tables, the paired one, the curves)" >&2
    fail=1
  fi
done
if ! grep -q "^| fp8-ais - reference | 2 | " tables.md; then
  echo "ci_sweep_notebook: repro_tables.py: no paired curve row for fp8-ais" >&2
  fail=1
fi
t3=$(date +%s)
echo "ci_sweep_notebook: packages $((t1 - t0)) s, sweep $((t2 - t1)) s, notebook $((t3 - t2)) s"
if [ $fail -ne 0 ]; then
  exit 1
fi
echo "ci_sweep_notebook: every figure present, no error output"
