/* inspect_sft.h: `dllm-rl inspect` of an SFT run (RUN_DIR/sft_log.jsonl, its
 * config.yaml and ckpt/): steps done of sft.steps, the loss curve, lr,
 * checkpoints; --csv every logged row; --metric one column. */
#ifndef DLLM_INSPECT_SFT_H
#define DLLM_INSPECT_SFT_H

/* Exit status (0, 2 bad input); prints to stdout, errors to stderr. */
int inspect_sft(const char *run_dir, int json, int csv, const char *metric);

#endif
