/* test_qwen3_device: Qwen3 decoding with the model on the device (dllm/qwen3.c, the
 * KV cache in device memory; the one loop of dllm/ar_sampler.c over the device decoder
 * and the CUDA backend's ar_choose):
 *   - the device cache's logits (a left-padded prefill, then decode steps) within 1e-4 of
 *     the CPU cache's and of a full forward on the device over the same history, at the
 *     trainer view (LoRA applied at run time) and at the fp32 rollout copy;
 *   - dllm_ar_sample on the device against the CPU: greedy and sampled tokens equal,
 *     log-probs within 1e-4 (the models' logits differ by fp32 summation order), a nucleus
 *     (top_p < 1: chosen on the host from the device cache's logits) too;
 *   - what crosses to the host during a rollout, counted through a wrapping backend:
 *     per step at most one upload (RoPE positions) and one download (finished flags),
 *     nothing of size V, the records at the end;
 *   - the sampler alone on a fake decoder with exact logits (rows of a table of multiples
 *     of 1/8 chosen by the last token, so both sides read the same floats): tokens,
 *     lengths and log-probs equal to a host loop over dllm_ar_choose with the same keyed
 *     noise, with EOS stopping rows early, several head() chunks, a seq_offset past 2^32
 *     and no EOS; the same loop on the CPU backend bit for bit.
 *   - through the CLI (DLLM_BIN), on an `init-model --preset tiny` Qwen3: sampled
 *     `generate --device cuda` ids equal the CPU's, with the whole nucleus (the device
 *     sampler) and with --top-p 0.9 (the host's choice); the greedy case is
 *     tests/unit/test_device_model.c's.
 * Runs in the CUDA emulation build (and on a GPU); SKIP (77) without CUDA. */
#include "config.h"

#include "dllm/ar_sampler.h"
#include "dllm/qwen3.h"
#include "dllm/transformer.h"
#include "kernels/backend.h"
#include "kernels/rng.h"

#include "tests/harness/counting_backend.h"
#include "tests/harness/harness.h"
#include "tests/harness/test_util.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static dllm_tf *tiny_qwen3(void)
{
    const dllm_arch_desc *a = dllm_arch_by_name("qwen3");
    ck_assert_ptr_nonnull(a);
    dllm_model_config cfg;
    dllm_err err;
    ck_assert_int_eq(dllm_config_preset(&cfg, a->id, "tiny", &err), 0);
    dllm_tf *m = dllm_tf_create(&cfg, 12);
    dllm_tf_lora_enable(m, 4, 8.0f, LORA_ALL, 5);
    size_t n;
    float *p = tu_host_trainable(m, &n); /* B random too: the adapters change the logits */
    dllm_rng r = dllm_rng_make(78, DLLM_RNG_INIT, 3, 0);
    for (size_t i = 0; i < n; i++)
        p[i] = (float)(0.05 * dllm_rng_normal(&r));
    return m;
}

static double max_abs(const float *a, const float *b, size_t n)
{
    double mx = 0;
    for (size_t i = 0; i < n; i++) {
        ck_assert_msg(isfinite(a[i]) && isfinite(b[i]), "non-finite logit at %zu", i);
        double d = fabs((double)a[i] - b[i]);
        mx = d > mx ? d : mx;
    }
    return mx;
}

/* ---- the model on the device -------------------------------------------------------- */

enum { MB = 3, MP = 7, MG = 6 };

/* Left-padded prompts: row 1 by 2, row 2 by 4. */
static void model_prompts(int V, int32_t *prompts, uint8_t *pm)
{
    for (int i = 0; i < MB * MP; i++) {
        prompts[i] = (i * 37 + 5) % V;
        pm[i] = !((i / MP == 1 && i % MP < 2) || (i / MP == 2 && i % MP < 4));
    }
}

/* The cache's logits: prefill, then MG decode steps of fixed tokens; at the trainer view
 * (_i 0) and at the fp32 rollout copy (_i 1, rollout "trainer": no copy of its own, so
 * the rollout-numerics switch is what is tested). */
START_TEST(test_cache_logits)
{
    dllm_backend *be = dllm_backend_cuda();
    dllm_tf *mc = tiny_qwen3(), *md = tiny_qwen3();
    int V = dllm_tf_config(mc)->embedding_size;
    dllm_err err;
    ck_assert_int_eq(dllm_tf_to_device(md, be, &err), 0);
    qwen3_decode_at_rollout(mc, _i == 1);
    qwen3_decode_at_rollout(md, _i == 1);
    int32_t prompts[MB * MP];
    uint8_t pm[MB * MP];
    model_prompts(V, prompts, pm);
    qwen3_kv_cache *cc = qwen3_cache_new(mc, MB, MP + MG), *cd = qwen3_cache_new(md, MB, MP + MG);
    size_t nl = (size_t)MB * V;
    float *lc = malloc(nl * 4), *ld = malloc(nl * 4), *lf = malloc(nl * 4);
    enum { S = MP + MG };
    int32_t seq[MB * S], rows[MB];
    uint8_t mask[MB * S];
    for (int g = 0; g <= MG - 1; g++) {
        int32_t next[MB];
        if (g == 0) {
            ck_assert_int_eq(qwen3_prefill(mc, cc, prompts, pm, MP, lc, &err), 0);
            ck_assert_msg(qwen3_prefill(md, cd, prompts, pm, MP, ld, &err) == 0, "%s", err.msg);
        } else {
            for (int b = 0; b < MB; b++)
                next[b] = (b * 13 + g * 7 + 1) % V;
            ck_assert_int_eq(qwen3_decode_step(mc, cc, next, lc, &err), 0);
            ck_assert_msg(qwen3_decode_step(md, cd, next, ld, &err) == 0, "%s", err.msg);
        }
        ck_assert_int_eq(qwen3_cache_len(cd), MP + g);
        double d = max_abs(ld, lc, nl);
        ck_assert_msg(d <= 1e-4, "step %d: device cache vs CPU cache max abs %g", g, d);
        /* the full forward on the device over the same history */
        int len = MP + g;
        for (int b = 0; b < MB; b++) {
            for (int t = 0; t < len; t++) {
                seq[b * len + t] = t < MP ? prompts[b * MP + t] : (b * 13 + (t - MP + 1) * 7 + 1) % V;
                mask[b * len + t] = t < MP ? pm[b * MP + t] : 1;
            }
            rows[b] = b * len + len - 1;
        }
        int rc = _i == 1 ? dllm_tf_forward_rollout(md, seq, mask, MB, len, rows, MB, lf)
                         : dllm_tf_forward_nograd(md, seq, mask, MB, len, rows, MB, lf);
        ck_assert_int_eq(rc, 0);
        d = max_abs(ld, lf, nl);
        ck_assert_msg(d <= 1e-4, "step %d: device cache vs device full forward max abs %g", g, d);
    }
    /* a cache that is full refuses the next slot */
    int32_t one[MB] = {1, 2, 3};
    ck_assert_int_eq(qwen3_decode_step(md, cd, one, ld, &err), 0);
    ck_assert_int_eq(qwen3_decode_step(md, cd, one, ld, &err), DLLM_EXIT_INPUT);
    ck_assert_msg(strstr(err.msg, "do not fit"), "%s", err.msg);
    qwen3_cache_free(cc);
    qwen3_cache_free(cd);
    free(lc), free(ld), free(lf);
    dllm_tf_free(mc);
    dllm_tf_free(md);
}
END_TEST

/* dllm_ar_sample on the device vs the CPU: greedy (_i 0), sampled (1), sampled with an EOS
 * that the model emits (2), a nucleus (3: host choice over the device cache). */
START_TEST(test_decode_tokens)
{
    dllm_backend *be = dllm_backend_cuda();
    dllm_tf *mc = tiny_qwen3(), *md = tiny_qwen3();
    int V = dllm_tf_config(mc)->embedding_size;
    dllm_err err;
    ck_assert_int_eq(dllm_tf_to_device(md, be, &err), 0);
    int32_t prompts[MB * MP];
    uint8_t pm[MB * MP];
    model_prompts(V, prompts, pm);
    enum { G = 12 };
    dllm_ar_cfg c = {.max_new_tokens = G, .temperature = _i == 0 ? 0.0 : 1.0,
                     .top_p = _i == 3 ? 0.9 : 1.0, .eos_id = -1, .seq_offset = 40};
    dllm_ar_rollout want, got;
    ck_assert_int_eq(dllm_ar_sample(mc, prompts, pm, MB, MP, &c, 5, &want, &err), 0);
    if (_i == 2) { /* an EOS that some row emits before its end: the CPU's 3rd token of row 0 */
        c.eos_id = want.tokens[MP + 2];
        dllm_ar_rollout_free(&want);
        ck_assert_int_eq(dllm_ar_sample(mc, prompts, pm, MB, MP, &c, 5, &want, &err), 0);
        ck_assert_int_le(want.length[0], 3);
    }
    ck_assert_msg(dllm_ar_sample(md, prompts, pm, MB, MP, &c, 5, &got, &err) == 0, "%s", err.msg);
    for (int i = 0; i < MB * (MP + G); i++)
        ck_assert_msg(got.tokens[i] == want.tokens[i], "case %d: token [%d,%d] %d vs CPU %d", _i,
                      i / (MP + G), i % (MP + G), got.tokens[i], want.tokens[i]);
    for (int b = 0; b < MB; b++)
        ck_assert_int_eq(got.length[b], want.length[b]);
    for (int i = 0; i < MB * G; i++) {
        ck_assert_msg(fabsf(got.logp[i] - want.logp[i]) <= 1e-4f, "logp[%d] %g vs %g", i,
                      got.logp[i], want.logp[i]);
        ck_assert_msg(fabsf(got.logp_t1[i] - want.logp_t1[i]) <= 1e-4f, "logp_t1[%d] %g vs %g",
                      i, got.logp_t1[i], want.logp_t1[i]);
    }
    dllm_ar_rollout_free(&want);
    dllm_ar_rollout_free(&got);
    dllm_tf_free(mc);
    dllm_tf_free(md);
}
END_TEST

/* What one rollout sends across, the model's weights already in place. */
START_TEST(test_transfers)
{
    dllm_backend *be = tu_counting_backend(dllm_backend_cuda());
    dllm_tf *m = tiny_qwen3();
    int V = dllm_tf_config(m)->embedding_size;
    dllm_err err;
    ck_assert_int_eq(dllm_tf_to_device(m, be, &err), 0);
    int32_t prompts[MB * MP];
    uint8_t pm[MB * MP];
    model_prompts(V, prompts, pm);
    enum { G = 9 };
    dllm_ar_cfg c = {.max_new_tokens = G, .temperature = 1.0, .top_p = 1, .eos_id = 2};
    dllm_ar_rollout r;
    ck_assert_int_eq(dllm_ar_sample(m, prompts, pm, MB, MP, &c, 3, &r, &err), 0);
    dllm_ar_rollout_free(&r); /* the first one builds the trainer view on the device */
    tu_count_reset();
    ck_assert_int_eq(dllm_ar_sample(m, prompts, pm, MB, MP, &c, 3, &r, &err), 0);
    int steps = 0; /* decode steps run: the longest row's length - 1 */
    for (int b = 0; b < MB; b++)
        steps = r.length[b] - 1 > steps ? r.length[b] - 1 : steps;
    /* up: prompts, positions, key mask and head rows of the prefill, a position per step */
    ck_assert_msg(tu_counted.n_up <= 4 + (size_t)steps, "%zu uploads for %d steps", tu_counted.n_up, steps);
    /* down: the finished flags per step (at most G-1), the four records at the end */
    ck_assert_msg(tu_counted.n_down <= 4 + (size_t)G - 1, "%zu downloads", tu_counted.n_down);
    ck_assert_msg(tu_counted.bytes_down <= (size_t)MB * G * 12 + (size_t)MB * 4 + (size_t)MB * (G - 1),
                  "%zu bytes down", tu_counted.bytes_down);
    ck_assert_msg(tu_counted.max_down < (size_t)V * sizeof(float), "a download of %zu bytes", tu_counted.max_down);
    ck_assert_msg(tu_counted.bytes_up <= (size_t)MB * MP * 9 + (size_t)MB * 4 * (steps + 1), "%zu bytes up",
                  tu_counted.bytes_up);
    dllm_ar_rollout_free(&r);
    dllm_tf_free(m);
}
END_TEST

/* ---- the sampler alone on a fake decoder ------------------------------------------------ */

enum { FV = 29, F_EOS = 1, FMAX_B = 8 };

typedef struct {
    dllm_backend *be;  /* the real backend: the fake's own traffic is not the sampler's */
    float *table;      // (FV, FV) device: the logits after each last token
    int32_t *last;     // (FMAX_B) device
    int B, extends, heads;
    float *h_table;    // (FV, FV) host copy
} fake;

static int fake_extend(void *ctx, const int32_t *d_tokens, const uint8_t *keymask, int T,
                       dllm_err *err)
{
    fake *f = ctx;
    (void)keymask, (void)err;
    f->extends++;
    if (T == 1) {
        f->be->ops->copy(f->be, f->last, d_tokens, sizeof(int32_t) * (size_t)f->B);
        return 0;
    }
    int32_t *tok = malloc(sizeof *tok * (size_t)f->B * T), last[FMAX_B];
    f->be->ops->download(f->be, tok, d_tokens, sizeof *tok * (size_t)f->B * T);
    for (int b = 0; b < f->B; b++)
        last[b] = tok[b * T + T - 1];
    f->be->ops->upload(f->be, f->last, last, sizeof(int32_t) * (size_t)f->B);
    free(tok);
    return 0;
}

static int fake_head(void *ctx, int r0, int n, float *d_logits, dllm_err *err)
{
    fake *f = ctx;
    (void)err;
    f->heads++;
    f->be->ops->embedding_fwd(f->be, d_logits, f->last + r0, f->table, n, FV);
    return 0;
}

typedef struct {
    const char *name;
    int B, P, G, max_rows;
    double temp;
    int eos;
    float eos_bias;
    uint64_t seq_offset;
} fk_case;

static const fk_case FCASES[] = {
    {"greedy", 4, 3, 10, 8, 0.0, F_EOS, 0.0f, 0},
    {"sampled", 4, 3, 12, 8, 1.0, F_EOS, 0.0f, 7},
    {"sampled eos stops rows", 5, 2, 16, 8, 0.7, F_EOS, 1.5f, 0},
    {"chunked head", 7, 4, 10, 3, 1.3, F_EOS, 0.5f, 11},
    {"seq_offset past 2^32", 3, 3, 8, 2, 0.9, F_EOS, 0.0f, 5000000007ULL},
    {"no eos", 3, 2, 9, 8, 1.0, -1, 2.0f, 0},
    {"greedy eos", 3, 2, 9, 2, 0.0, F_EOS, 1.0f, 0},
};

/* The one loop (dllm_ar_sample_decoder) on backend `cuda` (the CUDA backend, or the CPU
 * backend: the same loop over its ar_choose entry, which must agree bit for bit). */
static void fake_sampler(int _i, dllm_backend *cuda)
{
    const fk_case *k = &FCASES[_i];
    const bool host = cuda == dllm_backend_cpu();
    fake f = {.be = cuda, .B = k->B};
    f.h_table = malloc(sizeof(float) * FV * FV);
    dllm_rng r = dllm_rng_make(500 + (uint64_t)_i, 99, 0, 0);
    for (int i = 0; i < FV * FV; i++)
        f.h_table[i] = (float)((int)(dllm_rng_u64(&r) % 17) - 8) / 8.0f +
                       (i % FV == F_EOS ? k->eos_bias : 0.0f);
    f.table = cuda->ops->alloc(cuda, sizeof(float) * FV * FV);
    cuda->ops->upload(cuda, f.table, f.h_table, sizeof(float) * FV * FV);
    f.last = cuda->ops->alloc(cuda, sizeof(int32_t) * FMAX_B);
    int32_t prompts[FMAX_B * 8];
    uint8_t pm[FMAX_B * 8];
    for (int i = 0; i < k->B * k->P; i++) {
        prompts[i] = 3 + (int32_t)(dllm_rng_u64(&r) % (FV - 3));
        pm[i] = !(i % k->P == 0 && (i / k->P) % 2 == 1);
    }
    dllm_ar_cfg c = {.max_new_tokens = k->G, .temperature = k->temp, .top_p = 1,
                     .eos_id = k->eos, .seq_offset = k->seq_offset};
    const uint64_t seed = 31 + (uint64_t)_i;

    /* the host loop of dllm_ar_sample over the same logits */
    const int B = k->B, P = k->P, G = k->G;
    int32_t want_tok[FMAX_B * 32], want_len[FMAX_B] = {0}, last[FMAX_B];
    float want_lp[FMAX_B * 32] = {0}, want_lp1[FMAX_B * 32] = {0};
    bool done[FMAX_B] = {false};
    for (int b = 0; b < B; b++)
        last[b] = prompts[b * P + P - 1];
    for (int g = 0; g < G; g++) {
        int ndone = 0;
        for (int b = 0; b < B; b++) {
            if (done[b]) {
                last[b] = k->eos;
                ndone++;
                continue;
            }
            dllm_rng rr = dllm_rng_make(seed, DLLM_RNG_SAMPLER, (uint64_t)g, k->seq_offset + (uint64_t)b);
            double lp, lp1;
            int32_t t = dllm_ar_choose(f.h_table + (size_t)last[b] * FV, FV, k->temp, 1.0,
                                       dllm_rng_uniform(&rr), &lp, &lp1, NULL);
            want_tok[b * G + g] = last[b] = t;
            want_lp[b * G + g] = (float)lp;
            want_lp1[b * G + g] = (float)lp1;
            want_len[b] = g + 1;
            if (t == k->eos) {
                done[b] = true;
                ndone++;
            }
        }
        if (ndone == B)
            break;
    }
    for (int b = 0; b < B; b++)
        for (int g = want_len[b]; g < G; g++)
            want_tok[b * G + g] = k->eos >= 0 ? k->eos : 0;

    dllm_ar_decoder dm = {&f, tu_counting_backend(cuda), FV, k->max_rows, fake_extend, fake_head};
    dllm_ar_rollout got;
    dllm_err err = {0};
    tu_count_reset();
    ck_assert_msg(dllm_ar_sample_decoder(&dm, prompts, pm, B, P, &c, seed, &got, &err) == 0,
                  "%s: %s", k->name, err.msg);
    int early = 0;
    for (int b = 0; b < B; b++) {
        ck_assert_msg(got.length[b] == want_len[b], "%s: length[%d] %d vs %d", k->name, b,
                      got.length[b], want_len[b]);
        early += want_len[b] < G;
        ck_assert_int_eq(memcmp(got.tokens + (size_t)b * (P + G), prompts + b * P, 4 * (size_t)P), 0);
        for (int g = 0; g < G; g++) {
            ck_assert_msg(got.tokens[(size_t)b * (P + G) + P + g] == want_tok[b * G + g],
                          "%s: token [%d,%d] %d vs host %d", k->name, b, g,
                          got.tokens[(size_t)b * (P + G) + P + g], want_tok[b * G + g]);
            ck_assert_msg(host ? got.logp[b * G + g] == want_lp[b * G + g]
                               : fabsf(got.logp[b * G + g] - want_lp[b * G + g]) <=
                                     1e-6f * (1 + fabsf(want_lp[b * G + g])),
                          "%s: logp [%d,%d] %.9g vs %.9g", k->name, b, g, got.logp[b * G + g],
                          want_lp[b * G + g]);
            ck_assert_msg(host ? got.logp_t1[b * G + g] == want_lp1[b * G + g]
                               : fabsf(got.logp_t1[b * G + g] - want_lp1[b * G + g]) <=
                                     1e-6f * (1 + fabsf(want_lp1[b * G + g])),
                          "%s: logp_t1 [%d,%d] %.9g vs %.9g", k->name, b, g,
                          got.logp_t1[b * G + g], want_lp1[b * G + g]);
        }
    }
    if (k->eos_bias > 0 && k->eos >= 0)
        ck_assert_msg(early > 0, "%s: no row stopped early (the case tests nothing)", k->name);
    /* the steps the loop ran: the CPU's (it stops when every row has), one extend each */
    int steps = 0;
    for (int b = 0; b < B; b++)
        steps = want_len[b] > steps ? want_len[b] : steps;
    bool all_early = true;
    for (int b = 0; b < B; b++)
        all_early = all_early && want_len[b] < G;
    ck_assert_int_eq(f.extends, all_early ? steps : G);
    ck_assert_int_eq(f.heads, (all_early ? steps : G) * ((B + k->max_rows - 1) / k->max_rows));
    ck_assert_msg(tu_counted.n_up == 1, "%s: %zu uploads (the prompts only)", k->name, tu_counted.n_up);
    ck_assert_msg(tu_counted.n_down <= 4 + (size_t)(k->eos >= 0 ? G - 1 : 0), "%s: %zu downloads", k->name,
                  tu_counted.n_down);
    dllm_ar_rollout_free(&got);
    cuda->ops->free(cuda, f.table);
    cuda->ops->free(cuda, f.last);
    free(f.h_table);
}

START_TEST(test_fake_sampler) { fake_sampler(_i, dllm_backend_cuda()); }
END_TEST
START_TEST(test_fake_sampler_cpu) { fake_sampler(_i, dllm_backend_cpu()); }
END_TEST

/* Bad input is refused with the field named. */
START_TEST(test_refusals)
{
    fake f = {.be = dllm_backend_cuda(), .B = 1};
    dllm_ar_decoder dm = {&f, f.be, FV, 4, fake_extend, fake_head};
    int32_t p[2] = {3, 4};
    dllm_ar_cfg c = {.max_new_tokens = 4, .temperature = 1.0, .top_p = 0.5, .eos_id = 1};
    dllm_ar_rollout got;
    dllm_err err = {0};
    ck_assert_int_eq(dllm_ar_sample_decoder(&dm, p, NULL, 1, 2, &c, 1, &got, &err), DLLM_EXIT_INPUT);
    ck_assert_msg(strstr(err.msg, "top_p") && strstr(err.msg, "cuda backend"), "%s", err.msg);
    c.top_p = 1;
    c.eos_id = FV;
    ck_assert_int_eq(dllm_ar_sample_decoder(&dm, p, NULL, 1, 2, &c, 1, &got, &err), DLLM_EXIT_INPUT);
    ck_assert_msg(strstr(err.msg, "eos_id"), "%s", err.msg);
    c.eos_id = 1;
    int32_t bad[2] = {3, FV};
    ck_assert_int_eq(dllm_ar_sample_decoder(&dm, bad, NULL, 1, 2, &c, 1, &got, &err), DLLM_EXIT_INPUT);
    ck_assert_msg(strstr(err.msg, "prompt token"), "%s", err.msg);
    dm.head = NULL;
    ck_assert_int_eq(dllm_ar_sample_decoder(&dm, p, NULL, 1, 2, &c, 1, &got, &err),
                     DLLM_EXIT_INTERNAL);
    ck_assert_msg(strstr(err.msg, "incomplete"), "%s", err.msg);
}
END_TEST

/* ---- the command --------------------------------------------------------------------- */

/* generate's ids on one device into out (malloc'd). */
static int generate_ids(char **out, const char *device, const char *flags)
{
    return tu_dllm_take(out, NULL, "generate --model %s/qwen3 --prompt-ids 5,9,12,7 --gen-length 10 "
                        "--format ids --device %s %s", tu_dir, device, flags);
}

START_TEST(test_cli_sampled)
{
    const char *flags[] = {"--temperature 1.0 --seed 4", "--temperature 0.8 --seed 9 --top-p 0.9"};
    char *a, *b;
    ck_assert_int_eq(generate_ids(&a, "cpu", flags[_i]), 0);
    ck_assert_int_eq(generate_ids(&b, "cuda", flags[_i]), 0);
    ck_assert_msg(strlen(a) > 2 && !strcmp(a, b), "%s: cpu ids %s, cuda ids %s", flags[_i], a, b);
    free(a), free(b);
}
END_TEST

Suite *tu_suite(tu_ctx *ctx)
{
    if (!dllm_backend_cuda())
        return tu_skip(ctx, "no usable CUDA backend (%s)", dllm_backend_cuda_why());
    /* fp32 parities (logits 1e-4, equal tokens): the prefill's attention on the fp32
     * kernels; tensor-core attention is bounded in test_device_model and test_device_train */
    setenv("DLLM_CUDA_ATTENTION", "fp32", 1);
    bool cli = tu_have_bin();
    if (cli && !tu_scratch(ctx))
        return NULL;
    if (cli && tu_sh("%s init-model --arch qwen3 --preset tiny --seed 5 --out %s/qwen3 >/dev/null",
                     tu_bin(), tu_dir))
        return tu_abort(ctx, "init-model failed");
    Suite *s = suite_create("qwen3_device");
    TCase *tc = tcase_create("device");
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, test_cache_logits, 0, 2);
    tcase_add_loop_test(tc, test_decode_tokens, 0, 4);
    tcase_add_test(tc, test_transfers);
    tcase_add_loop_test(tc, test_fake_sampler, 0, (int)(sizeof FCASES / sizeof *FCASES));
    tcase_add_loop_test(tc, test_fake_sampler_cpu, 0, (int)(sizeof FCASES / sizeof *FCASES));
    tcase_add_test(tc, test_refusals);
    if (cli)
        tcase_add_loop_test(tc, test_cli_sampled, 0, 2);
    suite_add_tcase(s, tc);
    ctx->nofork = true; /* a CUDA context does not survive a fork */
    if (!cli)
        tu_partial(ctx, "DLLM_BIN (the dllm-rl binary) not set: the CLI cases did not run");
    return s;
}
