#include "kernels/base.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int dllm_err_set(dllm_err *err, int code, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        err->code = code;
    }
    return code;
}

int dllm_err_prefix(dllm_err *err, const char *fmt, ...)
{
    if (!err)
        return DLLM_EXIT_INTERNAL;
    char head[512], old[sizeof err->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(head, sizeof head, fmt, ap);
    va_end(ap);
    memcpy(old, err->msg, sizeof old);
    snprintf(err->msg, sizeof err->msg, "%s: %s", head, old);
    return err->code;
}

static void oom(size_t n)
{
    fprintf(stderr, "dllm-rl: out of memory allocating %zu bytes\n", n);
    exit(DLLM_EXIT_INTERNAL);
}

void *dllm_malloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        oom(n);
    return p;
}

void *dllm_calloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p)
        oom(n * size);
    return p;
}

void *dllm_realloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q)
        oom(n);
    return q;
}

char *dllm_strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = dllm_malloc(n);
    memcpy(d, s, n);
    return d;
}

double dllm_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int dllm_read_file(const char *path, char **out, size_t *len, dllm_err *err)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: %s", path, strerror(errno));
    size_t cap = 1 << 16, n = 0;
    char *buf = dllm_malloc(cap);
    for (;;) {
        if (n + 1 >= cap)
            buf = dllm_realloc(buf, cap *= 2);
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0)
            break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: read error", path);
    }
    buf[n] = '\0';
    *out = buf;
    if (len)
        *len = n;
    return DLLM_OK;
}
