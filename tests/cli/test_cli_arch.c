/* test_cli_arch.c: the commands on both architectures, run as a user runs them
 * (the dllm-rl binary, DLLM_BIN), on tiny random models made by `init-model`
 * and on the Qwen3 golden models of tests/data/qwen3/ (computed by HF
 * transformers' Qwen3ForCausalLM, tests/ref/make_qwen3_goldens.py).
 *
 *   score      both architectures; Qwen3 per-token log-probs against the
 *              golden ones and against a full forward (no KV cache) computed
 *              here through the policy interface; --precision nvfp4 under every
 *              --nvfp4-scaling (block16 the default's bit for bit, tensor another);
 *   generate   Qwen3 greedy ids against transformers' generate() and against
 *              argmax decoding by full forwards here; sampling (seeded,
 *              top-p), its probabilities against `score`; text prompts;
 *   bench      train, rollout and mismatch on a Qwen3 preset and model;
 *   bad flags  exit 2 with a message naming the flag;
 *   sft        the loss through the policy against an independent computation
 *              and its gradient against finite differences;
 *   a Qwen3 run: sft, 2 GRPO steps with LoRA, inspect, export (adapter and
 *              merged), the merged model against base + adapter. */
#include "tests/harness/harness.h"
#include "dllm/policy.h"
#include "dllm/policy_infer.h"
#include "dllm/policy_sft.h"
#include "dllm/safetensors.h"

#include <check.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static char m_llada[128], m_qwen[128];

static json_t *parse_json(const char *s)
{
    json_error_t je;
    json_t *j = json_loads(s, 0, &je);
    ck_assert_msg(j != NULL, "not JSON (%s): %s", je.text, s);
    return j;
}

/* Comma-separated ids of a line into ids (at most cap); the count. */
static int parse_ids(const char *s, int32_t *ids, int cap)
{
    int n = 0;
    while (*s && *s != '\n') {
        char *end;
        long v = strtol(s, &end, 10);
        ck_assert_msg(end != s, "not an id list: %s", s);
        ck_assert_int_lt(n, cap);
        ids[n++] = (int32_t)v;
        s = *end == ',' ? end + 1 : end;
    }
    return n;
}

static void join_ids(char *buf, size_t cap, const int32_t *ids, int n)
{
    size_t k = 0;
    buf[0] = 0;
    for (int i = 0; i < n; i++)
        k += (size_t)snprintf(buf + k, cap - k, "%s%d", i ? "," : "", ids[i]);
}

static dllm_policy *open_policy(const char *dir)
{
    dllm_policy_cfg pc = {.path = dir};
    dllm_err err = {0};
    ck_assert_int_eq(dllm_policy_infer_cfg(&pc, "fp32", "precision", &err), 0);
    dllm_policy *p;
    ck_assert_msg(dllm_policy_open(&p, &pc, &err) == 0, "%s", err.msg);
    return p;
}

/* log softmax(z / temp)[x] in double */
static double log_softmax_at(const float *z, int V, double temp, int x)
{
    double mx = -INFINITY, s = 0;
    for (int v = 0; v < V; v++)
        mx = fmax(mx, z[v] / temp);
    for (int v = 0; v < V; v++)
        s += exp(z[v] / temp - mx);
    return z[x] / temp - mx - log(s);
}

/* Exact AR log-probs by one full forward of prompt+completion (no KV cache). */
static void full_forward_logp(dllm_policy *p, const int32_t *prompt, int P, const int32_t *comp,
                              int L, double temp, double *out)
{
    const int V = dllm_policy_config(p)->embedding_size, T = P + L;
    int32_t *tok = malloc(sizeof *tok * (size_t)T), *rows = malloc(sizeof *rows * (size_t)L);
    memcpy(tok, prompt, sizeof *tok * (size_t)P);
    memcpy(tok + P, comp, sizeof *tok * (size_t)L);
    for (int i = 0; i < L; i++)
        rows[i] = P + i - 1;
    float *z = malloc(sizeof *z * (size_t)L * V);
    void *ctx;
    dllm_logits_fn fn = dllm_policy_logits(p, DLLM_PREC_TRAIN_NOGRAD, &ctx);
    ck_assert_int_eq(fn(ctx, tok, NULL, 1, T, rows, L, z), 0);
    for (int i = 0; i < L; i++)
        out[i] = log_softmax_at(z + (size_t)i * V, V, temp, comp[i]);
    free(tok);
    free(rows);
    free(z);
}

/* Greedy decoding by full forwards of the growing sequence (argmax, ties to the
 * lowest id), EOS-padded after the first EOS; the smallest top-1 minus top-2
 * logit along the path into *margin. */
static void greedy_full(dllm_policy *p, const int32_t *prompt, int P, int G, int32_t *out,
                        double *margin)
{
    const dllm_model_config *mc = dllm_policy_config(p);
    const int V = mc->embedding_size;
    int32_t *tok = malloc(sizeof *tok * (size_t)(P + G));
    memcpy(tok, prompt, sizeof *tok * (size_t)P);
    float *z = malloc(sizeof *z * (size_t)V);
    void *ctx;
    dllm_logits_fn fn = dllm_policy_logits(p, DLLM_PREC_TRAIN_NOGRAD, &ctx);
    bool done = false;
    *margin = INFINITY;
    for (int g = 0; g < G; g++) {
        if (done) {
            out[g] = mc->eos_token_id;
            continue;
        }
        int T = P + g, row = T - 1;
        ck_assert_int_eq(fn(ctx, tok, NULL, 1, T, &row, 1, z), 0);
        int best = 0;
        for (int v = 1; v < V; v++)
            if (z[v] > z[best])
                best = v;
        double second = -INFINITY;
        for (int v = 0; v < V; v++)
            if (v != best)
                second = fmax(second, z[v]);
        *margin = fmin(*margin, z[best] - second);
        out[g] = tok[T] = best;
        done = best == mc->eos_token_id;
    }
    free(tok);
    free(z);
}

/* ---- score -------------------------------------------------------------------------- */

START_TEST(test_score_both)
{
    const char *models[2] = {m_llada, m_qwen}, *est[2] = {"one_step", "exact"};
    for (int k = 0; k < 2; k++) {
        char *out;
        ck_assert_int_eq(tu_dllm_take(&out, NULL, "score --model %s --prompt-ids 1,10,11,12 "
                                         "--completion-ids 20,21,22,0", models[k]), 0);
        json_t *j = parse_json(out);
        ck_assert_str_eq(json_string_value(json_object_get(j, "estimator")), est[k]);
        json_t *tl = json_object_get(j, "token_logp");
        ck_assert_int_eq(json_array_size(tl), 4);
        double sum = 0;
        for (size_t i = 0; i < 4; i++) {
            double v = json_number_value(json_array_get(tl, i));
            ck_assert_msg(isfinite(v) && v < 0, "%s token %zu: %g", models[k], i, v);
            sum += v;
        }
        double seq = json_number_value(json_object_get(j, "seq_logp"));
        ck_assert_msg(fabs(seq - sum) < 1e-6, "%s: seq %.9g vs sum %.9g", models[k], seq, sum);
        json_decref(j);
        free(out);
    }
}
END_TEST

/* score --precision nvfp4 runs under every --nvfp4-scaling on both architectures:
 * finite log-probs, block16 the default's bit for bit (printed to 17 digits), tensor
 * scaling a different copy */
START_TEST(test_score_nvfp4_scalings)
{
    const char *models[2] = {m_llada, m_qwen};
    const char *sc[5] = {NULL, "block16", "block32", "channel", "tensor"};
    for (int k = 0; k < 2; k++) {
        double seq[5];
        for (int s = 0; s < 5; s++) {
            char *out, flag[64] = "";
            if (sc[s])
                snprintf(flag, sizeof flag, "--nvfp4-scaling %s", sc[s]);
            ck_assert_int_eq(tu_dllm_take(&out, NULL, "score --model %s --prompt-ids 1,10,11,12 "
                                             "--completion-ids 20,21,22,0 --precision nvfp4 %s",
                                             models[k], flag), 0);
            json_t *j = parse_json(out);
            seq[s] = json_number_value(json_object_get(j, "seq_logp"));
            ck_assert_msg(isfinite(seq[s]) && seq[s] < 0, "%s %s: %g", models[k], flag, seq[s]);
            json_decref(j);
            free(out);
        }
        ck_assert_msg(seq[1] == seq[0], "%s: block16 %.17g, default %.17g", models[k], seq[1], seq[0]);
        ck_assert_msg(seq[4] != seq[1], "%s: tensor scaling scores as block16", models[k]);
    }
}
END_TEST

static const char *qwen_variants[2] = {"tied", "untied"};

static int32_t *gold_i32(const st_archive *a, const char *name, int64_t *n)
{
    const st_tensor *t = st_find(a, name);
    ck_assert_msg(t && t->dtype == ST_I32, "golden tensor %s", name);
    *n = t->numel;
    int32_t *o = malloc(sizeof *o * (size_t)t->numel);
    memcpy(o, t->data, sizeof *o * (size_t)t->numel);
    return o;
}

static st_archive *open_golden(void)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/qwen3/golden.safetensors", getenv("DLLM_TEST_DATA"));
    st_archive *a;
    dllm_err err = {0};
    ck_assert_msg(st_open(&a, path, &err) == 0, "%s", err.msg);
    return a;
}

/* score's exact log-probs equal transformers' (golden) at the golden temperature */
START_TEST(test_score_qwen3_golden)
{
    const char *v = qwen_variants[_i];
    st_archive *a = open_golden();
    int64_t P, L;
    int32_t *prompt = gold_i32(a, "lp_prompt", &P), *comp = gold_i32(a, "lp_completion", &L);
    const st_tensor *tt = st_find(a, "lp_temperature");
    char name[64];
    snprintf(name, sizeof name, "%s.token_logp", v);
    const st_tensor *tw = st_find(a, name);
    ck_assert(tt && tw && tt->dtype == ST_F32 && tw->dtype == ST_F64 && tw->numel == L);
    const double temp = ((const float *)tt->data)[0], *want = tw->data;
    char ps[512], cs[512], *out;
    join_ids(ps, sizeof ps, prompt, (int)P);
    join_ids(cs, sizeof cs, comp, (int)L);
    ck_assert_int_eq(tu_dllm_take(&out, NULL, "score --model %s/qwen3/%s --prompt-ids %s --completion-ids %s "
                                     "--temperature %.9g", getenv("DLLM_TEST_DATA"), v, ps, cs, temp),
                     0);
    json_t *j = parse_json(out);
    json_t *tl = json_object_get(j, "token_logp");
    ck_assert_int_eq(json_array_size(tl), L);
    double sum = 0;
    for (int i = 0; i < L; i++) {
        double got = json_number_value(json_array_get(tl, (size_t)i));
        ck_assert_msg(fabs(got - want[i]) < 1e-4, "%s token %d: %.7f, transformers %.7f", v, i,
                      got, want[i]);
        sum += want[i];
    }
    ck_assert(fabs(json_number_value(json_object_get(j, "seq_logp")) - sum) < 3e-4);
    json_decref(j);
    free(out);
    free(prompt);
    free(comp);
    st_close(a);
}
END_TEST

/* score's exact log-probs equal log-softmax of one full forward, on a tiny model */
START_TEST(test_score_qwen3_full_forward)
{
    const int32_t prompt[5] = {1, 40, 41, 42, 6}, comp[7] = {50, 51, 52, 9, 60, 70, 0};
    char *out;
    ck_assert_int_eq(tu_dllm_take(&out, NULL, "score --model %s --prompt-ids 1,40,41,42,6 "
                                     "--completion-ids 50,51,52,9,60,70,0 --temperature 0.7", m_qwen),
                     0);
    json_t *j = parse_json(out);
    dllm_policy *p = open_policy(m_qwen);
    double want[7];
    full_forward_logp(p, prompt, 5, comp, 7, 0.7, want);
    for (int i = 0; i < 7; i++) {
        double got = json_number_value(json_array_get(json_object_get(j, "token_logp"), (size_t)i));
        ck_assert_msg(fabs(got - want[i]) < 2e-5, "token %d: score %.8f, full forward %.8f", i, got,
                      want[i]);
    }
    dllm_policy_free(p);
    json_decref(j);
    free(out);
}
END_TEST

/* ---- generate ----------------------------------------------------------------------- */

/* greedy ids equal transformers' generate(), one prompt at a time and as a
 * left-padded batch */
START_TEST(test_generate_qwen3_golden)
{
    const char *v = qwen_variants[_i];
    st_archive *a = open_golden();
    const st_tensor *tp = st_find(a, "gen_prompts");
    ck_assert(tp && tp->ndim == 2);
    const int GB = (int)tp->shape[0], GP = (int)tp->shape[1];
    int64_t n;
    int32_t *prompts = gold_i32(a, "gen_prompts", &n), *mask = gold_i32(a, "gen_mask", &n);
    char name[64];
    snprintf(name, sizeof name, "%s.gen_ids", v);
    int32_t *want = gold_i32(a, name, &n);
    const int GN = (int)(n / GB);
    char batch[256];
    snprintf(batch, sizeof batch, "%s/batch.jsonl", tu_dir);
    FILE *bf = fopen(batch, "w");
    ck_assert_ptr_nonnull(bf);
    for (int b = 0; b < GB; b++) {
        int32_t pr[64];
        int P = 0;
        for (int t = 0; t < GP; t++)
            if (mask[b * GP + t])
                pr[P++] = prompts[b * GP + t];
        char ps[512], *out;
        join_ids(ps, sizeof ps, pr, P);
        fprintf(bf, "{\"prompt_ids\": [%s]}\n", ps);
        ck_assert_int_eq(tu_dllm_take(&out, NULL, "generate --model %s/qwen3/%s --prompt-ids %s "
                                         "--gen-length %d --temperature 0 --format ids",
                             getenv("DLLM_TEST_DATA"), v, ps, GN), 0);
        int32_t got[64];
        ck_assert_int_eq(parse_ids(out, got, 64), GN);
        for (int g = 0; g < GN; g++)
            ck_assert_msg(got[g] == want[b * GN + g], "%s row %d token %d: %d, generate() %d", v, b,
                          g, got[g], want[b * GN + g]);
        free(out);
    }
    fclose(bf);
    char *out;
    ck_assert_int_eq(tu_dllm_take(&out, NULL, "generate --model %s/qwen3/%s --batch-file %s --gen-length %d "
                                     "--format ids", getenv("DLLM_TEST_DATA"), v, batch, GN), 0);
    char *line = out;
    for (int b = 0; b < GB; b++) {
        int32_t got[64];
        ck_assert_int_eq(parse_ids(line, got, 64), GN);
        for (int g = 0; g < GN; g++)
            ck_assert_msg(got[g] == want[b * GN + g], "%s batch row %d token %d: %d, generate() %d",
                          v, b, g, got[g], want[b * GN + g]);
        line = strchr(line, '\n');
        ck_assert_ptr_nonnull(line);
        line++;
    }
    free(out);
    free(prompts);
    free(mask);
    free(want);
    st_close(a);
}
END_TEST

/* greedy ids (KV cache) equal argmax decoding by full forwards, on a tiny model,
 * one prompt and a left-padded batch of two */
START_TEST(test_generate_qwen3_full_forward)
{
    enum { G = 12 };
    const int32_t p0[6] = {1, 44, 45, 46, 47, 6}, p1[3] = {1, 80, 81};
    dllm_policy *p = open_policy(m_qwen);
    int32_t want0[G], want1[G];
    double margin0, margin1;
    greedy_full(p, p0, 6, G, want0, &margin0);
    greedy_full(p, p1, 3, G, want1, &margin1);
    /* the comparison means something only away from near-ties */
    ck_assert_msg(margin0 > 1e-4 && margin1 > 1e-4, "near-tie on the greedy path (%g, %g)", margin0,
                  margin1);
    char *out;
    int32_t got[64];
    ck_assert_int_eq(tu_dllm_take(&out, NULL, "generate --model %s --prompt-ids 1,44,45,46,47,6 "
                                     "--gen-length %d --format ids", m_qwen, G), 0);
    ck_assert_int_eq(parse_ids(out, got, 64), G);
    for (int g = 0; g < G; g++)
        ck_assert_msg(got[g] == want0[g], "token %d: generate %d, full forwards %d", g, got[g],
                      want0[g]);
    free(out);
    char batch[256];
    snprintf(batch, sizeof batch, "%s/batch2.jsonl", tu_dir);
    FILE *bf = fopen(batch, "w");
    fprintf(bf, "{\"prompt_ids\": [1, 44, 45, 46, 47, 6]}\n{\"prompt_ids\": [1, 80, 81]}\n");
    fclose(bf);
    ck_assert_int_eq(tu_dllm_take(&out, NULL, "generate --model %s --batch-file %s --gen-length %d "
                                     "--format ids", m_qwen, batch, G), 0);
    char *second = strchr(out, '\n');
    ck_assert_ptr_nonnull(second);
    ck_assert_int_eq(parse_ids(second + 1, got, 64), G);
    for (int g = 0; g < G; g++)
        ck_assert_msg(got[g] == want1[g], "padded row token %d: generate %d, full forwards %d", g,
                      got[g], want1[g]);
    free(out);
    dllm_policy_free(p);
}
END_TEST

/* sampling: seeded; a vanishing nucleus is greedy; the reported probability of
 * each sampled token is exp of score's log-prob at the same temperature */
START_TEST(test_generate_qwen3_sampling)
{
    const char *args = "--prompt-ids 1,30,31,32 --gen-length 16 --format ids";
    char *greedy, *s1, *s1b, *s2, *nucleus;
    ck_assert_int_eq(tu_dllm_take(&greedy, NULL, "generate --model %s %s", m_qwen, args), 0);
    ck_assert_int_eq(tu_dllm_take(&s1, NULL, "generate --model %s %s --temperature 1 --seed 5", m_qwen, args), 0);
    ck_assert_int_eq(tu_dllm_take(&s1b, NULL, "generate --model %s %s --temperature 1 --seed 5", m_qwen, args), 0);
    ck_assert_int_eq(tu_dllm_take(&s2, NULL, "generate --model %s %s --temperature 1 --seed 6", m_qwen, args), 0);
    ck_assert_int_eq(tu_dllm_take(&nucleus, NULL, "generate --model %s %s --temperature 1 --top-p 1e-9 --seed 5",
                         m_qwen, args), 0);
    ck_assert_str_eq(s1, s1b);
    ck_assert_str_ne(s1, s2);
    ck_assert_str_ne(s1, greedy);
    ck_assert_str_eq(nucleus, greedy);
    free(greedy);
    free(s1);
    free(s1b);
    free(s2);
    free(nucleus);

    char *out;
    ck_assert_int_eq(tu_dllm_take(&out, NULL, "generate --model %s --prompt-ids 1,30,31,32 --gen-length 16 "
                                     "--temperature 0.8 --seed 9 --format json", m_qwen), 0);
    json_t *j = parse_json(out);
    json_t *ids = json_object_get(j, "ids"), *cp = json_object_get(j, "commit_prob"),
           *cs = json_object_get(j, "commit_step");
    int len = (int)json_integer_value(json_object_get(j, "completion_length"));
    ck_assert(json_array_size(ids) == 16 && json_array_size(cp) == 16 && len >= 1 && len <= 16);
    ck_assert(json_is_string(json_object_get(j, "text")));
    int32_t comp[16];
    for (int i = 0; i < 16; i++) {
        comp[i] = (int32_t)json_integer_value(json_array_get(ids, (size_t)i));
        ck_assert_int_eq(json_integer_value(json_array_get(cs, (size_t)i)), i);
    }
    char cstr[256], *sc;
    join_ids(cstr, sizeof cstr, comp, len);
    ck_assert_int_eq(tu_dllm_take(&sc, NULL, "score --model %s --prompt-ids 1,30,31,32 --completion-ids %s "
                                    "--temperature 0.8", m_qwen, cstr), 0);
    json_t *js = parse_json(sc);
    for (int i = 0; i < len; i++) {
        double prob = json_number_value(json_array_get(cp, (size_t)i));
        double lp = json_number_value(json_array_get(json_object_get(js, "token_logp"), (size_t)i));
        ck_assert_msg(fabs(prob - exp(lp)) < 1e-5 * fmax(prob, 1e-3),
                      "token %d: sampled with p %.8g, score exp(logp) %.8g", i, prob, exp(lp));
    }
    json_decref(js);
    json_decref(j);
    free(sc);
    free(out);
}
END_TEST

/* a text prompt on a char-tokenizer model is BOS + its characters (chat auto =
 * plain), for both architectures; denoising output has gen-length ids */
START_TEST(test_generate_text_prompt)
{
    const char *models[2] = {m_llada, m_qwen};
    for (int k = 0; k < 2; k++) {
        const char *sched = k == 0 ? "--block-length 8 --steps 8" : "";
        char *ids, *a, *b;
        ck_assert_int_eq(tu_sh("printf 'ab1' | %s tokenize --tokenizer %s/tokenizer.json > %s/ids.txt",
                            tu_bin(), models[k], tu_dir), 0);
        char path[256];
        snprintf(path, sizeof path, "%s/ids.txt", tu_dir);
        FILE *f = fopen(path, "r");
        char line[256] = "";
        ck_assert_ptr_nonnull(fgets(line, sizeof line, f));
        fclose(f);
        line[strcspn(line, "\n")] = 0;
        for (char *c = line; *c; c++)
            if (*c == ' ')
                *c = ',';
        ck_assert_int_eq(tu_dllm_take(&a, NULL, "generate --model %s --prompt ab1 --gen-length 16 %s "
                                       "--format ids", models[k], sched), 0);
        ck_assert_int_eq(tu_dllm_take(&b, NULL, "generate --model %s --prompt-ids 1,%s --gen-length 16 %s "
                                       "--format ids", models[k], line, sched), 0);
        ck_assert_str_eq(a, b);
        int32_t got[64];
        ck_assert_int_eq(parse_ids(a, got, 64), 16);
        for (int i = 0; i < 16; i++)
            ck_assert(got[i] >= 0 && got[i] < 128);
        ck_assert_int_eq(tu_dllm_take(&ids, NULL, "generate --model %s --prompt ab1 --gen-length 16 %s "
                                         "--format text", models[k], sched), 0);
        free(ids);
        free(a);
        free(b);
    }
}
END_TEST

/* ---- bench ----------------------------------------------------------------------- */

/* The number printed just before the first `unit` in out (e.g. "47.7 tokens/s"); the
 * test fails unless it is there, finite and above 0. */
static double positive_before(const char *out, const char *unit)
{
    const char *u = strstr(out, unit);
    ck_assert_msg(u != NULL, "no '%s' in: %s", unit, out);
    const char *b = u;
    while (b > out && b[-1] != ' ' && b[-1] != '\n' && b[-1] != '(')
        b--;
    char *end;
    double v = strtod(b, &end);
    ck_assert_msg(end == u && isfinite(v) && v > 0, "'%.*s': not a finite positive number in: %s",
                  (int)(u - b + strlen(unit)), b, out);
    return v;
}

/* The row of `bench rollout`'s table starting with name: every column a finite number,
 * rollout_s, token_ms and tokens/s above 0 (the columns: precision sync_s rollout_s
 * token_ms tokens/s vs_first). */
static void rollout_row_finite(const char *out, const char *name)
{
    char key[32];
    snprintf(key, sizeof key, "\n%s ", name);
    const char *r = strstr(out, key);
    ck_assert_msg(r != NULL, "no row %s in: %s", name, out);
    r += strlen(key);
    double v[5];
    for (int c = 0; c < 5; c++) {
        char *end;
        v[c] = strtod(r, &end);
        ck_assert_msg(end != r && isfinite(v[c]) && v[c] >= 0, "row %s, column %d: %.20s", name,
                      c + 1, r);
        r = end;
    }
    ck_assert_msg(v[1] > 0 && v[2] > 0 && v[3] > 0 && v[4] > 0, "row %s: a zero time or rate: %s",
                  name, out);
}

/* bench train, rollout and mismatch run on a Qwen3 preset and model directory and
 * say what they measured, as finite positive numbers; the LLaDA path still reports
 * its coupled estimate */
START_TEST(test_bench_both)
{
    char *out;
    ck_assert_int_eq(tu_dllm_take(&out, NULL, "bench train --arch qwen3 --preset tiny --batch 1 --seq 16 "
                                     "--iters 1 --warmup 0"), 0);
    ck_assert_msg(strstr(out, "qwen3 tiny") && strstr(out, "next-token SFT"), "%s", out);
    positive_before(out, " s per forward+backward");
    positive_before(out, " tokens/s");
    free(out);
    ck_assert_int_eq(tu_dllm_take(&out, NULL, "bench train --model %s --batch 1 --seq 16 --iters 1 "
                                     "--warmup 0", m_llada), 0);
    ck_assert_msg(strstr(out, "masked-diffusion SFT"), "%s", out);
    positive_before(out, " tokens/s");
    free(out);
    ck_assert_int_eq(tu_dllm_take(&out, NULL, "bench rollout --arch qwen3 --batch 1 --prompt 4 "
                                     "--gen-length 4 --iters 1 --warmup 0 --precision fp32,fp8"), 0);
    ck_assert_msg(strstr(out, "KV-cache decoding") && strstr(out, "token_ms"), "%s", out);
    rollout_row_finite(out, "fp32");
    rollout_row_finite(out, "fp8");
    ck_assert_msg(strstr(out, "\nmachine: cpu ") && strstr(out, "fp32 gemm "),
                  "no machine line: %s", out);
    free(out);
    ck_assert_int_eq(tu_dllm_take(&out, NULL, "bench mismatch --model %s --n 2 --prompt 4 --gen-length 4",
                         m_qwen), 0);
    ck_assert_msg(strstr(out, "exact log-probs") && strstr(out, "mean |log w|") &&
                  !strstr(out, "coupled"), "%s", out);
    ck_assert_msg(!strstr(out, "nan") && !strstr(out, "inf"), "a non-finite number: %s", out);
    free(out);
    ck_assert_int_eq(tu_dllm_take(&out, NULL, "bench mismatch --arch llada --n 2 --prompt 4 --gen-length 4 "
                                     "--block-length 4 --steps 2 --mc 2"), 0);
    ck_assert_msg(strstr(out, "coupled   (same masks)"), "%s", out);
    ck_assert_msg(!strstr(out, "nan") && !strstr(out, "inf"), "a non-finite number: %s", out);
    free(out);
    char *errs;
    ck_assert_int_eq(tu_dllm_take(NULL, &errs, "bench rollout --arch gpt2"), 2);
    ck_assert_msg(strstr(errs, "--arch"), "%s", errs);
    free(errs);
}
END_TEST

/* ---- bad flags ---------------------------------------------------------------------- */

typedef struct {
    const char *fmt; /* %s = the model */
    int qwen;        /* the Qwen3 model (else LLaDA) */
    const char *says;
} bad_case;

static const bad_case bad[] = {
    {"score --model %s --prompt-ids 1,2 --completion-ids 3,4 --estimator elbo", 1, "exact"},
    {"score --model %s --prompt-ids 1,2 --completion-ids 3,4 --estimator trajectory --commit-steps 0,1", 1, "exact"},
    {"score --model %s --prompt-ids 1,2 --completion-ids 3,4 --estimator exact", 0, "exact"},
    {"score --model %s --prompt-ids 1,2 --completion-ids 3,4 --mc 4", 1, "--mc"},
    {"score --model %s --prompt-ids 1,2 --completion-ids 3,4 --p-mask-prompt 0.5", 1, "--p-mask-prompt"},
    {"score --model %s --prompt-ids 1,2 --completion-ids 3,999", 1, "vocabulary"},
    {"score --model %s --prompt-ids 1,2 --completion-ids 3,4 --precision fp9", 1, "--precision"},
    {"score --model %s --prompt-ids 1,2 --completion-ids 3,4 --precision nvfp4 --nvfp4-scaling block", 0, "--nvfp4-scaling block: expected block16, block32, channel or tensor"},
    {"score --model %s --prompt-ids 1,2 --completion-ids 3,4 --precision fp8 --nvfp4-scaling channel", 1, "--nvfp4-scaling channel: applies to --precision nvfp4 only"},
    {"generate --model %s --prompt-ids 1,2 --nvfp4-scaling tensor", 0, "--nvfp4-scaling"},
    {"score --model %s --prompt-ids 1,2 --completion-ids 3,4 --estimator median", 0, "--estimator"},
    {"score --model %s --prompt-ids 1,2 --completion-ids '' ", 1, "completion"},
    {"generate --model %s --prompt-ids 1,2 --steps 4", 1, "--steps"},
    {"generate --model %s --prompt-ids 1,2 --block-length 4", 1, "--block-length"},
    {"generate --model %s --prompt-ids 1,2 --remasking random", 1, "--remasking"},
    {"generate --model %s --prompt-ids 1,2 --top-p 0.5", 0, "--top-p"},
    {"generate --model %s --prompt-ids 1,2 --top-p 0", 1, "--top-p"},
    {"generate --model %s --prompt-ids 1,2 --top-p 1.5", 1, "--top-p"},
    {"generate --model %s --prompt-ids 1,2 --temperature -1", 1, "--temperature"},
    {"generate --model %s --prompt-ids 1,2 --format xml", 1, "--format"},
    {"generate --model %s --prompt-ids 1,2 --chat klingon", 1, "--chat"},
    {"generate --model %s --prompt-ids 1,2 --gen-length 600", 1, "max_sequence_length"},
    {"generate --model %s --prompt-ids 1,500", 1, "vocabulary"},
    {"generate --model %s --prompt-ids 1,2 --precision int4", 0, "--precision"},
    {"generate --model %s --prompt-ids 1,2 --mask-token maybe", 0, "--mask-token"},
    {"generate --model %s --prompt-ids 1,2 --mask-token forbid", 1, "--mask-token"},
    {"generate --model %s/nonexistent --prompt-ids 1,2", 1, "nonexistent"},
};

START_TEST(test_bad_flags)
{
    const bad_case *c = &bad[_i];
    char args[1024], *errs;
    snprintf(args, sizeof args, c->fmt, c->qwen ? m_qwen : m_llada);
    ck_assert_msg(tu_dllm_take(NULL, &errs, "%s", args) == 2, "%s: exit status not 2", args);
    ck_assert_msg(strstr(errs, c->says) != NULL, "%s: message does not name '%s': %s", args,
                  c->says, errs);
    free(errs);
}
END_TEST

/* ---- SFT through the policy --------------------------------------------------------- */

/* the loss equals its definition computed here from the logits, and its
 * gradient matches central differences of the loss */
START_TEST(test_policy_sft_loss)
{
    const char *models[2] = {m_llada, m_qwen};
    enum { B = 2, T = 10 };
    for (int k = 0; k < 2; k++) {
        dllm_policy *p = open_policy(models[k]);
        const dllm_model_config *mc = dllm_policy_config(p);
        const int V = mc->embedding_size;
        int32_t tokens[B * T], plen[B] = {3, 4};
        int len[B] = {9, 10};
        uint8_t masked[B * T] = {0};
        double pm[B] = {0.5, 0.8};
        for (int i = 0; i < B * T; i++)
            tokens[i] = 6 + (i * 7) % 90;
        for (int t = 3; t < T; t++)
            masked[t] = t % 2;
        for (int t = 4; t < T; t++)
            masked[T + t] = t != 6;
        const bool diff = dllm_policy_is_diffusion(p);
        dllm_err err = {0};
        double loss;
        ck_assert_int_eq(dllm_policy_sft_loss(p, tokens, masked, pm, plen, len, B, T, false, &loss,
                                              &err), 0);
        /* the definition, from one forward of the canvas at every scored row */
        int32_t canvas[B * T], rows[B * T], target[B * T];
        uint8_t km[B * T];
        double w[B * T];
        int R = 0, nans = 0;
        for (int b = 0; b < B; b++)
            nans += len[b] - plen[b];
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++) {
                int i = b * T + t;
                canvas[i] = diff && masked[i] ? mc->mask_token_id : tokens[i];
                km[i] = diff || t < len[b];
                if (diff && masked[i]) {
                    rows[R] = i;
                    target[R] = tokens[i];
                    w[R++] = 1.0 / (pm[b] * (T - plen[b]) * B);
                } else if (!diff && t >= plen[b] - 1 && t < len[b] - 1) {
                    rows[R] = i;
                    target[R] = tokens[i + 1];
                    w[R++] = 1.0 / nans;
                }
            }
        float *z = malloc(sizeof *z * (size_t)R * V);
        void *ctx;
        dllm_logits_fn fn = dllm_policy_logits(p, DLLM_PREC_TRAIN_NOGRAD, &ctx);
        ck_assert_int_eq(fn(ctx, canvas, km, B, T, rows, R, z), 0);
        double want = 0;
        for (int r = 0; r < R; r++)
            want -= w[r] * log_softmax_at(z + (size_t)r * V, V, 1.0, target[r]);
        ck_assert_msg(fabs(loss - want) < 1e-5 * fabs(want), "%s: loss %.9g, definition %.9g",
                      models[k], loss, want);
        free(z);
        /* gradient against central differences on a few parameters */
        size_t np;
        dllm_optim o = dllm_policy_optim(p);
        const float *theta = dllm_optim_trainable(o, &np);
        float *g = dllm_optim_grads(o);
        dllm_optim_zero_grad(dllm_policy_optim(p));
        ck_assert_int_eq(dllm_policy_sft_loss(p, tokens, masked, pm, plen, len, B, T, true, &loss,
                                              &err), 0);
        const size_t idx[4] = {np / 7, np / 3, np / 2 + 1, np - 5};
        for (int q = 0; q < 4; q++) {
            float keep = theta[idx[q]], set;
            const float h = 1e-2f;
            double lp, lm;
            set = keep + h;
            dllm_optim_state_write(o, DLLM_STATE_PARAMS, idx[q], 1, &set);
            ck_assert_int_eq(dllm_policy_sft_loss(p, tokens, masked, pm, plen, len, B, T, false,
                                                  &lp, &err), 0);
            set = keep - h;
            dllm_optim_state_write(o, DLLM_STATE_PARAMS, idx[q], 1, &set);
            ck_assert_int_eq(dllm_policy_sft_loss(p, tokens, masked, pm, plen, len, B, T, false,
                                                  &lm, &err), 0);
            dllm_optim_state_write(o, DLLM_STATE_PARAMS, idx[q], 1, &keep);
            double fd = (lp - lm) / (2.0 * h);
            ck_assert_msg(fabs(fd - g[idx[q]]) < 2e-3 * fmax(fabs(fd), 1e-2),
                          "%s param %zu: grad %.6g, finite difference %.6g", models[k], idx[q],
                          (double)g[idx[q]], fd);
        }
        /* bad batches are input errors */
        int32_t bad_plen[B] = {0, 4};
        ck_assert_int_eq(dllm_policy_sft_loss(p, tokens, masked, pm, bad_plen, len, B, T, false,
                                              &loss, &err), DLLM_EXIT_INPUT);
        tokens[5] = 100000;
        ck_assert_int_eq(dllm_policy_sft_loss(p, tokens, masked, pm, plen, len, B, T, false, &loss,
                                              &err), DLLM_EXIT_INPUT);
        ck_assert_msg(strstr(err.msg, "token") != NULL, "%s", err.msg);
        dllm_policy_free(p);
    }
}
END_TEST

/* ---- a Qwen3 run: sft, train, inspect, export ---------------------------------------- */

START_TEST(test_qwen3_run_inspect_export)
{
    ck_assert_int_eq(tu_sh("%s tasks sft-data sudoku --n 64 --seed 101 --max-blanks 4 > %s/sft.jsonl",
                        tu_bin(), tu_dir), 0);
    char *errs;
    ck_assert_int_eq(tu_dllm_take(NULL, &errs, "sft %s/sft.cfg --quiet", tu_dir), 2); /* no such file */
    ck_assert_msg(strstr(errs, "sft.cfg: No such file"), "%s", errs);
    free(errs);
    char path[256];
    snprintf(path, sizeof path, "%s/sft.yaml", tu_dir);
    FILE *f = fopen(path, "w");
    fprintf(f, "experiment: qsft\nseed: 1\nmodel: {arch: qwen3, preset: tiny}\n"
               "data: {train: %s/sft.jsonl, max_len: 64}\nsft: {steps: 120, batch_size: 8}\n"
               "optim: {lr: 3e-3, schedule: cosine}\nlog: {dir: %s/runs, every: 60}\n"
               "checkpoint: {every: 0}\n", tu_dir, tu_dir);
    fclose(f);
    ck_assert_int_eq(tu_dllm("sft %s --quiet", path), 0);
    snprintf(path, sizeof path, "%s/rl.yaml", tu_dir);
    f = fopen(path, "w");
    fprintf(f, "experiment: qrl\nseed: 1\n"
               "model: {path: %s/runs/qsft/ckpt/latest, lora: {rank: 4, alpha: 16}}\n"
               "task: {name: sudoku, format: plain, chat: plain, train: {n: 64}, max_blanks: 4}\n"
               "rollout: {precision: fp8, group_size: 4, gen_length: 36, block_length: 36, "
               "steps: 36, temperature: 1.0}\n"
               "grpo: {steps: 2, prompts_per_step: 4, inner_steps: 1, ratio: token}\n"
               "correction: {method: ais, level: token}\noptim: {lr: 1e-2}\n"
               "eval: {every: 2, n: 8, gen_length: 36, block_length: 36, steps: 36}\n"
               "log: {dir: %s/runs}\ncheckpoint: {every: 2, keep: 1}\n", tu_dir, tu_dir);
    fclose(f);
    ck_assert_int_eq(tu_dllm("train %s --quiet", path), 0);
    char run_dir[256], *out;
    snprintf(run_dir, sizeof run_dir, "%s/runs/qrl", tu_dir);

    /* inspect: the text table and the JSON summary of the two steps */
    ck_assert_int_eq(tu_dllm_take(&out, NULL, "inspect %s", run_dir), 0);
    ck_assert_msg(strstr(out, "steps        2 (step 1 .. 2)") && strstr(out, "sudoku"), "%s", out);
    free(out);
    ck_assert_int_eq(tu_dllm_take(&out, NULL, "inspect %s --json", run_dir), 0);
    json_t *j = parse_json(out);
    ck_assert_int_eq(json_integer_value(json_object_get(j, "steps")), 2);
    json_t *gn = json_object_get(json_object_get(json_object_get(j, "metrics"), "grad_norm"), "max");
    ck_assert_msg(json_number_value(gn) > 0, "the run did not train (grad_norm 0): rewards all equal?");
    json_decref(j);
    free(out);

    /* export: the adapter names Qwen3's modules; the merged model is a Qwen3 */
    ck_assert_int_eq(tu_dllm("export %s --adapter --out %s/adapter", run_dir, tu_dir), 0);
    ck_assert_int_eq(tu_dllm("export %s --merged --out %s/merged", run_dir, tu_dir), 0);
    char p2[256];
    snprintf(p2, sizeof p2, "%s/adapter/adapter_config.json", tu_dir);
    json_error_t je;
    j = json_load_file(p2, 0, &je);
    ck_assert_ptr_nonnull(j);
    ck_assert_int_eq(json_integer_value(json_object_get(j, "r")), 4);
    bool o_proj = false;
    json_t *tm = json_object_get(j, "target_modules");
    for (size_t i = 0; i < json_array_size(tm); i++)
        o_proj |= !strcmp(json_string_value(json_array_get(tm, i)), "o_proj");
    ck_assert(o_proj);
    json_decref(j);
    snprintf(p2, sizeof p2, "%s/merged/config.json", tu_dir);
    j = json_load_file(p2, 0, &je);
    ck_assert_ptr_nonnull(j);
    ck_assert_str_eq(json_string_value(json_object_get(j, "model_type")), "qwen3");
    json_decref(j);
    ck_assert_int_eq(tu_dllm_take(NULL, &errs, "export %s --adapter --merged --out %s/x", run_dir, tu_dir), 2);
    ck_assert_msg(strstr(errs, "one of --adapter and --merged"), "%s", errs);
    free(errs);

    /* the merged model scores what base + adapter scores, and not what the base does */
    const int32_t prompt[4] = {1, 23, 24, 25}, comp[5] = {30, 31, 32, 33, 0};
    ck_assert_int_eq(tu_dllm_take(&out, NULL, "score --model %s/merged --prompt-ids 1,23,24,25 "
                                     "--completion-ids 30,31,32,33,0", tu_dir), 0);
    json_t *js = parse_json(out);
    char base[256], adir[256];
    snprintf(base, sizeof base, "%s/runs/qsft/ckpt/latest", tu_dir);
    snprintf(adir, sizeof adir, "%s/adapter", tu_dir);
    dllm_policy *p = open_policy(base);
    double base_lp[5], lora_lp[5];
    full_forward_logp(p, prompt, 4, comp, 5, 1.0, base_lp);
    dllm_err err = {0};
    ck_assert_msg(dllm_policy_load_adapter(p, adir, &err) == 0, "%s", err.msg);
    full_forward_logp(p, prompt, 4, comp, 5, 1.0, lora_lp);
    double moved = 0;
    for (int i = 0; i < 5; i++) {
        double got = json_number_value(json_array_get(json_object_get(js, "token_logp"), (size_t)i));
        ck_assert_msg(fabs(got - lora_lp[i]) < 1e-4, "token %d: merged %.7f, base + adapter %.7f", i,
                      got, lora_lp[i]);
        moved = fmax(moved, fabs(lora_lp[i] - base_lp[i]));
    }
    ck_assert_msg(moved > 1e-4, "the adapter changed nothing (%g)", moved);
    dllm_policy_free(p);
    json_decref(js);
    free(out);

    /* generate works on the exported model */
    ck_assert_int_eq(tu_dllm_take(&out, NULL, "generate --model %s/merged --prompt 0420000403000140 "
                                     "--gen-length 36", tu_dir), 0);
    free(out);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("cli_arch");
    TCase *tc = tcase_create("score");
    tcase_add_test(tc, test_score_both);
    tcase_add_test(tc, test_score_nvfp4_scalings);
    tcase_add_loop_test(tc, test_score_qwen3_golden, 0, 2);
    tcase_add_test(tc, test_score_qwen3_full_forward);
    suite_add_tcase(s, tc);
    tc = tcase_create("generate");
    tcase_add_loop_test(tc, test_generate_qwen3_golden, 0, 2);
    tcase_add_test(tc, test_generate_qwen3_full_forward);
    tcase_add_test(tc, test_generate_qwen3_sampling);
    tcase_add_test(tc, test_generate_text_prompt);
    suite_add_tcase(s, tc);
    tc = tcase_create("bench");
    tcase_add_test(tc, test_bench_both);
    suite_add_tcase(s, tc);
    tc = tcase_create("bad_flags");
    tcase_add_loop_test(tc, test_bad_flags, 0, (int)(sizeof bad / sizeof bad[0]));
    suite_add_tcase(s, tc);
    tc = tcase_create("sft");
    tcase_add_test(tc, test_policy_sft_loss);
    suite_add_tcase(s, tc);
    tc = tcase_create("run");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_qwen3_run_inspect_export);
    suite_add_tcase(s, tc);
    return s;
}

Suite *tu_suite(tu_ctx *ctx)
{
    if (!tu_cli_setup(ctx))
        return NULL;
    snprintf(m_llada, sizeof m_llada, "%s/llada", tu_dir);
    snprintf(m_qwen, sizeof m_qwen, "%s/qwen3", tu_dir);
    if (!tu_tiny_model("llada", m_llada) || !tu_tiny_model("qwen3", m_qwen))
        return tu_abort(ctx, "init-model failed");
    return suite();
}
