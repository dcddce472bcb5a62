/* answer.h: pulling final answers out of completions and comparing them.
 *
 * Completions are arbitrary bytes (not NUL-terminated: text, len). Every
 * function here is total and bounded: linear or near-linear in len, no
 * recursion on input, no reads past len. Returned strings are malloc'd.
 *
 * Numbers ("72", "-3.50", "$1,200", "+4", "50%", "3/4") are compared as exact
 * rationals (tasks/rational.h), so "72.00" == "72" and "0.5" == "1/2". */
#ifndef DLLM_TASKS_ANSWER_H
#define DLLM_TASKS_ANSWER_H

#include "tasks/rational.h"

#include <stddef.h>

/* Content of the last <answer>...</answer> (up to the end of the text when the
 * last <answer> is not closed when allow_open), trimmed. NULL when none. */
char *dllm_answer_xml(const char *text, size_t len, int allow_open);
/* Content of the last \boxed{...} or \fbox{...} (nested braces balanced), or of
 * "\boxed x" (up to '$' or end of line), trimmed. NULL when none or unbalanced. */
char *dllm_answer_last_boxed(const char *text, size_t len);
/* The last number-looking token ("-1,234.5", "$3", "12%"), or NULL. */
char *dllm_answer_last_number(const char *text, size_t len);
/* Parses a whole string as a number: [+-] [$] digits with optional thousands
 * commas [. digits] [%], or ".5", or "a/b" of two such. 0 on success. */
int dllm_answer_parse_number(const char *s, dllm_rat *out);

/* GSM8K: <answer> content, else the last \boxed{}, else the last number; inside
 * a tag or box the whole content when it is a number, else its last number. */
char *dllm_gsm8k_extract(const char *text, size_t len);
/* Reference of a GSM8K solution: the text after "####", trimmed, commas dropped.
 * NULL when there is no "####". */
char *dllm_gsm8k_reference(const char *solution);
/* Numeric equality when both parse, else text equality ignoring $, % and spaces. */
int dllm_gsm8k_equal(const char *pred, const char *ref);

/* MATH: normalises LaTeX (see answer.c for the list) into a canonical string. */
char *dllm_math_normalize(const char *s);
/* Equivalence of two final answers: exact rational comparison when both
 * normalised strings are numbers (integers, decimals, a/b, \frac{a}{b}), else
 * equality of the normalised strings. */
int dllm_math_equiv(const char *a, const char *b);

#endif
