/* test_shell.h: running a shell command from a suite (the CLI tests drive the
 * dllm-rl binary this way). */
#ifndef DLLM_TEST_SHELL_H
#define DLLM_TEST_SHELL_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>

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

#endif
