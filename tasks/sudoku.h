/* sudoku.h: 4x4 Sudoku solver, generator and scorer (see sudoku.c). Grids are
 * NUL-terminated 16-character strings, row-major, '0' = blank. */
#ifndef DLLM_TASKS_SUDOKU_H
#define DLLM_TASKS_SUDOKU_H

#include "tasks/registry.h"

#include <stddef.h>
#include <stdint.h>

/* 16 chars '0'-'4', no digit repeated in a row, column or 2x2 box. */
int dllm_sudoku_valid_puzzle(const char *puzzle);
/* Number of solutions, counting stops at limit; 0 for an invalid puzzle. When
 * solution != NULL (17 bytes) it receives the first solution found. */
int dllm_sudoku_count_solutions(const char *puzzle, int limit, char *solution);
/* Puzzle item index of the stream seed: unique solution, at most max_blanks
 * blanks. puzzle and solution: 17 bytes each. */
void dllm_sudoku_generate(uint64_t seed, uint64_t index, int max_blanks, char *puzzle, char *solution);
/* d1's reward for a completion (fraction of blank cells right). */
double dllm_sudoku_score(const char *puzzle, const char *solution, const char *completion, size_t len);
/* Checks a (puzzle, solution) pair and fills an item (CSV loader). */
int dllm_sudoku_item_from_strings(dllm_task_item *it, const char *puzzle, const char *solution, dllm_err *err);

#endif
