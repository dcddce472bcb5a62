/* selftest_cli.c: the rows that run this binary's own commands as child processes: a
 * random tiny LLaDA model (`init-model --preset tiny`) is generated from greedily and
 * scored with `--device cuda` and with `--device cpu`; both generations must run and give
 * as many ids (how many are equal is shown: a random model's near-ties may fall either
 * way, so the tokens are judged by the greedy row, selftest_greedy.c, with its tie
 * margin) and the log-probabilities must agree within 1e-4, with the device's attention
 * on its fp32 kernels (DLLM_CUDA_ATTENTION=fp32: bf16 tensor-core attention moves
 * log-probs by about 1e-3, and the op rows hold it to its own bound). A build whose generate and score have no --device
 * flag yet (the getopt message "unrecognized option '--device'", exit 2) SKIPs them. */
#include "src/selftest/selftest.h"

#include "kernels/base.h"
#include "src/cli/cli_util.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

enum { OUT_MAX = 1 << 16 };

typedef struct {
    int status;          /* exit status; -1 when it did not exit normally */
    char out[OUT_MAX];   /* stdout */
    char err[4096];      /* stderr */
} child;

static void slurp(const char *path, char *buf, size_t n)
{
    buf[0] = '\0';
    FILE *f = fopen(path, "rb");
    if (!f)
        return;
    size_t k = fread(buf, 1, n - 1, f);
    buf[k] = '\0';
    fclose(f);
}

/* Runs argv (argv[0] the binary), stdout and stderr into files of dir, read back. */
static void run_child(char *const argv[], const char *dir, child *c)
{
    char po[4200], pe[4200];
    snprintf(po, sizeof po, "%s/stdout", dir);
    snprintf(pe, sizeof pe, "%s/stderr", dir);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        int fo = open(po, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int fe = open(pe, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fo < 0 || fe < 0)
            _exit(126);
        dup2(fo, 1);
        dup2(fe, 2);
        /* compared with the CPU at fp32's rounding: the device's attention on its fp32
         * kernels (the tensor-core ones are checked by the op rows' attention cases) */
        setenv("DLLM_CUDA_ATTENTION", "fp32", 1);
        execv(argv[0], argv);
        _exit(127);
    }
    int st = 0;
    c->status = -1;
    if (pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st))
        c->status = WEXITSTATUS(st);
    slurp(po, c->out, sizeof c->out);
    slurp(pe, c->err, sizeof c->err);
}

/* The first line of s, for a note. */
static const char *first_line(const char *s, char *buf, size_t n)
{
    snprintf(buf, n, "%s", s);
    char *nl = strchr(buf, '\n');
    if (nl)
        *nl = '\0';
    return buf;
}

static bool no_device_flag(const child *c)
{
    return c->status == 2 && strstr(c->err, "--device") &&
           (strstr(c->err, "unrecognized") || strstr(c->err, "unknown"));
}

/* generate: greedy ids on both devices */
static void generate_rows(stbl_table *t, const char *exe, const char *model, const char *dir)
{
    const char *check = "cli: generate --device cuda vs cpu";
    child *c[2];
    const char *dev[2] = {"cpu", "cuda"};
    for (int i = 0; i < 2; i++) {
        c[i] = dllm_malloc(sizeof *c[i]);
        char *argv[] = {(char *)exe, "generate", "--model", (char *)model, "--prompt-ids",
                        "1,40,41,42,43", "--gen-length", "16", "--block-length", "8", "--steps",
                        "8", "--temperature", "0", "--format", "ids", "--device", (char *)dev[i],
                        NULL};
        run_child(argv, dir, c[i]);
    }
    char line[240];
    if (no_device_flag(c[0]) || no_device_flag(c[1]))
        stbl_add(t, check, STBL_SKIP, "", "",
                 "this build's generate has no device path (no --device flag): %s",
                 first_line(no_device_flag(c[0]) ? c[0]->err : c[1]->err, line, sizeof line));
    else if (c[0]->status || c[1]->status)
        stbl_add(t, check, STBL_FAIL, "", "", "generate --device %s exited %d: %s",
                 dev[c[0]->status ? 0 : 1], c[0]->status ? c[0]->status : c[1]->status,
                 first_line(c[0]->status ? c[0]->err : c[1]->err, line, sizeof line));
    else {
        /* comma-separated ids: count them and the equal ones */
        int n[2] = {0, 0}, equal = 0;
        long id[2][64];
        for (int i = 0; i < 2; i++) {
            const char *q = c[i]->out;
            char *end;
            while (n[i] < 64) {
                long v = strtol(q, &end, 10);
                if (end == q)
                    break;
                id[i][n[i]++] = v;
                q = end + (*end == ',');
            }
        }
        for (int k = 0; k < n[0] && k < n[1]; k++)
            equal += id[0][k] == id[1][k];
        bool ok = n[0] == 16 && n[1] == 16;
        char meas[48];
        snprintf(meas, sizeof meas, "%d of %d equal", equal, n[0]);
        stbl_add(t, check, ok ? STBL_PASS : STBL_FAIL, meas, "16 ids each",
                 "tiny preset, 16 tokens greedy (near-ties may differ: the greedy row judges "
                 "the tokens); cpu: %s", first_line(c[0]->out, line, sizeof line));
    }
    free(c[0]);
    free(c[1]);
}

/* score: the log-probabilities on both devices within 1e-4 */
static void score_rows(stbl_table *t, const char *exe, const char *model, const char *dir)
{
    const char *check = "cli: score --device cuda vs cpu";
    child *c[2];
    const char *dev[2] = {"cpu", "cuda"};
    for (int i = 0; i < 2; i++) {
        c[i] = dllm_malloc(sizeof *c[i]);
        char *argv[] = {(char *)exe, "score", "--model", (char *)model, "--prompt-ids",
                        "1,40,41,42,43", "--completion-ids", "50,51,52,53,0,0", "--device",
                        (char *)dev[i], NULL};
        run_child(argv, dir, c[i]);
    }
    char line[240];
    if (no_device_flag(c[0]) || no_device_flag(c[1])) {
        stbl_add(t, check, STBL_SKIP, "", "",
                 "this build's score has no device path (no --device flag): %s",
                 first_line(no_device_flag(c[0]) ? c[0]->err : c[1]->err, line, sizeof line));
    } else if (c[0]->status || c[1]->status) {
        stbl_add(t, check, STBL_FAIL, "", "", "score --device %s exited %d: %s",
                 dev[c[0]->status ? 0 : 1], c[0]->status ? c[0]->status : c[1]->status,
                 first_line(c[0]->status ? c[0]->err : c[1]->err, line, sizeof line));
    } else {
        json_t *j[2];
        for (int i = 0; i < 2; i++)
            j[i] = json_loads(c[i]->out, 0, NULL);
        double worst = NAN;
        if (j[0] && j[1]) {
            /* the sequence value and every token's */
            worst = fabs(json_number_value(json_object_get(j[0], "seq_logp")) -
                         json_number_value(json_object_get(j[1], "seq_logp")));
            json_t *a = json_object_get(j[0], "token_logp"), *b = json_object_get(j[1], "token_logp");
            if (json_array_size(a) != json_array_size(b) || !json_array_size(a))
                worst = INFINITY;
            for (size_t k = 0; k < json_array_size(a) && k < json_array_size(b); k++) {
                double d = fabs(json_number_value(json_array_get(a, k)) -
                                json_number_value(json_array_get(b, k)));
                if (!(d <= worst))
                    worst = d;
            }
        }
        if (t->perturb && !strcmp(t->perturb, "score"))
            worst = 1.0;
        char meas[48];
        snprintf(meas, sizeof meas, "%.2e", worst);
        stbl_add(t, check, worst <= 1e-4 ? STBL_PASS : STBL_FAIL, meas, "1e-4 abs",
                 "tiny preset, one_step log-probs of 6 completion tokens%s",
                 j[0] && j[1] ? "" : " (output is not JSON)");
        json_decref(j[0]);
        json_decref(j[1]);
    }
    free(c[0]);
    free(c[1]);
}

void selftest_cli(stbl_table *t)
{
    const char *tmp = getenv("TMPDIR") && getenv("TMPDIR")[0] ? getenv("TMPDIR") : P_tmpdir;
    char dir[4096], model[4200];
    snprintf(dir, sizeof dir, "%s/dllm-selftest-XXXXXX", tmp);
    if (!mkdtemp(dir)) {
        stbl_add(t, "cli: a temporary directory", STBL_FAIL, "", "", "%s: %s", dir, strerror(errno));
        return;
    }
    snprintf(model, sizeof model, "%s/model", dir);
    child *c = dllm_malloc(sizeof *c);
    char *argv[] = {(char *)t->exe, "init-model", "--arch", "llada", "--preset", "tiny", "--out",
                    model, NULL};
    run_child(argv, dir, c);
    char line[240];
    if (c->status) {
        stbl_add(t, "cli: init-model --preset tiny", STBL_FAIL, "", "", "exited %d: %s", c->status,
                 first_line(c->err, line, sizeof line));
    } else {
        generate_rows(t, t->exe, model, dir);
        score_rows(t, t->exe, model, dir);
    }
    free(c);
    cli_rm_tree(dir);
}
