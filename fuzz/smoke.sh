#!/bin/sh
# Builds every libFuzzer harness under fuzz/ with clang (ASan + UBSan) into
# build-fuzz/ and runs each for SECONDS (default 20) from the committed seeds.
# A finding (crash, leak, failed check) exits non-zero. CI runs it briefly;
# the long runs recorded in BENCHMARKS.md use the same command with more time.
#   sh fuzz/smoke.sh [SECONDS]        (from the repository root)
set -eu
secs=${1:-20}
out=build-fuzz
mkdir -p "$out"
CC=${CC_FUZZ:-clang}
FLAGS="-g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -I."
TASKS="tasks/registry.c tasks/task_util.c tasks/rational.c tasks/answer.c tasks/gsm8k.c
       tasks/math500.c tasks/countdown.c tasks/sudoku.c kernels/base.c kernels/rng.c"
build() { # name sources... (libraries last)
  name=$1; shift
  echo "  FUZZCC   $name"
  # shellcheck disable=SC2086
  $CC $FLAGS "$@" -o "$out/$name"
}
for h in extract countdown jsonl; do
  build fuzz_task_$h fuzz/fuzz_task_$h.c $TASKS -ljansson -lm
done
# shellcheck disable=SC2046
build fuzz_tokenizer_json fuzz/fuzz_tokenizer_json.c dllm/tokenizer.c kernels/base.c \
  $(pkg-config --cflags --libs jansson libpcre2-8 libutf8proc) -lm
# the registry's configs, Qwen3.5's included (dllm/qwen35_config.c); not its model
# (fuzz/models_absent.c)
CONFIGS="dllm/arch.c dllm/model_config.c dllm/json_util.c dllm/qwen35_config.c dllm/qwen35_init.c
         fuzz/models_absent.c kernels/rng.c"
# shellcheck disable=SC2046,SC2086
build fuzz_safetensors_config fuzz/fuzz_safetensors_config.c dllm/safetensors.c \
  $CONFIGS kernels/base.c kernels/cpu/convert.c kernels/cpu/fp8.c \
  $(pkg-config --cflags --libs jansson) -lm
# shellcheck disable=SC2046,SC2086
build fuzz_yaml_config fuzz/fuzz_yaml_config.c src/config/yaml_config.c src/config/cfg_names.c \
  src/rl/corrections.c src/rl/grpo.c src/run/run_name.c $CONFIGS \
  dllm/safetensors.c kernels/base.c kernels/cpu/convert.c kernels/cpu/fp8.c \
  $(pkg-config --cflags --libs yaml-0.1 jansson) -lm

# seeds: the fixtures the suites already use
seed() { mkdir -p "$out/corpus_$1"; }
seed jsonl; i=0
for f in gsm8k_small.jsonl math500_small.jsonl countdown_small.jsonl sudoku_small.csv; do
  { printf "\\$(printf %o $i)"; cat tests/data/tasks/$f; } > "$out/corpus_jsonl/seed$i"; i=$((i+1))
done
seed countdown; printf '<answer>(3*7)+2</answer>' > "$out/corpus_countdown/seed"
seed extract; printf '<answer>\n\\boxed{\\frac12}\n</answer>\0000.5' > "$out/corpus_extract/seed"
seed tokenizer_json; cp tests/data/tokenizer/variants/*.json tests/data/tokenizer/malformed/*.json \
  "$out/corpus_tokenizer_json/"
seed safetensors_config; i=0
for d in tests/data/llada/tiny tests/data/llada/tiny_gqa tests/data/qwen3/tied tests/data/qwen3/untied \
         tests/data/qwen35/hybrid tests/data/qwen35/tied; do
  { cat "$d/config.json"; printf '\0'; cat "$d/model.safetensors"; } > "$out/corpus_safetensors_config/seed$i"
  i=$((i+1))
done
seed yaml_config; i=0
for f in configs/*.yaml; do
  { cat "$f"; printf '\0seed=3\ngrpo.steps=2\nrollout.fp8.format=e5m2\n'; } > "$out/corpus_yaml_config/seed$i"
  i=$((i+1))
done

# inputs that once failed, kept so every run replays them (fuzz/regressions/HARNESS-*)
for f in fuzz/regressions/*; do
  [ -e "$f" ] || continue
  h=$(basename "$f" | sed 's/-.*//')
  mkdir -p "$out/corpus_$h" && cp "$f" "$out/corpus_$h/"
done

run() { # harness corpus max_len
  echo "== $1: ${secs} s"
  "$out/$1" -max_total_time="$secs" -max_len="$3" -print_final_stats=1 "$out/corpus_$2" \
    > "$out/$1.log" 2>&1 || { tail -40 "$out/$1.log"; echo "FINDING: $1 (log: $out/$1.log)"; exit 1; }
  grep -E "^stat::number_of_executed_units|^Done" "$out/$1.log" | tr '\n' ' '; echo
}
run fuzz_task_extract extract 4096
run fuzz_task_countdown countdown 4096
run fuzz_task_jsonl jsonl 4096
run fuzz_tokenizer_json tokenizer_json 16384
run fuzz_safetensors_config safetensors_config 131072
run fuzz_yaml_config yaml_config 8192
echo "fuzz smoke: every harness ran ${secs} s without a finding"
