/* fuzz_yaml_config.c: the YAML config loader and --set overrides. The input is
 * split at the first NUL byte: before it the YAML file, after it one --set
 * assignment per line. Checks: no crash, no leak (ASan); every failure is an
 * input error (code 2) naming the file or the override
 * ("--set"); and a config that loads round-trips: its dump (the config.yaml a
 * run directory stores, which --resume reads back) loads to the same dump. */
#include "src/config/yaml_config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[64], yaml_path[96], dump_path[96];

static void write_file(const char *path, const char *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(p, 1, n, f) != n) || fclose(f))
        abort(); /* the harness itself failed, not the code under test */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/tmp/fuzz-yaml-XXXXXX");
        if (!mkdtemp(dir))
            abort();
        snprintf(yaml_path, sizeof yaml_path, "%s/fuzz.yaml", dir);
        snprintf(dump_path, sizeof dump_path, "%s/dump.yaml", dir);
    }
    const uint8_t *nul = memchr(data, 0, size);
    size_t nyaml = nul ? (size_t)(nul - data) : size;
    write_file(yaml_path, (const char *)data, nyaml);

    dllm_cfg *cfg = calloc(1, sizeof *cfg);
    dllm_err err = {0};
    dllm_cfg_defaults(cfg);
    int rc = dllm_cfg_load(cfg, yaml_path, &err);
    if (rc) {
        if (rc != DLLM_EXIT_INPUT || strncmp(err.msg, yaml_path, strlen(yaml_path)))
            abort();
        free(cfg);
        return 0;
    }
    /* the overrides, one per line (a NUL inside ends its line early) */
    if (nul) {
        size_t n = (size_t)(data + size - (nul + 1));
        char *sets = malloc(n + 1);
        memcpy(sets, nul + 1, n);
        sets[n] = '\0';
        for (char *line = sets, *next; line; line = next) {
            next = strchr(line, '\n');
            if (next)
                *next++ = '\0';
            memset(&err, 0, sizeof err);
            rc = dllm_cfg_set(cfg, line, &err);
            if (rc && (rc != DLLM_EXIT_INPUT || !strstr(err.msg, "--set")))
                abort();
        }
        free(sets);
    }
    memset(&err, 0, sizeof err);
    rc = dllm_cfg_validate(cfg, &err);
    if (rc && (rc != DLLM_EXIT_INPUT || !err.msg[0]))
        abort();

    /* round trip through the dump */
    char *dump = dllm_cfg_dump(cfg);
    write_file(dump_path, dump, strlen(dump));
    dllm_cfg *again = calloc(1, sizeof *again);
    dllm_cfg_defaults(again);
    memset(&err, 0, sizeof err);
    if (dllm_cfg_load(again, dump_path, &err)) {
        fprintf(stderr, "dump does not load: %s\n---\n%s", err.msg, dump);
        abort();
    }
    char *dump2 = dllm_cfg_dump(again);
    if (strcmp(dump, dump2)) {
        fprintf(stderr, "dump changes on reload:\n%s---\n%s", dump, dump2);
        abort();
    }
    free(dump2);
    free(dump);
    free(again);
    free(cfg);
    return 0;
}
