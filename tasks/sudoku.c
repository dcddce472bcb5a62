/* sudoku.c: 4x4 Sudoku (digits 1-4; each row, column and 2x2 box holds each
 * digit once). Grids are 16-character strings, row-major, '0' = blank.
 *
 * Generator: a random complete grid (backtracking over shuffled digits), then
 * cells are blanked in a random order, keeping a blank only when the puzzle
 * still has exactly one solution (the solver counts solutions, stopping at 2),
 * up to max_blanks blanks. Draws come from (seed, DLLM_RNG_TASK, 2, item).
 *
 * Loader: JSONL {"puzzle", "solution"} or CSV with a header naming the Puzzle
 * and Solution columns (d1's 4x4_sudoku_unique_puzzles.csv).
 *
 * Reward (d1): the digits of the last <answer>...</answer>, separators ignored,
 * padded with '0' or truncated to 16; reward = fraction of the puzzle's blank
 * cells whose digit equals the solution's; 0 without an answer tag. Accuracy:
 * every blank cell right. */
#include "tasks/sudoku.h"
#include "tasks/registry.h"
#include "tasks/answer.h"
#include "tasks/task_util.h"

#include "kernels/rng.h"

#include <stdlib.h>
#include <string.h>

/* Can digit d go at cell k of g (ignoring the cell itself)? */
static int allowed(const char *g, int k, char d)
{
    int r = k / 4, c = k % 4, br = r / 2 * 2, bc = c / 2 * 2;
    for (int i = 0; i < 4; i++) {
        if (i != c && g[r * 4 + i] == d)
            return 0;
        if (i != r && g[i * 4 + c] == d)
            return 0;
        int rr = br + i / 2, cc = bc + i % 2;
        if ((rr != r || cc != c) && g[rr * 4 + cc] == d)
            return 0;
    }
    return 1;
}

/* Counts solutions of g (modified in place, restored), stopping at limit. When
 * first != NULL the first solution found is copied there. */
static int count_rec(char *g, int limit, char *first)
{
    int k = 0;
    while (k < 16 && g[k] != '0')
        k++;
    if (k == 16) {
        if (first && !first[0])
            memcpy(first, g, 17);
        return 1;
    }
    int total = 0;
    for (char d = '1'; d <= '4' && total < limit; d++)
        if (allowed(g, k, d)) {
            g[k] = d;
            total += count_rec(g, limit - total, first);
            g[k] = '0';
        }
    return total;
}

int dllm_sudoku_valid_puzzle(const char *p)
{
    if (strlen(p) != 16)
        return 0;
    for (int k = 0; k < 16; k++) {
        if (p[k] < '0' || p[k] > '4')
            return 0;
        if (p[k] != '0' && !allowed(p, k, p[k]))
            return 0;
    }
    return 1;
}

int dllm_sudoku_count_solutions(const char *puzzle, int limit, char *solution)
{
    if (!dllm_sudoku_valid_puzzle(puzzle))
        return 0;
    char g[17];
    memcpy(g, puzzle, 17);
    if (solution)
        solution[0] = 0;
    return count_rec(g, limit, solution);
}

/* Fills the grid from cell k with digits in a random order per cell. */
static int fill_random(char *g, int k, dllm_rng *r)
{
    if (k == 16)
        return 1;
    char d[4] = {'1', '2', '3', '4'};
    for (int i = 3; i > 0; i--) {
        int j = (int)dllm_rng_below(r, (uint64_t)i + 1);
        char t = d[i];
        d[i] = d[j];
        d[j] = t;
    }
    for (int i = 0; i < 4; i++)
        if (allowed(g, k, d[i])) {
            g[k] = d[i];
            if (fill_random(g, k + 1, r))
                return 1;
            g[k] = '0';
        }
    return 0;
}

void dllm_sudoku_generate(uint64_t seed, uint64_t index, int max_blanks, char *puzzle, char *solution)
{
    dllm_rng r = dllm_rng_make(seed, DLLM_RNG_TASK, 2, index);
    char g[17];
    memset(g, '0', 16);
    g[16] = 0;
    fill_random(g, 0, &r); /* always succeeds: a 4x4 grid can always be completed from empty */
    memcpy(solution, g, 17);
    int order[16];
    for (int i = 0; i < 16; i++)
        order[i] = i;
    for (int i = 15; i > 0; i--) {
        int j = (int)dllm_rng_below(&r, (uint64_t)i + 1);
        int t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    int blanks = 0;
    for (int i = 0; i < 16 && blanks < max_blanks; i++) {
        char keep = g[order[i]];
        g[order[i]] = '0';
        if (dllm_sudoku_count_solutions(g, 2, NULL) == 1)
            blanks++;
        else
            g[order[i]] = keep;
    }
    memcpy(puzzle, g, 17);
}

double dllm_sudoku_score(const char *puzzle, const char *solution, const char *c, size_t len)
{
    char *a = dllm_answer_xml(c, len, 0);
    if (!a)
        return 0.0;
    char digits[17];
    int n = 0;
    for (size_t i = 0; a[i] && n < 16; i++)
        if (a[i] >= '0' && a[i] <= '9')
            digits[n++] = a[i];
    free(a);
    if (n == 0)
        return 0.0;
    while (n < 16)
        digits[n++] = '0';
    int empty = 0, right = 0;
    for (int k = 0; k < 16; k++)
        if (puzzle[k] == '0') {
            empty++;
            right += digits[k] == solution[k];
        }
    return empty ? (double)right / empty : 0.0;
}

/* ---- task ---- */

/* Checks the pair and fills the item; msg says what is wrong. */
static int set_grids(dllm_task_item *it, const char *puzzle, const char *solution, dllm_err *err)
{
    if (!dllm_sudoku_valid_puzzle(puzzle))
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "puzzle '%.20s': expected 16 digits 0-4 (0 = blank) with no repeated digit in a row, "
                            "column or box", puzzle);
    int ok = strlen(solution) == 16;
    for (int k = 0; ok && k < 16; k++)
        ok = solution[k] >= '1' && solution[k] <= '4' && allowed(solution, k, solution[k]) &&
             (puzzle[k] == '0' || puzzle[k] == solution[k]);
    if (!ok)
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "solution '%.20s': not a solved grid (16 digits 1-4) agreeing with puzzle '%s'",
                            solution, puzzle);
    memcpy(it->puzzle, puzzle, 17);
    memcpy(it->solution, solution, 17);
    it->question = dllm_strdup(puzzle);
    it->answer = dllm_strdup(solution);
    return 0;
}

static int sudoku_from_json(const void *obj, int need_question, dllm_task_item *it, dllm_err *err)
{
    const char *p = NULL, *s = NULL;
    if (dllm_json_get_string(obj, "puzzle", 0, &p, err) || dllm_json_get_string(obj, "solution", 0, &s, err))
        return DLLM_EXIT_INPUT;
    if (!p && dllm_json_get_string(obj, "Puzzle", 1, &p, err))
        return DLLM_EXIT_INPUT;
    if (!s && dllm_json_get_string(obj, "Solution", 1, &s, err))
        return DLLM_EXIT_INPUT;
    return set_grids(it, p, s, err);
}

int dllm_sudoku_item_from_strings(dllm_task_item *it, const char *puzzle, const char *solution, dllm_err *err)
{
    return set_grids(it, puzzle, solution, err);
}

static int sudoku_generate(const dllm_task_source *src, size_t i, dllm_task_item *it, dllm_err *err)
{
    int mb = src->max_blanks ? src->max_blanks : 10;
    if (mb < 1 || mb > 16)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "sudoku: max blanks must be 1 to 16, got %d", mb);
    char p[17], s[17];
    dllm_sudoku_generate(src->seed, i, mb, p, s);
    return set_grids(it, p, s, err);
}

static char *sudoku_format(const dllm_task_item *it)
{
    /* d1's SUDOKU_SYSTEM_PROMPT, then the puzzle */
    return dllm_strfmt(
        "\nPlease solve the following 4x4 Sudoku puzzle. The puzzle is provided as a 16-character string reading "
        "left-to-right, top-to-bottom, where '0' represents empty cells.\n\nRules:\n- Fill empty cells with digits "
        "1-4\n- Each row must contain digits 1-4 exactly once\n- Each column must contain digits 1-4 exactly once\n"
        "- Each 2x2 box must contain digits 1-4 exactly once\n\nImportant: Your solution must be a COMPLETE "
        "16-character string with only the digits 1-4, representing your final solved grid.\n\nRespond in this "
        "exact format:\n<reasoning>\nYour step-by-step solving process\n</reasoning>\n<answer>\n[16-character "
        "solution string with no spaces or separators]\n</answer>\n\n\nSolve the following Sudoku puzzle: %s\n",
        it->puzzle);
}

static double sudoku_reward(const dllm_task_item *it, const char *c, size_t len)
{
    return dllm_sudoku_score(it->puzzle, it->solution, c, len);
}

static int sudoku_correct(const dllm_task_item *it, const char *c, size_t len)
{
    return sudoku_reward(it, c, len) == 1.0;
}

const dllm_task dllm_task_sudoku = {
    .name = "sudoku",
    .description = "4x4 Sudoku (generator with unique solutions, or JSONL/CSV puzzle/solution); reward = blanks right",
    .can_generate = 1,
    .from_json = sudoku_from_json,
    .generate = sudoku_generate,
    .format = sudoku_format,
    .reward = sudoku_reward,
    .correct = sudoku_correct,
    .partial = sudoku_reward, /* d1's reward is graded already: the blanks right */
};
