/* mem_plan_device.c: the device bytes of today's device path (mem_plan_device.h).
 *
 * Every item is an allocation of dllm/transformer_device.c, dllm/sampler.c,
 * dllm/transformer_fwd.c (tf_acts_ensure, +4 bytes per buffer as acts_alloc adds them)
 * or the CUDA backend, at the size the code asks for:
 *   kept      the views (trainer: fp32, or bf16-packed linears and head under a bf16
 *             trainer; rollout: bf16-packed, or FP8 / INT8 codes + fp32 scales, and a
 *             bf16 head but under fp8-exact), the LoRA copy, the fp32 staging matrix (the largest
 *             linear), the RoPE table (cos, sin), the one activation set of every forward
 *             without backward (one layer, sized by the widest rollout or scoring call;
 *             a device sampler's call asks for max_rows head rows), the logits chunk with its targets and log-probs, the
 *             backend's workspace (1 MiB doubled until the largest bf16 or FP8 linear's
 *             scratch fits; none when no such linear runs), the FP8 or INT8 activations
 *             the fused producers write (block-scaled FP8 copies, INT8 copies) and
 *             cuBLASLt's 32 MiB;
 *   transient the device sampler's buffers for one call; for Qwen3 the KV cache
 *             (dllm/qwen3.c), its activation set and the autoregressive sampler's
 *             buffers (dllm_ar_sample_decoder), for one call (top_p = 1).
 * A training run keeps that set while the model is on the device, and, when its update runs on the
 * device (dllm/transformer_device_train.c), the update's buffers, all kept:
 *   the gradients and both AdamW moments (n_train floats each: the LoRA parameters, or
 *   under full fine-tuning every weight in the trainer view's layout), the kept
 *   forward's activation set (tf_acts_ensure_fwd: L layers and L + 1 residual slots, or
 *   under recomputation every:K, K layers and ceil(L/K) + K slots), the backward's
 *   scratch (acts_ensure_bwd: one layer's activation gradients), the scored rows' targets,
 *   log-probs, log-sum-exps and dL/dlogp (rows x 4: the loss gradient built on the
 *   device, the logits made again a chunk at a time), one chunk of dlogits (max_rows
 *   x V fp32) and the workspace the backward asks of the backend (the attention
 *   backward's B NH T floats; RMSNorm's dw partial sums under full fine-tuning; a bf16
 *   trainer's bf16_linear_bwd_x: the largest linear widened to fp32). */
#include "src/plan/mem_plan_device.h"

#include "dllm/arch.h"
#include "dllm/transformer.h"
#include "kernels/fp8.h"
#include "kernels/int8.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

const char *const mem_dev_phase_names[3] = {"rollout", "score", "train"};

#define CUBLASLT_WS ((int64_t)32 << 20) /* kernels/cuda/gemm_cublaslt.cu WORKSPACE_BYTES */
#define BACKEND_WS_MIN ((int64_t)1 << 20) /* kernels/cuda/backend_cuda.cu ws_get's first size */

static void item(mem_dev_plan *p, bool transient, const char *name, int64_t bytes,
                 const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static void item(mem_dev_plan *p, bool transient, const char *name, int64_t bytes,
                 const char *fmt, ...)
{
    if (p->n == MEM_DEV_MAX_ITEMS)
        abort(); /* a programming error: raise MEM_DEV_MAX_ITEMS */
    mem_dev_item *it = &p->items[p->n++];
    snprintf(it->name, sizeof it->name, "%s", name);
    it->bytes = bytes;
    it->transient = transient;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(it->formula, sizeof it->formula, fmt, ap);
    va_end(ap);
}

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t a256(int64_t b) { return (b + 255) / 256 * 256; }

typedef struct {
    int64_t C, L, NH, NKV, HD, QD, KD, F, V, r;
    bool qkn;
} dims;

/* out x in of block linear j (transformer.c's tf_lin_shape, from the config) */
static void lin_shape(const dims *d, int j, int64_t *o, int64_t *i)
{
    switch (j) {
    case DLLM_LIN_Q: *o = d->QD, *i = d->C; break;
    case DLLM_LIN_K: case DLLM_LIN_V: *o = d->KD, *i = d->C; break;
    case DLLM_LIN_O: *o = d->C, *i = d->QD; break;
    case DLLM_LIN_DOWN: *o = d->C, *i = d->F; break;
    default: *o = d->F, *i = d->C; break;
    }
}

/* Floats of per-layer slot t >= DLLM_NLIN (transformer.c's tf_slot_numel). */
static int64_t slot_numel(const dims *d, int t)
{
    switch (t) {
    case DLLM_T_Q_NORM: case DLLM_T_K_NORM: return d->HD;
    case DLLM_T_Q_BIAS: return d->QD;
    case DLLM_T_K_BIAS: case DLLM_T_V_BIAS: return d->KD;
    default: return d->C;
    }
}

typedef enum { V_F32, V_BF16, V_FP8, V_INT8 } vfmt;

/* The floats of every weight in the fp32 trainer view (dview_build's buffer): what full
 * fine-tuning trains on the device. */
static int64_t view_floats(const dims *d, const dllm_arch_desc *a, bool tied)
{
    int64_t nonlin = 0, lin = 0;
    for (int i = 0; i < a->n_order; i++)
        if (a->order[i] >= DLLM_NLIN)
            nonlin += slot_numel(d, a->order[i]);
    for (int j = 0; j < DLLM_NLIN; j++) {
        int64_t o, in;
        lin_shape(d, j, &o, &in);
        lin += o * in;
    }
    return d->V * d->C + d->L * (nonlin + lin) + d->C + (tied ? 0 : d->V * d->C);
}

/* The device layout of an INT8 weight [o, in] (gemm_int8.cu's dllm_cuda_int8_weight_layout):
 * rows padded to 4; the row stride to 4 (channel) or to whole 128-wide k-blocks (block);
 * kb k-blocks (1 under channel scaling); its scales (o, or ceil(o/128) kb floats). */
static int64_t i8_kb(const dllm_precision *pr, int64_t in)
{
    return pr->int8_scaling == INT8_SCALE_BLOCK ? (in + INT8_BLOCK - 1) / INT8_BLOCK : 1;
}
static int64_t i8_ld(const dllm_precision *pr, int64_t in)
{
    return pr->int8_scaling == INT8_SCALE_BLOCK ? i8_kb(pr, in) * INT8_BLOCK : (in + 3) / 4 * 4;
}
static int64_t i8_scales(const dllm_precision *pr, int64_t o, int64_t in)
{
    return pr->int8_scaling == INT8_SCALE_BLOCK ? (o + INT8_BLOCK - 1) / INT8_BLOCK * i8_kb(pr, in)
                                                : o;
}

/* A device view's bytes (transformer_device.c's dview_build); head32: an fp32 head kept
 * beside head16 (the trainer view's; a rollout copy with head16 has none). */
static int64_t view_bytes(const dims *d, const dllm_arch_desc *a, bool tied, vfmt f, bool head16,
                          bool head32, const dllm_precision *pr, char *why, size_t nwhy)
{
    int64_t nonlin = 0, lin = 0, codes = 0, scales = 0;
    for (int i = 0; i < a->n_order; i++)
        if (a->order[i] >= DLLM_NLIN)
            nonlin += slot_numel(d, a->order[i]);
    for (int j = 0; j < DLLM_NLIN; j++) {
        int64_t o, in;
        lin_shape(d, j, &o, &in);
        lin += o * in;
        if (f == V_FP8) {
            int br, bc;
            fp8_block_shape(pr->fp8_scaling, (int)o, (int)in, &br, &bc);
            scales += ((o + br - 1) / br) * ((in + bc - 1) / bc);
        } else if (f == V_INT8) {
            codes += (o + 3) / 4 * 4 * i8_ld(pr, in);
            scales += i8_scales(pr, o, in);
        }
    }
    codes = f == V_INT8 ? d->L * codes : d->L * lin;
    int64_t n = d->V * d->C + d->L * nonlin + d->C + (tied || !(head32 || !head16) ? 0 : d->V * d->C);
    if (f == V_F32)
        n += codes;
    int64_t b = 4 * n + (f == V_BF16 ? 2 * codes
                         : f == V_FP8 || f == V_INT8 ? codes + 4 * d->L * scales
                                                     : 0) +
                (head16 ? 2 * d->V * d->C : 0);
    snprintf(why, nwhy, "4 x %lld fp32%s%s", (long long)n,
             f == V_BF16  ? " + 2 x L Plin bf16"
             : f == V_FP8 ? " + L Plin codes + 4 x L scales"
             : f == V_INT8 ? " + L Plin codes (rows, stride padded) + 4 x L scales"
                          : "",
             head16 ? " + 2 V C bf16 head" : "");
    return b;
}

/* One buffer of an activation set: acts_alloc's 4 extra bytes, and in a region
 * (tf_region) its offset rounded up to 256. */
static int64_t abuf(int64_t bytes, bool region)
{
    bytes += 4;
    return region ? (bytes + 255) / 256 * 256 : bytes;
}

/* One activation set (acts_lay_out's buffers, in its order) of `layers` layer slots and
 * `xs` residual slots for N rows, att state floats (per layer) and R head rows, each its
 * own allocation or (region) laid out in a region. Without backward: one layer, two
 * residual slots. */
static int64_t acts_bytes_slots(const dims *d, int64_t layers, int64_t xs, int64_t N,
                                int64_t att, int64_t R, bool region)
{
    const int64_t L = layers, C = d->C, QD = d->QD, KD = d->KD, F = d->F;
    const int64_t sizes[] = {
        4 * N, N, 4 * N, 4 * (R + 1), 4 * (R + 1),           /* tokens keymask pos rows hrows */
        4 * xs * N * C, 4 * L * N * C, 4 * L * N,            /* resid n1 rstd1 */
        d->qkn ? 4 * L * N * QD : -1, d->qkn ? 4 * L * N * d->NH : -1, /* qr rstdq */
        4 * L * N * QD,                                      /* q */
        d->qkn ? 4 * L * N * KD : -1, d->qkn ? 4 * L * N * d->NKV : -1, /* kr rstdk */
        4 * L * N * KD, 4 * L * N * KD, 4 * L * att,         /* k v att */
        4 * L * N * QD, 4 * L * N * C, 4 * L * N * C, 4 * L * N, /* y h n2 rstd2 */
        4 * L * N * F, 4 * L * N * F, 4 * L * N * F,         /* g u s */
        d->r ? 4 * L * DLLM_NLIN * N * d->r : -1,           /* xa */
        4 * R * C, 4 * R * C, 4 * R};                        /* xr nf rstdf */
    int64_t b = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
        b += sizes[i] < 0 ? 0 : abuf(sizes[i], region);
    return b;
}

static int64_t acts_bytes(const dims *d, int64_t N, int64_t att, int64_t R)
{
    return acts_bytes_slots(d, 1, 2, N, att, R, false);
}

/* The backward's scratch (transformer_fwd.c's acts_ensure_bwd) for N rows, R head rows:
 * dx dh dn (N, C), dq dy dqr (N, QD), dk dv dkr (N, KD), dg du ds (N, F), dxa (N, r) with
 * LoRA, dxr dnf (R, C); 4 extra bytes each. */
static int64_t bwd_bytes(const dims *d, int64_t N, int64_t R)
{
    const int64_t nq = d->qkn ? 3 : 2; /* dq, dy (dq, dk, dv) and, with qk_norm, dqr (dkr) */
    int64_t f = 3 * N * (d->C + d->F) + nq * N * (d->QD + d->KD) + (d->r ? N * d->r : 0) +
                2 * R * d->C;
    return 4 * f + 4 * (12 + (d->qkn ? 2 : 0) + (d->r ? 1 : 0));
}

typedef struct {
    int64_t N, att, R;
    bool used;
} acts_cap;

static void acts_use(acts_cap *c, int64_t B, int64_t T, int64_t R, const dims *d)
{
    c->N = max64(c->N, B * T);
    c->att = max64(c->att, B * d->NH * T); /* the CUDA backend's attention state: the LSE */
    c->R = max64(c->R, R);
    c->used = true;
}

/* The backend workspace one linear asks for (backend_cuda.cu's bf16 / FP8 linear). */
static int64_t ws_bf16(int64_t N, int64_t C, int64_t OC)
{
    if (C % 8 == 0 && OC % 4 == 0)
        return a256(N * C * 2);
    return a256(N * C * 2) + a256(N * C * 4) + a256(OC * C * 4);
}

static int64_t ws_fp8(const dllm_precision *pr, int64_t N, int64_t C, int64_t OC)
{
    bool tensor = pr->fp8_scaling == FP8_SCALE_TENSOR;
    bool block = pr->fp8_scaling == FP8_SCALE_BLOCK; /* block-scaled cuBLASLt assumed present */
    if ((tensor || block) && C % 16 == 0 && OC % 16 == 0) {
        /* codes and scales for the token count padded to 8 (block), and the padded
         * product when that count differs; the weight's scales stay in the weight */
        int64_t KB = (C + 127) / 128, Np = block ? (N + 7) / 8 * 8 : N;
        int64_t nas = block ? Np * KB : 1, npad = Np != N ? Np * OC : 0;
        return a256(Np * C) + a256(nas * 4) + a256(npad * 4);
    }
    fp8_scaling act = pr->fp8_scaling == FP8_SCALE_BLOCK     ? FP8_SCALE_GROUP
                      : pr->fp8_scaling == FP8_SCALE_CHANNEL ? FP8_SCALE_CHANNEL
                                                             : FP8_SCALE_TENSOR;
    int br, bc;
    fp8_block_shape(act, (int)N, (int)C, &br, &bc);
    int64_t sr = (N + br - 1) / br, sc = (C + bc - 1) / bc;
    return a256(OC * C * 4) + a256(N * C * 4) + a256(N * C) + a256(sr * sc * 4);
}

/* Whether FP8 linear j reads codes its producer wrote (transformer_fwd.c's fused_act,
 * backend_cuda.cu's fp8_act_prepare): block scaling, E4M3, and every linear reading
 * that producer (Q, K, V after the input norm; gate, up; down) takes the block GEMM.
 * Never the output projection (its input comes from attention). */
static bool fp8_fused(const dims *d, const dllm_precision *pr, int j)
{
    if (pr->fp8_scaling != FP8_SCALE_BLOCK || pr->fp8_format != FP8_E4M3 || j == DLLM_LIN_O)
        return false;
    if (j == DLLM_LIN_Q || j == DLLM_LIN_K || j == DLLM_LIN_V)
        return d->C % 16 == 0 && d->QD % 16 == 0 && d->KD % 16 == 0;
    return d->C % 16 == 0 && d->F % 16 == 0;
}

/* The buffer of producer-written activations one FP8 or INT8 forward of N rows needs:
 * codes and scales of the widest fused input (FP8: 1x128 groups over rows padded to 8;
 * INT8: every linear but the output projection, codes in the weight's padded stride). */
static int64_t qa_forward(const dims *d, vfmt f, const dllm_precision *pr, int64_t N)
{
    int64_t b = 0;
    for (int j = 0; (f == V_FP8 || f == V_INT8) && j < DLLM_NLIN; j++) {
        int64_t o, in;
        lin_shape(d, j, &o, &in);
        if (f == V_INT8 && j != DLLM_LIN_O) {
            b = max64(b, a256(N * i8_ld(pr, in)) + a256(N * i8_kb(pr, in) * 4));
        } else if (f == V_FP8 && fp8_fused(d, pr, j)) {
            int64_t Np = (N + 7) / 8 * 8; /* backend_cuda.cu's fp8_rows */
            b = max64(b, a256(Np * in) + a256(Np * ((in + 127) / 128) * 4));
        }
    }
    return b;
}

/* The workspace of one INT8 linear (gemm_int8.cu): the int32 products of a chunk of rows
 * (at most 2^22 of them), and, unless a producer wrote them, the activation codes and
 * scales. */
static int64_t ws_int8(const dllm_precision *pr, int64_t N, int64_t in, int64_t o, bool fused)
{
    int64_t mp = (o + 3) / 4 * 4, chunk = ((int64_t)1 << 22) / mp;
    chunk = chunk < 1 ? 1 : chunk > N ? N : chunk;
    int64_t acc = a256(chunk * mp * 4);
    return fused ? acc : a256(N * i8_ld(pr, in)) + a256(N * i8_kb(pr, in) * 4) + acc;
}

/* The largest workspace the linears of one forward of N rows (and R head rows) at view
 * format f ask for (a fused FP8 linear: only its padded product when N is not a multiple
 * of 8). */
/* cu_gemm_bf16's workspace for C (M, N) = op(A) op(B) over K: both operands as bf16 where
 * cuBLASLt's 16-byte rules hold (C's rows are 16-byte aligned on every call the model
 * makes), else their rounded fp32 copies */
static int64_t ws_gemm_bf16(bool tA, bool tB, int64_t M, int64_t N, int64_t K)
{
    int64_t lda = tA ? M : K, ldb = tB ? K : N;
    int64_t e = lda % 8 == 0 && ldb % 8 == 0 && N % 4 == 0 ? 2 : 4;
    return a256(e * M * K) + a256(e * K * N);
}

/* A bf16 trainer view's LoRA linears (the backend's bf16_lora_fwd and bf16_lora_bwd over
 * its packed base linears) on the linears of mask, N rows: the forward's, and the
 * backward's with bwd. On cuBLASLt's 16-byte rules each bf16 operand once (the backward's
 * inp in dout's place); otherwise the parts (bf16_linear_fwd, bf16_linear_bwd_x, the
 * gemm_bf16 calls). */
static int64_t ws_lora16(const dims *d, int mask, int64_t N, bool bwd)
{
    int64_t w = 0, r = d->r;
    for (int j = 0; r && j < DLLM_NLIN; j++) {
        if (!(mask >> j & 1))
            continue;
        int64_t o, in;
        lin_shape(d, j, &o, &in);
        if (in % 8 == 0 && o % 4 == 0 && r % 8 == 0) {
            w = max64(w, a256(2 * N * in) + a256(2 * r * in) + a256(2 * N * r) + a256(2 * o * r));
        } else {
            w = max64(w, ws_bf16(N, in, o));
            w = max64(w, ws_gemm_bf16(false, true, N, r, in));
            w = max64(w, ws_gemm_bf16(false, true, N, o, r));
        }
        if (!bwd)
            continue;
        if (in % 8 == 0 && o % 8 == 0 && r % 8 == 0) {
            w = max64(w, a256(2 * N * max64(o, in)) + a256(2 * o * r) + 2 * a256(2 * N * r) +
                             a256(2 * r * in));
        } else {
            w = max64(w, o % 8 == 0 && in % 8 == 0 ? a256(2 * N * o) : a256(4 * o * in));
            w = max64(w, ws_gemm_bf16(false, false, N, r, o));
            w = max64(w, ws_gemm_bf16(true, false, o, r, N));
            w = max64(w, ws_gemm_bf16(false, false, N, in, r));
            w = max64(w, ws_gemm_bf16(true, false, r, in, N));
        }
    }
    return w;
}

static int64_t ws_forward(const dims *d, vfmt f, bool head16, const dllm_precision *pr, int64_t N,
                          int64_t R)
{
    int64_t w = 0;
    for (int j = 0; f != V_F32 && j < DLLM_NLIN; j++) {
        int64_t o, in;
        lin_shape(d, j, &o, &in);
        if (f == V_INT8)
            w = max64(w, ws_int8(pr, N, in, o, j != DLLM_LIN_O));
        else if (f == V_FP8 && fp8_fused(d, pr, j))
            w = max64(w, N % 8 ? (N + 7) / 8 * 8 * o * 4 : 0);
        else
            w = max64(w, f == V_BF16 ? ws_bf16(N, in, o) : ws_fp8(pr, N, in, o));
    }
    if (head16 && R > 0)
        w = max64(w, ws_bf16(R, d->C, d->V));
    return w;
}

int mem_plan_device(mem_dev_plan *p, const dllm_model_config *mc, const mem_dev_shape *s,
                    mem_dev_phase ph, dllm_err *err)
{
    memset(p, 0, sizeof *p);
    p->phase = ph;
    const dllm_arch_desc *a = dllm_arch_get(mc->arch);
    const dllm_precision *pr = &s->prec;
    const dllm_rollout_kind k = pr->rollout;
    if (k == DLLM_ROLLOUT_NVFP4 || (k != DLLM_ROLLOUT_TRAINER && k != DLLM_ROLLOUT_BF16 &&
                                    k != DLLM_ROLLOUT_INT8 && !dllm_rollout_is_fp8(k)))
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "rollout.precision %s: the device path has no linear for it (use "
                            "trainer, bf16, fp8 or int8)", dllm_rollout_name(k));
    const bool roll = ph != MEM_DEV_SCORE, score = ph != MEM_DEV_ROLLOUT;
    if (roll && (s->B < 1 || s->P < 0 || s->G < 1))
        return dllm_err_set(err, DLLM_EXIT_INPUT, "plan --phase %s: batch %d, prompt %d, "
                            "gen_length %d must be positive", mem_dev_phase_names[ph], s->B, s->P,
                            s->G);
    if (score && (s->sB < 1 || s->sT < 1 || s->sR < 1))
        return dllm_err_set(err, DLLM_EXIT_INPUT, "plan --phase %s: %d canvases of %d tokens, "
                            "%d scored rows must be positive", mem_dev_phase_names[ph], s->sB,
                            s->sT, s->sR);
    const bool upd = ph == MEM_DEV_TRAIN && s->update;
    if (upd && (s->uB < 1 || s->uT < 1 || s->uR < 1 || s->recompute < 0))
        return dllm_err_set(err, DLLM_EXIT_INPUT, "plan --phase train: the update's %d canvases "
                            "of %d tokens, %d rows must be positive (recompute %d: 0 or K >= 1)",
                            s->uB, s->uT, s->uR, s->recompute);
    if (upd && pr->trainer_bf16 && s->lora_rank <= 0)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "model.trainer_precision bf16 without LoRA: "
                            "full fine-tuning updates on the host (the device keeps only packed "
                            "bf16 linears), not on the device");
    dims d = {mc->d_model, mc->n_layers, mc->n_heads, mc->n_kv_heads, mc->head_dim,
              (int64_t)mc->n_heads * mc->head_dim, (int64_t)mc->n_kv_heads * mc->head_dim,
              mc->mlp_hidden, mc->embedding_size, s->lora_rank > 0 ? s->lora_rank : 0, a->qk_norm};
    const int64_t rows = dllm_tf_device_chunk_rows((int)d.V);
    const bool tb = pr->trainer_bf16;
    const vfmt tf = tb ? V_BF16 : V_F32,
               rf = k == DLLM_ROLLOUT_BF16 ? V_BF16 : k == DLLM_ROLLOUT_INT8 ? V_INT8 : V_FP8;
    const bool rhead16 = k != DLLM_ROLLOUT_FP8_EXACT, rtrainer = k == DLLM_ROLLOUT_TRAINER;
    /* which views the phase's forwards read */
    const bool tv = (roll && rtrainer) || (score && (!s->score_rollout || rtrainer || ph ==
                                                      MEM_DEV_TRAIN));
    char why[160];
    if (!rtrainer) {
        int64_t b = view_bytes(&d, a, mc->weight_tying, rf, rhead16, false, pr, why, sizeof why);
        item(p, false,
             rf == V_BF16 ? "rollout copy (bf16)" : rf == V_INT8 ? "rollout copy (int8)"
                                                                  : "rollout copy (fp8)",
             b, "%s", why);
    }
    if (tv) {
        int64_t b = view_bytes(&d, a, mc->weight_tying, tf, tb, true, pr, why, sizeof why);
        item(p, false, tb ? "trainer view (bf16)" : "trainer view (fp32)", b, "%s", why);
    }
    int64_t nl = 0, mxlin = 0;
    for (int j = 0; j < DLLM_NLIN; j++) {
        int64_t o, in;
        lin_shape(&d, j, &o, &in);
        mxlin = max64(mxlin, o * in);
        if (d.r && (s->lora_mask >> j & 1))
            nl += d.L * d.r * (o + in);
    }
    if (d.r)
        item(p, false, "LoRA A/B copy", 4 * nl, "4 Nl = 4 x %lld", (long long)nl);
    item(p, false, "staging matrix", 4 * mxlin, "4 x the largest linear (%lld)", (long long)mxlin);

    /* the forwards: which activation set, rows and chunks */
    acts_cap fa = {0}; /* tf_device's one set for every forward without backward */
    int64_t chunk = 0, wsneed = 0, tmax = 0, qaneed = 0;
    const int64_t T = (int64_t)s->P + s->G;
    /* the LoRA products of a bf16 trainer view (forwards at the trainer view) */
    const int lmask16 = tb && d.r ? s->lora_mask : 0;
    if (roll) {
        vfmt f = rtrainer ? tf : rf;
        bool h16 = rtrainer ? tb : rhead16;
        const int lm = rtrainer ? lmask16 : 0;
        if (a->sampler == DLLM_SAMPLER_BLOCK) { /* the device sampler */
            int64_t BB = s->cfg ? 2 * (int64_t)s->B : s->B;
            acts_use(&fa, BB, T, rows, &d);
            wsneed = max64(wsneed, ws_forward(&d, f, h16, pr, BB * T, rows));
            wsneed = max64(wsneed, ws_lora16(&d, lm, BB * T, false));
            qaneed = max64(qaneed, qa_forward(&d, f, pr, BB * T));
            tmax = max64(tmax, T);
        } else if (a->sampler == DLLM_SAMPLER_DREAM) { /* Dream's loop */
            acts_use(&fa, s->B, T, rows, &d);
            wsneed = max64(wsneed, ws_forward(&d, f, h16, pr, s->B * T, rows));
            wsneed = max64(wsneed, ws_lora16(&d, lm, s->B * T, false));
            wsneed = max64(wsneed, 32 * 12 * (int64_t)d.V); /* the draw's scratch: 32 rows */
            qaneed = max64(qaneed, qa_forward(&d, f, pr, s->B * T));
            tmax = max64(tmax, T);
        } else { /* KV-cache decoding (dllm/qwen3.c): the prefill is the widest */
            wsneed = max64(wsneed, ws_forward(&d, f, h16, pr, (int64_t)s->B * s->P,
                                              s->B < rows ? s->B : rows));
            wsneed = max64(wsneed, ws_lora16(&d, lm, (int64_t)s->B * s->P, false));
            qaneed = max64(qaneed, qa_forward(&d, f, pr, (int64_t)s->B * s->P));
            tmax = max64(tmax, T);
        }
    }
    if (score) {
        int64_t R = s->sR, n = R < rows ? R : rows;
        /* a run scores at both: l_mu at the rollout copy, l_pi at the trainer view */
        bool at_r = (s->score_rollout || ph == MEM_DEV_TRAIN) && !rtrainer;
        bool at_t = !s->score_rollout || rtrainer || ph == MEM_DEV_TRAIN;
        if (at_r) {
            acts_use(&fa, s->sB, s->sT, R, &d);
            wsneed = max64(wsneed, ws_forward(&d, rf, rhead16, pr, (int64_t)s->sB * s->sT, n));
            qaneed = max64(qaneed, qa_forward(&d, rf, pr, (int64_t)s->sB * s->sT));
        }
        if (at_t) {
            acts_use(&fa, s->sB, s->sT, R, &d);
            wsneed = max64(wsneed, ws_forward(&d, tf, tb, pr, (int64_t)s->sB * s->sT, n));
            wsneed = max64(wsneed, ws_lora16(&d, lmask16, (int64_t)s->sB * s->sT, false));
        }
        if (ph == MEM_DEV_TRAIN && rtrainer) /* l_mu at the trainer view */
            acts_use(&fa, s->sB, s->sT, R, &d);
        chunk = max64(chunk, n);
        tmax = max64(tmax, s->sT);
    }
    /* the update (transformer_device_train.c): every buffer kept once grown */
    int64_t ntrain = 0, kept_acts = 0, kbwd = 0, dlog = 0;
    int64_t kaL = 0, kaX = 0;
    if (upd) {
        const int64_t N = (int64_t)s->uB * s->uT, R = s->uR, n = R < rows ? R : rows;
        /* dllm_tf_device_train: n_lora, or the fp32 trainer view's every weight */
        ntrain = d.r ? nl : view_floats(&d, a, mc->weight_tying);
        /* tf_acts_ensure_fwd's kept slots (recompute_k: K at or above L keeps all) */
        int64_t K = s->recompute < d.L ? s->recompute : 0;
        kaL = K ? K : d.L;
        kaX = K ? (d.L + K - 1) / K + K : d.L + 1;
        kept_acts = acts_bytes_slots(&d, kaL, kaX, N, (int64_t)s->uB * d.NH * s->uT, R, true);
        kbwd = bwd_bytes(&d, N, R);
        dlog = 4 * n * d.V; /* tf_device_bwd_target's d->dlog: one chunk of rows */
        /* the kept forward: the trainer view's linears, its logits through the chunk */
        chunk = max64(chunk, n);
        wsneed = max64(wsneed, ws_forward(&d, tf, tb, pr, N, n));
        wsneed = max64(wsneed, ws_lora16(&d, lmask16, N, true));
        /* the backward's requests of ws_get: the attention backward's (B, NH, T) floats */
        wsneed = max64(wsneed, 4 * (int64_t)s->uB * d.NH * s->uT);
        if (tb) /* bf16_linear_bwd_x: dout as bf16 (cuBLASLt's BF16 GEMM), or the
                 * packed weight widened to fp32 where OC or C is not a multiple of 8 */
            for (int j = 0; j < DLLM_NLIN; j++) {
                int64_t o, in;
                lin_shape(&d, j, &o, &in);
                wsneed = max64(wsneed, o % 8 == 0 && in % 8 == 0 ? a256(2 * N * o)
                                                                 : a256(4 * o * in));
            }
        if (tb && d.r) /* the frozen packed head's input gradient (bf16_linear_bwd_x) */
            wsneed = max64(wsneed, d.V % 8 == 0 && d.C % 8 == 0 ? a256(2 * n * d.V)
                                                                : a256(4 * d.V * d.C));
        if (!d.r) { /* RMSNorm's dw partial sums: 64-row chunks of C (HD for q/k_norm) */
            wsneed = max64(wsneed, 4 * ((N + 63) / 64) * d.C);
            wsneed = max64(wsneed, 4 * ((R + 63) / 64) * d.C);
            if (d.qkn)
                wsneed = max64(wsneed, 4 * ((N * d.NH + 63) / 64) * d.HD);
        }
        wsneed = max64(wsneed, 8); /* the clip's sum of squares (one double) */
        tmax = max64(tmax, s->uT);
    }
    int64_t npos = max64(mc->max_seq_len > 0 ? mc->max_seq_len : 1, tmax);
    item(p, false, "RoPE table", 2 * 4 * npos * (d.HD / 2), "2 x 4 x %lld positions x HD/2",
         (long long)npos);
    /* training here: the kept forward's set and fa take turns in one region
     * (dllm_tf_device_train), as large as the larger */
    const int64_t fa_region = fa.used && upd ? acts_bytes_slots(&d, 1, 2, fa.N, fa.att, fa.R, true)
                                             : 0;
    if (fa.used && !upd)
        item(p, false, "activations: forwards without backward", acts_bytes(&d, fa.N, fa.att, fa.R),
             "one layer: %lld rows, %lld head rows%s (the widest rollout or scoring call)",
             (long long)fa.N, (long long)fa.R, d.r ? ", LoRA x A^T" : "");
    if (upd) {
        const int64_t base = p->n;
        item(p, false, "update: gradients", 4 * ntrain, "4 x %lld (%s)", (long long)ntrain,
             d.r ? "the LoRA parameters" : "every weight");
        item(p, false, "update: AdamW moments m, v", 8 * ntrain, "2 x 4 x %lld",
             (long long)ntrain);
        item(p, false, "update: kept activations", max64(kept_acts, fa_region),
             "%lld layers, %lld residual slots: %d x %d tokens, %d head rows%s; one region "
             "with the forwards without backward (%.0f MiB)", (long long)kaL, (long long)kaX,
             s->uB, s->uT, s->uR, d.r ? ", LoRA x A^T" : "", (double)fa_region / (1 << 20));
        item(p, false, "update: backward scratch", kbwd, "one layer's gradients: %lld rows, "
             "%d head rows", (long long)s->uB * s->uT, s->uR);
        /* the loss gradient built on the device (dllm_tf_device_forward_logp: rl_step and
         * sft at temperature 1; the autoregressive models' other rollout temperatures
         * upload host dlogits instead and leave this item out: an upper bound there) */
        item(p, false, "update: kept head rows", (int64_t)s->uR * 16,
             "%d rows x 16: targets, log-probs, log-sum-exps, dL/dlogp (the logits are "
             "made again a chunk at a time)", s->uR);
        item(p, false, "update: dlogits (one chunk)", dlog, "4 x %lld rows x V",
             (long long)(s->uR < rows ? s->uR : rows));
        for (int i = (int)base; i < p->n; i++)
            p->update += p->items[i].bytes;
    }
    if (chunk)
        item(p, false, "logits chunk", chunk * (4 * d.V + 8), "%lld rows x (4 V + 8) (of at most "
             "%lld)", (long long)chunk, (long long)rows);
    if (roll && a->sampler == DLLM_SAMPLER_BLOCK) { /* dllm_sample_model's buffers */
        /* the logits rows grow to the widest step's chunk: at most the B G generated
         * rows, head() calls of max_rows; under CFG a chunk's cond and uncond rows share
         * them (and hrows) */
        int64_t B = s->B, BB = s->cfg ? 2 * B : B, nr = B * s->G;
        int64_t lr = s->cfg ? 2 * min64(nr, rows / 2) : min64(nr, rows);
        int64_t b = BB * T * 5 + nr * (4 + (s->cfg ? 4 : 0) + 8 + 4 + 4 + 4 +
                                      (s->random_remask ? 8 : 0) + 2 + 4) +
                    4 * (B + 1) + 4 + 8 * B + (s->cfg ? 4 * lr : 0) + lr * d.V * 4;
        item(p, true, "device sampler", b, "canvas and key mask 5 BB T, per row %d bytes, "
             "%lld x V logits", 30 + (s->cfg ? 4 : 0) + (s->random_remask ? 8 : 0),
             (long long)lr);
    }
    if (roll && a->sampler == DLLM_SAMPLER_DREAM) { /* dllm_dream_sample_model's buffers */
        int64_t B = s->B, nr = B * s->G;
        int64_t lr = min64(nr, rows); /* grown to the widest step's chunk, as above */
        int64_t b = B * T * 5 + nr * 39 + 4 * (B + 1) + 4 + lr * d.V * 4;
        item(p, true, "device sampler", b, "canvas and key mask 5 B T, per row 39 bytes, "
             "%lld x V logits", (long long)lr);
    }
    if (roll && a->sampler == DLLM_SAMPLER_AR) { /* one dllm_ar_sample on the device */
        int64_t B = s->B, S = T, hr = B < rows ? B : rows;
        item(p, true, "KV cache", 2 * 4 * d.L * B * S * d.KD + 2 * B * S,
             "K, V 2 x 4 L B (P+G) KD, key masks 2 B (P+G)");
        acts_cap ka = {0};
        acts_use(&ka, B, s->P, B, &d);
        item(p, true, "activations: KV-cache decoding", acts_bytes(&d, ka.N, ka.att, ka.R),
             "one layer: %lld rows (the prefill), %lld head rows%s", (long long)ka.N,
             (long long)B, d.r ? ", LoRA x A^T" : "");
        item(p, true, "AR device sampler", 4 * B * s->P + 12 * B * s->G + 9 * B + hr * d.V * 4,
             "prompts 4 B P, records 12 B G, 9 B, %lld x V logits", (long long)hr);
    }
    if (wsneed > 0) {
        int64_t ws = BACKEND_WS_MIN;
        while (ws < wsneed)
            ws *= 2;
        p->backend_ws = ws;
        item(p, false, "backend workspace", ws,
             "1 MiB doubled to fit %lld (bf16 / FP8 / INT8 linears)", (long long)wsneed);
    }
    if (qaneed > 0) { /* grown to the largest request, counted with the workspace */
        p->backend_ws += qaneed;
        item(p, false, rf == V_INT8 ? "INT8 activations (fused)" : "FP8 activations (fused)",
             qaneed, "codes + scales of the widest input a norm or SwiGLU quantises");
    }
    item(p, false, "cuBLASLt workspace", CUBLASLT_WS, "32 MiB");
    p->fixed = CUBLASLT_WS + p->backend_ws;
    for (int i = 0; i < p->n; i++) {
        if (!p->items[i].transient)
            p->kept += p->items[i].bytes;
        p->peak += p->items[i].bytes;
    }
    return 0;
}

void mem_plan_device_print(const mem_dev_plan *p, const char *what, int64_t cap, FILE *f)
{
    const double MIB = 1024.0 * 1024.0;
    fprintf(f, "device memory now (%s phase): %s\n", mem_dev_phase_names[p->phase], what);
    if (p->phase != MEM_DEV_TRAIN)
        fprintf(f, "what the device path allocates today for this phase\n\n");
    else if (p->update)
        fprintf(f, "what the device path allocates today: the rollouts, the scoring and the "
                   "update (gradients, AdamW moments, the kept forward and its backward; the "
                   "masters stay here, checkpoints stream from them)\n\n");
    else
        fprintf(f, "what the device path allocates today for the rollouts and the scoring "
                   "(the update runs on the host)\n\n");
    int wn = 4;
    for (int i = 0; i < p->n; i++) {
        int l = (int)strlen(p->items[i].name);
        wn = l > wn ? l : wn;
    }
    fprintf(f, "%-9s  %-*s  %12s  %s\n", "held", wn, "item", "MiB", "bytes");
    for (int i = 0; i < p->n; i++)
        fprintf(f, "%-9s  %-*s  %12.3f  %s\n", p->items[i].transient ? "per call" : "kept", wn,
                p->items[i].name, (double)p->items[i].bytes / MIB, p->items[i].formula);
    fprintf(f, "\npeak: %.3f MiB (%.2f GB; %lld bytes)\n", (double)p->peak / MIB,
            (double)p->peak / 1e9, (long long)p->peak);
    if (p->update)
        fprintf(f, "of which the update's own items: %.3f MiB (%.2f GB)\n",
                (double)p->update / MIB, (double)p->update / 1e9);
    if (cap > 0)
        fprintf(f, "fits in %.2f GB: %s\n", (double)cap / 1e9, p->peak <= cap ? "yes" : "no");
}
