#!/bin/bash
# emu_mutation.sh: proves that the CUDA emulation can fail. For each mutation below, one
# __syncthreads() is deleted from a copy of the kernel sources, the kernel file that uses
# it is recompiled as the emulation build compiles it, tests/test_backend_ops is relinked
# with that object ahead of the library, and the emulated test must FAIL. A mutation the
# emulation does not catch is an error.
#
# Run from an emulation build directory by `make emu-mutation-check`, which sets
#   EMU_COMPILE  the compile command of a .cu file (ends before the source; -I order
#                matters: the mutated copy's root comes first)
#   EMU_LINK     the link command of tests/test_backend_ops (takes -o and objects)
# usage: emu_mutation.sh SRCDIR
set -u
src=${1:?usage: emu_mutation.sh SRCDIR}
: "${EMU_COMPILE:?set by make emu-mutation-check}" "${EMU_LINK:?set by make emu-mutation-check}"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/dllm-mutation.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# file with the barrier | which __syncthreads() in it (1-based) | .cu to recompile |
# Check test case to run | what the barrier protects
# (The grad_norm mutant is run against the direct cases: in the table's case it reads the
# stale sums of the previous block, and after a warm-up run on the same data those
# telescope to the right total; blocks in grid order are the in-order schedule.)
mutations=(
  "kernels/cuda/common.cuh|2|kernels/cuda/rmsnorm.cu|table|rmsnorm: block_sum reads other warps' partial sums"
  "kernels/cuda/attention.cu|2|kernels/cuda/attention.cu|table|attention forward: the K/V tile is loaded before use"
  "kernels/cuda/attention.cu|4|kernels/cuda/attention.cu|table|attention dq: the K/V tile is loaded before use"
  "kernels/cuda/attention_tc.cu|3|kernels/cuda/attention_tc.cu|table|tensor-core attention forward: the K/V tile is loaded before the wmma loads"
  "kernels/cuda/attention_tc.cu|5|kernels/cuda/attention_tc.cu|table|tensor-core attention forward: P and the rescaled O are written before O += P V"
  "kernels/cuda/attention_tc.cu|12|kernels/cuda/attention_tc.cu|table|tensor-core attention dq: dS is written before dQ += dS K"
  "kernels/cuda/attention_tc.cu|16|kernels/cuda/attention_tc.cu|table|tensor-core attention dk/dv: the Q/dO tile is loaded before the wmma loads"
  "kernels/cuda/attention_tc.cu|18|kernels/cuda/attention_tc.cu|table|tensor-core attention dk/dv: P and dS are written before dV += P^T dO, dK += dS^T Q"
  "kernels/cuda/xent.cu|2|kernels/cuda/xent.cu|table|xent: the block's logsumexp merges every warp"
  "kernels/cuda/common.cuh|4|kernels/cuda/adamw.cu|kernels|adamw grad_norm: block_sum_d reads other warps' sums"
  "kernels/cuda/sampler.cu|2|kernels/cuda/sampler.cu|kernels|sampler: the block arg max reads every warp"
  "kernels/cuda/gemm_int8.cu|1|kernels/cuda/gemm_int8.cu|kernels|INT8 block product: both operands' k-block is loaded before the wmma loads"
  "kernels/cuda/gemm_int8.cu|2|kernels/cuda/gemm_int8.cu|kernels|INT8 block product: the int32 sums are stored before the scaling reads them"
)

failed=0
n=0
for m in "${mutations[@]}"; do
  IFS='|' read -r file nth unit tcase what <<<"$m"
  n=$((n + 1))
  rm -rf "$tmp/src" && mkdir -p "$tmp/src" && cp -R "$src/kernels" "$tmp/src/"
  # delete the nth __syncthreads() of the file (only that call, the line stays)
  awk -v nth="$nth" '{
      line = $0; out = "";
      while ((i = index(line, "__syncthreads();")) > 0) {
        k++;
        if (k == nth) { out = out substr(line, 1, i - 1); line = substr(line, i + 16); deleted = 1 }
        else { out = out substr(line, 1, i + 15); line = substr(line, i + 16) }
      }
      print out line
    } END { if (!deleted) exit 3 }' "$src/$file" >"$tmp/src/$file" || {
    echo "FAIL: $file has no __syncthreads() number $nth"; failed=1; continue; }
  obj="$tmp/mutant$n.o"
  if ! $EMU_COMPILE -I"$tmp/src" -c -o "$obj" "$tmp/src/$unit" 2>"$tmp/cc.log"; then
    cat "$tmp/cc.log"; echo "FAIL: mutant $n does not compile"; failed=1; continue
  fi
  $EMU_LINK -o "$tmp/test_mutant" "$obj" >"$tmp/ld.log" 2>&1 || {
    cat "$tmp/ld.log"; echo "FAIL: mutant $n does not link"; failed=1; continue; }
  CK_RUN_CASE="$tcase" "$tmp/test_mutant" >"$tmp/run.log" 2>&1
  rc=$?
  if [ "$rc" = 0 ] || [ "$rc" = 77 ]; then
    echo "FAIL: barrier $nth of $file deleted ($what): the emulated suite still passes"
    failed=1
  else
    why=$(grep -m1 -E ':[FE]:' "$tmp/run.log" | sed 's/^.*:[FE]:[^:]*:[^:]*:[0-9]*: *//' | cut -c1-90)
    echo "ok: barrier $nth of $file deleted ($what): caught: ${why:-exit status $rc}"
  fi
done
exit $failed
