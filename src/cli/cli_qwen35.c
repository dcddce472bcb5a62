/* cli_qwen35.c: `dllm-rl score` and `dllm-rl generate` on a Qwen3.5 checkpoint
 * (dllm/qwen35.h). The model runs on the host in fp32 (or its bf16 copy), one sequence
 * at a time;
 * what the other architectures take beyond that (low-precision copies, a device)
 * is refused with the reason, exit 2. */
#include "src/cli/cli_qwen35.h"
#include "dllm/ar_sampler.h"
#include "dllm/qwen35.h"
#include "dllm/tokenizer.h"
#include "src/data/prompt.h"
#include "kernels/rng.h"
#include "src/cli/cli_util.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool cli_is_qwen35(const char *dir)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    return qwen35_is_config(path);
}

/* The flags a Qwen3.5 model does not take yet: --precision other than fp32 and bf16, a
 * device. */
static int refuse(const char *precision, const char *device, dllm_err *err)
{
    if (precision && strcmp(precision, "fp32") && strcmp(precision, "bf16"))
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "--precision %s: a Qwen3.5 model runs in fp32 or bf16 only so far "
                            "(docs/QWEN35.md)", precision);
    if (device && strcmp(device, "cpu"))
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "--device %s: a Qwen3.5 model runs on the CPU only so far "
                            "(docs/QWEN35.md)", device);
    return 0;
}

int cli_qwen35_score(const char *dir, const int32_t *prompt, int np, const int32_t *compl,
                     int nc, double temperature, const char *estimator, const char *mask_flag,
                     const char *precision, const char *device, dllm_err *err)
{
    int rc = refuse(precision, device, err);
    if (!rc && estimator && strcmp(estimator, "exact"))
        rc = dllm_err_set(err, DLLM_EXIT_INPUT,
                          "--estimator %s: a Qwen3.5 model is autoregressive, scored exactly "
                          "(exact)", estimator);
    if (!rc && mask_flag)
        rc = dllm_err_set(err, DLLM_EXIT_INPUT,
                          "%s: a flag of the masked-diffusion estimators; an autoregressive "
                          "(qwen3.5) model is scored exactly, without masks", mask_flag);
    if (!rc && nc == 0)
        rc = dllm_err_set(err, DLLM_EXIT_INPUT, "--completion-ids: empty completion");
    qwen35_model *m = NULL;
    if (!rc)
        rc = qwen35_load(&m, dir, err);
    if (!rc && precision && !strcmp(precision, "bf16"))
        qwen35_round_bf16(m);
    double *tl = dllm_malloc(((size_t)nc + 1) * sizeof(double)), seq = 0;
    if (!rc)
        rc = qwen35_seq_logprob(m, prompt, np, compl, nc, temperature, &seq, tl, err);
    if (!rc) {
        printf("{\"seq_logp\": ");
        cli_print_json_number(stdout, seq, 17);
        printf(", \"token_logp\": [");
        for (int i = 0; i < nc; i++) {
            if (i)
                printf(", ");
            cli_print_json_number(stdout, tl[i], 9);
        }
        printf("], \"estimator\": \"exact\"}\n");
    }
    free(tl);
    qwen35_free(m);
    return rc;
}

/* The prompt's ids: text through the chat format (chat "auto": the directory's) and
 * DIR/tokenizer.json, as the other architectures encode it (dllm/prompt.h); *tok is
 * loaded when text is given or printed. */
static int prompt_of(const char *dir, const qwen35_config *c, const char *text, const char *chat,
                     bool need_tok, dllm_tokenizer **tok, int32_t **ids, int *n, dllm_err *err)
{
    int rc = 0;
    if (need_tok) {
        char tp[4096];
        snprintf(tp, sizeof tp, "%s/tokenizer.json", dir);
        rc = dllm_tokenizer_load(tok, tp, err);
    }
    if (rc || !text)
        return rc;
    dllm_chat_format fmt;
    rc = strcmp(chat, "auto") ? dllm_chat_format_parse(chat, &fmt, err)
                              : dllm_chat_format_from_dir(dir, &fmt, err);
    /* prompt_encode reads the model's BOS id only */
    dllm_model_config mc = {.bos_token_id = c->bos_token_id};
    free(*ids);
    *ids = NULL;
    return rc ? rc : prompt_encode(*tok, fmt, &mc, text, ids, n, err);
}

int cli_qwen35_generate(const char *dir, const int32_t *prompt_ids, int np_ids, const char *text,
                        const char *chat, int gen, double temperature, double top_p,
                        uint64_t seed, const char *format, const char *precision,
                        const char *device, dllm_err *err)
{
    int rc = refuse(precision, device, err);
    qwen35_model *m = NULL;
    if (!rc)
        rc = qwen35_load(&m, dir, err);
    if (rc)
        return rc;
    if (precision && !strcmp(precision, "bf16"))
        qwen35_round_bf16(m);
    const qwen35_config *c = qwen35_config_of(m);
    dllm_tokenizer *tok = NULL;
    int np = np_ids;
    int32_t *prompt = dllm_malloc(((size_t)np + 1) * sizeof(int32_t));
    if (np)
        memcpy(prompt, prompt_ids, (size_t)np * sizeof(int32_t));
    rc = prompt_of(dir, c, text, chat, text || strcmp(format, "ids"), &tok, &prompt, &np, err);
    for (int i = 0; !rc && i < np; i++)
        if (prompt[i] < 0 || prompt[i] >= c->V)
            rc = dllm_err_set(err, DLLM_EXIT_INPUT, "%s: id %d is outside the vocabulary (%d)",
                              text ? "--prompt" : "--prompt-ids", prompt[i], c->V);
    if (!rc && np == 0)
        rc = dllm_err_set(err, DLLM_EXIT_INPUT, "%s: empty prompt",
                          text ? "--prompt" : "--prompt-ids");
    dllm_ar_cfg ac = {.max_new_tokens = gen, .temperature = temperature, .top_p = top_p,
                      .eos_id = c->eos_token_id};
    rc = rc ? rc : dllm_ar_check(&ac, c->V, err);
    int32_t *out = dllm_calloc((size_t)gen + 1, sizeof(int32_t));
    float *lg = dllm_malloc(((size_t)c->V + 1) * sizeof(float));
    void *work = dllm_malloc(dllm_ar_work_bytes(c->V));
    qwen35_cache *kc = rc ? NULL : qwen35_cache_new(m, np + gen);
    int n = 0;
    if (!rc)
        rc = qwen35_extend(m, kc, prompt, np, lg, false, err);
    /* the AR sampler's choice and keyed stream (dllm/ar_sampler.h), row 0 */
    for (int g = 0; g < gen && !rc; g++) {
        dllm_rng r = dllm_rng_make(seed, DLLM_RNG_SAMPLER, (uint64_t)g, 0);
        int32_t next = dllm_ar_choose(lg, c->V, temperature, top_p, dllm_rng_uniform(&r), NULL,
                                      NULL, work);
        out[n++] = next;
        if (next == ac.eos_id || g == gen - 1)
            break;
        rc = qwen35_extend(m, kc, &next, 1, lg, false, err);
    }
    for (int g = n; g < gen && !rc; g++)
        out[g] = ac.eos_id >= 0 ? ac.eos_id : 0;
    char *txt = NULL;
    size_t tlen = 0;
    if (!rc && strcmp(format, "ids"))
        rc = completion_decode(tok, out, n, ac.eos_id, &txt, &tlen, err);
    if (!rc && !strcmp(format, "ids")) {
        for (int i = 0; i < gen; i++)
            printf("%s%d", i ? "," : "", out[i]);
        printf("\n");
    } else if (!rc && !strcmp(format, "text")) {
        fwrite(txt, 1, tlen, stdout);
        printf("\n");
    } else if (!rc) {
        json_t *o = json_pack("{s:s%, s:s%, s:i}", "text", txt, tlen, "completion", txt, tlen,
                              "completion_length", n);
        json_t *ids = json_array();
        for (int i = 0; i < gen; i++)
            json_array_append_new(ids, json_integer(out[i]));
        json_object_set_new(o, "ids", ids);
        char *d = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
        printf("%s\n", d ? d : "{}");
        free(d);
        json_decref(o);
    }
    free(txt);
    free(prompt);
    dllm_tokenizer_free(tok);
    qwen35_cache_free(kc);
    free(out);
    free(lg);
    free(work);
    qwen35_free(m);
    return rc;
}

int cli_qwen35_init_model(const char *preset, const char *out, uint64_t seed, const char *dtype,
                          bool weights, bool force, dllm_err *err)
{
    qwen35_config c;
    int rc = qwen35_preset(preset, &c, err);
    if (rc)
        return rc;
    bool big = qwen35_preset_published(preset);
    const char *torch_dtype = dtype ? (strcmp(dtype, "bf16") ? "float32" : "bfloat16")
                              : big ? "bfloat16" : "float32";
    st_dtype st = strcmp(torch_dtype, "bfloat16") ? ST_F32 : ST_BF16;
    if (!force && (rc = cli_refuse_existing(out, "the output directory", false, err)))
        return rc;
    char dir[4400];
    if ((rc = cli_stage_dir(out, dir, sizeof dir, err)))
        return rc;
    rc = qwen35_config_save(&c, dir, torch_dtype, err);
    /* shard like the published checkpoints (about 5 GB per file) */
    if (!rc && (!big || weights))
        rc = qwen35_write_random(&c, dir, seed, st, (size_t)5 << 30, err);
    if (!rc && !big) {
        char path[4600];
        snprintf(path, sizeof path, "%s/tokenizer.json", dir);
        rc = dllm_tokenizer_write_char(path, err);
    }
    rc = rc ? rc : cli_commit_dir(dir, out, err);
    if (rc) {
        cli_rm_tree(dir);
        return rc;
    }
    if (big && !weights)
        printf("wrote %s/config.json (qwen3.5 %s, %.2fB parameters; weights not written, use "
               "--weights)\n", out, preset, (double)qwen35_num_params(&c) / 1e9);
    else
        printf("wrote %s (qwen3.5 %s, %.3fM parameters, %s)\n", out, preset,
               (double)qwen35_num_params(&c) / 1e6, st_dtype_name(st));
    return 0;
}
