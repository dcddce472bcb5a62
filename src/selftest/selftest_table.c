/* selftest_table.c: the rows of `dllm-rl selftest`, printed as they come and written as
 * JSON (src/selftest/selftest.h). */
#include "src/selftest/selftest.h"

#include "kernels/base.h"

#include <jansson.h>
#include <stdarg.h>
#include <string.h>

static const char *const STATUS[] = {"PASS", "FAIL", "SKIP"};

void stbl_print_header(FILE *f)
{
    fprintf(f, "%-58s %-4s  %-14s %-12s %s\n", "check", "", "measured", "tolerance", "note");
}

void stbl_print_row(FILE *f, const stbl_row *r)
{
    fprintf(f, "%-58s %-4s  %-14s %-12s %s\n", r->check, STATUS[r->status], r->measured,
            r->tolerance, r->note);
    fflush(f);
}

void stbl_add(stbl_table *t, const char *check, stbl_status s, const char *measured,
              const char *tolerance, const char *note_fmt, ...)
{
    if (t->n == t->cap) {
        t->cap = t->cap ? 2 * t->cap : 64;
        t->rows = dllm_realloc(t->rows, (size_t)t->cap * sizeof *t->rows);
    }
    stbl_row *r = &t->rows[t->n++];
    memset(r, 0, sizeof *r);
    snprintf(r->check, sizeof r->check, "%s", check);
    r->status = s;
    snprintf(r->measured, sizeof r->measured, "%s", measured ? measured : "");
    snprintf(r->tolerance, sizeof r->tolerance, "%s", tolerance ? tolerance : "");
    va_list ap;
    va_start(ap, note_fmt);
    vsnprintf(r->note, sizeof r->note, note_fmt, ap);
    va_end(ap);
    if (t->live)
        stbl_print_row(t->live, r);
}

int stbl_count(const stbl_table *t, stbl_status s)
{
    int n = 0;
    for (int i = 0; i < t->n; i++)
        n += t->rows[i].status == s;
    return n;
}

void stbl_print_summary(const stbl_table *t, FILE *f)
{
    fprintf(f, "\nselftest: %d passed, %d failed, %d skipped (%d checks)\n", stbl_count(t, STBL_PASS),
            stbl_count(t, STBL_FAIL), stbl_count(t, STBL_SKIP), t->n);
}

int stbl_write_json(const stbl_table *t, const char *device, const char *path, char *why, size_t n)
{
    json_t *rows = json_array();
    for (int i = 0; i < t->n; i++) {
        const stbl_row *r = &t->rows[i];
        json_array_append_new(rows, json_pack("{s:s, s:s, s:s, s:s, s:s}", "check", r->check,
                                              "status", STATUS[r->status], "measured", r->measured,
                                              "tolerance", r->tolerance, "note", r->note));
    }
    json_t *o = json_pack("{s:s, s:b, s:i, s:i, s:i, s:o}", "device", device, "quick", t->quick,
                          "passed", stbl_count(t, STBL_PASS), "failed", stbl_count(t, STBL_FAIL),
                          "skipped", stbl_count(t, STBL_SKIP), "rows", rows);
    int rc = json_dump_file(o, path, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(o);
    if (rc)
        snprintf(why, n, "--json %s: cannot write", path);
    return rc;
}

void stbl_free(stbl_table *t)
{
    free(t->rows);
    t->rows = NULL;
    t->n = t->cap = 0;
}
