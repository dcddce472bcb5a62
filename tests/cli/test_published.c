/* test_published: the path from published checkpoints and data sets to the recipes
 * (docs/PUBLISHED.md).
 *  - configs/data/qwen2_tokenizer_json.py, given the slow-tokenizer files of Qwen's
 *    published tokenizer.json (vocab.json, merges.txt, tokenizer_config.json, as
 *    Dream ships them), writes a tokenizer.json that encodes the held-out texts to
 *    the published ids; it keeps an existing tokenizer.json;
 *  - lines in the published data sets' layouts (GSM8K, MATH-500, the MATH training
 *    split) load under the recipes' tasks with the right references;
 *  - every recipe's model and data paths are in the doc, with the download that
 *    fills each model path;
 *  - init-model's stand-in at each recipe's model path has the architecture the
 *    recipe expects, and `plan` sizes the recipe on it: its recorded device memory fits
 *    one 80 GB GPU (exit 0). */
#include "tests/harness/harness.h"
#include "dllm/tokenizer.h"
#include "src/config/yaml_config.h"
#include "tasks/registry.h"

#include <check.h>
#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char tmp[64];

static const char *srcdir(void)
{
    static char p[1024];
    snprintf(p, sizeof p, "%s/../..", getenv("DLLM_TEST_DATA"));
    return p;
}

static void setup(void)
{
    strcpy(tmp, "/tmp/dllm-published-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmp));
}

static void teardown(void)
{
    tu_sh("rm -rf %s", tmp);
}

/* Qwen's tokenizer.json taken apart into the files a slow Qwen2 tokenizer ships. */
static const char split_py[] =
    "import gzip, json, sys\n"
    "t = json.load(gzip.open(sys.argv[1]))\n"
    "d = sys.argv[2]\n"
    "json.dump(t['model']['vocab'], open(d + '/vocab.json', 'w'), ensure_ascii=False)\n"
    "with open(d + '/merges.txt', 'w') as f:\n"
    "    f.write('#version: 0.2\\n')\n"
    "    for m in t['model']['merges']:\n"
    "        f.write((' '.join(m) if isinstance(m, list) else m) + '\\n')\n"
    "dec = {str(a['id']): {k: v for k, v in a.items() if k != 'id'} for a in t['added_tokens']}\n"
    "json.dump({'added_tokens_decoder': dec}, open(d + '/tokenizer_config.json', 'w'))\n";

START_TEST(tokenizer_json_from_slow_files)
{
    char path[256], dir[128];
    snprintf(path, sizeof path, "%s/split.py", tmp);
    FILE *f = fopen(path, "w");
    fputs(split_py, f);
    fclose(f);
    snprintf(dir, sizeof dir, "%s/dream", tmp);
    ck_assert_int_eq(tu_sh("mkdir -p %s && python3 %s %s/tokenizer/qwen3-tokenizer.json.gz %s", dir,
                           path, getenv("DLLM_TEST_DATA"), dir), 0);
    ck_assert_int_eq(tu_sh("python3 %s/configs/data/qwen2_tokenizer_json.py %s >/dev/null", srcdir(),
                           dir), 0);
    /* an existing tokenizer.json is kept */
    ck_assert_int_ne(tu_sh("python3 %s/configs/data/qwen2_tokenizer_json.py %s 2>/dev/null", srcdir(),
                           dir), 0);
    dllm_tokenizer *built, *pub;
    dllm_err err = {0};
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    ck_assert_msg(dllm_tokenizer_load(&built, path, &err) == 0, "%s", err.msg);
    snprintf(path, sizeof path, "%s/qwen3.json", tmp);
    ck_assert_int_eq(tu_sh("gunzip -c %s/tokenizer/qwen3-tokenizer.json.gz > %s",
                           getenv("DLLM_TEST_DATA"), path), 0);
    ck_assert_msg(dllm_tokenizer_load(&pub, path, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(dllm_tokenizer_vocab_size(built), dllm_tokenizer_vocab_size(pub));
    snprintf(path, sizeof path, "%s/tokenizer/qwen3_heldout.json", getenv("DLLM_TEST_DATA"));
    json_t *held = json_load_file(path, 0, NULL);
    ck_assert_ptr_nonnull(held);
    json_t *cases = json_object_get(held, "cases");
    ck_assert_int_gt(json_array_size(cases), 10);
    for (size_t i = 0; i < json_array_size(cases); i++) {
        json_t *c = json_array_get(cases, i);
        const char *text = json_string_value(json_object_get(c, "text"));
        size_t len = json_string_length(json_object_get(c, "text"));
        json_t *want = json_object_get(c, "ids");
        int32_t *ids;
        size_t n;
        ck_assert_int_eq(dllm_tokenizer_encode(built, text, len, false, &ids, &n, &err), 0);
        ck_assert_msg(n == json_array_size(want), "case %zu: %zu ids, published %zu", i, n,
                      json_array_size(want));
        for (size_t k = 0; k < n; k++)
            ck_assert_int_eq(ids[k], json_integer_value(json_array_get(want, k)));
        char *dec;
        size_t dl;
        ck_assert_int_eq(dllm_tokenizer_decode(built, ids, n, false, &dec, &dl, &err), 0);
        ck_assert_str_eq(dec, json_string_value(json_object_get(c, "decoded")));
        free(dec);
        free(ids);
    }
    /* the added tokens keep their ids (Dream's mask token is one) */
    ck_assert_int_eq(dllm_tokenizer_token_to_id(built, "<|im_start|>"), 151644);
    ck_assert_int_eq(dllm_tokenizer_token_to_id(built, "</think>"),
                     dllm_tokenizer_token_to_id(pub, "</think>"));
    json_decref(held);
    dllm_tokenizer_free(built);
    dllm_tokenizer_free(pub);
}
END_TEST

/* One line in each published layout (the problems are made up; the keys and the
 * shape of the values are the published files'). */
START_TEST(published_layouts_load)
{
    static const char gsm8k[] =
        "{\"question\": \"Ann has 3 boxes of 12 pens. She gives away 5 pens. How many are "
        "left?\", \"answer\": \"She has 3 * 12 = <<3*12=36>>36 pens.\\n36 - 5 = <<36-5=31>>31 "
        "are left.\\n#### 31\"}\n";
    static const char math500[] =
        "{\"problem\": \"What is $\\\\frac{1}{2}+\\\\frac{1}{3}$?\", \"solution\": \"The sum is "
        "$\\\\frac{3}{6}+\\\\frac{2}{6}=\\\\boxed{\\\\frac{5}{6}}$.\", \"answer\": "
        "\"\\\\frac{5}{6}\", \"subject\": \"Prealgebra\", \"level\": 1, \"unique_id\": "
        "\"test/prealgebra/1.json\"}\n";
    static const char math_train[] =
        "{\"problem\": \"Find $x$ if $2x+1=7$.\", \"level\": \"Level 1\", \"type\": \"Algebra\", "
        "\"solution\": \"Subtracting 1 gives $2x=6$, so $x=\\\\boxed{3}$.\"}\n";
    const struct { const char *task, *text, *question, *answer; } cases[] = {
        {"gsm8k", gsm8k, "Ann has 3 boxes", "31"},
        {"math500", math500, "What is $\\frac{1}{2}", "\\frac{5}{6}"},
        {"math500", math_train, "Find $x$", "3"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        dllm_task_items items;
        dllm_err err = {0};
        ck_assert_msg(dllm_task_load_buffer(dllm_task_find(cases[i].task), "x.jsonl", cases[i].text,
                                            strlen(cases[i].text), &items, &err) == 0,
                      "case %zu: %s", i, err.msg);
        ck_assert_int_eq(items.n, 1);
        ck_assert_ptr_nonnull(strstr(items.items[0].question, cases[i].question));
        ck_assert_str_eq(items.items[0].answer, cases[i].answer);
        dllm_task_items_free(&items);
    }
}
END_TEST

/* The recipes that name a published checkpoint: the configs with a model.path. */
typedef struct {
    char file[256];
    dllm_cfg cfg;
} recipe;

static int recipes(recipe *out, int max)
{
    char dir[1100];
    snprintf(dir, sizeof dir, "%s/configs", srcdir());
    DIR *d = opendir(dir);
    ck_assert_ptr_nonnull(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        size_t l = strlen(e->d_name);
        if (l < 6 || strcmp(e->d_name + l - 5, ".yaml"))
            continue;
        char path[2400];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        dllm_cfg cfg;
        dllm_err err = {0};
        dllm_cfg_defaults(&cfg);
        ck_assert_msg(dllm_cfg_load(&cfg, path, &err) == 0, "%s", err.msg);
        /* the quickstart's model.path is a run of its own, not a download */
        if (!cfg.model.path[0] || !strncmp(cfg.model.path, "runs/", 5))
            continue;
        ck_assert_int_lt(n, max);
        snprintf(out[n].file, sizeof out[n].file, "%s", path);
        out[n++].cfg = cfg;
    }
    closedir(d);
    return n;
}

START_TEST(doc_names_every_recipe_path)
{
    char path[1100];
    snprintf(path, sizeof path, "%s/docs/PUBLISHED.md", srcdir());
    char *doc = tu_slurp("%s", path);
    recipe r[16];
    int n = recipes(r, 16);
    ck_assert_int_ge(n, 3);
    for (int i = 0; i < n; i++) {
        const dllm_cfg *c = &r[i].cfg;
        char want[700];
        snprintf(want, sizeof want, "--local-dir %s\n", c->model.path);
        ck_assert_msg(strstr(doc, want), "%s: no download into %s", r[i].file, c->model.path);
        const char *data[2] = {c->task.train.path, c->task.eval.path};
        for (int k = 0; k < 2; k++)
            if (data[k][0]) {
                snprintf(want, sizeof want, "`%s`", data[k]);
                ck_assert_msg(strstr(doc, want), "%s: %s is not in the doc", r[i].file, data[k]);
            }
    }
    free(doc);
}
END_TEST

START_TEST(init_model_stand_ins_plan)
{
    recipe r[16];
    int n = recipes(r, 16);
    /* the preset of each published checkpoint the recipes name (docs/PUBLISHED.md) */
    const struct { const char *dir, *arch, *preset, *model_type; } presets[] = {
        {"checkpoints/LLaDA-8B-Instruct", "llada", "llada-8b", "\"llada\""},
        {"checkpoints/Dream-v0-Instruct-7B", "dream", "dream-7b", "\"Dream\""},
        {"checkpoints/Qwen3-8B", "qwen3", "qwen3-8b", "\"qwen3\""},
        {"checkpoints/Qwen3.5-9B", "qwen3.5", "qwen3.5-9b", "\"qwen3_5_text\""},
    };
    for (int i = 0; i < n; i++) {
        int p = -1;
        for (int k = 0; k < (int)(sizeof presets / sizeof presets[0]); k++)
            if (!strcmp(r[i].cfg.model.path, presets[k].dir))
                p = k;
        ck_assert_msg(p >= 0, "%s: model.path %s has no init-model preset here", r[i].file,
                      r[i].cfg.model.path);
        char out[400];
        snprintf(out, sizeof out, "%s/%s", tmp, presets[p].dir);
        ck_assert_int_eq(tu_sh("test -d %s || %s init-model --arch %s --preset %s --out %s >/dev/null",
                               out, tu_bin(), presets[p].arch, presets[p].preset, out), 0);
        char cj[500];
        snprintf(cj, sizeof cj, "%s/config.json", out);
        char *text = tu_slurp("%s", cj);
        char want[64];
        snprintf(want, sizeof want, "\"model_type\": %s", presets[p].model_type);
        ck_assert_msg(strstr(text, want), "%s: no %s", cj, want);
        free(text);
        ck_assert_msg(tu_sh("%s plan %s --set model.path=%s >%s/plan.txt 2>&1", tu_bin(), r[i].file, out,
                            tmp) == 0, "plan %s on the %s stand-in failed", r[i].file,
                      presets[p].preset);
    }
}
END_TEST

Suite *tu_suite(tu_ctx *ctx)
{
    if (!tu_have_bin() || !getenv("DLLM_TEST_DATA"))
        return tu_skip(ctx, "DLLM_BIN (the dllm-rl binary) or DLLM_TEST_DATA not set");
    const bool py = tu_sh("command -v python3 >/dev/null 2>&1") == 0;
    Suite *s = suite_create("published");
    TCase *tc = tcase_create("published");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 300);
    if (py)
        tcase_add_test(tc, tokenizer_json_from_slow_files);
    tcase_add_test(tc, published_layouts_load);
    tcase_add_test(tc, doc_names_every_recipe_path);
    tcase_add_test(tc, init_model_stand_ins_plan);
    suite_add_tcase(s, tc);
    if (!py)
        tu_partial(ctx, "no python3 here for the tokenizer script (the other cases ran)");
    return s;
}
