/* reward_program.h: a reward computed by a program of the user's own, in any
 * language, started once and kept running for the whole run.
 *
 * For each completion dllm-rl writes one JSON line to the program's stdin,
 *   {"prompt": "...", "completion": "...", "reference": ...}
 * and reads one line back from its stdout: a number ("0.5"), or a JSON object
 * {"reward": 0.5} that may also say {"correct": true}. The program's stderr is
 * dllm-rl's. End of stdin means the run is over.
 *
 * The command is split into words like a shell's (spaces; '...' and "..."
 * quoting; backslash escapes), without a shell: `python3 reward.py --strict`.
 * The program runs in the directory dllm-rl was started in, in a process group
 * of its own (a Ctrl-C reaches dllm-rl, which ends the program). */
#ifndef DLLM_TASKS_REWARD_PROGRAM_H
#define DLLM_TASKS_REWARD_PROGRAM_H

#include "kernels/base.h"

#include <stddef.h>

typedef struct dllm_reward_program dllm_reward_program;

/* Starts the command. An input error (exit 2) naming the command when it cannot be
 * started (no such program, not executable, bad quoting). */
int dllm_reward_program_start(dllm_reward_program **out, const char *command, double timeout_s,
                              dllm_err *err);
/* Sends one request line (a JSON object, no newline) and reads the answer:
 * *reward, and *correct = 0 or 1 when the answer says so, else -1. An internal
 * error (exit 1) naming the program when it does not answer within the timeout
 * (it is then killed), has exited or been killed, or answers something that is
 * not a finite reward. After an error every later call fails too. */
int dllm_reward_program_ask(dllm_reward_program *p, const char *request, size_t len, double *reward,
                            int *correct, dllm_err *err);
/* Closes the program's stdin, waits up to 2 s for it to exit, then kills it. */
void dllm_reward_program_stop(dllm_reward_program *p);

/* Parses one answer line (without its newline): a number or {"reward": x[, "correct":
 * bool or 0/1]}. An input error saying what is wrong. */
int dllm_reward_parse_answer(const char *line, double *reward, int *correct, dllm_err *err);
/* Splits a command line into words (see above); argv is NULL-terminated, malloc'd
 * in one block (free(argv) frees all). An input error on an unterminated quote or
 * an empty command. */
int dllm_command_split(const char *command, char ***argv, int *argc, dllm_err *err);

#endif
