/* countdown.h: the Countdown arithmetic game: reach a target with + - * / and
 * parentheses, using each given number exactly once.
 *
 * Expressions are parsed by a recursive-descent parser (never evaluated as code):
 *   expr  := term (('+' | '-') term)*
 *   term  := unary (('*' | '/') unary)*
 *   unary := ('-' | '+') unary | atom          (explicit unary minus/plus)
 *   atom  := DIGITS | '(' expr ')'
 * with spaces allowed between tokens and nesting limited to
 * DLLM_COUNTDOWN_MAX_DEPTH. Values are exact rationals with overflow detection;
 * division by zero or overflow makes a well-formed expression evaluate to
 * "no value" (it can never be correct). */
#ifndef DLLM_TASKS_COUNTDOWN_H
#define DLLM_TASKS_COUNTDOWN_H

#include "tasks/rational.h"

#include <stddef.h>
#include <stdint.h>

#define DLLM_COUNTDOWN_MAX_DEPTH 200
#define DLLM_COUNTDOWN_MAX_LITS 16

enum {
    DLLM_CD_OK = 0,        /* well-formed, *value set */
    DLLM_CD_MALFORMED = 1, /* not an expression of the grammar (or nested too deep) */
    DLLM_CD_DIV0 = 2,      /* well-formed, divides by zero */
    DLLM_CD_OVERFLOW = 3   /* well-formed, a literal or an intermediate does not fit */
};

typedef struct {
    dllm_rat value;
    int64_t lits[DLLM_COUNTDOWN_MAX_LITS]; /* the first literals, in order */
    int n_lits;                            /* all literals (may exceed the array) */
} dllm_countdown_expr;

/* Parses and evaluates expr[0, len). Returns a DLLM_CD_* status. */
int dllm_countdown_eval(const char *expr, size_t len, dllm_countdown_expr *out);

/* 1 when the literals are exactly nums (as a multiset) and the value is target. */
int dllm_countdown_check(const dllm_countdown_expr *e, const int64_t *nums, int n, int64_t target);

/* The d1 score of a completion: the expression is the last <answer>...</answer>
 * (else the last non-empty line); 1.0 correct, 0.1 well-formed but wrong
 * (wrong value, wrong numbers, division by zero, overflow), 0 otherwise. */
double dllm_countdown_score(const int64_t *nums, int n, int64_t target, const char *completion, size_t len);

/* A graded reward (task.reward.kind partial): 1.0 correct; an expression that uses
 * each number exactly once and has a value v other than the target earns
 * 0.2 + 0.6 max(0, 1 - |v - target| / max(|target|, 1)), in [0.2, 0.8]: the nearer
 * the value, the more; any other well-formed expression (wrong numbers, division by
 * zero, overflow) 0.1, as d1's; 0 otherwise. Several expressions reach a target, and
 * near misses now differ from far ones, so a group's rewards keep differing where
 * d1's are all 0.1. */
double dllm_countdown_partial(const int64_t *nums, int n, int64_t target, const char *completion,
                              size_t len);

/* Exhaustive search over expression trees (exact rationals): 1 and a fully
 * parenthesised expression in out (cap bytes) when target is reachable using
 * every number once, else 0. n <= 6. */
int dllm_countdown_solve(const int64_t *nums, int n, int64_t target, char *out, size_t cap);

#endif
