/* cli_qwen35.h: the commands' path for a Qwen3.5 checkpoint (src/cli/cli_qwen35.c). */
#ifndef DLLM_CLI_QWEN35_H
#define DLLM_CLI_QWEN35_H

#include "kernels/base.h"

#include <stdbool.h>
#include <stdint.h>

/* Whether DIR/config.json says model_type qwen3_5 or qwen3_5_text. */
bool cli_is_qwen35(const char *dir);
/* score: the exact log-probs of compl after prompt, printed as JSON as for Qwen3;
 * estimator (NULL: exact) and mask_flag (a masking estimator's flag given, or NULL)
 * are refused unless exact / absent. */
int cli_qwen35_score(const char *dir, const int32_t *prompt, int np, const int32_t *compl,
                     int nc, double temperature, const char *estimator, const char *mask_flag,
                     const char *precision, const char *device, dllm_err *err);
/* generate: gen tokens after the prompt -- prompt_ids [np], or text (non-NULL) through the
 * chat format (chat: a format name or "auto") and DIR/tokenizer.json -- greedy at
 * temperature 0, else sampled as the AR sampler does (keyed by seed); printed as ids,
 * text or json (ids, text, completion, completion_length). */
int cli_qwen35_generate(const char *dir, const int32_t *prompt_ids, int np, const char *text,
                        const char *chat, int gen, double temperature, double top_p,
                        uint64_t seed, const char *format, const char *precision,
                        const char *device, dllm_err *err);

/* init-model --arch qwen3.5: DIR/config.json of the preset and, for tiny (or with weights),
 * random weights and, for tiny, the char-level tokenizer.json; staged beside out and
 * renamed into place. */
int cli_qwen35_init_model(const char *preset, const char *out, uint64_t seed, const char *dtype,
                          bool weights, bool force, dllm_err *err);

#endif
