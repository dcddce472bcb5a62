#!/bin/sh
# CI for log.tensorboard: TensorBoard's own reader (installed from PyPI into a
# throwaway virtual environment) reads the event files of a tiny train run and a tiny
# sft run, each cut after its last step but one checkpoint back and resumed, and
# check_tensorboard.py compares every scalar with `dllm-rl inspect --csv` (and the
# evaluations with log.h5): the resumed steps must replace the first attempt's.
#   sh tests/ref/ci_tensorboard.sh BUILD_DIR
# TB_VENV=DIR uses a virtual environment that already has tensorboard and h5py.
# Exit status: 0 pass (or SKIP: no venv or no package index), 1 a check failed,
# 2 bad arguments.
set -eu
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
if [ $# -ne 1 ] || [ ! -x "$1/dllm-rl" ]; then
  echo "usage: $0 BUILD_DIR (with a built dllm-rl)" >&2
  exit 2
fi
BIN=$(cd "$1" && pwd)/dllm-rl
WORK=$(mktemp -d "${TMPDIR:-/tmp}/dllm-tb-ci.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
t0=$(date +%s)

if [ -n "${TB_VENV:-}" ] && "$TB_VENV/bin/python3" -c 'import tensorboard, h5py' 2>/dev/null; then
  PY=$TB_VENV/bin/python3   # a venv of one's own, for running this again by hand
elif ! python3 -m venv "$WORK/venv" >/dev/null 2>&1; then
  echo "SKIP: python3 -m venv failed (Debian: apt-get install python3-venv)"
  exit 0
elif ! "$WORK/venv/bin/pip" install -q --disable-pip-version-check tensorboard h5py \
    >"$WORK/pip.log" 2>&1; then
  tail -3 "$WORK/pip.log"
  echo "SKIP: tensorboard could not be installed from the package index (offline?)"
  exit 0
else
  PY=$WORK/venv/bin/python3
fi
t1=$(date +%s)
CHECK=$ROOT/tests/ref/check_tensorboard.py

# A kill after step LAST's log rows and before its checkpoint, as a run leaves it:
# the newest checkpoint goes, ckpt/latest points at the one before, and the event
# file ends in a record cut short (the last one's header and 3 bytes of its data
# again, as a kill inside a write leaves it).
cut_back() {   # RUN_DIR LAST KEPT
  rm -rf "$1/ckpt/step-$2"
  ln -sfn "step-$3" "$1/ckpt/latest"
  "$PY" - "$1"/events.out.tfevents.* <<'EOF'
import struct, sys
path = sys.argv[-1]
data = open(path, "rb").read()
at = last = 0
while at < len(data):
    last, at = at, at + 16 + struct.unpack("<Q", data[at:at + 8])[0]
open(path, "ab").write(data[last:last + 15])
EOF
}

cd "$WORK"
export OMP_NUM_THREADS=1
"$BIN" init-model --arch llada --preset tiny --seed 3 --out model >/dev/null
cat > train.yaml <<EOF
experiment: rl
seed: 1
model: {path: model}
task: {name: sudoku, format: plain, chat: plain, train: {n: 64}, max_blanks: 6}
rollout: {precision: fp8, group_size: 4, gen_length: 12, block_length: 12, steps: 6,
          temperature: 1.0}
likelihood: {mc_samples: 2}
grpo: {steps: 4, prompts_per_step: 2, inner_steps: 1}
correction: {method: ais, estimator: elbo}
optim: {lr: 3e-3}
eval: {every: 2, n: 8, gen_length: 12, block_length: 12, steps: 6}
log: {dir: runs, tensorboard: true}
checkpoint: {every: 2, keep: 0}
EOF
"$BIN" train train.yaml --quiet
"$PY" "$CHECK" "$BIN" runs/rl
cut_back runs/rl 4 2
"$BIN" train --resume runs/rl --quiet
"$PY" "$CHECK" "$BIN" runs/rl

"$BIN" tasks sft-data sudoku --n 40 --seed 1 --max-blanks 6 > sft.jsonl
cat > sft.yaml <<EOF
experiment: sft
seed: 1
model: {path: model}
data: {train: sft.jsonl, max_len: 64}
sft: {steps: 6, batch_size: 4}
optim: {lr: 3e-3}
log: {dir: runs, every: 1, tensorboard: true}
checkpoint: {every: 3, keep: 0}
EOF
"$BIN" sft sft.yaml --quiet
cut_back runs/sft 6 3
"$BIN" sft --resume runs/sft --quiet
"$PY" "$CHECK" "$BIN" runs/sft
echo "ci_tensorboard: passed (install $((t1 - t0)) s, runs and checks $(( $(date +%s) - t1 )) s)"
