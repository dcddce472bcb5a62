/* dllm-rl score: the sequence log-likelihood of a completion under a model.
 *
 * one_step (the default for LLaDA, d1's estimator): canvas = prompt followed by
 * the completion with every completion token replaced by the mask token; one
 * forward pass; token_logp[i] = log p(y_i | prompt, all masked) and
 * seq_logp = their sum, accumulated in double. Deterministic. */
#include "dllm/llada.h"
#include "kernels/ops.h"
#include "src/cli_util.h"
#include "src/commands.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage_text[] =
    "usage: dllm-rl score --model DIR --prompt-ids 1,2,3 --completion-ids 4,5,6\n"
    "                     [--estimator one_step]\n"
    "\n"
    "Prints {\"seq_logp\": x, \"token_logp\": [...], \"estimator\": \"one_step\"}: the\n"
    "one-step estimate (completion fully masked, prompt clean, one forward pass).\n";

int cmd_score(int argc, char **argv)
{
    const char *model_dir = NULL, *prompt_s = NULL, *compl_s = NULL, *estimator = "one_step";
    dllm_err err = {0};
    static const struct option opts[] = {{"model", required_argument, 0, 'm'},
                                         {"prompt-ids", required_argument, 0, 'p'},
                                         {"completion-ids", required_argument, 0, 'c'},
                                         {"estimator", required_argument, 0, 'e'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    optind = 1;
    for (int c; (c = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
        switch (c) {
        case 'm': model_dir = optarg; break;
        case 'p': prompt_s = optarg; break;
        case 'c': compl_s = optarg; break;
        case 'e': estimator = optarg; break;
        case 'h': fputs(usage_text, stdout); return 0;
        default: fputs(usage_text, stderr); return DLLM_EXIT_INPUT;
        }
    }
    if (optind < argc || !model_dir || !prompt_s || !compl_s) {
        fputs(usage_text, stderr);
        return DLLM_EXIT_INPUT;
    }
    if (strcmp(estimator, "one_step")) {
        dllm_err_set(&err, DLLM_EXIT_INPUT, "--estimator %s: supported: one_step", estimator);
        return cli_fail("score", &err);
    }
    int32_t *prompt = NULL, *compl = NULL;
    int np = 0, nc = 0;
    if (cli_parse_ids(prompt_s, "--prompt-ids", &prompt, &np, &err) ||
        cli_parse_ids(compl_s, "--completion-ids", &compl, &nc, &err))
        return cli_fail("score", &err);
    if (nc == 0) {
        dllm_err_set(&err, DLLM_EXIT_INPUT, "--completion-ids: empty completion");
        return cli_fail("score", &err);
    }
    llada_model *m;
    if (llada_load(&m, model_dir, &err))
        return cli_fail("score", &err);
    const dllm_model_config *cfg = llada_config(m);
    int T = np + nc, V = cfg->embedding_size;
    for (int i = 0; i < T; i++) {
        int32_t id = i < np ? prompt[i] : compl[i - np];
        if (id >= cfg->vocab_size) {
            dllm_err_set(&err, DLLM_EXIT_INPUT, "%s id %d is outside the vocabulary (%d tokens)",
                         i < np ? "--prompt-ids:" : "--completion-ids:", id, cfg->vocab_size);
            llada_free(m);
            return cli_fail("score", &err);
        }
    }
    if (T > cfg->max_seq_len) {
        dllm_err_set(&err, DLLM_EXIT_INPUT, "%d tokens exceed max_sequence_length %d", T,
                     cfg->max_seq_len);
        llada_free(m);
        return cli_fail("score", &err);
    }
    int32_t *canvas = dllm_malloc(sizeof *canvas * (size_t)T);
    int32_t *rows = dllm_malloc(sizeof *rows * (size_t)nc);
    memcpy(canvas, prompt, sizeof *canvas * (size_t)np);
    for (int i = 0; i < nc; i++) {
        canvas[np + i] = cfg->mask_token_id;
        rows[i] = np + i;
    }
    float *logits = dllm_malloc(sizeof *logits * (size_t)nc * (size_t)V);
    float *logp = dllm_malloc(sizeof *logp * (size_t)nc);
    int rc = llada_forward(m, canvas, NULL, 1, T, rows, nc, logits);
    if (rc) {
        dllm_err_set(&err, DLLM_EXIT_INTERNAL, "forward pass failed");
    } else {
        op_xent_fwd(logp, NULL, logits, compl, nc, V);
        double seq = 0;
        for (int i = 0; i < nc; i++)
            seq += logp[i];
        printf("{\"seq_logp\": ");
        cli_print_json_number(stdout, seq, 17);
        printf(", \"token_logp\": [");
        for (int i = 0; i < nc; i++) {
            if (i)
                printf(", ");
            cli_print_json_number(stdout, logp[i], 9);
        }
        printf("], \"estimator\": \"one_step\"}\n");
    }
    free(canvas);
    free(rows);
    free(logits);
    free(logp);
    free(prompt);
    free(compl);
    llada_free(m);
    return rc ? cli_fail("score", &err) : 0;
}
