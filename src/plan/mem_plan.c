/* mem_plan.c: the host plans of `dllm-rl plan --device cpu` (see mem_plan.h): the CPU
 * backend's buffers for LLaDA and Qwen3.5's on the host, itemised with formulas. The GPU
 * path's memory is recorded instead (plan_memory.h).
 *
 * Symbols (the legend printed with every plan):
 *   C d_model, L layers, NH / NKV query / key-value heads, HD head_dim,
 *   QD = NH*HD, KD = NKV*HD, F mlp width, V head rows (embedding_size),
 *   P all parameters, Plin the seven block linears' parameters
 *     = L*(C*QD + 2*C*KD + QD*C + 3*C*F),
 *   r LoRA rank, nt LoRA targets, Nl = L * sum over targets of r*(in + out),
 *   S = grpo.prompts_per_step / ranks * rollout.group_size sequences per rank,
 *   Sr sequences decoded together (--rollout-batch, default S),
 *   G rollout.gen_length, Bk rollout.block_length, T = Pt + G with Pt the
 *   prompt tokens (--prompt-tokens), Ml/Mu canvases per forward in the
 *   likelihood / update (--micro-batch; whole sequences of the estimators'
 *   canvases), Kin = max(C, QD, F) the widest linear input. */
#include "src/plan/mem_plan.h"

#include "dllm/arch.h"
#include "kernels/cuda_device.h" /* the rule backward's scratch */
#include "kernels/fp8.h"

#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

const char *const mem_phase_names[MEM_NPHASE] = {"resident", "rollout", "likelihood", "update"};

#define GIB (1024.0 * 1024.0 * 1024.0)
#define DEFAULT_MICRO_BATCH 64 /* the RL loop's canvases per forward call */

void mem_plan_opts_defaults(mem_plan_opts *o)
{
    memset(o, 0, sizeof *o);
    o->ranks = 1;
    o->prompt_tokens = 200; /* d1's GSM8K prompts: about 200 tokens in LLaDA's chat format */
    o->recompute = MEM_RECOMPUTE_LAYER;
    o->recompute_every = 1;
    o->cap = (int64_t)80000000000LL;
}

/* ---- sizes --------------------------------------------------------------------------- */

int mem_parse_size(const char *s, const char *flag, int64_t *bytes, dllm_err *err)
{
    static const struct { const char *unit; double mult; } units[] = {
        {"b", 1},      {"k", 1e3},  {"kb", 1e3},  {"m", 1e6},  {"mb", 1e6},
        {"g", 1e9},    {"gb", 1e9}, {"t", 1e12},  {"tb", 1e12}, {"kib", 1024.0},
        {"mib", 1048576.0}, {"gib", GIB}, {"tib", GIB * 1024.0}};
    char *end;
    errno = 0;
    double v = s ? strtod(s, &end) : 0;
    if (!s || end == s || errno || !isfinite(v) || v <= 0)
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "%s: expected a positive size such as 80GB, 80GiB, 40G or 81920MB, got '%s'",
                            flag, s ? s : "");
    while (*end == ' ')
        end++;
    char unit[8];
    size_t n = strlen(end);
    if (n == 0 || n >= sizeof unit)
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "%s: '%s' needs a unit (B, KB, MB, GB, TB = powers of 1000; KiB, MiB, "
                            "GiB, TiB = powers of 1024)", flag, s);
    for (size_t i = 0; i <= n; i++)
        unit[i] = (char)tolower((unsigned char)end[i]);
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (!strcmp(unit, units[i].unit)) {
            double b = v * units[i].mult;
            if (b < 1 || b > 9.0e18)
                return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: size '%s' is out of range", flag, s);
            *bytes = (int64_t)llround(b);
            return DLLM_OK;
        }
    return dllm_err_set(err, DLLM_EXIT_INPUT,
                        "%s: unknown unit '%s' in '%s' (B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)", flag,
                        end, s);
}

/* ---- building ------------------------------------------------------------------------ */

/* The seven block linears: q, k, v, out, gate, up, down, and their HF names
 * in both families (LLaDA's, Qwen3's). */
enum { LIN_Q, LIN_K, LIN_V, LIN_O, LIN_GATE, LIN_UP, LIN_DOWN, NLIN };

static int lin_slot(const char *name)
{
    static const char *const names[NLIN][2] = {
        {"q_proj", "q_proj"},     {"k_proj", "k_proj"},   {"v_proj", "v_proj"},
        {"attn_out", "o_proj"},   {"ff_proj", "gate_proj"}, {"up_proj", "up_proj"},
        {"ff_out", "down_proj"}};
    for (int j = 0; j < NLIN; j++)
        if (!strcmp(name, names[j][0]) || !strcmp(name, names[j][1]))
            return j;
    return -1;
}

/* out x in of linear j */
static void lin_shape(const dllm_model_config *mc, int j, int64_t *out, int64_t *in)
{
    const int64_t C = mc->d_model, F = mc->mlp_hidden;
    const int64_t QD = (int64_t)mc->n_heads * mc->head_dim, KD = (int64_t)mc->n_kv_heads * mc->head_dim;
    switch (j) {
    case LIN_Q: *out = QD; *in = C; break;
    case LIN_K: case LIN_V: *out = KD; *in = C; break;
    case LIN_O: *out = C; *in = QD; break;
    case LIN_GATE: case LIN_UP: *out = F; *in = C; break;
    default: *out = C; *in = F; break;
    }
}

static int64_t ceil_div(int64_t a, int64_t b)
{
    return (a + b - 1) / b;
}

static int64_t min64(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

static int64_t max64(int64_t a, int64_t b)
{
    return a > b ? a : b;
}

static void add(mem_plan *p, mem_phase ph, const char *name, int64_t bytes, const char *shrink,
                const char *fmt, ...) __attribute__((format(printf, 6, 7)));

static void add(mem_plan *p, mem_phase ph, const char *name, int64_t bytes, const char *shrink,
                const char *fmt, ...)
{
    if (p->n_items == MEM_PLAN_MAX_ITEMS)
        abort(); /* a programming error: raise MEM_PLAN_MAX_ITEMS */
    mem_item *it = &p->items[p->n_items++];
    snprintf(it->name, sizeof it->name, "%s", name);
    it->phase = ph;
    it->bytes = bytes;
    snprintf(it->shrink, sizeof it->shrink, "%s", shrink ? shrink : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(it->formula, sizeof it->formula, fmt, ap);
    va_end(ap);
}

static void finish(mem_plan *p);

/* Canvases per sequence and scored rows per canvas of an estimator. */
static void estimator_shape(const dllm_cfg *cfg, bool diffusion, dllm_estimator est, int64_t *cps,
                            int64_t *rows)
{
    const int64_t G = cfg->rollout.gen_length;
    *cps = 1;
    *rows = G;
    if (!diffusion)
        return; /* exact: one causal pass over prompt + completion */
    if (est == EST_ELBO) {
        *cps = cfg->likelihood.mc_samples;
    } else if (est == EST_TRAJECTORY) {
        const int64_t steps = cfg->rollout.steps, shrink = cfg->likelihood.shrink;
        *cps = ceil_div(steps, shrink);
        *rows = min64(G, shrink * ceil_div(G, steps));
    }
}

/* Canvases per forward of a chunk that holds whole sequences. */
static int64_t whole_sequences(int64_t mb, int64_t cps, int64_t total)
{
    int64_t m = mb < cps ? cps : mb / cps * cps;
    return min64(m, total);
}

/* The run's shapes and the options' checks, every plan's start (no items). */
static int plan_base(mem_plan *p, const dllm_model_config *mc, const dllm_cfg *cfg,
                     const mem_plan_opts *o, dllm_err *err)
{
    memset(p, 0, sizeof *p);
    p->opts = *o;
    const bool diffusion = dllm_arch_is_diffusion(dllm_arch_get(mc->arch)); /* LLaDA and Dream */
    p->arch = mc->arch;
    p->diffusion = diffusion;
    if (o->ranks < 1 || cfg->grpo.prompts_per_step % o->ranks)
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "--ranks %d must divide grpo.prompts_per_step %d (groups never split)",
                            o->ranks, cfg->grpo.prompts_per_step);
    if (o->prompt_tokens < 1 || o->micro_batch < 0 || o->rollout_batch < 0)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "plan options must be positive");
    if (o->recompute == MEM_RECOMPUTE_EVERY && (o->recompute_every < 1 || o->recompute_every > mc->n_layers))
        return dllm_err_set(err, DLLM_EXIT_INPUT, "--recompute every:%d: K must be in [1, %d] (the layers)",
                            o->recompute_every, mc->n_layers);

    const int64_t C = mc->d_model, Ln = mc->n_layers, NH = mc->n_heads, HD = mc->head_dim;
    const int64_t QD = NH * HD, F = mc->mlp_hidden;
    const int64_t V = mc->embedding_size;
    const int64_t Kin = max64(C, max64(QD, F));
    const int64_t G = cfg->rollout.gen_length, Bk = cfg->rollout.block_length;
    const int64_t Pt = o->prompt_tokens, T = Pt + G;
    const int64_t S = (int64_t)cfg->grpo.prompts_per_step / o->ranks * cfg->rollout.group_size;
    if (o->rollout_batch > S)
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "--rollout-batch %d exceeds the %lld sequences per rank "
                            "(prompts_per_step / ranks x group_size)", o->rollout_batch, (long long)S);
    const int64_t Sr = o->rollout_batch ? o->rollout_batch : S;
    const int64_t mb = o->micro_batch ? o->micro_batch : DEFAULT_MICRO_BATCH;

    /* parameters: P (the model's count), Plin (block linears), Nl (LoRA) */
    const int64_t r = cfg->model.lora.rank;
    int targets = 0;
    for (int i = 0; r > 0 && i < cfg->model.lora.targets.n; i++) {
        int j = lin_slot(cfg->model.lora.targets.items[i]);
        if (j < 0)
            return dllm_err_set(err, DLLM_EXIT_INPUT, "model.lora.targets: unknown module '%s'",
                                cfg->model.lora.targets.items[i]);
        targets |= 1 << j;
    }
    int nt = 0;
    int64_t n_lin = 0, n_lora = 0, n_scales = 0;
    for (int j = 0; j < NLIN; j++) {
        int64_t out, in;
        lin_shape(mc, j, &out, &in);
        n_lin += Ln * out * in;
        if ((targets >> j) & 1) {
            nt++;
            n_lora += Ln * r * (in + out);
        }
        const char *sc = cfg_names_name(&cfg_names_fp8_scaling, cfg->rollout.fp8.scaling);
        if (cfg->rollout.precision == CFG_ROLLOUT_INT8) /* per row, or per 128x128 block */
            sc = cfg->rollout.int8.scaling == CFG_INT8_BLOCK ? "block" : "channel";
        n_scales += Ln * (!strcmp(sc, "block")     ? ceil_div(out, 128) * ceil_div(in, 128)
                          : !strcmp(sc, "channel") ? out
                                                   : 1);
    }
    const int64_t P = dllm_config_num_params(mc);
    const bool lora = n_lora > 0;
    const int64_t rr = lora ? r : 0;
    p->n_params = P;
    p->n_lin = n_lin;
    p->n_lora = n_lora;
    p->seqs = (int)S;
    p->rollout_seqs = (int)Sr;
    p->T = (int)T;

    /* estimators: canvases per sequence (cps) and rows per canvas */
    int64_t cps_w, rows_w, cps_o, rows_o;
    estimator_shape(cfg, diffusion, cfg->correction.estimator, &cps_w, &rows_w);
    estimator_shape(cfg, diffusion, cfg->grpo.logp_estimator, &cps_o, &rows_o);
    const int64_t Ml = max64(min64(mb, S * cps_w), min64(mb, S * cps_o));
    const int64_t Mu = whole_sequences(mb, cps_o, S * cps_o);
    p->mb_lik = (int)Ml;
    p->mb_upd = (int)Mu;

    snprintf(p->symbols, sizeof p->symbols,
             "C %lld, L %lld, NH %lld, NKV %d, HD %lld, F %lld, V %lld, P %lld, Plin %lld, "
             "r %lld, nt %d, Nl %lld, S %lld, Sr %lld, Pt %lld, G %lld, Bk %lld, T %lld, "
             "Ml %lld, Mu %lld, Kin %lld",
             (long long)C, (long long)Ln, (long long)NH, mc->n_kv_heads, (long long)HD, (long long)F,
             (long long)V, (long long)P, (long long)n_lin, (long long)rr, nt, (long long)n_lora,
             (long long)S, (long long)Sr, (long long)Pt, (long long)G, (long long)Bk, (long long)T,
             (long long)Ml, (long long)Mu, (long long)Kin);

    return DLLM_OK;
}

/* Peaks per phase, the overall peak, and the cap (0: none, the CPU plan). */
static void finish(mem_plan *p)
{
    int64_t sum[MEM_NPHASE] = {0};
    for (int i = 0; i < p->n_items; i++)
        sum[p->items[i].phase] += p->items[i].bytes;
    p->phase_bytes[MEM_RESIDENT] = sum[MEM_RESIDENT];
    p->peak = sum[MEM_RESIDENT];
    p->peak_phase = MEM_RESIDENT;
    for (int ph = 1; ph < MEM_NPHASE; ph++) {
        p->phase_bytes[ph] = sum[MEM_RESIDENT] + sum[ph];
        if (p->phase_bytes[ph] > p->peak) {
            p->peak = p->phase_bytes[ph];
            p->peak_phase = (mem_phase)ph;
        }
    }
    p->fits = p->opts.cap <= 0 || p->peak <= p->opts.cap;
}

/* ---- the CPU backend's buffers -------------------------------------------------------- *
 *
 * What the LLaDA model (dllm/llada.c) and the RL loop allocate today, all fp32
 * unless said: the weights, their gradients or LoRA's, AdamW moments, the
 * reference; the trainer's bf16 copy (model.trainer_precision bf16: every
 * weight, stored as fp32); the rollout copy (fp8: the non-linear weights as
 * fp32-stored bf16, the codes, the scales, and the codes widened to bf16 where the
 * CPU has bf16 dot products, else a dequantised fp32 cache of every block linear, 4
 * bytes a weight, as fp8-exact and nvfp4 always; bf16: every weight); two activation sets that grow on demand
 * and stay allocated: the trainer's (L layers for backward, K under recomputation, sized by the
 * largest chunk: N = max(Ml, Mu) T tokens, with the softmax probabilities
 * L x B x NH x T x T) and the rollout forward's (one layer, N = the rollout's
 * Sr T tokens). Per set (acts_ensure): X N C + Lk N (4C + 2QD + 2KD +
 * 3F + 2) + Lk B NH T^2 + Lk 7 N r + R (2C + 1), backward scratch N (2C + 2QD +
 * 2KD + 3F + r) + 2 R C, with Lk the kept layers, X the residual slots and R the
 * head rows; under --recompute (train.recompute) the trainer's set keeps K layers and
 * ceil(L/K) + K slots (layer: K = 1), as tf_acts_ensure_fwd does. Transient:
 * the sampler's logits (Sr Bk rows), a likelihood chunk's logits (up to Ml G
 * rows, the gradient in place in the update), the FP8 linear's dequantised
 * activations (N Kin). Small tables (RoPE, token ids, masks) are left out. */
static void add_acts(mem_plan *p, const char *who, const dllm_model_config *mc, int64_t Lk, int64_t X,
                     int64_t B, int64_t T, int64_t R, int64_t r, mem_phase ph)
{
    const int64_t C = mc->d_model, NH = mc->n_heads, HD = mc->head_dim, F = mc->mlp_hidden;
    const int64_t QD = NH * HD, KD = (int64_t)mc->n_kv_heads * HD, N = B * T;
    char name[64];
    snprintf(name, sizeof name, "%s activations (%lld layer%s)", who, (long long)Lk, Lk > 1 ? "s" : "");
    add(p, ph, name, 4 * (X * N * C + Lk * N * (4 * C + 2 * QD + 2 * KD + 3 * F + 2) + Lk * 7 * N * r),
        "", "4 N (X C + Lk (4C + 2QD + 2KD + 3F + 2 + 7r)), Lk %lld, X %lld, N %lld", (long long)Lk,
        (long long)X, (long long)N);
    snprintf(name, sizeof name, "%s attention probabilities", who);
    add(p, ph, name, 4 * Lk * B * NH * T * T, "", "4 Lk B NH T^2, B %lld", (long long)B);
    snprintf(name, sizeof name, "%s backward scratch + head rows", who);
    add(p, ph, name, 4 * (N * (2 * C + 2 * QD + 2 * KD + 3 * F + r) + R * (2 * C + 1) + 2 * R * C), "",
        "4 (N (2C + 2QD + 2KD + 3F + r) + R (4C + 1)), R %lld", (long long)R);
}

int mem_plan_build_cpu(mem_plan *p, const dllm_model_config *mc, const dllm_cfg *cfg,
                       const mem_plan_opts *o, dllm_err *err)
{
    /* the items below are the block sampler's over the plain block: no q/k norms,
     * biases or shifted logits (LLaDA) */
    const dllm_arch_desc *a = dllm_arch_get(mc->arch);
    if (a->sampler != DLLM_SAMPLER_BLOCK || a->qk_norm || a->qkv_bias || a->shift_logits)
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "--device cpu: the CPU backend's buffers are planned for the LLaDA model "
                            "only; plan this model with --device cuda");
    mem_plan_opts oc = *o;
    oc.cap = 0;
    int rc = plan_base(p, mc, cfg, &oc, err); /* the shapes and the option checks */
    if (rc)
        return rc;
    p->cpu = true;
    p->n_items = 0;
    const int64_t P = p->n_params, Plin = p->n_lin, Nl = p->n_lora, Ln = mc->n_layers;
    const int64_t V = mc->embedding_size, G = cfg->rollout.gen_length, Bk = cfg->rollout.block_length;
    const int64_t T = p->T, Sr = p->rollout_seqs, r = Nl ? cfg->model.lora.rank : 0;
    const int64_t Kin = max64(mc->d_model, max64((int64_t)mc->n_heads * mc->head_dim, mc->mlp_hidden));
    const int64_t ntrain = Nl ? Nl : P;
    add(p, MEM_RESIDENT, "weights (fp32)", 4 * P, "", "4 P");
    if (Nl) {
        add(p, MEM_RESIDENT, "LoRA A/B (fp32)", 4 * Nl, "", "4 Nl");
        add(p, MEM_RESIDENT, "LoRA gradients (fp32)", 4 * Nl, "", "4 Nl");
    } else {
        add(p, MEM_RESIDENT, "gradients (fp32)", 4 * P, "", "4 P");
    }
    add(p, MEM_RESIDENT, "AdamW moments m, v (fp32)", 8 * ntrain, "", Nl ? "8 Nl" : "8 P");
    if (cfg->grpo.loss.beta > 0)
        add(p, MEM_RESIDENT, "KL reference (fp32)", 4 * ntrain, "", Nl ? "4 Nl" : "4 P");
    if (cfg->model.trainer_precision == CFG_TRAINER_BF16)
        add(p, MEM_RESIDENT, "bf16 trainer copy (stored fp32)", 4 * P, "", "4 P");
    const bool fp8 = cfg->rollout.precision == CFG_ROLLOUT_FP8 ||
                     cfg->rollout.precision == CFG_ROLLOUT_FP8_EXACT;
    if (fp8) {
        int64_t n_scales = 0;
        for (int j = 0; j < NLIN; j++) {
            int64_t out, in;
            lin_shape(mc, j, &out, &in);
            const char *sc = cfg_names_name(&cfg_names_fp8_scaling, cfg->rollout.fp8.scaling);
            n_scales += Ln * (!strcmp(sc, "block")     ? ceil_div(out, 128) * ceil_div(in, 128)
                              : !strcmp(sc, "channel") ? out
                                                       : 1);
        }
        add(p, MEM_RESIDENT, "FP8 copy: other weights (bf16 stored fp32)", 4 * (P - Plin), "", "4 (P - Plin)");
        add(p, MEM_RESIDENT, "FP8 copy: codes", Plin, "", "1 Plin");
        add(p, MEM_RESIDENT, "FP8 copy: scales (fp32)", 4 * n_scales, "", "4 x scales");
        /* the fast product reads the codes widened to bf16; without bf16 dot products on
         * this CPU it computes as fp8-exact, from the dequantised weights */
        if (cfg->rollout.precision == CFG_ROLLOUT_FP8_EXACT || !fp8_fast_blocks())
            add(p, MEM_RESIDENT, "FP8 copy: dequantised cache (fp32)", 4 * Plin, "", "4 Plin");
        else
            add(p, MEM_RESIDENT, "FP8 copy: codes as bf16 (fast product)", 2 * Plin, "", "2 Plin");
    } else if (cfg->rollout.precision == CFG_ROLLOUT_NVFP4) {
        add(p, MEM_RESIDENT, "NVFP4 copy: other weights (bf16 stored fp32)", 4 * (P - Plin), "",
            "4 (P - Plin)");
        add(p, MEM_RESIDENT, "NVFP4 copy: codes (a byte each)", Plin, "", "1 Plin");
        /* rollout.nvfp4.scaling: a scale per 16 or 32 weights, or one per row (a
         * tensor-scaled copy keeps its one scale in every row) */
        const cfg_nvfp4_scaling ns = cfg->rollout.nvfp4.scaling;
        int64_t rows = 0;
        for (int j = 0; j < NLIN; j++) {
            int64_t out, in;
            lin_shape(mc, j, &out, &in);
            rows += Ln * out;
        }
        if (ns == CFG_NVFP4_BLOCK16 || ns == CFG_NVFP4_BLOCK32)
            add(p, MEM_RESIDENT, ns == CFG_NVFP4_BLOCK16 ? "NVFP4 copy: block scales (E4M3, 1 per 16)"
                                                         : "NVFP4 copy: block scales (E4M3, 1 per 32)",
                ceil_div(Plin, ns == CFG_NVFP4_BLOCK16 ? 16 : 32), "",
                ns == CFG_NVFP4_BLOCK16 ? "Plin / 16" : "Plin / 32");
        else
            add(p, MEM_RESIDENT, "NVFP4 copy: scales (E4M3, 1 per row)", rows, "", "L sum out");
        add(p, MEM_RESIDENT, "NVFP4 copy: dequantised cache (fp32)", 4 * Plin, "", "4 Plin");
    } else if (cfg->rollout.precision == CFG_ROLLOUT_INT8) {
        const bool blk = cfg->rollout.int8.scaling == CFG_INT8_BLOCK;
        int64_t n_scales = 0, n_comp = 0;
        for (int j = 0; j < NLIN; j++) {
            int64_t out, in;
            lin_shape(mc, j, &out, &in);
            n_scales += Ln * (blk ? ceil_div(out, 128) * ceil_div(in, 128) : out);
            n_comp += Ln * out * (blk ? ceil_div(in, 128) : 1);
        }
        add(p, MEM_RESIDENT, "INT8 copy: other weights (bf16 stored fp32)", 4 * (P - Plin), "",
            "4 (P - Plin)");
        add(p, MEM_RESIDENT, "INT8 copy: codes", Plin, "", "1 Plin");
        add(p, MEM_RESIDENT, "INT8 copy: scales and compensations (fp32, int32)",
            4 * (n_scales + n_comp), "", "4 x (scales + rows x k-blocks)");
    }
    /* the activation sets, once grown, stay for the run */
    const int64_t cfgx = cfg->rollout.cfg_scale > 0 ? 2 : 1;
    const int64_t Mt = p->mb_lik > p->mb_upd ? p->mb_lik : p->mb_upd;
    int64_t cps_o, rows_o;
    estimator_shape(cfg, true, cfg->grpo.logp_estimator, &cps_o, &rows_o);
    (void)cps_o;
    const int64_t Rt = max64((int64_t)p->mb_lik * G, (int64_t)p->mb_upd * rows_o);
    /* the kept forward's slots under recomputation K (dllm_tf_set_recompute): K layers'
     * activations, ceil(L/K) + K residual slots; none: L and L + 1 */
    const int64_t K = o->recompute == MEM_RECOMPUTE_NONE    ? Ln
                      : o->recompute == MEM_RECOMPUTE_LAYER ? 1
                                                            : min64(o->recompute_every, Ln);
    add_acts(p, "trainer", mc, K, K < Ln ? ceil_div(Ln, K) + K : Ln + 1, Mt, T, Rt, r, MEM_RESIDENT);
    const int64_t Br = max64(cfgx * Sr, p->mb_lik);
    add_acts(p, "rollout", mc, 1, 2, Br, T, max64(cfgx * Sr * Bk, (int64_t)p->mb_lik * G), r,
             MEM_RESIDENT);
    /* transient */
    add(p, MEM_ROLLOUT, "sampler logits (fp32)", 4 * cfgx * Sr * Bk * V, "", "4 Sr Bk V%s",
        cfgx > 1 ? " x 2 (cfg)" : "");
    if (fp8)
        add(p, MEM_ROLLOUT, "FP8 linear input, dequantised (fp32)", 4 * cfgx * Sr * T * Kin, "",
            "4 Sr T Kin");
    add(p, MEM_LIKELIHOOD, "chunk logits (fp32)", 4 * (int64_t)p->mb_lik * G * V, "", "4 Ml G V");
    add(p, MEM_UPDATE, "chunk logits, then their gradient (fp32)", 4 * (int64_t)p->mb_upd * rows_o * V, "",
        "4 Mu %s V", rows_o == G ? "G" : "rows");
    finish(p);
    return DLLM_OK;
}

int mem_plan_build_qwen35(mem_plan *p, const dllm_model_config *mc, const qwen35_config *q,
                          const dllm_cfg *cfg, const mem_plan_opts *o, bool device,
                          dllm_err *err)
{
    if (device && cfg->rollout.precision == CFG_ROLLOUT_NVFP4)
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "rollout.precision nvfp4: the cuda backend has no NVFP4 linear "
                            "(a qwen3.5 model's NVFP4 rollouts run on the host)");
    mem_plan_opts oc = *o;
    if (!device)
        oc.cap = 0;
    oc.recompute = MEM_RECOMPUTE_NONE; /* the model keeps each layer's input (below) */
    /* LoRA's targets are Qwen3.5's names (the core's plan knows the core's) */
    const int64_t r = cfg->model.lora.rank;
    const char *names[CFG_LIST_MAX];
    for (int i = 0; i < cfg->model.lora.targets.n; i++)
        names[i] = cfg->model.lora.targets.items[i];
    int mask = 0;
    int rc = r > 0 ? qwen35_lora_mask(names, cfg->model.lora.targets.n, "model.lora.targets",
                                      &mask, err)
                   : 0;
    dllm_cfg base = *cfg;
    base.model.lora.rank = 0;
    rc = rc ? rc : plan_base(p, mc, &base, &oc, err); /* the shapes and the option checks */
    if (rc)
        return rc;
    p->cpu = !device;
    p->opts.cap = oc.cap;
    p->n_items = 0;
    int nlin = 0, nfull = 0;
    for (int l = 0; l < q->L; l++)
        nlin += q->kind[l] == QWEN35_LINEAR, nfull += q->kind[l] == QWEN35_FULL;
    const int64_t C = q->C, V = q->V, L = q->L, T = p->T, G = cfg->rollout.gen_length;
    const int64_t D = 2 * (int64_t)q->Hk * q->Dk + (int64_t)q->Hv * q->Dv;
    const int64_t KV = (int64_t)q->NKV * q->HD, Sr = p->rollout_seqs;
    const int64_t P = qwen35_num_params(q), Nl = r > 0 ? qwen35_lora_numel(q, (int)r, mask) : 0;
    p->n_params = P;
    p->n_lora = Nl;
    snprintf(p->symbols, sizeof p->symbols,
             "C %lld, L %lld (Llin %d Gated DeltaNet, Lfull %d full), K %d, NH %d, V %lld, "
             "D %lld (conv channels), "
             "S %lld (Hv Dk Dv, a linear layer's state), KV %lld (NKV HD), T %lld, G %lld, "
             "Sr %lld, Ml %d, Mu %d, P %lld (Plin: the quantised projections')",
             (long long)C, (long long)L, nlin, nfull, q->K, q->NH, (long long)V, (long long)D,
             (long long)q->Hv * q->Dk * q->Dv, (long long)KV, (long long)T, (long long)G,
             (long long)Sr, p->mb_lik, p->mb_upd, (long long)P);
    if (Nl) {
        size_t k = strlen(p->symbols);
        snprintf(p->symbols + k, sizeof p->symbols - k, ", r %lld, Nl %lld (the adapters')",
                 (long long)r, (long long)Nl);
    }
    add(p, MEM_RESIDENT, "weights (fp32)", 4 * P, "", "4 P");
    if (Nl) { /* the base frozen: the adapters train */
        const char *s = "model.lora.rank";
        add(p, MEM_RESIDENT, "LoRA A/B (fp32)", 4 * Nl, s, "4 Nl");
        add(p, MEM_RESIDENT, "LoRA gradients (fp32)", 4 * Nl, s, "4 Nl");
        add(p, MEM_RESIDENT, "AdamW moments m, v (fp32)", 8 * Nl, s, "8 Nl");
        if (cfg->grpo.loss.beta > 0)
            add(p, MEM_RESIDENT, "KL reference LoRA (fp32)", 4 * Nl, "grpo.beta: 0", "4 Nl");
    } else {
        add(p, MEM_RESIDENT, "gradients (fp32)", 4 * P, "", "4 P");
        add(p, MEM_RESIDENT, "AdamW moments m, v (fp32)", 8 * P, "", "8 P");
        if (cfg->grpo.loss.beta > 0)
            add(p, MEM_RESIDENT, "KL reference (fp32)", 4 * P, "", "4 P");
    }
    /* the bf16 trainer computes with its rounded weights (fp32 storage) beside the masters */
    if (cfg->model.trainer_precision == CFG_TRAINER_BF16)
        add(p, MEM_RESIDENT, "bf16 trainer: fp32 masters", 4 * P, "model.trainer_precision",
            "4 P");
    /* the rollout copy is a copy of the model (its projections rounded to bf16, or kept
     * fp32 beside their quantised matrices) */
    if (cfg->rollout.precision != CFG_ROLLOUT_TRAINER)
        add(p, MEM_RESIDENT, "rollout copy (fp32 storage)", 4 * P, "rollout.precision", "4 P");
    int64_t Plin = 0;
    for (int l = 0; l < q->L; l++)
        Plin += q->kind[l] == QWEN35_LINEAR ? (D + (int64_t)q->Hv * q->Dv * 2) * C
                                            : (2 * (int64_t)q->NH * q->HD * 2 + 2 * KV) * C;
    Plin += 3 * (int64_t)q->H * C * L;
    p->n_lin = Plin;
    const int rp = cfg->rollout.precision;
    if (device && (rp == CFG_ROLLOUT_FP8 || rp == CFG_ROLLOUT_FP8_EXACT ||
                   rp == CFG_ROLLOUT_INT8)) { /* the GEMMs read the codes as they are */
        add(p, MEM_RESIDENT, "quantised projections: codes (the device's layout)", Plin,
            "rollout.precision", "1 Plin (INT8: rows and columns padded to 4)");
        add(p, MEM_RESIDENT, "quantised projections: scales (at most)", 4 * ceil_div(Plin, 16),
            "rollout.precision", "4 Plin / 16");
    } else if (rp == CFG_ROLLOUT_FP8 || rp == CFG_ROLLOUT_FP8_EXACT ||
               rp == CFG_ROLLOUT_INT8 || rp == CFG_ROLLOUT_NVFP4) {
        add(p, MEM_RESIDENT, "quantised projections: codes", Plin, "rollout.precision",
            "1 Plin");
        /* fp32 scales: at most one per 16 weights (nvfp4's blocks), far fewer otherwise */
        add(p, MEM_RESIDENT, "quantised projections: scales (at most)", 4 * ceil_div(Plin, 16),
            "rollout.precision", "4 Plin / 16");
        if (rp == CFG_ROLLOUT_FP8_EXACT || rp == CFG_ROLLOUT_NVFP4 ||
            (rp == CFG_ROLLOUT_FP8 && !fp8_fast_blocks()))
            add(p, MEM_RESIDENT, "quantised projections: dequantised cache (fp32)", 4 * Plin,
                "rollout.precision", "4 Plin");
        else if (rp == CFG_ROLLOUT_FP8)
            add(p, MEM_RESIDENT, "quantised projections: codes as bf16", 2 * Plin,
                "rollout.precision", "2 Plin");
    }
    /* decoding: per sequence, per linear layer the conv inputs and the recurrent state,
     * per full layer K and V of every position */
    add(p, MEM_ROLLOUT, "linear layers: conv state (fp32)",
        4 * Sr * nlin * (int64_t)(q->K - 1) * D, "--rollout-batch", "4 Sr Llin (K-1) D");
    add(p, MEM_ROLLOUT, "linear layers: recurrent state (fp32)",
        4 * Sr * nlin * (int64_t)q->Hv * q->Dk * q->Dv, "--rollout-batch", "4 Sr Llin S");
    add(p, MEM_ROLLOUT, "full layers: KV cache (fp32)", 8 * Sr * nfull * T * KV,
        "--rollout-batch", "8 Sr Lfull T KV");
    add(p, MEM_ROLLOUT, "last logits per sequence (fp32)", 4 * Sr * V, "--rollout-batch",
        "4 Sr V");
    /* the kept forward: each row's layer inputs; the backward recomputes one layer */
    add(p, MEM_RESIDENT, "kept layer inputs (fp32)", 4 * (int64_t)p->mb_upd * (L + 1) * T * C,
        "--micro-batch", "4 Mu (L+1) T C");
    if (device) { /* the CUDA backend keeps the log-sum-exp; the rule's scratch is its own */
        add(p, MEM_UPDATE, "full layer backward: attention state (log-sum-exp, fp32)",
            4 * (int64_t)q->NH * T, "", "4 NH T");
        add(p, MEM_UPDATE, "Gated DeltaNet backward: recomputed states (workspace)",
            4 * (int64_t)dllm_cuda_gd_rule_bwd_scratch_floats(1, (int)T, q->Hk, q->Dk, q->Hv,
                                                              q->Dv),
            "", "4 (Hv S (ceil(T/64) + min(T,64) + 2) + 2 T Hv Dk)");
    } else {
        add(p, MEM_UPDATE, "full layer backward: probabilities (fp32)",
            4 * (int64_t)q->NH * T * T, "", "4 NH T T");
    }
    if (device) { /* one batch row's head at a time; the scored rows' logits are the host's */
        add(p, MEM_LIKELIHOOD, "one row's head logits (fp32, to the host)", 4 * T * V, "",
            "4 T V");
        add(p, MEM_UPDATE, "one row's head logits or their gradient (fp32)", 4 * T * V, "",
            "4 T V");
    } else {
        add(p, MEM_LIKELIHOOD, "logits of the scored rows (fp32)",
            4 * (int64_t)p->mb_lik * G * V, "--micro-batch", "4 Ml G V");
        add(p, MEM_UPDATE, "logits, then their gradient (fp32)", 4 * (int64_t)p->mb_upd * G * V,
            "--micro-batch", "4 Mu G V");
    }
    finish(p);
    return DLLM_OK;
}

/* ---- output -------------------------------------------------------------------------- */

static const char *recompute_name(const mem_plan_opts *o, char *buf, size_t n)
{
    if (o->recompute == MEM_RECOMPUTE_EVERY)
        snprintf(buf, n, "every:%d", o->recompute_every);
    else
        snprintf(buf, n, "%s", o->recompute == MEM_RECOMPUTE_NONE ? "none" : "layer");
    return buf;
}

void mem_plan_print(const mem_plan *p, const char *what, FILE *f)
{
    fprintf(f, "memory plan: %s\n", what);
    fprintf(f, "%s, %d rank%s: %d sequences per rank, T = %d tokens; "
               "%d canvases per forward (likelihood), %d (update)\n",
            p->cpu ? "CPU backend (today's buffers)"
                   : "cuda device (the arrays the model allocates there, counted from its "
                     "shapes: not recorded)",
            p->opts.ranks, p->opts.ranks > 1 ? "s" : "", p->seqs, p->T, p->mb_lik, p->mb_upd);
    fprintf(f, "symbols: %s\n\n", p->symbols);
    int wn = 4;
    for (int i = 0; i < p->n_items; i++) {
        int l = (int)strlen(p->items[i].name);
        wn = l > wn ? l : wn;
    }
    fprintf(f, "%-10s  %-*s  %8s  %s\n", "phase", wn, "item", "GiB", "formula (bytes)");
    for (int ph = 0; ph < MEM_NPHASE; ph++)
        for (int i = 0; i < p->n_items; i++) {
            const mem_item *it = &p->items[i];
            if ((int)it->phase == ph)
                fprintf(f, "%-10s  %-*s  %8.2f  %s\n", mem_phase_names[ph], wn, it->name,
                        (double)it->bytes / GIB, it->formula);
        }
    fprintf(f, "\npeak per phase (resident + the phase's transient items):\n");
    for (int ph = 0; ph < MEM_NPHASE; ph++)
        fprintf(f, "  %-10s  %8.2f GiB%s\n", mem_phase_names[ph], (double)p->phase_bytes[ph] / GIB,
                ph == (int)p->peak_phase ? "   <- peak" : "");
    fprintf(f, "peak: %.2f GiB (%.2f GB) in the %s phase\n", (double)p->peak / GIB, (double)p->peak / 1e9,
            mem_phase_names[p->peak_phase]);
    if (p->opts.cap > 0)
        fprintf(f, "fits in %.2f GB (%.2f GiB): %s\n", (double)p->opts.cap / 1e9, (double)p->opts.cap / GIB,
                p->fits ? "yes" : "no");
    else
        fprintf(f, "no cap: host memory (the activation sets stay allocated once grown)\n");
}

void mem_plan_print_json(const mem_plan *p, const char *what, FILE *f)
{
    char rb[32];
    json_t *items = json_array();
    for (int i = 0; i < p->n_items; i++) {
        const mem_item *it = &p->items[i];
        json_array_append_new(items, json_pack("{s:s, s:s, s:I, s:s}", "name", it->name, "phase",
                                               mem_phase_names[it->phase], "bytes", (json_int_t)it->bytes,
                                               "formula", it->formula));
    }
    json_t *phases = json_object();
    for (int ph = 0; ph < MEM_NPHASE; ph++)
        json_object_set_new(phases, mem_phase_names[ph], json_integer((json_int_t)p->phase_bytes[ph]));
    json_t *o = json_pack(
        "{s:s, s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:s, s:I, s:I, s:I, s:s, s:o, s:o, s:I, s:s, s:I, s:b}",
        "what", what, "arch", cfg_names_name(&cfg_names_arch, p->arch), "ranks", p->opts.ranks,
        "sequences_per_rank", p->seqs, "rollout_batch", p->rollout_seqs, "tokens", p->T,
        "micro_batch_likelihood", p->mb_lik, "micro_batch_update", p->mb_upd, "recompute",
        recompute_name(&p->opts, rb, sizeof rb), "params",
        (json_int_t)p->n_params, "lora_params", (json_int_t)p->n_lora, "linear_params", (json_int_t)p->n_lin,
        "symbols", p->symbols, "items", items, "phases", phases, "peak_bytes", (json_int_t)p->peak,
        "peak_phase", mem_phase_names[p->peak_phase], "cap_bytes", (json_int_t)p->opts.cap, "fits",
        p->fits);
    char *s = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    fprintf(f, "%s\n", s);
    free(s);
    json_decref(o);
}
