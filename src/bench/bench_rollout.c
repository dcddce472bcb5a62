/* dllm-rl bench rollout: rollouts (docs/METHOD.md §2) at each rollout precision, on
 * one model -- a random one of a preset (--arch llada|qwen3), or --model DIR --
 * and the same random prompts, through the policy interface: the denoising
 * sampler for a masked-diffusion model, KV-cache decoding for an autoregressive
 * one.
 *
 * For every precision in --precision (fp32 = the trainer's numerics, bf16, fp8
 * = E4M3 128x128 blockwise W8A8 on the fast product, fp8-exact = its exact
 * simulation, nvfp4, int8 = W8A7 integer products; dllm/precision.h): open the model with that rollout copy
 * (the copy's build is timed: the weight sync), run --warmup untimed rollouts,
 * then --iters timed ones; report the best time per rollout, per denoising step
 * (per decoded position for AR), generated tokens/s, the time relative to the
 * first precision and, for a masked-diffusion model, the achieved GFLOP/s of a
 * step (counted below), to set against the peaks `bench gemm` measures.
 * --device cuda runs the model on the CUDA backend (dllm_tf_to_device); in the emulation
 * build the emulated allocator's peak is reported per precision, to set against the
 * itemised plan of `dllm-rl plan` (emulation proves the allocation, never the speed). */
#include "config.h"

#include "dllm/arch.h"
#include "dllm/policy_infer.h"
#include "dllm/precision.h"
#include "dllm/sampler.h"
#include "kernels/ops.h"
#include "kernels/rng.h"
#include "src/cli/cli_util.h"
#include "src/cli/commands.h"
#ifdef DLLM_CUDA_EMULATION
#include "kernels/cuda_emu/emu_hooks.h"
#endif

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char usage_text[] =
    "usage: dllm-rl bench rollout [--arch llada|qwen3|dream] [--preset tiny|small|llada-8b|qwen3-8b |\n"
    "         --model DIR] [--precision bf16,fp8] [--batch 4] [--prompt 32] [--gen-length 64]\n"
    "         [--block-length 16] [--steps 32] [--temperature 0.9] [--top-p 1] [--iters 3]\n"
    "         [--warmup 1] [--seed 0] [--clock wall|cpu] [--device cpu|cuda]\n"
    "         [--cache none|prefix|dual] [--cache-refresh N] [--threshold T]\n"
    "\n"
    "Rollouts of --batch random prompts on a random model of the preset (or on --model),\n"
    "at each precision of the comma-separated list (fp32 = the trainer's numerics; bf16;\n"
    "fp8 = E4M3 128x128 blockwise W8A8 on the fast product (bf16 dot products where the\n"
    "CPU has them); fp8-exact = the same copy simulated exactly (dequantise, fp32 GEMM);\n"
    "nvfp4 = W4A4, simulated; int8 = INT8 weights and 7-bit activations, exact integer\n"
    "products on oneDNN); prints the weight-sync time, the best time per rollout\n"
    "and per denoising step (llada) or per decoded position (qwen3: KV-cache decoding;\n"
    "--block-length and --steps do not apply), generated tokens/s (qwen3: tokens up to\n"
    "each row's EOS), the time relative to the first precision, and for llada the\n"
    "achieved GFLOP/s of a step: 2 x tokens x the layer linears' weights, plus attention\n"
    "(4 B T^2 QD per layer), plus the head on the rows the sampler asks for (estimated:\n"
    "the block's masked positions, on average B blk (spb + 1) / (2 spb), spb = steps per\n"
    "block), less the last layer's o_proj and MLP on the other rows, which it skips (but\n"
    "under nvfp4). Compare it with the peaks `dllm-rl bench gemm` measures.\n"
    "--cache and --threshold (llada) run the cached / parallel sampler (docs/METHOD.md\n"
    "§2a; --cache-refresh N: a full pass every N-th step of a block too); nfe is the\n"
    "forward passes of one rollout (per completion: each pass covers every row of the\n"
    "batch), step_ms the time per pass, and GFLOP/s is not printed (the count above is\n"
    "of full passes).\n"
    "--clock cpu times by the process's CPU time instead of wall time: per core-second,\n"
    "less sensitive to other jobs on a shared machine (use it with OMP_NUM_THREADS=1).\n"
    "--device cuda runs the model and the sampler's loop on the CUDA backend; under the\n"
    "CUDA emulation build it also prints the device memory peak of each precision\n"
    "(dev_peak_MiB: everything allocated, the backend's workspaces included), to compare\n"
    "with `dllm-rl plan`; the emulation's times say nothing about a GPU.\n"
    "Threads: OMP_NUM_THREADS / OPENBLAS_NUM_THREADS.\n";

/* Wall or process CPU seconds (--clock). */
static double clock_now(bool cpu)
{
    if (!cpu)
        return dllm_now();
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

enum { MAX_PREC = 8 };

int bench_rollout(int argc, char **argv)
{
    const char *preset = "tiny", *list = "bf16,fp8", *arch = "llada", *model_dir = NULL;
    const char *device = "cpu";
    long B = 4, P = 32, G = 64, blk = 16, steps = 32, iters = 3, warmup = 1, seed = 0;
    long refresh = 0;
    double temp = 0.9, top_p = 1, threshold = 0;
    dllm_cache cache = DLLM_CACHE_NONE;
    bool preset_given = false, cpu_clock = false;
    dllm_err err = {0};
    static const struct option opts[] = {
        {"preset", required_argument, 0, 'p'},     {"precision", required_argument, 0, 'P'},
        {"batch", required_argument, 0, 'b'},      {"prompt", required_argument, 0, 'q'},
        {"gen-length", required_argument, 0, 'g'}, {"block-length", required_argument, 0, 'k'},
        {"steps", required_argument, 0, 's'},      {"temperature", required_argument, 0, 't'},
        {"iters", required_argument, 0, 'i'},      {"warmup", required_argument, 0, 'w'},
        {"seed", required_argument, 0, 'S'},       {"arch", required_argument, 0, 'a'},
        {"model", required_argument, 0, 'm'},      {"top-p", required_argument, 0, 'T'},
        {"clock", required_argument, 0, 'c'},      {"device", required_argument, 0, 'U'},
        {"cache", required_argument, 0, 'X'},      {"threshold", required_argument, 0, 'H'},
        {"cache-refresh", required_argument, 0, 'R'},
        {"help", no_argument, 0, 'h'},             {0, 0, 0, 0}};
    optind = 1;
    for (int c; (c = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
        int bad = 0;
        switch (c) {
        case 'p': preset = optarg; preset_given = true; break;
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
        case 'a': arch = optarg; break;
        case 'm': model_dir = optarg; break;
        case 'U': device = optarg; break;
        case 'T': bad = cli_parse_double(optarg, "--top-p", &top_p, &err); break;
        case 'X':
            if (dllm_cache_parse(optarg, &cache))
                bad = dllm_err_set(&err, DLLM_EXIT_INPUT, "--cache %s: expected none, prefix or dual",
                                   optarg);
            break;
        case 'R': bad = cli_parse_int(optarg, "--cache-refresh", 1, 1000000, &refresh, &err); break;
        case 'H':
            bad = cli_parse_double(optarg, "--threshold", &threshold, &err);
            if (!bad && !(threshold > 0 && threshold <= 1))
                bad = dllm_err_set(&err, DLLM_EXIT_INPUT, "--threshold %s: expected a number in "
                                   "(0, 1]", optarg);
            break;
        case 'c':
            cpu_clock = !strcmp(optarg, "cpu");
            if (!cpu_clock && strcmp(optarg, "wall"))
                bad = dllm_err_set(&err, DLLM_EXIT_INPUT, "--clock %s: expected wall or cpu",
                                   optarg);
            break;
        case 'h': fputs(usage_text, stdout); return 0;
        default: fputs(usage_text, stderr); return DLLM_EXIT_INPUT;
        }
        if (bad)
            return cli_fail("bench rollout", &err);
    }
    if (optind < argc || (model_dir && preset_given)) {
        fputs(usage_text, stderr);
        return DLLM_EXIT_INPUT;
    }
    if (!dllm_arch_by_name(arch)) {
        char names[256];
        dllm_err_set(&err, DLLM_EXIT_INPUT, "--arch %s: expected %s", arch,
                     dllm_arch_list(names, sizeof names));
        return cli_fail("bench rollout", &err);
    }
    dllm_backend *dev_be = NULL;
    if (dllm_policy_device_parse(device, "--device", &dev_be, &err))
        return cli_fail("bench rollout", &err);
    if (refresh > 0 && cache == DLLM_CACHE_NONE) {
        dllm_err_set(&err, DLLM_EXIT_INPUT, "--cache-refresh %ld: refreshes a cache; give "
                     "--cache prefix or dual", refresh);
        return cli_fail("bench rollout", &err);
    }
    const bool fast = cache != DLLM_CACHE_NONE || threshold > 0;
    if (fast && strcmp(arch, "llada")) {
        dllm_err_set(&err, DLLM_EXIT_INPUT, "%s: LLaDA only (--arch llada)",
                     cache != DLLM_CACHE_NONE ? "--cache" : "--threshold");
        return cli_fail("bench rollout", &err);
    }
    bool peak = false; /* the emulated allocator's peak (a GPU's is not measured here) */
#ifdef DLLM_CUDA_EMULATION
    peak = dev_be != NULL;
#endif
    /* the precision list */
    char names[MAX_PREC][16];
    int np = 0;
    char *dup = dllm_strdup(list), *save = NULL;
    for (char *tok = strtok_r(dup, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        dllm_policy_cfg probe = {0};
        if (np == MAX_PREC || dllm_policy_infer_cfg(&probe, tok, "--precision", &err)) {
            dllm_err_set(&err, DLLM_EXIT_INPUT,
                         "--precision %s: expected a comma-separated list of fp32, bf16, fp8, "
                         "fp8-exact, nvfp4, int8", list);
            free(dup);
            return cli_fail("bench rollout", &err);
        }
        snprintf(names[np++], sizeof names[0], "%s", tok);
    }
    free(dup);
    if (np == 0) {
        dllm_err_set(&err, DLLM_EXIT_INPUT, "--precision: empty list");
        return cli_fail("bench rollout", &err);
    }
    /* the model's configuration, for the prompts and the checks (the timed
     * opens below build each precision's copy) */
    dllm_policy_cfg pc = {.path = model_dir, .preset = preset, .arch = arch, .seed = (uint64_t)seed,
                          .device = device, .device_flag = "--device"};
    dllm_policy *m = NULL;
    if (dllm_policy_infer_cfg(&pc, "fp32", "--precision", &err) || dllm_policy_open(&m, &pc, &err))
        return cli_fail("bench rollout", &err);
    const dllm_model_config mc = *dllm_policy_config(m);
    const bool diffusion = dllm_policy_is_diffusion(m);
    dllm_policy_free(m);
    m = NULL;
    /* forbid, as RL rollouts: a random model draws the mask token often, and under
     * allow those positions would be scored again at every later step, so the work
     * per step would depend on the weights rather than on the schedule */
    dllm_sampler_cfg sc = {.gen_length = (int)G, .block_length = (int)blk, .steps = (int)steps,
                           .temperature = temp, .remasking = REMASK_LOW_CONFIDENCE,
                           .mask_token = DLLM_MASK_TOKEN_FORBID, .mask_id = mc.mask_token_id, .eos_id = mc.eos_token_id, .eot_id = -1,
                           .vocab = mc.embedding_size, .cache = cache, .threshold = threshold,
                           .cache_refresh = (int)refresh};
    if (diffusion ? dllm_sampler_check(&sc, &err) : 0)
        return cli_fail("bench rollout", &err);
    if (!(temp >= 0) || !(top_p > 0 && top_p <= 1) || (diffusion && top_p != 1)) {
        dllm_err_set(&err, DLLM_EXIT_INPUT, "--temperature must be >= 0 and --top-p in (0, 1] "
                     "(and 1 for a masked-diffusion model)");
        return cli_fail("bench rollout", &err);
    }
    if (P + G > mc.max_seq_len) {
        dllm_err_set(&err, DLLM_EXIT_INPUT, "--prompt %ld + --gen-length %ld exceed the model's "
                     "max_sequence_length %d", P, G, mc.max_seq_len);
        return cli_fail("bench rollout", &err);
    }
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
    const char *what = model_dir ? model_dir : preset;
    if (diffusion)
        printf("bench rollout: %s %s (d_model %d, %d layers), batch %ld, prompt %ld, "
               "gen-length %ld, block-length %ld, %ld steps, temperature %g, cache %s, "
               "cache-refresh %ld, threshold %g; best of %ld after %ld warm-up%s\n",
               dllm_arch_get(mc.arch)->name, what, mc.d_model, mc.n_layers, B, P, G, blk, steps,
               temp, dllm_cache_name(cache), refresh, threshold, iters, warmup,
               cpu_clock ? "; CPU time" : "");
    else
        printf("bench rollout: %s %s (d_model %d, %d layers), %s decoding, batch %ld, "
               "prompt %ld, gen-length %ld, temperature %g, top-p %g; best of %ld after %ld "
               "warm-up%s\n", dllm_arch_get(mc.arch)->name, what, mc.d_model, mc.n_layers,
               dev_be ? "device KV-cache" : "KV-cache", B, P, G, temp, top_p, iters, warmup,
               cpu_clock ? "; CPU time" : "");
    if (dev_be)
        printf("device: %s%s\n", dev_be->name, peak ? " (emulated: times are not a GPU's)" : "");
    /* FLOPs of one denoising step (see the usage text) */
    double step_flops = 0, tail_flops = 0;
    if (diffusion) {
        double C = mc.d_model, QD = (double)mc.n_heads * mc.head_dim;
        double KD = (double)mc.n_kv_heads * mc.head_dim, H = mc.mlp_hidden, T = (double)(P + G);
        double plin = 2 * C * QD + 2 * C * KD + 3 * C * H, spb = (double)steps / (double)(G / blk);
        double hr = B * blk * (spb + 1) / (2 * spb); /* the head rows */
        /* the last layer's o_proj and MLP on the rows the head does not read: skipped
         * (dllm/transformer_impl.h, tf_head_rows_at), but under NVFP4 */
        tail_flops = 2 * (B * T - hr) * (C * QD + 3 * C * H);
        step_flops = mc.n_layers * (2 * B * T * plin + 4 * B * T * T * QD) +
                     2 * hr * C * mc.embedding_size - tail_flops;
    }
    printf("%-9s %10s %12s %12s %12s %12s%s%s%s\n", "precision", "sync_s", "rollout_s",
           diffusion ? "step_ms" : "token_ms", "tokens/s", "vs_first",
           diffusion ? "      nfe" : "", diffusion && !fast ? "      GFLOP/s" : "",
           peak ? " dev_peak_MiB" : "");
    double best[MAX_PREC];
    int rc = 0;
    for (int k = 0; k < np && !rc; k++) {
#ifdef DLLM_CUDA_EMULATION
        if (peak)
            dllm_emu_reset_stats(); /* the peak of this precision alone */
#endif
        if ((rc = dllm_policy_infer_cfg(&pc, names[k], "--precision", &err)) ||
            (rc = dllm_policy_open(&m, &pc, &err)))
            break;
        /* the copy's build, timed on its own (open built it once already) */
        double sync_s = 0;
        if ((rc = dllm_policy_sync_rollout(m, &sync_s, &err))) {
            dllm_policy_free(m);
            break;
        }
        best[k] = 1e300;
        long toks = B * G;
        int nfe = 0;
        for (long it = 0; it < warmup + iters && !rc; it++) {
            dllm_rollout ro = {0};
            double t0 = clock_now(cpu_clock);
            rc = dllm_policy_rollout(m, prompts, NULL, (int)B, (int)P, &sc, top_p, (uint64_t)seed,
                                     &ro, &err);
            double dt = clock_now(cpu_clock) - t0;
            if (!rc && !diffusion) { /* decoding stops at EOS: count what was decoded */
                toks = 0;
                for (long b = 0; b < B; b++)
                    toks += dllm_completion_length(ro.tokens + b * (P + G) + P, (int)G,
                                                   mc.eos_token_id);
            }
            nfe = ro.nfe;
            dllm_rollout_free(&ro);
            if (it >= warmup && dt < best[k])
                best[k] = dt;
        }
        double peak_mib = 0;
#ifdef DLLM_CUDA_EMULATION
        if (peak) {
            dllm_emu_stats st;
            dllm_emu_get_stats(&st);
            peak_mib = (double)st.peak_bytes / (1 << 20);
        }
#endif
        dllm_policy_free(m);
        m = NULL;
        if (rc)
            break;
        double step_s = best[k] / (double)(diffusion ? (nfe > 0 ? nfe : steps) : G);
        printf("%-9s %10.4f %12.4f %12.3f %12.1f %12.3f", names[k], sync_s, best[k],
               1e3 * step_s, (double)toks / best[k], best[k] / best[0]);
        if (diffusion)
            printf(" %8d", nfe);
        if (diffusion && !fast)
            printf(" %12.1f",
                   1e-9 * (step_flops + (strcmp(names[k], "nvfp4") ? 0 : tail_flops)) / step_s);
        if (peak)
            printf(" %12.2f", peak_mib);
        printf("\n");
        fflush(stdout);
    }
    if (!rc && diffusion && !fast)
        printf("one step: %.3f GFLOP (head rows estimated; nvfp4 %.3f)\n", 1e-9 * step_flops,
               1e-9 * (step_flops + tail_flops));
    /* what each precision's product is on this machine (dllm/precision.h) */
    for (int k = 0; k < np && !rc && strcmp(device, "cuda"); k++) {
        const char *rk = strcmp(names[k], "fp32") ? names[k] : "trainer";
        for (int j = DLLM_ROLLOUT_TRAINER; j <= DLLM_ROLLOUT_INT8; j++)
            if (!strcmp(rk, dllm_rollout_name((dllm_rollout_kind)j))) {
                const char *prod = dllm_rollout_cpu_product((dllm_rollout_kind)j, NULL);
                printf("path %-9s %s\n", names[k],
                       prod ? prod : "the trainer's fp32 product (the build's fp32 GEMM library)");
            }
    }
    if (!rc && strcmp(device, "cuda")) { /* what the numbers depend on: CPU, caps, libraries */
        char machine[512];
        op_cpu_paths(machine, sizeof machine);
        printf("machine: %s\n", machine);
    }
    free(prompts);
    return rc ? cli_fail("bench rollout", &err) : 0;
}
