/* chat.h: prompt strings of the chat templates the project's models were trained with.
 *
 * LLaDA (LLaDA-8B-Instruct's template, Llama-3 style; contents are trimmed):
 *   <|startoftext|>{for each message: <|start_header_id|>{role}<|end_header_id|>\n\n{content}<|eot_id|>}
 *   then, with add_generation_prompt, <|start_header_id|>assistant<|end_header_id|>\n\n
 *   (BOS only before the first message; a system message is just the first turn.)
 * Qwen3 (its tokenizer_config.json chat_template, without tools):
 *   [<|im_start|>system\n{sys}<|im_end|>\n] <|im_start|>user\n{content}<|im_end|>\n ...
 *   assistant turns after the last user turn carry their <think> block; earlier ones drop it;
 *   then <|im_start|>assistant\n, plus <think>\n\n</think>\n\n when enable_thinking is false.
 * Qwen2.5 (Dream-v0-Instruct's template, the Qwen2.5 one without tools):
 *   <|im_start|>system\n{sys, or "You are a helpful assistant."}<|im_end|>\n then
 *   <|im_start|>{role}\n{content}<|im_end|>\n per message, then <|im_start|>assistant\n.
 * Qwen3.5 (its chat_template, string contents, without tools): contents trimmed;
 *   [<|im_start|>system\n{sys}<|im_end|>\n] (a system message only first), user turns as
 *   Qwen3's; assistant turns after the last user turn carry <think>\n{reasoning}\n</think>\n\n
 *   (empty when none), earlier ones drop it; then <|im_start|>assistant\n<think>\n, or
 *   <|im_start|>assistant\n<think>\n\n</think>\n\n when enable_thinking is false. No
 *   messages, no user message, or a later system message are input errors.
 * Plain (char-level tiny models): the contents joined with "\n", and a final "\n" with
 *   add_generation_prompt.
 * d1 reasoning format (opts.d1_reasoning): the last user message becomes
 *   DLLM_D1_SYSTEM_PROMPT + "\n\n" + content, as d1's GRPO data builds its prompts. */
#ifndef DLLM_CHAT_H
#define DLLM_CHAT_H

#include "kernels/base.h"

typedef enum { DLLM_CHAT_PLAIN, DLLM_CHAT_LLADA, DLLM_CHAT_QWEN3, DLLM_CHAT_QWEN25, DLLM_CHAT_QWEN35 } dllm_chat_format;

typedef struct {
    const char *role;    // "system", "user", "assistant"
    const char *content;
} dllm_chat_msg;

typedef struct {
    bool add_generation_prompt; // append the assistant header
    bool enable_thinking;       // Qwen3, Qwen3.5: false appends the empty <think> block;
                                // Qwen3.5: true opens one
    bool d1_reasoning;          // prepend the d1 format instruction to the last user turn
} dllm_chat_opts;

/* "Respond in the following format:\n<reasoning>\n...\n</reasoning>\n<answer>\n...\n</answer>" */
extern const char DLLM_D1_SYSTEM_PROMPT[];

/* "plain" | "llada" | "qwen3" | "qwen2.5" | "qwen3.5" */
int dllm_chat_format_parse(const char *name, dllm_chat_format *fmt, dllm_err *err);
const char *dllm_chat_format_name(dllm_chat_format fmt);

/* Format of a model directory: tokenizer_config.json's chat_template, else
 * chat_template.jinja, if present (im_start -> qwen3.5 when the generation prompt opens a
 * '<think>\n' block, qwen3 when it has other <think> blocks, else qwen2.5;
 * start_header_id -> llada); else a
 * char-level tokenizer.json -> plain; else config.json model_type (llada; qwen3/qwen2;
 * Dream -> qwen2.5; qwen3_5/qwen3_5_text -> qwen3.5). */
int dllm_chat_format_from_dir(const char *dir, dllm_chat_format *fmt, dllm_err *err);

/* *out malloc'd, NUL-terminated. Roles other than system/user/assistant are bad input. */
int dllm_chat_render(dllm_chat_format fmt, const dllm_chat_msg *msgs, size_t n, const dllm_chat_opts *opts,
                     char **out, dllm_err *err);

/* One-turn prompt: optional system (NULL = none), the user text, generation prompt on. */
int dllm_chat_prompt(dllm_chat_format fmt, const char *system, const char *user, bool enable_thinking,
                     bool d1_reasoning, char **out, dllm_err *err);

#endif
