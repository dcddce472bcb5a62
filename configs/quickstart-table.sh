#!/bin/sh
# The quickstart's claim over seeds and GEMM libraries (docs/REPRODUCTION.md, "The
# quickstart's claim on any machine"). For each library named (default: openblas dnnl):
#   1. five SFT models of the quickstart's recipe (configs/quickstart-sft.yaml, SFT
#      seeds 1-5), each validated every 500 steps on 1,000 held-out puzzles of seed 1000
#      and kept at its best checkpoint (ckpt/best);
#   2. the quickstart's RL phase from each, RL seeds 1 and 2, evaluated on 1,000
#      held-out puzzles of the RL seed (configs/sweeps/quickstart-table-LIB.yaml);
#   3. the baselines on the same puzzles: the best SFT checkpoint (the RL runs' step 0),
#      the last SFT checkpoint, and rejection-sampling fine-tuning (rft-data from the best
#      SFT checkpoint with the RL run's config and seed, then configs/quickstart-rft.yaml).
# One thread per run (the results depend on the thread count). Everything goes to
# runs/quickstart-table/LIB; running it again skips what is done and resumes what was
# interrupted. Tables: python3 notebooks_export/quickstart_table.py runs/quickstart-table
# Run from the repository root after building (build/dllm-rl), or set DLLM_BIN.
set -eu
BIN=${DLLM_BIN:-build/dllm-rl}
LIBS=${*:-openblas dnnl}
export OMP_NUM_THREADS=1
# OpenBLAS's Haswell kernels on any AVX2 CPU, as the quickstart (configs/quickstart.sh)
if [ -z "${OPENBLAS_CORETYPE:-}" ] && grep -qw avx2 /proc/cpuinfo 2>/dev/null; then
  export OPENBLAS_CORETYPE=Haswell
fi
T=runs/quickstart-table
mkdir -p "$T"
if [ ! -s "$T/sft.jsonl" ]; then
  "$BIN" tasks sft-data sudoku --n 500 --seed 101 --max-blanks 8 > "$T/sft.jsonl.tmp"
  mv "$T/sft.jsonl.tmp" "$T/sft.jsonl"
fi

# An sft run: continued from its checkpoint when it has one (a finished run says so and
# is left alone), else started (replacing what a start that wrote no checkpoint left).
sft_run() {
  dir=$1
  shift
  if [ -e "$dir/ckpt/latest/state.json" ]; then
    "$BIN" sft --resume "$dir" --quiet
  else
    "$BIN" sft "$@" --force --quiet
  fi
}

# A model evaluated on RL seed R's 1,000 held-out puzzles as the RL runs evaluate
# (train with no step: eval/sudoku-step-0.txt), unless done.
eval_run() {
  dir=$1 model=$2 seed=$3
  [ -e "$dir/eval/sudoku-step-0.txt" ] && return 0
  "$BIN" train configs/quickstart.yaml --set log.dir="$(dirname "$dir")" \
    --set experiment="$(basename "$dir")" --set model.path="$model" --set seed="$seed" \
    --set grpo.steps=0 --set eval.n=1000 --force --quiet
}

failed=0
for LIB in $LIBS; do
  case $LIB in openblas|dnnl) ;; *) echo "quickstart-table.sh: unknown library '$LIB' (openblas or dnnl)" >&2; exit 2 ;; esac
  export DLLM_GEMM=$LIB
  D=$T/$LIB
  mkdir -p "$D"
  for S in 1 2 3 4 5; do
    echo "quickstart-table: $LIB: SFT seed $S"
    sft_run "$D/sft_seed=$S" configs/quickstart-sft.yaml --set seed=$S \
      --set experiment=sft_seed=$S --set log.dir="$D" --set data.train="$T/sft.jsonl" \
      --set sft.eval_every=500 --set sft.eval_n=1000 --set sft.eval_seed=1000 \
      --set sft.keep_best=true --set checkpoint.keep=1
  done
  echo "quickstart-table: $LIB: RL"
  # a failed run is reported and the rest goes on; so does this script, exiting 1 at the end
  "$BIN" sweep configs/sweeps/quickstart-table-$LIB.yaml --jobs 1 || failed=1
  for S in 1 2 3 4 5; do
    for R in 1 2; do
      echo "quickstart-table: $LIB: baselines of SFT seed $S, RL seed $R"
      best=$D/sft_seed=$S/ckpt/best
      eval_run "$D/sft-last/sft$S""_seed=$R" "$D/sft_seed=$S/ckpt/latest" $R
      data=$D/rft/sft$S""_seed=$R.jsonl
      mkdir -p "$D/rft"
      [ -e "$data" ] || "$BIN" rft-data configs/quickstart.yaml --set model.path="$best" \
        --set seed=$R --out "$data" --quiet
      if [ ! -s "$data" ]; then
        echo "quickstart-table: $data: no correct completion, so no RFT model" >&2
        failed=1
        continue
      fi
      sft_run "$D/rft/sft$S""_seed=$R" configs/quickstart-rft.yaml --set log.dir="$D/rft" \
        --set experiment=sft$S""_seed=$R --set model.path="$best" --set data.train="$data"
      eval_run "$D/rft-eval/sft$S""_seed=$R" "$D/rft/sft$S""_seed=$R/ckpt/latest" $R
    done
  done
done
echo "quickstart-table: done; tables: python3 notebooks_export/quickstart_table.py $T"
exit $failed
