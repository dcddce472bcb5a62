/* dllm-rl bench rollout: the denoising rollout (METHOD.md §2) at each rollout
 * precision, on one random model of a preset and the same random prompts.
 *
 * For every precision in --precision (fp32 = the trainer's numerics, bf16, fp8
 * = E4M3 128x128 blockwise W8A8): build the rollout copy (timed: the weight
 * sync), run --warmup untimed rollouts, then --iters timed ones; report the
 * best time per rollout, per denoising step, generated tokens/s, and the
 * fp8/bf16 time ratio. On the CPU the FP8 GEMM is a simulation (activations
 * quantised and dequantised, then an fp32 GEMM on dequantised weights), so it
 * is slower than bf16 there; the speed-up belongs to GPUs with FP8 GEMMs. */
#include "dllm/llada.h"
#include "dllm/sampler.h"
#include "kernels/rng.h"
#include "src/cli_util.h"
#include "src/commands.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage_text[] =
    "usage: dllm-rl bench rollout [--preset tiny|small|llada-8b] [--precision bf16,fp8]\n"
    "         [--batch 4] [--prompt 32] [--gen-length 64] [--block-length 16] [--steps 32]\n"
    "         [--temperature 0.9] [--iters 3] [--warmup 1] [--seed 0]\n"
    "\n"
    "Denoising rollouts of --batch random prompts on a random model of the preset, at\n"
    "each precision of the comma-separated list (fp32 = the trainer's numerics, bf16,\n"
    "fp8 = E4M3 128x128 blockwise W8A8); prints the weight-sync time, the best time per\n"
    "rollout and per denoising step, generated tokens/s, and the fp8/bf16 time ratio.\n"
    "On the CPU the FP8 GEMM is simulated (quantise, dequantise, fp32 GEMM): expect\n"
    "fp8 to be SLOWER there; FP8 speed-ups need a GPU with FP8 GEMMs.\n"
    "Threads: OMP_NUM_THREADS / OPENBLAS_NUM_THREADS.\n";

static int rollout_fn(void *m, const int32_t *tokens, const uint8_t *keymask, int B, int T,
                      const int32_t *rows, int n_rows, float *logits)
{
    return dllm_tf_forward_rollout(m, tokens, keymask, B, T, rows, n_rows, logits);
}

enum { MAX_PREC = 8 };

int bench_rollout(int argc, char **argv)
{
    const char *preset = "tiny", *list = "bf16,fp8";
    long B = 4, P = 32, G = 64, blk = 16, steps = 32, iters = 3, warmup = 1, seed = 0;
    double temp = 0.9;
    dllm_err err = {0};
    static const struct option opts[] = {
        {"preset", required_argument, 0, 'p'},     {"precision", required_argument, 0, 'P'},
        {"batch", required_argument, 0, 'b'},      {"prompt", required_argument, 0, 'q'},
        {"gen-length", required_argument, 0, 'g'}, {"block-length", required_argument, 0, 'k'},
        {"steps", required_argument, 0, 's'},      {"temperature", required_argument, 0, 't'},
        {"iters", required_argument, 0, 'i'},      {"warmup", required_argument, 0, 'w'},
        {"seed", required_argument, 0, 'S'},       {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    optind = 1;
    for (int c; (c = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
        int bad = 0;
        switch (c) {
        case 'p': preset = optarg; break;
        case 'P': list = optarg; break;
        case 'b': bad = cli_parse_int(optarg, "--batch", 1, 4096, &B, &err); break;
        case 'q': bad = cli_parse_int(optarg, "--prompt", 1, 1 << 16, &P, &err); break;
        case 'g': bad = cli_parse_int(optarg, "--gen-length", 1, 1 << 16, &G, &err); break;
        case 'k': bad = cli_parse_int(optarg, "--block-length", 1, 1 << 16, &blk, &err); break;
        case 's': bad = cli_parse_int(optarg, "--steps", 1, 32767, &steps, &err); break;
        case 't': bad = cli_parse_double(optarg, "--temperature", &temp, &err); break;
        case 'i': bad = cli_parse_int(optarg, "--iters", 1, 100000, &iters, &err); break;
        case 'w': bad = cli_parse_int(optarg, "--warmup", 0, 100000, &warmup, &err); break;
        case 'S': bad = cli_parse_int(optarg, "--seed", 0, 0x7fffffffffffffffL, &seed, &err); break;
        case 'h': fputs(usage_text, stdout); return 0;
        default: fputs(usage_text, stderr); return DLLM_EXIT_INPUT;
        }
        if (bad)
            return cli_fail("bench rollout", &err);
    }
    if (optind < argc) {
        fputs(usage_text, stderr);
        return DLLM_EXIT_INPUT;
    }
    /* the precision list */
    char names[MAX_PREC][16];
    dllm_precision precs[MAX_PREC];
    int np = 0;
    char *dup = dllm_strdup(list), *save = NULL;
    for (char *tok = strtok_r(dup, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (np == MAX_PREC || (strcmp(tok, "fp32") && strcmp(tok, "bf16") && strcmp(tok, "fp8"))) {
            dllm_err_set(&err, DLLM_EXIT_INPUT,
                         "--precision %s: expected a comma-separated list of fp32, bf16, fp8", list);
            free(dup);
            return cli_fail("bench rollout", &err);
        }
        snprintf(names[np], sizeof names[np], "%s", tok);
        dllm_precision_parse(&precs[np], "fp32", strcmp(tok, "fp32") ? tok : "trainer", "e4m3",
                              "block", false, &err);
        np++;
    }
    free(dup);
    if (np == 0) {
        dllm_err_set(&err, DLLM_EXIT_INPUT, "--precision: empty list");
        return cli_fail("bench rollout", &err);
    }
    dllm_model_config mc;
    if (dllm_config_preset(&mc, DLLM_ARCH_LLADA, preset, &err))
        return cli_fail("bench rollout", &err);
    dllm_sampler_cfg sc = {.gen_length = (int)G, .block_length = (int)blk, .steps = (int)steps,
                           .temperature = temp, .remasking = REMASK_LOW_CONFIDENCE,
                           .mask_id = mc.mask_token_id, .eos_id = mc.eos_token_id, .eot_id = -1,
                           .vocab = mc.embedding_size};
    if (dllm_sampler_check(&sc, &err))
        return cli_fail("bench rollout", &err);
    if (P + G > mc.max_seq_len) {
        dllm_err_set(&err, DLLM_EXIT_INPUT, "--prompt %ld + --gen-length %ld exceed the preset's "
                     "max_sequence_length %d", P, G, mc.max_seq_len);
        return cli_fail("bench rollout", &err);
    }
    dllm_tf *m = dllm_tf_create(&mc, (uint64_t)seed);
    /* random prompts over the ordinary tokens (ids past the specials 0..2 of the
     * small presets; any id but mask/eos for the published vocabularies) */
    int32_t *prompts = dllm_malloc(sizeof *prompts * (size_t)(B * P));
    dllm_rng r = dllm_rng_make((uint64_t)seed, DLLM_RNG_DATA, 7, 0);
    for (long i = 0; i < B * P; i++) {
        int32_t t;
        do
            t = (int32_t)dllm_rng_below(&r, (uint64_t)mc.vocab_size);
        while (t < 3 || t == mc.mask_token_id || t == mc.eos_token_id);
        prompts[i] = t;
    }
    printf("bench rollout: llada %s preset (d_model %d, %d layers), batch %ld, prompt %ld, "
           "gen-length %ld, block-length %ld, %ld steps, temperature %g; best of %ld after %ld "
           "warm-up\n", preset, mc.d_model, mc.n_layers, B, P, G, blk, steps, temp, iters, warmup);
    printf("%-9s %10s %12s %12s %12s %12s\n", "precision", "sync_s", "rollout_s", "step_ms",
           "tokens/s", "vs_first");
    double best[MAX_PREC];
    int rc = 0;
    for (int k = 0; k < np && !rc; k++) {
        double sync_s = 0;
        if ((rc = dllm_tf_rollout_sync(m, &precs[k], &sync_s, &err)))
            break;
        best[k] = 1e300;
        for (long it = 0; it < warmup + iters && !rc; it++) {
            dllm_rollout ro = {0};
            double t0 = dllm_now();
            rc = dllm_sample(rollout_fn, m, prompts, NULL, (int)B, (int)P, &sc, (uint64_t)seed, &ro,
                             &err);
            double dt = dllm_now() - t0;
            dllm_rollout_free(&ro);
            if (it >= warmup && dt < best[k])
                best[k] = dt;
        }
        if (rc)
            break;
        printf("%-9s %10.4f %12.4f %12.3f %12.1f %12.3f\n", names[k], sync_s, best[k],
               1e3 * best[k] / (double)steps, (double)(B * G) / best[k], best[k] / best[0]);
        fflush(stdout);
    }
    if (!rc) {
        int ib = -1, i8 = -1;
        for (int k = 0; k < np; k++) {
            if (!strcmp(names[k], "bf16"))
                ib = k;
            if (!strcmp(names[k], "fp8"))
                i8 = k;
        }
        if (ib >= 0 && i8 >= 0)
            printf("fp8/bf16 rollout time ratio: %.3f (%s)\n", best[i8] / best[ib],
                   best[i8] > best[ib]
                       ? "FP8 slower: on the CPU the FP8 GEMM is a simulation (quantise, "
                         "dequantise, fp32 GEMM); FP8 speed-ups need a GPU with FP8 GEMMs"
                       : "FP8 faster");
    }
    free(prompts);
    dllm_tf_free(m);
    return rc ? cli_fail("bench rollout", &err) : 0;
}
