/* fuzz_safetensors_config.c: a model directory from fuzzed bytes -- config.json
 * (dllm_config_load) and model.safetensors (st_open, then every tensor converted
 * with st_read_f32 at its own shape). The input is split at the first NUL byte:
 * before it config.json, after it the safetensors file. Both are written to one
 * scratch directory made at start-up (the readers take paths, and mmap the file).
 * Checks: no crash, no leak (ASan), every failure is an input error (code 2)
 * whose message names the file it comes from. */
#include "dllm/model_config.h"
#include "dllm/safetensors.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[64];

static void write_file(const char *name, const uint8_t *p, size_t n)
{
    char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(p, 1, n, f) != n) || fclose(f))
        abort(); /* the harness itself failed, not the code under test */
}

static void check_error(int rc, const dllm_err *err, const char *file)
{
    if (rc != DLLM_EXIT_INPUT || !strstr(err->msg, file))
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/tmp/fuzz-st-XXXXXX");
        if (!mkdtemp(dir))
            abort();
    }
    const uint8_t *nul = memchr(data, 0, size);
    size_t ncfg = nul ? (size_t)(nul - data) : size;
    const uint8_t *st = nul ? nul + 1 : data + size;
    write_file("config.json", data, ncfg);
    write_file("model.safetensors", st, (size_t)(data + size - st));

    dllm_model_config cfg;
    dllm_err err = {0};
    int rc = dllm_config_load(&cfg, dir, &err);
    if (rc)
        check_error(rc, &err, "config.json");

    st_archive *a = NULL;
    memset(&err, 0, sizeof err);
    rc = st_open(&a, dir, &err);
    if (rc) {
        check_error(rc, &err, "model.safetensors");
        return 0;
    }
    for (int i = 0; i < st_count(a); i++) {
        const st_tensor *t = st_at(a, i);
        if (t->numel < 0 || t->numel > (1 << 20))
            continue; /* a valid header may describe a tensor too big to convert here */
        float *dst = malloc((size_t)(t->numel ? t->numel : 1) * sizeof(float));
        memset(&err, 0, sizeof err);
        rc = st_read_f32(a, t->name, t->shape, t->ndim, dst, &err);
        if (rc)
            check_error(rc, &err, "model.safetensors");
        free(dst);
    }
    (void)st_metadata(a, "format");
    st_close(a);
    return 0;
}
