/* cli_qwen35.c: `dllm-rl init-model --arch qwen3.5`: a Qwen3.5 checkpoint of a preset
 * (dllm/qwen35.h) -- its config.json carries the layer kinds and Gated DeltaNet sizes the
 * common config does not, so its model writes it. Every other command reaches Qwen3.5
 * through the architecture registry and the policy (dllm/policy_model.h). */
#include "src/cli/cli_qwen35.h"
#include "dllm/qwen35.h"
#include "dllm/tokenizer.h"
#include "src/cli/cli_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cli_qwen35_init_model(const char *preset, const char *out, uint64_t seed, const char *dtype,
                          bool weights, bool force, dllm_err *err)
{
    qwen35_config c;
    int rc = qwen35_preset(preset, &c, err);
    if (rc)
        return rc;
    bool big = qwen35_preset_published(preset);
    const char *torch_dtype = dtype ? (strcmp(dtype, "bf16") ? "float32" : "bfloat16")
                              : big ? "bfloat16" : "float32";
    st_dtype st = strcmp(torch_dtype, "bfloat16") ? ST_F32 : ST_BF16;
    if (!force && (rc = cli_refuse_existing(out, "the output directory", false, err)))
        return rc;
    char dir[4400];
    if ((rc = cli_stage_dir(out, dir, sizeof dir, err)))
        return rc;
    rc = qwen35_config_save(&c, dir, torch_dtype, err);
    /* shard like the published checkpoints (about 5 GB per file) */
    if (!rc && (!big || weights))
        rc = qwen35_write_random(&c, dir, seed, st, (size_t)5 << 30, err);
    if (!rc && !big) {
        char path[4600];
        snprintf(path, sizeof path, "%s/tokenizer.json", dir);
        rc = dllm_tokenizer_write_char(path, err);
    }
    rc = rc ? rc : cli_commit_dir(dir, out, err);
    if (rc) {
        cli_rm_tree(dir);
        return rc;
    }
    if (big && !weights)
        printf("wrote %s/config.json (qwen3.5 %s, %.2fB parameters; weights not written, use "
               "--weights)\n", out, preset, (double)qwen35_num_params(&c) / 1e9);
    else
        printf("wrote %s (qwen3.5 %s, %.3fM parameters, %s)\n", out, preset,
               (double)qwen35_num_params(&c) / 1e6, st_dtype_name(st));
    return 0;
}
