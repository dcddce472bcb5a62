/* test_plan_device.c: the plan of what the device path holds (src/mem_plan_device.h)
 * against the CUDA emulation's allocator (kernels/cuda_emu/emu_hooks.h).
 *
 * For tiny LLaDA, Dream and Qwen3 models at every precision (fp32 trainer, bf16 trainer,
 * bf16 and FP8 rollout copies), with and without LoRA, at several batches and lengths,
 * one rollout, one scoring forward, or a step's device work (rollout, the l_mu and l_pi
 * scoring forwards, the next step's rollout) runs on the emulated device and its peak of
 * device bytes is compared with the plan's phase (rollout, score, train):
 *   - the whole peak within 10%;
 *   - the peak less the two fixed workspaces (cuBLASLt's 32 MiB, the backend's) within
 *     10% of the plan's other items, so the tiny model's own bytes are what is checked;
 *   - the backend workspace exactly as planned.
 * Each case runs in its own forked child (the parent never starts the emulated device), so
 * every peak starts from an empty device. Bookkeeping of the emulated allocator, not a GPU
 * measurement. Other builds report SKIP (77). */
#include "config.h"

#include "dllm/arch.h"
#include "dllm/policy.h"
#include "dllm/policy_infer.h"
#include "src/mem_plan_device.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef DLLM_CUDA_EMULATION
#include "kernels/cuda_emu/emu_hooks.h"

typedef struct {
    const char *arch, *prec; /* bench rollout's precision names */
    int lora, B, P, G;
    bool cfg;                /* LLaDA CFG rollout */
    int mode;                /* 0 a rollout; 1 a scoring forward at the rollout copy; 2 a
                                step's device work: rollout, then l_mu (rollout copy) and
                                l_pi (trainer view) scoring forwards */
} pcase;

static const pcase CASES[] = {
    {"llada", "fp32", 0, 2, 4, 8, false, 0},  {"llada", "bf16", 0, 3, 6, 8, false, 0},
    {"llada", "fp8", 0, 2, 8, 16, false, 0},  {"llada", "fp8", 4, 4, 4, 8, false, 0},
    {"llada", "bf16", 8, 2, 5, 12, true, 0},  {"llada", "fp32", 3, 1, 3, 6, false, 0},
    {"qwen3", "fp32", 0, 2, 4, 6, false, 0},  {"qwen3", "bf16", 4, 3, 5, 4, false, 0},
    {"qwen3", "fp8", 0, 2, 6, 5, false, 0},   {"dream", "bf16", 0, 2, 4, 6, false, 0},
    {"dream", "fp8", 5, 3, 3, 4, false, 0},   {"dream", "fp32", 0, 1, 6, 8, false, 0},
    {"llada", "fp8", 4, 3, 6, 8, false, 1},       {"qwen3", "fp32", 0, 4, 5, 6, false, 1},
    {"dream", "bf16", 8, 2, 7, 5, false, 1},      {"llada", "bf16-trainer", 4, 2, 4, 8, false, 0},
    {"llada", "fp8", 4, 2, 4, 8, false, 2},       {"qwen3", "bf16", 3, 2, 5, 4, false, 2},
    {"dream", "fp8", 0, 2, 4, 6, false, 2},       {"llada", "fp32", 0, 2, 3, 8, true, 2},
};
#define NCASES ((int)(sizeof CASES / sizeof CASES[0]))

static double rel(int64_t plan, int64_t got)
{
    return got ? (double)(plan - got) / (double)got : (plan ? 1.0 : 0.0);
}

START_TEST(test_peak_matches_plan)
{
    const pcase *c = &CASES[_i];
    dllm_err err = {0};
    bool trainer_bf16 = !strcmp(c->prec, "bf16-trainer");
    dllm_policy_cfg pc = {.preset = "tiny", .arch = c->arch, .seed = 5, .device = "cuda"};
    ck_assert_int_eq(dllm_policy_infer_cfg(&pc, trainer_bf16 ? "bf16" : c->prec, "--precision",
                                           &err), 0);
    if (trainer_bf16) /* a bf16 trainer rolling out at its own numerics */
        pc.trainer = "bf16", pc.rollout = "trainer";
    /* LoRA after the precision (dllm_policy_infer_cfg clears it); odd ranks on two targets */
    static const char *const two[] = {"q_proj", "v_proj"};
    pc.lora_rank = c->lora, pc.lora_alpha = 16;
    if (c->lora % 2)
        pc.lora_targets = two, pc.n_lora_targets = 2;
    dllm_emu_reset_stats();
    dllm_policy *p = NULL;
    ck_assert_msg(dllm_policy_open(&p, &pc, &err) == 0, "%s", err.msg);
    const dllm_model_config mc = *dllm_policy_config(p);
    const int B = c->B, P = c->P, G = c->G, T = P + G;
    int32_t *tok = malloc(sizeof *tok * (size_t)B * T);
    for (int i = 0; i < B * T; i++)
        tok[i] = 3 + (i * 7) % (mc.vocab_size - 3);
    for (int i = 0; i < B * T; i++)
        if (tok[i] == mc.mask_token_id || tok[i] == mc.eos_token_id)
            tok[i] = 5;
    mem_dev_shape s = {.lora_rank = c->lora, .lora_mask = LORA_ALL, .B = B, .P = P, .G = G,
                       .cfg = c->cfg};
    if (pc.n_lora_targets)
        s.lora_mask = dllm_arch_lora_bit(dllm_arch_get(mc.arch), two[0]) |
                      dllm_arch_lora_bit(dllm_arch_get(mc.arch), two[1]);
    ck_assert_int_eq(dllm_policy_has_lora(p), c->lora > 0);
    ck_assert_int_eq(dllm_precision_parse(&s.prec, pc.trainer, pc.rollout, pc.fp8_format,
                                          pc.fp8_scaling, pc.fp8_pow2_scale, &err), 0);
    const dllm_sampler_cfg sc = {.gen_length = G, .block_length = G, .steps = G / 2,
                               .temperature = 1.0, .remasking = REMASK_LOW_CONFIDENCE,
                               .mask_token = DLLM_MASK_TOKEN_FORBID, .mask_id = mc.mask_token_id,
                               .eos_id = mc.eos_token_id, .eot_id = -1,
                               .vocab = mc.embedding_size, .cfg_scale = c->cfg ? 1.0 : 0.0};
    if (c->mode != 1) {
        dllm_rollout ro = {0};
        ck_assert_msg(dllm_policy_rollout(p, tok, NULL, B, P, &sc, 1.0, 9, &ro, &err) == 0, "%s",
                      err.msg);
        dllm_rollout_free(&ro);
    }
    if (c->mode != 0) { /* forwards of B canvases scoring their G generated rows */
        int32_t *rows = malloc(sizeof *rows * (size_t)B * G), *tg = malloc(sizeof *tg * B * G);
        float *lp = malloc(sizeof *lp * (size_t)B * G);
        for (int b = 0; b < B; b++)
            for (int g = 0; g < G; g++) {
                rows[b * G + g] = b * T + P + g;
                tg[b * G + g] = tok[b * T + P + g];
                tok[b * T + P + g] = mc.arch == DLLM_ARCH_QWEN3 ? tok[b * T + P + g]
                                                                : mc.mask_token_id;
            }
        for (int k = 0; k < (c->mode == 2 ? 2 : 1); k++) {
            void *ctx;
            dllm_logp_fn f = dllm_policy_logp(p, k ? DLLM_PREC_TRAIN_NOGRAD : DLLM_PREC_ROLLOUT,
                                              &ctx);
            ck_assert_ptr_nonnull(f);
            ck_assert_int_eq(f(ctx, tok, NULL, B, T, rows, tg, B * G, lp), 0);
        }
        s.sB = B, s.sT = T, s.sR = B * G, s.score_rollout = true;
        free(rows), free(tg), free(lp);
    }
    if (c->mode == 2) { /* the next step's rollout, with the scoring buffers kept */
        for (int i = 0; i < B * T; i++)
            if (tok[i] == mc.mask_token_id)
                tok[i] = 5;
        dllm_rollout ro = {0};
        ck_assert_msg(dllm_policy_rollout(p, tok, NULL, B, P, &sc, 1.0, 10, &ro, &err) == 0, "%s",
                      err.msg);
        dllm_rollout_free(&ro);
    }
    dllm_emu_stats st;
    dllm_emu_get_stats(&st);
    int64_t ws = (int64_t)dllm_backend_cuda_workspace_bytes();
    dllm_policy_free(p);
    free(tok);

    mem_dev_plan pl;
    ck_assert_msg(mem_plan_device(&pl, &mc, &s, (mem_dev_phase)c->mode,
                                  &err) == 0, "%s", err.msg);
    int64_t got = (int64_t)st.peak_bytes, own = got - ws - ((int64_t)32 << 20);
    printf("%-5s %-12s lora %d B %d P %d G %d%s %s: peak %lld, plan %lld (%+.2f%%); without the "
           "workspaces %lld, plan %lld (%+.2f%%)\n", c->arch, c->prec, c->lora, B, P, G,
           c->cfg ? " cfg" : "", c->mode ? mem_dev_phase_names[c->mode] : "", (long long)got, (long long)pl.peak,
           100 * rel(pl.peak, got), (long long)own, (long long)(pl.peak - pl.fixed),
           100 * rel(pl.peak - pl.fixed, own));
    if (own <= 0 || rel(pl.peak - pl.fixed, own) > 0.10 || rel(pl.peak - pl.fixed, own) < -0.10) {
        mem_plan_device_print(&pl, c->arch, 0, stdout);
        fflush(stdout); /* the forked child exits without flushing */
        ck_abort_msg("the plan's own bytes %lld are not within 10%% of the measured %lld",
                     (long long)(pl.peak - pl.fixed), (long long)own);
    }
    ck_assert_msg(rel(pl.peak, got) <= 0.10 && rel(pl.peak, got) >= -0.10,
                  "plan %lld vs peak %lld", (long long)pl.peak, (long long)got);
    ck_assert_int_eq(pl.backend_ws, ws);
}
END_TEST
#endif

int main(void)
{
#ifndef DLLM_CUDA_EMULATION
    printf("SKIP: the device plan is checked against the CUDA emulation's allocator "
           "(configure --enable-cuda-emulation)\n");
    return 77;
#else
    Suite *s = suite_create("plan_device");
    TCase *tc = tcase_create("peak");
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, test_peak_matches_plan, 0, NCASES);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_FORK); /* each case on a fresh emulated device */
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
#endif
}
