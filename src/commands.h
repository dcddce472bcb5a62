/* commands.h: the subcommands of dllm-rl, one file each (src/cmd_*.c).
 * Each returns the process exit status: 0 success, 2 bad input, 1 internal. */
#ifndef DLLM_COMMANDS_H
#define DLLM_COMMANDS_H

int cmd_init_model(int argc, char **argv);
int cmd_sft(int argc, char **argv);
int cmd_train(int argc, char **argv);
int cmd_export(int argc, char **argv);
int cmd_score(int argc, char **argv);
int cmd_generate(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_tasks(int argc, char **argv);
int cmd_grade(int argc, char **argv);
int cmd_inspect(int argc, char **argv);

/* dllm-rl bench subcommands, one file each (src/bench_*.c) */
int bench_rollout(int argc, char **argv);
int bench_mismatch(int argc, char **argv);
int bench_rl_step(int argc, char **argv);

#endif
