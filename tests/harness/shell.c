/* shell.c: shell commands and whole files for the suites (harness.h). */
#include "tests/harness/harness.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

const char *tu_runner_name;

const char *tu_name(void) { return tu_runner_name ? tu_runner_name : "test"; }

Suite *tu_skip(tu_ctx *ctx, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("%s: SKIP: ", tu_name());
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    fflush(stdout);
    ctx->status = 77;
    return NULL;
}

Suite *tu_abort(tu_ctx *ctx, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", tu_name());
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    ctx->status = 1;
    return NULL;
}

void tu_partial(tu_ctx *ctx, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx->partial, sizeof ctx->partial, fmt, ap);
    va_end(ap);
}

int tu_sh(const char *fmt, ...)
{
    char cmd[16384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static char *slurp_v(size_t *len, const char *fmt, va_list ap)
{
    char path[4096];
    vsnprintf(path, sizeof path, fmt, ap);
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 4096, n = 0, got;
    char *s = malloc(cap);
    while (s && (got = fread(s + n, 1, cap - n - 1, f)) > 0) {
        n += got;
        if (n + 1 == cap)
            s = realloc(s, cap *= 2);
    }
    fclose(f);
    if (s) {
        s[n] = '\0';
        if (len)
            *len = n;
    }
    return s;
}

char *tu_slurp(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *s = slurp_v(NULL, fmt, ap);
    va_end(ap);
    return s;
}

char *tu_slurp_n(size_t *len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *s = slurp_v(len, fmt, ap);
    va_end(ap);
    return s;
}

bool tu_text_appears_while_running(const char *cmd, const char *file, const char *needle,
                                   int tries, bool *still_running)
{
    pid_t pid = fork();
    if (pid == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    bool seen = false;
    for (int i = 0; pid > 0 && i < tries && !seen; i++) {
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
        FILE *f = fopen(file, "rb");
        if (!f)
            continue;
        char buf[65536];
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[n] = '\0';
        seen = strstr(buf, needle) != NULL;
    }
    int st;
    *still_running = pid > 0 && waitpid(pid, &st, WNOHANG) == 0;
    if (pid > 0) {
        kill(pid, SIGKILL);
        waitpid(pid, &st, 0);
    }
    return seen;
}
