/* dllm-rl generate: denoising-step generation with the reference sampler. */
#include "dllm/chat.h"
#include "dllm/llada.h"
#include "dllm/sampler.h"
#include "dllm/tokenizer.h"
#include "src/cli_util.h"
#include "src/commands.h"
#include "src/prompt.h"

#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage_text[] =
    "usage: dllm-rl generate --model DIR (--prompt TEXT | --prompt-ids 1,2,3 | --batch-file F)\n"
    "         [--gen-length 64] [--block-length 16] [--steps 32] [--temperature 0]\n"
    "         [--remasking low_confidence|random] [--cfg-scale 0] [--logits-eos-inf]\n"
    "         [--confidence-eos-eot-inf] [--seed 0] [--chat auto|plain|llada|qwen3]\n"
    "         [--precision fp32|bf16|fp8] [--format text|ids|json]\n"
    "\n"
    "Text prompts are wrapped in the model's chat format (--chat auto: from the model\n"
    "directory; plain: BOS + text) and encoded with DIR/tokenizer.json. --batch-file\n"
    "holds one JSON object per line, {\"prompt\": \"...\"} or {\"prompt_ids\": [...]};\n"
    "prompts of different lengths are left-padded with a key mask.\n"
    "--format ids prints only the generated ids (all gen-length of them), comma-separated,\n"
    "one line per prompt; text prints the completion up to the first EOS; json prints\n"
    "ids, text, completion length, commit steps and commit probabilities.\n"
    "--precision: fp32 computes as the trainer; bf16 with a bf16 copy of the weights;\n"
    "fp8 with an FP8 (E4M3, 128x128 blockwise W8A8) copy of the block linears.\n";

typedef struct {
    int32_t *ids;
    int n;
} prompt_ids;

static int encode_text(const char *text, dllm_tokenizer *tok, dllm_chat_format fmt,
                       const dllm_model_config *mc, prompt_ids *out, dllm_err *err)
{
    return prompt_encode(tok, fmt, mc, text, &out->ids, &out->n, err);
}

static int read_batch_file(const char *path, dllm_tokenizer **tok, const char *model_dir,
                           dllm_chat_format fmt, const dllm_model_config *mc, prompt_ids **out,
                           int *n, dllm_err *err)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: cannot open", path);
    char *line = NULL;
    size_t cap = 0;
    int lineno = 0, rc = 0, k = 0, capn = 0;
    prompt_ids *p = NULL;
    while (getline(&line, &cap, f) != -1 && !rc) {
        lineno++;
        if (line[strspn(line, " \t\r\n")] == '\0')
            continue;
        json_error_t je;
        json_t *o = json_loads(line, 0, &je);
        json_t *text = o ? json_object_get(o, "prompt") : NULL;
        json_t *ids = o ? json_object_get(o, "prompt_ids") : NULL;
        if (k == capn)
            p = dllm_realloc(p, sizeof *p * (size_t)(capn = capn ? 2 * capn : 16));
        if (!o) {
            rc = dllm_err_set(err, DLLM_EXIT_INPUT, "%s:%d:%d: invalid JSON: %s", path, lineno,
                              je.column, je.text);
        } else if (json_is_string(text)) {
            if (!*tok) {
                char tp[4096];
                snprintf(tp, sizeof tp, "%s/tokenizer.json", model_dir);
                rc = dllm_tokenizer_load(tok, tp, err);
            }
            if (!rc && (rc = encode_text(json_string_value(text), *tok, fmt, mc, &p[k], err)))
                dllm_err_prefix(err, "%s:%d", path, lineno);
            k += !rc;
        } else if (json_is_array(ids) && json_array_size(ids) > 0) {
            p[k].n = (int)json_array_size(ids);
            p[k].ids = dllm_malloc(sizeof *p[k].ids * (size_t)p[k].n);
            for (int i = 0; i < p[k].n && !rc; i++) {
                json_t *v = json_array_get(ids, (size_t)i);
                if (!json_is_integer(v) || json_integer_value(v) < 0 ||
                    json_integer_value(v) >= mc->vocab_size)
                    rc = dllm_err_set(err, DLLM_EXIT_INPUT,
                                      "%s:%d: prompt_ids[%d] is not a token id of this model", path,
                                      lineno, i);
                else
                    p[k].ids[i] = (int32_t)json_integer_value(v);
            }
            k++;
        } else {
            rc = dllm_err_set(err, DLLM_EXIT_INPUT,
                              "%s:%d: expected {\"prompt\": \"...\"} or {\"prompt_ids\": [...]}", path,
                              lineno);
        }
        json_decref(o);
    }
    free(line);
    fclose(f);
    if (!rc && k == 0)
        rc = dllm_err_set(err, DLLM_EXIT_INPUT, "%s: no prompts", path);
    if (rc) {
        for (int i = 0; i < k; i++)
            free(p[i].ids);
        free(p);
        return rc;
    }
    *out = p;
    *n = k;
    return 0;
}

static int forward_fn(void *m, const int32_t *tokens, const uint8_t *keymask, int B, int T,
                      const int32_t *rows, int n_rows, float *logits)
{
    return dllm_tf_forward_rollout(m, tokens, keymask, B, T, rows, n_rows, logits);
}

static void print_json_string(FILE *f, const char *s, size_t len)
{
    json_t *j = json_stringn_nocheck(s, len);
    char *d = json_dumps(j, JSON_ENCODE_ANY);
    fputs(d ? d : "null", f);
    free(d);
    json_decref(j);
}

int cmd_generate(int argc, char **argv)
{
    const char *model_dir = NULL, *prompt = NULL, *ids_s = NULL, *batch_file = NULL;
    const char *format = "text", *chat = "auto", *precision = "fp32", *remask = "low_confidence";
    long gen = 64, block = 16, steps = 32, seed = 0;
    double temp = 0, cfg_scale = 0;
    int eos_inf = 0, conf_inf = 0;
    dllm_err err = {0};
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'},        {"prompt", required_argument, 0, 'p'},
        {"prompt-ids", required_argument, 0, 'i'},   {"batch-file", required_argument, 0, 'b'},
        {"gen-length", required_argument, 0, 'g'},   {"block-length", required_argument, 0, 'k'},
        {"steps", required_argument, 0, 's'},        {"temperature", required_argument, 0, 't'},
        {"remasking", required_argument, 0, 'r'},    {"cfg-scale", required_argument, 0, 'c'},
        {"logits-eos-inf", no_argument, 0, 'E'},     {"confidence-eos-eot-inf", no_argument, 0, 'C'},
        {"seed", required_argument, 0, 'S'},         {"chat", required_argument, 0, 'a'},
        {"precision", required_argument, 0, 'P'},    {"format", required_argument, 0, 'f'},
        {"help", no_argument, 0, 'h'},               {0, 0, 0, 0}};
    optind = 1;
    for (int c; (c = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
        int bad = 0;
        switch (c) {
        case 'm': model_dir = optarg; break;
        case 'p': prompt = optarg; break;
        case 'i': ids_s = optarg; break;
        case 'b': batch_file = optarg; break;
        case 'g': bad = cli_parse_int(optarg, "--gen-length", 1, 1 << 20, &gen, &err); break;
        case 'k': bad = cli_parse_int(optarg, "--block-length", 1, 1 << 20, &block, &err); break;
        case 's': bad = cli_parse_int(optarg, "--steps", 1, 32767, &steps, &err); break;
        case 't': bad = cli_parse_double(optarg, "--temperature", &temp, &err); break;
        case 'r': remask = optarg; break;
        case 'c': bad = cli_parse_double(optarg, "--cfg-scale", &cfg_scale, &err); break;
        case 'E': eos_inf = 1; break;
        case 'C': conf_inf = 1; break;
        case 'S': bad = cli_parse_int(optarg, "--seed", 0, 0x7fffffffffffffffL, &seed, &err); break;
        case 'a': chat = optarg; break;
        case 'P': precision = optarg; break;
        case 'f': format = optarg; break;
        case 'h': fputs(usage_text, stdout); return 0;
        default: fputs(usage_text, stderr); return DLLM_EXIT_INPUT;
        }
        if (bad)
            return cli_fail("generate", &err);
    }
    if (optind < argc || !model_dir || (!!prompt + !!ids_s + !!batch_file) != 1) {
        fputs(usage_text, stderr);
        return DLLM_EXIT_INPUT;
    }
    if (strcmp(format, "text") && strcmp(format, "ids") && strcmp(format, "json")) {
        dllm_err_set(&err, DLLM_EXIT_INPUT, "--format %s: expected text, ids or json", format);
        return cli_fail("generate", &err);
    }
    if (strcmp(remask, "low_confidence") && strcmp(remask, "random")) {
        dllm_err_set(&err, DLLM_EXIT_INPUT, "--remasking %s: expected low_confidence or random", remask);
        return cli_fail("generate", &err);
    }
    /* --precision: fp32 = the trainer's numerics, bf16 = the bf16 copy, fp8 = the
     * E4M3 blockwise W8A8 copy (dllm/precision.h) */
    dllm_precision prec;
    if ((strcmp(precision, "fp32") && strcmp(precision, "bf16") && strcmp(precision, "fp8")) ||
        dllm_precision_parse(&prec, "fp32", strcmp(precision, "fp32") ? precision : "trainer",
                              "e4m3", "block", false, &err)) {
        dllm_err_set(&err, DLLM_EXIT_INPUT, "--precision %s: expected fp32, bf16 or fp8", precision);
        return cli_fail("generate", &err);
    }
    dllm_tf *m;
    if (dllm_tf_load(&m, model_dir, &err))
        return cli_fail("generate", &err);
    if (dllm_tf_rollout_sync(m, &prec, NULL, &err)) {
        dllm_tf_free(m);
        return cli_fail("generate", &err);
    }
    const dllm_model_config *mc = dllm_tf_config(m);
    dllm_tokenizer *tok = NULL;
    dllm_chat_format fmt = DLLM_CHAT_PLAIN;
    prompt_ids *ps = NULL;
    int np = 0, rc = 0;
    if (!strcmp(chat, "auto"))
        rc = dllm_chat_format_from_dir(model_dir, &fmt, &err);
    else
        rc = dllm_chat_format_parse(chat, &fmt, &err);
    bool need_tok = prompt || !strcmp(format, "text") || !strcmp(format, "json");
    if (!rc && need_tok) {
        char tp[4096];
        snprintf(tp, sizeof tp, "%s/tokenizer.json", model_dir);
        rc = dllm_tokenizer_load(&tok, tp, &err);
    }
    if (!rc && prompt) {
        ps = dllm_calloc(1, sizeof *ps);
        np = 1;
        rc = encode_text(prompt, tok, fmt, mc, ps, &err);
    } else if (!rc && ids_s) {
        ps = dllm_calloc(1, sizeof *ps);
        np = 1;
        rc = cli_parse_ids(ids_s, "--prompt-ids", &ps->ids, &ps->n, &err);
        for (int i = 0; !rc && i < ps->n; i++)
            if (ps->ids[i] >= mc->vocab_size)
                rc = dllm_err_set(&err, DLLM_EXIT_INPUT, "--prompt-ids: %d is outside the vocabulary (%d)",
                                  ps->ids[i], mc->vocab_size);
        if (!rc && ps->n == 0)
            rc = dllm_err_set(&err, DLLM_EXIT_INPUT, "--prompt-ids: empty prompt");
    } else if (!rc) {
        rc = read_batch_file(batch_file, &tok, model_dir, fmt, mc, &ps, &np, &err);
    }
    dllm_sampler_cfg sc = {.gen_length = (int)gen, .block_length = (int)block, .steps = (int)steps,
                           .temperature = temp,
                           .remasking = strcmp(remask, "random") ? REMASK_LOW_CONFIDENCE : REMASK_RANDOM,
                           .cfg_scale = cfg_scale, .logits_eos_inf = eos_inf,
                           .confidence_eos_eot_inf = conf_inf, .mask_id = mc->mask_token_id,
                           .eos_id = mc->eos_token_id, .eot_id = -1, .vocab = mc->embedding_size};
    if (tok) {
        sc.eot_id = dllm_tokenizer_token_to_id(tok, "<|eot_id|>");
    }
    int P = 0;
    for (int i = 0; i < np; i++)
        P = ps[i].n > P ? ps[i].n : P;
    if (!rc)
        rc = dllm_sampler_check(&sc, &err);
    if (!rc && P + gen > mc->max_seq_len)
        rc = dllm_err_set(&err, DLLM_EXIT_INPUT, "prompt (%d) + gen-length (%ld) exceed max_sequence_length %d",
                          P, gen, mc->max_seq_len);
    dllm_rollout r = {0};
    if (!rc) {
        /* left-pad to the longest prompt with EOS, excluded by the key mask */
        int32_t *prompts = dllm_malloc(sizeof *prompts * (size_t)np * P);
        uint8_t *pm = dllm_malloc((size_t)np * P);
        bool padded = false;
        for (int b = 0; b < np; b++) {
            int pad = P - ps[b].n;
            padded |= pad > 0;
            for (int t = 0; t < P; t++) {
                prompts[(size_t)b * P + t] = t < pad ? mc->eos_token_id : ps[b].ids[t - pad];
                pm[(size_t)b * P + t] = t >= pad;
            }
        }
        rc = dllm_sample(forward_fn, m, prompts, padded ? pm : NULL, np, P, &sc, (uint64_t)seed, &r,
                         &err);
        free(prompts);
        free(pm);
    }
    for (int b = 0; !rc && b < np; b++) {
        const int32_t *g = r.tokens + (size_t)b * (P + gen) + P;
        int len = dllm_completion_length(g, (int)gen, mc->eos_token_id);

        if (!strcmp(format, "ids")) {
            for (int i = 0; i < gen; i++)
                printf("%s%d", i ? "," : "", g[i]);
            printf("\n");
            continue;
        }
        char *text = NULL;
        size_t tlen = 0;
        if ((rc = completion_decode(tok, g, len, mc->eos_token_id, &text, &tlen, &err)))
            break;
        if (!strcmp(format, "text")) {
            fwrite(text, 1, tlen, stdout);
            printf("\n");
        } else {
            printf("{\"ids\": [");
            for (int i = 0; i < gen; i++)
                printf("%s%d", i ? ", " : "", g[i]);
            printf("], \"text\": ");
            print_json_string(stdout, text, tlen);
            printf(", \"completion_length\": %d, \"commit_step\": [", len);
            for (int i = 0; i < gen; i++)
                printf("%s%d", i ? ", " : "", r.commit_step[(size_t)b * gen + i]);
            printf("], \"commit_prob\": [");
            for (int i = 0; i < gen; i++) {
                printf("%s", i ? ", " : "");
                cli_print_json_number(stdout, r.commit_prob[(size_t)b * gen + i], 7);
            }
            printf("]}\n");
        }
        free(text);
    }
    dllm_rollout_free(&r);
    for (int i = 0; i < np; i++)
        free(ps[i].ids);
    free(ps);
    dllm_tokenizer_free(tok);
    dllm_tf_free(m);
    return rc ? cli_fail("generate", &err) : 0;
}
