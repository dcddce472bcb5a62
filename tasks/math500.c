/* math500.c: competition mathematics (MATH / MATH500; JSONL {"problem", "answer"}
 * or {"problem", "solution"} with the reference taken from the solution's last
 * \boxed{}).
 *
 * The model's answer is the last \boxed{} (or \fbox{}) of the completion, else
 * the content of its last <answer> tag. Reward = accuracy = 1 when it is
 * equivalent to the reference after LaTeX normalisation (dllm_math_equiv),
 * else 0. */
#include "tasks/registry.h"
#include "tasks/answer.h"
#include "tasks/task_util.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

/* d1's MATH prompt: a boxed answer inside the <answer> tag. */
static const char math_system[] =
    "You are a math expert. You will be given a question to solve. Solve it step by step. "
    "Wrap the final answer in a \\boxed{}. \n"
    "Respond in the following format:\n<reasoning>\nYour reasoning here\n</reasoning>\n"
    "<answer>\n\\boxed{...}\n</answer>\n";

static int math_from_json(const void *obj, int need_question, dllm_task_item *it, dllm_err *err)
{
    const char *q = NULL, *sol = NULL;
    if (dllm_json_get_string(obj, "problem", need_question, &q, err) ||
        dllm_json_get_string(obj, "solution", 0, &sol, err))
        return DLLM_EXIT_INPUT;
    char *ref = NULL;
    if (json_object_get(obj, "answer")) { /* a string, or a bare number */
        if (dllm_json_get_answer(obj, "answer", &ref, err))
            return DLLM_EXIT_INPUT;
    } else if (sol) {
        ref = dllm_answer_last_boxed(sol, strlen(sol));
        if (!ref)
            return dllm_err_set(err, DLLM_EXIT_INPUT, "key 'solution': no \\boxed{} answer in it (and no 'answer' key)");
    } else {
        return dllm_err_set(err, DLLM_EXIT_INPUT, "missing key 'answer' (or 'solution')");
    }
    size_t n = strlen(ref);
    while (n && (ref[n - 1] == ' ' || ref[n - 1] == '\n'))
        ref[--n] = 0;
    if (!*ref) {
        free(ref);
        return dllm_err_set(err, DLLM_EXIT_INPUT, "key 'answer': empty reference answer");
    }
    it->question = dllm_strdup(q ? q : "");
    it->answer = ref;
    return 0;
}

static char *math_format(const dllm_task_item *it)
{
    return dllm_concat3(math_system, "\n\n", it->question);
}

/* The final answer of a completion, or NULL. */
static char *math_extract(const char *c, size_t len)
{
    char *a = dllm_answer_last_boxed(c, len);
    if (!a)
        a = dllm_answer_xml(c, len, 0);
    return a;
}

static int math_correct(const dllm_task_item *it, const char *c, size_t len)
{
    char *a = math_extract(c, len);
    int ok = a && dllm_math_equiv(a, it->answer);
    free(a);
    return ok;
}

static double math_reward(const dllm_task_item *it, const char *c, size_t len)
{
    return math_correct(it, c, len) ? 1.0 : 0.0;
}

const dllm_task dllm_task_math500 = {
    .name = "math500",
    .description = "competition math (JSONL problem/answer or solution with \\boxed{}); reward 1 if equivalent",
    .can_generate = 0,
    .from_json = math_from_json,
    .generate = NULL,
    .format = math_format,
    .reward = math_reward,
    .correct = math_correct,
};
