#!/bin/sh
# The CPU quickstart: a tiny LLaDA-architecture model learns 4x4 Sudoku.
#   1. 500 solver-made SFT examples; 2. masked-diffusion SFT warm start;
#   3. GRPO with FP8 rollouts (the fast FP8 product) and the AIS correction, evaluated on 500 held-out
#      puzzles before RL (= the SFT model) and after.
#   --control also runs the SFT-only control: the SFT model trained by SFT for
#   about as long as the RL phase took, evaluated on the same puzzles.
# Run from the repository root after building (build/dllm-rl); outputs go to runs/.
set -eu
BIN=${DLLM_BIN:-build/dllm-rl}
# The results depend on the thread count (the order of floating-point sums): the
# README's numbers are for 2 threads.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
# ... and for OpenBLAS as the fp32 GEMM. The tiny model's SFT is sensitive to the
# summation order: on oneDNN (the default where configure finds it) the same recipe
# gave an SFT model of 0.484 that 60 RL steps did not improve (docs/RESULTS.md).
export DLLM_GEMM=${DLLM_GEMM:-openblas}
# ... and for OpenBLAS's Haswell kernels, which it picks by CPU: on an Intel AVX-512 CPU
# it would take its SkylakeX kernels, which sum in another order (the same recipe on an
# Intel Xeon gave an SFT model of 0.420 and no significant RL gain, +0.014 +- 0.020; with
# the Haswell kernels, the README's SFT model bit for bit and +0.048 +- 0.017). Any
# AVX2 CPU runs them.
if [ -z "${OPENBLAS_CORETYPE:-}" ] && grep -qw avx2 /proc/cpuinfo 2>/dev/null; then
  export OPENBLAS_CORETYPE=Haswell
fi
RUNS=${RUNS:-runs}
mkdir -p "$RUNS"
if [ -e "$RUNS/quickstart-sft" ] || [ -e "$RUNS/quickstart-rl" ]; then
  echo "quickstart: $RUNS/quickstart-* exist already; remove them (or set RUNS=dir) to start again" >&2
  exit 2
fi
t0=$(date +%s)
"$BIN" tasks sft-data sudoku --n 500 --seed 101 --max-blanks 8 > "$RUNS/quickstart-sft.jsonl"
"$BIN" sft configs/quickstart-sft.yaml --set log.dir="$RUNS" --set data.train="$RUNS/quickstart-sft.jsonl"
t1=$(date +%s)
"$BIN" train configs/quickstart.yaml --set log.dir="$RUNS" --set model.path="$RUNS/quickstart-sft/ckpt/latest"
t2=$(date +%s)
echo
echo "quickstart: SFT $((t1 - t0)) s, RL $((t2 - t1)) s, total $((t2 - t0)) s"
"$BIN" inspect "$RUNS/quickstart-rl" | sed -n '/^eval/,$p'
if [ "${1:-}" = "--control" ]; then
  # the same extra time as SFT: steps at the measured SFT rate
  sft_steps=$(sed -n 's/^sft: *{ *steps: *\([0-9]*\).*/\1/p' configs/quickstart-sft.yaml)
  extra=$(( sft_steps * (t2 - t1) / (t1 - t0 > 0 ? t1 - t0 : 1) ))
  echo "control: $extra more SFT steps from the SFT model"
  "$BIN" sft configs/quickstart-sft.yaml --set log.dir="$RUNS" --set experiment=quickstart-control \
    --set data.train="$RUNS/quickstart-sft.jsonl" --set model.path="$RUNS/quickstart-sft/ckpt/latest" \
    --set sft.steps="$extra" --set optim.warmup=0 --quiet
  "$BIN" train configs/quickstart.yaml --set log.dir="$RUNS" --set experiment=quickstart-control-eval \
    --set model.path="$RUNS/quickstart-control/ckpt/latest" --set grpo.steps=0 --quiet
  "$BIN" inspect "$RUNS/quickstart-control-eval" | sed -n '/^eval/,$p'
  # RL against the control, item by item on the same 500 puzzles
  "$BIN" inspect "$RUNS/quickstart-rl" --against "$RUNS/quickstart-control-eval" | sed -n '/^paired/,$p'
fi
