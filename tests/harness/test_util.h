/* test_util.h: fixtures shared by the Check suites: paths under DLLM_TEST_DATA,
 * golden JSON files (numbers, with "nan", "inf" and "-inf" as strings), golden
 * safetensors archives and the committed tiny models. */
#ifndef DLLM_TEST_UTIL_H
#define DLLM_TEST_UTIL_H

#include "dllm/llada.h"
#include "dllm/safetensors.h"
#include "kernels/ops.h"

#include <check.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* DLLM_TEST_DATA/rel, malloc'd. */
static inline char *tu_data_path(const char *rel)
{
    const char *dir = getenv("DLLM_TEST_DATA");
    ck_assert_msg(dir != NULL, "DLLM_TEST_DATA is not set");
    size_t n = strlen(dir) + strlen(rel) + 2;
    char *p = malloc(n);
    snprintf(p, n, "%s/%s", dir, rel);
    return p;
}

static inline json_t *tu_json_load(const char *rel)
{
    char *path = tu_data_path(rel);
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    ck_assert_msg(j != NULL, "%s:%d: %s", path, je.line, je.text);
    free(path);
    return j;
}

static inline double tu_jnum(const json_t *v)
{
    if (json_is_string(v)) {
        const char *s = json_string_value(v);
        if (strcmp(s, "nan") == 0)
            return NAN;
        return strcmp(s, "inf") == 0 ? INFINITY : -INFINITY;
    }
    ck_assert_msg(json_is_number(v), "golden JSON: expected a number");
    return json_number_value(v);
}

static inline double tu_jget(const json_t *o, const char *key)
{
    const json_t *v = json_object_get(o, key);
    ck_assert_msg(v != NULL, "golden JSON: key '%s' missing", key);
    return tu_jnum(v);
}

/* The numbers of array `key`, malloc'd; *n (if not NULL) their count. */
static inline double *tu_jarr(const json_t *o, const char *key, size_t *n)
{
    const json_t *a = json_object_get(o, key);
    ck_assert_msg(json_is_array(a), "golden JSON: key '%s' is not an array", key);
    double *out = malloc(sizeof *out * (json_array_size(a) + 1));
    for (size_t k = 0; k < json_array_size(a); k++)
        out[k] = tu_jnum(json_array_get(a, k));
    if (n)
        *n = json_array_size(a);
    return out;
}

static inline st_archive *tu_open_archive(const char *rel)
{
    char *path = tu_data_path(rel);
    st_archive *a;
    dllm_err err = {0};
    ck_assert_msg(st_open(&a, path, &err) == 0, "%s", err.msg);
    free(path);
    return a;
}

static inline dllm_tf *tu_load_llada(const char *rel)
{
    char *dir = tu_data_path(rel);
    dllm_tf *m = NULL;
    dllm_err err = {0};
    ck_assert_msg(dllm_tf_load(&m, dir, &err) == 0, "load %s: %s", dir, err.msg);
    free(dir);
    return m;
}

/* The LLaDA forward as a dllm_logits_fn (context: the dllm_tf). */
static inline int tu_llada_logits(void *m, const int32_t *tokens, const uint8_t *keymask, int B,
                                  int T, const int32_t *rows, int n_rows, float *logits)
{
    return dllm_tf_forward(m, tokens, keymask, B, T, rows, n_rows, logits);
}

/* max |a - b| over n (NaN counts as a mismatch: infinity). */
/* The host's trainable vector of a model on the host, to write in place (the parameters
 * in HF order, or the adapters under LoRA: contiguous from the first tensor). */
static inline float *tu_host_trainable(dllm_tf *m, size_t *n)
{
    const dllm_param *P;
    int np = dllm_tf_lora_info(m, NULL, NULL) ? dllm_tf_lora_params(m, &P) : dllm_tf_params(m, &P);
    *n = 0;
    for (int i = 0; i < np; i++)
        *n += P[i].numel;
    return P[0].data;
}

static inline double tu_max_abs_diff(const float *a, const float *b, size_t n)
{
    double d = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - (double)b[i]);
        if (!(e <= d))
            d = isnan(e) ? INFINITY : e;
    }
    return d;
}

static inline double tu_max_abs(const float *a, size_t n)
{
    double d = 0;
    for (size_t i = 0; i < n; i++)
        d = fabs((double)a[i]) > d ? fabs((double)a[i]) : d;
    return d;
}

/* A fresh directory under /tmp (malloc'd name) and its removal. */
static inline char *tu_make_tmpdir(void)
{
    char *t = dllm_strdup("/tmp/dllm-test-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(t));
    return t;
}

static inline void tu_rm_rf(const char *dir)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}

/* Mean cross-entropy of targets [R] at the logits rows [R] of a forward over
 * tokens [B,T] (log-softmax in double, so finite differences see little
 * rounding); with backward, the forward keeps activations and the loss's
 * gradient is accumulated into the model. */
static inline double tu_rows_xent(dllm_tf *m, const int32_t *tokens, const uint8_t *keymask,
                                  int B, int T, const int32_t *rows, const int32_t *targets, int R,
                                  bool backward)
{
    int V = dllm_tf_config(m)->embedding_size;
    float *lg = dllm_malloc((size_t)R * V * sizeof(float));
    int rc = backward ? dllm_tf_forward(m, tokens, keymask, B, T, rows, R, lg)
                      : dllm_tf_forward_nograd(m, tokens, keymask, B, T, rows, R, lg);
    ck_assert_int_eq(rc, 0);
    double loss = 0;
    for (int r = 0; r < R; r++) {
        const float *z = lg + (size_t)r * V;
        double mx = -INFINITY, s = 0;
        for (int j = 0; j < V; j++)
            mx = z[j] > mx ? z[j] : mx;
        for (int j = 0; j < V; j++)
            s += exp((double)z[j] - mx);
        loss -= ((double)z[targets[r]] - mx - log(s)) / R;
    }
    if (backward) {
        float *logp = dllm_malloc((size_t)R * sizeof(float)), *lse = dllm_malloc(R * sizeof(float));
        float *dlogp = dllm_malloc((size_t)R * sizeof(float));
        float *dl = dllm_calloc((size_t)R * V, sizeof(float));
        op_xent_fwd(logp, lse, lg, targets, R, V);
        for (int r = 0; r < R; r++)
            dlogp[r] = -1.0f / (float)R;
        op_xent_bwd(dl, dlogp, lg, lse, targets, R, V);
        dllm_tf_backward(m, dl);
        free(logp);
        free(lse);
        free(dlogp);
        free(dl);
    }
    free(lg);
    return loss;
}

#endif
