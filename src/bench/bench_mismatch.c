/* dllm-rl bench mismatch: how far the FP8 rollout copy is from the bf16 copy
 * and from the trainer (docs/METHOD.md §5, §6), for a model of either architecture
 * through the policy interface.
 *
 * 1. Rollouts of the same --n prompts with the same seed, once with the FP8
 *    copy (E4M3 128x128 blockwise W8A8) and once with the bf16 copy: the
 *    fraction of generated tokens that differ (and of completions that differ
 *    anywhere).
 * 2. On the FP8 rollouts, log w_i = l_pi(y_i) - l_mu(y_i) with l_mu the FP8
 *    copy and l_pi the trainer (fp32). Masked diffusion: both by the elbo
 *    estimator with --mc samples (dllm/lik_plan.h),
 *      coupled    one plan (the same masks) evaluated under both policies;
 *      uncoupled  l_pi from a second plan whose masks come from another key;
 *    prints mean |log w| and its spread (standard deviation over completions)
 *    for both, and the mean Monte Carlo standard error of the coupled
 *    difference. Coupling removes the mask noise, which otherwise swamps the
 *    precision mismatch. Autoregressive: both exact (no masks, nothing to
 *    couple), so log w is the precision mismatch alone.
 * 3. Masked diffusion: every importance-weight estimator on the same FP8
 *    rollouts (elbo with --mc samples, one_step, trajectory with shrink 1, the
 *    exact context, and with --shrink), each coupled: forward passes (canvases)
 *    per completion, the wall time of both evaluations, mean |log w|, and the
 *    ESS / N of the sequence weights w and of the per-token geometric means
 *    w^(1/L), and of the per-token weights e^d over every scored token --
 *    whether the weights stay usable at this gen length. */
#include "dllm/arch.h"
#include "dllm/lik_plan.h"
#include "dllm/policy_infer.h"
#include "dllm/sampler.h"
#include "dllm/tokenizer.h"
#include "kernels/rng.h"
#include "src/cli/cli_util.h"
#include "src/cli/commands.h"

#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage_text[] =
    "usage: dllm-rl bench mismatch [--model DIR | [--arch llada|qwen3|dream] --preset tiny|small]\n"
    "         [--n 64] [--prompt 16] [--gen-length 32] [--block-length 32] [--steps 32]\n"
    "         [--temperature 0.9] [--mc 8] [--seed 0] [--fp8-format e4m3|e5m2]\n"
    "         [--fp8-scaling block|channel|tensor] [--prompts FILE.jsonl] [--shrink 2]\n"
    "\n"
    "Generates --n rollouts of random prompts (--prompt tokens), or of the first --n\n"
    "{\"prompt\": \"...\"} lines of --prompts (encoded as BOS + text with\n"
    "DIR/tokenizer.json, left-padded), with the same prompts and seed,\n"
    "with the FP8 copy and with the bf16 copy and reports the fraction of generated\n"
    "tokens that differ. Then, for the FP8 rollouts, log w = l_pi - l_mu (l_mu: FP8\n"
    "copy; l_pi: the fp32 trainer). Masked-diffusion (llada) models: elbo with --mc\n"
    "samples, COUPLED (same masks) and UNCOUPLED (masks from another key): mean |log w|,\n"
    "its standard deviation over completions, and the Monte Carlo standard error of\n"
    "the coupled difference; then every weight estimator (elbo, one_step, trajectory\n"
    "with shrink 1 and --shrink) on the same rollouts: forward passes per completion,\n"
    "time, mean |log w| and ESS / N of the sequence, geometric-mean (geo) and\n"
    "per-token weights.\n"
    "Autoregressive (qwen3) models: exact log-probs (no masks; --block-length,\n"
    "--steps, --mc and --shrink do not apply).\n";

/* The first n prompts of a JSONL file as [BOS] + ids, left-padded with EOS to
 * the longest (prompt_mask 0 on padding). */
static int read_prompts(const char *path, const char *model_dir, const dllm_model_config *mc,
                        int n, int32_t **prompts, uint8_t **mask, int *P, dllm_err *err)
{
    char tp[4200];
    snprintf(tp, sizeof tp, "%s/tokenizer.json", model_dir);
    dllm_tokenizer *tok;
    int rc = dllm_tokenizer_load(&tok, tp, err);
    if (rc)
        return rc;
    FILE *f = fopen(path, "r");
    if (!f) {
        dllm_tokenizer_free(tok);
        return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: cannot open", path);
    }
    int32_t **ids = dllm_calloc((size_t)n, sizeof *ids);
    int *len = dllm_calloc((size_t)n, sizeof *len);
    char *line = NULL;
    size_t cap = 0;
    int k = 0, lineno = 0;
    while (!rc && k < n && getline(&line, &cap, f) != -1) {
        lineno++;
        if (line[strspn(line, " \t\r\n")] == '\0')
            continue;
        json_error_t je;
        json_t *o = json_loads(line, 0, &je);
        json_t *t = o ? json_object_get(o, "prompt") : NULL;
        if (!json_is_string(t)) {
            rc = dllm_err_set(err, DLLM_EXIT_INPUT, "%s:%d: expected {\"prompt\": \"...\"}", path,
                              lineno);
        } else {
            int32_t *e;
            size_t ne;
            rc = dllm_tokenizer_encode(tok, json_string_value(t), strlen(json_string_value(t)),
                                       false, &e, &ne, err);
            if (!rc) {
                int bos = mc->bos_token_id >= 0;
                ids[k] = dllm_malloc(sizeof *ids[k] * (ne + 1));
                if (bos)
                    ids[k][0] = mc->bos_token_id;
                memcpy(ids[k] + bos, e, sizeof *e * ne);
                len[k++] = (int)ne + bos;
                free(e);
            }
        }
        json_decref(o);
    }
    free(line);
    fclose(f);
    dllm_tokenizer_free(tok);
    if (!rc && k < n)
        rc = dllm_err_set(err, DLLM_EXIT_INPUT, "%s: %d prompts, --n asks for %d", path, k, n);
    int maxl = 0;
    for (int i = 0; i < k; i++)
        maxl = len[i] > maxl ? len[i] : maxl;
    if (!rc) {
        *P = maxl;
        *prompts = dllm_malloc(sizeof **prompts * (size_t)n * maxl);
        *mask = dllm_malloc((size_t)n * maxl);
        for (int i = 0; i < n; i++)
            for (int t = 0; t < maxl; t++) {
                int pad = maxl - len[i];
                (*prompts)[(size_t)i * maxl + t] = t < pad ? mc->eos_token_id : ids[i][t - pad];
                (*mask)[(size_t)i * maxl + t] = t >= pad;
            }
    }
    for (int i = 0; i < k; i++)
        free(ids[i]);
    free(ids);
    free(len);
    return rc;
}

/* mean and standard deviation of |x| over n, and mean of x */
static void abs_stats(const double *x, int n, double *mean_abs, double *sd_abs, double *mean)
{
    double s = 0, s2 = 0, m = 0;
    for (int i = 0; i < n; i++) {
        s += fabs(x[i]);
        s2 += x[i] * x[i];
        m += x[i];
    }
    *mean_abs = s / n;
    *sd_abs = sqrt(fmax(s2 / n - (s / n) * (s / n), 0.0));
    *mean = m / n;
}

/* ESS / N of the weights exp(lw) (scale-free: shifted by the largest) */
static double ess_ratio(const double *lw, int n)
{
    double mx = -INFINITY, s = 0, s2 = 0;
    for (int i = 0; i < n; i++)
        mx = lw[i] > mx ? lw[i] : mx;
    for (int i = 0; i < n; i++) {
        const double w = exp(lw[i] - mx);
        s += w;
        s2 += w * w;
    }
    return s2 > 0 ? s * s / s2 / n : NAN;
}

/* Section 3: one estimator, coupled (one plan under both policies). */
static int estimator_row(const char *name, const dllm_lik_cfg *lc, const int32_t *prompts,
                         const uint8_t *pmask, const int32_t *gen, const int *L,
                         const int16_t *commit, int N, int P, int G, long seed,
                         dllm_logits_fn rollout_fn, dllm_logits_fn trainer_fn, void *ctx,
                         dllm_err *err)
{
    dllm_lik_plan p = {0};
    double *mu = dllm_malloc(sizeof(double) * (size_t)N), *pi = dllm_malloc(sizeof(double) * (size_t)N);
    double *lw = dllm_malloc(sizeof(double) * (size_t)N), *geo = dllm_malloc(sizeof(double) * (size_t)N);
    const size_t NG = (size_t)N * G;
    double *tmu = dllm_malloc(sizeof(double) * NG), *tpi = dllm_malloc(sizeof(double) * NG);
    int rc = dllm_lik_plan_build(&p, lc, prompts, pmask, gen, L, commit, N, P, G, (uint64_t)seed,
                                 0, 0, err);
    const double t0 = dllm_now();
    if (!rc)
        rc = dllm_lik_plan_eval(&p, rollout_fn, ctx, 64, mu, tmu, NULL, NULL, err);
    if (!rc)
        rc = dllm_lik_plan_eval(&p, trainer_fn, ctx, 64, pi, tpi, NULL, NULL, err);
    const double t = dllm_now() - t0;
    if (!rc) {
        double ma, sa, mean;
        for (int i = 0; i < N; i++) {
            lw[i] = pi[i] - mu[i];
            geo[i] = lw[i] / (L[i] > 0 ? L[i] : 1);
        }
        abs_stats(lw, N, &ma, &sa, &mean);
        /* per-token weights: every scored token's d, compacted in place */
        size_t nt = 0;
        for (size_t k = 0; k < NG; k++)
            if (isfinite(tpi[k] - tmu[k]))
                tmu[nt++] = tpi[k] - tmu[k];
        printf("  %-22s %8.2f %8.2f %12.5f %9.4f %9.4f %9.4f\n", name, (double)p.n_canvas / N, t,
               ma, ess_ratio(lw, N), ess_ratio(geo, N), nt ? ess_ratio(tmu, (int)nt) : NAN);
    }
    free(tmu);
    free(tpi);
    dllm_lik_plan_free(&p);
    free(mu);
    free(pi);
    free(lw);
    free(geo);
    return rc;
}

/* Opens the model at rollout precision `prec` (fp8 with the requested format
 * and scaling). */
static int open_at(dllm_policy **m, const char *model_dir, const char *arch, const char *preset,
                   long seed, const char *prec, const char *fmt, const char *scaling,
                   dllm_err *err)
{
    dllm_policy_cfg pc = {.path = model_dir, .preset = preset ? preset : "tiny", .arch = arch,
                          .seed = (uint64_t)seed};
    int rc = dllm_policy_infer_cfg(&pc, prec, "precision", err);
    pc.fp8_format = fmt;
    pc.fp8_scaling = scaling;
    return rc ? rc : dllm_policy_open(m, &pc, err);
}

int bench_mismatch(int argc, char **argv)
{
    const char *model_dir = NULL, *preset = NULL, *fmt = "e4m3", *scaling = "block";
    const char *prompt_file = NULL, *arch = "llada";
    int Pi = 0;
    long n = 64, P = 16, G = 32, blk = 32, steps = 32, mc_k = 8, seed = 0, shrink = 2;
    double temp = 0.9;
    dllm_err err = {0};
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'},      {"preset", required_argument, 0, 'p'},
        {"n", required_argument, 0, 'n'},          {"prompt", required_argument, 0, 'q'},
        {"gen-length", required_argument, 0, 'g'}, {"block-length", required_argument, 0, 'k'},
        {"steps", required_argument, 0, 's'},      {"temperature", required_argument, 0, 't'},
        {"mc", required_argument, 0, 'K'},         {"seed", required_argument, 0, 'S'},
        {"fp8-format", required_argument, 0, 'f'}, {"fp8-scaling", required_argument, 0, 'c'},
        {"prompts", required_argument, 0, 'F'},    {"arch", required_argument, 0, 'a'},
        {"shrink", required_argument, 0, 'r'},
        {"help", no_argument, 0, 'h'},             {0, 0, 0, 0}};
    optind = 1;
    for (int c; (c = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
        int bad = 0;
        switch (c) {
        case 'm': model_dir = optarg; break;
        case 'p': preset = optarg; break;
        case 'n': bad = cli_parse_int(optarg, "--n", 1, 1 << 20, &n, &err); break;
        case 'q': bad = cli_parse_int(optarg, "--prompt", 1, 1 << 16, &P, &err); break;
        case 'g': bad = cli_parse_int(optarg, "--gen-length", 1, 1 << 16, &G, &err); break;
        case 'k': bad = cli_parse_int(optarg, "--block-length", 1, 1 << 16, &blk, &err); break;
        case 's': bad = cli_parse_int(optarg, "--steps", 1, 32767, &steps, &err); break;
        case 't': bad = cli_parse_double(optarg, "--temperature", &temp, &err); break;
        case 'K': bad = cli_parse_int(optarg, "--mc", 1, 1 << 16, &mc_k, &err); break;
        case 'S': bad = cli_parse_int(optarg, "--seed", 0, 0x7fffffffffffffffL, &seed, &err); break;
        case 'f': fmt = optarg; break;
        case 'c': scaling = optarg; break;
        case 'F': prompt_file = optarg; break;
        case 'a': arch = optarg; break;
        case 'r': bad = cli_parse_int(optarg, "--shrink", 1, 32767, &shrink, &err); break;
        case 'h': fputs(usage_text, stdout); return 0;
        default: fputs(usage_text, stderr); return DLLM_EXIT_INPUT;
        }
        if (bad)
            return cli_fail("bench mismatch", &err);
    }
    if (optind < argc || (model_dir && preset) || (prompt_file && !model_dir)) {
        fputs(usage_text, stderr);
        return DLLM_EXIT_INPUT;
    }
    if (!dllm_arch_by_name(arch)) {
        char names[256];
        dllm_err_set(&err, DLLM_EXIT_INPUT, "--arch %s: expected %s", arch,
                     dllm_arch_list(names, sizeof names));
        return cli_fail("bench mismatch", &err);
    }
    if (strcmp(fmt, "e4m3") && strcmp(fmt, "e5m2")) {
        dllm_err_set(&err, DLLM_EXIT_INPUT, "--fp8-format %s: expected e4m3 or e5m2", fmt);
        return cli_fail("bench mismatch", &err);
    }
    if (strcmp(scaling, "block") && strcmp(scaling, "channel") && strcmp(scaling, "tensor")) {
        dllm_err_set(&err, DLLM_EXIT_INPUT, "--fp8-scaling %s: expected block, channel or tensor",
                     scaling);
        return cli_fail("bench mismatch", &err);
    }
    /* the bf16 copy first (its rollouts only), then the FP8 copy, whose policy
     * also gives the trainer's logits (TRAIN_NOGRAD) */
    dllm_policy *m = NULL;
    if (open_at(&m, model_dir, arch, preset, seed, "bf16", fmt, scaling, &err))
        return cli_fail("bench mismatch", &err);
    const dllm_model_config cfg = *dllm_policy_config(m), *mc = &cfg;
    const bool diffusion = dllm_policy_is_diffusion(m);
    dllm_sampler_cfg sc = {.gen_length = (int)G, .block_length = (int)blk, .steps = (int)steps,
                           .temperature = temp, .remasking = REMASK_LOW_CONFIDENCE,
                           .mask_id = mc->mask_token_id, .eos_id = mc->eos_token_id,
                           .eot_id = -1, .vocab = mc->embedding_size};
    int rc = diffusion ? dllm_sampler_check(&sc, &err) : 0;
    if (!rc && !(temp >= 0))
        rc = dllm_err_set(&err, DLLM_EXIT_INPUT, "--temperature must be >= 0");
    int32_t *prompts = NULL;
    uint8_t *pmask = NULL;
    if (!rc && prompt_file)
        rc = read_prompts(prompt_file, model_dir, mc, (int)n, &prompts, &pmask, &Pi, &err);
    if (prompt_file)
        P = Pi;
    if (!rc && P + G > mc->max_seq_len)
        rc = dllm_err_set(&err, DLLM_EXIT_INPUT,
                          "--prompt %ld + --gen-length %ld exceed max_sequence_length %d", P, G,
                          mc->max_seq_len);
    if (rc) {
        free(prompts);
        free(pmask);
        dllm_policy_free(m);
        return cli_fail("bench mismatch", &err);
    }
    int N = (int)n, T = (int)(P + G);
    /* random prompts: BOS (when the model has one) then ordinary tokens */
    dllm_rng r = dllm_rng_make((uint64_t)seed, DLLM_RNG_DATA, 8, 0);
    if (!prompts)
        prompts = dllm_malloc(sizeof *prompts * (size_t)N * P);
    for (long i = 0; !prompt_file && i < (long)N * P; i++) {
        int32_t t;
        do
            t = (int32_t)dllm_rng_below(&r, (uint64_t)mc->vocab_size);
        while (t == mc->mask_token_id || t == mc->eos_token_id || t == mc->bos_token_id ||
               t == mc->pad_token_id);
        prompts[i] = (i % P == 0 && mc->bos_token_id >= 0) ? mc->bos_token_id : t;
    }
    if (diffusion)
        printf("bench mismatch: %s%s, %d %s prompts of %ld tokens, gen-length %ld, block-length "
               "%ld, %ld steps, temperature %g, seed %ld; FP8 %s %s\n",
               model_dir ? "model " : "llada preset ",
               model_dir ? model_dir : (preset ? preset : "tiny"), N,
               prompt_file ? prompt_file : "random", P, G, blk, steps, temp, seed, fmt, scaling);
    else
        printf("bench mismatch: %s%s%s (autoregressive, KV-cache decoding), %d %s prompts of %ld "
               "tokens, gen-length %ld, temperature %g, seed %ld; FP8 %s %s\n",
               model_dir ? "model " : arch, model_dir ? "" : " preset ",
               model_dir ? model_dir : (preset ? preset : "tiny"), N,
               prompt_file ? prompt_file : "random", P, G, temp, seed, fmt, scaling);

    /* 1. rollouts with the bf16 and the FP8 copies (open builds each copy: the
     * sync times are of a rebuild) */
    dllm_rollout r8 = {0}, r16 = {0};
    double t_sync8 = 0, t_sync16 = 0, t0;
    t0 = dllm_now();
    if (!(rc = dllm_policy_sync_rollout(m, &t_sync16, &err)))
        rc = dllm_policy_rollout(m, prompts, pmask, N, (int)P, &sc, 1.0, (uint64_t)seed, &r16,
                                 &err);
    double t_r16 = dllm_now() - t0;
    dllm_policy_free(m);
    m = NULL;
    if (!rc)
        rc = open_at(&m, model_dir, arch, preset, seed, "fp8", fmt, scaling, &err);
    t0 = dllm_now();
    if (!rc && !(rc = dllm_policy_sync_rollout(m, &t_sync8, &err)))
        rc = dllm_policy_rollout(m, prompts, pmask, N, (int)P, &sc, 1.0, (uint64_t)seed, &r8,
                                 &err);
    double t_r8 = dllm_now() - t0;
    if (!rc) {
        long diff = 0, seq_diff = 0;
        for (int i = 0; i < N; i++) {
            long d = 0;
            for (int t = 0; t < G; t++)
                d += r8.tokens[(size_t)i * T + P + t] != r16.tokens[(size_t)i * T + P + t];
            diff += d;
            seq_diff += d > 0;
        }
        printf("rollouts: fp8 %.2f s, bf16 %.2f s (syncs %.4f s, %.4f s)\n", t_r8, t_r16, t_sync8,
               t_sync16);
        printf("generated tokens differing fp8 vs bf16: %ld / %ld = %.4f; completions differing: "
               "%ld / %d\n", diff, (long)N * G, (double)diff / ((double)N * G), seq_diff, N);
    }

    /* 2. log w on the FP8 rollouts: coupled and uncoupled (diffusion), or exact (AR) */
    dllm_lik_plan pa = {0}, pb = {0};
    int *L = dllm_malloc(sizeof *L * (size_t)N);
    int32_t *gen = dllm_malloc(sizeof *gen * (size_t)N * G);
    double *mu = dllm_malloc(sizeof(double) * (size_t)N), *pi = dllm_malloc(sizeof(double) * (size_t)N);
    double *pi_u = dllm_malloc(sizeof(double) * (size_t)N);
    double *lw = dllm_malloc(sizeof(double) * (size_t)N), *se = dllm_malloc(sizeof(double) * (size_t)N);
    int n_canvas = 0;
    double *smu = NULL, *spi = NULL;
    double mean_len = 0;
    if (!rc) {
        for (int i = 0; i < N; i++) {
            memcpy(gen + (size_t)i * G, r8.tokens + (size_t)i * T + P, sizeof *gen * (size_t)G);
            L[i] = dllm_completion_length(gen + (size_t)i * G, (int)G, mc->eos_token_id);
            mean_len += L[i];
        }
        dllm_lik_cfg lc = {.kind = diffusion ? EST_ELBO : EST_AR_EXACT, .mc = (int)mc_k,
                           .temperature = 1.0, .mask_id = mc->mask_token_id,
                           .vocab = mc->embedding_size, .shrink = 1};
        rc = dllm_lik_plan_build(&pa, &lc, prompts, pmask, gen, L, r8.commit_step, N, (int)P,
                                 (int)G, (uint64_t)seed, 0, 0, &err);
        if (!rc && diffusion)
            rc = dllm_lik_plan_build(&pb, &lc, prompts, pmask, gen, L, r8.commit_step, N, (int)P,
                                     (int)G, (uint64_t)seed, 1, 0, &err);
        n_canvas = pa.n_canvas;
        smu = dllm_malloc(sizeof(double) * (size_t)(n_canvas + 1));
        spi = dllm_malloc(sizeof(double) * (size_t)(n_canvas + 1));
    }
    void *ctx = NULL;
    dllm_logits_fn rollout_fn = m ? dllm_policy_logits(m, DLLM_PREC_ROLLOUT, &ctx) : NULL;
    dllm_logits_fn trainer_fn = m ? dllm_policy_logits(m, DLLM_PREC_TRAIN_NOGRAD, &ctx) : NULL;
    t0 = dllm_now();
    if (!rc)
        rc = dllm_lik_plan_eval(&pa, rollout_fn, ctx, 64, mu, NULL, NULL, smu, &err);
    if (!rc)
        rc = dllm_lik_plan_eval(&pa, trainer_fn, ctx, 64, pi, NULL, NULL, spi, &err);
    if (!rc && diffusion)
        rc = dllm_lik_plan_eval(&pb, trainer_fn, ctx, 64, pi_u, NULL, NULL, NULL, &err);
    double t_lik = dllm_now() - t0;
    if (!rc) {
        dllm_lik_plan_diff_se(&pa, spi, smu, se);
        double ma, sa, mean, se_mean = 0, mu_mean = 0;
        for (int i = 0; i < N; i++) {
            se_mean += se[i] / N;
            mu_mean += mu[i] / N;
        }
        for (int i = 0; i < N; i++)
            lw[i] = pi[i] - mu[i];
        abs_stats(lw, N, &ma, &sa, &mean);
        if (!diffusion) {
            printf("log w = l_pi (fp32 trainer) - l_mu (fp8 copy), exact log-probs, %d "
                   "completions (mean length %.1f, mean l_mu %.3f nats), %.2f s:\n", N,
                   mean_len / N, mu_mean, t_lik);
            printf("  exact (no masks):        mean |log w| %.5f  sd %.5f  mean log w %+.5f\n",
                   ma, sa, mean);
        } else {
            printf("log w = l_pi (fp32 trainer) - l_mu (fp8 copy), elbo with %ld samples, %d "
                   "completions (mean length %.1f, mean l_mu %.3f nats), %.2f s:\n", mc_k, N,
                   mean_len / N, mu_mean, t_lik);
            printf("  coupled   (same masks):  mean |log w| %.5f  sd %.5f  mean log w %+.5f  "
                   "MC s.e. %.5f\n", ma, sa, mean, se_mean);
            double mac = ma;
            for (int i = 0; i < N; i++)
                lw[i] = pi_u[i] - mu[i];
            abs_stats(lw, N, &ma, &sa, &mean);
            printf("  uncoupled (other masks): mean |log w| %.5f  sd %.5f  mean log w %+.5f\n", ma,
                   sa, mean);
            printf("  uncoupled / coupled mean |log w|: %.1fx\n", mac > 0 ? ma / mac : INFINITY);
        }
    }
    if (!rc && diffusion) {
        /* 3. every weight estimator on the same rollouts, coupled */
        printf("weight estimators on the FP8 rollouts (coupled; passes = forward passes per "
               "completion, time = both evaluations):\n");
        printf("  %-22s %8s %8s %12s %9s %9s %9s\n", "estimator", "passes", "time s",
               "mean|log w|", "ESS/N w", "ESS/N geo", "ESS/N tok");
        const struct { const char *name; dllm_estimator kind; int shrink; } est[] = {
            {"elbo", EST_ELBO, 1}, {"one_step", EST_ONE_STEP, 1},
            {"trajectory shrink 1", EST_TRAJECTORY, 1}, {"trajectory shrink S", EST_TRAJECTORY,
                                                         (int)shrink}};
        for (size_t e = 0; e < sizeof est / sizeof est[0] && !rc; e++) {
            if (e == 3 && shrink == 1)
                break;
            char name[64];
            if (est[e].kind == EST_ELBO)
                snprintf(name, sizeof name, "elbo (mc %ld)", mc_k);
            else if (e == 3)
                snprintf(name, sizeof name, "trajectory shrink %ld", shrink);
            else
                snprintf(name, sizeof name, "%s", est[e].name);
            dllm_lik_cfg lc = {.kind = est[e].kind, .mc = (int)mc_k, .temperature = 1.0,
                               .mask_id = mc->mask_token_id, .vocab = mc->embedding_size,
                               .shrink = est[e].shrink};
            rc = estimator_row(name, &lc, prompts, pmask, gen, L, r8.commit_step, N, (int)P,
                               (int)G, seed, rollout_fn, trainer_fn, ctx, &err);
        }
    }
    dllm_lik_plan_free(&pa);
    dllm_lik_plan_free(&pb);
    dllm_rollout_free(&r8);
    dllm_rollout_free(&r16);
    free(smu);
    free(spi);
    free(L);
    free(gen);
    free(mu);
    free(pi);
    free(pi_u);
    free(lw);
    free(se);
    free(prompts);
    free(pmask);
    dllm_policy_free(m);
    return rc ? cli_fail("bench mismatch", &err) : 0;
}
