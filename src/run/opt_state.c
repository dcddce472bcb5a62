/* opt_state.c: a checkpoint's optimizer state to and from safetensors (opt_state.h). */
#include "src/run/opt_state.h"

#include "dllm/safetensors.h"

#include <math.h>
#include <stdlib.h>

typedef struct {
    dllm_policy *p;
    dllm_state which;
} state_vec;

static int fill_state(void *ctx, size_t off, size_t n, float *dst, dllm_err *err)
{
    (void)err;
    const state_vec *v = ctx;
    dllm_optim_state_read(dllm_policy_optim(v->p), v->which, off, n, dst);
    return 0;
}

static const char *const NAMES[3] = {"trainable", "adam_m", "adam_v"};
static const dllm_state STATES[3] = {DLLM_STATE_PARAMS, DLLM_STATE_ADAM_M,
                                        DLLM_STATE_ADAM_V};

int opt_state_save(const opt_state *s, const char *path, dllm_err *err)
{
    st_writer *w = st_writer_new();
    int64_t shape[1] = {(int64_t)s->n};
    state_vec sv[3];
    int rc = 0;
    for (int i = 0; i < 3 && !rc; i++) {
        sv[i] = (state_vec){s->p, STATES[i]};
        rc = st_writer_add_f32_fn(w, NAMES[i], ST_F32, 1, shape, fill_state, &sv[i], err);
    }
    if (!rc && s->extra_name)
        rc = st_writer_add_f32_ref(w, s->extra_name, ST_F32, 1, shape, s->extra, err);
    if (!rc)
        rc = st_writer_save_file(w, path, err);
    st_writer_free(w);
    return rc;
}

/* The weights of a checkpoint (the trainable vector, the reference) must be
 * finite: a NaN there computes NaN everywhere. v holds elements [off, off + n). */
static int check_finite(const float *v, size_t n, size_t off, const char *path, const char *name,
                        dllm_err *err)
{
    for (size_t k = 0; k < n; k++)
        if (!isfinite(v[k]))
            return dllm_err_set(err, DLLM_EXIT_INPUT,
                                "%s: tensor '%s' holds a non-finite value (%g at element %zu): the "
                                "checkpoint is damaged or its run diverged",
                                path, name, (double)v[k], off + k);
    return 0;
}

/* Tensor `name` ([n]) of the archive into the model's state, a chunk at a time. */
static int load_state(const st_archive *a, const char *path, const char *name,
                       const opt_state *s, dllm_state which, float *buf, dllm_err *err)
{
    int64_t shape[1] = {(int64_t)s->n};
    for (size_t off = 0; off < s->n; off += ST_STREAM_CHUNK) {
        size_t cnt = s->n - off < ST_STREAM_CHUNK ? s->n - off : ST_STREAM_CHUNK;
        int rc = st_read_f32_range(a, name, shape, 1, off, cnt, buf, err);
        if (!rc && which == DLLM_STATE_PARAMS)
            rc = check_finite(buf, cnt, off, path, name, err);
        if (rc)
            return rc;
        dllm_optim_state_write(dllm_policy_optim(s->p), which, off, cnt, buf);
    }
    return 0;
}

int opt_state_load(const opt_state *s, const char *path, dllm_err *err)
{
    st_archive *a;
    int rc = st_open(&a, path, err);
    if (rc)
        return rc;
    int64_t shape[1] = {(int64_t)s->n};
    float *buf = dllm_malloc(ST_STREAM_CHUNK * sizeof(float));
    /* every tensor is checked before the first is applied: a bad file changes nothing */
    for (int i = 0; i < 3 && !rc; i++)
        rc = st_read_f32_range(a, NAMES[i], shape, 1, 0, 0, NULL, err);
    if (!rc && s->extra_name)
        rc = st_read_f32_range(a, s->extra_name, shape, 1, 0, 0, NULL, err);
    for (int i = 0; i < 3 && !rc; i++)
        rc = load_state(a, path, NAMES[i], s, STATES[i], buf, err);
    if (!rc && s->extra_name)
        rc = st_read_f32(a, s->extra_name, shape, 1, s->extra, err);
    if (!rc && s->extra_name)
        rc = check_finite(s->extra, s->n, 0, path, s->extra_name, err);
    free(buf);
    st_close(a);
    return rc;
}
