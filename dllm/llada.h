/* llada.h: the LLaDA masked-diffusion transformer (METHOD.md §1), fp32 on the CPU.
 *
 *   x = wte[tokens]
 *   per block: h = x + attn_out(Attn(RoPE(q_proj(n1)), RoPE(k_proj(n1)), v_proj(n1))),
 *              n1 = attn_norm(x)
 *              y = h + ff_out(silu(ff_proj(n2)) * up_proj(n2)),  n2 = ff_norm(h)
 *   logits = ff_out_head(ln_f(x))   (untied head), bidirectional attention,
 *   positions = canvas index 0..T-1, padding excluded by a key mask.
 *
 * Parameters live in one allocation carved into named pointers (torch layout
 * [out, in]). With LoRA enabled the base weights are frozen and the trainable
 * vector is the LoRA A/B matrices only; otherwise it is every parameter. */
#ifndef DLLM_LLADA_H
#define DLLM_LLADA_H

#include "dllm/model_config.h"
#include "dllm/safetensors.h"
#include "kernels/fp8.h"

/* LoRA target bits, by HF module name. */
enum {
    LORA_Q_PROJ = 1 << 0, LORA_K_PROJ = 1 << 1, LORA_V_PROJ = 1 << 2, LORA_ATTN_OUT = 1 << 3,
    LORA_FF_PROJ = 1 << 4, LORA_UP_PROJ = 1 << 5, LORA_FF_OUT = 1 << 6,
    LORA_ALL = 0x7f
};
/* "q_proj" -> LORA_Q_PROJ; returns 0 for an unknown name. */
int llada_lora_target_bit(const char *name);

typedef struct llada_model llada_model;

/* Random initialisation (normal, std 0.02; deterministic for a seed). */
llada_model *llada_create(const dllm_model_config *cfg, uint64_t seed);
/* Loads DIR (config.json + safetensors, single or sharded; any supported dtype). */
int llada_load(llada_model **out, const char *dir, dllm_err *err);
/* Writes DIR/config.json + safetensors in the HF layout, dtype ST_F32 or ST_BF16
 * (sharded above max_shard_bytes, 0 = one file). With LoRA the merged weights
 * are written. */
int llada_save(const llada_model *m, const char *dir, st_dtype dtype, size_t max_shard_bytes,
               dllm_err *err);
void llada_free(llada_model *m);
const dllm_model_config *llada_config(const llada_model *m);

/* LoRA on the targets in `mask` (LORA_* bits): W' = W + (alpha/rank) B A,
 * A [rank, in] ~ kaiming-uniform as PEFT, B [out, rank] = 0. */
void llada_lora_enable(llada_model *m, int rank, float alpha, int mask, uint64_t seed);

/* Trainable parameters and their gradients, contiguous (for the optimizer). */
float *llada_trainable(llada_model *m, size_t *n);
float *llada_grads(llada_model *m);
void llada_zero_grad(llada_model *m);

/* Forward over tokens [B,T] (keymask [B,T], 1 = real token, NULL = all real).
 * Logits [n_rows, V] (V = embedding_size) are computed only for the flat rows (b*T + t) listed in
 * rows (NULL: all B*T rows, n_rows = B*T) -- exact, and it saves most of the
 * head's cost. Activations are kept for llada_backward. */
int llada_forward(llada_model *m, const int32_t *tokens, const uint8_t *keymask, int B, int T,
                  const int32_t *rows, int n_rows, float *logits);
/* The same logits, keeping nothing for backward: one layer of activations
 * instead of L (rollouts, scoring). A following llada_backward is an error. */
int llada_forward_nograd(llada_model *m, const int32_t *tokens, const uint8_t *keymask, int B,
                         int T, const int32_t *rows, int n_rows, float *logits);
/* Backward of the last forward: dlogits [n_rows, V]; accumulates into grads. */
void llada_backward(llada_model *m, const float *dlogits);

/* ---- named parameters (HF / PEFT names), for checkpoints, adapters and tests ---- */
typedef struct {
    char name[96];    /* "model.transformer.blocks.0.q_proj.weight" or the PEFT
                         "base_model.model.model.transformer.blocks.0.q_proj.lora_A.weight" */
    float *data;      /* inside the model's one parameter allocation */
    float *grad;      /* inside the gradient allocation; NULL when frozen (base
                         weights under LoRA) or not yet allocated (gradients are
                         allocated by the first llada_grads, llada_zero_grad or
                         llada_backward) */
    int ndim;         /* 1 or 2 */
    int64_t shape[2]; /* torch layout: [out, in] */
    size_t numel;
} llada_param;

/* The base parameters in HF order (wte, blocks 0..L-1, ln_f, head); *out
 * points into the model. Returns the count. */
int llada_params(llada_model *m, const llada_param **out);
/* The LoRA parameters (A then B per targeted linear, layer by layer, PEFT
 * names); returns 0 (and *out = NULL) when LoRA is off. Only block linears
 * carry adapters: the top-level head (also called ff_out) never does. */
int llada_lora_params(llada_model *m, const llada_param **out);
/* LoRA settings of m: returns the rank (0 = off); alpha and mask may be NULL. */
int llada_lora_info(const llada_model *m, float *alpha, int *mask);
/* Loads a PEFT adapter file (lora_A/lora_B tensors under the names above) into
 * the enabled LoRA parameters; every expected tensor must be present. */
int llada_lora_load(llada_model *m, const char *path, dllm_err *err);
/* Writes the LoRA parameters (PEFT names, F32) to one safetensors file. */
int llada_lora_save(const llada_model *m, const char *path, dllm_err *err);
/* Number of activation floats kept for backward at the last forward's size. */
size_t llada_activation_floats(const llada_model *m);

/* ---- precision: the trainer's numerics and the rollout copy (METHOD.md §5, §6) ----
 *
 * Trainer: fp32 (default), or bf16 -- every weight the trainer forward reads is
 * a bf16-rounded copy of the fp32 master weights (refreshed by
 * llada_rollout_sync), every linear input (the head's too) is rounded to bf16
 * and saved rounded for backward, products accumulate in fp32; the backward
 * is straight-through (rounding has derivative 1) and its gradients go to the
 * fp32 master weights. LoRA A/B stay fp32 on top.
 *
 * Rollout copy, a forward-only model built by llada_rollout_sync from the
 * current master weights with LoRA merged (W + (alpha/r) B A, in fp32):
 *   trainer  no copy: the rollout forward is the trainer forward, bit for bit
 *            (the reference arm, w = 1 exactly);
 *   bf16     every weight rounded to bf16, every linear input rounded to bf16,
 *            fp32 accumulation;
 *   fp8      the seven block linears quantised (kernels/fp8.h) in fp8_format
 *            with weight scaling block (128x128) | channel | tensor, activations
 *            quantised at run time to match: block -> 1x128 groups, channel ->
 *            per token, tensor -> per tensor; op_fp8_linear_fwd does the
 *            product. Embeddings, norms and the head are bf16 (weights rounded,
 *            head input rounded).
 * The residual stream, norms, RoPE, attention and softmax compute in fp32 in
 * every mode. */
typedef enum { LLADA_ROLLOUT_TRAINER = 0, LLADA_ROLLOUT_BF16 = 1, LLADA_ROLLOUT_FP8 = 2 } llada_rollout_kind;

typedef struct {
    bool trainer_bf16;        /* trainer: false = fp32, true = bf16 rounding */
    llada_rollout_kind rollout;
    fp8_format fp8_format;    /* FP8_E4M3 | FP8_E5M2 */
    fp8_scaling fp8_scaling;  /* weights: FP8_SCALE_BLOCK | _CHANNEL | _TENSOR */
    bool fp8_pow2_scale;
} llada_precision;

/* Fills p from config names; NULL or "" takes the default:
 * trainer "fp32" | "bf16", rollout "trainer" | "bf16" | "fp8",
 * format "e4m3" | "e5m2", scaling "block" | "channel" | "tensor".
 * Input errors name the key and list the choices. */
int llada_precision_parse(llada_precision *p, const char *trainer, const char *rollout,
                          const char *format, const char *scaling, bool pow2_scale,
                          dllm_err *err);
const char *llada_rollout_name(llada_rollout_kind k); /* "trainer" | "bf16" | "fp8" */

/* Applies p (trainer precision and rollout mode) and (re)builds the copies
 * from the current weights: the trainer's bf16 copy and the rollout copy.
 * Call it after every weight change (optimizer step, adapter load) when the
 * trainer is bf16 or the rollout is not "trainer". *seconds (may be NULL)
 * receives its wall time. A model never synced computes at fp32 with
 * rollout "trainer". */
int llada_rollout_sync(llada_model *m, const llada_precision *p, double *seconds, dllm_err *err);
/* The precision last applied by llada_rollout_sync. */
llada_precision llada_get_precision(const llada_model *m);
/* Forward-only at rollout numerics (llada_forward_nograd-style memory, in
 * buffers of its own: the trainer's kept activations survive it). */
int llada_forward_rollout(llada_model *m, const int32_t *tokens, const uint8_t *keymask, int B,
                          int T, const int32_t *rows, int n_rows, float *logits);
/* One block linear of the rollout copy on its own: out (N, out) = linear
 * `name` (q_proj, ..., ff_out) of `layer` applied to inp (N, in), exactly as
 * llada_forward_rollout computes it (for tests and benchmarks). Returns
 * DLLM_EXIT_INPUT for an unknown name or layer. */
int llada_rollout_linear(llada_model *m, int layer, const char *name, const float *inp, int N,
                         float *out);

#endif
