/* rl_log.c: the RL loop's log writes; see rl_log.h. */
#include "src/log/rl_log.h"

#include "config.h"
#include "kernels/ops.h"
#include "src/config/cfg_names.h"
#include "src/comm/comm.h"
#include "src/rl/rl_run.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int rl_eval_names(const rl_run *run, char names[][RL_EVAL_NAME_MAX])
{
    const cfg_int_list *gl = &run->cfg.eval.gen_lengths;
    if (gl->n == 0) {
        snprintf(names[0], RL_EVAL_NAME_MAX, "%s", run->task->name);
        return 1;
    }
    for (int i = 0; i < gl->n; i++)
        snprintf(names[i], RL_EVAL_NAME_MAX, "%s@%d", run->task->name, gl->v[i]);
    return gl->n;
}

int rl_log_create(rl_run *run, const char *path, const char *git_revision, const char *started,
                  dllm_err *err)
{
    if (run->rank != 0)
        return 0;
    const dllm_cfg *cfg = &run->cfg;
    char *yaml = dllm_cfg_dump(cfg);
    char names[CFG_INT_LIST_MAX][RL_EVAL_NAME_MAX];
    const char *tasks[CFG_INT_LIST_MAX];
    const int n_tasks = rl_eval_names(run, names);
    for (int i = 0; i < n_tasks; i++)
        tasks[i] = names[i];
    char machine[512];
    op_cpu_paths(machine, sizeof machine);
    h5log_meta meta = {.config_yaml = yaml, .version = PACKAGE_VERSION, .git_revision = git_revision,
                       .device = cfg_names_name(&cfg_names_device, cfg->device), .started = started,
                       .machine = machine, .seed = cfg->seed};
    h5log_dims dims = {.max_prompt = rl_max_prompt(run), .max_completion = cfg->rollout.gen_length,
                       .denoise_steps = cfg->rollout.steps, .group_size = cfg->rollout.group_size,
                       .n_eval_tasks = n_tasks, .eval_tasks = tasks};
    int rc = h5log_create(&run->log, path, &meta, &dims, err);
    free(yaml);
    return rc;
}

/* ---- trajectories: rows packed with the column table ------------------------------ */

static int col_width(int c, int P, int G)
{
    switch (h5log_traj_cols[c].width) {
    case H5LOG_WP: return P;
    case H5LOG_WG: return G;
    case H5LOG_W1: return 1;
    default: return 0; /* the step is the batch's, not the row's */
    }
}

size_t rl_traj_record_size(int P, int G)
{
    size_t rs = 0;
    for (int c = 0; c < H5LOG_N_TRAJ; c++)
        rs += (size_t)col_width(c, P, G) * h5log_kind_size(h5log_traj_cols[c].kind);
    return rs;
}

static void pad_values(char *p, h5log_kind k, size_t n)
{
    for (size_t j = 0; j < n; j++)
        switch (k) {
        case H5LOG_F64: ((double *)p)[j] = NAN; break;
        case H5LOG_F32: ((float *)p)[j] = NAN; break;
        case H5LOG_I64: ((int64_t *)p)[j] = -1; break;
        case H5LOG_I32: ((int32_t *)p)[j] = -1; break;
        case H5LOG_I16: ((int16_t *)p)[j] = -1; break;
        }
}

void *rl_traj_pack(const h5log_traj_batch *b, int P, int G, size_t *len)
{
    size_t rs = rl_traj_record_size(P, G);
    char *buf = dllm_malloc(rs * (size_t)(b->n ? b->n : 1)), *p = buf;
    for (int i = 0; i < b->n; i++)
        for (int c = 0; c < H5LOG_N_TRAJ; c++) {
            size_t w = (size_t)col_width(c, P, G), bytes = w * h5log_kind_size(h5log_traj_cols[c].kind);
            const char *src = h5log_traj_col_data(b, c);
            if (!bytes)
                continue;
            if (src)
                memcpy(p, src + (size_t)i * bytes, bytes);
            else /* an absent column: its pad, as the writer would log it */
                pad_values(p, h5log_traj_cols[c].kind, w);
            p += bytes;
        }
    *len = (size_t)(p - buf);
    return buf;
}

void rl_traj_unpack(const void *buf, size_t len, int P, int G, int64_t step, h5log_traj_batch *out)
{
    size_t rs = rl_traj_record_size(P, G);
    int n = (int)(len / rs);
    memset(out, 0, sizeof *out);
    out->n = n;
    out->step = step;
    out->prompt_stride = P;
    out->completion_stride = G;
    const char *p = buf;
    char *col[H5LOG_N_TRAJ] = {0};
    size_t bytes[H5LOG_N_TRAJ];
    for (int c = 0; c < H5LOG_N_TRAJ; c++) {
        bytes[c] = (size_t)col_width(c, P, G) * h5log_kind_size(h5log_traj_cols[c].kind);
        if (bytes[c]) {
            col[c] = dllm_malloc(bytes[c] * (size_t)(n ? n : 1));
            /* the batch's pointer field of column c */
            memcpy((char *)out + h5log_traj_cols[c].off, &col[c], sizeof col[c]);
        }
    }
    for (int i = 0; i < n; i++)
        for (int c = 0; c < H5LOG_N_TRAJ; c++)
            if (bytes[c]) {
                memcpy(col[c] + (size_t)i * bytes[c], p, bytes[c]);
                p += bytes[c];
            }
}

void rl_traj_free(h5log_traj_batch *b)
{
    for (int c = 0; c < H5LOG_N_TRAJ; c++)
        free((void *)h5log_traj_col_data(b, c));
    memset(b, 0, sizeof *b);
}

/* This rank's completions as log rows (strides P and G); the per-completion
 * doubles point into b, the rest is allocated (rl_traj_free frees all, so the
 * doubles are copied too). */
static void local_rows(const rl_run *run, const rl_batch *b, int P, int G, int64_t step,
                       h5log_traj_batch *tb)
{
    const int N = b->N, eos = run->mc->eos_token_id;
    int64_t *pidx = dllm_malloc(sizeof *pidx * (size_t)(N ? N : 1));
    int64_t *grp = dllm_malloc(sizeof *grp * (size_t)(N ? N : 1));
    int32_t *plen = dllm_malloc(sizeof *plen * (size_t)(N ? N : 1));
    int32_t *clen = dllm_malloc(sizeof *clen * (size_t)(N ? N : 1));
    int32_t *ptok = dllm_malloc(sizeof *ptok * (size_t)(N ? N : 1) * P);
    int32_t *ctok = dllm_malloc(sizeof *ctok * (size_t)(N ? N : 1) * G);
    float *lr = dllm_malloc(sizeof *lr * (size_t)(N ? N : 1) * G);
    float *cp = dllm_malloc(sizeof *cp * (size_t)(N ? N : 1) * G);
    int16_t *cs = dllm_malloc(sizeof *cs * (size_t)(N ? N : 1) * G);
    float *te = dllm_malloc(sizeof *te * (size_t)(N ? N : 1) * G);
    for (int i = 0; i < N; i++) {
        pidx[i] = b->prompt_index[i / b->G];
        grp[i] = (int64_t)run->rank * b->n_prompts + i / b->G;
        plen[i] = b->prompt_len[i] < P ? b->prompt_len[i] : P;
        clen[i] = b->L[i];
        const int32_t *prow = b->prompts + (size_t)i * b->P + (b->P - b->prompt_len[i]);
        for (int t = 0; t < P; t++)
            ptok[(size_t)i * P + t] = t < plen[i] ? prow[t] : eos;
        for (int t = 0; t < G; t++) {
            size_t k = (size_t)i * b->Gen + t, o = (size_t)i * G + t;
            ctok[o] = t < b->Gen ? b->gen[k] : eos;
            lr[o] = t < b->L[i] ? (float)b->d[k] : NAN;
            cp[o] = t < b->Gen ? b->ro.commit_prob[k] : NAN;
            cs[o] = t < b->Gen ? b->ro.commit_step[k] : -1;
            te[o] = t < b->L[i] && b->tok_ent ? (float)b->tok_ent[k] : NAN;
        }
    }
    const double *per[9] = {b->reward, b->adv, b->l_mu, b->l_pi, b->log_w, b->coef, b->log_w_se,
                            b->l_mu_exact, b->correct};
    double *copy[9];
    for (int j = 0; j < 9; j++) {
        copy[j] = dllm_malloc(sizeof(double) * (size_t)(N ? N : 1));
        memcpy(copy[j], per[j], sizeof(double) * (size_t)N);
    }
    *tb = (h5log_traj_batch){.n = N, .step = step, .prompt_index = pidx, .group = grp,
                             .prompt_tokens = ptok, .prompt_len = plen, .prompt_stride = P,
                             .completion_tokens = ctok, .completion_len = clen,
                             .completion_stride = G, .reward = copy[0], .advantage = copy[1],
                             .l_mu = copy[2], .l_pi = copy[3], .log_w = copy[4], .coef = copy[5],
                             .log_w_se = copy[6], .l_mu_exact = copy[7], .token_log_ratio = lr, .commit_step = cs,
                             .commit_prob = cp, .correct = copy[8], .token_entropy = te};
}

static int log_trajectories(rl_run *run, const rl_batch *b, int64_t step, dllm_err *err)
{
    const int P = rl_max_prompt(run), G = run->cfg.rollout.gen_length;
    h5log_traj_batch mine;
    local_rows(run, b, P, G, step, &mine);
    size_t len;
    void *bytes = rl_traj_pack(&mine, P, G, &len);
    rl_traj_free(&mine);
    void *all = NULL;
    size_t total = comm_gather_bytes(bytes, len, &all);
    free(bytes);
    if (run->rank != 0)
        return 0;
    h5log_traj_batch tb;
    rl_traj_unpack(all, total, P, G, step, &tb);
    free(all);
    int rc = h5log_append_trajectories(run->log, &tb, err);
    rl_traj_free(&tb);
    return rc;
}

/* the step metrics' names, in the values array's order */
#define METRIC_NAME_(name) #name,
static const char *const metric_names[H5LOG_N_METRICS] = {H5LOG_STEP_METRICS(METRIC_NAME_)};
#undef METRIC_NAME_

int rl_log_step(rl_run *run, const rl_batch *b, int64_t step, double *m, dllm_err *err)
{
    double tl = dllm_now();
    int rc = 0;
    if (run->cfg.log.trajectories)
        rc = log_trajectories(run, b, step, err);
    if (!rc && run->rank == 0)
        rc = h5log_append_mismatch(run->log, step, b->mismatch, err);
    if (!rc && run->rank == 0 && b->pass_at_k)
        rc = h5log_append_pass_at_k(run->log, step, b->pass_at_k, err);
    m[H5LOG_M(t_log)] = dllm_now() - tl;
    if (!rc && run->rank == 0 && (rc = h5log_append_step(run->log, step, m, err)) == 0)
        rc = h5log_flush(run->log, err);
    if (!rc && run->tb) /* TensorBoard's tags name the log's datasets: steps/<metric> */
        rc = tb_write_scalars(run->tb, step, "steps/", H5LOG_N_METRICS, metric_names, m, err);
    return rc;
}
