/* dllm-rl export: the latest checkpoint of a run as a PEFT adapter or merged
 * Hugging Face weights. */
#include "src/cfg_names.h"
#include "src/cli_util.h"
#include "src/commands.h"
#include "src/rl_run.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char export_usage[] =
    "usage: dllm-rl export RUN_DIR (--adapter | --merged) --out DIR [--dtype f32|bf16]\n"
    "\n"
    "Writes the latest checkpoint of a run as a PEFT LoRA adapter (--adapter:\n"
    "adapter_model.safetensors + adapter_config.json) or as merged Hugging Face\n"
    "weights (--merged: config.json + safetensors + tokenizer.json).\n";

int cmd_export(int argc, char **argv)
{
    static const struct option opts[] = {
        {"adapter", no_argument, 0, 'a'}, {"merged", no_argument, 0, 'm'},
        {"out", required_argument, 0, 'o'}, {"dtype", required_argument, 0, 'd'},
        {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    int adapter = 0, merged = 0;
    const char *out = NULL, *dtype = "f32";
    optind = 1;
    for (int c; (c = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
        switch (c) {
        case 'a': adapter = 1; break;
        case 'm': merged = 1; break;
        case 'o': out = optarg; break;
        case 'd': dtype = optarg; break;
        case 'h': fputs(export_usage, stdout); return 0;
        default: fputs(export_usage, stderr); return DLLM_EXIT_INPUT;
        }
    }
    int dt = ST_F32;
    if (optind != argc - 1 || adapter + merged != 1 || !out || !cfg_names_find(&cfg_names_dtype, dtype, &dt)) {
        fputs(export_usage, stderr);
        return DLLM_EXIT_INPUT;
    }
    const char *run_dir = argv[optind];
    dllm_err err = {0};
    dllm_cfg cfg;
    char ckpt[4200];
    int rc = rl_config_load(&cfg, NULL, run_dir, NULL, 0, &err);
    if (!rc && rl_latest_checkpoint(run_dir, ckpt, sizeof ckpt))
        rc = dllm_err_set(&err, DLLM_EXIT_INPUT, "%s: no checkpoint (ckpt/latest)", run_dir);
    rl_run run;
    memset(&run, 0, sizeof run);
    if (!rc)
        rc = rl_run_open(&run, &cfg, run_dir, &err);
    if (!rc)
        rc = rl_checkpoint_load(&run, ckpt, &err);
    if (!rc && adapter && !dllm_policy_has_lora(run.pol))
        rc = dllm_err_set(&err, DLLM_EXIT_INPUT, "%s was trained without LoRA: use --merged", run_dir);
    if (!rc)
        rc = cli_mkdirs(out, &err);
    if (!rc)
        rc = adapter ? dllm_policy_save_adapter(run.pol, out, &err)
                     : dllm_policy_save(run.pol, out, (st_dtype)dt, &err);
    if (!rc && merged) {
        char from[4200], to[4200];
        snprintf(from, sizeof from, "%s/tokenizer.json", ckpt);
        snprintf(to, sizeof to, "%s/tokenizer.json", out);
        char *data;
        size_t len;
        if (dllm_read_file(from, &data, &len, &err) == 0) {
            FILE *f = fopen(to, "wb");
            if (!f || fwrite(data, 1, len, f) != len || fclose(f))
                rc = dllm_err_set(&err, DLLM_EXIT_INTERNAL, "%s: write failed", to);
            free(data);
        }
    }
    rl_run_close(&run);
    if (rc)
        return cli_fail("export", &err);
    printf("wrote %s (%s)\n", out, adapter ? "PEFT adapter" : "merged weights");
    return 0;
}

