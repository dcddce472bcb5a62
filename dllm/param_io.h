/* param_io.h: named parameter lists to and from safetensors, shared by the model
 * core (dllm/transformer.c): checkpoints in the HF layout, LoRA
 * adapters in the PEFT layout, and the LoRA merge on save. */
#ifndef DLLM_PARAM_IO_H
#define DLLM_PARAM_IO_H

#include "dllm/transformer.h" /* dllm_param */
#include "dllm/model_config.h"
#include "dllm/safetensors.h"

/* The LoRA adapter of one base weight: W' = W + scale B A, A [rank, in], B [out, rank];
 * A == NULL: none. */
typedef struct {
    const float *A, *B;
    int in, out;
} param_lora;

/* Reads every parameter of pl from PATH (a directory: single or sharded
 * safetensors; or one .safetensors file); each must be present with its shape. */
int param_io_read(const dllm_param *pl, int np, const char *path, dllm_err *err);
/* (Every tensor param_io_read reads passes this check.) An input error naming
 * path and the tensor when p holds a NaN or an infinity: a model with one computes
 * NaN everywhere, which would pass for all-EOS output and null scores. */
int param_io_check_finite(const dllm_param *p, const char *path, dllm_err *err);

/* Where a parameter's values are read from when they are written: elements
 * [off, off + n) of pl[i] (e.g. downloaded from a device); NULL: pl[i].data. */
typedef struct {
    int (*read)(void *ctx, int i, size_t off, size_t n, float *dst, dllm_err *err);
    void *ctx;
} param_source;

/* Writes DIR/config.json (cfg with torch_dtype set from dtype) and safetensors in
 * dtype ST_F32 or ST_BF16, sharded above max_shard_bytes (0 = one file). lora:
 * NULL, or np entries (lora[i] is plist[i]'s adapter), merged as written. src: NULL,
 * or where the values come from. The values are streamed into the files (one merged
 * tensor and one chunk of host memory at most; no copy of the model). */
int param_io_write_dir(const dllm_param *pl, int np, const param_lora *lora, int rank, float scale,
                       const param_source *src, const dllm_model_config *cfg, const char *dir,
                       st_dtype dtype, size_t max_shard_bytes, dllm_err *err);

/* One fp32 .safetensors file of the parameters (a PEFT adapter file). */
int param_io_write_file(const dllm_param *pl, int np, const char *path, dllm_err *err);

#endif
