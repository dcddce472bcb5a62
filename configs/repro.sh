#!/bin/sh
# The CPU reproduction study (docs/REPRODUCTION.md): reference, FP8 and NVFP4 rollouts
# with none, tis, mis, fixed and ais; five seeds.
#   1. 500 solver-made SFT examples (the quickstart's); 2. a 2,000-step masked-diffusion
#   SFT warm start (runs/repro-sft); 3. the sweep configs/sweeps/repro.yaml (55 runs of
#   30 GRPO steps); 4. its summary, runs/repro/summary.md.
# One thread everywhere: the results depend on the thread count (the order of
# floating-point sums), and docs/REPRODUCTION.md's table is for one thread on OpenBLAS.
# Run from the repository root after building (build/dllm-rl); outputs go to runs/.
# Running it again skips what is done (the sweep resumes interrupted runs).
set -eu
BIN=${DLLM_BIN:-build/dllm-rl}
export OMP_NUM_THREADS=1
# The table was made with OpenBLAS as the fp32 GEMM; builds that find oneDNN default
# to it (docs/BUILDING.md, "The fp32 GEMM library"), which sums in another order.
export DLLM_GEMM=${DLLM_GEMM:-openblas}
# ... and OpenBLAS's Haswell kernels (docs/REPRODUCTION.md, "Reproducibility"), which
# any AVX2 CPU runs; OpenBLAS would pick SkylakeX on an Intel AVX-512 CPU.
if [ -z "${OPENBLAS_CORETYPE:-}" ] && grep -qw avx2 /proc/cpuinfo 2>/dev/null; then
  export OPENBLAS_CORETYPE=Haswell
fi
mkdir -p runs
if [ ! -e runs/repro-sft/ckpt/latest ]; then
  "$BIN" tasks sft-data sudoku --n 500 --seed 101 --max-blanks 8 > runs/repro-sft.jsonl
  "$BIN" sft configs/quickstart-sft.yaml --set experiment=repro-sft --set log.dir=runs \
    --set data.train=runs/repro-sft.jsonl --set sft.steps=2000 --force
fi
nice -n 19 "$BIN" sweep configs/sweeps/repro.yaml --jobs 1
"$BIN" sweep configs/sweeps/repro.yaml --summary
cat runs/repro/summary.md
