/* selftest_rollout.c: one row per rollout precision of the CPU backend: the product it
 * runs on this machine (dllm_rollout_cpu_product) and its measured speed against the
 * fp32 trainer's, both on one forward of the rollout copy of a random LLaDA model of the
 * small preset (4 sequences of 96 tokens, the head on a 16-token block of each: a
 * denoising step of `bench rollout`'s default shape). The ratio is the fp32 forward's
 * time over the precision's (best of 3 after a warm-up, wall clock); the goal is that
 * no precision is more than 5% slower than fp32 (>= 0.95), whether or not the machine
 * has its fast product. --quick times nothing: the rows then only name the paths. */
#include "src/selftest/selftest.h"

#include "dllm/model_config.h"
#include "dllm/precision.h"
#include "dllm/transformer.h"
#include "kernels/base.h"

#include <stdio.h>
#include <stdlib.h>

enum { B = 4, T = 96, BLK = 16, REPS = 3 };

/* Best wall time of REPS forwards of the rollout copy at precision k, after a warm-up. */
static double time_forward(dllm_tf *m, dllm_rollout_kind k, const int32_t *tok,
                           const int32_t *rows, float *logits, dllm_err *err)
{
    dllm_precision p = dllm_precision_default();
    p.rollout = k;
    if (dllm_tf_rollout_sync(m, &p, NULL, err))
        return -1;
    double best = 1e30;
    for (int r = 0; r <= REPS; r++) {
        double t0 = dllm_now();
        if (dllm_tf_forward_rollout(m, tok, NULL, B, T, rows, B * BLK, logits)) {
            dllm_err_set(err, DLLM_EXIT_INTERNAL, "the rollout forward failed");
            return -1;
        }
        double dt = dllm_now() - t0;
        if (r > 0 && dt < best) /* r = 0: the warm-up (first-use caches, pages) */
            best = dt;
    }
    return best;
}

void selftest_rollout(stbl_table *t)
{
    /* every rollout precision of the CPU backend but the trainer's own */
    static const dllm_rollout_kind KINDS[] = {DLLM_ROLLOUT_BF16, DLLM_ROLLOUT_FP8,
                                              DLLM_ROLLOUT_FP8_EXACT, DLLM_ROLLOUT_NVFP4,
                                              DLLM_ROLLOUT_INT8};
    const int nk = (int)(sizeof KINDS / sizeof *KINDS);
    dllm_tf *m = NULL;
    int32_t *tok = NULL, *rows = NULL;
    float *logits = NULL;
    double t32 = -1;
    dllm_err err = {0};
    if (!t->quick) {
        dllm_model_config cfg;
        if (dllm_config_preset(&cfg, DLLM_ARCH_LLADA, "small", &err) == 0)
            m = dllm_tf_create(&cfg, 7);
        if (m) {
            tok = dllm_malloc(sizeof(int32_t) * B * T);
            rows = dllm_malloc(sizeof(int32_t) * B * BLK);
            logits = dllm_malloc(sizeof(float) * (size_t)B * BLK * cfg.embedding_size);
            uint64_t s = 1;
            for (int i = 0; i < B * T; i++) {
                s = s * 6364136223846793005ULL + 1442695040888963407ULL;
                tok[i] = (int32_t)((s >> 33) % (uint64_t)(cfg.vocab_size / 2));
            }
            for (int b = 0; b < B; b++) /* the first block after a 32-token prompt */
                for (int i = 0; i < BLK; i++)
                    rows[b * BLK + i] = b * T + 32 + i;
            t32 = time_forward(m, DLLM_ROLLOUT_TRAINER, tok, rows, logits, &err);
        }
    }
    for (int i = 0; i < nk; i++) {
        dllm_rollout_kind k = KINDS[i];
        bool faster;
        const char *path = dllm_rollout_cpu_product(k, &faster);
        char check[72], meas[48];
        snprintf(check, sizeof check, "cpu: rollout %s, path and step vs fp32",
                 dllm_rollout_name(k));
        if (t->quick) {
            stbl_add(t, check, STBL_SKIP, "", "", "not timed under --quick; path: %s", path);
            continue;
        }
        double tk = t32 > 0 ? time_forward(m, k, tok, rows, logits, &err) : -1;
        if (tk <= 0) {
            stbl_add(t, check, STBL_FAIL, "", ">= 0.95", "%s",
                     err.msg[0] ? err.msg : "the small preset could not be built");
            continue;
        }
        double ratio = t32 / tk;
        snprintf(meas, sizeof meas, "%.2fx", ratio);
        /* a precision chosen for speed that cannot give it here says so loudly */
        bool loud = !faster && (k == DLLM_ROLLOUT_BF16 || k == DLLM_ROLLOUT_FP8 ||
                                k == DLLM_ROLLOUT_INT8);
        stbl_add(t, check, ratio >= 0.95 ? STBL_PASS : STBL_FAIL, meas, ">= 0.95", "%s%s",
                 loud ? "NO SPEED-UP HERE: " : "", path);
    }
    dllm_tf_free(m);
    free(tok);
    free(rows);
    free(logits);
}
