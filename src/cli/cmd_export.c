/* dllm-rl export: the latest checkpoint of a run as a PEFT adapter or merged
 * Hugging Face weights. */
#include "src/config/cfg_names.h"
#include "src/cli/cli_util.h"
#include "src/cli/commands.h"
#include "src/rl/rl_run.h"

#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char export_usage[] =
    "usage: dllm-rl export RUN_DIR (--adapter | --merged) --out DIR [--dtype f32|bf16]\n"
    "                      [--force]\n"
    "\n"
    "Writes the latest checkpoint of a run as a PEFT LoRA adapter (--adapter:\n"
    "adapter_model.safetensors + adapter_config.json) or as merged Hugging Face\n"
    "weights (--merged: config.json + safetensors + tokenizer.json), with the\n"
    "checkpoint's generation.json. DIR is written under a temporary name and renamed\n"
    "into place; an existing non-empty DIR is refused unless --force replaces it.\n"
    "An sft run's checkpoints hold merged weights (LoRA included): --merged writes\n"
    "them (at --dtype); it has no adapter to export.\n";

/* Is ckpt an sft checkpoint (state.json kind "sft")? */
static bool sft_checkpoint(const char *ckpt)
{
    char p[4400];
    snprintf(p, sizeof p, "%s/state.json", ckpt);
    json_t *o = json_load_file(p, 0, NULL);
    const char *kind = NULL;
    bool sft = o && json_unpack(o, "{s:s}", "kind", &kind) == 0 && !strcmp(kind, "sft");
    json_decref(o);
    return sft;
}

/* An sft checkpoint is a model directory already: its weights, read as a model
 * and written at dtype. */
static int open_sft_checkpoint(const char *run_dir, const char *ckpt, bool adapter,
                               dllm_policy **pol, dllm_err *err)
{
    if (adapter)
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "%s is an sft run: its checkpoints hold merged weights (a LoRA run's "
                            "too), no adapter; use --merged", run_dir);
    dllm_policy_cfg pc = {.path = ckpt};
    return dllm_policy_open(pol, &pc, err);
}

int cmd_export(int argc, char **argv)
{
    static const struct option opts[] = {
        {"adapter", no_argument, 0, 'a'}, {"merged", no_argument, 0, 'm'},
        {"out", required_argument, 0, 'o'}, {"dtype", required_argument, 0, 'd'},
        {"force", no_argument, 0, 'f'}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    int adapter = 0, merged = 0, force = 0;
    const char *out = NULL, *dtype = "f32";
    optind = 1;
    for (int c; (c = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
        switch (c) {
        case 'a': adapter = 1; break;
        case 'm': merged = 1; break;
        case 'o': out = optarg; break;
        case 'd': dtype = optarg; break;
        case 'f': force = 1; break;
        case 'h': fputs(export_usage, stdout); return 0;
        default: fputs(export_usage, stderr); return DLLM_EXIT_INPUT;
        }
    }
    int dt = ST_F32;
    if (!cfg_names_find(&cfg_names_dtype, dtype, &dt)) {
        fprintf(stderr, "dllm-rl export: --dtype %s: expected f32 or bf16\n", dtype);
        return DLLM_EXIT_INPUT;
    }
    if (optind != argc - 1 || adapter + merged != 1 || !out) {
        fprintf(stderr, "dllm-rl export: %s\n\n",
                adapter + merged != 1 ? "give one of --adapter and --merged"
                : !out                ? "--out DIR is required"
                                      : "expected one RUN_DIR");
        fputs(export_usage, stderr);
        return DLLM_EXIT_INPUT;
    }
    const char *run_dir = argv[optind];
    dllm_err err = {0};
    dllm_cfg cfg;
    char ckpt[4200];
    int rc = force ? 0 : cli_refuse_existing(out, "export --out", false, &err);
    if (!rc && rl_latest_checkpoint(run_dir, ckpt, sizeof ckpt))
        rc = dllm_err_set(&err, DLLM_EXIT_INPUT, "%s: no checkpoint (ckpt/latest)", run_dir);
    const bool sft = !rc && sft_checkpoint(ckpt);
    rl_run run;
    memset(&run, 0, sizeof run);
    if (!rc && sft)
        rc = open_sft_checkpoint(run_dir, ckpt, adapter, &run.pol, &err);
    if (!rc && !sft)
        rc = rl_config_load(&cfg, NULL, run_dir, NULL, 0, &err);
    if (!rc && !sft)
        rc = rl_run_open(&run, &cfg, run_dir, &err);
    if (!rc && !sft)
        rc = rl_checkpoint_load(&run, ckpt, &err);
    if (!rc && adapter && !dllm_policy_has_lora(run.pol))
        rc = dllm_err_set(&err, DLLM_EXIT_INPUT, "%s was trained without LoRA: use --merged", run_dir);
    char tmp[4400] = "";
    if (!rc)
        rc = cli_stage_dir(out, tmp, sizeof tmp, &err);
    if (!rc)
        rc = adapter ? dllm_policy_save_adapter(run.pol, tmp, &err)
                     : dllm_policy_save(run.pol, tmp, (st_dtype)dt, &err);
    /* what makes the directory usable on its own: the tokenizer (merged weights) and
     * the sampler settings (checkpoints from before generation.json have none) */
    static const char *const extras[] = {"tokenizer.json", "generation.json"};
    for (int i = merged ? 0 : 1; !rc && i < 2; i++) {
        char from[4300], to[4500];
        snprintf(from, sizeof from, "%s/%s", ckpt, extras[i]);
        snprintf(to, sizeof to, "%s/%s", tmp, extras[i]);
        FILE *f = fopen(from, "rb");
        if (f) {
            fclose(f);
            rc = cli_copy_file(from, to, &err);
        }
    }
    if (!rc)
        rc = cli_commit_dir(tmp, out, &err);
    else if (tmp[0])
        cli_rm_tree(tmp);
    rl_run_close(&run); /* an sft checkpoint's policy too */
    if (rc)
        return cli_fail("export", &err);
    printf("wrote %s (%s)\n", out, adapter ? "PEFT adapter" : "merged weights");
    return 0;
}

