/* reward_program.c: the reward program's process and its line protocol (see
 * reward_program.h). Pipes both ways, poll with a deadline on each request; the
 * write side blocks SIGPIPE for the duration, so a program that died makes the
 * write fail with EPIPE instead of killing dllm-rl. */
#define _GNU_SOURCE /* pipe2 */
#include "tasks/reward_program.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define ANSWER_MAX 8192 /* longest answer line read, newline included */

struct dllm_reward_program {
    char name[160];   /* the command as messages show it */
    pid_t pid;        /* 0 once reaped */
    int to_fd, from_fd; /* its stdin, its stdout; -1 once closed */
    double timeout_s;
    int failed;       /* an earlier request failed: the stream is out of step */
    size_t have;      /* bytes of buf read but not yet consumed */
    char buf[ANSWER_MAX];
};

int dllm_command_split(const char *command, char ***argv_out, int *argc_out, dllm_err *err)
{
    size_t n = strlen(command);
    /* at most n/2 + 1 words; the words' bytes fit in n + one NUL each */
    size_t max_words = n / 2 + 2;
    char **argv = dllm_malloc(sizeof(char *) * max_words + 2 * n + 2);
    char *out = (char *)(argv + max_words);
    int argc = 0;
    const char *p = command;
    for (;;) {
        while (*p == ' ' || *p == '\t' || *p == '\n')
            p++;
        if (!*p)
            break;
        argv[argc++] = out;
        char quote = 0;
        for (; *p && (quote || (*p != ' ' && *p != '\t' && *p != '\n')); p++) {
            if (quote) {
                if (*p == quote)
                    quote = 0;
                else if (quote == '"' && *p == '\\' && (p[1] == '"' || p[1] == '\\'))
                    *out++ = *++p;
                else
                    *out++ = *p;
            } else if (*p == '\'' || *p == '"') {
                quote = *p;
            } else if (*p == '\\' && p[1]) {
                *out++ = *++p;
            } else {
                *out++ = *p;
            }
        }
        if (quote) {
            free(argv);
            return dllm_err_set(err, DLLM_EXIT_INPUT, "unterminated %c quote in '%.100s'", quote,
                                command);
        }
        *out++ = '\0';
    }
    argv[argc] = NULL;
    if (argc == 0) {
        free(argv);
        return dllm_err_set(err, DLLM_EXIT_INPUT, "empty command");
    }
    *argv_out = argv;
    if (argc_out)
        *argc_out = argc;
    return 0;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int dllm_reward_program_start(dllm_reward_program **out, const char *command, double timeout_s,
                              dllm_err *err)
{
    *out = NULL;
    char **argv;
    if (dllm_command_split(command, &argv, NULL, err))
        return err->code;
    int to[2], from[2];
    if (pipe2(to, O_CLOEXEC)) {
        free(argv);
        return dllm_err_set(err, DLLM_EXIT_INTERNAL, "pipe: %s", strerror(errno));
    }
    if (pipe2(from, O_CLOEXEC)) {
        close(to[0]);
        close(to[1]);
        free(argv);
        return dllm_err_set(err, DLLM_EXIT_INTERNAL, "pipe: %s", strerror(errno));
    }
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, to[0], 0);
    posix_spawn_file_actions_adddup2(&fa, from[1], 1);
    posix_spawnattr_init(&at);
    sigset_t none, dflt;
    sigemptyset(&none);
    sigemptyset(&dflt);
    sigaddset(&dflt, SIGPIPE);
    sigaddset(&dflt, SIGINT);
    sigaddset(&dflt, SIGTERM);
    posix_spawnattr_setsigmask(&at, &none);
    posix_spawnattr_setsigdefault(&at, &dflt);
    /* a group of its own: the terminal's Ctrl-C goes to dllm-rl, which decides */
    posix_spawnattr_setpgroup(&at, 0);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF |
                                      POSIX_SPAWN_SETPGROUP);
    pid_t pid;
    int rc = posix_spawnp(&pid, argv[0], &fa, &at, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    close(to[0]);
    close(from[1]);
    if (rc) {
        close(to[1]);
        close(from[0]);
        dllm_err_set(err, DLLM_EXIT_INPUT, "cannot start '%s': %s%s", argv[0], strerror(rc),
                     rc == ENOENT && !strchr(argv[0], '/') ? " (not found on PATH)" : "");
        free(argv);
        return err->code;
    }
    free(argv);
    fcntl(to[1], F_SETFL, fcntl(to[1], F_GETFL) | O_NONBLOCK);
    dllm_reward_program *p = dllm_calloc(1, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", command);
    p->pid = pid;
    p->to_fd = to[1];
    p->from_fd = from[0];
    p->timeout_s = timeout_s;
    *out = p;
    return 0;
}

/* Waits up to wait_s for the program to end; kills it (and its group) when it has
 * not. Fills why with how it ended. */
static void reap(dllm_reward_program *p, double wait_s, char *why, size_t n)
{
    if (!p->pid) {
        snprintf(why, n, "had ended");
        return;
    }
    int st = 0;
    pid_t r = 0;
    const double t_end = now_s() + wait_s;
    while ((r = waitpid(p->pid, &st, WNOHANG)) == 0 && now_s() < t_end) {
        struct timespec ts = {0, 5 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    if (r == 0) {
        kill(-p->pid, SIGKILL);
        kill(p->pid, SIGKILL);
        r = waitpid(p->pid, &st, 0);
        snprintf(why, n, "was killed");
    } else if (r < 0) {
        snprintf(why, n, "ended (its status is unknown)");
    } else if (WIFEXITED(st)) {
        snprintf(why, n, "exited with status %d", WEXITSTATUS(st));
    } else if (WIFSIGNALED(st)) {
        snprintf(why, n, "was killed by signal %d (%s)", WTERMSIG(st), strsignal(WTERMSIG(st)));
    } else {
        snprintf(why, n, "ended");
    }
    p->pid = 0;
}

static void close_fds(dllm_reward_program *p)
{
    if (p->to_fd >= 0)
        close(p->to_fd);
    if (p->from_fd >= 0)
        close(p->from_fd);
    p->to_fd = p->from_fd = -1;
}

/* The program stopped talking: reaps it and says how it ended. */
static int died(dllm_reward_program *p, const char *what, dllm_err *err)
{
    char why[96];
    close_fds(p);
    reap(p, 1.0, why, sizeof why);
    p->failed = 1;
    return dllm_err_set(err, DLLM_EXIT_INTERNAL, "reward program '%s' %s (%s; its messages, if "
                        "any, are above)", p->name, why, what);
}

static int timed_out(dllm_reward_program *p, const char *what, dllm_err *err)
{
    char why[96];
    close_fds(p);
    reap(p, 0, why, sizeof why);
    p->failed = 1;
    return dllm_err_set(err, DLLM_EXIT_INTERNAL, "reward program '%s' %s within "
                        "task.reward.timeout_s = %g s: it was killed", p->name, what, p->timeout_s);
}

/* poll's timeout for the time left to the deadline, in ms (at least 1 while any is left). */
static int ms_left(double deadline)
{
    double left = deadline - now_s();
    if (left <= 0)
        return 0;
    return left > 1e6 ? 1000000000 : (int)(left * 1000) + 1;
}

/* Writes all of buf before the deadline. SIGPIPE is blocked meanwhile; one raised by
 * this write is taken off the pending set again, and none pending before is touched. */
static int write_all(dllm_reward_program *p, const char *buf, size_t len, double deadline,
                     dllm_err *err)
{
    sigset_t pipe_set, old, pending;
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    sigpending(&pending);
    const int was_pending = sigismember(&pending, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
    int rc = 0, broken = 0;
    size_t done = 0;
    while (done < len) {
        ssize_t w = write(p->to_fd, buf + done, len - done);
        if (w > 0) {
            done += (size_t)w;
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && errno == EPIPE) {
            broken = 1;
            break;
        }
        if (w < 0 && errno != EAGAIN) {
            rc = dllm_err_set(err, DLLM_EXIT_INTERNAL, "reward program '%s': write: %s", p->name,
                              strerror(errno));
            break;
        }
        struct pollfd pf = {p->to_fd, POLLOUT, 0};
        int ms = ms_left(deadline);
        int k = ms ? poll(&pf, 1, ms) : 0;
        if (k == 0) {
            rc = -1; /* timeout */
            break;
        }
        if (k < 0 && errno != EINTR) {
            rc = dllm_err_set(err, DLLM_EXIT_INTERNAL, "poll: %s", strerror(errno));
            break;
        }
    }
    if (broken && !was_pending) {
        struct timespec zero = {0, 0};
        while (sigtimedwait(&pipe_set, NULL, &zero) < 0 && errno == EINTR)
            ;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (broken)
        return died(p, "it closed its stdin before reading the request", err);
    if (rc == -1)
        return timed_out(p, "did not read the request", err);
    return rc;
}

/* One line from the program before the deadline, without its newline, into line. */
static int read_line(dllm_reward_program *p, char *line, double deadline, dllm_err *err)
{
    for (;;) {
        char *nl = memchr(p->buf, '\n', p->have);
        if (nl) {
            size_t n = (size_t)(nl - p->buf);
            memcpy(line, p->buf, n);
            line[n] = '\0';
            if (n && line[n - 1] == '\r')
                line[n - 1] = '\0';
            p->have -= n + 1;
            memmove(p->buf, nl + 1, p->have);
            return 0;
        }
        if (p->have == sizeof p->buf) {
            p->failed = 1;
            return dllm_err_set(err, DLLM_EXIT_INTERNAL, "reward program '%s' answered a line "
                                "longer than %d bytes: expected a number or {\"reward\": x}",
                                p->name, ANSWER_MAX - 1);
        }
        struct pollfd pf = {p->from_fd, POLLIN, 0};
        int ms = ms_left(deadline);
        int k = ms ? poll(&pf, 1, ms) : 0;
        if (k == 0)
            return timed_out(p, "gave no answer", err);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            return dllm_err_set(err, DLLM_EXIT_INTERNAL, "poll: %s", strerror(errno));
        }
        ssize_t r = read(p->from_fd, p->buf + p->have, sizeof p->buf - p->have);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return died(p, strerror(errno), err);
        if (r == 0)
            return died(p, p->have ? "its last answer has no newline" : "it closed its stdout "
                        "without answering", err);
        p->have += (size_t)r;
    }
}

int dllm_reward_parse_answer(const char *line, double *reward, int *correct, dllm_err *err)
{
    *correct = -1;
    const char *s = line;
    while (*s == ' ' || *s == '\t')
        s++;
    if (*s == '{') {
        json_error_t je;
        json_t *o = json_loads(s, 0, &je);
        json_t *r = o ? json_object_get(o, "reward") : NULL;
        json_t *c = o ? json_object_get(o, "correct") : NULL;
        int rc = 0;
        if (!o)
            rc = dllm_err_set(err, DLLM_EXIT_INPUT, "invalid JSON (%s)", je.text);
        else if (!json_is_object(o) || !json_is_number(r))
            rc = dllm_err_set(err, DLLM_EXIT_INPUT, "no number under \"reward\"");
        else if (c && !json_is_boolean(c) &&
                 !(json_is_integer(c) && (json_integer_value(c) == 0 || json_integer_value(c) == 1)))
            rc = dllm_err_set(err, DLLM_EXIT_INPUT, "\"correct\" must be true, false, 0 or 1");
        else {
            *reward = json_number_value(r);
            if (c)
                *correct = json_is_boolean(c) ? json_is_true(c) : (int)json_integer_value(c);
        }
        json_decref(o);
        if (rc)
            return rc;
    } else {
        char *end;
        errno = 0;
        double v = strtod(s, &end);
        while (*end == ' ' || *end == '\t')
            end++;
        if (end == s || *end || errno == ERANGE)
            return dllm_err_set(err, DLLM_EXIT_INPUT, "not a number");
        *reward = v;
    }
    if (!isfinite(*reward))
        return dllm_err_set(err, DLLM_EXIT_INPUT, "the reward must be finite");
    return 0;
}

int dllm_reward_program_ask(dllm_reward_program *p, const char *request, size_t len, double *reward,
                            int *correct, dllm_err *err)
{
    if (p->failed)
        return dllm_err_set(err, DLLM_EXIT_INTERNAL, "reward program '%s' failed earlier", p->name);
    const double deadline = now_s() + p->timeout_s;
    if (write_all(p, request, len, deadline, err) || write_all(p, "\n", 1, deadline, err))
        return err->code;
    char line[ANSWER_MAX + 1];
    if (read_line(p, line, deadline, err))
        return err->code;
    dllm_err e2;
    if (dllm_reward_parse_answer(line, reward, correct, &e2)) {
        p->failed = 1;
        return dllm_err_set(err, DLLM_EXIT_INTERNAL, "reward program '%s' answered '%.80s': %s "
                            "(expected a number, or {\"reward\": x} with an optional \"correct\": "
                            "true|false)", p->name, line, e2.msg);
    }
    return 0;
}

void dllm_reward_program_stop(dllm_reward_program *p)
{
    if (!p)
        return;
    char why[96];
    close_fds(p); /* end of its stdin: the program's cue to exit */
    reap(p, 2.0, why, sizeof why);
    free(p);
}
