#include "src/cli/cli_util.h"
#include "dllm/precision.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

int cli_parse_ids(const char *s, const char *flag, int32_t **ids, int *n, dllm_err *err)
{
    int cap = 16, k = 0;
    int32_t *out = dllm_malloc(sizeof *out * (size_t)cap);
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > INT32_MAX || (*end && *end != ',')) {
            free(out);
            return dllm_err_set(err, DLLM_EXIT_INPUT,
                                "%s: expected comma-separated token ids, got '%s'", flag, s);
        }
        if (k == cap)
            out = dllm_realloc(out, sizeof *out * (size_t)(cap *= 2));
        out[k++] = (int32_t)v;
        p = *end ? end + 1 : end;
        if (*end == ',' && !*p) {
            free(out);
            return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: trailing comma in '%s'", flag, s);
        }
    }
    *ids = out;
    *n = k;
    return 0;
}

int cli_parse_int(const char *s, const char *flag, long lo, long hi, long *out, dllm_err *err)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (!*s || *end || errno || v < lo || v > hi)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: expected an integer in [%ld, %ld], got '%s'",
                            flag, lo, hi, s);
    *out = v;
    return 0;
}

int cli_parse_double(const char *s, const char *flag, double *out, dllm_err *err)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (!*s || *end || errno || !isfinite(v))
        return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: expected a number, got '%s'", flag, s);
    *out = v;
    return 0;
}

int cli_fail(const char *cmd, const dllm_err *err)
{
    fprintf(stderr, "dllm-rl %s: %s\n", cmd, err->msg);
    return err->code ? err->code : DLLM_EXIT_INTERNAL;
}

int cli_mkdirs(const char *path, dllm_err *err)
{
    char buf[4096];
    if (strlen(path) >= sizeof buf)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "path too long: %s", path);
    strcpy(buf, path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(buf, 0777) && errno != EEXIST)
            return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: %s", buf, strerror(errno));
        *p = '/';
    }
    if (mkdir(buf, 0777) && errno != EEXIST)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: %s", buf, strerror(errno));
    return 0;
}

void cli_print_json_number(FILE *f, double v, int digits)
{
    if (isfinite(v))
        fprintf(f, "%.*g", digits, v);
    else
        fputs("null", f);
}

int cli_rm_tree(const char *path)
{
    /* a symbolic link (ckpt/latest) is removed, never followed */
    struct stat st;
    if (lstat(path, &st))
        return -1;
    DIR *d = S_ISDIR(st.st_mode) ? opendir(path) : NULL;
    if (!d)
        return unlink(path);
    for (struct dirent *e; (e = readdir(d));) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        char p[4400];
        snprintf(p, sizeof p, "%s/%s", path, e->d_name);
        cli_rm_tree(p);
    }
    closedir(d);
    return rmdir(path);
}

int cli_copy_file(const char *from, const char *to, dllm_err *err)
{
    char *data;
    size_t len;
    if (dllm_read_file(from, &data, &len, err))
        return err->code;
    FILE *f = fopen(to, "wb");
    int ok = f && fwrite(data, 1, len, f) == len;
    if (f && fclose(f))
        ok = 0;
    free(data);
    return ok ? 0 : dllm_err_set(err, DLLM_EXIT_INTERNAL, "%s: write failed", to);
}

int cli_dir_has_entries(const char *path)
{
    return cli_dir_has_entries_except(path, NULL);
}

int cli_dir_has_entries_except(const char *path, const char *ignored)
{
    struct stat st;
    if (lstat(path, &st))
        return 0;
    if (!S_ISDIR(st.st_mode))
        return 1;
    DIR *d = opendir(path);
    if (!d)
        return 1;
    int any = 0;
    for (struct dirent *e; !any && (e = readdir(d));)
        any = strcmp(e->d_name, ".") && strcmp(e->d_name, "..") &&
              !(ignored && !strcmp(e->d_name, ignored));
    closedir(d);
    return any;
}

int cli_refuse_existing(const char *path, const char *what, bool can_resume, dllm_err *err)
{
    if (!cli_dir_has_entries_except(path, ".lock")) /* a run's lock (src/run/run_dir.h) */
        return 0;
    return dllm_err_set(err, DLLM_EXIT_INPUT,
                        "%s: %s already exists and is not empty; pass --force to overwrite it%s",
                        path, what, can_resume ? " or --resume to continue it" : "");
}

/* PARENT/.BASE.tmp-PID beside path, so the final rename stays on one file system. */
static void sibling(char *out, size_t cap, const char *path, const char *tag)
{
    size_t l = strlen(path);
    while (l > 1 && path[l - 1] == '/')
        l--;
    const char *b = path + l;
    while (b > path && b[-1] != '/')
        b--;
    snprintf(out, cap, "%.*s.%.*s.%s-%ld", (int)(b - path), path, (int)(path + l - b), b, tag,
             (long)getpid());
}

int cli_stage_dir(const char *path, char *tmp, size_t cap, dllm_err *err)
{
    sibling(tmp, cap, path, "tmp");
    cli_rm_tree(tmp);
    return cli_mkdirs(tmp, err);
}

int cli_commit_dir(const char *tmp, const char *path, dllm_err *err)
{
    char old[4400];
    sibling(old, sizeof old, path, "old");
    struct stat st;
    bool had = lstat(path, &st) == 0;
    if (had) {
        cli_rm_tree(old);
        if (rename(path, old))
            return dllm_err_set(err, DLLM_EXIT_INTERNAL, "%s: cannot move aside: %s", path,
                                strerror(errno));
    }
    if (rename(tmp, path)) {
        int e = errno;
        if (had)
            rename(old, path); /* put the old content back */
        return dllm_err_set(err, DLLM_EXIT_INTERNAL, "%s: %s", path, strerror(e));
    }
    if (had)
        cli_rm_tree(old);
    return 0;
}

void cli_warn_random_model(const char *cmd, const char *arch, const char *preset)
{
    fflush(stdout);
    fprintf(stderr,
            "dllm-rl %s: WARNING: no model path given: the model is a RANDOM, UNTRAINED %s %s "
            "preset (set model.path to a trained model directory)\n",
            cmd, arch && arch[0] ? arch : "llada", preset && preset[0] ? preset : "tiny");
}

void cli_note_rollout_product(const char *cmd, const char *precision, const char *device)
{
    if (!precision || (device && !strcmp(device, "cuda")))
        return; /* on a device the product is the backend's (selftest reports it) */
    for (int k = DLLM_ROLLOUT_TRAINER; k <= DLLM_ROLLOUT_INT8; k++) {
        if (strcmp(precision, dllm_rollout_name((dllm_rollout_kind)k)))
            continue;
        bool faster;
        const char *what = dllm_rollout_cpu_product((dllm_rollout_kind)k, &faster);
        if (!what)
            return;
        fflush(stdout);
        /* a low precision chosen for speed that cannot give it here says so loudly */
        bool loud = !faster && (k == DLLM_ROLLOUT_BF16 || k == DLLM_ROLLOUT_FP8 ||
                                k == DLLM_ROLLOUT_INT8);
        fprintf(stderr, "dllm-rl %s: %sprecision %s: %s\n", cmd, loud ? "NOTE: " : "",
                precision, what);
        return;
    }
}
