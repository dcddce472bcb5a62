/* transformer.c: the transformer core (transformer.h) -- the parameter table
 * an architecture descriptor (arch.h) lays out, initialisation, LoRA,
 * gradients and checkpoints. The precision copies are in transformer_view.c,
 * forward and backward in transformer_fwd.c.
 *
 * Memory: parameters in one allocation carved into named pointers in the HF
 * order the descriptor gives; gradients mirror it (allocated on first use);
 * the LoRA A/B matrices in one allocation of their own (B = 0 at enable). */
#include "dllm/transformer_impl.h"
#include "dllm/param_io.h"
#include "kernels/rng.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* ---- shapes and names ------------------------------------------------------------- */

void tf_lin_shape(const dllm_tf *m, int j, int *out, int *in)
{
    switch (j) {
    case DLLM_LIN_Q: *out = m->QD; *in = m->C; break;
    case DLLM_LIN_K: case DLLM_LIN_V: *out = m->KD; *in = m->C; break;
    case DLLM_LIN_O: *out = m->C; *in = m->QD; break;
    case DLLM_LIN_GATE: case DLLM_LIN_UP: *out = m->H; *in = m->C; break;
    default: *out = m->C; *in = m->H; break;
    }
}

size_t tf_slot_numel(const dllm_tf *m, int t)
{
    if (t < DLLM_NLIN) {
        int o, i;
        tf_lin_shape(m, t, &o, &i);
        return (size_t)o * i;
    }
    switch (t) {
    case DLLM_T_Q_NORM: case DLLM_T_K_NORM: return (size_t)m->HD;
    case DLLM_T_Q_BIAS: return (size_t)m->QD;
    case DLLM_T_K_BIAS: case DLLM_T_V_BIAS: return (size_t)m->KD;
    default: return (size_t)m->C;
    }
}

static bool slot_is_bias(int t) { return t >= DLLM_T_Q_BIAS && t <= DLLM_T_V_BIAS; }

static void add_param(dllm_param *p, int *np, const char *name, int ndim, int64_t d0,
                      int64_t d1)
{
    dllm_param *q = &p[(*np)++];
    snprintf(q->name, sizeof q->name, "%s", name);
    q->ndim = ndim;
    q->shape[0] = d0;
    q->shape[1] = ndim == 2 ? d1 : 0;
    q->numel = (size_t)d0 * (size_t)(ndim == 2 ? d1 : 1);
}

/* "<layer prefix><path>" of slot t in layer l. */
static void layer_name(const dllm_tf *m, int l, int t, char *buf, size_t cap)
{
    int n = snprintf(buf, cap, m->arch->layer_fmt, l);
    snprintf(buf + n, cap - (size_t)n, "%s", m->arch->path[t]);
}

int dllm_tf_check_config(const dllm_arch_desc *a, const dllm_model_config *c, const char *where,
                         dllm_err *err)
{
    if (c->d_model <= 0 || c->n_layers <= 0 || c->n_heads <= 0 || c->n_kv_heads <= 0 ||
        c->mlp_hidden <= 0 || c->vocab_size <= 0 || c->embedding_size < c->vocab_size ||
        (a->embed_is_vocab && c->embedding_size != c->vocab_size))
        return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: non-positive or inconsistent model sizes",
                            where);
    if (c->head_dim <= 0 || c->head_dim % 2 || c->n_heads % c->n_kv_heads)
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "%s: head_dim %d must be even and the head count %d a multiple of "
                            "the key/value head count %d", where, c->head_dim, c->n_heads,
                            c->n_kv_heads);
    if (c->weight_tying && !a->tie_allowed)
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "%s: weight_tying true is not supported (%s has an untied head)",
                            where, a->name);
    return 0;
}

/* ---- allocation ------------------------------------------------------------------- */

/* Walks the parameter table in build order, pointing the layer structs at the
 * data (grads false) or the gradients (NULL when frozen). */
static void carve(dllm_tf *m, bool grads)
{
    int k = 0;
    tf_layer *lw = grads ? m->lg : m->lw;
#define NEXT (grads ? m->plist[k++].grad : m->plist[k++].data)
    float *embed = NEXT;
    for (int l = 0; l < m->L; l++)
        for (int i = 0; i < m->arch->n_order; i++)
            lw[l].t[m->arch->order[i]] = NEXT;
    float *norm = NEXT;
    float *head = m->tied ? embed : NEXT;
#undef NEXT
    if (grads) {
        m->d_embed = embed, m->d_final_norm = norm, m->d_head = head;
    } else {
        m->embed = embed, m->final_norm = norm, m->head = head;
    }
}

/* A model with uninitialised weights (gradients come on demand). */
static dllm_tf *model_alloc(const dllm_arch_desc *a, const dllm_model_config *cfg, bool shape)
{
    dllm_tf *m = dllm_calloc(1, sizeof *m);
    m->arch = a;
    m->be = dllm_backend_cpu();
    m->cfg = *cfg;
    m->C = cfg->d_model;
    m->L = cfg->n_layers;
    m->NH = cfg->n_heads;
    m->NKV = cfg->n_kv_heads;
    m->HD = cfg->head_dim;
    m->H = cfg->mlp_hidden;
    m->V = cfg->embedding_size;
    m->QD = m->NH * m->HD;
    m->KD = m->NKV * m->HD;
    m->tied = cfg->weight_tying;

    /* the parameter table in HF order */
    m->plist = dllm_calloc((size_t)a->n_order * m->L + 3, sizeof *m->plist);
    char nm[96];
    add_param(m->plist, &m->np, a->embed, 2, m->V, m->C);
    for (int l = 0; l < m->L; l++)
        for (int i = 0; i < a->n_order; i++) {
            int t = a->order[i], o = (int)tf_slot_numel(m, t), in = 0;
            layer_name(m, l, t, nm, sizeof nm - 8);
            strcat(nm, slot_is_bias(t) ? ".bias" : ".weight");
            if (t < DLLM_NLIN)
                tf_lin_shape(m, t, &o, &in);
            add_param(m->plist, &m->np, nm, t < DLLM_NLIN ? 2 : 1, o, in);
        }
    add_param(m->plist, &m->np, a->final_norm, 1, m->C, 0);
    if (!m->tied)
        add_param(m->plist, &m->np, a->head, 2, m->V, m->C);

    for (int i = 0; i < m->np; i++)
        m->n_params += m->plist[i].numel;
    if (shape) { /* reserved, never committed: pages appear only where written */
        void *p = mmap(NULL, m->n_params * sizeof(float), PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED) {
            fprintf(stderr, "dllm-rl: out of address space for a %zu-parameter shape model\n",
                    m->n_params);
            exit(1);
        }
        m->params = p;
        m->shape_only = true;
    } else {
        m->params = dllm_malloc(m->n_params * sizeof(float));
    }
    m->lw = dllm_calloc((size_t)m->L, sizeof *m->lw);
    m->lg = dllm_calloc((size_t)m->L, sizeof *m->lg);
    size_t off = 0;
    for (int i = 0; i < m->np; i++) {
        m->plist[i].data = m->params + off;
        off += m->plist[i].numel;
    }
    carve(m, false);
    op_rope_table_init(&m->rope, cfg->max_seq_len > 0 ? cfg->max_seq_len : 1, m->HD,
                       cfg->rope_theta);
    m->prec = dllm_precision_default();
    tf_view_master(m, &m->tv);
    return m;
}

dllm_tf *dllm_tf_create_arch(const dllm_arch_desc *a, const dllm_model_config *cfg,
                             uint64_t seed)
{
    dllm_err err;
    if (dllm_tf_check_config(a, cfg, "dllm_tf_create", &err)) {
        fprintf(stderr, "%s\n", err.msg);
        abort(); /* presets and callers validate configs; reaching here is a bug */
    }
    dllm_tf *m = model_alloc(a, cfg, false);
    /* Norm weights 1, biases 0, matrices N(0, 0.02). One stream per (tensor,
     * chunk) so the result does not depend on the thread count. */
    enum { CHUNK = 1 << 16 };
    for (int i = 0; i < m->np; i++) {
        dllm_param *p = &m->plist[i];
        if (p->ndim == 1) {
            size_t nl = strlen(p->name);
            float init = nl > 5 && !strcmp(p->name + nl - 5, ".bias") ? 0.0f : 1.0f;
            for (size_t e = 0; e < p->numel; e++)
                p->data[e] = init;
            continue;
        }
        size_t nchunk = (p->numel + CHUNK - 1) / CHUNK;
#pragma omp parallel for schedule(static)
        for (size_t c = 0; c < nchunk; c++) {
            dllm_rng r = dllm_rng_make(seed, DLLM_RNG_INIT, (uint64_t)i, c);
            size_t e1 = (c + 1) * CHUNK < p->numel ? (c + 1) * CHUNK : p->numel;
            for (size_t e = c * CHUNK; e < e1; e++)
                p->data[e] = (float)(0.02 * dllm_rng_normal(&r));
        }
    }
    return m;
}

dllm_tf *dllm_tf_create(const dllm_model_config *cfg, uint64_t seed)
{
    return dllm_tf_create_arch(dllm_arch_get(cfg->arch), cfg, seed);
}

dllm_tf *dllm_tf_create_shape(const dllm_model_config *cfg, dllm_err *err)
{
    const dllm_arch_desc *a = dllm_arch_get(cfg->arch);
    if (dllm_tf_check_config(a, cfg, "model", err))
        return NULL;
    return model_alloc(a, cfg, true);
}

static void lora_free(dllm_tf *m)
{
    free(m->lora_params);
    free(m->ad);
    free(m->llist);
    m->lora_params = NULL;
    m->ad = NULL;
    m->llist = NULL;
    m->nl = 0;
    m->n_lora = 0;
    m->lora_rank = m->lora_mask = 0;
    m->lora_alpha = m->lora_scale = 0.0f;
}

void dllm_tf_free(dllm_tf *m)
{
    if (!m)
        return;
    tf_moments_free(m);
    tf_device_free(m);
    tf_grads_free(m);
    tf_acts_free(&m->a);
    tf_acts_free(&m->ra);
    tf_view_free(m, &m->tv);
    tf_view_free(m, &m->rv);
    lora_free(m);
    op_rope_table_free(&m->rope);
    if (m->shape_only)
        munmap(m->params, m->n_params * sizeof(float));
    else
        free(m->params);
    free(m->lw);
    free(m->lg);
    free(m->plist);
    free(m);
}

const dllm_model_config *dllm_tf_config(const dllm_tf *m) { return &m->cfg; }
const dllm_arch_desc *dllm_tf_arch(const dllm_tf *m) { return m->arch; }

/* ---- parameters and LoRA ----------------------------------------------------------- */

int dllm_tf_params(dllm_tf *m, const dllm_param **out)
{
    tf_device_host_access(m); /* the caller may read or write the host's values */
    *out = m->plist;
    return m->np;
}

int dllm_tf_lora_params(dllm_tf *m, const dllm_param **out)
{
    tf_device_host_access(m);
    *out = m->llist;
    return m->nl;
}

int dllm_tf_lora_info(const dllm_tf *m, float *alpha, int *mask)
{
    if (alpha)
        *alpha = m->lora_alpha;
    if (mask)
        *mask = m->lora_mask;
    return m->lora_rank;
}

/* Points every base gradient pointer at grads (NULL: frozen). */
static void set_base_grads(dllm_tf *m, float *grads)
{
    size_t off = 0;
    for (int i = 0; i < m->np; i++) {
        m->plist[i].grad = grads ? grads + off : NULL;
        off += m->plist[i].numel;
    }
    carve(m, true);
}

void dllm_tf_lora_enable(dllm_tf *m, int rank, float alpha, int mask, uint64_t seed)
{
    tf_device_host_access(m); /* masters on a device come down while their layout holds */
    if (tf_device_training(m)) /* its training state has the old trainable vector's layout */
        tf_device_train_free(m);
    tf_grads_free(m); /* the trainable vector changes: its gradients and moments start again */
    tf_moments_free(m);
    lora_free(m);
    tf_acts_free(&m->a); /* the LoRA activations change size */
    tf_acts_free(&m->ra);
    mask &= LORA_ALL;
    if (rank <= 0 || mask == 0)
        return;

    m->lora_rank = rank;
    m->lora_alpha = alpha;
    m->lora_scale = alpha / (float)rank;
    m->lora_mask = mask;
    m->ad = dllm_calloc((size_t)m->L * DLLM_NLIN, sizeof *m->ad);
    int ntarget = 0;
    for (int j = 0; j < DLLM_NLIN; j++)
        ntarget += (mask >> j) & 1;
    m->llist = dllm_calloc((size_t)2 * ntarget * m->L, sizeof *m->llist);
    char mod[80], nm[96];
    for (int l = 0; l < m->L; l++)
        for (int j = 0; j < DLLM_NLIN; j++) {
            if (!((mask >> j) & 1))
                continue;
            int o, i;
            tf_lin_shape(m, j, &o, &i);
            layer_name(m, l, j, mod, sizeof mod);
            snprintf(nm, sizeof nm, "base_model.model.%s.lora_A.weight", mod);
            add_param(m->llist, &m->nl, nm, 2, rank, i);
            snprintf(nm, sizeof nm, "base_model.model.%s.lora_B.weight", mod);
            add_param(m->llist, &m->nl, nm, 2, o, rank);
        }
    for (int i = 0; i < m->nl; i++)
        m->n_lora += m->llist[i].numel;
    m->lora_params = dllm_calloc(m->n_lora, sizeof(float)); /* B = 0 */
    size_t off = 0;
    for (int i = 0; i < m->nl; i++) {
        m->llist[i].data = m->lora_params + off;
        off += m->llist[i].numel;
    }
    int k = 0;
    for (int l = 0; l < m->L; l++)
        for (int j = 0; j < DLLM_NLIN; j++) {
            if (!((mask >> j) & 1))
                continue;
            tf_lora *ad = &m->ad[l * DLLM_NLIN + j];
            tf_lin_shape(m, j, &ad->out, &ad->in);
            ad->A = m->llist[k++].data;
            ad->B = m->llist[k++].data;
            if (m->shape_only) /* no values anywhere: an 8B plan's adapters stay untouched */
                continue;
            /* PEFT: kaiming_uniform(a = sqrt(5)) on A [r, in] = U(-1/sqrt(in), 1/sqrt(in)) */
            double bound = 1.0 / sqrt((double)ad->in);
            dllm_rng r = dllm_rng_make(seed, DLLM_RNG_INIT,
                                       1000000u + (uint64_t)l * DLLM_NLIN + j, 1);
            for (size_t e = 0; e < (size_t)rank * ad->in; e++)
                ad->A[e] = (float)((2.0 * dllm_rng_uniform(&r) - 1.0) * bound);
        }
}

/* The host's trainable vector (not brought up to date). */
static float *host_trainable(dllm_tf *m, size_t *n)
{
    if (m->lora_rank) {
        *n = m->n_lora;
        return m->lora_params;
    }
    *n = m->n_params;
    return m->params;
}

static const float *tf_trainable(void *model, size_t *n)
{
    dllm_tf *m = model;
    tf_device_pull(m); /* where a device's copy is the trainable vector */
    return host_trainable(m, n);
}

void tf_grads_free(dllm_tf *m)
{
    if (m->grad)
        m->grad_be->ops->free(m->grad_be, m->grad);
    m->grad = NULL, m->grad_be = NULL, m->n_train = 0;
    set_base_grads(m, NULL);
    for (int i = 0; i < m->nl; i++)
        m->llist[i].grad = NULL;
    for (int k = 0; k < m->L * DLLM_NLIN; k++) {
        if (m->ad)
            m->ad[k].dA = m->ad[k].dB = NULL;
        if (m->dad)
            m->dad[k].dA = m->dad[k].dB = NULL;
    }
}

/* The gradients exist only once needed: a model that is only run or saved never pays
 * for them (8B parameters would double the memory). */
void tf_ensure_grads(dllm_tf *m)
{
    dllm_backend *cpu = dllm_backend_cpu();
    if (m->grad && m->grad_be == cpu)
        return;
    tf_grads_free(m);
    size_t n;
    host_trainable(m, &n);
    m->grad = cpu->ops->alloc(cpu, n * sizeof(float));
    m->grad_be = cpu;
    m->n_train = n;
    if (!m->lora_rank) {
        set_base_grads(m, m->grad);
        return;
    }
    for (size_t i = 0, off = 0; i < (size_t)m->nl; off += m->llist[i++].numel)
        m->llist[i].grad = m->grad + off;
    for (int k = 0; k < m->L * DLLM_NLIN; k++) {
        tf_lora *a = &m->ad[k];
        if (a->A) {
            a->dA = m->grad + (a->A - m->lora_params);
            a->dB = m->grad + (a->B - m->lora_params);
        }
    }
}

/* The host's gradients; NULL while the model trains on a device (its are there:
 * dllm_optim_grad_buffer, dllm_tf_device_grads). */
static float *tf_grads(void *model)
{
    dllm_tf *m = model;
    if (tf_device_training(m))
        return NULL;
    tf_ensure_grads(m);
    return m->grad;
}

/* ---- the optimizer ------------------------------------------------------------------ */

void tf_moments_free(dllm_tf *m)
{
    if (m->adam_m) {
        m->adam_be->ops->free(m->adam_be, m->adam_m);
        m->adam_be->ops->free(m->adam_be, m->adam_v);
    }
    m->adam_m = m->adam_v = NULL;
    m->adam_be = NULL;
}

void tf_moments(dllm_tf *m, dllm_backend *be, size_t n)
{
    if (m->adam_m && m->adam_be == be)
        return;
    tf_moments_free(m);
    m->adam_be = be;
    m->adam_m = be->ops->alloc(be, n * sizeof(float)); /* zero on every backend */
    m->adam_v = be->ops->alloc(be, n * sizeof(float));
}

/* The state one step updates: the device's where the model trains there, else the
 * host's (the CPU backend's memory). With `step` the trainable vector and the moments
 * (made on first use) too; without, only the gradients (handing out the host's
 * trainable vector would mark a device's trainer view for a rebuild). */
static void update_state(dllm_tf *m, tf_update *u, bool step)
{
    if (!tf_device_update(m, u, step)) {
        *u = (tf_update){.be = dllm_backend_cpu(), .g = tf_grads(m), .n = m->n_train};
        if (step)
            u->p = host_trainable(m, &u->n);
    }
    if (!step)
        return;
    tf_moments(m, u->be, u->n);
    u->m = m->adam_m;
    u->v = m->adam_v;
}

static void tf_zero_grad(void *model)
{
    dllm_tf *m = model;
    tf_update u;
    update_state(m, &u, false);
    u.be->ops->memset0(u.be, u.g, u.n * sizeof(float));
}

static float *tf_grad_buffer(void *model, size_t *n, dllm_backend **be)
{
    dllm_tf *m = model;
    tf_update u;
    update_state(m, &u, false);
    *n = u.n;
    *be = u.be;
    return u.g;
}

static double tf_optim_step(void *model, const dllm_adamw_args *a)
{
    dllm_tf *m = model;
    tf_update u;
    update_state(m, &u, true);
    double norm = u.be->ops->adamw_step(u.be, u.p, u.g, u.m, u.v, u.n, a);
    if (!isfinite(norm))
        return norm;
    if (tf_device_training(m))
        tf_device_updated(m);
    else /* the host's stepped beside a device's copies, which are rebuilt from it */
        tf_device_host_written(m);
    return norm;
}

static const float *tf_trainable_host(void *model, size_t *n)
{
    dllm_tf *m = model;
    tf_update u;
    if (tf_device_update(m, &u, false))
        return NULL;
    return host_trainable(m, n);
}

static float *host_state(dllm_tf *m, dllm_state s)
{
    size_t n;
    float *p = host_trainable(m, &n);
    if (s == DLLM_STATE_PARAMS) /* a read or a swap makes no moments: a step or a moment does */
        return p;
    tf_moments(m, dllm_backend_cpu(), n); /* (no gradients: a moment is not a step) */
    return s == DLLM_STATE_ADAM_M ? m->adam_m : m->adam_v;
}

static void tf_state_move(void *model, dllm_state s, size_t off, size_t n, float *buf,
                          bool write)
{
    dllm_tf *m = model;
    if (tf_device_training(m)) {
        tf_device_state_move(m, s, off, n, buf, write);
    } else if (write) {
        memcpy(host_state(m, s) + off, buf, n * sizeof(float));
        if (s == DLLM_STATE_PARAMS) /* a device's copies are built again from them */
            tf_device_host_written(m);
    } else {
        memcpy(buf, host_state(m, s) + off, n * sizeof(float));
    }
}

static const dllm_optim_ops tf_optim_ops = {
    .trainable = tf_trainable, .grads = tf_grads, .zero_grad = tf_zero_grad,
    .grad_buffer = tf_grad_buffer, .step = tf_optim_step,
    .trainable_host = tf_trainable_host, .state_move = tf_state_move,
};

dllm_optim dllm_tf_optim(dllm_tf *m) { return (dllm_optim){&tf_optim_ops, m}; }

void dllm_tf_trainer_changed(dllm_tf *m) { tf_trainer_follow(m); }

/* ---- checkpoints ------------------------------------------------------------------ */

int dllm_tf_load(dllm_tf **out, const char *dir, dllm_err *err)
{
    return dllm_tf_load_arch(out, NULL, dir, err);
}

int dllm_tf_load_arch(dllm_tf **out, const dllm_arch_desc *a, const char *dir, dllm_err *err)
{
    *out = NULL;
    dllm_model_config cfg;
    int rc = dllm_config_load(&cfg, dir, err);
    if (rc)
        return rc;
    char where[4096];
    snprintf(where, sizeof where, "%s/config.json", dir);
    if (!a)
        a = dllm_arch_get(cfg.arch);
    if ((rc = dllm_tf_check_config(a, &cfg, where, err)))
        return rc;
    dllm_tf *m = model_alloc(a, &cfg, false);
    if ((rc = param_io_read(m->plist, m->np, dir, err))) {
        dllm_tf_free(m);
        return rc;
    }
    *out = m;
    return 0;
}

/* A base parameter's values from the device's trainer view, where they are newer. */
static int device_param(void *ctx, int i, size_t off, size_t n, float *dst, dllm_err *err)
{
    (void)err;
    dllm_tf *m = ctx;
    size_t at = (size_t)(m->plist[i].data - m->params) + off;
    tf_state_move(m, DLLM_STATE_PARAMS, at, n, dst, false);
    return 0;
}

int dllm_tf_save(dllm_tf *m, const char *dir, st_dtype dtype, size_t max_shard_bytes,
                 dllm_err *err)
{
    /* full fine-tuning on a device: streamed from its copy, a chunk at a time (no copy of
     * the model in host memory); LoRA: the adapters, small, come down */
    param_source dev = {device_param, m};
    bool from_dev = dllm_tf_device_ahead(m) && !m->lora_rank;
    if (m->lora_rank)
        tf_device_pull(m);
    /* under LoRA each layer linear's adapter is merged into what is written */
    param_lora *lora = m->lora_rank ? dllm_calloc((size_t)m->np, sizeof *lora) : NULL;
    for (int i = 0; lora && i < m->np; i++)
        for (int l = 0; l < m->L; l++)
            for (int k = 0; k < DLLM_NLIN; k++) {
                const tf_lora *ad = &m->ad[l * DLLM_NLIN + k];
                if (m->lw[l].t[k] == m->plist[i].data && ad->A)
                    lora[i] = (param_lora){ad->A, ad->B, ad->in, ad->out};
            }
    int rc = param_io_write_dir(m->plist, m->np, lora, m->lora_rank, m->lora_scale,
                                from_dev ? &dev : NULL, &m->cfg, dir, dtype, max_shard_bytes, err);
    free(lora);
    return rc;
}

int dllm_tf_lora_load(dllm_tf *m, const char *path, dllm_err *err)
{
    if (!m->lora_rank)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: LoRA is not enabled on the model", path);
    tf_device_host_access(m);
    return param_io_read(m->llist, m->nl, path, err);
}

int dllm_tf_lora_save(dllm_tf *m, const char *path, dllm_err *err)
{
    tf_device_pull(m);
    if (!m->lora_rank)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: LoRA is not enabled on the model", path);
    return param_io_write_file(m->llist, m->nl, path, err);
}
