/* dllm-rl bench: throughput measurements (never timed tests).
 *
 * bench train: SFT forward+backward (dllm/policy_sft.h: masked diffusion for
 * LLaDA, next-token for Qwen3) on a random model of a preset or on a model
 * directory; reports tokens/s (batch*seq tokens per forward+backward). */
#include "dllm/arch.h"
#include "dllm/policy_sft.h"
#include "kernels/ops.h"
#include "kernels/rng.h"
#include "src/cli/cli_util.h"
#include "src/cli/commands.h"

#include <getopt.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char usage_text[] =
    "usage: dllm-rl bench train|rollout|mismatch|rl-step|gemm ...  (each with --help)\n"
    "       dllm-rl bench train [--arch llada|qwen3|dream|qwen3.5]\n"
    "                           [--preset tiny|small|llada-8b|qwen3-8b |\n"
    "                           --model DIR] [--batch B] [--seq T] [--iters N] [--warmup N]\n"
    "                           [--lora RANK] [--device cpu] [--clock wall|cpu]\n"
    "\n"
    "train: SFT forward+backward tokens/s (masked diffusion for llada, next-token for\n"
    "qwen3 and qwen3.5 -- qwen3.5 one row at a time, its tokens/s without a\n"
    "FLOP count; the first quarter of each sequence is the prompt) on randomly initialised\n"
    "weights of the preset or on the weights of --model (default: llada small preset, an\n"
    "architecture without it its first; batch 4 x 256 tokens, 5 timed iterations after 1\n"
    "warm-up).\n"
    "--clock cpu times by the process's CPU time instead of wall time: per core-second,\n"
    "less sensitive to other jobs on a shared machine (use it with OMP_NUM_THREADS=1).\n"
    "Threads: OMP_NUM_THREADS / OPENBLAS_NUM_THREADS.\n";

/* Wall or process CPU seconds (--clock). */
static double train_clock(bool cpu)
{
    if (!cpu)
        return dllm_now();
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int bench_train(int argc, char **argv)
{
    const char *preset = "small", *device = "cpu", *arch = "llada", *model_dir = NULL;
    long B = 4, T = 256, iters = 5, warmup = 1, lora = 0;
    bool preset_given = false, cpu_clock = false;
    dllm_err err = {0};
    static const struct option opts[] = {
        {"preset", required_argument, 0, 'p'}, {"batch", required_argument, 0, 'b'},
        {"seq", required_argument, 0, 't'},    {"iters", required_argument, 0, 'i'},
        {"warmup", required_argument, 0, 'w'}, {"lora", required_argument, 0, 'l'},
        {"device", required_argument, 0, 'd'}, {"arch", required_argument, 0, 'a'},
        {"model", required_argument, 0, 'm'},  {"clock", required_argument, 0, 'c'},
        {"help", no_argument, 0, 'h'},         {0, 0, 0, 0}};
    optind = 1;
    for (int c; (c = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
        int bad = 0;
        switch (c) {
        case 'p': preset = optarg; preset_given = true; break;
        case 'b': bad = cli_parse_int(optarg, "--batch", 1, 4096, &B, &err); break;
        case 't': bad = cli_parse_int(optarg, "--seq", 2, 1 << 16, &T, &err); break;
        case 'i': bad = cli_parse_int(optarg, "--iters", 1, 100000, &iters, &err); break;
        case 'w': bad = cli_parse_int(optarg, "--warmup", 0, 100000, &warmup, &err); break;
        case 'l': bad = cli_parse_int(optarg, "--lora", 0, 4096, &lora, &err); break;
        case 'd': device = optarg; break;
        case 'a': arch = optarg; break;
        case 'm': model_dir = optarg; break;
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
            return cli_fail("bench", &err);
    }
    if (optind < argc || (model_dir && preset_given)) {
        fputs(usage_text, stderr);
        return DLLM_EXIT_INPUT;
    }
    if (strcmp(device, "cpu")) {
        dllm_err_set(&err, DLLM_EXIT_INPUT, "--device %s: this build benchmarks the CPU backend",
                     device);
        return cli_fail("bench", &err);
    }
    const dllm_arch_desc *ad = dllm_arch_by_name(arch);
    if (!ad) {
        char names[256];
        dllm_err_set(&err, DLLM_EXIT_INPUT, "--arch %s: expected %s", arch,
                     dllm_arch_list(names, sizeof names));
        return cli_fail("bench", &err);
    }
    if (!preset_given && !dllm_arch_preset_get(ad, preset)) /* its smallest size */
        preset = ad->presets[0].name;
    dllm_policy_cfg pc = {.path = model_dir, .preset = preset, .arch = arch, .seed = 1,
                          .lora_rank = (int)lora, .lora_alpha = 2.0 * (double)lora,
                          .trainer = "fp32", .rollout = "trainer"};
    if (!model_dir) /* timings only, but never mistaken for a trained model's */
        cli_warn_random_model("bench train", arch, preset);
    dllm_policy *m;
    if (dllm_policy_open(&m, &pc, &err))
        return cli_fail("bench", &err);
    const dllm_model_config *mc = dllm_policy_config(m);
    if (T > mc->max_seq_len) {
        dllm_err_set(&err, DLLM_EXIT_INPUT, "--seq %ld exceeds the model's max_sequence_length %d",
                     T, mc->max_seq_len);
        dllm_policy_free(m);
        return cli_fail("bench", &err);
    }
    size_t n = (size_t)B * (size_t)T;
    int32_t *tokens = dllm_malloc(sizeof *tokens * n);
    int32_t *plen = dllm_malloc(sizeof *plen * (size_t)B);
    int *len = dllm_malloc(sizeof *len * (size_t)B);
    uint8_t *mask = dllm_malloc(n);
    double *p = dllm_malloc(sizeof *p * (size_t)B);
    dllm_rng r = dllm_rng_make(1, DLLM_RNG_DATA, 0, 0);
    for (size_t i = 0; i < n; i++)
        tokens[i] = (int32_t)dllm_rng_below(&r, (uint64_t)mc->vocab_size);
    for (long b = 0; b < B; b++) {
        plen[b] = (int32_t)(T / 4 > 0 ? T / 4 : 1);
        len[b] = (int)T;
        p[b] = 0.5;
        for (long t = 0; t < T; t++)
            mask[b * T + t] = t >= plen[b] && dllm_rng_uniform(&r) < 0.5;
    }
    double loss = 0, t0 = 0;
    int rc = 0;
    for (long it = 0; it < warmup + iters && !rc; it++) {
        if (it == warmup)
            t0 = train_clock(cpu_clock);
        dllm_optim_zero_grad(dllm_policy_optim(m));
        rc = dllm_policy_sft_loss(m, tokens, mask, p, plen, len, (int)B, (int)T, true, &loss, &err);
    }
    double el = train_clock(cpu_clock) - t0;
    if (!rc) {
        size_t np = 0;
        dllm_optim_trainable(dllm_policy_optim(m), &np);
        const bool core = dllm_arch_in_core(dllm_arch_get(dllm_policy_arch(m)));
        printf("bench train: %s %s (%.1fM params%s), %s SFT, batch %ld x %ld tokens, %d threads%s; "
               "fp32 GEMM %s\n",
               dllm_arch_get(dllm_policy_arch(m))->name,
               model_dir ? model_dir : preset,
               (double)(core || lora ? dllm_config_num_params(mc) : (int64_t)np) / 1e6,
               lora ? ", LoRA" : "", dllm_policy_is_diffusion(m) ? "masked-diffusion" : "next-token",
               B, T, omp_get_max_threads(), cpu_clock ? ", CPU time" : "",
               op_gemm_library_name(op_gemm_library()));
        /* FLOPs: the forward's layer linears (2 x tokens x weights), attention (4 B T^2
         * QD per layer) and the head on the masked rows (LLaDA; every row for next-token
         * SFT), and a backward twice the forward (a product for the input gradient and
         * one for the weight's); a frozen base under LoRA makes this an upper bound */
        double C = mc->d_model, QD = (double)mc->n_heads * mc->head_dim;
        double KD = (double)mc->n_kv_heads * mc->head_dim, H = mc->mlp_hidden;
        double plin = 2 * C * QD + 2 * C * KD + 3 * C * H, rows = 0;
        for (size_t i = 0; i < n; i++)
            rows += dllm_policy_is_diffusion(m) ? mask[i] : 1;
        double fwd = mc->n_layers * (2.0 * (double)n * plin + 4.0 * B * (double)T * T * QD) +
                     2 * rows * C * mc->embedding_size;
        if (core)
            printf("  %.3f s per forward+backward, %.1f tokens/s, %.1f GFLOP/s (loss %.4f; %.2f "
                   "GFLOP per step, backward counted as twice the forward)\n", el / (double)iters,
                   (double)n * (double)iters / el, 3e-9 * fwd * (double)iters / el, loss,
                   3e-9 * fwd);
        else /* the FLOP count above is the core's block */
            printf("  %.3f s per forward+backward, %.1f tokens/s (loss %.4f)\n",
                   el / (double)iters, (double)n * (double)iters / el, loss);
    }
    free(tokens);
    free(plen);
    free(len);
    free(mask);
    free(p);
    dllm_policy_free(m);
    return rc ? cli_fail("bench", &err) : 0;
}

int cmd_bench(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        fputs(usage_text, argc < 2 ? stderr : stdout);
        return argc < 2 ? DLLM_EXIT_INPUT : 0;
    }
    /* `dllm-rl bench NAME -h` is `--help`, as for every command */
    for (int i = 2; i < argc; i++)
        if (!strcmp(argv[i], "-h"))
            argv[i] = (char *)"--help";
    if (!strcmp(argv[1], "train"))
        return bench_train(argc - 1, argv + 1);
    if (!strcmp(argv[1], "rollout"))
        return bench_rollout(argc - 1, argv + 1);
    if (!strcmp(argv[1], "mismatch"))
        return bench_mismatch(argc - 1, argv + 1);
    if (!strcmp(argv[1], "rl-step"))
        return bench_rl_step(argc - 1, argv + 1);
    if (!strcmp(argv[1], "gemm"))
        return bench_gemm(argc - 1, argv + 1);
    fprintf(stderr, "dllm-rl bench: unknown benchmark '%s' (available: train, rollout, mismatch, rl-step, gemm)\n",
            argv[1]);
    return DLLM_EXIT_INPUT;
}
