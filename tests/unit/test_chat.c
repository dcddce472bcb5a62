/* test_chat: chat prompt strings against the published Jinja templates (Qwen3's
 * tokenizer_config.json, LLaDA-8B-Instruct's) rendered by jinja2 in
 * tests/ref/make_tokenizer_goldens.py; format detection from a model directory. */
#include "dllm/chat.h"
#include "dllm/tokenizer.h"
#include "tests/harness/harness.h"

#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char data_dir[4096], tmp_dir[4096];

static void setup(void)
{
    const char *d = getenv("DLLM_TEST_DATA");
    snprintf(data_dir, sizeof data_dir, "%s", d ? d : "tests/data");
    snprintf(tmp_dir, sizeof tmp_dir, "/tmp/dllm_chat_XXXXXX");
    ck_assert(mkdtemp(tmp_dir) != NULL);
}
static void teardown(void)
{
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp_dir);
    ck_assert_int_eq(system(cmd), 0);
}

START_TEST(test_chat_goldens)
{
    char p[4200];
    snprintf(p, sizeof p, "%s/tokenizer/chat_goldens.json", data_dir);
    json_error_t je;
    json_t *g = json_load_file(p, 0, &je), *cases = json_object_get(g, "cases");
    ck_assert_msg(g != NULL, "%s: %s", p, je.text);
    ck_assert_str_eq(json_string_value(json_object_get(g, "d1_system_prompt")), DLLM_D1_SYSTEM_PROMPT);
    ck_assert_uint_ge(json_array_size(cases), 20);
    size_t d1_cases = 0;
    for (size_t i = 0; i < json_array_size(cases); i++) {
        json_t *c = json_array_get(cases, i), *msgs = json_object_get(c, "messages");
        dllm_chat_format fmt;
        dllm_err err = {0};
        ck_assert_int_eq(dllm_chat_format_parse(json_string_value(json_object_get(c, "format")), &fmt, &err), 0);
        size_t n = json_array_size(msgs);
        dllm_chat_msg m[16];
        ck_assert_uint_le(n, 16);
        for (size_t k = 0; k < n; k++) {
            m[k].role = json_string_value(json_object_get(json_array_get(msgs, k), "role"));
            m[k].content = json_string_value(json_object_get(json_array_get(msgs, k), "content"));
        }
        dllm_chat_opts o = {.add_generation_prompt = true,
                            .enable_thinking = json_is_true(json_object_get(c, "enable_thinking"))};
        char *out;
        ck_assert_int_eq(dllm_chat_render(fmt, m, n, &o, &out, &err), 0);
        const char *want = json_string_value(json_object_get(c, "text"));
        ck_assert_msg(!strcmp(out, want), "case %zu (%s): got\n%s\nwant\n%s", i, dllm_chat_format_name(fmt), out, want);
        free(out);
        /* d1 option: the same prompt from the bare question */
        size_t dl = strlen(DLLM_D1_SYSTEM_PROMPT);
        if (n == 1 && !strncmp(m[0].content, DLLM_D1_SYSTEM_PROMPT, dl) && !strncmp(m[0].content + dl, "\n\n", 2)) {
            o.d1_reasoning = true;
            ck_assert_int_eq(dllm_chat_prompt(fmt, NULL, m[0].content + dl + 2, o.enable_thinking, true, &out, &err), 0);
            ck_assert_str_eq(out, want);
            free(out);
            d1_cases++;
        }
        /* the one-turn helper agrees with the full renderer */
        if ((n == 1 && !strcmp(m[0].role, "user")) || (n == 2 && !strcmp(m[0].role, "system") && !strcmp(m[1].role, "user"))) {
            ck_assert_int_eq(dllm_chat_prompt(fmt, n == 2 ? m[0].content : NULL, m[n - 1].content, o.enable_thinking,
                                              false, &out, &err), 0);
            ck_assert_str_eq(out, want);
            free(out);
        }
    }
    ck_assert_uint_ge(d1_cases, 3);
    json_decref(g);
}
END_TEST

START_TEST(test_plain_and_errors)
{
    dllm_chat_msg m[2] = {{"system", "be brief"}, {"user", "2+2?"}};
    dllm_chat_opts o = {.add_generation_prompt = true};
    char *out;
    dllm_err err = {0};
    ck_assert_int_eq(dllm_chat_render(DLLM_CHAT_PLAIN, m, 2, &o, &out, &err), 0);
    ck_assert_str_eq(out, "be brief\n2+2?\n"); // plain: contents joined by newlines (chat.h)
    free(out);
    dllm_chat_msg bad = {"tool", "x"};
    ck_assert_int_eq(dllm_chat_render(DLLM_CHAT_QWEN3, &bad, 1, &o, &out, &err), DLLM_EXIT_INPUT);
    ck_assert_ptr_nonnull(strstr(err.msg, "tool"));
    dllm_chat_format f;
    ck_assert_int_eq(dllm_chat_format_parse("chatml", &f, &err), DLLM_EXIT_INPUT);
    ck_assert_int_eq(dllm_chat_format_parse("llada", &f, &err), 0);
    ck_assert_int_eq(f, DLLM_CHAT_LLADA);
}
END_TEST

/* Qwen3.5's template, rendered by hand from its rules (chat.h): trimmed contents, the
 * generation prompt opening <think> (thinking on) or closing an empty one (off), the think
 * block kept only after the last user turn (empty when the turn has none), and its
 * raise_exception cases as input errors. */
START_TEST(test_qwen35_template)
{
    dllm_err err = {0};
    char *out;
    dllm_chat_format f;
    ck_assert_int_eq(dllm_chat_format_parse("qwen3.5", &f, &err), 0);
    ck_assert_int_eq(f, DLLM_CHAT_QWEN35);
    ck_assert_str_eq(dllm_chat_format_name(f), "qwen3.5");
    ck_assert_int_eq(dllm_chat_prompt(f, "  Be brief.\n", " 2+2? ", true, false, &out, &err), 0);
    ck_assert_str_eq(out, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n"
                          "<|im_start|>assistant\n<think>\n");
    free(out);
    ck_assert_int_eq(dllm_chat_prompt(f, NULL, "2+2?", false, false, &out, &err), 0);
    ck_assert_str_eq(out, "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
    free(out);
    /* history: the first answer (before the last query) loses its reasoning; the turn after
     * the query keeps it, trimmed; one without reasoning gets an empty block */
    dllm_chat_msg m[5] = {{"user", "a"}, {"assistant", "<think>\nr1\n</think>\n\nA1"}, {"user", "b"},
                          {"assistant", "<think> r2 </think>\nB1"}, {"assistant", "C1"}};
    dllm_chat_opts o = {.add_generation_prompt = false};
    ck_assert_int_eq(dllm_chat_render(f, m, 5, &o, &out, &err), 0);
    ck_assert_str_eq(out, "<|im_start|>user\na<|im_end|>\n<|im_start|>assistant\nA1<|im_end|>\n"
                          "<|im_start|>user\nb<|im_end|>\n"
                          "<|im_start|>assistant\n<think>\nr2\n</think>\n\nB1<|im_end|>\n"
                          "<|im_start|>assistant\n<think>\n\n</think>\n\nC1<|im_end|>\n");
    free(out);
    /* the reasoning is what follows the last <think> before the first </think> */
    dllm_chat_msg m2[2] = {{"user", "q"}, {"assistant", "x<think>a<think>\nb\n</think>y</think>\nz"}};
    ck_assert_int_eq(dllm_chat_render(f, m2, 2, &o, &out, &err), 0);
    ck_assert_str_eq(out, "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n<think>\nb\n</think>\n\nz<|im_end|>\n");
    free(out);
    /* Qwen3's template splits the same way (a second <think> before </think>) */
    ck_assert_int_eq(dllm_chat_render(DLLM_CHAT_QWEN3, m2, 2, &o, &out, &err), 0);
    ck_assert_str_eq(out, "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n<think>\nb\n</think>\n\nz<|im_end|>\n");
    free(out);
    /* the template's exceptions */
    ck_assert_int_eq(dllm_chat_render(f, m, 0, &o, &out, &err), DLLM_EXIT_INPUT);
    ck_assert_int_eq(dllm_chat_render(f, &m[1], 1, &o, &out, &err), DLLM_EXIT_INPUT);
    ck_assert_ptr_nonnull(strstr(err.msg, "no user message"));
    dllm_chat_msg late[2] = {{"user", "a"}, {"system", "s"}};
    ck_assert_int_eq(dllm_chat_render(f, late, 2, &o, &out, &err), DLLM_EXIT_INPUT);
    ck_assert_ptr_nonnull(strstr(err.msg, "message 1"));
}
END_TEST

static void write_file(const char *dir, const char *name, const char *text)
{
    char p[4400];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *fp = fopen(p, "w");
    ck_assert_ptr_nonnull(fp);
    fputs(text, fp);
    fclose(fp);
}

START_TEST(test_format_from_dir)
{
    char d[4300], cmd[9000];
    dllm_chat_format f;
    dllm_err err = {0};
    /* Qwen3: the published tokenizer_config.json decides */
    snprintf(d, sizeof d, "%s/qwen", tmp_dir);
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' && cp '%s/tokenizer/qwen3-tokenizer_config.json' '%s/tokenizer_config.json'",
             d, data_dir, d);
    ck_assert_int_eq(system(cmd), 0);
    ck_assert_int_eq(dllm_chat_format_from_dir(d, &f, &err), 0);
    ck_assert_int_eq(f, DLLM_CHAT_QWEN3);
    /* config.json model_type */
    snprintf(d, sizeof d, "%s/llada", tmp_dir);
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", d);
    ck_assert_int_eq(system(cmd), 0);
    write_file(d, "config.json", "{\"model_type\": \"llada\", \"vocab_size\": 126464}\n");
    ck_assert_int_eq(dllm_chat_format_from_dir(d, &f, &err), 0);
    ck_assert_int_eq(f, DLLM_CHAT_LLADA);
    write_file(d, "config.json", "{\"model_type\": \"qwen3\"}\n");
    ck_assert_int_eq(dllm_chat_format_from_dir(d, &f, &err), 0);
    ck_assert_int_eq(f, DLLM_CHAT_QWEN3);
    /* a tiny model with the char tokenizer: plain */
    char tp[4400];
    snprintf(tp, sizeof tp, "%s/tokenizer.json", d);
    ck_assert_int_eq(dllm_tokenizer_write_char(tp, &err), 0);
    write_file(d, "config.json", "{\"model_type\": \"llada\"}\n");
    ck_assert_int_eq(dllm_chat_format_from_dir(d, &f, &err), 0);
    ck_assert_int_eq(f, DLLM_CHAT_PLAIN);
    /* Qwen3.5: its template, in tokenizer_config.json or beside it as chat_template.jinja */
    snprintf(d, sizeof d, "%s/q35", tmp_dir);
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", d);
    ck_assert_int_eq(system(cmd), 0);
    static const char q35_tail[] = "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
                                   "{%- if enable_thinking is defined and enable_thinking is false %}"
                                   "{{- '<think>\\n\\n</think>\\n\\n' }}{%- else %}{{- '<think>\\n' }}"
                                   "{%- endif %}{%- endif %}";
    char tc_path[4400];
    snprintf(tc_path, sizeof tc_path, "%s/tokenizer_config.json", d);
    json_t *tc_json = json_pack("{s:s}", "chat_template", q35_tail);
    ck_assert_int_eq(json_dump_file(tc_json, tc_path, 0), 0);
    json_decref(tc_json);
    write_file(d, "config.json", "{\"model_type\": \"qwen3\"}\n");
    ck_assert_int_eq(dllm_chat_format_from_dir(d, &f, &err), 0);
    ck_assert_int_eq(f, DLLM_CHAT_QWEN35);
    write_file(d, "tokenizer_config.json", "{\"eos_token\": \"<|im_end|>\"}\n");
    write_file(d, "chat_template.jinja", "{{- '<|im_start|>' }}{{- '<think>\\n' }}\n");
    ck_assert_int_eq(dllm_chat_format_from_dir(d, &f, &err), 0);
    ck_assert_int_eq(f, DLLM_CHAT_QWEN35);
    /* unknown or missing: bad input naming the file */
    snprintf(d, sizeof d, "%s/other", tmp_dir);
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", d);
    ck_assert_int_eq(system(cmd), 0);
    ck_assert_int_eq(dllm_chat_format_from_dir(d, &f, &err), DLLM_EXIT_INPUT);
    ck_assert_ptr_nonnull(strstr(err.msg, "config.json"));
    write_file(d, "config.json", "{\"model_type\": \"bert\"}\n");
    ck_assert_int_eq(dllm_chat_format_from_dir(d, &f, &err), DLLM_EXIT_INPUT);
    ck_assert_ptr_nonnull(strstr(err.msg, "bert"));
}
END_TEST

Suite *tu_suite(tu_ctx *ctx)
{
    (void)ctx;
    Suite *s = suite_create("chat");
    TCase *tc = tcase_create("chat");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_chat_goldens);
    tcase_add_test(tc, test_plain_and_errors);
    tcase_add_test(tc, test_format_from_dir);
    tcase_add_test(tc, test_qwen35_template);
    suite_add_tcase(s, tc);
    return s;
}
