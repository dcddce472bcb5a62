/* dllm-rl generate: generation from a model of any architecture through the
 * policy interface (dllm/policy.h): the reference denoising sampler for a
 * LLaDA model, Dream's timestep-schedule sampler for a Dream model, KV-cache
 * decoding (greedy, or temperature/top-p sampling) for an autoregressive one. */
#include "dllm/chat.h"
#include "dllm/dream_sampler.h"
#include "dllm/policy_infer.h"
#include "dllm/sampler.h"
#include "dllm/tokenizer.h"
#include "src/cli/cli_util.h"
#include "src/cli/commands.h"
#include "src/config/gen_settings.h"
#include "src/data/prompt.h"

#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage_text[] =
    "usage: dllm-rl generate --model DIR (--prompt TEXT | --prompt-ids 1,2,3 | --batch-file F)\n"
    "         [--gen-length 64] [--temperature 0] [--seed 0] [--chat auto|plain|llada|qwen3|qwen2.5|qwen3.5]\n"
    "         [--d1] [--precision fp32|bf16|fp8|fp8-exact|nvfp4|int8] [--format text|ids|json]\n"
    "         [--nvfp4-scaling block16|block32|channel|tensor] [--device cpu|cuda]\n"
    "         masked diffusion (llada): [--block-length 16] [--steps 32]\n"
    "           [--remasking low_confidence|random] [--cfg-scale 0] [--logits-eos-inf]\n"
    "           [--confidence-eos-eot-inf] [--mask-token allow|forbid]\n"
    "           [--cache none|prefix|dual] [--cache-refresh N] [--threshold T]\n"
    "         autoregressive (qwen3, qwen3.5): [--top-p 1]\n"
    "         masked diffusion (dream): [--steps 32] [--alg origin|maskgit_plus|topk_margin|entropy]\n"
    "           [--eps 0.001] [--alg-temp 0] [--top-p 1] [--top-k 0] [--mask-token allow|forbid]\n"
    "\n"
    "A masked-diffusion model is decoded by the reference denoising sampler; an\n"
    "autoregressive one left to right with a KV cache: greedy at --temperature 0, else\n"
    "sampled from softmax(logits / T) restricted to the --top-p nucleus; a row stops\n"
    "at its EOS (the rest of its gen-length is EOS). Flags of the other kind of model\n"
    "are refused.\n"
    "A Qwen3.5 model (docs/QWEN35.md) takes --prompt-ids, --gen-length, --temperature,\n"
    "--top-p, --seed and --format ids|json so far, on the CPU in fp32.\n"
    "--cache prefix|dual (LLaDA, on the CPU): at each block's start one full pass keeps\n"
    "every layer's keys and values and commits as the plain sampler; the block's later\n"
    "steps recompute only the block and everything after it (prefix) or the block alone\n"
    "(dual) over them (Fast-dLLM; docs/METHOD.md §2a); --cache-refresh N makes every\n"
    "N-th step of a block such a full pass too (1: the uncached ids). --threshold T in\n"
    "(0, 1]: a step\n"
    "commits every masked position of the block whose confidence is >= T and always the\n"
    "most confident one; the block ends when none is masked (with or without --cache).\n"
    "A Dream model is decoded by Dream's published sampler: no blocks, --steps over the\n"
    "timestep schedule linspace(1, --eps, steps + 1); --alg origin commits each masked\n"
    "position with probability 1 - s/t, the others commit the int(masked * (1 - s/t))\n"
    "most confident positions (maskgit_plus: top probability, topk_margin: top1 - top2,\n"
    "entropy: negative entropy), drawn by softmax(confidence / --alg-temp) when it is\n"
    "above 0; tokens come from softmax(logits / T) after --top-p and --top-k (0: off).\n"
    "Text prompts are wrapped in the model's chat format (--chat auto: from the model\n"
    "directory -- its chat template, plain for a char tokenizer, else its architecture;\n"
    "plain: BOS + text) and encoded with DIR/tokenizer.json; --d1 puts d1's reasoning\n"
    "format instruction before the text. --batch-file holds one JSON object per line,\n"
    "{\"prompt\": \"...\"} or {\"prompt_ids\": [...]}; prompts of different lengths are\n"
    "left-padded with a key mask.\n"
    "--format ids prints only the generated ids (all gen-length of them), comma-separated,\n"
    "one line per prompt; text prints the completion up to the first EOS; json prints\n"
    "ids, text, completion length, commit steps and commit probabilities (for an\n"
    "autoregressive model commit step t is token t, and its probability is the one\n"
    "it was sampled with, 1 when greedy).\n"
    CLI_PRECISION_HELP
    "--device cuda runs the model's forwards on the CUDA backend (weights, rollout copy\n"
    "and activations in device memory) and the sampler's loop there too (the canvas, the\n"
    "block cache of --cache and the KV cache in device memory; the host sees a count of\n"
    "rows per step and the result); cpu (the default) on the host. Without a usable CUDA device (or\n"
    "in a build without CUDA) cuda is refused, saying why.\n"
    "--mask-token: allow (default, the published sampler) lets x0 be the mask token,\n"
    "which leaves the position masked to compete again later; forbid never draws it,\n"
    "so every generated position ends with a real token. --format json reports the\n"
    "positions still masked at the end (masked_left).\n"
    "--format json also writes the text as \"completion\" and echoes every other\n"
    "field of a --batch-file line (e.g. a task's reference fields), so its output is\n"
    "the input of `dllm-rl grade NAME --input`.\n"
    "Defaults: DIR/generation.json (written by sft with every checkpoint: the\n"
    "gen-length, block-length, steps, temperature, remasking, top-p and chat format\n"
    "the model was trained for) supplies every setting not given as a flag; without\n"
    "it the defaults above apply.\n";

typedef struct {
    int32_t *ids;
    int n;
    json_t *extra; /* --batch-file: the line's other fields, echoed by --format json */
} prompt_ids;

/* the keys --format json writes itself */
static bool own_key(const char *k)
{
    static const char *const keys[] = {"prompt", "prompt_ids", "ids", "text", "completion",
                                       "completion_length", "commit_step", "commit_prob",
                                       "masked_left", NULL};
    for (int i = 0; keys[i]; i++)
        if (!strcmp(k, keys[i]))
            return true;
    return false;
}

static json_t *extra_fields(json_t *o)
{
    json_t *x = json_object();
    const char *k;
    json_t *v;
    json_object_foreach(o, k, v)
        if (!own_key(k))
            json_object_set(x, k, v);
    return x;
}

static bool d1_format; /* --d1 */

static int encode_text(const char *text, dllm_tokenizer *tok, dllm_chat_format fmt,
                       const dllm_model_config *mc, prompt_ids *out, dllm_err *err)
{
    int rc = prompt_encode_d1(tok, fmt, mc, text, d1_format, &out->ids, &out->n, err);
    static bool warned; /* once: a batch file may hold many such prompts */
    if (!rc && !warned && prompt_unknown_chars(tok, text, out->ids, (size_t)out->n)) {
        fprintf(stderr, "dllm-rl generate: warning: the prompt has characters the tokenizer "
                        "cannot represent (non-ASCII under the char tokenizer): they become "
                        "<|unk|>\n");
        warned = true;
    }
    return rc;
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
            if (!rc)
                p[k].extra = extra_fields(o);
            k += !rc;
        } else if (json_is_array(ids) && json_array_size(ids) > 0) {
            p[k].n = (int)json_array_size(ids);
            p[k].ids = dllm_malloc(sizeof *p[k].ids * (size_t)p[k].n);
            p[k].extra = extra_fields(o);
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
        for (int i = 0; i < k; i++) {
            free(p[i].ids);
            json_decref(p[i].extra);
        }
        free(p);
        return rc;
    }
    *out = p;
    *n = k;
    return 0;
}

static void print_json_string(FILE *f, const char *s, size_t len)
{
    json_t *j = json_stringn_nocheck(s, len);
    char *d = json_dumps(j, JSON_ENCODE_ANY);
    fputs(d ? d : "null", f);
    free(d);
    json_decref(j);
}

/* Left-pads the prompts to the longest with EOS, excluded by the key mask
 * (*mask NULL when no prompt is padded). */
static void pad_prompts(const prompt_ids *ps, int np, int P, int32_t pad_id, int32_t **prompts,
                        uint8_t **mask)
{
    *prompts = dllm_malloc(sizeof **prompts * (size_t)np * P);
    *mask = dllm_malloc((size_t)np * P);
    bool padded = false;
    for (int b = 0; b < np; b++) {
        int pad = P - ps[b].n;
        padded |= pad > 0;
        for (int t = 0; t < P; t++) {
            (*prompts)[(size_t)b * P + t] = t < pad ? pad_id : ps[b].ids[t - pad];
            (*mask)[(size_t)b * P + t] = t >= pad;
        }
    }
    if (!padded) {
        free(*mask);
        *mask = NULL;
    }
}

int cmd_generate(int argc, char **argv)
{
    const char *model_dir = NULL, *prompt = NULL, *ids_s = NULL, *batch_file = NULL;
    const char *format = "text", *chat = "auto", *precision = "fp32", *remask = "low_confidence";
    const char *device = "cpu", *nvfp4 = NULL;
    long gen = 64, block = 16, steps = 32, seed = 0;
    double temp = 0, cfg_scale = 0, top_p = 1;
    dllm_dream_cfg dream = dllm_dream_cfg_default();
    long top_k = 0;
    int eos_inf = 0, conf_inf = 0;
    /* flags given: they override the checkpoint's generation.json */
    bool set_gen = false, set_block = false, set_steps = false, set_temp = false,
         set_remask = false, set_chat = false, set_top_p = false;
    /* Dream's flags given: they override generation.json's "dream" */
    bool set_alg = false, set_eps = false, set_alg_temp = false, set_top_k = false;
    dllm_mask_token mask_token = DLLM_MASK_TOKEN_ALLOW;
    dllm_cache cache = DLLM_CACHE_NONE;
    double threshold = 0;
    long cache_refresh = 0;
    /* the last flag given of each kind of model, refused for the other kind */
    const char *denoise_flag = NULL, *ar_flag = NULL;
    /* LLaDA's block sampler only, and Dream's sampler only */
    const char *llada_flag = NULL, *dream_flag = NULL;
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
        {"top-p", required_argument, 0, 'T'},        {"d1", no_argument, 0, 'D'},
        {"mask-token", required_argument, 0, 'M'},   {"alg", required_argument, 0, 'A'},
        {"eps", required_argument, 0, 'e'},          {"alg-temp", required_argument, 0, 'L'},
        {"top-k", required_argument, 0, 'K'},        {"device", required_argument, 0, 'U'},
        {"cache", required_argument, 0, 'X'},        {"threshold", required_argument, 0, 'H'},
        {"nvfp4-scaling", required_argument, 0, 'N'}, {"cache-refresh", required_argument, 0, 'R'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    optind = 1;
    d1_format = false;
    for (int c; (c = getopt_long(argc, argv, "h", opts, NULL)) != -1;) {
        int bad = 0;
        switch (c) {
        case 'm': model_dir = optarg; break;
        case 'p': prompt = optarg; break;
        case 'i': ids_s = optarg; break;
        case 'b': batch_file = optarg; break;
        case 'g':
            bad = cli_parse_int(optarg, "--gen-length", 1, 1 << 20, &gen, &err);
            set_gen = true;
            break;
        case 'k':
            bad = cli_parse_int(optarg, "--block-length", 1, 1 << 20, &block, &err);
            denoise_flag = llada_flag = "--block-length";
            set_block = true;
            break;
        case 's':
            bad = cli_parse_int(optarg, "--steps", 1, 32767, &steps, &err);
            denoise_flag = "--steps";
            set_steps = true;
            break;
        case 't':
            bad = cli_parse_double(optarg, "--temperature", &temp, &err);
            set_temp = true;
            break;
        case 'r':
            remask = optarg;
            denoise_flag = llada_flag = "--remasking";
            set_remask = true;
            break;
        case 'c':
            bad = cli_parse_double(optarg, "--cfg-scale", &cfg_scale, &err);
            denoise_flag = llada_flag = "--cfg-scale";
            break;
        case 'X':
            if (dllm_cache_parse(optarg, &cache))
                bad = dllm_err_set(&err, DLLM_EXIT_INPUT, "--cache %s: expected none, prefix or dual",
                                   optarg);
            denoise_flag = llada_flag = "--cache";
            break;
        case 'H':
            bad = cli_parse_double(optarg, "--threshold", &threshold, &err);
            if (!bad && !(threshold > 0 && threshold <= 1))
                bad = dllm_err_set(&err, DLLM_EXIT_INPUT, "--threshold %s: expected a number in "
                                   "(0, 1]", optarg);
            denoise_flag = llada_flag = "--threshold";
            break;
        case 'R':
            bad = cli_parse_int(optarg, "--cache-refresh", 1, 1000000, &cache_refresh, &err);
            denoise_flag = llada_flag = "--cache-refresh";
            break;
        case 'E': eos_inf = 1; denoise_flag = llada_flag = "--logits-eos-inf"; break;
        case 'C': conf_inf = 1; denoise_flag = llada_flag = "--confidence-eos-eot-inf"; break;
        case 'A':
            if (dllm_dream_alg_parse(optarg, &dream.alg))
                bad = dllm_err_set(&err, DLLM_EXIT_INPUT,
                                   "--alg %s: expected origin, maskgit_plus, topk_margin or entropy",
                                   optarg);
            denoise_flag = dream_flag = "--alg";
            set_alg = true;
            break;
        case 'e':
            bad = cli_parse_double(optarg, "--eps", &dream.eps, &err);
            denoise_flag = dream_flag = "--eps";
            set_eps = true;
            break;
        case 'L':
            bad = cli_parse_double(optarg, "--alg-temp", &dream.alg_temp, &err);
            denoise_flag = dream_flag = "--alg-temp";
            set_alg_temp = true;
            break;
        case 'K':
            bad = cli_parse_int(optarg, "--top-k", 0, 1 << 30, &top_k, &err);
            denoise_flag = dream_flag = "--top-k";
            set_top_k = true;
            break;
        case 'S': bad = cli_parse_int(optarg, "--seed", 0, 0x7fffffffffffffffL, &seed, &err); break;
        case 'a': chat = optarg; set_chat = true; break;
        case 'P': precision = optarg; break;
        case 'N': nvfp4 = optarg; break;
        case 'U': device = optarg; break;
        case 'f': format = optarg; break;
        case 'T':
            bad = cli_parse_double(optarg, "--top-p", &top_p, &err);
            ar_flag = "--top-p";
            set_top_p = true;
            break;
        case 'M':
            if (dllm_mask_token_parse(optarg, &mask_token))
                bad = dllm_err_set(&err, DLLM_EXIT_INPUT, "--mask-token %s: expected allow or forbid",
                                   optarg);
            denoise_flag = "--mask-token";
            break;
        case 'D': d1_format = true; break;
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
    /* the sampler settings the checkpoint was trained for, where no flag is given */
    ckpt_generation gs;
    ckpt_generation_default(&gs, true, (int)gen);
    gs.block_length = (int)block;
    gs.steps = (int)steps;
    snprintf(gs.chat, sizeof gs.chat, "%s", chat);
    int grc = ckpt_read_generation(model_dir, &gs, &err);
    if (grc > 0)
        return cli_fail("generate", &err);
    static char gen_chat[16], gen_remask[32];
    if (grc == 0) {
        gen = set_gen ? gen : gs.gen_length;
        block = set_block ? block : gs.block_length;
        steps = set_steps ? steps : gs.steps;
        temp = set_temp ? temp : gs.temperature;
        top_p = set_top_p ? top_p : gs.top_p;
        snprintf(gen_remask, sizeof gen_remask, "%s", gs.remasking);
        snprintf(gen_chat, sizeof gen_chat, "%s", gs.chat);
        remask = set_remask ? remask : gen_remask;
        chat = set_chat ? chat : gen_chat;
        if (gs.dream) { /* a Dream checkpoint's sampler (read for Dream models only) */
            dream.alg = set_alg ? dream.alg : gs.dcfg.alg;
            dream.eps = set_eps ? dream.eps : gs.dcfg.eps;
            dream.alg_temp = set_alg_temp ? dream.alg_temp : gs.dcfg.alg_temp;
            top_k = set_top_k ? top_k : gs.dcfg.top_k;
        }
    }
    if (strcmp(format, "text") && strcmp(format, "ids") && strcmp(format, "json")) {
        dllm_err_set(&err, DLLM_EXIT_INPUT, "--format %s: expected text, ids or json", format);
        return cli_fail("generate", &err);
    }
    if (strcmp(remask, "low_confidence") && strcmp(remask, "random")) {
        dllm_err_set(&err, DLLM_EXIT_INPUT, "--remasking %s: expected low_confidence or random", remask);
        return cli_fail("generate", &err);
    }
    if (!(temp >= 0) || !(top_p > 0 && top_p <= 1)) {
        dllm_err_set(&err, DLLM_EXIT_INPUT, "--temperature must be >= 0 and --top-p in (0, 1]");
        return cli_fail("generate", &err);
    }
    if (strcmp(chat, "auto") && strcmp(chat, "plain") && strcmp(chat, "llada") && strcmp(chat, "qwen3") &&
        strcmp(chat, "qwen2.5") && strcmp(chat, "qwen3.5")) {
        dllm_err_set(&err, DLLM_EXIT_INPUT, "--chat %s: expected auto, plain, llada, qwen3, qwen2.5 or qwen3.5", chat);
        return cli_fail("generate", &err);
    }
    dllm_policy_cfg pc = {.path = model_dir, .device = device, .device_flag = "--device"};
    dllm_backend *dev_be;
    if (dllm_policy_infer_cfg(&pc, precision, "--precision", &err) ||
        dllm_policy_infer_nvfp4(&pc, nvfp4, "--nvfp4-scaling", &err) ||
        dllm_policy_device_parse(device, "--device", &dev_be, &err))
        return cli_fail("generate", &err);
    cli_note_rollout_product("generate", pc.rollout, device);
    dllm_policy *pol;
    if (dllm_policy_open(&pol, &pc, &err))
        return cli_fail("generate", &err);
    const bool diffusion = dllm_policy_is_diffusion(pol);
    const bool is_dream = dllm_policy_sampler(pol) == DLLM_SAMPLER_DREAM;
    const dllm_model_config *mc = dllm_policy_config(pol);
    dllm_tokenizer *tok = NULL;
    dllm_chat_format fmt = DLLM_CHAT_PLAIN;
    prompt_ids *ps = NULL;
    int np = 0, rc = 0;
    if (is_dream && llada_flag)
        rc = dllm_err_set(&err, DLLM_EXIT_INPUT,
                          "%s: a flag of LLaDA's block sampler; %s is a Dream model (its sampler "
                          "takes --steps, --alg, --eps, --alg-temp, --top-p, --top-k)",
                          llada_flag, model_dir);
    else if (!is_dream && dream_flag)
        rc = dllm_err_set(&err, DLLM_EXIT_INPUT,
                          "%s: a flag of Dream's sampler; %s is not a Dream model", dream_flag,
                          model_dir);
    else if (diffusion && !is_dream && ar_flag)
        rc = dllm_err_set(&err, DLLM_EXIT_INPUT,
                          "%s: a flag of autoregressive decoding; %s is a masked-diffusion "
                          "model (its sampler takes --block-length, --steps, --remasking)",
                          ar_flag, model_dir);
    else if (!diffusion && denoise_flag)
        rc = dllm_err_set(&err, DLLM_EXIT_INPUT,
                          "%s: a flag of the denoising sampler; %s is an autoregressive model, "
                          "decoded left to right (it takes --temperature and --top-p)",
                          denoise_flag, model_dir);
    if (!rc && !strcmp(chat, "auto"))
        rc = dllm_chat_format_from_dir(model_dir, &fmt, &err);
    else if (!rc)
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
    /* the denoising schedule is checked for diffusion models only: an
     * autoregressive model reads gen_length, temperature and eos_id */
    dllm_sampler_cfg sc = {.gen_length = (int)gen, .block_length = (int)block, .steps = (int)steps,
                           .temperature = temp,
                           .remasking = strcmp(remask, "random") ? REMASK_LOW_CONFIDENCE : REMASK_RANDOM,
                           .cfg_scale = cfg_scale, .logits_eos_inf = eos_inf,
                           .confidence_eos_eot_inf = conf_inf, .mask_token = mask_token,
                           .cache = cache, .threshold = threshold,
                           .cache_refresh = (int)cache_refresh,
                           .mask_id = mc->mask_token_id,
                           .eos_id = mc->eos_token_id, .eot_id = -1, .vocab = mc->embedding_size};
    if (tok)
        sc.eot_id = dllm_tokenizer_token_to_id(tok, "<|eot_id|>");
    int P = 0;
    for (int i = 0; i < np; i++)
        P = ps[i].n > P ? ps[i].n : P;
    if (is_dream) {
        sc.block_length = sc.gen_length; /* no blocks */
        dream.top_p = top_p;
        dream.top_k = (int)top_k;
        if (!rc)
            rc = dllm_dream_check(&sc, &dream, &err);
        dllm_policy_set_dream(pol, &dream);
    } else if (!rc && diffusion) {
        if (cache == DLLM_CACHE_NONE && cache_refresh > 0)
            rc = dllm_err_set(&err, DLLM_EXIT_INPUT, "--cache-refresh %ld: refreshes a cache; "
                              "give --cache prefix or dual", cache_refresh);
        else if (cache != DLLM_CACHE_NONE && gen % block)
            rc = dllm_err_set(&err, DLLM_EXIT_INPUT, "--block-length %ld must divide --gen-length "
                              "%ld under --cache %s", block, gen, dllm_cache_name(cache));
        if (!rc)
            rc = dllm_sampler_check(&sc, &err);
    }
    if (!rc && P + gen > mc->max_seq_len)
        rc = dllm_err_set(&err, DLLM_EXIT_INPUT, "prompt (%d) + gen-length (%ld) exceed max_sequence_length %d",
                          P, gen, mc->max_seq_len);
    dllm_rollout r = {0};
    if (!rc) {
        int32_t *prompts;
        uint8_t *pm;
        pad_prompts(ps, np, P, mc->eos_token_id, &prompts, &pm);
        rc = dllm_policy_rollout(pol, prompts, pm, np, P, &sc, top_p, (uint64_t)seed, &r, &err);
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
            /* the same text under the key `grade` reads */
            printf(", \"completion\": ");
            print_json_string(stdout, text, tlen);
            printf(", \"completion_length\": %d, \"commit_step\": [", len);
            for (int i = 0; i < gen; i++)
                printf("%s%d", i ? ", " : "", r.commit_step[(size_t)b * gen + i]);
            printf("], \"commit_prob\": [");
            for (int i = 0; i < gen; i++) {
                printf("%s", i ? ", " : "");
                cli_print_json_number(stdout, r.commit_prob[(size_t)b * gen + i], 7);
            }
            /* generated positions still masked (masked diffusion, --mask-token allow) */
            printf("], \"masked_left\": %d", r.n_masked_left ? r.n_masked_left[b] : 0);
            const char *key;
            json_t *v;
            json_object_foreach(ps[b].extra, key, v) {
                printf(", ");
                print_json_string(stdout, key, strlen(key));
                char *d = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
                printf(": %s", d ? d : "null");
                free(d);
            }
            printf("}\n");
        }
        free(text);
    }
    dllm_rollout_free(&r);
    for (int i = 0; i < np; i++) {
        free(ps[i].ids);
        json_decref(ps[i].extra);
    }
    free(ps);
    dllm_tokenizer_free(tok);
    dllm_policy_free(pol);
    return rc ? cli_fail("generate", &err) : 0;
}
