#!/bin/sh
# A study's finished runs kept in the repository, so that its sweep resumes on any fresh
# clone and its tables regenerate from what is committed (studies/README.md).
#
#   sh studies/study.sh restore NAME   studies/NAME/RUN -> runs/NAME/RUN for every kept run
#                                      not there yet (then `dllm-rl sweep` skips them)
#   sh studies/study.sh archive NAME   runs/NAME/RUN -> studies/NAME/RUN for every run the
#                                      sweep's summary calls done and not kept yet
#
# NAME is a sweep of configs/sweeps/NAME.yaml whose runs go to runs/NAME (log.dir runs).
# Run from the repository root; archive needs h5copy and h5repack (Debian: hdf5-tools) and
# a dllm-rl binary (DLLM_BIN, default build/dllm-rl).
set -eu
usage() { echo "usage: sh studies/study.sh restore|archive NAME" >&2; exit 2; }
[ $# -eq 2 ] || usage
what=$1 name=$2
case $name in */* | .* | "") echo "study.sh: bad sweep name '$name'" >&2; exit 2 ;; esac
sweep=configs/sweeps/$name.yaml
keep=studies/$name
runs=runs/$name
[ -f "$sweep" ] || { echo "study.sh: $sweep: no such sweep file" >&2; exit 2; }

case $what in
restore)
  [ -d "$keep" ] || { echo "study.sh: nothing kept for $name ($keep)"; exit 0; }
  mkdir -p "$runs"
  n=0
  for d in "$keep"/*/; do
    r=$(basename "$d")
    [ -f "$d/config.yaml" ] || continue
    if [ -e "$runs/$r" ]; then
      continue # never overwrite a run directory
    fi
    cp -R "$d" "$runs/$r"
    n=$((n + 1))
  done
  echo "study.sh: $n kept run(s) of $name restored into $runs"
  ;;
archive)
  BIN=${DLLM_BIN:-build/dllm-rl}
  for t in h5copy h5repack; do
    command -v $t >/dev/null || { echo "study.sh: $t not found (Debian: hdf5-tools)" >&2; exit 2; }
  done
  "$BIN" sweep "$sweep" --summary >/dev/null
  mkdir -p "$keep"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  n=0
  # summary.csv: run,arm,seed,...,status (4th column); "done": the last checkpoint written
  for r in $(awk -F, 'NR > 1 && $4 == "done" {print $1}' "$runs/summary.csv"); do
    src=$runs/$r dst=$keep/$r
    [ -e "$dst" ] && continue
    target=$(readlink "$src/ckpt/latest")
    mkdir -p "$tmp/$r/ckpt/$target"
    cp "$src/config.yaml" "$src/config.hash" "$tmp/$r/"
    [ -f "$src/sweep-exit" ] && cp "$src/sweep-exit" "$tmp/$r/"
    [ -d "$src/eval" ] && cp -R "$src/eval" "$tmp/$r/"
    # the checkpoint's record without its weights: what marks the run done
    for f in state.json config.json generation.json; do
      [ -f "$src/ckpt/$target/$f" ] && cp "$src/ckpt/$target/$f" "$tmp/$r/ckpt/$target/"
    done
    ln -s "$target" "$tmp/$r/ckpt/latest"
    # the log without its per-token arrays: every step metric, the evaluations, the
    # mismatch by denoising step, pass@k, and per completion what the sweep's summary and
    # notebooks_export/mismatch_windows.py read (its step, group, reward, log-weight and
    # length)
    for g in steps eval mismatch_by_step pass_at_k; do
      h5copy -i "$src/log.h5" -o "$tmp/$r/raw.h5" -s /$g -d /$g
    done
    for c in step group reward log_w completion_len coef; do
      h5copy -p -i "$src/log.h5" -o "$tmp/$r/raw.h5" -s /trajectories/$c -d /trajectories/$c
    done
    h5repack -f GZIP=9 "$tmp/$r/raw.h5" "$tmp/$r/log.h5"
    # the log's root attributes (revision, start, machine), which the copy above drops
    "$BIN" inspect "$src" --json |
      python3 -c 'import json, sys
for k, v in json.load(sys.stdin)["attributes"].items(): print(f"{k}: {v}")' > "$tmp/$r/provenance.txt"
    rm "$tmp/$r/raw.h5"
    mv "$tmp/$r" "$dst"
    n=$((n + 1))
  done
  cp "$runs/summary.csv" "$runs/summary.md" "$keep/"
  echo "study.sh: $n run(s) of $name kept in $keep"
  ;;
*) usage ;;
esac
