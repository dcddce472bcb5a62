/* sft_data.h: prompt/answer pairs for masked-diffusion SFT.
 *
 * JSONL, one {"prompt": "...", "answer": "..."} object per line (blank lines
 * allowed). Each pair becomes ids = [BOS] prompt answer [EOS]; prompt_len counts
 * BOS and the prompt. With answer_len > 0 the answer part (answer and EOS) is
 * padded with EOS to exactly answer_len tokens, as LLaDA's SFT pads to a fixed
 * length: a model then learns that EOS fills the canvas after the answer, which
 * is what the sampler shows it when gen_length exceeds the answer. A longer
 * answer is an input error. A bad line is an input error "FILE:LINE: message", never
 * skipped. */
#ifndef DLLM_SFT_DATA_H
#define DLLM_SFT_DATA_H

#include "dllm/model_config.h"
#include "dllm/tokenizer.h"

typedef struct {
    int32_t *ids;   /* (len) */
    int prompt_len; /* tokens before the answer */
    int len;        /* prompt + answer + EOS */
} sft_example;

typedef struct {
    sft_example *ex;
    int n;
    int max_len;    /* longest example */
} sft_dataset;

/* chat: wrap each prompt in the model's chat format (dllm/chat.h) before encoding.
 * answer_len: 0 for no padding (a batch pads to its longest example). */
int sft_data_load(sft_dataset *ds, const char *path, dllm_tokenizer *tok,
                  const dllm_model_config *cfg, int max_len, int answer_len, bool chat,
                  dllm_err *err);
void sft_data_free(sft_dataset *ds);

#endif
