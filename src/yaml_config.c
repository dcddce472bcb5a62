/* config.c: the YAML reader behind config.h. Schema in the key table below. */
#include "src/yaml_config.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

double dllm_cfg_lr(const dllm_cfg *cfg, long step, long total)
{
    double lr = cfg->optim.lr;
    long w = cfg->optim.warmup;
    if (w > 0 && step <= w)
        return lr * (double)step / (double)w;
    if (!strcmp(cfg->optim.schedule, "cosine") && total > w)
        lr *= 0.5 * (1 + cos(3.14159265358979323846 * (double)(step - w) / (double)(total - w)));
    return lr;
}

typedef enum { K_INT, K_LONG, K_FLOAT, K_BOOL, K_STR, K_ENUM, K_FLOAT2, K_STR_LIST } key_type;

typedef struct {
    const char *path;    /* dotted key path */
    key_type type;
    size_t off;          /* offsetof(dllm_cfg, ...) */
    size_t size;         /* buffer size for K_STR / K_ENUM */
    const char *def;     /* default, parsed like a YAML scalar ("" for none) */
    double min, max;     /* numeric range (inclusive) */
    const char *choices; /* K_ENUM: "a|b|c"; K_STR_LIST: allowed items or NULL */
} cfg_key;

#define F(field) offsetof(dllm_cfg, field), sizeof(((dllm_cfg *)0)->field)
#define INF HUGE_VAL

static const cfg_key keys[] = {
    {"experiment", K_STR, F(experiment), "run", 0, 0, NULL},
    {"seed", K_LONG, F(seed), "1", 0, 9.2e18, NULL},
    {"device", K_ENUM, F(device), "cpu", 0, 0, "cpu|cuda"},
    {"model.path", K_STR, F(model.path), "", 0, 0, NULL},
    {"model.preset", K_ENUM, F(model.preset), "tiny", 0, 0, "tiny|small|llada-8b|qwen3-8b"},
    {"model.arch", K_ENUM, F(model.arch), "llada", 0, 0, "llada|qwen3"},
    {"model.dtype", K_ENUM, F(model.dtype), "f32", 0, 0, "f32|bf16"},
    {"model.trainer_precision", K_ENUM, F(model.trainer_precision), "fp32", 0, 0, "fp32|bf16"},
    {"model.lora.rank", K_INT, F(model.lora.rank), "0", 0, 4096, NULL},
    {"model.lora.alpha", K_FLOAT, F(model.lora.alpha), "16", 0, INF, NULL},
    {"model.lora.targets", K_STR_LIST, F(model.lora.targets),
     "[q_proj, k_proj, v_proj, attn_out, ff_proj, up_proj, ff_out]", 0, 0,
     "q_proj|k_proj|v_proj|attn_out|ff_proj|up_proj|ff_out|o_proj|gate_proj|down_proj"},
    {"task.name", K_ENUM, F(task.name), "countdown", 0, 0, "countdown|sudoku|gsm8k|math500"},
    {"task.train.path", K_STR, F(task.train.path), "", 0, 0, NULL},
    {"task.train.n", K_INT, F(task.train.n), "10000", 1, 1e8, NULL},
    {"task.eval.path", K_STR, F(task.eval.path), "", 0, 0, NULL},
    {"task.n_numbers", K_INT, F(task.n_numbers), "3", 3, 4, NULL},
    {"task.max_blanks", K_INT, F(task.max_blanks), "10", 1, 16, NULL},
    {"task.format", K_ENUM, F(task.format), "d1", 0, 0, "d1|plain"},
    {"task.chat", K_ENUM, F(task.chat), "auto", 0, 0, "auto|plain|llada|qwen3"},
    {"task.reward", K_ENUM, F(task.reward), "task", 0, 0, "task|correct"},
    {"rollout.precision", K_ENUM, F(rollout.precision), "fp8", 0, 0, "trainer|bf16|fp8|fp8-exact|nvfp4"},
    {"rollout.fp8.format", K_ENUM, F(rollout.fp8.format), "e4m3", 0, 0, "e4m3|e5m2"},
    {"rollout.fp8.scaling", K_ENUM, F(rollout.fp8.scaling), "block", 0, 0, "block|channel|tensor"},
    {"rollout.fp8.pow2_scale", K_BOOL, F(rollout.fp8.pow2_scale), "false", 0, 0, NULL},
    {"rollout.group_size", K_INT, F(rollout.group_size), "8", 1, 4096, NULL},
    {"rollout.gen_length", K_INT, F(rollout.gen_length), "64", 1, 1 << 20, NULL},
    {"rollout.block_length", K_INT, F(rollout.block_length), "16", 1, 1 << 20, NULL},
    {"rollout.steps", K_INT, F(rollout.steps), "32", 1, 32767, NULL},
    {"rollout.temperature", K_FLOAT, F(rollout.temperature), "0.9", 0, 100, NULL},
    {"rollout.remasking", K_ENUM, F(rollout.remasking), "low_confidence", 0, 0, "low_confidence|random"},
    {"rollout.cfg_scale", K_FLOAT, F(rollout.cfg_scale), "0", 0, 100, NULL},
    {"rollout.logits_eos_inf", K_BOOL, F(rollout.logits_eos_inf), "false", 0, 0, NULL},
    {"rollout.confidence_eos_eot_inf", K_BOOL, F(rollout.confidence_eos_eot_inf), "false", 0, 0, NULL},
    {"rollout.top_p", K_FLOAT, F(rollout.top_p), "1.0", 1e-6, 1, NULL},
    {"likelihood.temperature", K_FLOAT, F(likelihood.temperature), "1.0", 1e-6, 100, NULL},
    {"likelihood.mc_samples", K_INT, F(likelihood.mc_samples), "4", 1, 1 << 16, NULL},
    {"likelihood.shrink", K_INT, F(likelihood.shrink), "1", 1, 1 << 16, NULL},
    {"grpo.steps", K_INT, F(grpo.steps), "200", 0, 1e9, NULL},
    {"grpo.prompts_per_step", K_INT, F(grpo.prompts_per_step), "8", 1, 1 << 20, NULL},
    {"grpo.inner_steps", K_INT, F(grpo.inner_steps), "4", 1, 1 << 16, NULL},
    {"grpo.logp_estimator", K_ENUM, F(grpo.logp_estimator), "one_step", 0, 0, "one_step|elbo|trajectory"},
    {"grpo.p_mask_prompt", K_FLOAT, F(grpo.p_mask_prompt), "0", 0, 1, NULL},
    {"grpo.ratio", K_ENUM, F(grpo.ratio), "sequence", 0, 0, "sequence|token"},
    {"grpo.clip_eps", K_FLOAT, F(grpo.clip_eps), "0.2", 0, 10, NULL},
    {"grpo.beta", K_FLOAT, F(grpo.beta), "0", 0, 100, NULL},
    {"grpo.ref_sync_every", K_INT, F(grpo.ref_sync_every), "0", 0, 1e9, NULL},
    {"grpo.loss_agg", K_ENUM, F(grpo.loss_agg), "seq_mean", 0, 0, "seq_mean|token_mean"},
    {"grpo.advantage_scale", K_ENUM, F(grpo.advantage_scale), "std", 0, 0, "std|none"},
    {"grpo.fresh_masks", K_BOOL, F(grpo.fresh_masks), "false", 0, 0, NULL},
    {"correction.method", K_ENUM, F(correction.method), "ais", 0, 0, "none|is|tis|mis|fixed|ais"},
    {"correction.estimator", K_ENUM, F(correction.estimator), "elbo", 0, 0, "one_step|elbo|trajectory"},
    {"correction.level", K_ENUM, F(correction.level), "sequence", 0, 0, "sequence|geo|token"},
    {"correction.cap", K_FLOAT, F(correction.cap), "2.0", 1, INF, NULL},
    {"correction.fixed_alpha", K_FLOAT, F(correction.fixed_alpha), "0.5", 0, 1, NULL},
    {"correction.ais.combine", K_ENUM, F(correction.ais.combine), "linear", 0, 0, "linear|logistic"},
    {"correction.ais.noise", K_ENUM, F(correction.ais.noise), "debias", 0, 0, "debias|none"},
    {"correction.ais.weights.reliability", K_FLOAT, F(correction.ais.weights.reliability), "1", -1e300, 1e300, NULL},
    {"correction.ais.weights.divergence", K_FLOAT, F(correction.ais.weights.divergence), "1", -1e300, 1e300, NULL},
    {"correction.ais.weights.variance", K_FLOAT, F(correction.ais.weights.variance), "1", -1e300, 1e300, NULL},
    {"correction.ais.tau_delta", K_FLOAT, F(correction.ais.tau_delta), "0.05", 1e-12, INF, NULL},
    {"correction.ais.bias", K_FLOAT, F(correction.ais.bias), "-4", -INF, INF, NULL},
    {"correction.ais.eta", K_FLOAT, F(correction.ais.eta), "0", 0, 1, NULL},
    {"correction.ais.alpha_min", K_FLOAT, F(correction.ais.alpha_min), "0", 0, 1, NULL},
    {"correction.ais.alpha_max", K_FLOAT, F(correction.ais.alpha_max), "1", 0, 1, NULL},
    {"data.train", K_STR, F(data.train), "", 0, 0, NULL},
    {"data.max_len", K_INT, F(data.max_len), "128", 2, 1 << 20, NULL},
    {"data.answer_length", K_INT, F(data.answer_length), "0", 0, 1 << 20, NULL},
    {"sft.steps", K_INT, F(sft.steps), "100", 0, 1e9, NULL},
    {"sft.batch_size", K_INT, F(sft.batch_size), "8", 1, 1 << 20, NULL},
    {"sft.chat", K_BOOL, F(sft.chat), "false", 0, 0, NULL},
    {"optim.lr", K_FLOAT, F(optim.lr), "1e-4", 0, 10, NULL},
    {"optim.warmup", K_INT, F(optim.warmup), "0", 0, 1e9, NULL},
    {"optim.betas", K_FLOAT2, F(optim.betas), "[0.9, 0.99]", 0, 1 - 1e-12, NULL},
    {"optim.eps", K_FLOAT, F(optim.eps), "1e-8", 0, 1, NULL},
    {"optim.weight_decay", K_FLOAT, F(optim.weight_decay), "0", 0, 10, NULL},
    {"optim.grad_clip", K_FLOAT, F(optim.grad_clip), "1.0", 0, INF, NULL},
    {"optim.schedule", K_ENUM, F(optim.schedule), "constant", 0, 0, "constant|cosine"},
    {"eval.every", K_INT, F(eval.every), "20", 0, 1e9, NULL},
    {"eval.n", K_INT, F(eval.n), "500", 0, 1e8, NULL},
    {"eval.gen_length", K_INT, F(eval.gen_length), "64", 1, 1 << 20, NULL},
    {"eval.block_length", K_INT, F(eval.block_length), "16", 1, 1 << 20, NULL},
    {"eval.steps", K_INT, F(eval.steps), "32", 1, 32767, NULL},
    {"eval.temperature", K_FLOAT, F(eval.temperature), "0", 0, 100, NULL},
    {"log.dir", K_STR, F(log.dir), "runs", 0, 0, NULL},
    {"log.every", K_INT, F(log.every), "10", 1, 1e9, NULL},
    {"log.trajectories", K_BOOL, F(log.trajectories), "true", 0, 0, NULL},
    {"checkpoint.every", K_INT, F(checkpoint.every), "0", 0, 1e9, NULL},
    {"checkpoint.keep", K_INT, F(checkpoint.keep), "2", 0, 1e6, NULL},
};
#define NKEYS (sizeof keys / sizeof keys[0])

/* ---- where an error is: file:line:col plus the line itself ------------------ */

typedef struct {
    const char *file;  /* config path or "--set" */
    const char *text;  /* whole source text, for echoing the line */
} source;

static int fail_at(dllm_err *err, const source *src, yaml_mark_t mark, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int fail_at(dllm_err *err, const source *src, yaml_mark_t mark, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    /* echo the offending line with a caret under the column */
    char line[256] = "";
    const char *p = src->text;
    for (size_t l = 0; p && *p && l < mark.line; p++)
        if (*p == '\n')
            l++;
    if (p) {
        size_t n = strcspn(p, "\n");
        if (n >= sizeof line)
            n = sizeof line - 1;
        memcpy(line, p, n);
        line[n] = '\0';
    }
    size_t col = mark.column < 200 ? mark.column : 200;
    char caret[208];
    memset(caret, ' ', col);
    caret[col] = '^';
    caret[col + 1] = '\0';
    if (!strcmp(src->file, "--set"))
        return dllm_err_set(err, DLLM_EXIT_INPUT, "--set %s: %s", src->text, msg);
    return dllm_err_set(err, DLLM_EXIT_INPUT, "%s:%zu:%zu: %s\n  %s\n  %s", src->file,
                        (size_t)mark.line + 1, (size_t)mark.column + 1, msg, line, caret);
}

static const cfg_key *find_key(const char *path)
{
    for (size_t i = 0; i < NKEYS; i++)
        if (!strcmp(keys[i].path, path))
            return &keys[i];
    return NULL;
}

/* Is `prefix` the path of a section (some key starts with "prefix.")? */
static bool is_section(const char *prefix)
{
    size_t n = strlen(prefix);
    for (size_t i = 0; i < NKEYS; i++)
        if (!strncmp(keys[i].path, prefix, n) && keys[i].path[n] == '.')
            return true;
    return false;
}

static void list_section_keys(const char *prefix, char *out, size_t len)
{
    size_t n = strlen(prefix), used = 0;
    out[0] = '\0';
    for (size_t i = 0; i < NKEYS && used + 64 < len; i++) {
        const char *k = keys[i].path;
        if (n && (strncmp(k, prefix, n) || k[n] != '.'))
            continue;
        const char *rest = n ? k + n + 1 : k;
        size_t m = strcspn(rest, ".");
        /* print each child once */
        bool seen = false;
        for (size_t j = 0; j < i; j++) {
            const char *kj = keys[j].path;
            if (n && (strncmp(kj, prefix, n) || kj[n] != '.'))
                continue;
            const char *rj = n ? kj + n + 1 : kj;
            if (strcspn(rj, ".") == m && !strncmp(rj, rest, m))
                seen = true;
        }
        if (!seen)
            used += (size_t)snprintf(out + used, len - used, "%s%.*s", used ? ", " : "", (int)m,
                                     rest);
    }
}

/* ---- scalar parsing ------------------------------------------------------- */

static bool parse_double(const char *s, double *out)
{
    if (!*s)
        return false;
    char *end;
    errno = 0;
    /* YAML 1.1 infinities (.inf, +.inf, -.inf in any of its three spellings);
     * strtod's own "inf"/"nan" are not YAML */
    const char *u = s + (*s == '+' || *s == '-');
    if (!strcmp(u, ".inf") || !strcmp(u, ".Inf") || !strcmp(u, ".INF")) {
        *out = *s == '-' ? -HUGE_VAL : HUGE_VAL;
        return true;
    }
    double v = strtod(s, &end);
    if (*end || errno == ERANGE || !isfinite(v))
        return false;
    *out = v;
    return true;
}

static bool parse_long(const char *s, long *out)
{
    if (!*s)
        return false;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (*end || errno == ERANGE)
        return false;
    *out = v;
    return true;
}

static bool parse_bool(const char *s, int *out)
{
    if (!strcmp(s, "true") || !strcmp(s, "True") || !strcmp(s, "yes") || !strcmp(s, "on")) {
        *out = 1;
        return true;
    }
    if (!strcmp(s, "false") || !strcmp(s, "False") || !strcmp(s, "no") || !strcmp(s, "off")) {
        *out = 0;
        return true;
    }
    return false;
}

static bool in_choices(const char *choices, const char *s)
{
    size_t n = strlen(s);
    for (const char *p = choices; *p;) {
        size_t m = strcspn(p, "|");
        if (m == n && !strncmp(p, s, n))
            return true;
        p += m + (p[m] == '|');
    }
    return false;
}

static const char *type_name(key_type t)
{
    switch (t) {
    case K_INT:
    case K_LONG: return "an integer";
    case K_FLOAT: return "a number";
    case K_BOOL: return "true or false";
    case K_STR: return "a string";
    case K_ENUM: return "one of the listed choices";
    case K_FLOAT2: return "a list of two numbers";
    case K_STR_LIST: return "a list of strings";
    }
    return "?";
}

static int check_range(const cfg_key *k, double v, const source *src, yaml_mark_t mark,
                       dllm_err *err)
{
    if (v < k->min || v > k->max)
        return fail_at(err, src, mark, "%s = %g is out of range [%g, %g]", k->path, v, k->min,
                       k->max);
    return 0;
}

static int set_scalar(dllm_cfg *cfg, const cfg_key *k, const char *s, const source *src,
                      yaml_mark_t mark, dllm_err *err)
{
    char *dst = (char *)cfg + k->off;
    switch (k->type) {
    case K_INT:
    case K_LONG: {
        long v;
        if (!parse_long(s, &v))
            return fail_at(err, src, mark, "%s must be %s, got '%s'", k->path, type_name(k->type), s);
        if (check_range(k, (double)v, src, mark, err))
            return err->code;
        if (k->type == K_INT)
            *(int *)dst = (int)v;
        else
            *(long *)dst = v;
        return 0;
    }
    case K_FLOAT: {
        double v;
        if (!parse_double(s, &v))
            return fail_at(err, src, mark, "%s must be a number, got '%s'", k->path, s);
        /* only the cap has a meaning at infinity (min(w, .inf) = w) */
        if (isinf(v) && strcmp(k->path, "correction.cap"))
            return fail_at(err, src, mark, "%s must be finite, got '%s'", k->path, s);
        if (check_range(k, v, src, mark, err))
            return err->code;
        *(double *)dst = v;
        return 0;
    }
    case K_BOOL: {
        int v;
        if (!parse_bool(s, &v))
            return fail_at(err, src, mark, "%s must be true or false, got '%s'", k->path, s);
        *(int *)dst = v;
        return 0;
    }
    case K_ENUM:
        if (!in_choices(k->choices, s))
            return fail_at(err, src, mark, "%s must be one of %s, got '%s'", k->path, k->choices, s);
        /* fall through */
    case K_STR:
        if (strlen(s) >= k->size)
            return fail_at(err, src, mark, "%s is too long (at most %zu characters)", k->path,
                           k->size - 1);
        strcpy(dst, s);
        return 0;
    default:
        return fail_at(err, src, mark, "%s must be %s", k->path, type_name(k->type));
    }
}

static int set_sequence(dllm_cfg *cfg, const cfg_key *k, yaml_document_t *doc, yaml_node_t *node,
                        const source *src, dllm_err *err)
{
    char *dst = (char *)cfg + k->off;
    int n = (int)(node->data.sequence.items.top - node->data.sequence.items.start);
    if (k->type == K_FLOAT2) {
        if (n != 2)
            return fail_at(err, src, node->start_mark, "%s must be a list of two numbers, got %d items",
                           k->path, n);
        for (int i = 0; i < 2; i++) {
            yaml_node_t *it = yaml_document_get_node(doc, node->data.sequence.items.start[i]);
            double v;
            if (it->type != YAML_SCALAR_NODE || !parse_double((char *)it->data.scalar.value, &v))
                return fail_at(err, src, it->start_mark, "%s[%d] must be a number", k->path, i);
            if (check_range(k, v, src, it->start_mark, err))
                return err->code;
            ((double *)dst)[i] = v;
        }
        return 0;
    }
    if (k->type != K_STR_LIST)
        return fail_at(err, src, node->start_mark, "%s must be %s, not a list", k->path,
                       type_name(k->type));
    cfg_str_list *l = (cfg_str_list *)dst;
    if (n > CFG_LIST_MAX)
        return fail_at(err, src, node->start_mark, "%s has %d items (at most %d)", k->path, n,
                       CFG_LIST_MAX);
    l->n = 0;
    for (int i = 0; i < n; i++) {
        yaml_node_t *it = yaml_document_get_node(doc, node->data.sequence.items.start[i]);
        const char *s = it->type == YAML_SCALAR_NODE ? (char *)it->data.scalar.value : NULL;
        if (!s || strlen(s) >= sizeof l->items[0])
            return fail_at(err, src, it->start_mark, "%s[%d] must be a short string", k->path, i);
        if (k->choices && !in_choices(k->choices, s))
            return fail_at(err, src, it->start_mark, "%s: unknown item '%s' (choices: %s)", k->path, s,
                           k->choices);
        strcpy(l->items[l->n++], s);
    }
    return 0;
}

static int walk(dllm_cfg *cfg, yaml_document_t *doc, yaml_node_t *node, const char *prefix,
                const source *src, dllm_err *err)
{
    const cfg_key *k = prefix[0] ? find_key(prefix) : NULL;
    if (node->type == YAML_MAPPING_NODE && !k) {
        for (yaml_node_pair_t *p = node->data.mapping.pairs.start; p < node->data.mapping.pairs.top;
             p++) {
            yaml_node_t *kn = yaml_document_get_node(doc, p->key);
            yaml_node_t *vn = yaml_document_get_node(doc, p->value);
            if (kn->type != YAML_SCALAR_NODE)
                return fail_at(err, src, kn->start_mark, "keys must be plain names");
            /* reject duplicates within one mapping */
            for (yaml_node_pair_t *q = node->data.mapping.pairs.start; q < p; q++) {
                yaml_node_t *qk = yaml_document_get_node(doc, q->key);
                if (qk->type == YAML_SCALAR_NODE &&
                    !strcmp((char *)qk->data.scalar.value, (char *)kn->data.scalar.value))
                    return fail_at(err, src, kn->start_mark, "duplicate key '%s'",
                                   (char *)kn->data.scalar.value);
            }
            char path[256];
            snprintf(path, sizeof path, "%s%s%s", prefix, prefix[0] ? "." : "",
                     (char *)kn->data.scalar.value);
            if (!find_key(path) && !is_section(path)) {
                char known[512];
                list_section_keys(prefix, known, sizeof known);
                return fail_at(err, src, kn->start_mark, "unknown key '%s' (known %s%s: %s)", path,
                               prefix[0] ? "keys of " : "sections", prefix, known);
            }
            if (walk(cfg, doc, vn, path, src, err))
                return err->code;
        }
        return 0;
    }
    if (!k) {
        if (prefix[0] == '\0')
            return fail_at(err, src, node->start_mark, "the config must be a mapping of sections");
        return fail_at(err, src, node->start_mark, "'%s' is a section: expected a mapping", prefix);
    }
    if (node->type == YAML_SEQUENCE_NODE)
        return set_sequence(cfg, k, doc, node, src, err);
    if (node->type == YAML_MAPPING_NODE)
        return fail_at(err, src, node->start_mark, "%s must be %s, not a mapping", k->path,
                       type_name(k->type));
    const char *s = (char *)node->data.scalar.value;
    if ((k->type == K_STR) && (!strcmp(s, "null") || !strcmp(s, "~")) &&
        node->data.scalar.style == YAML_PLAIN_SCALAR_STYLE)
        s = "";
    if (k->type == K_FLOAT2 || k->type == K_STR_LIST)
        return fail_at(err, src, node->start_mark, "%s must be %s", k->path, type_name(k->type));
    return set_scalar(cfg, k, s, src, node->start_mark, err);
}

/* Parses YAML text and applies it at `prefix` (the root for files). */
static int apply_yaml(dllm_cfg *cfg, const char *text, size_t len, const char *prefix,
                      const source *src, dllm_err *err)
{
    yaml_parser_t parser;
    yaml_document_t doc;
    yaml_parser_initialize(&parser);
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    if (!yaml_parser_load(&parser, &doc)) {
        yaml_mark_t m = parser.problem_mark;
        int rc = fail_at(err, src, m, "YAML syntax error: %s%s%s", parser.problem,
                         parser.context ? " " : "", parser.context ? parser.context : "");
        yaml_parser_delete(&parser);
        return rc;
    }
    int rc = 0;
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    if (root && !(root->type == YAML_SCALAR_NODE && !root->data.scalar.length && !prefix[0]))
        rc = walk(cfg, &doc, root, prefix, src, err);
    yaml_document_delete(&doc);
    yaml_parser_delete(&parser);
    return rc;
}

void dllm_cfg_defaults(dllm_cfg *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    dllm_err err;
    for (size_t i = 0; i < NKEYS; i++) {
        source src = {"<defaults>", keys[i].def};
        if (apply_yaml(cfg, keys[i].def, strlen(keys[i].def), keys[i].path, &src, &err)) {
            fprintf(stderr, "dllm-rl: bad default for %s: %s\n", keys[i].path, err.msg);
            abort();
        }
    }
}

int dllm_cfg_load(dllm_cfg *cfg, const char *path, dllm_err *err)
{
    char *text;
    size_t len;
    if (dllm_read_file(path, &text, &len, err))
        return err->code;
    source src = {path, text};
    int rc = apply_yaml(cfg, text, len, "", &src, err);
    free(text);
    return rc;
}

int dllm_cfg_set(dllm_cfg *cfg, const char *assignment, dllm_err *err)
{
    const char *eq = strchr(assignment, '=');
    if (!eq || eq == assignment)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "--set %s: expected key.path=value", assignment);
    char path[256];
    size_t n = (size_t)(eq - assignment);
    if (n >= sizeof path)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "--set: key too long");
    memcpy(path, assignment, n);
    path[n] = '\0';
    if (!find_key(path))
        return dllm_err_set(err, DLLM_EXIT_INPUT, "--set %s: unknown key '%s'", assignment, path);
    source src = {"--set", assignment};
    const char *val = eq + 1;
    return apply_yaml(cfg, val, strlen(val), path, &src, err);
}

int dllm_cfg_validate(const dllm_cfg *cfg, dllm_err *err)
{
    if (cfg->data.train[0]) {
        FILE *f = fopen(cfg->data.train, "r");
        if (!f)
            return dllm_err_set(err, DLLM_EXIT_INPUT, "data.train: cannot open '%s': %s",
                                cfg->data.train, strerror(errno));
        fclose(f);
    }
    if (cfg->model.path[0]) {
        char p[CFG_STR_MAX + 16];
        snprintf(p, sizeof p, "%s/config.json", cfg->model.path);
        FILE *f = fopen(p, "r");
        if (!f)
            return dllm_err_set(err, DLLM_EXIT_INPUT, "model.path: '%s' has no config.json",
                                cfg->model.path);
        fclose(f);
    }
    const char *paths[2][2] = {{"task.train.path", cfg->task.train.path},
                               {"task.eval.path", cfg->task.eval.path}};
    for (int i = 0; i < 2; i++)
        if (paths[i][1][0]) {
            FILE *f = fopen(paths[i][1], "r");
            if (!f)
                return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: cannot open '%s': %s", paths[i][0],
                                    paths[i][1], strerror(errno));
            fclose(f);
        }
    const struct { const char *what; int gen, block, steps; } sched[2] = {
        {"rollout", cfg->rollout.gen_length, cfg->rollout.block_length, cfg->rollout.steps},
        {"eval", cfg->eval.gen_length, cfg->eval.block_length, cfg->eval.steps}};
    for (int i = 0; i < 2; i++) {
        if (sched[i].gen % sched[i].block)
            return dllm_err_set(err, DLLM_EXIT_INPUT, "%s.block_length %d must divide %s.gen_length %d",
                                sched[i].what, sched[i].block, sched[i].what, sched[i].gen);
        int nb = sched[i].gen / sched[i].block;
        if (sched[i].steps % nb)
            return dllm_err_set(err, DLLM_EXIT_INPUT,
                                "%s.steps %d must be a multiple of the number of blocks %d "
                                "(gen_length / block_length)", sched[i].what, sched[i].steps, nb);
    }
    /* with a model.path the architecture is config.json's: checked when the run opens */
    const bool diffusion = !cfg->model.path[0] && strcmp(cfg->model.arch, "qwen3");
    if (diffusion && !strcmp(cfg->grpo.ratio, "token") && strcmp(cfg->grpo.logp_estimator, "one_step"))
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "grpo.ratio: token needs grpo.logp_estimator one_step (or an AR model)");
    if (diffusion && !strcmp(cfg->correction.level, "token") &&
        strcmp(cfg->correction.estimator, "one_step"))
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "correction.level: token needs correction.estimator one_step (or an AR model)");
    if (cfg->correction.ais.alpha_min > cfg->correction.ais.alpha_max)
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "correction.ais.alpha_min %g exceeds correction.ais.alpha_max %g",
                            cfg->correction.ais.alpha_min, cfg->correction.ais.alpha_max);
    if (cfg->model.lora.rank > 0 && cfg->model.lora.targets.n == 0)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "model.lora.targets: empty list with rank %d",
                            cfg->model.lora.rank);
    return 0;
}

char *dllm_cfg_dump(const dllm_cfg *cfg)
{
    size_t cap = 8192, used = 0;
    char *out = dllm_malloc(cap);
    out[0] = '\0';
    char section[64] = "";
    for (size_t i = 0; i < NKEYS; i++) {
        const cfg_key *k = &keys[i];
        const char *dot = strrchr(k->path, '.');
        char sec[64] = "";
        if (dot)
            snprintf(sec, sizeof sec, "%.*s", (int)(dot - k->path), k->path);
        /* emit section headers as nested mappings */
        int depth = 0;
        if (strcmp(sec, section)) {
            /* count the leading components shared with the previous section,
             * then open the rest of this one, one indentation level each */
            char a[64], b[64];
            snprintf(a, sizeof a, "%s", sec);
            snprintf(b, sizeof b, "%s", section);
            char *sa, *sb, *ta = strtok_r(a, ".", &sa), *tb = strtok_r(b, ".", &sb);
            int d = 0;
            while (ta && tb && !strcmp(ta, tb)) {
                d++;
                ta = strtok_r(NULL, ".", &sa);
                tb = strtok_r(NULL, ".", &sb);
            }
            for (; ta; ta = strtok_r(NULL, ".", &sa), d++)
                used += (size_t)snprintf(out + used, cap - used, "%*s%s:\n", 2 * d, "", ta);
            snprintf(section, sizeof section, "%s", sec);
        }
        for (const char *q = k->path; *q; q++)
            depth += *q == '.';
        const char *name = dot ? dot + 1 : k->path;
        const char *v = (const char *)cfg + k->off;
        char val[1024];
        switch (k->type) {
        case K_INT: snprintf(val, sizeof val, "%d", *(const int *)v); break;
        case K_LONG: snprintf(val, sizeof val, "%ld", *(const long *)v); break;
        case K_FLOAT: /* infinity in YAML's spelling, so the file reads back */
            if (isinf(*(const double *)v))
                snprintf(val, sizeof val, "%s.inf", *(const double *)v < 0 ? "-" : "");
            else
                snprintf(val, sizeof val, "%.17g", *(const double *)v);
            break;
        case K_BOOL: snprintf(val, sizeof val, "%s", *(const int *)v ? "true" : "false"); break;
        case K_STR:
        case K_ENUM: { /* YAML double-quoted: escape backslash and quote */
            size_t u = 0;
            val[u++] = '"';
            for (const char *c = v; *c && u + 3 < sizeof val; c++) {
                if (*c == '"' || *c == '\\')
                    val[u++] = '\\';
                val[u++] = *c;
            }
            val[u++] = '"';
            val[u] = '\0';
            break;
        }
        case K_FLOAT2:
            snprintf(val, sizeof val, "[%.17g, %.17g]", ((const double *)v)[0], ((const double *)v)[1]);
            break;
        case K_STR_LIST: {
            const cfg_str_list *l = (const cfg_str_list *)v;
            size_t u = (size_t)snprintf(val, sizeof val, "[");
            for (int j = 0; j < l->n; j++)
                u += (size_t)snprintf(val + u, sizeof val - u, "%s%s", j ? ", " : "", l->items[j]);
            snprintf(val + u, sizeof val - u, "]");
            break;
        }
        }
        if (used + 2048 > cap)
            out = dllm_realloc(out, cap *= 2);
        used += (size_t)snprintf(out + used, cap - used, "%*s%s: %s\n", 2 * depth, "", name, val);
    }
    return out;
}
