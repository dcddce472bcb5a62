/* dllm-rl init-model: a randomly initialised model in the exact HF layout. */
#include "dllm/llada.h"
#include "dllm/qwen3.h"
#include "dllm/tokenizer.h"
#include "dllm/transformer.h"
#include "src/cli/cli_qwen35.h"
#include "src/cli/cli_util.h"
#include "src/cli/commands.h"

#include <getopt.h>
#include <stdio.h>
#include <string.h>

static const char usage_text[] =
    "usage: dllm-rl init-model --arch llada --preset tiny|small|llada-8b --out DIR\n"
    "       dllm-rl init-model --arch qwen3 --preset tiny|small|qwen3-8b --out DIR\n"
    "       dllm-rl init-model --arch dream --preset tiny|small|dream-7b --out DIR\n"
    "       dllm-rl init-model --arch qwen3.5 --preset tiny|qwen3.5-9b --out DIR\n"
    "                          [--seed N] [--dtype f32|bf16] [--weights] [--force]\n"
    "                          [--d-model N] [--layers N] [--heads N] [--kv-heads N]\n"
    "                          [--mlp-hidden N]\n"
    "\n"
    "Writes DIR/config.json (the published LLaDA, Qwen3, Dream or Qwen3.5 text keys) and,\n"
    "for tiny and small, random weights (normal, std 0.02) as safetensors plus a char-level\n"
    "tokenizer.json. For llada-8b, qwen3-8b, dream-7b and qwen3.5-9b the 15-18 GB of weights\n"
    "are written only with --weights.\n"
    "--d-model, --layers, --heads, --kv-heads and --mlp-hidden resize the preset (llada,\n"
    "qwen3, dream): a model of any size for ablations. The head dimension becomes\n"
    "d_model / heads when --d-model or --heads is given (it must divide, and be even);\n"
    "--heads must be a multiple of --kv-heads (a model with as many key/value heads as\n"
    "heads, as LLaDA's, keeps them equal when only --heads is given).\n"
    "An existing non-empty DIR is refused unless --force, which replaces it. The\n"
    "model is written to a temporary directory beside DIR and renamed into place,\n"
    "so DIR is never left half-written.\n";

int cmd_init_model(int argc, char **argv)
{
    const char *arch = "llada", *preset = NULL, *out = NULL, *dtype = NULL;
    long seed = 0;
    int weights = 0, force = 0;
    /* size overrides, 0: the preset's (d_model, layers, heads, kv_heads, mlp_hidden) */
    long size[5] = {0, 0, 0, 0, 0};
    static const char *const size_flag[5] = {"--d-model", "--layers", "--heads", "--kv-heads",
                                             "--mlp-hidden"};
    dllm_err err = {0};
    static const struct option opts[] = {
        {"arch", required_argument, 0, 'a'},  {"preset", required_argument, 0, 'p'},
        {"out", required_argument, 0, 'o'},   {"seed", required_argument, 0, 's'},
        {"dtype", required_argument, 0, 'd'}, {"weights", no_argument, 0, 'w'},
        {"force", no_argument, 0, 'f'},
        {"d-model", required_argument, 0, 0}, {"layers", required_argument, 0, 1},
        {"heads", required_argument, 0, 2},   {"kv-heads", required_argument, 0, 3},
        {"mlp-hidden", required_argument, 0, 4},
        {"help", no_argument, 0, 'h'},        {0, 0, 0, 0}};
    optind = 1;
    for (int c; (c = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
        if (c >= 0 && c < 5) {
            if (cli_parse_int(optarg, size_flag[c], 1, 1 << 20, &size[c], &err))
                return cli_fail("init-model", &err);
            continue;
        }
        switch (c) {
        case 'a': arch = optarg; break;
        case 'p': preset = optarg; break;
        case 'o': out = optarg; break;
        case 's':
            if (cli_parse_int(optarg, "--seed", 0, 0x7fffffffffffffffL, &seed, &err))
                return cli_fail("init-model", &err);
            break;
        case 'd': dtype = optarg; break;
        case 'w': weights = 1; break;
        case 'f': force = 1; break;
        case 'h': fputs(usage_text, stdout); return 0;
        default: fputs(usage_text, stderr); return DLLM_EXIT_INPUT;
        }
    }
    if (optind < argc || !preset || !out) {
        fputs(usage_text, stderr);
        return DLLM_EXIT_INPUT;
    }
    bool resized = size[0] || size[1] || size[2] || size[3] || size[4];
    if (!strcmp(arch, "qwen3.5")) { /* not yet a descriptor of the core: its own path */
        if (resized) {
            dllm_err_set(&err, DLLM_EXIT_INPUT, "--d-model, --layers, --heads, --kv-heads, "
                         "--mlp-hidden: not for qwen3.5 (its layer kinds have sizes of their own)");
            return cli_fail("init-model", &err);
        }
        if (dtype && strcmp(dtype, "f32") && strcmp(dtype, "bf16")) {
            dllm_err_set(&err, DLLM_EXIT_INPUT, "--dtype %s: expected f32 or bf16", dtype);
            return cli_fail("init-model", &err);
        }
        return cli_qwen35_init_model(preset, out, (uint64_t)seed, dtype, weights, force, &err)
                   ? cli_fail("init-model", &err)
                   : 0;
    }
    const dllm_arch_desc *ad = dllm_arch_by_name(arch);
    if (!ad) {
        char names[256];
        dllm_err_set(&err, DLLM_EXIT_INPUT, "--arch %s: supported: %s; qwen3.5", arch,
                     dllm_arch_list(names, sizeof names));
        return cli_fail("init-model", &err);
    }
    dllm_model_config cfg;
    if (dllm_config_preset(&cfg, ad->id, preset, &err))
        return cli_fail("init-model", &err);
    if (resized) {
        bool mha = cfg.n_kv_heads == cfg.n_heads;
        if (size[0])
            cfg.d_model = (int)size[0];
        if (size[1])
            cfg.n_layers = (int)size[1];
        if (size[2]) {
            cfg.n_heads = (int)size[2];
            if (mha && !size[3])
                cfg.n_kv_heads = cfg.n_heads;
        }
        if (size[3])
            cfg.n_kv_heads = (int)size[3];
        if (size[4])
            cfg.mlp_hidden = (int)size[4];
        if ((size[0] || size[2]) && cfg.d_model % cfg.n_heads) {
            dllm_err_set(&err, DLLM_EXIT_INPUT, "--heads %d does not divide --d-model %d",
                         cfg.n_heads, cfg.d_model);
            return cli_fail("init-model", &err);
        }
        if (size[0] || size[2])
            cfg.head_dim = cfg.d_model / cfg.n_heads;
        if (dllm_tf_check_config(ad, &cfg, "init-model sizes", &err))
            return cli_fail("init-model", &err);
    }
    if (dtype && strcmp(dtype, "f32") && strcmp(dtype, "bf16")) {
        dllm_err_set(&err, DLLM_EXIT_INPUT, "--dtype %s: expected f32 or bf16", dtype);
        return cli_fail("init-model", &err);
    }
    if (dtype)
        strcpy(cfg.torch_dtype, strcmp(dtype, "bf16") ? "float32" : "bfloat16");
    st_dtype st = strcmp(cfg.torch_dtype, "bfloat16") ? ST_F32 : ST_BF16;
    /* a published model's sizes: the weights only on request */
    bool big = dllm_arch_preset_get(ad, preset)->published[0] != NULL;
    if (!force && cli_refuse_existing(out, "the output directory", false, &err))
        return cli_fail("init-model", &err);
    /* written beside --out, then renamed into place */
    char dir[4400];
    if (cli_stage_dir(out, dir, sizeof dir, &err))
        return cli_fail("init-model", &err);
    if (big && !weights) {
        if (dllm_config_save(&cfg, dir, &err) || cli_commit_dir(dir, out, &err)) {
            cli_rm_tree(dir);
            return cli_fail("init-model", &err);
        }
        printf("wrote %s/config.json (%.2fB parameters; weights not written, use --weights)\n", out,
               (double)dllm_config_num_params(&cfg) / 1e9);
        return 0;
    }
    /* shard like the published checkpoints (about 5 GB per file) */
    int rc;
    {
        dllm_tf *m = dllm_tf_create(&cfg, (uint64_t)seed); /* cfg.arch picks the descriptor */
        rc = dllm_tf_save(m, dir, st, (size_t)5 << 30, &err);
        dllm_tf_free(m);
    }
    if (!rc && !big) {
        char path[4600];
        snprintf(path, sizeof path, "%s/tokenizer.json", dir);
        rc = dllm_tokenizer_write_char(path, &err);
    }
    if (!rc)
        rc = cli_commit_dir(dir, out, &err);
    if (rc) {
        cli_rm_tree(dir);
        return cli_fail("init-model", &err);
    }
    printf("wrote %s (%s %s%s, %.3fM parameters, %s)\n", out, ad->name, preset,
           resized ? " resized" : "", (double)dllm_config_num_params(&cfg) / 1e6,
           st_dtype_name(st));
    return 0;
}
