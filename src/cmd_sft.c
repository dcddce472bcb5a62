/* dllm-rl sft: supervised fine-tuning. LLaDA: masked diffusion (METHOD.md §1);
 * Qwen3 (autoregressive): next-token cross-entropy on the answer tokens, the
 * mean over the batch's answer tokens.
 *
 * Per step: a batch of prompt/answer pairs (epoch-shuffled, seeded), padded
 * with EOS to data.answer_length answer tokens when set, else to the batch's
 * longest pair (the padding counts as answer, as in
 * LLaDA's SFT); per sequence t ~ U(0,1), p = (1 - 1e-3) t + 1e-3, each answer
 * token masked with probability p; loss = mean over sequences of
 * sum_masked CE / p / answer_len. AdamW with warmup and global-norm clipping.
 * Writes RUN_DIR = log.dir/experiment: config.yaml, sft_log.jsonl, and
 * checkpoints ckpt/step-N in HF layout (ckpt/latest points to the newest). */
#include "dllm/llada.h"
#include "dllm/qwen3.h"
#include "dllm/sft_loss.h"
#include "dllm/tokenizer.h"
#include "kernels/ops.h"
#include "kernels/rng.h"
#include "src/cli_util.h"
#include "src/commands.h"
#include "src/yaml_config.h"
#include "src/sft_data.h"

#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char usage_text[] =
    "usage: dllm-rl sft CONFIG.yaml [--set key.path=value ...] [--quiet]\n"
    "\n"
    "Masked-diffusion SFT on data.train (JSONL lines {\"prompt\": ..., \"answer\": ...}).\n"
    "Keys: experiment, seed, model.{path|preset,dtype,lora.{rank,alpha,targets}},\n"
    "data.{train,max_len,answer_length}, sft.{steps,batch_size}, optim.{lr,warmup,betas,eps,\n"
    "weight_decay,grad_clip}, log.{dir,every}, checkpoint.{every,keep}.\n"
    "Output: RUN_DIR = log.dir/experiment with config.yaml, sft_log.jsonl, ckpt/.\n";

typedef struct {
    const dllm_cfg *cfg;
    char run_dir[4096];
    char tok_path[4096]; /* tokenizer.json copied into every checkpoint */
} sft_run;

/* The model being fine-tuned: a LLaDA (masked diffusion) or a Qwen3 (next token). */
typedef struct {
    llada_model *llada;
    qwen3_model *qwen3;
} sft_model;

static const dllm_model_config *sm_config(const sft_model *m)
{
    return m->llada ? llada_config(m->llada) : qwen3_config(m->qwen3);
}

static float *sm_trainable(sft_model *m, size_t *n)
{
    return m->llada ? llada_trainable(m->llada, n) : qwen3_trainable(m->qwen3, n);
}

static float *sm_grads(sft_model *m)
{
    return m->llada ? llada_grads(m->llada) : qwen3_grads(m->qwen3);
}

static void sm_zero_grad(sft_model *m)
{
    if (m->llada)
        llada_zero_grad(m->llada);
    else
        qwen3_zero_grad(m->qwen3);
}

static int sm_save(const sft_model *m, const char *dir, st_dtype dt, dllm_err *err)
{
    return m->llada ? llada_save(m->llada, dir, dt, (size_t)5 << 30, err)
                    : qwen3_save(m->qwen3, dir, dt, (size_t)5 << 30, err);
}

static void sm_free(sft_model *m)
{
    if (m->llada)
        llada_free(m->llada);
    if (m->qwen3)
        qwen3_free(m->qwen3);
    m->llada = NULL;
    m->qwen3 = NULL;
}

/* ckpt/step-N written under a temporary name, then renamed; latest re-pointed;
 * older checkpoints beyond checkpoint.keep removed. */
static int save_checkpoint(const sft_run *r, sft_model *m, int step, dllm_err *err)
{
    char dir[4096], tmp[4200], final_[4200], link[4200], tmplink[4300];
    snprintf(dir, sizeof dir, "%s/ckpt", r->run_dir);
    if (cli_mkdirs(dir, err))
        return err->code;
    snprintf(tmp, sizeof tmp, "%s/.step-%d.tmp", dir, step);
    snprintf(final_, sizeof final_, "%s/step-%d", dir, step);
    cli_rm_tree(tmp);
    if (cli_mkdirs(tmp, err))
        return err->code;
    st_dtype dt = r->cfg->model.dtype;
    if (sm_save(m, tmp, dt, err))
        return err->code;
    char tokdst[4300];
    snprintf(tokdst, sizeof tokdst, "%s/tokenizer.json", tmp);
    if (cli_copy_file(r->tok_path, tokdst, err))
        return err->code;
    cli_rm_tree(final_);
    if (rename(tmp, final_))
        return dllm_err_set(err, DLLM_EXIT_INTERNAL, "%s: %s", final_, strerror(errno));
    snprintf(link, sizeof link, "%s/latest", dir);
    snprintf(tmplink, sizeof tmplink, "%s/.latest.tmp", dir);
    char target[64];
    snprintf(target, sizeof target, "step-%d", step);
    unlink(tmplink);
    if (symlink(target, tmplink) || rename(tmplink, link))
        return dllm_err_set(err, DLLM_EXIT_INTERNAL, "%s: %s", link, strerror(errno));
    int keep = r->cfg->checkpoint.keep, every = r->cfg->checkpoint.every;
    if (keep > 0 && every > 0)
        for (int s = step - keep * every; s > 0; s -= every) {
            char old[4200];
            snprintf(old, sizeof old, "%s/step-%d", dir, s);
            cli_rm_tree(old);
        }
    return 0;
}

/* Next-token SFT loss of an AR model: tokens (B, T), answers from prompt_len[b]
 * to len[b] (EOS included); loss = mean over answer tokens of -log p. */
static double ar_sft_loss(qwen3_model *m, const int32_t *tokens, const int32_t *prompt_len,
                          const int *len, int B, int T)
{
    const int V = qwen3_config(m)->embedding_size;
    int n = 0;
    for (int b = 0; b < B; b++)
        n += len[b] - prompt_len[b];
    int32_t *rows = dllm_malloc(sizeof *rows * (size_t)n), *target = dllm_malloc(sizeof *target * (size_t)n);
    uint8_t *km = dllm_malloc((size_t)B * T);
    int k = 0;
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++)
            km[(size_t)b * T + t] = t < len[b];
        for (int t = prompt_len[b] - 1; t < len[b] - 1; t++) {
            rows[k] = b * T + t;
            target[k++] = tokens[(size_t)b * T + t + 1];
        }
    }
    float *logits = dllm_malloc(sizeof *logits * (size_t)n * V);
    float *logp = dllm_malloc(sizeof *logp * (size_t)n), *lse = dllm_malloc(sizeof *lse * (size_t)n);
    float *dlogp = dllm_malloc(sizeof *dlogp * (size_t)n);
    double loss = NAN;
    if (qwen3_forward(m, tokens, km, B, T, rows, n, logits) == 0) {
        op_xent_fwd(logp, lse, logits, target, n, V);
        loss = 0;
        for (int i = 0; i < n; i++) {
            loss -= logp[i];
            dlogp[i] = -1.0f / (float)n;
        }
        loss /= n;
        float *dlogits = dllm_calloc((size_t)n * V, sizeof *dlogits);
        op_xent_bwd(dlogits, dlogp, logits, lse, target, n, V);
        qwen3_backward(m, dlogits);
        free(dlogits);
    }
    free(rows);
    free(target);
    free(km);
    free(logits);
    free(logp);
    free(lse);
    free(dlogp);
    return loss;
}

static int load_model(const dllm_cfg *cfg, sft_model *m, dllm_tokenizer **tok, char *tok_path,
                      size_t tok_len, const char *run_dir, dllm_err *err)
{
    memset(m, 0, sizeof *m);
    dllm_model_config mc;
    if (cfg->model.path[0]) {
        if (dllm_config_load(&mc, cfg->model.path, err))
            return err->code;
        if (mc.arch == DLLM_ARCH_QWEN3 ? qwen3_load(&m->qwen3, cfg->model.path, err)
                                       : llada_load(&m->llada, cfg->model.path, err))
            return err->code;
        snprintf(tok_path, tok_len, "%s/tokenizer.json", cfg->model.path);
    } else {
        dllm_arch arch = cfg->model.arch;
        if (dllm_config_preset(&mc, arch, cfg_names_name(&cfg_names_preset, cfg->model.preset), err))
            return err->code;
        if (arch == DLLM_ARCH_QWEN3)
            m->qwen3 = qwen3_create(&mc, (uint64_t)cfg->seed);
        else
            m->llada = llada_create(&mc, (uint64_t)cfg->seed);
        snprintf(tok_path, tok_len, "%s/tokenizer.json", run_dir);
        if (dllm_tokenizer_write_char(tok_path, err))
            return err->code;
    }
    if (dllm_tokenizer_load(tok, tok_path, err))
        return err->code;
    if (cfg->model.lora.rank > 0) {
        int mask = 0;
        for (int i = 0; i < cfg->model.lora.targets.n; i++)
            mask |= m->llada ? llada_lora_target_bit(cfg->model.lora.targets.items[i])
                             : qwen3_lora_target_bit(cfg->model.lora.targets.items[i]);
        if (m->llada)
            llada_lora_enable(m->llada, cfg->model.lora.rank, (float)cfg->model.lora.alpha, mask,
                              (uint64_t)cfg->seed);
        else
            qwen3_lora_enable(m->qwen3, cfg->model.lora.rank, (float)cfg->model.lora.alpha, mask,
                              (uint64_t)cfg->seed);
    }
    return 0;
}

static int parse_args(int argc, char **argv, dllm_cfg *cfg, int *quiet, dllm_err *err)
{
    static const struct option opts[] = {{"set", required_argument, 0, 's'},
                                         {"quiet", no_argument, 0, 'q'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    const char *sets[64];
    int nsets = 0;
    optind = 1;
    for (int c; (c = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
        switch (c) {
        case 's':
            if (nsets == 64)
                return dllm_err_set(err, DLLM_EXIT_INPUT, "too many --set options");
            sets[nsets++] = optarg;
            break;
        case 'q': *quiet = 1; break;
        case 'h': fputs(usage_text, stdout); exit(0);
        default: return dllm_err_set(err, DLLM_EXIT_INPUT, "bad option (see --help)");
        }
    }
    if (optind != argc - 1)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "expected one CONFIG.yaml (see --help)");
    dllm_cfg_defaults(cfg);
    if (dllm_cfg_load(cfg, argv[optind], err))
        return err->code;
    for (int i = 0; i < nsets; i++)
        if (dllm_cfg_set(cfg, sets[i], err))
            return err->code;
    if (!cfg->data.train[0])
        return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: data.train is required", argv[optind]);
    return dllm_cfg_validate(cfg, err);
}

int cmd_sft(int argc, char **argv)
{
    dllm_cfg cfg;
    dllm_err err = {0};
    int quiet = 0;
    if (parse_args(argc, argv, &cfg, &quiet, &err))
        return cli_fail("sft", &err);
    if (cfg.device == CFG_DEVICE_CUDA) {
        dllm_err_set(&err, DLLM_EXIT_INPUT, "device: cuda is not available for sft in this build");
        return cli_fail("sft", &err);
    }
    sft_run run = {.cfg = &cfg};
    snprintf(run.run_dir, sizeof run.run_dir, "%s/%s", cfg.log.dir, cfg.experiment);
    if (cli_mkdirs(run.run_dir, &err))
        return cli_fail("sft", &err);
    {   /* the effective config, for the record */
        char p[4200];
        snprintf(p, sizeof p, "%s/config.yaml", run.run_dir);
        char *text = dllm_cfg_dump(&cfg);
        FILE *f = fopen(p, "w");
        if (f) {
            fputs(text, f);
            fclose(f);
        }
        free(text);
    }
    sft_model sm, *m = &sm;
    dllm_tokenizer *tok = NULL;
    sft_dataset ds = {0};
    int rc = load_model(&cfg, m, &tok, run.tok_path, sizeof run.tok_path, run.run_dir, &err);
    if (!rc && cfg.data.answer_length > 0 && !m->llada)
        rc = dllm_err_set(&err, DLLM_EXIT_INPUT,
                          "data.answer_length pads answers for masked diffusion; an "
                          "autoregressive model stops at its EOS (leave it at 0)");
    if (!rc)
        rc = sft_data_load(&ds, cfg.data.train, tok, sm_config(m), cfg.data.max_len,
                           cfg.data.answer_length, cfg.sft.chat, &err);
    if (rc) {
        sm_free(m);
        dllm_tokenizer_free(tok);
        return cli_fail("sft", &err);
    }
    const dllm_model_config *mc = sm_config(m);
    size_t nparam;
    float *params = sm_trainable(m, &nparam);
    float *grads = sm_grads(m);
    int *lens = dllm_malloc(sizeof *lens * (size_t)cfg.sft.batch_size);
    float *adam_m = dllm_calloc(nparam, sizeof(float));
    float *adam_v = dllm_calloc(nparam, sizeof(float));
    int B = cfg.sft.batch_size;
    int32_t *tokens = dllm_malloc(sizeof *tokens * (size_t)B * (size_t)ds.max_len);
    int32_t *prompt_len = dllm_malloc(sizeof *prompt_len * (size_t)B);
    uint8_t *mask = dllm_malloc((size_t)B * (size_t)ds.max_len);
    double *p_mask = dllm_malloc(sizeof *p_mask * (size_t)B);
    int *order = dllm_malloc(sizeof *order * (size_t)ds.n);
    int *batch = dllm_malloc(sizeof *batch * (size_t)B);
    int cursor = ds.n, epoch = -1;

    char logpath[4200];
    snprintf(logpath, sizeof logpath, "%s/sft_log.jsonl", run.run_dir);
    FILE *logf = fopen(logpath, "w");
    if (!logf) {
        dllm_err_set(&err, DLLM_EXIT_INPUT, "%s: %s", logpath, strerror(errno));
        rc = err.code;
        goto done;
    }
    if (!quiet)
        printf("sft: %d examples, %s model (%zu trainable parameters%s), %d steps of %d\n", ds.n,
               cfg.model.path[0] ? cfg.model.path : cfg_names_name(&cfg_names_preset, cfg.model.preset),
               nparam,
               cfg.model.lora.rank ? ", LoRA" : "", cfg.sft.steps, B);
    double t0 = dllm_now(), loss_acc = 0;
    long tokens_acc = 0;
    int n_acc = 0;
    for (int step = 1; step <= cfg.sft.steps; step++) {
        /* batch: the next B examples of a seeded per-epoch permutation */
        int T = 0;
        for (int b = 0; b < B; b++) {
            if (cursor == ds.n) {
                dllm_rng r = dllm_rng_make((uint64_t)cfg.seed, DLLM_RNG_DATA, (uint64_t)++epoch, 0);
                for (int i = 0; i < ds.n; i++)
                    order[i] = i;
                for (int i = ds.n - 1; i > 0; i--) {
                    int j = (int)dllm_rng_below(&r, (uint64_t)i + 1), t = order[i];
                    order[i] = order[j];
                    order[j] = t;
                }
                cursor = 0;
            }
            const sft_example *e = &ds.ex[order[cursor++]];
            prompt_len[b] = e->prompt_len;
            batch[b] = (int)(e - ds.ex);
            if (e->len > T)
                T = e->len;
        }
        for (int b = 0; b < B; b++) {
            const sft_example *e = &ds.ex[batch[b]];
            lens[b] = e->len;
            int32_t *row = tokens + (size_t)b * (size_t)T;
            memcpy(row, e->ids, sizeof *row * (size_t)e->len);
            for (int t = e->len; t < T; t++)
                row[t] = mc->eos_token_id;
            dllm_rng r = dllm_rng_make((uint64_t)cfg.seed, DLLM_RNG_SFT, (uint64_t)step, (uint64_t)b);
            sft_draw_mask(&r, prompt_len[b], T, mask + (size_t)b * (size_t)T, &p_mask[b]);
        }
        sm_zero_grad(m);
        double loss = m->llada ? llada_sft_loss(m->llada, tokens, mask, p_mask, prompt_len, B, T, true)
                               : ar_sft_loss(m->qwen3, tokens, prompt_len, lens, B, T);
        double norm = op_grad_norm(grads, nparam);
        if (cfg.optim.grad_clip > 0)
            op_clip_grad(grads, nparam, norm, cfg.optim.grad_clip);
        double lr = dllm_cfg_lr(&cfg, step, cfg.sft.steps);
        op_adamw(params, grads, adam_m, adam_v, nparam, step, (float)lr, (float)cfg.optim.betas[0],
                 (float)cfg.optim.betas[1], (float)cfg.optim.eps, (float)cfg.optim.weight_decay);
        if (!isfinite(loss)) {
            dllm_err_set(&err, DLLM_EXIT_INTERNAL, "step %d: loss is not finite (lr too high?)", step);
            rc = err.code;
            goto done;
        }
        loss_acc += loss;
        tokens_acc += (long)B * T;
        n_acc++;
        if (step % cfg.log.every == 0 || step == cfg.sft.steps) {
            double el = dllm_now() - t0;
            fprintf(logf,
                    "{\"step\": %d, \"loss\": %.9g, \"grad_norm\": %.6g, \"lr\": %.6g, "
                    "\"tokens_per_s\": %.1f, \"elapsed_s\": %.3f}\n",
                    step, loss_acc / n_acc, norm, lr, tokens_acc / (el > 0 ? el : 1), el);
            fflush(logf);
            if (!quiet)
                printf("step %5d/%d  loss %.4f  grad_norm %.3f  lr %.2e  %.0f tok/s  ETA %.0fs\n",
                       step, cfg.sft.steps, loss_acc / n_acc, norm, lr,
                       tokens_acc / (el > 0 ? el : 1),
                       el / step * (cfg.sft.steps - step));
            fflush(stdout);
            loss_acc = 0;
            n_acc = 0;
        }
        if ((cfg.checkpoint.every > 0 && step % cfg.checkpoint.every == 0) ||
            step == cfg.sft.steps) {
            if ((rc = save_checkpoint(&run, m, step, &err)))
                goto done;
        }
    }
    if (!quiet)
        printf("done: %s/ckpt/latest\n", run.run_dir);
done:
    if (logf)
        fclose(logf);
    free(adam_m);
    free(adam_v);
    free(tokens);
    free(prompt_len);
    free(mask);
    free(p_mask);
    free(order);
    free(batch);
    free(lens);
    sft_data_free(&ds);
    dllm_tokenizer_free(tok);
    sm_free(m);
    return rc ? cli_fail("sft", &err) : 0;
}
