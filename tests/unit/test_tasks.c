/* test_tasks.c: the tasks module: answer extraction and equivalence (GSM8K,
 * MATH), d1 format rewards against a Python reference, the Countdown parser,
 * solver and generator, the Sudoku solver, generator and scorer, loaders with
 * FILE:LINE errors, deterministic splits, and the tasks/grade commands. */
#include "tasks/registry.h"
#include "tasks/answer.h"
#include "tasks/countdown.h"
#include "tasks/sudoku.h"

#include "kernels/base.h"
#include "tests/harness/harness.h"

#include <check.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *data_dir(void)
{
    const char *d = getenv("DLLM_TEST_DATA");
    return d ? d : "tests/data";
}

static char *data_path(const char *name)
{
    static char buf[4096];
    snprintf(buf, sizeof buf, "%s/tasks/%s", data_dir(), name);
    return buf;
}

static char tmpdir[256];

static void make_tmpdir(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/dllm-test-tasks-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static void remove_tmpdir(void)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmpdir);
}

static char *write_tmp(const char *name, const char *content)
{
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    fputs(content, f);
    fclose(f);
    return path;
}

static dllm_task_item item_with_answer(const char *answer)
{
    dllm_task_item it;
    memset(&it, 0, sizeof it);
    it.question = dllm_strdup("q");
    it.answer = dllm_strdup(answer);
    return it;
}

/* ---------------- GSM8K ---------------- */

typedef struct {
    const char *completion;
    const char *reference;
    int correct;
} gsm_case;

static const gsm_case gsm_cases[] = {
    {"<answer>72</answer>", "72", 1},
    {"<answer>\n72\n</answer>", "72", 1},
    {"<answer>72.0</answer>", "72", 1},
    {"<answer>72.00</answer>", "72", 1},
    {"<answer>$72</answer>", "72", 1},
    {"<answer>1,234</answer>", "1234", 1},
    {"<answer>$1,234.50</answer>", "1234.5", 1},
    {"<answer>+5</answer>", "5", 1},
    {"<answer>-3</answer>", "-3", 1},
    {"<answer>-3</answer>", "3", 0},
    {"<answer>50%</answer>", "50", 1},
    {"<answer>The answer is 18 dollars.</answer>", "18", 1},
    {"<answer>18 apples, not 20</answer>", "18", 0}, /* last number in the tag wins */
    {"<answer>\\boxed{42}</answer>", "42", 1},
    {"<answer>73</answer>", "72", 0},
    {"So the total is 5 + 7 = 12.", "12", 1},
    {"So the total is 12. Then 3 more.", "12", 0},
    {"The answer is \\boxed{1,000}.", "1000", 1},
    {"The answer is \\boxed{\\$30}", "30", 1}, /* box content "\$30": its last number */
    {"no numbers here", "5", 0},
    {"", "5", 0},
    {"<answer></answer>", "5", 0},
    {"<answer>five</answer>", "5", 0},
    {"<reasoning>\n2+2=4\n</reasoning>\n<answer>\n4\n</answer>\n", "4", 1},
    {"<answer>3</answer> then <answer>4</answer>", "4", 1}, /* last tag */
    {"<answer>4", "4", 1},                                  /* unterminated last tag */
    {"value: 0.5", "0.50", 1},
    {"value: .5", "0.5", 1},
    {"<answer>1/2</answer>", "0.5", 1},
    {"<answer>2,50</answer>", "250", 0}, /* not a thousands separator */
    {"it costs $-7", "-7", 1},
    {"<answer>10000000000000000000000000000000000</answer>", "1", 0},
    {"we get 3.14159", "3.14159", 1},
    {"answer: 007", "7", 1},
    {"x = 12%", "12", 1},
};

START_TEST(test_gsm8k_cases)
{
    const gsm_case *c = &gsm_cases[_i];
    dllm_task_item it = item_with_answer(c->reference);
    int got = dllm_task_gsm8k.correct(&it, c->completion, strlen(c->completion));
    ck_assert_msg(got == c->correct, "case %d '%s' vs '%s': got %d", _i, c->completion, c->reference, got);
    dllm_task_item_free(&it);
}
END_TEST

START_TEST(test_gsm8k_reference)
{
    char *r = dllm_gsm8k_reference("step one\nstep two\n#### 1,234");
    ck_assert_str_eq(r, "1234");
    free(r);
    ck_assert_ptr_null(dllm_gsm8k_reference("no hashes"));
    /* numbers of any length never crash and never compare equal when unparsable */
    ck_assert_int_eq(dllm_gsm8k_equal("99999999999999999999999999", "99999999999999999999999998"), 0);
}
END_TEST

/* The format part of the d1 reward (reward minus correctness) against the
 * Python reference (tests/ref/tasks_gsm8k_reward.py). */
START_TEST(test_gsm8k_format_golden)
{
    char *buf;
    size_t len;
    dllm_err err = {0};
    ck_assert_int_eq(dllm_read_file(data_path("gsm8k_format_ref.jsonl"), &buf, &len, &err), 0);
    dllm_task_item it = item_with_answer("987654321");
    int n = 0;
    for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n")) {
        json_error_t je;
        json_t *o = json_loads(line, 0, &je);
        ck_assert_ptr_nonnull(o);
        json_t *c = json_object_get(o, "completion");
        double want = json_real_value(json_object_get(o, "strict")) + json_real_value(json_object_get(o, "soft")) +
                      json_real_value(json_object_get(o, "int")) + json_real_value(json_object_get(o, "xml"));
        double got = dllm_task_gsm8k.reward(&it, json_string_value(c), json_string_length(c));
        ck_assert_msg(fabs(got - want) < 1e-9, "line %d: got %.6f want %.6f", n + 1, got, want);
        json_decref(o);
        n++;
    }
    ck_assert_int_ge(n, 20);
    dllm_task_item_free(&it);
    free(buf);
}
END_TEST

START_TEST(test_gsm8k_reward_total)
{
    dllm_task_item it = item_with_answer("16");
    const char *c = "<reasoning>\nthink\n</reasoning>\n<answer>\n16\n</answer>\n";
    /* correctness 2 + strict 0.5 + int 0.5 + xml 0.5; soft needs a one-line match */
    ck_assert_double_eq_tol(dllm_task_gsm8k.reward(&it, c, strlen(c)), 3.5, 1e-12);
    const char *s = "<reasoning>r</reasoning>\n<answer>16</answer>";
    ck_assert_double_eq_tol(dllm_task_gsm8k.reward(&it, s, strlen(s)), 2.0 + 0.5 + 0.5, 1e-12);
    /* bytes after a NUL are still text */
    const char z[] = "<answer>1\0006</answer>";
    ck_assert_int_eq(dllm_task_gsm8k.correct(&it, z, sizeof z - 1), 0);
    dllm_task_item_free(&it);
}
END_TEST

/* ---------------- MATH ---------------- */

typedef struct {
    const char *a, *b;
    int equiv;
} math_case;

static const math_case math_cases[] = {
    {"\\frac{1}{2}", "\\frac12", 1},
    {"\\dfrac{1}{2}", "\\frac{1}{2}", 1},
    {"\\tfrac{3}{4}", "0.75", 1},
    {"0.5", "\\frac12", 1},
    {"1/2", "\\frac{1}{2}", 1},
    {"2/4", "\\frac{1}{2}", 1},
    {"-\\frac{1}{2}", "-0.5", 1},
    {"\\frac{-1}{2}", "-\\frac12", 1},
    {"\\frac1{2}", "\\frac{1}{2}", 1},
    {"\\frac{1}2", "0.5", 1},
    {"\\sqrt2", "\\sqrt{2}", 1},
    {"2\\sqrt3", "2\\sqrt{3}", 1},
    {"\\left(1,2\\right)", "(1,2)", 1},
    {"(1, 2)", "(1,2)", 1},
    {"(1,2)", "(2,1)", 0},
    {"120^\\circ", "120", 1},
    {"120^{\\circ}", "120", 1},
    {"120 degrees", "120", 1},
    {"10\\text{ cm}", "10", 1},
    {"\\text{(A)}", "(A)", 1},
    {"5\\%", "5", 1},
    {"$5$", "5", 1},
    {"\\$5.00", "5", 1},
    {"x = 5", "5", 1},
    {"x=\\frac{7}{2}", "3.5", 1},
    {"y = 2x + 1", "2x+1", 1},
    {"2.50", "2.5", 1},
    {"3.0", "3", 1},
    {".5", "0.5", 1},
    {"1\\!000", "1000", 1},
    {"1,000", "1000", 1},
    {"\\frac{5}{4}", "1.25", 1},
    {"\\frac{5}{4}", "1.24", 0},
    {"\\pi", "\\pi", 1},
    {"2\\pi", "\\pi", 0},
    {"\\infty", "\\infty", 1},
    {"", "0", 0},
    {"\\frac{a}{b}", "\\frac{a}{b}", 1},
    {"\\frac{1}{0}", "\\frac{2}{0}", 0},
    {"3", "4", 0},
    {"\\left[0,1\\right)", "[0,1)", 1},
    {"\\mbox{east}", "east", 1},
    {"a\\,b", "ab", 1},
    {"\\frac{\\sqrt{3}}{2}", "\\frac{\\sqrt3}{2}", 1},
    {"x^2+2x+1", "x^2 + 2x + 1", 1},
    {"\\rightarrow", "\\rightarrow", 1}, /* \right must not eat \rightarrow */
};

START_TEST(test_math_equiv)
{
    const math_case *c = &math_cases[_i];
    int got = dllm_math_equiv(c->a, c->b);
    char *na = dllm_math_normalize(c->a), *nb = dllm_math_normalize(c->b);
    ck_assert_msg(got == c->equiv, "case %d '%s' ~ '%s' (normalised '%s' / '%s'): got %d", _i, c->a, c->b, na, nb,
                  got);
    /* symmetric */
    ck_assert_int_eq(dllm_math_equiv(c->b, c->a), got);
    free(na);
    free(nb);
}
END_TEST

typedef struct {
    const char *text;
    const char *boxed; /* NULL: none */
} boxed_case;

static const boxed_case boxed_cases[] = {
    {"so \\boxed{5}.", "5"},
    {"\\boxed{1} then \\boxed{2}", "2"},
    {"\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"},
    {"\\boxed{{a}{b}}", "{a}{b}"},
    {"\\fbox{7}", "7"},
    {"\\boxed{3} and \\fbox{4}", "4"},
    {"\\boxed 5$ done", "5"},
    {"\\boxed{unbalanced", NULL},
    {"nothing", NULL},
    {"\\boxed", NULL},
    {"\\boxed{\\{1,2\\}}", "\\{1,2\\}"},
    {"\\boxed{}", ""},
};

START_TEST(test_math_boxed)
{
    const boxed_case *c = &boxed_cases[_i];
    char *got = dllm_answer_last_boxed(c->text, strlen(c->text));
    if (!c->boxed)
        ck_assert_ptr_null(got);
    else {
        ck_assert_ptr_nonnull(got);
        ck_assert_str_eq(got, c->boxed);
    }
    free(got);
}
END_TEST

START_TEST(test_math_task)
{
    dllm_task_items items;
    dllm_task_source src = {.path = data_path("math500_small.jsonl")};
    dllm_err err = {0};
    ck_assert_int_eq(dllm_task_load(&dllm_task_math500, &src, &items, &err), 0);
    ck_assert_uint_eq(items.n, 5);
    ck_assert_str_eq(items.items[1].answer, "120^\\circ"); /* from the solution's \boxed{} */
    const char *c = "<reasoning>\nangles\n</reasoning>\n<answer>\n\\boxed{120}\n</answer>";
    ck_assert_double_eq(dllm_task_math500.reward(&items.items[1], c, strlen(c)), 1.0);
    const char *w = "<answer>\\boxed{\\dfrac{10}{8}}</answer>";
    ck_assert_int_eq(dllm_task_math500.correct(&items.items[0], w, strlen(w)), 1);
    ck_assert_int_eq(dllm_task_math500.correct(&items.items[2], w, strlen(w)), 0);
    /* a grading line may carry the reference as a JSON number */
    json_t *o = json_loads("{\"answer\": 0.25}", 0, NULL);
    dllm_task_item q;
    memset(&q, 0, sizeof q);
    ck_assert_int_eq(dllm_task_math500.from_json(o, 0, &q, &err), 0);
    const char *quarter = "\\boxed{\\frac14}";
    ck_assert_int_eq(dllm_task_math500.correct(&q, quarter, strlen(quarter)), 1);
    dllm_task_item_free(&q);
    json_decref(o);
    const char *x = "<answer>(2, 1)</answer>";
    ck_assert_int_eq(dllm_task_math500.correct(&items.items[4], x, strlen(x)), 1);
    char *p = dllm_task_math500.format(&items.items[0]);
    ck_assert_ptr_nonnull(strstr(p, "\\boxed{}"));
    ck_assert_ptr_nonnull(strstr(p, items.items[0].question));
    free(p);
    dllm_task_items_free(&items);
}
END_TEST

/* ---------------- Countdown ---------------- */

typedef struct {
    const char *expr;
    int status;
    double value; /* when status == OK */
} cd_case;

static const cd_case cd_cases[] = {
    {"1+2", DLLM_CD_OK, 3},
    {"2*3+4", DLLM_CD_OK, 10},
    {"2*(3+4)", DLLM_CD_OK, 14},
    {"10-4-3", DLLM_CD_OK, 3},      /* left associative */
    {"100/10/5", DLLM_CD_OK, 2},
    {"7/2", DLLM_CD_OK, 3.5},
    {"-3+5", DLLM_CD_OK, 2},        /* unary minus */
    {"--3", DLLM_CD_OK, 3},
    {"2*-3", DLLM_CD_OK, -6},
    {"-(2+3)", DLLM_CD_OK, -5},
    {"+4", DLLM_CD_OK, 4},
    {" ( 1 + 2 ) * 3 ", DLLM_CD_OK, 9},
    {"1/0", DLLM_CD_DIV0, 0},
    {"5/(3-3)", DLLM_CD_DIV0, 0},
    {"99999999999*99999999999", DLLM_CD_OVERFLOW, 0},
    {"99999999999999999999", DLLM_CD_OVERFLOW, 0},
    {"9223372036854775807+1", DLLM_CD_OVERFLOW, 0},
    {"", DLLM_CD_MALFORMED, 0},
    {"   ", DLLM_CD_MALFORMED, 0},
    {"(1+2", DLLM_CD_MALFORMED, 0},
    {"1+2)", DLLM_CD_MALFORMED, 0},
    {"1+", DLLM_CD_MALFORMED, 0},
    {"*2", DLLM_CD_MALFORMED, 0},
    {"2 3", DLLM_CD_MALFORMED, 0},
    {"2(3)", DLLM_CD_MALFORMED, 0},
    {"1.5+2", DLLM_CD_MALFORMED, 0},
    {"1+2=3", DLLM_CD_MALFORMED, 0},
    {"import os", DLLM_CD_MALFORMED, 0},
    {"__import__('os').system('x')", DLLM_CD_MALFORMED, 0},
    {"2**3", DLLM_CD_MALFORMED, 0},
    {"()", DLLM_CD_MALFORMED, 0},
    {"1 / 0 + (", DLLM_CD_MALFORMED, 0},
};

START_TEST(test_countdown_eval)
{
    const cd_case *c = &cd_cases[_i];
    dllm_countdown_expr e;
    int st = dllm_countdown_eval(c->expr, strlen(c->expr), &e);
    ck_assert_msg(st == c->status, "case %d '%s': status %d, want %d", _i, c->expr, st, c->status);
    if (st == DLLM_CD_OK)
        ck_assert_double_eq_tol((double)e.value.num / (double)e.value.den, c->value, 1e-12);
}
END_TEST

/* Random expressions against Python's Fraction (tests/ref/tasks_countdown_ref.py). */
START_TEST(test_countdown_reference)
{
    char *buf;
    size_t len;
    dllm_err err = {0};
    ck_assert_int_eq(dllm_read_file(data_path("countdown_exprs.tsv"), &buf, &len, &err), 0);
    int n = 0, div0 = 0;
    for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n")) {
        char *tab = strchr(line, '\t');
        ck_assert_ptr_nonnull(tab);
        *tab = 0;
        dllm_countdown_expr e;
        int st = dllm_countdown_eval(line, strlen(line), &e);
        if (!strcmp(tab + 1, "div0")) {
            ck_assert_msg(st == DLLM_CD_DIV0, "'%s': status %d, want division by zero", line, st);
            div0++;
        } else {
            long long num, den;
            ck_assert_int_eq(sscanf(tab + 1, "%lld/%lld", &num, &den), 2);
            ck_assert_msg(st == DLLM_CD_OK && e.value.num == num && e.value.den == den,
                          "'%s': status %d value %lld/%lld, want %lld/%lld", line, st, (long long)e.value.num,
                          (long long)e.value.den, num, den);
        }
        n++;
    }
    ck_assert_int_eq(n, 300);
    ck_assert_int_ge(div0, 1);
    free(buf);
}
END_TEST

START_TEST(test_countdown_deep)
{
    /* deep nesting: within the limit fine, beyond it malformed, never a stack overflow */
    size_t n = 100000;
    char *s = dllm_malloc(2 * n + 2);
    for (size_t depth = 50; depth <= n; depth *= 10) {
        memset(s, '(', depth);
        s[depth] = '1';
        memset(s + depth + 1, ')', depth);
        dllm_countdown_expr e;
        int st = dllm_countdown_eval(s, 2 * depth + 1, &e);
        ck_assert_int_eq(st, depth <= DLLM_COUNTDOWN_MAX_DEPTH ? DLLM_CD_OK : DLLM_CD_MALFORMED);
        memset(s, '-', depth);
        st = dllm_countdown_eval(s, depth + 1, &e);
        ck_assert_int_eq(st, depth <= DLLM_COUNTDOWN_MAX_DEPTH ? DLLM_CD_OK : DLLM_CD_MALFORMED);
    }
    free(s);
}
END_TEST

START_TEST(test_countdown_score)
{
    int64_t nums[3] = {3, 7, 2};
#define SCORE(text) dllm_countdown_score(nums, 3, 23, text, strlen(text))
    ck_assert_double_eq(SCORE("<answer>3*7+2</answer>"), 1.0);
    ck_assert_double_eq(SCORE("<answer>\n2 + 7*3\n</answer>"), 1.0);
    ck_assert_double_eq(SCORE("reasoning...\n(7*3)+2\n"), 1.0);          /* last line */
    ck_assert_double_eq(SCORE("<answer>3*7-2</answer>"), 0.1);          /* wrong value */
    ck_assert_double_eq(SCORE("<answer>3*7+2+0</answer>"), 0.1);        /* extra number */
    ck_assert_double_eq(SCORE("<answer>7*3+3-3+2</answer>"), 0.1);      /* number reused */
    ck_assert_double_eq(SCORE("<answer>21+2</answer>"), 0.1);           /* number missing */
    ck_assert_double_eq(SCORE("<answer>3*7+2/0</answer>"), 0.1);        /* division by zero */
    ck_assert_double_eq(SCORE("<answer>(3*7+2</answer>"), 0.0);         /* unbalanced */
    ck_assert_double_eq(SCORE("<answer>3*7+2 = 23</answer>"), 0.0);     /* equals sign */
    ck_assert_double_eq(SCORE("<answer></answer>"), 0.0);               /* empty */
    ck_assert_double_eq(SCORE(""), 0.0);
    ck_assert_double_eq(SCORE("<answer>rm -rf /</answer>"), 0.0);       /* garbage */
    ck_assert_double_eq(SCORE("<answer>-2+7*3+2+2</answer>"), 0.1);     /* unary minus, extra 2 */
    ck_assert_double_eq(SCORE("<answer>3*7+2</answer>\n<answer>1</answer>"), 0.1); /* last tag */
    ck_assert_double_eq(SCORE("<answer>99999999999999999999*3+7+2</answer>"), 0.1); /* overflow */
    int64_t n2[3] = {4, 2, 3};
    /* -(2-4)... unary minus on a used number is allowed: -(2-4)*3 = 6, with 4 extra? no: uses 2,4,3 */
    ck_assert_double_eq(dllm_countdown_score(n2, 3, 6, "<answer>-(2-4)*3</answer>", 25), 1.0);
    /* exact rationals: 3/2*4 = 6 */
    ck_assert_double_eq(dllm_countdown_score(n2, 3, 6, "<answer>3/2*4</answer>", 22), 1.0);
#undef SCORE
}
END_TEST

/* task.reward.kind partial: 1 correct; the right numbers with a wrong value earn
 * 0.2 + 0.6 (1 - |v - t| / t), nearer more; otherwise d1's 0.1 and 0 */
START_TEST(test_countdown_partial)
{
    int64_t nums[3] = {3, 7, 2};
#define PART(text) dllm_countdown_partial(nums, 3, 23, text, strlen(text))
    ck_assert_double_eq(PART("<answer>3*7+2</answer>"), 1.0);
    ck_assert_double_eq(PART("<answer>2+3*7</answer>"), 1.0); /* another expression */
    /* 3*7-2 = 19: 0.2 + 0.6 (1 - 4/23) */
    ck_assert_double_eq_tol(PART("<answer>3*7-2</answer>"), 0.2 + 0.6 * (1 - 4.0 / 23), 1e-15);
    /* 7*(3+2) = 35 is 12 off, 7/(3*2) = 7/6 is 21.83 off: nearer earns more */
    const double near = PART("<answer>3*7-2</answer>"), mid = PART("<answer>7*(3+2)</answer>");
    const double far = PART("<answer>7/(3*2)</answer>");
    ck_assert_double_eq_tol(far, 0.2 + 0.6 * (1 - (23 - 7.0 / 6) / 23), 1e-15);
    ck_assert(near > mid && mid > far && far > 0.2);
    /* 3*7*2 = 42 */
    ck_assert_double_eq_tol(PART("<answer>3*7*2</answer>"), 0.2 + 0.6 * (1 - 19.0 / 23), 1e-15);
    ck_assert_double_eq(PART("<answer>3*7+2+0</answer>"), 0.1); /* extra number */
    ck_assert_double_eq(PART("<answer>21+2</answer>"), 0.1);    /* number missing */
    ck_assert_double_eq(PART("<answer>3*7+2/0</answer>"), 0.1); /* division by zero */
    ck_assert_double_eq(PART("<answer>(3*7+2</answer>"), 0.0);
    ck_assert_double_eq(PART(""), 0.0);
    /* a partial reward stays below 1 however near the value: 100 - 1/99 for 100 */
    int64_t n2[3] = {1, 99, 100};
    const char *t = "<answer>100-1/99</answer>";
    const double r = dllm_countdown_partial(n2, 3, 100, t, strlen(t));
    ck_assert(r < 0.8 && r > 0.79);
    /* 99*100*1 = 9900: more than the target away, the floor 0.2 */
    t = "<answer>99*100*1</answer>";
    ck_assert_double_eq(dllm_countdown_partial(n2, 3, 100, t, strlen(t)), 0.2);
    /* the d1 score of every case above is unchanged: 1.0 exactly where partial is 1 */
    ck_assert_double_eq(dllm_countdown_score(nums, 3, 23, "<answer>3*7-2</answer>", 22), 0.1);
#undef PART
    /* the registry: countdown and sudoku have one, the others not; sudoku's is its reward */
    ck_assert_ptr_nonnull(dllm_task_find("countdown")->partial);
    ck_assert_ptr_nonnull(dllm_task_find("sudoku")->partial);
    ck_assert_ptr_null(dllm_task_find("gsm8k")->partial);
    ck_assert_ptr_null(dllm_task_find("math500")->partial);
    dllm_task_item it = {0};
    memcpy(it.puzzle, "1204040221004301", 17);
    memcpy(it.solution, "1234341221434321", 17);
    const char *c = "<answer>1234341221434311</answer>";
    const dllm_task *s = dllm_task_find("sudoku");
    ck_assert_double_eq(s->partial(&it, c, strlen(c)), s->reward(&it, c, strlen(c)));
    ck_assert_double_eq(s->partial(&it, c, strlen(c)), 5.0 / 6); /* 5 of 6 blanks right */
}
END_TEST

START_TEST(test_countdown_solver)
{
    char expr[256];
    int64_t a[3] = {44, 19, 35};
    ck_assert_int_eq(dllm_countdown_solve(a, 3, 98, expr, sizeof expr), 1);
    dllm_countdown_expr e;
    ck_assert_int_eq(dllm_countdown_eval(expr, strlen(expr), &e), DLLM_CD_OK);
    ck_assert_int_eq(dllm_countdown_check(&e, a, 3, 98), 1);
    int64_t b[3] = {1, 1, 1};
    ck_assert_int_eq(dllm_countdown_solve(b, 3, 100, NULL, 0), 0); /* max is 3 */
    int64_t c[4] = {1, 5, 5, 5}; /* 5*(5-1/5) = 24 needs fractions */
    ck_assert_int_eq(dllm_countdown_solve(c, 4, 24, expr, sizeof expr), 1);
    ck_assert_int_eq(dllm_countdown_eval(expr, strlen(expr), &e), DLLM_CD_OK);
    ck_assert_int_eq(dllm_countdown_check(&e, c, 4, 24), 1);
    int64_t d[4] = {1, 1, 1, 1};
    ck_assert_int_eq(dllm_countdown_solve(d, 4, 24, NULL, 0), 0);
    int64_t f[4] = {3, 3, 8, 8}; /* 8/(3-8/3) = 24 */
    ck_assert_int_eq(dllm_countdown_solve(f, 4, 24, expr, sizeof expr), 1);
    ck_assert_int_eq(dllm_countdown_eval(expr, strlen(expr), &e), DLLM_CD_OK);
    ck_assert_int_eq(dllm_countdown_check(&e, f, 4, 24), 1);
}
END_TEST

START_TEST(test_countdown_generator)
{
    for (int n = 3; n <= 4; n++) {
        dllm_task_source src = {.seed = 7, .n = 50, .n_numbers = n};
        dllm_task_items a, b;
        dllm_err err = {0};
        ck_assert_int_eq(dllm_task_load(&dllm_task_countdown, &src, &a, &err), 0);
        ck_assert_int_eq(dllm_task_load(&dllm_task_countdown, &src, &b, &err), 0);
        int differs = 0;
        for (size_t i = 0; i < a.n; i++) {
            const dllm_task_item *it = &a.items[i];
            ck_assert_int_eq(it->n_nums, n);
            for (int k = 0; k < n; k++) {
                ck_assert(it->nums[k] >= 1 && it->nums[k] <= 99);
                ck_assert_int_eq(it->nums[k], b.items[i].nums[k]);
            }
            ck_assert_int_eq(it->target, b.items[i].target);
            ck_assert(it->target >= 1 && it->target <= 99);
            char expr[256], compl[300];
            ck_assert_int_eq(dllm_countdown_solve(it->nums, n, it->target, expr, sizeof expr), 1);
            snprintf(compl, sizeof compl, "<answer>%s</answer>", expr);
            ck_assert_double_eq(dllm_task_countdown.reward(it, compl, strlen(compl)), 1.0);
            differs += i > 0 && it->target != a.items[i - 1].target;
        }
        ck_assert_int_gt(differs, 10);
        /* another seed gives other problems */
        src.seed = 8;
        dllm_task_items c;
        ck_assert_int_eq(dllm_task_load(&dllm_task_countdown, &src, &c, &err), 0);
        int same = 0;
        for (size_t i = 0; i < c.n; i++)
            same += c.items[i].target == a.items[i].target && c.items[i].nums[0] == a.items[i].nums[0];
        ck_assert_int_lt(same, 5);
        char *p = dllm_task_countdown.format(&a.items[0]);
        ck_assert_ptr_nonnull(strstr(p, "<answer></answer>"));
        free(p);
        dllm_task_items_free(&a);
        dllm_task_items_free(&b);
        dllm_task_items_free(&c);
    }
}
END_TEST

/* ---------------- Sudoku ---------------- */

START_TEST(test_sudoku_counts)
{
    /* solution counts from the brute-force reference (tests/ref/tasks_sudoku_ref.py) */
    char *buf;
    size_t len;
    dllm_err err = {0};
    ck_assert_int_eq(dllm_read_file(data_path("sudoku_counts.tsv"), &buf, &len, &err), 0);
    int lines = 0;
    for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n")) {
        char puzzle[17];
        int count;
        ck_assert_int_eq(sscanf(line, "%16s %d", puzzle, &count), 2);
        ck_assert_msg(dllm_sudoku_count_solutions(puzzle, 1000, NULL) == count, "%s: want %d", puzzle, count);
        lines++;
    }
    ck_assert_int_ge(lines, 5);
    free(buf);
}
END_TEST

START_TEST(test_sudoku_generator)
{
    for (uint64_t seed = 0; seed < 300; seed++) {
        char p[17], s[17], found[17];
        int mb = 4 + (int)(seed % 10);
        dllm_sudoku_generate(seed, seed * 3, mb, p, s);
        ck_assert_int_eq(dllm_sudoku_count_solutions(p, 10, found), 1);
        ck_assert_str_eq(found, s);
        int blanks = 0;
        for (int k = 0; k < 16; k++)
            blanks += p[k] == '0';
        ck_assert_int_le(blanks, mb);
        ck_assert_int_ge(blanks, 4 < mb ? 4 : mb);
        char again_p[17], again_s[17];
        dllm_sudoku_generate(seed, seed * 3, mb, again_p, again_s);
        ck_assert_str_eq(again_p, p);
        ck_assert_str_eq(again_s, s);
    }
}
END_TEST

START_TEST(test_sudoku_score)
{
    const char *p = "1040041300240201", *s = "1342241331244231"; /* 7 blanks */
#define SCORE(text) dllm_sudoku_score(p, s, text, strlen(text))
    ck_assert_double_eq(SCORE("<answer>1342241331244231</answer>"), 1.0);
    ck_assert_double_eq(SCORE("<answer>\n1342\n2413\n3124\n4231\n</answer>"), 1.0);
    ck_assert_double_eq(SCORE("<answer>1 3 4 2 | 2 4 1 3 | 3 1 2 4 | 4 2 3 1</answer>"), 1.0);
    ck_assert_double_eq(SCORE("<answer>1040041300240201</answer>"), 0.0);    /* puzzle echoed */
    ck_assert_double_eq_tol(SCORE("<answer>13422413</answer>"), 3.0 / 7.0, 1e-12); /* partial: 3 of 7 */
    ck_assert_double_eq_tol(SCORE("<answer>1342241331244231999</answer>"), 1.0, 1e-12); /* truncated */
    ck_assert_double_eq(SCORE("1342241331244231"), 0.0);                      /* no tag */
    ck_assert_double_eq(SCORE("<answer>no digits</answer>"), 0.0);
    ck_assert_double_eq(SCORE("<answer></answer>"), 0.0);
    ck_assert_double_eq(SCORE(""), 0.0);
#undef SCORE
    dllm_task_item it;
    memset(&it, 0, sizeof it);
    dllm_err err = {0};
    ck_assert_int_eq(dllm_sudoku_item_from_strings(&it, p, s, &err), 0);
    const char *ok = "<answer>1342241331244231</answer>";
    ck_assert_int_eq(dllm_task_sudoku.correct(&it, ok, strlen(ok)), 1);
    const char *bad = "<answer>1342241331244213</answer>";
    ck_assert_int_eq(dllm_task_sudoku.correct(&it, bad, strlen(bad)), 0);
    dllm_task_item_free(&it);
    /* malformed pairs */
    ck_assert_int_eq(dllm_sudoku_item_from_strings(&it, "104004130024020", s, &err), DLLM_EXIT_INPUT);
    ck_assert_int_eq(dllm_sudoku_item_from_strings(&it, "1140041300240201", s, &err), DLLM_EXIT_INPUT);
    ck_assert_int_eq(dllm_sudoku_item_from_strings(&it, p, "2342241331244231", &err), DLLM_EXIT_INPUT);
    ck_assert_int_eq(dllm_sudoku_item_from_strings(&it, p, "1342241331244232", &err), DLLM_EXIT_INPUT);
}
END_TEST

START_TEST(test_sudoku_loaders)
{
    dllm_err err = {0};
    dllm_task_items a, b;
    dllm_task_source src = {.path = data_path("sudoku_small.csv")};
    ck_assert_int_eq(dllm_task_load(&dllm_task_sudoku, &src, &a, &err), 0);
    ck_assert_uint_eq(a.n, 3);
    src.path = data_path("sudoku_small.jsonl");
    ck_assert_int_eq(dllm_task_load(&dllm_task_sudoku, &src, &b, &err), 0);
    ck_assert_uint_eq(b.n, 2);
    ck_assert_str_eq(a.items[2].puzzle, b.items[0].puzzle); /* the files share one puzzle */
    for (size_t i = 0; i < a.n; i++)
        ck_assert_int_eq(dllm_sudoku_count_solutions(a.items[i].puzzle, 10, NULL), 1);
    char *prompt = dllm_task_sudoku.format(&a.items[0]);
    ck_assert_ptr_nonnull(strstr(prompt, a.items[0].puzzle));
    free(prompt);
    dllm_task_items_free(&a);
    dllm_task_items_free(&b);
}
END_TEST

/* ---------------- loaders, splits ---------------- */

START_TEST(test_gsm8k_loader)
{
    dllm_task_items items;
    dllm_task_source src = {.path = data_path("gsm8k_small.jsonl")};
    dllm_err err = {0};
    ck_assert_int_eq(dllm_task_load(&dllm_task_gsm8k, &src, &items, &err), 0);
    ck_assert_uint_eq(items.n, 6); /* the blank line is not an item */
    ck_assert_str_eq(items.items[0].answer, "16");
    ck_assert_str_eq(items.items[5].answer, "-7");
    dllm_task_items cd;
    dllm_task_source cs = {.path = data_path("countdown_small.jsonl")};
    ck_assert_int_eq(dllm_task_load(&dllm_task_countdown, &cs, &cd, &err), 0);
    ck_assert_uint_eq(cd.n, 4);
    ck_assert_int_eq(cd.items[2].n_nums, 4);
    ck_assert_int_eq(cd.items[2].target, 52);
    for (size_t i = 0; i < cd.n; i++) /* every fixture problem is solvable */
        ck_assert_int_eq(dllm_countdown_solve(cd.items[i].nums, cd.items[i].n_nums, cd.items[i].target, NULL, 0), 1);
    dllm_task_items_free(&cd);
    char *p = dllm_task_gsm8k.format(&items.items[0]);
    ck_assert_ptr_nonnull(strstr(p, "<reasoning>"));
    ck_assert_ptr_nonnull(strstr(p, "Mia has 12 apples"));
    free(p);
    dllm_task_items_free(&items);
}
END_TEST

typedef struct {
    const dllm_task *task;
    const char *content;
    const char *want; /* substring of the error, after "FILE:" */
} bad_case;

START_TEST(test_malformed_lines)
{
    const bad_case cases[] = {
        {&dllm_task_gsm8k, "{\"question\": \"q\", \"answer\": \"#### 1\"}\n{\"question\": \"q\"\n", ":2: invalid JSON"},
        {&dllm_task_gsm8k, "{\"question\": \"q\", \"answer\": \"#### 1\"}\n\n[1, 2]\n", ":3: expected a JSON object"},
        {&dllm_task_gsm8k, "{\"question\": \"q\"}\n", ":1: missing key 'answer'"},
        {&dllm_task_gsm8k, "{\"answer\": \"#### 3\"}\n", ":1: missing key 'question'"},
        {&dllm_task_gsm8k, "{\"question\": \"q\", \"answer\": \"#### lots\"}\n", ":1: key 'answer'"},
        {&dllm_task_gsm8k, "{\"question\": 5, \"answer\": \"#### 1\"}\n", ":1: key 'question': expected a string"},
        {&dllm_task_math500, "{\"problem\": \"p\", \"solution\": \"no box\"}\n", ":1: key 'solution'"},
        {&dllm_task_math500, "{\"problem\": \"p\"}\n", ":1: missing key 'answer'"},
        {&dllm_task_countdown, "{\"nums\": [1, 2], \"target\": 3}\n{\"nums\": [1], \"target\": 3}\n", ":2: key 'nums'"},
        {&dllm_task_countdown, "{\"nums\": [1, \"x\", 3], \"target\": 3}\n", ":1: key 'nums': element 1"},
        {&dllm_task_countdown, "{\"nums\": [1, 2, 3]}\n", ":1: missing key 'target'"},
        {&dllm_task_sudoku, "{\"puzzle\": \"123\", \"solution\": \"1\"}\n", ":1: puzzle '123'"},
        {&dllm_task_sudoku, "Puzzle,Solution\n1040041300240201,1342241331244231\n1040,13\n", ":3: puzzle '1040'"},
        {&dllm_task_sudoku, "Puzzle,Solution\n1040041300240201,1342241331244231,9\n", ":2: expected 2 fields"},
        {&dllm_task_sudoku, "A,B\n1,2\n", ":1: CSV header"},
        {&dllm_task_gsm8k, "\n\n", ": no items"},
    };
    make_tmpdir();
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char name[32];
        snprintf(name, sizeof name, "bad%zu.jsonl", i);
        char *path = write_tmp(name, cases[i].content);
        dllm_task_source src = {.path = path};
        dllm_task_items items = {0};
        dllm_err err = {0};
        ck_assert_int_eq(dllm_task_load(cases[i].task, &src, &items, &err), DLLM_EXIT_INPUT);
        ck_assert_uint_eq(items.n, 0);
        char want[512];
        snprintf(want, sizeof want, "%s%s", path, cases[i].want);
        ck_assert_msg(strstr(err.msg, want) == err.msg, "case %zu: message '%s', want prefix '%s'", i, err.msg,
                      want);
    }
    /* a generator-less task without a file */
    dllm_task_source none = {.n = 3};
    dllm_task_items items;
    dllm_err err = {0};
    ck_assert_int_eq(dllm_task_load(&dllm_task_gsm8k, &none, &items, &err), DLLM_EXIT_INPUT);
    remove_tmpdir();
}
END_TEST

START_TEST(test_split)
{
    size_t *tr, *ev, *tr2, *ev2, ntr, nev, ntr2, nev2;
    dllm_task_split(1000, 0.1, 42, &tr, &ntr, &ev, &nev);
    dllm_task_split(1000, 0.1, 42, &tr2, &ntr2, &ev2, &nev2);
    ck_assert_uint_eq(nev, 100);
    ck_assert_uint_eq(ntr, 900);
    ck_assert_uint_eq(nev2, nev);
    ck_assert_int_eq(memcmp(ev, ev2, nev * sizeof *ev), 0);
    ck_assert_int_eq(memcmp(tr, tr2, ntr * sizeof *tr), 0);
    /* a partition: every index exactly once */
    char *seen = calloc(1000, 1);
    for (size_t i = 0; i < nev; i++)
        seen[ev[i]]++;
    for (size_t i = 0; i < ntr; i++)
        seen[tr[i]]++;
    for (size_t i = 0; i < 1000; i++)
        ck_assert_int_eq(seen[i], 1);
    free(seen);
    /* another seed, another eval set */
    free(tr2);
    free(ev2);
    dllm_task_split(1000, 0.1, 43, &tr2, &ntr2, &ev2, &nev2);
    ck_assert_int_ne(memcmp(ev, ev2, nev * sizeof *ev), 0);
    free(tr);
    free(ev);
    free(tr2);
    free(ev2);
    /* sampling: distinct, deterministic, step-dependent */
    size_t a[20], b[20], c[20];
    dllm_task_sample_indices(50, 20, 1, 0, a);
    dllm_task_sample_indices(50, 20, 1, 0, b);
    dllm_task_sample_indices(50, 20, 1, 1, c);
    ck_assert_int_eq(memcmp(a, b, sizeof a), 0);
    ck_assert_int_ne(memcmp(a, c, sizeof a), 0);
    for (int i = 0; i < 20; i++)
        for (int j = i + 1; j < 20; j++)
            ck_assert_uint_ne(a[i], a[j]);
}
END_TEST

START_TEST(test_registry)
{
    size_t n;
    const dllm_task *const *all = dllm_task_all(&n);
    ck_assert_uint_eq(n, 4);
    for (size_t i = 0; i < n; i++)
        ck_assert_ptr_eq(dllm_task_find(all[i]->name), all[i]);
    ck_assert_ptr_null(dllm_task_find("nope"));
}
END_TEST

/* ---------------- commands ---------------- */

/* Runs a shell command; returns exit status and captures stdout+stderr. */
static int run(const char *cmd, char *out, size_t cap)
{
    FILE *f = popen(cmd, "r");
    ck_assert_ptr_nonnull(f);
    size_t n = fread(out, 1, cap - 1, f);
    out[n] = 0;
    int st = pclose(f);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

START_TEST(test_commands)
{
    const char *bin = getenv("DLLM_BIN");
    if (!bin || access(bin, X_OK)) {
        fprintf(stderr, "test_commands: DLLM_BIN not set or not executable; skipped\n");
        return;
    }
    static char out[1 << 16], out2[1 << 16], cmd[2048];
    snprintf(cmd, sizeof cmd, "'%s' tasks list 2>&1", bin);
    ck_assert_int_eq(run(cmd, out, sizeof out), 0);
    ck_assert_ptr_nonnull(strstr(out, "countdown"));
    ck_assert_ptr_nonnull(strstr(out, "math500"));
    snprintf(cmd, sizeof cmd, "'%s' tasks sample countdown --n 3 --seed 5 2>&1", bin);
    ck_assert_int_eq(run(cmd, out, sizeof out), 0);
    ck_assert_int_eq(run(cmd, out2, sizeof out2), 0);
    ck_assert_str_eq(out, out2);
    ck_assert_ptr_nonnull(strstr(out, "item 2"));
    snprintf(cmd, sizeof cmd, "'%s' tasks sample gsm8k --n 2 --seed 1 --data '%s' 2>&1", bin,
             data_path("gsm8k_small.jsonl"));
    ck_assert_int_eq(run(cmd, out, sizeof out), 0);
    ck_assert_ptr_nonnull(strstr(out, "Respond in the following format"));
    snprintf(cmd, sizeof cmd, "'%s' grade countdown --input '%s' 2>&1", bin, data_path("grade_countdown.jsonl"));
    ck_assert_int_eq(run(cmd, out, sizeof out), 0);
    ck_assert_ptr_nonnull(strstr(out, "1 1.000000 1\n2 1.000000 1\n3 0.100000 0\n4 0.000000 0\n"));
    ck_assert_ptr_nonnull(strstr(out, "reward_mean 0.525000\naccuracy 0.500000\naccuracy_se 0.288675\n"));
    snprintf(cmd, sizeof cmd, "'%s' grade gsm8k --input '%s' --quiet 2>&1", bin, data_path("grade_gsm8k.jsonl"));
    ck_assert_int_eq(run(cmd, out, sizeof out), 0);
    ck_assert_ptr_nonnull(strstr(out, "accuracy 0.750000"));
    make_tmpdir();
    char *bad = write_tmp("bad.jsonl", "{\"completion\": \"x\", \"answer\": \"1\"}\n{\"answer\": \"1\"}\n");
    snprintf(cmd, sizeof cmd, "'%s' grade gsm8k --input '%s' 2>&1", bin, bad);
    ck_assert_int_eq(run(cmd, out, sizeof out), 2);
    char want[600];
    snprintf(want, sizeof want, "%s:2: key 'completion'", bad);
    ck_assert_ptr_nonnull(strstr(out, want));
    snprintf(cmd, sizeof cmd, "'%s' tasks sample gsm8k --data '%s' 2>&1", bin, bad);
    ck_assert_int_eq(run(cmd, out, sizeof out), 2);
    snprintf(want, sizeof want, "%s:1: missing key 'question'", bad);
    ck_assert_ptr_nonnull(strstr(out, want));
    snprintf(cmd, sizeof cmd, "'%s' grade --help 2>&1", bin);
    ck_assert_int_eq(run(cmd, out, sizeof out), 0);
    snprintf(cmd, sizeof cmd, "'%s' tasks sample nosuchtask 2>&1", bin);
    ck_assert_int_eq(run(cmd, out, sizeof out), 2);
    ck_assert_msg(strstr(out, "unknown task 'nosuchtask'"), "%s", out);
    remove_tmpdir();
}
END_TEST

static Suite *tasks_suite(void)
{
    Suite *s = suite_create("tasks");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_gsm8k_cases, 0, (int)(sizeof gsm_cases / sizeof gsm_cases[0]));
    tcase_add_test(tc, test_gsm8k_reference);
    tcase_add_test(tc, test_gsm8k_format_golden);
    tcase_add_test(tc, test_gsm8k_reward_total);
    tcase_add_loop_test(tc, test_math_equiv, 0, (int)(sizeof math_cases / sizeof math_cases[0]));
    tcase_add_loop_test(tc, test_math_boxed, 0, (int)(sizeof boxed_cases / sizeof boxed_cases[0]));
    tcase_add_test(tc, test_math_task);
    tcase_add_loop_test(tc, test_countdown_eval, 0, (int)(sizeof cd_cases / sizeof cd_cases[0]));
    tcase_add_test(tc, test_countdown_reference);
    tcase_add_test(tc, test_countdown_deep);
    tcase_add_test(tc, test_countdown_score);
    tcase_add_test(tc, test_countdown_partial);
    tcase_add_test(tc, test_countdown_solver);
    tcase_add_test(tc, test_countdown_generator);
    tcase_add_test(tc, test_sudoku_counts);
    tcase_add_test(tc, test_sudoku_generator);
    tcase_add_test(tc, test_sudoku_score);
    tcase_add_test(tc, test_sudoku_loaders);
    tcase_add_test(tc, test_gsm8k_loader);
    tcase_add_test(tc, test_malformed_lines);
    tcase_add_test(tc, test_split);
    tcase_add_test(tc, test_registry);
    tcase_add_test(tc, test_commands);
    suite_add_tcase(s, tc);
    return s;
}

Suite *tu_suite(tu_ctx *ctx)
{
    (void)ctx;
    return tasks_suite();
}
