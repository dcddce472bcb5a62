/* yaml_config.h: experiments from YAML into a typed struct.
 *
 * One table (the key table in yaml_config.c) names every key: dotted path, type, default,
 * range or choices, and where it lives in dllm_cfg. The reader (libyaml
 * document API) walks the file, rejects unknown keys, checks types and ranges,
 * and reports every error as "file:line:col: message" with the offending line
 * echoed. `--set a.b.c=value` overrides go through the same checks. */
#ifndef DLLM_YAML_CONFIG_H
#define DLLM_YAML_CONFIG_H

#include "kernels/base.h"

#define CFG_STR_MAX 512
#define CFG_LIST_MAX 16

typedef struct {
    int n;
    char items[CFG_LIST_MAX][64];
} cfg_str_list;

typedef struct {
    char experiment[128];
    long seed;
    char device[8];          /* cpu | cuda */
    struct {
        char path[CFG_STR_MAX];  /* model directory (HF layout); empty: use preset */
        char preset[32];         /* tiny | small | llada-8b */
        char arch[16];           /* llada */
        char dtype[8];           /* f32 | bf16: checkpoint dtype written */
        struct {
            int rank;            /* 0 = full fine-tuning */
            double alpha;
            cfg_str_list targets;
        } lora;
    } model;
    struct {
        char train[CFG_STR_MAX]; /* JSONL {"prompt": ..., "answer": ...} */
        int max_len;             /* prompt + answer tokens; longer pairs are an error */
    } data;
    struct {
        int steps;
        int batch_size;
        int chat;                /* wrap prompts in the model's chat format */
    } sft;
    struct {
        double lr;
        int warmup;
        double betas[2];
        double eps;
        double weight_decay;
        double grad_clip;        /* 0 = off */
    } optim;
    struct {
        char dir[CFG_STR_MAX];
        int every;               /* print/log every N steps */
    } log;
    struct {
        int every;               /* 0 = only at the end */
        int keep;                /* newest checkpoints kept, 0 = all */
    } checkpoint;
} dllm_cfg;

/* Defaults for every key. */
void dllm_cfg_defaults(dllm_cfg *cfg);
/* Parses a YAML file over the defaults. */
int dllm_cfg_load(dllm_cfg *cfg, const char *path, dllm_err *err);
/* Applies "a.b.c=value" (value parsed as a YAML scalar or flow sequence). */
int dllm_cfg_set(dllm_cfg *cfg, const char *assignment, dllm_err *err);
/* Checks cross-key constraints and file existence after all overrides. */
int dllm_cfg_validate(const dllm_cfg *cfg, dllm_err *err);
/* The effective config as YAML (every key), malloc'd. */
char *dllm_cfg_dump(const dllm_cfg *cfg);

#endif
