/* test_cache.c: cached and parallel denoising (docs/METHOD.md §2a; dllm/sampler.h,
 * dllm/block_cache.h).
 *
 * The block cache's fill is the plain rollout forward bit for bit, and a step over an
 * unchanged canvas gives the full forward's logits (the cached keys and values are then
 * exact, so only summation order differs). The threshold rule commits the most
 * confident position and every one at or above T, ending a block early. Batched rows
 * draw what each row alone draws. `generate --cache none|prefix|dual [--threshold T]
 * --temperature 0` reproduces the ids of the published Fast-dLLM functions
 * (tests/data/cache_published/golden.json, written by tests/ref/make_cache_goldens.py
 * from the published code itself). A cache refreshed every step is the uncached sampler,
 * one never refreshed within a block the cached one. Bad input exits 2 naming the flag
 * or key. */
#include "dllm/block_cache.h"
#include "dllm/sampler.h"
#include "dllm/transformer.h"
#include "tests/harness/harness.h"
#include "tests/harness/test_log.h"
#include "tests/harness/test_util.h"

#include <check.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rollout_logits(void *m, const int32_t *tokens, const uint8_t *keymask, int B, int T,
                          const int32_t *rows, int n_rows, float *logits)
{
    return dllm_tf_forward_rollout(m, tokens, keymask, B, T, rows, n_rows, logits);
}

/* tokens [B,T] drawn over the tiny model's ordinary ids; row 1 left-padded by 3 */
static void random_canvas(int32_t *tok, uint8_t *km, int B, int T, int V, uint64_t seed)
{
    dllm_rng r = dllm_rng_make(seed, DLLM_RNG_DATA, 1, 0);
    for (int i = 0; i < B * T; i++) {
        tok[i] = 3 + (int32_t)dllm_rng_below(&r, (uint64_t)(V - 3));
        km[i] = !(i / T == 1 && i % T < 3);
    }
}

START_TEST(test_fill_is_the_forward)
{
    dllm_tf *m = tu_load_llada("llada/tiny");
    const int B = 2, T = 21, V = dllm_tf_config(m)->embedding_size, N = B * T;
    int32_t tok[2 * 21];
    uint8_t km[2 * 21];
    random_canvas(tok, km, B, T, V, 1);
    float *want = dllm_malloc(sizeof(float) * (size_t)N * V);
    float *got = dllm_malloc(sizeof(float) * (size_t)N * V);
    ck_assert_int_eq(dllm_tf_forward_rollout(m, tok, km, B, T, NULL, N, want), 0);
    dllm_block_cache *c;
    dllm_err err = {0};
    ck_assert_int_eq(dllm_block_cache_new(&c, m, true, &err), 0);
    ck_assert_int_eq(dllm_block_cache_fill(c, tok, km, B, T, NULL, N, got), 0);
    ck_assert_msg(memcmp(want, got, sizeof(float) * (size_t)N * V) == 0,
                  "the fill's logits are not the forward's bits (max diff %g)",
                  tu_max_abs_diff(want, got, (size_t)N * V));
    /* a few rows: both run the last layer over those rows alone, the same bits */
    const int32_t rows[4] = {N - 1, 7, 30, 2};
    ck_assert_int_eq(dllm_tf_forward_rollout(m, tok, km, B, T, rows, 4, want), 0);
    ck_assert_int_eq(dllm_block_cache_fill(c, tok, km, B, T, rows, 4, got), 0);
    ck_assert(memcmp(want, got, sizeof(float) * 4 * (size_t)V) == 0);
    dllm_block_cache_free(c);
    free(want);
    free(got);
    dllm_tf_free(m);
}
END_TEST

/* A step over the canvas the cache was filled with: every cached key and value is
 * exact, so its logits are the full forward's (up to summation order), at the
 * absolute positions of [lo, hi), with the padding excluded -- for a block (dual) and
 * for everything from the block on (prefix). */
START_TEST(test_step_over_unchanged_canvas)
{
    dllm_tf *m = tu_load_llada("llada/tiny");
    const int B = 2, T = 24, V = dllm_tf_config(m)->embedding_size, N = B * T;
    int32_t tok[2 * 24], rows[2 * 24];
    uint8_t km[2 * 24];
    random_canvas(tok, km, B, T, V, 2);
    float *full = dllm_malloc(sizeof(float) * (size_t)N * V);
    float *got = dllm_malloc(sizeof(float) * (size_t)N * V);
    ck_assert_int_eq(dllm_tf_forward_rollout(m, tok, km, B, T, NULL, N, full), 0);
    const double scale = tu_max_abs(full, (size_t)N * V);
    dllm_block_cache *c;
    dllm_err err = {0};
    ck_assert_int_eq(dllm_block_cache_new(&c, m, true, &err), 0);
    const int spans[3][2] = {{8, 16}, {16, 24}, {0, 24}};
    for (int k = 0; k < 3; k++) {
        int lo = spans[k][0], hi = spans[k][1], n = 0;
        ck_assert_int_eq(dllm_block_cache_fill(c, tok, km, B, T, rows, 0, got), 0);
        for (int b = 0; b < B; b++)
            for (int t = lo; t < hi; t++)
                rows[n++] = b * T + t;
        ck_assert_int_eq(dllm_block_cache_step(c, tok, km, B, T, lo, hi, rows, n, got), 0);
        for (int i = 0; i < n; i++) {
            double d = tu_max_abs_diff(full + (size_t)rows[i] * V, got + (size_t)i * V, (size_t)V);
            ck_assert_msg(d <= 1e-5 * scale, "[%d, %d) row %d: differs by %g", lo, hi, rows[i], d);
        }
        /* a second step reads the keys the first one replaced: still exact */
        ck_assert_int_eq(dllm_block_cache_step(c, tok, km, B, T, lo, hi, rows, n, got), 0);
        for (int i = 0; i < n; i++)
            ck_assert(tu_max_abs_diff(full + (size_t)rows[i] * V, got + (size_t)i * V,
                                      (size_t)V) <= 1e-5 * scale);
        /* every third row (the last layer past the attention over those alone) */
        int n3 = 0;
        for (int i = 0; i < n; i += 3)
            rows[n3++] = rows[i];
        ck_assert_int_eq(dllm_block_cache_step(c, tok, km, B, T, lo, hi, rows, n3, got), 0);
        for (int i = 0; i < n3; i++)
            ck_assert(tu_max_abs_diff(full + (size_t)rows[i] * V, got + (size_t)i * V,
                                      (size_t)V) <= 1e-5 * scale);
    }
    /* a row outside the step's positions is refused */
    rows[0] = 3;
    ck_assert_int_eq(dllm_block_cache_step(c, tok, km, B, T, 8, 16, rows, 1, got), 2);
    dllm_block_cache_free(c);
    free(full);
    free(got);
    dllm_tf_free(m);
}
END_TEST

/* A fake model: every position puts probability ~p on token 5 (the rest uniform). */
typedef struct {
    int V;
    float hi;
    int calls;
} fake_model;

static int fake_logits(void *ctx, const int32_t *tokens, const uint8_t *keymask, int B, int T,
                       const int32_t *rows, int n_rows, float *logits)
{
    (void)tokens, (void)keymask, (void)B, (void)T, (void)rows;
    fake_model *f = ctx;
    f->calls++;
    for (int i = 0; i < n_rows; i++)
        for (int v = 0; v < f->V; v++)
            logits[(size_t)i * f->V + v] = v == 5 ? f->hi : 0.0f;
    return 0;
}

/* The threshold commits the most confident position and every one >= T: with every
 * confidence above T a block takes one step; below it, one token per step. */
START_TEST(test_threshold_rule)
{
    fake_model f = {.V = 16, .hi = 6.0f}; /* p(5) = e^6 / (e^6 + 15) = 0.964 */
    const double p = exp(6.0) / (exp(6.0) + 15.0);
    dllm_sampler_cfg c = {.gen_length = 16, .block_length = 8, .steps = 4, .temperature = 0,
                          .mask_id = 2, .eos_id = 0, .eot_id = -1, .vocab = 16,
                          .threshold = p - 1e-3};
    int32_t prompt[3] = {7, 8, 9};
    dllm_rollout r;
    dllm_err err = {0};
    ck_assert_int_eq(dllm_sample(fake_logits, &f, prompt, NULL, 1, 3, &c, 1, &r, &err), 0);
    ck_assert_int_eq(r.nfe, 2); /* one step per block */
    for (int t = 0; t < 16; t++) {
        ck_assert_int_eq(r.tokens[3 + t], 5);
        ck_assert_int_eq(r.commit_step[t], t / 8);
    }
    dllm_rollout_free(&r);
    c.threshold = p + 1e-3; /* nothing reaches T: the most confident alone */
    ck_assert_int_eq(dllm_sample(fake_logits, &f, prompt, NULL, 1, 3, &c, 1, &r, &err), 0);
    ck_assert_int_eq(r.nfe, 16);
    for (int t = 0; t < 16; t++)
        ck_assert_int_eq(r.commit_step[t], t); /* ties: lowest position first */
    dllm_rollout_free(&r);
    /* without the threshold: steps / blocks per block, as ever */
    c.threshold = 0;
    ck_assert_int_eq(dllm_sample(fake_logits, &f, prompt, NULL, 1, 3, &c, 1, &r, &err), 0);
    ck_assert_int_eq(r.nfe, 4);
    dllm_rollout_free(&r);
    /* bad settings */
    c.threshold = 1.5;
    ck_assert_int_eq(dllm_sampler_check(&c, &err), 2);
    c.threshold = -0.1;
    ck_assert_int_eq(dllm_sampler_check(&c, &err), 2);
    c.threshold = 0;
    c.cache = DLLM_CACHE_DUAL;
    c.cfg_scale = 1;
    ck_assert_int_eq(dllm_sampler_check(&c, &err), 2);
    c.cfg_scale = 0;
    /* a cache without a cached model */
    ck_assert_int_eq(dllm_sample(fake_logits, &f, prompt, NULL, 1, 3, &c, 1, &r, &err), 2);
}
END_TEST

/* Batched rows draw what each row alone draws (its noise keyed by its global index),
 * under the cache and the threshold, where rows finish their blocks at different
 * steps and each counts its own. */
/* n random prompt ids of the tiny model (no special ids), from the data stream's seed. */
static void draw_prompts(const dllm_model_config *mc, int32_t *p, int n, uint64_t seed,
                         uint64_t stream)
{
    dllm_rng r = dllm_rng_make(seed, DLLM_RNG_DATA, stream, 0);
    for (int i = 0; i < n; i++)
        p[i] = 3 + (int32_t)dllm_rng_below(&r, (uint64_t)(mc->vocab_size - 3));
}

/* G tokens in blocks of 8, 8 steps each, temperature 0.9, the threshold thr. */
static dllm_sampler_cfg tiny_cfg(const dllm_model_config *mc, int G, double thr)
{
    return (dllm_sampler_cfg){.gen_length = G, .block_length = 8, .steps = 8,
                              .temperature = 0.9, .mask_id = mc->mask_token_id,
                              .eos_id = mc->eos_token_id, .eot_id = -1,
                              .vocab = mc->embedding_size, .mask_token = DLLM_MASK_TOKEN_FORBID,
                              .threshold = thr};
}

START_TEST(test_batch_rows_independent)
{
    dllm_tf *m = tu_load_llada("llada/tiny");
    const dllm_model_config *mc = dllm_tf_config(m);
    const int B = 3, P = 6, G = 16;
    int32_t prompts[3 * 6];
    draw_prompts(mc, prompts, B * P, 9, 2);
    const dllm_cache modes[3] = {DLLM_CACHE_NONE, DLLM_CACHE_PREFIX, DLLM_CACHE_DUAL};
    dllm_err err = {0};
    for (int k = 0; k < 3; k++) {
        dllm_sampler_cfg c = tiny_cfg(mc, G, 0.3);
        c.cache = modes[k];
        dllm_block_cache *bc;
        ck_assert_int_eq(dllm_block_cache_new(&bc, m, true, &err), 0);
        dllm_sampler_cache sc = {dllm_block_cache_fill, dllm_block_cache_step, bc};
        dllm_rollout all, one;
        ck_assert_int_eq(dllm_sample_cached(rollout_logits, m, &sc, prompts, NULL, B, P, &c, 5,
                                            &all, &err), 0);
        for (int b = 0; b < B; b++) {
            c.seq_offset = (uint64_t)b;
            ck_assert_int_eq(dllm_sample_cached(rollout_logits, m, &sc, prompts + b * P, NULL, 1,
                                                P, &c, 5, &one, &err), 0);
            for (int t = 0; t < G; t++) {
                ck_assert_int_eq(all.tokens[b * (P + G) + P + t], one.tokens[P + t]);
                ck_assert_int_eq(all.commit_step[b * G + t], one.commit_step[t]);
            }
            dllm_rollout_free(&one);
        }
        dllm_rollout_free(&all);
        dllm_block_cache_free(bc);
    }
    dllm_tf_free(m);
}
END_TEST

/* cache_refresh: a refresh is a fill, so refreshing every step is the uncached
 * sampler's rollout (ids, steps and probabilities, bit for bit), and a refresh at least
 * the block's steps apart is the plain cached sampler's; in between, at temperature 0
 * the refresh differs from the unrefreshed cache only after a cached step (it is a full
 * pass where the cache would be stale), and its fills are counted as passes. */
START_TEST(test_cache_refresh)
{
    dllm_tf *m = tu_load_llada("llada/tiny");
    const dllm_model_config *mc = dllm_tf_config(m);
    const int B = 2, P = 5, G = 16;
    int32_t prompts[2 * 5];
    draw_prompts(mc, prompts, B * P, 17, 3);
    dllm_err err = {0};
    const double thr[2] = {0, 0.3};
    for (int k = 0; k < 4; k++) {
        dllm_sampler_cfg c = tiny_cfg(mc, G, thr[k / 2]);
        dllm_block_cache *bc;
        ck_assert_int_eq(dllm_block_cache_new(&bc, m, true, &err), 0);
        dllm_sampler_cache sc = {dllm_block_cache_fill, dllm_block_cache_step, bc};
        dllm_rollout plain, every, rare, cached;
        ck_assert_int_eq(dllm_sample(rollout_logits, m, prompts, NULL, B, P, &c, 7, &plain,
                                     &err), 0);
        c.cache = k % 2 ? DLLM_CACHE_PREFIX : DLLM_CACHE_DUAL;
        ck_assert_int_eq(dllm_sample_cached(rollout_logits, m, &sc, prompts, NULL, B, P, &c, 7,
                                            &cached, &err), 0);
        c.cache_refresh = 1;
        ck_assert_int_eq(dllm_sample_cached(rollout_logits, m, &sc, prompts, NULL, B, P, &c, 7,
                                            &every, &err), 0);
        c.cache_refresh = 8; /* a block's steps (and the threshold's most) */
        ck_assert_int_eq(dllm_sample_cached(rollout_logits, m, &sc, prompts, NULL, B, P, &c, 7,
                                            &rare, &err), 0);
        for (int i = 0; i < B * (P + G); i++) {
            ck_assert_int_eq(every.tokens[i], plain.tokens[i]);
            ck_assert_int_eq(rare.tokens[i], cached.tokens[i]);
        }
        for (int i = 0; i < B * G; i++) {
            ck_assert_int_eq(every.commit_step[i], plain.commit_step[i]);
            ck_assert_int_eq(rare.commit_step[i], cached.commit_step[i]);
            ck_assert(memcmp(&every.commit_prob[i], &plain.commit_prob[i], sizeof(float)) == 0);
            ck_assert(memcmp(&rare.commit_prob[i], &cached.commit_prob[i], sizeof(float)) == 0);
        }
        ck_assert_int_eq(every.nfe, plain.nfe);
        ck_assert_int_eq(rare.nfe, cached.nfe);
        /* a refresh that makes a difference: every 2nd step, the cached ids unless the
         * cache went stale */
        dllm_rollout half;
        c.cache_refresh = 2;
        ck_assert_int_eq(dllm_sample_cached(rollout_logits, m, &sc, prompts, NULL, B, P, &c, 7,
                                            &half, &err), 0);
        int differ = 0;
        for (int i = 0; i < B * G; i++)
            differ += memcmp(&half.commit_prob[i], &cached.commit_prob[i], sizeof(float)) != 0;
        ck_assert_msg(differ > 0, "refresh every 2 steps: every commit probability equals the "
                      "unrefreshed cache's (mode %d)", k);
        dllm_rollout_free(&half);
        dllm_rollout_free(&plain);
        dllm_rollout_free(&every);
        dllm_rollout_free(&rare);
        dllm_rollout_free(&cached);
        dllm_block_cache_free(bc);
    }
    /* without a cache, and negative */
    dllm_sampler_cfg c = {.gen_length = G, .block_length = 8, .steps = 8, .temperature = 0.9,
                          .mask_id = mc->mask_token_id, .eos_id = mc->eos_token_id,
                          .eot_id = -1, .vocab = mc->embedding_size, .cache_refresh = 2};
    ck_assert_int_eq(dllm_sampler_check(&c, &err), 2);
    ck_assert_ptr_nonnull(strstr(err.msg, "cache_refresh"));
    c.cache = DLLM_CACHE_DUAL;
    ck_assert_int_eq(dllm_sampler_check(&c, &err), 0);
    c.cache_refresh = -1;
    ck_assert_int_eq(dllm_sampler_check(&c, &err), 2);
    dllm_tf_free(m);
}
END_TEST

static char *ids_csv(const json_t *a)
{
    char *s = dllm_malloc(16 * json_array_size(a) + 2);
    s[0] = '\0';
    for (size_t i = 0; i < json_array_size(a); i++)
        sprintf(s + strlen(s), "%s%lld", i ? "," : "", (long long)json_integer_value(json_array_get(a, i)));
    return s;
}

/* `generate` against the published Fast-dLLM functions: the same ids in every mode. */
START_TEST(test_published_goldens)
{
    const char *data = getenv("DLLM_TEST_DATA");
    if (!tu_bin() || !data) {
        fprintf(stderr, "test_published_goldens: DLLM_BIN / DLLM_TEST_DATA not set\n");
        return;
    }
    json_t *gold = tu_json_load("cache_published/golden.json");
    const json_t *models = json_object_get(gold, "models");
    char *tmp = tu_make_tmpdir(), out[4200];
    snprintf(out, sizeof out, "%s/ids", tmp);
    int runs = 0, parallel = 0, differ = 0;
    for (size_t k = 0; k < json_array_size(models); k++) {
        const json_t *me = json_array_get(models, k);
        const char *name = json_string_value(json_object_get(me, "name"));
        const json_t *cases = json_object_get(me, "cases");
        for (size_t ci = 0; ci < json_array_size(cases); ci++) {
            const json_t *cs = json_array_get(cases, ci);
            char *prompt = ids_csv(json_object_get(cs, "prompt"));
            const json_t *rs = json_object_get(cs, "runs");
            for (size_t ri = 0; ri < json_array_size(rs); ri++) {
                const json_t *run = json_array_get(rs, ri);
                const char *mode = json_string_value(json_object_get(run, "mode"));
                double thr = tu_jget(run, "threshold");
                char thr_flag[64] = "";
                if (thr > 0)
                    snprintf(thr_flag, sizeof thr_flag, "--threshold %.17g", thr);
                ck_assert_int_eq(tu_sh("OMP_NUM_THREADS=1 %s generate --model %s/cache_published/%s "
                                       "--prompt-ids %s --gen-length %d --block-length %d "
                                       "--steps %d --temperature 0 --cache %s %s --format ids > %s",
                                       tu_bin(), data, name, prompt, (int)tu_jget(cs, "gen_length"),
                                       (int)tu_jget(cs, "block_length"), (int)tu_jget(cs, "steps"),
                                       mode, thr_flag, out),
                                 0);
                char *want = ids_csv(json_object_get(run, "ids"));
                FILE *f = fopen(out, "r");
                char line[8192] = "";
                ck_assert_ptr_nonnull(fgets(line, sizeof line, f));
                fclose(f);
                line[strcspn(line, "\n")] = '\0';
                ck_assert_msg(!strcmp(line, want), "%s prompt %s cache %s threshold %g: %s, "
                              "published %s", name, prompt, mode, thr, line, want);
                free(want);
                runs++;
                parallel += tu_jget(run, "parallel_steps") > 0;
            }
            free(prompt);
        }
    }
    const json_t *sum = json_object_get(gold, "summary");
    differ = (int)tu_jget(sum, "cached_runs_differing_from_uncached");
    ck_assert_int_eq(runs, (int)tu_jget(sum, "runs"));
    ck_assert_int_ge(runs, 100);
    /* the goldens discriminate: the cache changes ids, the threshold commits in parallel */
    ck_assert_int_gt(differ, 0);
    ck_assert_int_gt(parallel, 0);
    json_decref(gold);
    tu_rm_rf(tmp);
    free(tmp);
}
END_TEST

/* Bad input: exit 2 naming the flag or key. */
static int run_cli(const char *dir, char *err_text, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int run_cli(const char *dir, char *err_text, size_t cap, const char *fmt, ...)
{
    char args[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    int st = tu_sh("cd %s && OMP_NUM_THREADS=1 %s %s >stdout 2>stderr", dir, tu_bin(), args);
    char p[4200];
    snprintf(p, sizeof p, "%s/stderr", dir);
    FILE *f = fopen(p, "r");
    size_t n = f ? fread(err_text, 1, cap - 1, f) : 0;
    err_text[n] = '\0';
    if (f)
        fclose(f);
    return st;
}

START_TEST(test_bad_input)
{
    const char *data = getenv("DLLM_TEST_DATA");
    if (!tu_bin() || !data) {
        fprintf(stderr, "test_bad_input: DLLM_BIN / DLLM_TEST_DATA not set\n");
        return;
    }
    char *tmp = tu_make_tmpdir(), e[8192];
    const char *gen = "generate --model %s/llada/tiny --prompt-ids 5,6,7 --gen-length 16 "
                      "--block-length 8 --steps 8 --format ids";
    char base[512];
    snprintf(base, sizeof base, gen, data);
    static const struct {
        const char *extra, *needle;
    } bad[] = {{"--threshold 0", "--threshold"},   {"--threshold 1.5", "--threshold"},
               {"--threshold -1", "--threshold"},  {"--threshold nan", "--threshold"},
               {"--cache both", "--cache"},        {"--cache dual --block-length 7", "--block-length"},
               {"--cache dual --cfg-scale 1", "cache"},
               {"--cache-refresh 2", "--cache-refresh"},
               {"--cache dual --cache-refresh 0", "--cache-refresh"},
               {"--cache dual --cache-refresh x", "--cache-refresh"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int st = run_cli(tmp, e, sizeof e, "%s %s", base, bad[i].extra);
        ck_assert_msg(st == 2 && strstr(e, bad[i].needle), "%s: exit %d, stderr: %s",
                      bad[i].extra, st, e);
    }
    ck_assert_int_eq(run_cli(tmp, e, sizeof e, "%s --cache dual --threshold 1", base), 0);
    ck_assert_int_eq(run_cli(tmp, e, sizeof e, "%s --cache prefix --cache-refresh 3", base), 0);
    /* an autoregressive model */
    int st = run_cli(tmp, e, sizeof e, "generate --model %s/qwen3/tied --prompt-ids 5,6 "
                     "--gen-length 4 --cache dual", data);
    ck_assert_msg(st == 2 && strstr(e, "--cache"), "qwen3 --cache: exit %d: %s", st, e);
    st = run_cli(tmp, e, sizeof e, "generate --model %s/qwen3/tied --prompt-ids 5,6 "
                 "--gen-length 4 --threshold 0.9", data);
    ck_assert_msg(st == 2 && strstr(e, "--threshold"), "qwen3 --threshold: exit %d: %s", st, e);
    /* the config keys */
    char p[4200];
    snprintf(p, sizeof p, "%s/a.yaml", tmp);
    FILE *f = fopen(p, "w");
    fputs("rollout: {threshold: 1.5}\n", f);
    fclose(f);
    st = run_cli(tmp, e, sizeof e, "train a.yaml");
    ck_assert_msg(st == 2 && strstr(e, "rollout.threshold"), "rollout.threshold 1.5: %d: %s", st, e);
    f = fopen(p, "w");
    fputs("eval: {cache: full}\n", f);
    fclose(f);
    st = run_cli(tmp, e, sizeof e, "train a.yaml");
    ck_assert_msg(st == 2 && strstr(e, "eval.cache"), "eval.cache full: %d: %s", st, e);
    f = fopen(p, "w");
    fputs("rollout: {cache_refresh: -1}\n", f);
    fclose(f);
    st = run_cli(tmp, e, sizeof e, "train a.yaml");
    ck_assert_msg(st == 2 && strstr(e, "rollout.cache_refresh"), "cache_refresh -1: %d: %s", st,
                  e);
    f = fopen(p, "w");
    fputs("model: {preset: tiny}\neval: {cache_refresh: 4}\n"
          "task: {name: sudoku, train: {n: 8}}\ngrpo: {steps: 1, prompts_per_step: 1}\n"
          "log: {dir: runs}\n", f);
    fclose(f);
    st = run_cli(tmp, e, sizeof e, "train a.yaml");
    ck_assert_msg(st == 2 && strstr(e, "eval.cache_refresh"), "eval.cache_refresh without a "
                  "cache: %d: %s", st, e);
    f = fopen(p, "w");
    fputs("model: {preset: tiny, arch: qwen3}\nrollout: {cache: dual}\n"
          "task: {name: sudoku, train: {n: 8}}\ngrpo: {steps: 1, prompts_per_step: 1}\n"
          "log: {dir: runs}\n", f);
    fclose(f);
    st = run_cli(tmp, e, sizeof e, "train a.yaml");
    ck_assert_msg(st == 2 && strstr(e, "rollout.cache"), "qwen3 rollout.cache: %d: %s", st, e);
    tu_rm_rf(tmp);
    free(tmp);
}
END_TEST

/* RL on cached / parallel rollouts: under the trajectory estimator l_mu is the sampler's
 * own (the sum of the log commit probabilities of the scored tokens) and log w =
 * l_pi - l_mu; l_mu_exact, the rollout precision replayed without the cache, splits it.
 * Under elbo, or without the cache, l_mu is l_mu_exact and the cache part is 0. */
static void rl_run_cfg(const char *tmp, const char *name, const char *extra)
{
    char p[4200], e[8192];
    snprintf(p, sizeof p, "%s/%s.yaml", tmp, name);
    FILE *f = fopen(p, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "experiment: %s\nseed: 7\nmodel: {path: model}\n"
               "task: {name: sudoku, format: plain, chat: plain, train: {n: 64}, max_blanks: 6}\n"
               "rollout: {precision: fp8, group_size: 4, gen_length: 12, block_length: 6, "
               "steps: 6, %s}\nlikelihood: {mc_samples: 2}\n"
               "grpo: {steps: 2, prompts_per_step: 2, inner_steps: 1}\n"
               "eval: {every: 0, n: 4, gen_length: 12, block_length: 6, steps: 6, cache: dual}\n"
               "log: {dir: runs}\ncheckpoint: {every: 0}\n", name, extra);
    fclose(f);
    int st = run_cli(tmp, e, sizeof e, "train %s.yaml", name);
    ck_assert_msg(st == 0, "train %s: exit %d: %s", name, st, e);
}

START_TEST(test_rl_split)
{
    if (!tu_bin()) {
        fprintf(stderr, "test_rl_split: DLLM_BIN not set\n");
        return;
    }
    char *tmp = tu_make_tmpdir(), e[8192];
    ck_assert_int_eq(run_cli(tmp, e, sizeof e, "init-model --arch llada --preset tiny --seed 3 "
                             "--out model"), 0);
    rl_run_cfg(tmp, "traj", "cache: dual, threshold: 0.5}\ncorrection: {estimator: trajectory");
    rl_run_cfg(tmp, "plain", "cache: none}\ncorrection: {estimator: trajectory");
    rl_run_cfg(tmp, "elbo", "cache: prefix}\ncorrection: {estimator: elbo");
    const char *names[3] = {"traj", "plain", "elbo"};
    for (int r = 0; r < 3; r++) {
        int64_t n, n2, rows, cols;
        double *mu = tu_log_column("trajectories/l_mu", &n, "%s/runs/%s/log.h5", tmp, names[r]);
        double *mx = tu_log_column("trajectories/l_mu_exact", &n2, "%s/runs/%s/log.h5", tmp,
                                   names[r]);
        double *pi = tu_log_column("trajectories/l_pi", &n2, "%s/runs/%s/log.h5", tmp, names[r]);
        double *lw = tu_log_column("trajectories/log_w", &n2, "%s/runs/%s/log.h5", tmp, names[r]);
        double *len = tu_log_column("trajectories/completion_len", &n2, "%s/runs/%s/log.h5", tmp,
                                    names[r]);
        float *cp = tu_log_matrix("trajectories/commit_prob", H5T_NATIVE_FLOAT, sizeof(float),
                                  &rows, &cols, "%s/runs/%s/log.h5", tmp, names[r]);
        ck_assert_int_eq(n, 16);
        ck_assert_int_eq(rows, n);
        int differ = 0;
        for (int64_t i = 0; i < n; i++) {
            ck_assert(lw[i] == pi[i] - mu[i]);
            if (r == 0) {
                double s = 0;
                for (int t = 0; t < (int)len[i]; t++)
                    s += log((double)cp[i * cols + t]);
                ck_assert_msg(fabs(s - mu[i]) <= 1e-9 * (1 + fabs(s)), "row %ld: l_mu %.17g, "
                              "sum of log commit_prob %.17g", (long)i, mu[i], s);
                differ += mx[i] != mu[i];
            } else {
                ck_assert(mx[i] == mu[i]);
            }
        }
        if (r == 0)
            ck_assert_int_gt(differ, 0);
        double *rc = tu_log_column("steps/rho_ess_cache", &n2, "%s/runs/%s/log.h5", tmp, names[r]);
        double *dc = tu_log_column("steps/delta_cache", &n2, "%s/runs/%s/log.h5", tmp, names[r]);
        double *dp = tu_log_column("steps/delta_prec", &n2, "%s/runs/%s/log.h5", tmp, names[r]);
        ck_assert_int_eq(n2, 2);
        for (int k = 0; k < 2; k++) {
            ck_assert(isfinite(dp[k]) && dp[k] > 0);
            if (r == 0)
                ck_assert(dc[k] > 0 && rc[k] < 1);
            else
                ck_assert(dc[k] == 0 && rc[k] == 1);
        }
        free(mu), free(mx), free(pi), free(lw), free(len), free(cp), free(rc), free(dc), free(dp);
    }
    tu_rm_rf(tmp);
    free(tmp);
}
END_TEST

Suite *tu_suite(tu_ctx *ctx)
{
    (void)ctx;
    Suite *s = suite_create("cache");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_fill_is_the_forward);
    tcase_add_test(tc, test_step_over_unchanged_canvas);
    tcase_add_test(tc, test_threshold_rule);
    tcase_add_test(tc, test_batch_rows_independent);
    tcase_add_test(tc, test_cache_refresh);
    tcase_add_test(tc, test_published_goldens);
    tcase_add_test(tc, test_bad_input);
    tcase_add_test(tc, test_rl_split);
    suite_add_tcase(s, tc);
    return s;
}
