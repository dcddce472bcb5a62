/* test_shell.h: running a shell command from a suite (the CLI tests drive the
 * dllm-rl binary this way). */
#ifndef DLLM_TEST_SHELL_H
#define DLLM_TEST_SHELL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Runs the printf-formatted command with /bin/sh; its exit status, or -1 when it
 * did not exit normally (a signal). */
static inline int tu_sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline int tu_sh(const char *fmt, ...)
{
    char cmd[16384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* The whole file at the printf-formatted path, NUL-terminated (malloc'd; *len its
 * length when len is not NULL), or NULL when it cannot be read. */
static inline char *tu_slurp(size_t *len, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline char *tu_slurp(size_t *len, const char *fmt, ...)
{
    char path[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(path, sizeof path, fmt, ap);
    va_end(ap);
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

/* Starts the shell command cmd (it should redirect its output to file), polls file
 * every 50 ms for up to tries polls until it contains needle, then kills the
 * command. Returns whether needle was seen; *still_running says whether the
 * command had not ended when it was seen (or when polling gave up). */
static inline bool tu_text_appears_while_running(const char *cmd, const char *file,
                                                 const char *needle, int tries,
                                                 bool *still_running)
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

#endif
