/* selftest_greedy.c: greedy-token agreement of the device with the CPU on a tiny random
 * model, judged with a tie margin.
 *
 * Exact ids are the wrong test: a random model's logits have near-ties, and where the
 * two best logits are closer than the rounding difference between two correct
 * implementations (a different summation order), either token is right. So the CPU's
 * greedy low-confidence denoising of a tiny LLaDA is replayed: at every step both
 * devices compute the logits of the same canvas, and at every still-masked position the
 * device's argmax is compared with the CPU's. A differing token is a disagreement only
 * where the CPU's top-2 logit gap exceeds MARGIN; below it, it is a tie, counted and
 * shown. The canvas then advances by the CPU's choice (the most confident position), so
 * one tie does not make every later comparison one of different contexts. */
#include "config.h"
#include "src/selftest/selftest.h"

#include "dllm/policy.h"
#include "kernels/base.h"

#include <float.h>
#include <stdlib.h>
#include <string.h>

/* Logits of correct fp32 implementations differ by about 1e-6 relative here (the op rows'
 * tolerances); a gap of 1e-3 is hundreds of those, and small against a random tiny
 * model's typical top-2 gaps (about 0.05) */
#define MARGIN 1e-3

enum { PROMPT = 5, GEN = 16, SEEDS = 3 };

/* argmax of x[0..n) and the gap to the runner-up */
static int top2(const float *x, int n, double *gap)
{
    int a = 0;
    for (int v = 1; v < n; v++)
        if (x[v] > x[a])
            a = v;
    float second = -FLT_MAX;
    for (int v = 0; v < n; v++)
        if (v != a && x[v] > second)
            second = x[v];
    *gap = (double)x[a] - (double)second;
    return a;
}

static int open_tiny(dllm_policy **p, const char *device, uint64_t seed, dllm_err *err)
{
    dllm_policy_cfg c = {.preset = "tiny", .arch = "llada", .seed = seed, .trainer = "fp32",
                         .rollout = "trainer", .device = device, .device_flag = "--device"};
    return dllm_policy_open(p, &c, err);
}

typedef struct {
    int compared, ties, disagree;
    double worst_gap; /* the largest CPU top-2 gap at a disagreement */
    char first[160];  /* the first disagreement */
} greedy_tally;

/* One seed's replay: 0, or an error in err. */
static int replay(uint64_t seed, const char *perturb, greedy_tally *g, dllm_err *err)
{
    dllm_policy *pc = NULL, *pd = NULL;
    int rc = open_tiny(&pc, "", seed, err);
    if (!rc)
        rc = open_tiny(&pd, "cuda", seed, err);
    if (rc) {
        dllm_policy_free(pc);
        return rc;
    }
    const dllm_model_config *mc = dllm_policy_config(pc);
    const int T = PROMPT + GEN, W = mc->embedding_size, V = mc->vocab_size;
    int32_t tok[PROMPT + GEN], rows[GEN];
    uint8_t keymask[PROMPT + GEN];
    for (int i = 0; i < T; i++) {
        tok[i] = i < PROMPT ? (int32_t)(1 + (seed * 7 + (uint64_t)i * 13) % (uint64_t)(V - 2))
                            : mc->mask_token_id;
        keymask[i] = 1;
    }
    float *lc = dllm_malloc(sizeof(float) * (size_t)GEN * W);
    float *ld = dllm_malloc(sizeof(float) * (size_t)GEN * W);
    void *cc = NULL, *cd = NULL;
    dllm_logits_fn fc = dllm_policy_logits(pc, DLLM_PREC_TRAIN_NOGRAD, &cc);
    dllm_logits_fn fd = dllm_policy_logits(pd, DLLM_PREC_TRAIN_NOGRAD, &cd);
    for (int step = 0; step < GEN && !rc; step++) {
        int n = 0;
        for (int i = PROMPT; i < T; i++)
            if (tok[i] == mc->mask_token_id)
                rows[n++] = i;
        if (fc(cc, tok, keymask, 1, T, rows, n, lc) || fd(cd, tok, keymask, 1, T, rows, n, ld)) {
            rc = dllm_err_set(err, DLLM_EXIT_INTERNAL, "a forward of the tiny model failed");
            break;
        }
        int best = 0;
        double best_conf = -1;
        for (int r = 0; r < n; r++) {
            double gap, gd;
            int a = top2(lc + (size_t)r * W, V, &gap);
            int b = top2(ld + (size_t)r * W, V, &gd);
            if (perturb && !strcmp(perturb, "greedy") && step == 0 && r == 0)
                b = (a + 1) % V, gap = 1.0; /* a decisive disagreement */
            g->compared++;
            if (a != b) {
                if (gap <= MARGIN) {
                    g->ties++;
                } else {
                    if (!g->disagree)
                        snprintf(g->first, sizeof g->first,
                                 "seed %llu step %d position %d: cpu %d, device %d, cpu gap %.3g",
                                 (unsigned long long)seed, step, rows[r], a, b, gap);
                    g->disagree++;
                    g->worst_gap = gap > g->worst_gap ? gap : g->worst_gap;
                }
            }
            /* the CPU's greedy choice: the position whose top logit leads most (a
             * low-confidence remasking order by the logit margin, deterministic) */
            if (gap > best_conf)
                best_conf = gap, best = r;
        }
        tok[rows[best]] = top2(lc + (size_t)best * W, V, &best_conf);
    }
    free(lc);
    free(ld);
    dllm_policy_free(pd);
    dllm_policy_free(pc);
    return rc;
}

void selftest_greedy(stbl_table *t)
{
    const char *check = "greedy tokens, device vs cpu";
    greedy_tally g = {0};
    dllm_err err = {0};
    /* the device's attention on its fp32 kernels, as the CLI rows: the bf16 tensor-core
     * attention's own bound is the op rows' */
    const char *prev = getenv("DLLM_CUDA_ATTENTION");
    char keep[16] = "";
    if (prev)
        snprintf(keep, sizeof keep, "%s", prev);
    setenv("DLLM_CUDA_ATTENTION", "fp32", 1);
    int rc = 0;
    for (uint64_t s = 1; s <= SEEDS && !rc; s++)
        rc = replay(s, t->perturb, &g, &err);
    if (prev)
        setenv("DLLM_CUDA_ATTENTION", keep, 1);
    else
        unsetenv("DLLM_CUDA_ATTENTION");
    if (rc) {
        stbl_add(t, check, STBL_FAIL, "", "", "%s", err.msg);
        return;
    }
    char meas[48], tol[40];
    snprintf(meas, sizeof meas, "%d disagree", g.disagree);
    snprintf(tol, sizeof tol, "0 beyond gap %.0e", MARGIN);
    if (g.disagree)
        stbl_add(t, check, STBL_FAIL, meas, tol,
                 "%d of %d tokens differ where the cpu's top-2 gap exceeds the margin (up to "
                 "%.3g); first: %s", g.disagree, g.compared, g.worst_gap, g.first);
    else
        stbl_add(t, check, STBL_PASS, meas, tol,
                 "tiny preset, %d random models, %d tokens compared along the cpu's greedy "
                 "denoising; %d differ within the tie margin", SEEDS, g.compared, g.ties);
}
