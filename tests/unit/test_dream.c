/* test_dream.c: Dream as an architecture of the transformer core and its
 * sampler family, against the published model and sampler (the NumPy
 * re-implementation in tests/ref/make_dream_goldens.py, on the random tiny
 * model in tests/data/dream/tiny):
 *   - config.json mapping, presets (dream-7b's published sizes), save/load;
 *   - shifted logits of a sequence and of a left-padded batch, per-token
 *     log-probs on a masked canvas (1e-4);
 *   - greedy generations of maskgit_plus, topk_margin and entropy (ids equal);
 *   - sampler properties: keyed draws independent of the batch, the record
 *     (commit steps, probabilities), forbid, alg_temp, origin, top-k;
 *   - alg_temp's and origin's draws have the published distributions
 *     (multinomial without replacement; transfer probability 1 - s/t);
 *   - the trajectory estimator replays Dream rollouts: its log-likelihood of
 *     a completion equals the sum of the sampler's log commit probabilities,
 *     so the likelihood plans score the rows the shifted model predicts;
 *   - generation.json records Dream's sampler settings and reads them back;
 *   - `train` runs 2 GRPO steps of configs/quickstart-dream.yaml (FP8 rollouts,
 *     AIS) on a tiny Dream model with finite logged values, and its final
 *     checkpoint's generation.json holds the run's Dream sampler.
 * tests/unit/test_dream_published.c compares against the published code itself. */
#include "tests/harness/harness.h"
#include "dllm/chat.h"
#include "dllm/dream_sampler.h"
#include "dllm/estimators.h"
#include "dllm/lik_plan.h"
#include "dllm/policy.h"
#include "dllm/transformer.h"
#include "src/config/gen_settings.h"
#include "src/config/yaml_config.h"
#include "tests/harness/test_util.h"

#include <check.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

static dllm_tf *load_tiny(void)
{
    char *dir = tu_data_path("dream/tiny");
    dllm_tf *m = NULL;
    dllm_err err = {0};
    ck_assert_msg(dllm_tf_load(&m, dir, &err) == 0, "%s", err.msg);
    free(dir);
    return m;
}

static int tf_logits(void *m, const int32_t *tokens, const uint8_t *keymask, int B, int T,
                     const int32_t *rows, int n_rows, float *logits)
{
    return dllm_tf_forward_nograd(m, tokens, keymask, B, T, rows, n_rows, logits);
}

static int32_t *jints(const json_t *a, int *n)
{
    *n = (int)json_array_size(a);
    int32_t *v = dllm_malloc(sizeof *v * (size_t)(*n + 1));
    for (int i = 0; i < *n; i++)
        v[i] = (int32_t)json_integer_value(json_array_get(a, (size_t)i));
    return v;
}

/* ---- the model ------------------------------------------------------------------------------ */

START_TEST(test_config)
{
    char *dir = tu_data_path("dream/tiny");
    dllm_model_config c;
    dllm_err err = {0};
    ck_assert_msg(dllm_config_load(&c, dir, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(c.arch, DLLM_ARCH_DREAM);
    ck_assert_int_eq(c.d_model, 32);
    ck_assert_int_eq(c.n_kv_heads, 2);
    ck_assert_int_eq(c.head_dim, 8);
    ck_assert_int_eq(c.mask_token_id, 39);
    ck_assert(!c.weight_tying);
    ck_assert_ptr_eq(dllm_arch_get(c.arch), &dllm_arch_dream);
    ck_assert_ptr_eq(dllm_arch_by_name("dream"), &dllm_arch_dream);
    free(dir);

    /* Dream-v0-Instruct-7B: 7.62B parameters (Qwen2.5-7B's, untied) */
    ck_assert_int_eq(dllm_config_preset(&c, DLLM_ARCH_DREAM, "dream-7b", &err), 0);
    ck_assert_int_eq(c.d_model, 3584);
    ck_assert_int_eq(c.n_layers, 28);
    ck_assert_int_eq(c.n_heads, 28);
    ck_assert_int_eq(c.n_kv_heads, 4);
    ck_assert_int_eq(c.head_dim, 128);
    ck_assert_int_eq(c.mlp_hidden, 18944);
    ck_assert_int_eq(c.vocab_size, 152064);
    ck_assert_int_eq(c.mask_token_id, 151666);
    int64_t np = dllm_config_num_params(&c);
    ck_assert_msg(np > 7615000000LL && np < 7616000000LL, "dream-7b: %lld parameters",
                  (long long)np);
    ck_assert_int_eq(dllm_config_preset(&c, DLLM_ARCH_DREAM, "llada-8b", &err), DLLM_EXIT_INPUT);
    ck_assert_ptr_nonnull(strstr(err.msg, "dream preset"));

    /* save -> load round trip of a preset, and a model through the core */
    char *tmp = tu_make_tmpdir();
    ck_assert_int_eq(dllm_config_preset(&c, DLLM_ARCH_DREAM, "tiny", &err), 0);
    dllm_tf *m = dllm_tf_create(&c, 5);
    ck_assert_msg(dllm_tf_save(m, tmp, ST_F32, 0, &err) == 0, "%s", err.msg);
    dllm_tf *m2 = NULL;
    ck_assert_msg(dllm_tf_load(&m2, tmp, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(dllm_tf_config(m2)->arch, DLLM_ARCH_DREAM);
    ck_assert_int_eq(dllm_tf_config(m2)->n_kv_heads, c.n_kv_heads);
    const dllm_param *pa, *pb;
    int na = dllm_tf_params(m, &pa), nb = dllm_tf_params(m2, &pb);
    ck_assert_int_eq(na, nb);
    ck_assert_str_eq(pa[2].name, "model.layers.0.self_attn.q_proj.bias");
    for (int i = 0; i < na; i++) {
        ck_assert_str_eq(pa[i].name, pb[i].name);
        ck_assert(memcmp(pa[i].data, pb[i].data, pa[i].numel * sizeof(float)) == 0);
    }
    dllm_tf_free(m);
    dllm_tf_free(m2);

    /* a config without mask_token_id is bad input naming the key */
    char path[512];
    snprintf(path, sizeof path, "%s/config.json", tmp);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("{\"model_type\": \"Dream\", \"hidden_size\": 32, \"intermediate_size\": 48,"
          " \"num_hidden_layers\": 1, \"num_attention_heads\": 4, \"vocab_size\": 40,"
          " \"max_position_embeddings\": 64}", f);
    fclose(f);
    ck_assert_int_eq(dllm_config_load(&c, tmp, &err), DLLM_EXIT_INPUT);
    ck_assert_ptr_nonnull(strstr(err.msg, "mask_token_id"));
    tu_rm_rf(tmp);
    free(tmp);
}
END_TEST

START_TEST(test_logits)
{
    json_t *g = tu_json_load("dream/golden.json");
    dllm_tf *m = load_tiny();
    const int V = dllm_tf_config(m)->embedding_size;
    const json_t *lg = json_object_get(g, "logits");
    int T;
    int32_t *tok = jints(json_object_get(lg, "tokens"), &T);
    float *out = dllm_malloc(sizeof *out * (size_t)T * V);
    ck_assert_int_eq(dllm_tf_forward_nograd(m, tok, NULL, 1, T, NULL, 0, out), 0);
    const json_t *vals = json_object_get(lg, "values");
    double worst = 0;
    for (int t = 0; t < T; t++)
        for (int v = 0; v < V; v++) {
            double ref = tu_jnum(json_array_get(json_array_get(vals, (size_t)t), (size_t)v));
            worst = fmax(worst, fabs(ref - out[(size_t)t * V + v]));
        }
    ck_assert_msg(worst < 1e-4, "shifted logits differ from the published model's by %g", worst);
    free(tok);
    free(out);

    /* left-padded batch: position ids from the mask, padding keys unseen */
    const json_t *pd = json_object_get(g, "padded");
    const json_t *rows = json_object_get(pd, "tokens"), *am = json_object_get(pd, "attention_mask");
    int32_t tokens[16];
    uint8_t km[16];
    for (int b = 0; b < 2; b++)
        for (int t = 0; t < 8; t++) {
            const json_t *tr = json_array_get(rows, (size_t)b), *mr = json_array_get(am, (size_t)b);
            tokens[b * 8 + t] = (int32_t)json_integer_value(json_array_get(tr, (size_t)t));
            km[b * 8 + t] = (uint8_t)json_integer_value(json_array_get(mr, (size_t)t));
        }
    out = dllm_malloc(sizeof *out * 16 * (size_t)V);
    ck_assert_int_eq(dllm_tf_forward_nograd(m, tokens, km, 2, 8, NULL, 0, out), 0);
    const json_t *cmp = json_object_get(pd, "compare");
    vals = json_object_get(pd, "values");
    worst = 0;
    ck_assert_int_gt((int)json_array_size(cmp), 10);
    for (size_t i = 0; i < json_array_size(cmp); i++) {
        int b = (int)json_integer_value(json_array_get(json_array_get(cmp, i), 0));
        int t = (int)json_integer_value(json_array_get(json_array_get(cmp, i), 1));
        for (int v = 0; v < V; v++) {
            double ref = tu_jnum(json_array_get(json_array_get(vals, (size_t)(b * 8 + t)), (size_t)v));
            worst = fmax(worst, fabs(ref - out[(size_t)(b * 8 + t) * V + v]));
        }
    }
    ck_assert_msg(worst < 1e-4, "padded batch: logits differ by %g", worst);
    free(out);
    dllm_tf_free(m);
    json_decref(g);
}
END_TEST

START_TEST(test_logp)
{
    json_t *g = tu_json_load("dream/golden.json");
    dllm_tf *m = load_tiny();
    const int V = dllm_tf_config(m)->embedding_size;
    const json_t *lp = json_object_get(g, "logp");
    int T, n, nt;
    int32_t *cv = jints(json_object_get(lp, "canvas"), &T);
    int32_t *pos = jints(json_object_get(lp, "positions"), &n);
    int32_t *tg = jints(json_object_get(lp, "targets"), &nt);
    ck_assert_int_eq(n, nt);
    float *out = dllm_malloc(sizeof *out * (size_t)n * V);
    /* only the scored rows: the head runs on the shifted hidden rows */
    ck_assert_int_eq(dllm_tf_forward_nograd(m, cv, NULL, 1, T, pos, n, out), 0);
    for (int i = 0; i < n; i++) {
        double got = log(dllm_sampler_prob(out + (size_t)i * V, V, tg[i]));
        double ref = tu_jnum(json_array_get(json_object_get(lp, "values"), (size_t)i));
        ck_assert_msg(fabs(got - ref) < 1e-4, "position %d: log-prob %.7f, published %.7f", pos[i],
                      got, ref);
    }
    free(cv);
    free(pos);
    free(tg);
    free(out);
    dllm_tf_free(m);
    json_decref(g);
}
END_TEST

/* Backward through the Dream descriptor (biases, shift, padding) by central
 * finite differences of sum_r log p(target_r) over masked rows: a spread of elements
 * of each tensor and its largest gradient, which must not be zero (a backward that
 * lost a tensor's gradient would otherwise agree with a flat difference). */
static double fd_loss(dllm_tf *m, const int32_t *tok, const uint8_t *km, const int32_t *rows,
                      const int32_t *tg, int n, float *lg, float *dl)
{
    const int V = dllm_tf_config(m)->embedding_size;
    ck_assert_int_eq(dllm_tf_forward(m, tok, km, 2, 8, rows, n, lg), 0);
    double loss = 0;
    for (int r = 0; r < n; r++) {
        const float *z = lg + (size_t)r * V;
        double mx = z[0], zs = 0;
        for (int v = 1; v < V; v++)
            mx = fmax(mx, z[v]);
        for (int v = 0; v < V; v++)
            zs += exp(z[v] - mx);
        loss += z[tg[r]] - mx - log(zs);
        if (dl)
            for (int v = 0; v < V; v++)
                dl[(size_t)r * V + v] = (float)((v == tg[r]) - exp(z[v] - mx) / zs);
    }
    return loss;
}

START_TEST(test_backward_fd)
{
    dllm_tf *m = load_tiny();
    const int V = dllm_tf_config(m)->embedding_size, n = 6;
    int32_t tok[16] = {0, 0, 5, 6, 39, 39, 8, 39, 4, 9, 10, 39, 39, 12, 39, 3};
    uint8_t km[16] = {0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    int32_t rows[6] = {4, 5, 7, 11, 12, 14}, tg[6] = {7, 11, 13, 21, 2, 30};
    float *lg = dllm_malloc(sizeof *lg * (size_t)n * V), *dl = dllm_malloc(sizeof *dl * (size_t)n * V);
    dllm_optim_zero_grad(dllm_tf_optim(m));
    fd_loss(m, tok, km, rows, tg, n, lg, dl);
    dllm_tf_backward(m, dl);
    const dllm_param *P;
    int np = dllm_tf_params(m, &P);
    const char *names[] = {"model.layers.0.self_attn.q_proj.bias", "model.layers.1.self_attn.k_proj.bias",
                           "model.layers.0.self_attn.v_proj.bias", "model.layers.1.self_attn.q_proj.weight",
                           "model.embed_tokens.weight", "lm_head.weight", "model.norm.weight"};
    int checked = 0;
    for (int j = 0; j < np; j++)
        for (size_t k = 0; k < sizeof names / sizeof *names; k++) {
            if (strcmp(P[j].name, names[k]))
                continue;
            /* a spread of elements, then the largest gradient */
            size_t probes[8], np_ = 0, top = 0;
            for (size_t e = 1; e < P[j].numel && np_ < 7; e += P[j].numel / 3)
                probes[np_++] = e;
            for (size_t e = 1; e < P[j].numel; e++)
                if (fabsf(P[j].grad[e]) > fabsf(P[j].grad[top]))
                    top = e;
            /* measured 0.88 (layer 1's k_proj bias) to 4.1 (the final norm) */
            ck_assert_msg(fabsf(P[j].grad[top]) > 0.1f, "%s: largest gradient %g", P[j].name,
                          (double)P[j].grad[top]);
            probes[np_++] = top;
            for (size_t q = 0; q < np_; q++) {
                const size_t e = probes[q];
                const float h = 1e-2f, x = P[j].data[e];
                P[j].data[e] = x + h;
                double up = fd_loss(m, tok, km, rows, tg, n, lg, NULL);
                P[j].data[e] = x - h;
                double dn = fd_loss(m, tok, km, rows, tg, n, lg, NULL);
                P[j].data[e] = x;
                double fd = (up - dn) / (2 * h), an = P[j].grad[e];
                ck_assert_msg(fabs(fd - an) < 2e-3 + 2e-2 * fabs(fd), "%s[%zu]: backward %.6f, fd %.6f",
                              P[j].name, e, an, fd);
                checked++;
            }
        }
    ck_assert_int_ge(checked, 21);
    free(lg);
    free(dl);
    dllm_tf_free(m);
}
END_TEST

/* Dream's chat format: Qwen2.5's template (the default system turn). */
START_TEST(test_chat)
{
    dllm_err err = {0};
    char *out = NULL;
    ck_assert_int_eq(dllm_chat_prompt(DLLM_CHAT_QWEN25, NULL, "2+2?", false, false, &out, &err), 0);
    ck_assert_str_eq(out, "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
                          "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n");
    free(out);
    ck_assert_int_eq(dllm_chat_prompt(DLLM_CHAT_QWEN25, "Be brief.", "hi", false, false, &out, &err), 0);
    ck_assert_str_eq(out, "<|im_start|>system\nBe brief.<|im_end|>\n"
                          "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
    free(out);
    dllm_chat_format f;
    ck_assert_int_eq(dllm_chat_format_parse("qwen2.5", &f, &err), 0);
    ck_assert_int_eq(f, DLLM_CHAT_QWEN25);
    ck_assert_str_eq(dllm_chat_format_name(f), "qwen2.5");
    char *dir = tu_data_path("dream/tiny"); /* no tokenizer files: config.json's model_type */
    ck_assert_int_eq(dllm_chat_format_from_dir(dir, &f, &err), 0);
    ck_assert_int_eq(f, DLLM_CHAT_QWEN25);
    free(dir);
}
END_TEST

/* ---- the sampler ---------------------------------------------------------------------------- */

static dllm_sampler_cfg scfg(const dllm_tf *m, int G, int S, double temp)
{
    const dllm_model_config *c = dllm_tf_config(m);
    return (dllm_sampler_cfg){.gen_length = G, .block_length = G, .steps = S, .temperature = temp,
                              .mask_id = c->mask_token_id, .eos_id = c->eos_token_id,
                              .eot_id = -1, .vocab = c->embedding_size};
}

START_TEST(test_greedy_goldens)
{
    json_t *g = tu_json_load("dream/golden.json");
    dllm_tf *m = load_tiny();
    const json_t *gens = json_object_get(g, "generate");
    ck_assert_int_eq((int)json_array_size(gens), 9);
    dllm_err err = {0};
    for (size_t k = 0; k < json_array_size(gens); k++) {
        const json_t *e = json_array_get(gens, k);
        int P, G;
        int32_t *pr = jints(json_object_get(e, "prompt"), &P);
        int32_t *ids = jints(json_object_get(e, "ids"), &G);
        int S = (int)json_integer_value(json_object_get(e, "steps"));
        dllm_dream_cfg d = dllm_dream_cfg_default();
        ck_assert_int_eq(dllm_dream_alg_parse(json_string_value(json_object_get(e, "alg")), &d.alg), 0);
        d.eps = tu_jget(e, "eps");
        dllm_sampler_cfg c = scfg(m, G, S, 0);
        dllm_rollout r;
        ck_assert_msg(dllm_dream_sample(tf_logits, m, pr, NULL, 1, P, &c, &d, 3, &r, &err) == 0,
                      "%s", err.msg);
        for (int t = 0; t < G; t++)
            ck_assert_msg(r.tokens[P + t] == ids[t], "%s steps %d: position %d is %d, published %d",
                          dllm_dream_alg_name(d.alg), S, t, r.tokens[P + t], ids[t]);
        /* every position committed once, at a step in range, with its probability */
        for (int t = 0; t < G; t++) {
            ck_assert(r.commit_step[t] >= 0 && r.commit_step[t] < S);
            ck_assert(r.commit_prob[t] > 0 && r.commit_prob[t] <= 1);
        }
        ck_assert_int_eq(r.n_masked_left[0], 0);
        dllm_rollout_free(&r);
        free(pr);
        free(ids);
    }
    dllm_tf_free(m);
    json_decref(g);
}
END_TEST

/* The token distribution after temperature, top_p and top_k, and the three
 * confidences, as the published sample_tokens computes them. */
START_TEST(test_token_dist)
{
    json_t *g = tu_json_load("dream/golden.json");
    const json_t *ds = json_object_get(g, "token_dist");
    ck_assert_int_eq((int)json_array_size(ds), 4);
    for (size_t k = 0; k < json_array_size(ds); k++) {
        const json_t *e = json_array_get(ds, k);
        const json_t *lj = json_object_get(e, "logits"), *pj = json_object_get(e, "probs");
        const int V = (int)json_array_size(lj);
        float *lg = dllm_malloc(sizeof *lg * (size_t)V);
        double *p = dllm_malloc(sizeof *p * (size_t)V);
        for (int v = 0; v < V; v++)
            lg[v] = (float)tu_jnum(json_array_get(lj, (size_t)v));
        dllm_sampler_cfg c = {.vocab = V, .mask_id = V - 1, .temperature = tu_jget(e, "temperature")};
        dllm_dream_cfg d = dllm_dream_cfg_default();
        d.top_p = tu_jget(e, "top_p");
        d.top_k = (int)tu_jget(e, "top_k");
        const char *names[3] = {"maskgit_plus", "margin", "neg_entropy"};
        for (int a = 0; a < 3; a++) {
            d.alg = (dllm_dream_alg)(a + 1);
            double conf;
            int32_t x0 = dllm_dream_token_dist(lg, &c, &d, p, &conf);
            ck_assert_int_eq(x0, (int)tu_jget(e, "argmax"));
            int kept = 0;
            for (int v = 0; v < V; v++) {
                double ref = tu_jnum(json_array_get(pj, (size_t)v));
                ck_assert_msg(fabs(p[v] - ref) < 1e-6, "case %zu token %d: p %.8f, published %.8f",
                              k, v, p[v], ref);
                ck_assert((p[v] == 0) == (ref == 0)); /* the same tokens filtered out */
                kept += p[v] > 0;
            }
            if (d.top_k > 0)
                ck_assert_int_le(kept, d.top_k);
            double want = a == 0 ? tu_jnum(json_array_get(pj, (size_t)x0))
                                 : tu_jget(e, names[a]);
            ck_assert_msg(fabs(conf - want) < 1e-6, "case %zu %s: %.8f vs %.8f", k, names[a], conf,
                          want);
        }
        free(lg);
        free(p);
    }
    json_decref(g);
}
END_TEST

/* The schedule commits int(n * (1 - s/t)) per step: with eps near 0 and
 * steps = G the first step commits nothing and the counts grow. */
START_TEST(test_schedule_counts)
{
    dllm_tf *m = load_tiny();
    const int P = 3, G = 10, S = 4;
    int32_t pr[3] = {5, 6, 7};
    dllm_sampler_cfg c = scfg(m, G, S, 0);
    dllm_dream_cfg d = dllm_dream_cfg_default();
    d.alg = DLLM_DREAM_MASKGIT_PLUS;
    dllm_rollout r;
    dllm_err err = {0};
    ck_assert_int_eq(dllm_dream_sample(tf_logits, m, pr, NULL, 1, P, &c, &d, 1, &r, &err), 0);
    int per[4] = {0};
    for (int t = 0; t < G; t++)
        per[r.commit_step[t]]++;
    /* float32 linspace(1, 1e-3, 5) = 1, .75025, .5005, .25075, .001:
     * int(10 * .24975) = 2, int(8 * .33289) = 2, int(6 * .49900) = 2, then the last 4 */
    ck_assert_int_eq(per[0], 2);
    ck_assert_int_eq(per[1], 2);
    ck_assert_int_eq(per[2], 2);
    ck_assert_int_eq(per[3], 4);
    dllm_rollout_free(&r);
    dllm_tf_free(m);
}
END_TEST

/* Keyed draws: a sequence's rollout does not depend on the batch around it;
 * the same seed repeats; every alg and option gives a full record. */
START_TEST(test_sampling_keyed)
{
    dllm_tf *m = load_tiny();
    const int P = 3, G = 8, S = 4;
    int32_t pr[6] = {5, 6, 7, 9, 10, 11};
    dllm_err err = {0};
    for (int alg = 0; alg < 4; alg++)
        for (int opt = 0; opt < 3; opt++) {
            dllm_sampler_cfg c = scfg(m, G, S, 0.8);
            c.mask_token = DLLM_MASK_TOKEN_FORBID;
            dllm_dream_cfg d = dllm_dream_cfg_default();
            d.alg = (dllm_dream_alg)alg;
            if (opt == 1)
                d.alg_temp = 0.5, d.top_k = 5;
            if (opt == 2)
                d.top_p = 0.8;
            dllm_rollout both, one, again;
            ck_assert_int_eq(dllm_dream_sample(tf_logits, m, pr, NULL, 2, P, &c, &d, 9, &both, &err), 0);
            c.seq_offset = 1;
            ck_assert_int_eq(dllm_dream_sample(tf_logits, m, pr + P, NULL, 1, P, &c, &d, 9, &one, &err), 0);
            ck_assert_int_eq(dllm_dream_sample(tf_logits, m, pr + P, NULL, 1, P, &c, &d, 9, &again, &err), 0);
            for (int t = 0; t < P + G; t++) {
                ck_assert_int_eq(both.tokens[(P + G) + t], one.tokens[t]);
                ck_assert_int_eq(again.tokens[t], one.tokens[t]);
            }
            for (int t = 0; t < G; t++) {
                ck_assert_int_eq(both.commit_step[G + t], one.commit_step[t]);
                ck_assert_int_ne(one.tokens[P + t], c.mask_id); /* forbid */
                ck_assert(one.commit_step[t] >= 0);
                if (opt == 1) /* top_k 5: the token is among the 5 most likely */
                    ck_assert(one.commit_prob[t] > 0);
            }
            ck_assert_int_eq(one.n_masked_left[0], 0);
            dllm_rollout_free(&both);
            dllm_rollout_free(&one);
            dllm_rollout_free(&again);
        }
    /* bad settings are input errors naming the flag */
    dllm_sampler_cfg c = scfg(m, G, S, 0);
    dllm_dream_cfg d = dllm_dream_cfg_default();
    d.eps = 1.5;
    dllm_rollout r;
    ck_assert_int_eq(dllm_dream_sample(tf_logits, m, pr, NULL, 1, P, &c, &d, 1, &r, &err), DLLM_EXIT_INPUT);
    ck_assert_ptr_nonnull(strstr(err.msg, "--eps"));
    dllm_dream_alg a;
    ck_assert_int_eq(dllm_dream_alg_parse("greedy", &a), -1);
    dllm_tf_free(m);
}
END_TEST

/* A stand-in model for the draw statistics: V = 4 (mask id 3); canvas
 * position t's logits are (a_t, 0, 0, 0), so x0 = 0 and maskgit_plus's
 * confidence p(x0) = e^a_t / (e^a_t + 3) differs by position. */
static const double stat_a[8] = {0.2, 1.4, 0.7, 2.0, 1.1, 0.4, 1.7, 0.9};

static int stat_logits(void *m, const int32_t *tokens, const uint8_t *keymask, int B, int T,
                       const int32_t *rows, int n_rows, float *logits)
{
    (void)m, (void)tokens, (void)keymask, (void)B;
    for (int r = 0; r < n_rows; r++) {
        float *z = logits + (size_t)r * 4;
        z[0] = (float)stat_a[rows[r] % T - 2];
        z[1] = z[2] = z[3] = 0;
    }
    return 0;
}

/* The stochastic choices have the published distributions: alg_temp > 0
 * commits k positions drawn without replacement from softmax(confidence /
 * alg_temp) (torch.multinomial), and origin commits each masked position with
 * probability 1 - s/t. Step 0 of G = 8, steps = 2: s/t = 0.5005 (float32
 * linspace(1, 1e-3, 3)), so k = int(8 * 0.4995) = 3. */
START_TEST(test_draw_distributions)
{
    const int G = 8, N = 6000;
    int32_t pr[2] = {1, 2};
    dllm_sampler_cfg c = {.gen_length = G, .block_length = G, .steps = 2, .temperature = 0,
                          .mask_id = 3, .eos_id = -1, .eot_id = -1, .vocab = 4};
    dllm_dream_cfg d = dllm_dream_cfg_default();
    d.alg = DLLM_DREAM_MASKGIT_PLUS;
    d.alg_temp = 0.5;
    dllm_err err = {0};
    /* exact inclusion probabilities of 3 sequential draws without replacement */
    double w[8], incl[8] = {0}, W = 0;
    for (int i = 0; i < G; i++) {
        const double conf = exp(stat_a[i]) / (exp(stat_a[i]) + 3);
        W += w[i] = exp(conf / d.alg_temp);
    }
    for (int i = 0; i < G; i++)
        for (int j = 0; j < G; j++)
            for (int l = 0; l < G; l++) {
                if (i == j || j == l || i == l)
                    continue;
                double pr3 = w[i] / W * w[j] / (W - w[i]) * w[l] / (W - w[i] - w[j]);
                incl[i] += pr3, incl[j] += pr3, incl[l] += pr3;
            }
    int hits[8] = {0}, origin_hits = 0;
    for (int n = 0; n < N; n++) {
        dllm_rollout r;
        d.alg = DLLM_DREAM_MASKGIT_PLUS;
        ck_assert_int_eq(
            dllm_dream_sample(stat_logits, NULL, pr, NULL, 1, 2, &c, &d, (uint64_t)n, &r, &err), 0);
        int k = 0;
        for (int t = 0; t < G; t++)
            if (r.commit_step[t] == 0)
                hits[t]++, k++;
        ck_assert_int_eq(k, 3);
        dllm_rollout_free(&r);
        d.alg = DLLM_DREAM_ORIGIN;
        ck_assert_int_eq(
            dllm_dream_sample(stat_logits, NULL, pr, NULL, 1, 2, &c, &d, (uint64_t)n, &r, &err), 0);
        for (int t = 0; t < G; t++)
            origin_hits += r.commit_step[t] == 0;
        dllm_rollout_free(&r);
    }
    for (int t = 0; t < G; t++) {
        const double f = (double)hits[t] / N, sd = sqrt(incl[t] * (1 - incl[t]) / N);
        ck_assert_msg(fabs(f - incl[t]) < 4.5 * sd, "alg_temp: position %d committed at step 0 "
                      "in %.4f of runs, multinomial without replacement %.4f", t, f, incl[t]);
    }
    const double f = (double)origin_hits / (N * G), p = 1 - 0.5005f / 1.0f;
    ck_assert_msg(fabs(f - p) < 4.5 * sqrt(p * (1 - p) / (N * G)), "origin: %.4f vs %.4f", f, p);
}
END_TEST

/* ---- RL on Dream ---------------------------------------------------------------------------- */

/* The policy samples a Dream model with Dream's sampler, and the trajectory
 * estimator replays its canvases: at temperature 1 with the rollout copy =
 * the trainer, sum_t log commit_prob[t] is the trajectory log-likelihood. */
START_TEST(test_policy_trajectory)
{
    char *dir = tu_data_path("dream/tiny");
    dllm_policy_cfg pc = {.path = dir, .trainer = "fp32", .rollout = "trainer", .seed = 1};
    dllm_policy *p;
    dllm_err err = {0};
    ck_assert_msg(dllm_policy_open(&p, &pc, &err) == 0, "%s", err.msg);
    ck_assert(dllm_policy_is_diffusion(p));
    ck_assert_int_eq(dllm_policy_arch(p), DLLM_ARCH_DREAM);
    const int P = 4, G = 10, S = 5, B = 3;
    int32_t pr[12] = {0, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
    uint8_t pm[12] = {0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    dllm_tf *m = dllm_policy_model(p);
    dllm_sampler_cfg c = scfg(m, G, S, 1.0);
    c.mask_token = DLLM_MASK_TOKEN_FORBID;
    dllm_dream_cfg d = dllm_dream_cfg_default();
    d.alg = DLLM_DREAM_ENTROPY;
    dllm_policy_set_dream(p, &d);
    dllm_rollout r, direct;
    ck_assert_msg(dllm_policy_rollout(p, pr, pm, B, P, &c, 1.0, 4, &r, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(dllm_dream_sample(tf_logits, m, pr, pm, B, P, &c, &d, 4, &direct, &err), 0);
    for (int i = 0; i < B * (P + G); i++)
        ck_assert_int_eq(r.tokens[i], direct.tokens[i]);
    /* evaluation at the trainer's numerics samples with Dream's sampler too (it once ran
     * LLaDA's denoising sampler on every diffusion model) */
    dllm_rollout ev;
    ck_assert_msg(dllm_policy_sample_trainer(p, pr, pm, B, P, &c, 1.0, 4, &ev, &err) == 0, "%s",
                  err.msg);
    for (int i = 0; i < B * (P + G); i++)
        ck_assert_int_eq(ev.tokens[i], direct.tokens[i]);
    dllm_rollout_free(&ev);

    int32_t *gen = dllm_malloc(sizeof *gen * (size_t)B * G);
    int L[3];
    for (int b = 0; b < B; b++) {
        memcpy(gen + b * G, r.tokens + (size_t)b * (P + G) + P, sizeof *gen * G);
        L[b] = dllm_completion_length(gen + b * G, G, c.eos_id);
    }
    dllm_lik_cfg lc = {.kind = EST_TRAJECTORY, .mc = 1, .shrink = 1, .temperature = 1.0,
                       .mask_id = c.mask_id, .vocab = c.vocab};
    dllm_lik_plan plan;
    ck_assert_msg(dllm_lik_plan_build(&plan, &lc, pr, pm, gen, L, r.commit_step, B, P, G, 1, 0, 0,
                                      &err) == 0, "%s", err.msg);
    void *ctx;
    dllm_logits_fn fn = dllm_policy_logits(p, DLLM_PREC_TRAIN_NOGRAD, &ctx);
    double lp[3];
    ck_assert_msg(dllm_lik_plan_eval(&plan, fn, ctx, 8, lp, NULL, NULL, NULL, &err) == 0, "%s",
                  err.msg);
    for (int b = 0; b < B; b++) {
        double want = 0;
        for (int t = 0; t < L[b]; t++)
            want += log(r.commit_prob[b * G + t]);
        ck_assert_msg(isfinite(lp[b]) && fabs(lp[b] - want) < 1e-4 * (1 + fabs(want)),
                      "sequence %d: trajectory %.6f, sampler %.6f", b, lp[b], want);
    }
    dllm_lik_plan_free(&plan);
    free(gen);
    dllm_rollout_free(&r);
    dllm_rollout_free(&direct);
    dllm_policy_free(p);
    free(dir);
}
END_TEST

/* The Dream configs parse; rollout.dream.* keys are read and checked. */
START_TEST(test_recipes)
{
    const char *names[2] = {"quickstart-dream.yaml", "dream-7b-gsm8k-d1.yaml"};
    const char *algs[2] = {"maskgit_plus", "entropy"};
    dllm_err err = {0};
    for (int i = 0; i < 2; i++) {
        char rel[128];
        snprintf(rel, sizeof rel, "../../configs/%s", names[i]);
        char *path = tu_data_path(rel);
        dllm_cfg cfg;
        dllm_cfg_defaults(&cfg);
        ck_assert_msg(dllm_cfg_load(&cfg, path, &err) == 0, "%s", err.msg);
        ck_assert_str_eq(cfg_names_name(&cfg_names_dream_alg, cfg.rollout.dream.alg), algs[i]);
        ck_assert(fabs(cfg.rollout.dream.eps - 1e-3) < 1e-12);
        ck_assert_int_eq(cfg.rollout.block_length, cfg.rollout.gen_length);
        ck_assert_int_eq(dllm_cfg_set(&cfg, "rollout.dream.alg=greedy", &err), DLLM_EXIT_INPUT);
        ck_assert_ptr_nonnull(strstr(err.msg, "rollout.dream.alg"));
        ck_assert_int_eq(dllm_cfg_set(&cfg, "rollout.dream.eps=2", &err), DLLM_EXIT_INPUT);
        ck_assert_int_eq(dllm_cfg_set(&cfg, "model.arch=dream", &err), 0);
        free(path);
    }
}
END_TEST

/* generation.json records Dream's sampler settings ("dream": alg, eps,
 * alg_temp, top_k; top_p top-level) for Dream models only, and reads them back. */
START_TEST(test_gen_settings)
{
    dllm_cfg cfg;
    dllm_cfg_defaults(&cfg);
    dllm_err err = {0};
    const char *sets[] = {"rollout.dream.alg=entropy", "rollout.dream.eps=0.01",
                          "rollout.dream.alg_temp=0.5", "rollout.dream.top_k=7", "rollout.top_p=0.9"};
    for (size_t i = 0; i < sizeof sets / sizeof *sets; i++)
        ck_assert_msg(dllm_cfg_set(&cfg, sets[i], &err) == 0, "%s", err.msg);
    char *tmp = tu_make_tmpdir();
    ckpt_generation w, r;
    ckpt_generation_from_cfg(&w, &cfg, true, "qwen2.5");
    ck_assert(!w.dream);
    ckpt_generation_set_dream(&w, &cfg);
    ck_assert_int_eq(ckpt_write_generation(tmp, &w, &err), 0);
    ckpt_generation_default(&r, true, 4);
    ck_assert_msg(ckpt_read_generation(tmp, &r, &err) == 0, "%s", err.msg);
    ck_assert(r.dream);
    ck_assert_int_eq(r.dcfg.alg, DLLM_DREAM_ENTROPY);
    ck_assert(r.dcfg.eps == 0.01 && r.dcfg.alg_temp == 0.5 && r.dcfg.top_k == 7);
    ck_assert(r.top_p == 0.9 && r.dcfg.top_p == 0.9);
    ck_assert_int_eq(r.gen_length, cfg.eval.gen_length);
    ck_assert_str_eq(r.chat, "qwen2.5");

    /* a model of another architecture: no "dream" object, none read */
    char path[512];
    snprintf(path, sizeof path, "%s/generation.json", tmp);
    ckpt_generation_from_cfg(&w, &cfg, true, "plain");
    ck_assert_int_eq(ckpt_write_generation(tmp, &w, &err), 0);
    json_error_t je;
    json_t *o = json_load_file(path, 0, &je);
    ck_assert_ptr_nonnull(o);
    ck_assert_ptr_null(json_object_get(o, "dream"));
    json_decref(o);
    ckpt_generation_default(&r, true, 4);
    ck_assert_int_eq(ckpt_read_generation(tmp, &r, &err), 0);
    ck_assert(!r.dream);

    /* bad values: input errors naming the file and key */
    const char *bad[][2] = {{"{\"dream\": {\"alg\": \"greedy\"}}", "dream.alg"},
                            {"{\"dream\": {\"eps\": 1.5}}", "dream.eps"},
                            {"{\"dream\": {\"alg_temp\": -1}}", "dream.alg_temp"},
                            {"{\"dream\": {\"top_k\": 2.5}}", "dream.top_k"},
                            {"{\"dream\": 3}", "'dream'"}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        FILE *f = fopen(path, "w");
        ck_assert_ptr_nonnull(f);
        fputs(bad[i][0], f);
        fclose(f);
        ckpt_generation_default(&r, true, 4);
        ck_assert_int_eq(ckpt_read_generation(tmp, &r, &err), DLLM_EXIT_INPUT);
        ck_assert_msg(strstr(err.msg, bad[i][1]) && strstr(err.msg, "generation.json"), "%s", err.msg);
    }
    tu_rm_rf(tmp);
    free(tmp);
}
END_TEST

/* `train` on configs/quickstart-dream.yaml, 2 steps at a tiny size, from a
 * random tiny Dream model: FP8 rollouts, AIS, finite logged values. */
START_TEST(test_train_quickstart)
{
    const char *bin = getenv("DLLM_BIN"), *data = getenv("DLLM_TEST_DATA");
    if (!bin || !data) {
        fprintf(stderr, "test_train_quickstart: DLLM_BIN / DLLM_TEST_DATA not set\n");
        return;
    }
    char *tmp = tu_make_tmpdir();
    ck_assert_int_eq(tu_sh("%s init-model --arch dream --preset tiny --seed 3 --out %s/model > /dev/null",
                        bin, tmp), 0);
    ck_assert_int_eq(tu_sh("%s train %s/../../configs/quickstart-dream.yaml --quiet --set log.dir=%s/runs"
                        " --set model.path=%s/model --set grpo.steps=2 --set grpo.prompts_per_step=2"
                        " --set rollout.group_size=2 --set eval.every=0 --set checkpoint.every=0"
                        " --set task.train.n=16",
                        bin, data, tmp, tmp), 0);
    ck_assert_int_eq(tu_sh("%s inspect %s/runs/quickstart-dream --csv > %s/steps.csv", bin, tmp, tmp), 0);
    char path[512];
    snprintf(path, sizeof path, "%s/steps.csv", tmp);
    FILE *f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    char line[65536];
    int rows = 0;
    ck_assert_ptr_nonnull(fgets(line, sizeof line, f)); /* header */
    ck_assert_ptr_nonnull(strstr(line, "alpha"));
    while (fgets(line, sizeof line, f)) {
        rows++;
        ck_assert_msg(!strstr(line, "nan") && !strstr(line, "inf"), "non-finite value: %s", line);
    }
    fclose(f);
    ck_assert_int_eq(rows, 2);
    /* the final checkpoint records the Dream sampler the run trained with */
    char ck[512];
    snprintf(ck, sizeof ck, "%s/runs/quickstart-dream/ckpt/latest", tmp);
    ckpt_generation g;
    ckpt_generation_default(&g, true, 1);
    dllm_err err = {0};
    ck_assert_msg(ckpt_read_generation(ck, &g, &err) == 0, "%s", err.msg);
    ck_assert(g.dream);
    ck_assert_int_eq(g.dcfg.alg, DLLM_DREAM_MASKGIT_PLUS);
    ck_assert(fabs(g.dcfg.eps - 1e-3) < 1e-12);
    tu_rm_rf(tmp);
    free(tmp);
}
END_TEST

Suite *tu_suite(tu_ctx *ctx)
{
    (void)ctx;
    Suite *s = suite_create("dream");
    TCase *tm = tcase_create("model");
    tcase_add_test(tm, test_config);
    tcase_add_test(tm, test_logits);
    tcase_add_test(tm, test_logp);
    tcase_add_test(tm, test_chat);
    tcase_add_test(tm, test_backward_fd);
    suite_add_tcase(s, tm);
    TCase *ts = tcase_create("sampler");
    tcase_add_test(ts, test_greedy_goldens);
    tcase_add_test(ts, test_schedule_counts);
    tcase_add_test(ts, test_token_dist);
    tcase_add_test(ts, test_sampling_keyed);
    tcase_add_test(ts, test_draw_distributions);
    suite_add_tcase(s, ts);
    TCase *tr = tcase_create("rl");
    tcase_set_timeout(tr, 120);
    tcase_add_test(tr, test_policy_trajectory);
    tcase_add_test(tr, test_recipes);
    tcase_add_test(tr, test_gen_settings);
    tcase_add_test(tr, test_train_quickstart);
    suite_add_tcase(s, tr);
    return s;
}
