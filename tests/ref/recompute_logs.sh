#!/bin/sh
# Recomputes every AIS diagnostic, alpha, coefficient, pass@k and the entropy of real
# train logs from their trajectories, independently of the C code
# (tests/ref/check_h5log.py --recompute, numpy in float64). Three short runs of a random
# tiny LLaDA model cover both combines, both populations, both forms of nu, the three
# weight estimators, the sequence, geo and token levels, d1's evaluation lengths (and
# eval.gen_steps) and the gradient cosine.
#   sh tests/ref/recompute_logs.sh BUILD_DIR [PYTHON]
# PYTHON needs h5py and numpy (default: the notebook environment build-nb/venv, else
# python3). Exit status: 0 pass, 1 a check failed, 2 bad arguments or a missing tool.
set -eu
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
if [ $# -lt 1 ] || [ ! -x "$1/dllm-rl" ]; then
  echo "usage: $0 BUILD_DIR [PYTHON] (BUILD_DIR/dllm-rl must be built)" >&2
  exit 2
fi
BIN=$(cd "$1" && pwd)/dllm-rl
PY=${2:-$ROOT/build-nb/venv/bin/python3}
[ -x "$PY" ] || PY=python3
if ! "$PY" -c 'import h5py, numpy' 2>/dev/null; then
  echo "recompute_logs: $PY has no h5py and numpy (pip install h5py numpy)" >&2
  exit 2
fi
WORK=$(mktemp -d "${TMPDIR:-/tmp}/dllm-recompute.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"
"$BIN" init-model --arch llada --preset tiny --seed 3 --out model >/dev/null

run() { # NAME CORRECTION-MAPPING [--set KEY=VALUE ...]
  name=$1 corr=$2
  shift 2
  cat > "$name.yaml" <<EOF
experiment: $name
seed: 7
model: {path: model}
task: {name: sudoku, format: plain, chat: plain, train: {n: 64}, max_blanks: 6}
rollout: {precision: fp8, group_size: 4, gen_length: 12, block_length: 6, steps: 6,
          temperature: 1.0}
likelihood: {mc_samples: 2, shrink: 1}
grpo: {steps: 2, prompts_per_step: 2, inner_steps: 1}
correction: $corr
optim: {lr: 3e-3}
eval: {every: 2, n: 2, gen_length: 12, block_length: 6, steps: 6}
log: {dir: runs}
checkpoint: {every: 0}
EOF
  OMP_NUM_THREADS=1 "$BIN" train "$name.yaml" --quiet "$@"
  "$PY" "$ROOT/tests/ref/check_h5log.py" "runs/$name/log.h5" --recompute
}

status=0
run linear-elbo "{method: ais, estimator: elbo, ais: {population: all, variance: total}}" ||
  status=1
run logistic-trajectory "{method: ais, estimator: trajectory, level: geo, cap: .inf,
  ais: {combine: logistic, population: all, variance: excess, eta: 0.5}}" || status=1
run token-informative "{method: ais, estimator: one_step, level: token}" \
  --set grpo.ratio=token --set grpo.logp_estimator=one_step --set log.grad_cosine=true \
  --set "eval.gen_lengths=[12, 24]" || status=1
# eval.gen_steps replaces d1's length / 2 at each length
out=$(OMP_NUM_THREADS=1 "$BIN" train token-informative.yaml --set experiment=gen-steps \
  --set grpo.steps=0 --set grpo.ratio=token --set grpo.logp_estimator=one_step \
  --set "eval.gen_lengths=[12, 24]" --set "eval.gen_steps=[2, 24]" 2>&1) ||
  status=1
for want in "eval at gen_length 12 (block 6, 2 steps)" "eval at gen_length 24 (block 6, 24 steps)"; do
  printf '%s\n' "$out" | grep -qF "$want" || { echo "recompute_logs: no '$want' in:"; \
    printf '%s\n' "$out"; status=1; }
done
exit $status
