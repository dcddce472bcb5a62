/* gsm8k.c: grade-school math word problems (GSM8K; JSONL {"question", "answer"}
 * where answer is the worked solution ending in "#### 72").
 *
 * Reward, as d1's GSM8K reward functions (diffu-grpo reward_func.py), summed:
 *   correctness 2.0  extracted answer equals the reference (our extraction:
 *                    <answer>, else \boxed{}, else last number; compared as
 *                    exact numbers, so "$1,200.00" == "1200")
 *   strict      0.5  re.match(r"^<reasoning>\n.*?\n</reasoning>\n<answer>\n.*?\n</answer>\n$")
 *   soft        0.5  re.match(r"<reasoning>.*?</reasoning>\s*<answer>.*?</answer>")
 *                    (both without DOTALL: '.' never crosses a newline, as in d1)
 *   integer     0.5  d1's extract_xml_answer (text after the last <answer>, before
 *                    the next </answer>, stripped) is all ASCII digits
 *   xml count  <=0.5 0.125 for each of "<reasoning>\n", "\n</reasoning>\n",
 *                    "\n<answer>\n", "\n</answer>" occurring exactly once, minus
 *                    0.001 per character after the closing tag (d1's count_xml;
 *                    lengths in code points, counts non-overlapping like str.count)
 * Accuracy: 1 when the extracted answer equals the reference. */
#include "tasks/registry.h"
#include "tasks/answer.h"
#include "tasks/task_util.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static const char gsm8k_system[] =
    "\nRespond in the following format:\n<reasoning>\n...\n</reasoning>\n<answer>\n...\n</answer>\n";

static int gsm8k_from_json(const void *obj, int need_question, dllm_task_item *it, dllm_err *err)
{
    const char *q = NULL;
    char *a = NULL;
    if (dllm_json_get_string(obj, "question", need_question, &q, err) ||
        dllm_json_get_answer(obj, "answer", &a, err))
        return DLLM_EXIT_INPUT;
    char *ref = dllm_gsm8k_reference(a);
    if (!ref) /* grading lines may carry the bare number */
        ref = dllm_strdup(a);
    free(a);
    dllm_rat r;
    if (!*ref || dllm_answer_parse_number(ref, &r)) {
        dllm_err_set(err, DLLM_EXIT_INPUT, "key 'answer': reference '%.60s' is not a number", ref);
        free(ref);
        return DLLM_EXIT_INPUT;
    }
    it->question = dllm_strdup(q ? q : "");
    it->answer = ref;
    return 0;
}

static char *gsm8k_format(const dllm_task_item *it)
{
    return dllm_concat3(gsm8k_system, "\n\n", it->question);
}

/* Python's str.count (non-overlapping, left to right); *after = index just past
 * the last counted match (0 when none), which is where str.split(pat)[-1] starts. */
static int count_nonoverlap(const char *t, size_t len, const char *pat, size_t *after)
{
    size_t m = strlen(pat);
    int c = 0;
    *after = 0;
    for (size_t i = 0; i + m <= len;) {
        if (!memcmp(t + i, pat, m)) {
            c++;
            i += m;
            *after = i;
        } else {
            i++;
        }
    }
    return c;
}

static double xml_count(const char *t, size_t len)
{
    double c = 0;
    size_t after;
    if (count_nonoverlap(t, len, "<reasoning>\n", &after) == 1)
        c += 0.125;
    if (count_nonoverlap(t, len, "\n</reasoning>\n", &after) == 1)
        c += 0.125;
    if (count_nonoverlap(t, len, "\n<answer>\n", &after) == 1) {
        c += 0.125;
        count_nonoverlap(t, len, "\n</answer>\n", &after);
        c -= (double)dllm_utf8_len(t + after, len - after) * 0.001;
    }
    if (count_nonoverlap(t, len, "\n</answer>", &after) == 1) {
        c += 0.125;
        c -= ((double)dllm_utf8_len(t + after, len - after) - 1) * 0.001;
    }
    return c;
}

static int starts(const char *t, size_t len, size_t at, const char *pat)
{
    size_t m = strlen(pat);
    return at <= len && len - at >= m && !memcmp(t + at, pat, m);
}

/* Index of the first '\n' at or after i, or len. */
static size_t line_end(const char *t, size_t len, size_t i)
{
    const char *nl = i < len ? memchr(t + i, '\n', len - i) : NULL;
    return nl ? (size_t)(nl - t) : len;
}

/* ^<reasoning>\n.*?\n</reasoning>\n<answer>\n.*?\n</answer>\n$ without DOTALL:
 * each .*? is exactly the rest of its line, so the match is unique if any. */
static int strict_format(const char *t, size_t len)
{
    static const char mid[] = "\n</reasoning>\n<answer>\n", end[] = "\n</answer>\n";
    if (!starts(t, len, 0, "<reasoning>\n"))
        return 0;
    size_t i = line_end(t, len, 12);
    if (!starts(t, len, i, mid))
        return 0;
    i = line_end(t, len, i + sizeof mid - 1);
    if (!starts(t, len, i, end))
        return 0;
    i += sizeof end - 1;
    return i == len || (i + 1 == len && t[i] == '\n'); /* $ also matches before a final \n */
}

/* Python's str.isspace / re \s on ASCII: includes the separators 0x1c-0x1f
 * (multi-byte Unicode spaces are not treated as spaces here). */
static int is_pyspace(char c)
{
    return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f);
}

/* re.match(r"<reasoning>.*?</reasoning>\s*<answer>.*?</answer>") without DOTALL:
 * try every "</reasoning>" on the first line. */
static int soft_format(const char *t, size_t len)
{
    if (!starts(t, len, 0, "<reasoning>"))
        return 0;
    size_t eol = line_end(t, len, 11);
    for (size_t i = 11; i + 12 <= eol; i++) {
        if (!starts(t, len, i, "</reasoning>"))
            continue;
        size_t j = i + 12;
        while (j < len && is_pyspace(t[j]))
            j++;
        if (!starts(t, len, j, "<answer>"))
            continue;
        size_t k = j + 8, eol2 = line_end(t, len, k);
        for (; k + 9 <= eol2; k++)
            if (starts(t, len, k, "</answer>"))
                return 1;
    }
    return 0;
}

/* d1's int_reward_func: extract_xml_answer(text).isdigit() */
static int int_answer(const char *t, size_t len)
{
    size_t s = 0, after;
    if (count_nonoverlap(t, len, "<answer>", &after))
        s = after;
    size_t e = len;
    for (size_t i = s; i + 9 <= len; i++)
        if (starts(t, len, i, "</answer>")) {
            e = i;
            break;
        }
    while (s < e && is_pyspace(t[s]))
        s++;
    while (e > s && is_pyspace(t[e - 1]))
        e--;
    if (s == e)
        return 0;
    for (size_t i = s; i < e; i++)
        if (t[i] < '0' || t[i] > '9')
            return 0;
    return 1;
}

static int gsm8k_correct(const dllm_task_item *it, const char *c, size_t len)
{
    char *pred = dllm_gsm8k_extract(c, len);
    int ok = pred && dllm_gsm8k_equal(pred, it->answer);
    free(pred);
    return ok;
}

static double gsm8k_reward(const dllm_task_item *it, const char *c, size_t len)
{
    double r = 0;
    r += gsm8k_correct(it, c, len) ? 2.0 : 0.0;
    r += strict_format(c, len) ? 0.5 : 0.0;
    r += soft_format(c, len) ? 0.5 : 0.0;
    r += int_answer(c, len) ? 0.5 : 0.0;
    r += xml_count(c, len);
    return r;
}

const dllm_task dllm_task_gsm8k = {
    .name = "gsm8k",
    .description = "grade-school math word problems (JSONL question/answer \"... #### N\"); d1 reward, max 4.0",
    .can_generate = 0,
    .from_json = gsm8k_from_json,
    .generate = NULL,
    .format = gsm8k_format,
    .reward = gsm8k_reward,
    .correct = gsm8k_correct,
};
