/* cli_qwen35.h: the commands' path for a Qwen3.5 checkpoint (src/cli/cli_qwen35.c). */
#ifndef DLLM_CLI_QWEN35_H
#define DLLM_CLI_QWEN35_H

#include "kernels/base.h"

#include <stdbool.h>
#include <stdint.h>

/* init-model --arch qwen3.5: DIR/config.json of the preset and, for tiny (or with weights),
 * random weights and, for tiny, the char-level tokenizer.json; staged beside out and
 * renamed into place. */
int cli_qwen35_init_model(const char *preset, const char *out, uint64_t seed, const char *dtype,
                          bool weights, bool force, dllm_err *err);

#endif
