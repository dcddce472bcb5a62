/* dllm-rl: reinforcement learning of masked-diffusion language models. */
#include "config.h"
#include "src/cli/commands.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>

typedef struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} command;

static const command commands[] = {
    {"train", cmd_train, "GRPO with FP8 rollouts and AIS correction from a YAML config"},
    {"sft", cmd_sft, "supervised fine-tuning (masked diffusion or next token) from a YAML config"},
    {"generate", cmd_generate, "generation: denoising sampler (LLaDA) or KV-cache decoding (Qwen3)"},
    {"score", cmd_score, "sequence log-likelihood of a completion (JSON)"},
    {"init-model", cmd_init_model, "write a randomly initialised model in HF layout"},
    {"tokenize", cmd_tokenize, "encode stdin with a tokenizer.json (or --decode)"},
    {"tasks", cmd_tasks, "list tasks, or print sample prompts of one"},
    {"grade", cmd_grade, "grade completions of a task from JSONL"},
    {"export", cmd_export, "a run's LoRA adapter (PEFT) or merged weights"},
    {"eval", cmd_eval, "greedy accuracy (with its standard error) of a model on a task's items"},
    {"rft-data", cmd_rft_data, "rejection-sampling SFT data: an RL config's prompts, correct completions"},
    {"inspect", cmd_inspect, "summary table of a run's HDF5 log"},
    {"bench", cmd_bench, "benchmarks (train: SFT forward+backward tokens/s)"},
    {"sweep", cmd_sweep, "run the arms x grid of a sweep file as train runs, then a summary"},
    {"plan", cmd_plan, "itemised GPU memory plan of a config, and whether it fits"},
    {"config", cmd_config, "every configuration key: default, range or choices, meaning"},
    {"selftest", cmd_selftest, "check this build on this machine (CPU products; --device cuda: the GPU)"},
};

static void usage(FILE *f)
{
    fprintf(f, "usage: dllm-rl COMMAND [ARGS...]   (dllm-rl COMMAND --help for details)\n\n"
               "commands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-12s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\nexit status: 0 success, 2 bad input, 1 internal failure\n");
}

int main(int argc, char **argv)
{
    /* progress lines reach a file or pipe as they are printed, not at exit */
    setvbuf(stdout, NULL, _IOLBF, 0);
    /* a write past a file-size limit (ulimit -f) fails with EFBIG, reported like
     * a full disk, instead of killing the process without a word */
    signal(SIGXFSZ, SIG_IGN);
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("%s (%s)\n", PACKAGE_STRING, dllm_git_revision);
        return 0;
    }
    /* `dllm-rl CMD -h` is `dllm-rl CMD --help` for every command */
    if (argc > 2 && !strcmp(argv[2], "-h"))
        argv[2] = (char *)"--help";
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name))
            return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "dllm-rl: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
