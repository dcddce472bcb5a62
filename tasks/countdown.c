/* countdown.c: Countdown parser, solver, generator and task (see countdown.h).
 *
 * Generator (d1 trains on 3-number problems of Countdown-Tasks-3to4): n numbers
 * uniform in [1, 99] and a target uniform in [1, 99], redrawn until the solver
 * reaches the target; all draws come from the stream (seed, DLLM_RNG_TASK,
 * task id, item index), so item i does not depend on how many items are made. */
#include "tasks/countdown.h"
#include "tasks/registry.h"
#include "tasks/answer.h"
#include "tasks/task_util.h"

#include "kernels/rng.h"

#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- parser ---- */

typedef struct {
    const char *s;
    size_t n, i;
    int depth;
    int status; /* DLLM_CD_OK, or the first arithmetic failure (DIV0/OVERFLOW) */
    int malformed;
    dllm_countdown_expr *out;
} parser;

static void skip_ws(parser *p)
{
    while (p->i < p->n && (p->s[p->i] == ' ' || p->s[p->i] == '\t' || p->s[p->i] == '\n' || p->s[p->i] == '\r'))
        p->i++;
}

/* Records an arithmetic failure; the parse continues to decide well-formedness. */
static dllm_rat arith(parser *p, int rc, dllm_rat v)
{
    if (rc && p->status == DLLM_CD_OK)
        p->status = rc == DLLM_RAT_DIV0 ? DLLM_CD_DIV0 : DLLM_CD_OVERFLOW;
    return rc ? dllm_rat_int(0) : v;
}

static dllm_rat parse_expr(parser *p);

static dllm_rat parse_atom(parser *p)
{
    skip_ws(p);
    if (p->i >= p->n) {
        p->malformed = 1;
        return dllm_rat_int(0);
    }
    char c = p->s[p->i];
    if (c == '(') {
        p->i++;
        dllm_rat v = parse_expr(p);
        skip_ws(p);
        if (p->i >= p->n || p->s[p->i] != ')') {
            p->malformed = 1;
            return dllm_rat_int(0);
        }
        p->i++;
        return v;
    }
    if (c >= '0' && c <= '9') {
        int64_t v = 0;
        int big = 0;
        while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') {
            int d = p->s[p->i++] - '0';
            if (v > (INT64_MAX - d) / 10)
                big = 1;
            else if (!big)
                v = v * 10 + d;
        }
        if (p->i < p->n && p->s[p->i] == '.') { /* decimals are not Countdown numbers */
            p->malformed = 1;
            return dllm_rat_int(0);
        }
        if (p->out->n_lits < DLLM_COUNTDOWN_MAX_LITS)
            p->out->lits[p->out->n_lits] = big ? -1 : v;
        p->out->n_lits++;
        if (big) {
            arith(p, DLLM_RAT_OVERFLOW, dllm_rat_int(0));
            return dllm_rat_int(0);
        }
        return dllm_rat_int(v);
    }
    p->malformed = 1;
    return dllm_rat_int(0);
}

static dllm_rat parse_unary(parser *p)
{
    skip_ws(p);
    if (p->i < p->n && (p->s[p->i] == '-' || p->s[p->i] == '+')) {
        int neg = p->s[p->i++] == '-';
        if (++p->depth > DLLM_COUNTDOWN_MAX_DEPTH) {
            p->malformed = 1;
            return dllm_rat_int(0);
        }
        dllm_rat v = parse_unary(p);
        p->depth--;
        if (neg)
            v.num = -v.num; /* safe: |num| <= INT64_MAX */
        return v;
    }
    if (p->i < p->n && p->s[p->i] == '(') {
        if (++p->depth > DLLM_COUNTDOWN_MAX_DEPTH) {
            p->malformed = 1;
            return dllm_rat_int(0);
        }
        dllm_rat v = parse_atom(p);
        p->depth--;
        return v;
    }
    return parse_atom(p);
}

static dllm_rat parse_term(parser *p)
{
    dllm_rat v = parse_unary(p);
    while (!p->malformed) {
        skip_ws(p);
        if (p->i >= p->n || (p->s[p->i] != '*' && p->s[p->i] != '/'))
            break;
        char op = p->s[p->i++];
        dllm_rat r = parse_unary(p), t;
        v = arith(p, op == '*' ? dllm_rat_mul(v, r, &t) : dllm_rat_div(v, r, &t), t);
    }
    return v;
}

static dllm_rat parse_expr(parser *p)
{
    dllm_rat v = parse_term(p);
    while (!p->malformed) {
        skip_ws(p);
        if (p->i >= p->n || (p->s[p->i] != '+' && p->s[p->i] != '-'))
            break;
        char op = p->s[p->i++];
        dllm_rat r = parse_term(p), t;
        v = arith(p, op == '+' ? dllm_rat_add(v, r, &t) : dllm_rat_sub(v, r, &t), t);
    }
    return v;
}

int dllm_countdown_eval(const char *expr, size_t len, dllm_countdown_expr *out)
{
    parser p = {.s = expr, .n = len, .out = out};
    memset(out, 0, sizeof *out);
    out->value = parse_expr(&p);
    skip_ws(&p);
    if (p.malformed || p.i != p.n)
        return DLLM_CD_MALFORMED;
    return p.status;
}

/* 1 when the literals are exactly nums, as a multiset */
static int uses_numbers(const dllm_countdown_expr *e, const int64_t *nums, int n)
{
    if (e->n_lits != n || n > DLLM_COUNTDOWN_MAX_LITS)
        return 0;
    int used[DLLM_COUNTDOWN_MAX_LITS] = {0};
    for (int i = 0; i < n; i++) {
        int found = 0;
        for (int j = 0; j < n && !found; j++)
            if (!used[j] && nums[j] == e->lits[i])
                used[j] = found = 1;
        if (!found)
            return 0;
    }
    return 1;
}

int dllm_countdown_check(const dllm_countdown_expr *e, const int64_t *nums, int n, int64_t target)
{
    return uses_numbers(e, nums, n) && e->value.den == 1 && e->value.num == target;
}

/* The expression text of a completion: last <answer>...</answer>, else the last
 * non-empty line. */
static char *countdown_expr_text(const char *c, size_t len)
{
    char *a = dllm_answer_xml(c, len, 0);
    if (a)
        return a;
    size_t e = len;
    while (e > 0 && (c[e - 1] == '\n' || c[e - 1] == '\r' || c[e - 1] == ' ' || c[e - 1] == '\t'))
        e--;
    size_t s = e;
    while (s > 0 && c[s - 1] != '\n')
        s--;
    if (s == e)
        return NULL;
    char *line = dllm_malloc(e - s + 1);
    memcpy(line, c + s, e - s);
    line[e - s] = 0;
    return line;
}

/* The completion's answer expression evaluated (DLLM_CD_MALFORMED where it has none). */
static int completion_expr(const char *completion, size_t len, dllm_countdown_expr *e)
{
    char *text = countdown_expr_text(completion, len);
    if (!text)
        return DLLM_CD_MALFORMED;
    int st = dllm_countdown_eval(text, strlen(text), e);
    free(text);
    return st;
}

double dllm_countdown_score(const int64_t *nums, int n, int64_t target, const char *completion, size_t len)
{
    dllm_countdown_expr e;
    int st = completion_expr(completion, len, &e);
    if (st == DLLM_CD_MALFORMED)
        return 0.0;
    if (st == DLLM_CD_OK && dllm_countdown_check(&e, nums, n, target))
        return 1.0;
    return 0.1;
}

double dllm_countdown_partial(const int64_t *nums, int n, int64_t target, const char *completion,
                              size_t len)
{
    dllm_countdown_expr e;
    int st = completion_expr(completion, len, &e);
    if (st == DLLM_CD_MALFORMED)
        return 0.0;
    if (st != DLLM_CD_OK || !uses_numbers(&e, nums, n))
        return 0.1;
    if (e.value.den == 1 && e.value.num == target)
        return 1.0;
    const double v = (double)e.value.num / (double)e.value.den;
    const double rel = fabs(v - (double)target) / fmax(fabs((double)target), 1.0);
    return 0.2 + 0.6 * fmax(0.0, 1.0 - rel);
}

/* ---- solver ---- */

#define EXPR_CAP 256

static int solve_rec(dllm_rat *v, char (*ex)[EXPR_CAP], int n, dllm_rat target, char *out, size_t cap)
{
    if (n == 1) {
        if (!dllm_rat_eq(v[0], target))
            return 0;
        if (out)
            snprintf(out, cap, "%s", ex[0]);
        return 1;
    }
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++) {
            dllm_rat nv[DLLM_TASK_MAX_NUMS];
            char nex[DLLM_TASK_MAX_NUMS][EXPR_CAP];
            int m = 0;
            for (int k = 0; k < n; k++)
                if (k != i && k != j) {
                    nv[m] = v[k];
                    memcpy(nex[m], ex[k], EXPR_CAP);
                    m++;
                }
            /* a+b, a*b, a-b, b-a, a/b, b/a */
            for (int op = 0; op < 6; op++) {
                dllm_rat r;
                int rc;
                const dllm_rat *x = op == 3 || op == 5 ? &v[j] : &v[i];
                const dllm_rat *y = op == 3 || op == 5 ? &v[i] : &v[j];
                const char *xs = op == 3 || op == 5 ? ex[j] : ex[i];
                const char *ys = op == 3 || op == 5 ? ex[i] : ex[j];
                char sym;
                switch (op) {
                case 0: rc = dllm_rat_add(*x, *y, &r); sym = '+'; break;
                case 1: rc = dllm_rat_mul(*x, *y, &r); sym = '*'; break;
                case 2: case 3: rc = dllm_rat_sub(*x, *y, &r); sym = '-'; break;
                default: rc = dllm_rat_div(*x, *y, &r); sym = '/'; break;
                }
                if (rc)
                    continue;
                nv[m] = r;
                int w = snprintf(nex[m], EXPR_CAP, "(%s%c%s)", xs, sym, ys);
                if (w < 0 || w >= EXPR_CAP)
                    continue;
                if (solve_rec(nv, nex, m + 1, target, out, cap))
                    return 1;
            }
        }
    return 0;
}

int dllm_countdown_solve(const int64_t *nums, int n, int64_t target, char *out, size_t cap)
{
    if (n < 1 || n > DLLM_TASK_MAX_NUMS)
        return 0;
    dllm_rat v[DLLM_TASK_MAX_NUMS];
    char ex[DLLM_TASK_MAX_NUMS][EXPR_CAP];
    for (int i = 0; i < n; i++) {
        if (nums[i] == INT64_MIN)
            return 0;
        v[i] = dllm_rat_int(nums[i]);
        snprintf(ex[i], EXPR_CAP, "%" PRId64, nums[i]);
    }
    if (target == INT64_MIN)
        return 0;
    if (!solve_rec(v, ex, n, dllm_rat_int(target), out, cap))
        return 0;
    if (out && n == 1)
        snprintf(out, cap, "%" PRId64, nums[0]);
    return 1;
}

/* ---- task ---- */

static char *nums_list(const int64_t *nums, int n)
{
    char buf[DLLM_TASK_MAX_NUMS * 24 + 4];
    size_t w = 0;
    buf[w++] = '[';
    for (int i = 0; i < n; i++)
        w += (size_t)snprintf(buf + w, sizeof buf - w, "%s%" PRId64, i ? ", " : "", nums[i]);
    snprintf(buf + w, sizeof buf - w, "]");
    return dllm_strdup(buf);
}

static void fill_item(dllm_task_item *it, const int64_t *nums, int n, int64_t target)
{
    memcpy(it->nums, nums, (size_t)n * sizeof nums[0]);
    it->n_nums = n;
    it->target = target;
    char *l = nums_list(nums, n);
    it->question = dllm_strfmt("Numbers: %s  Target: %" PRId64, l, target);
    it->answer = dllm_strfmt("%" PRId64, target);
    free(l);
}

static int countdown_from_json(const void *obj, int need_question, dllm_task_item *it, dllm_err *err)
{
    const json_t *o = obj;
    const char *key = "nums";
    json_t *arr = json_object_get(o, key);
    if (!arr) {
        key = "numbers";
        arr = json_object_get(o, key);
    }
    if (!arr)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "missing key 'nums'");
    if (!json_is_array(arr) || json_array_size(arr) < 2 || json_array_size(arr) > DLLM_TASK_MAX_NUMS)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "key '%s': expected an array of 2 to %d integers", key,
                            DLLM_TASK_MAX_NUMS);
    int64_t nums[DLLM_TASK_MAX_NUMS];
    int n = (int)json_array_size(arr);
    for (int i = 0; i < n; i++) {
        json_t *v = json_array_get(arr, (size_t)i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 1000000)
            return dllm_err_set(err, DLLM_EXIT_INPUT, "key '%s': element %d is not an integer in [0, 1000000]", key,
                                i);
        nums[i] = (int64_t)json_integer_value(v);
    }
    int64_t target;
    if (dllm_json_get_int(o, "target", -1000000000000LL, 1000000000000LL, &target, err))
        return DLLM_EXIT_INPUT;
    fill_item(it, nums, n, target);
    return 0;
}

static int countdown_generate(const dllm_task_source *src, size_t i, dllm_task_item *it, dllm_err *err)
{
    int n = src->n_numbers ? src->n_numbers : 3;
    if (n < 2 || n > 4)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "countdown: numbers per problem must be 2 to 4, got %d", n);
    dllm_rng r = dllm_rng_make(src->seed, DLLM_RNG_TASK, 1, i);
    int64_t nums[DLLM_TASK_MAX_NUMS], target = 0;
    for (int tries = 0;; tries++) {
        for (int k = 0; k < n; k++)
            nums[k] = 1 + (int64_t)dllm_rng_below(&r, 99);
        target = 1 + (int64_t)dllm_rng_below(&r, 99);
        if (dllm_countdown_solve(nums, n, target, NULL, 0))
            break;
        if (tries > 10000) /* never seen; the sum is always reachable */
        {
            target = 0;
            for (int k = 0; k < n; k++)
                target += nums[k];
            break;
        }
    }
    fill_item(it, nums, n, target);
    return 0;
}

static char *countdown_format(const dllm_task_item *it)
{
    char *l = nums_list(it->nums, it->n_nums);
    char *s = dllm_strfmt(
        "\nRespond in the following format:\n<reasoning>\n...\n</reasoning>\n<answer>\n...\n</answer>\n"
        "\nUsing only the numbers %s, create an arithmetic expression that evaluates to exactly %" PRId64
        ". You must use all numbers from the list, and each number must be used exactly once. You may use the "
        "operations +, -, *, and / as needed. After reasoning, provide only your final expression inside "
        "<answer></answer> tags without including an equals sign or the target number. For example, if the "
        "numbers are [2, 3, 4] and the target is 5, a valid answer is: <answer>\n2*4-3\n</answer>",
        l, it->target);
    free(l);
    return s;
}

static double countdown_reward(const dllm_task_item *it, const char *c, size_t len)
{
    return dllm_countdown_score(it->nums, it->n_nums, it->target, c, len);
}

static int countdown_correct(const dllm_task_item *it, const char *c, size_t len)
{
    return countdown_reward(it, c, len) == 1.0;
}

static double countdown_partial(const dllm_task_item *it, const char *c, size_t len)
{
    return dllm_countdown_partial(it->nums, it->n_nums, it->target, c, len);
}

const dllm_task dllm_task_countdown = {
    .name = "countdown",
    .description = "reach a target with + - * / using each number once (generator, or JSONL nums/target)",
    .can_generate = 1,
    .from_json = countdown_from_json,
    .generate = countdown_generate,
    .format = countdown_format,
    .reward = countdown_reward,
    .correct = countdown_correct,
    .partial = countdown_partial,
};
