/* tb_events.c: TensorBoard event files; see tb_events.h for the format. */
#include "src/log/tb_events.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- CRC32C ------------------------------------------------------------------------ */

/* Reflected Castagnoli polynomial 0x1EDC6F41, one table entry per byte value. */
static uint32_t crc_table[256];

static void crc_table_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (c & 1 ? 0x82F63B78u : 0);
        crc_table[i] = c;
    }
}

uint32_t tb_crc32c(const void *data, size_t n)
{
    if (!crc_table[1])   /* the entry for 1 is non-zero once the table is built */
        crc_table_init();
    const uint8_t *p = data;
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++)
        c = crc_table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

/* TFRecord stores the CRC rotated and offset: a CRC of data that itself holds CRCs
 * would otherwise be weak. */
uint32_t tb_masked_crc32c(const void *data, size_t n)
{
    uint32_t c = tb_crc32c(data, n);
    return ((c >> 15) | (c << 17)) + 0xA282EAD8u;
}

/* ---- protobuf wire format ------------------------------------------------------------ */

void tb_buf_free(tb_buf *b)
{
    free(b->p);
    memset(b, 0, sizeof *b);
}

static void put(tb_buf *b, const void *data, size_t n)
{
    if (!n)
        return;
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n)
            cap *= 2;
        b->p = dllm_realloc(b->p, cap);
        b->cap = cap;
    }
    memcpy(b->p + b->n, data, n);
    b->n += n;
}

static void put_varint(tb_buf *b, uint64_t v)
{
    uint8_t s[10];
    size_t k = 0;
    do {
        s[k++] = (uint8_t)((v & 0x7F) | (v > 0x7F ? 0x80 : 0));
        v >>= 7;
    } while (v);
    put(b, s, k);
}

static void put_le(tb_buf *b, uint64_t v, int bytes)
{
    uint8_t s[8];
    for (int i = 0; i < bytes; i++)
        s[i] = (uint8_t)(v >> (8 * i));
    put(b, s, (size_t)bytes);
}

enum { WIRE_VARINT = 0, WIRE_I64 = 1, WIRE_LEN = 2, WIRE_I32 = 5 };

static void put_key(tb_buf *b, int field, int wire)
{
    put_varint(b, (uint64_t)field << 3 | (uint64_t)wire);
}

static void put_double(tb_buf *b, int field, double v)
{
    uint64_t u;
    memcpy(&u, &v, sizeof u);
    put_key(b, field, WIRE_I64);
    put_le(b, u, 8);
}

static void put_float(tb_buf *b, int field, float v)
{
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    put_key(b, field, WIRE_I32);
    put_le(b, u, 4);
}

static void put_bytes(tb_buf *b, int field, const void *data, size_t n)
{
    put_key(b, field, WIRE_LEN);
    put_varint(b, n);
    put(b, data, n);
}

/* Event fields: wall_time 1, step 2, file_version 3, summary 5, session_log 7. A
 * step of 0 is proto3's default and so not written, as protobuf itself does. */
static void put_event_head(tb_buf *b, double wall_time, int64_t step)
{
    put_double(b, 1, wall_time);
    if (step) {
        put_key(b, 2, WIRE_VARINT);
        put_varint(b, (uint64_t)step);
    }
}

void tb_event_file_version(tb_buf *b, double wall_time)
{
    static const char v[] = "brain.Event:2";
    put_event_head(b, wall_time, 0);
    put_bytes(b, 3, v, sizeof v - 1);
}

void tb_event_start(tb_buf *b, double wall_time, int64_t step)
{
    static const uint8_t status_start[] = {0x08, 0x01}; /* SessionLog.status = START */
    put_event_head(b, wall_time, step);
    put_bytes(b, 7, status_start, sizeof status_start);
}

void tb_event_scalars(tb_buf *b, double wall_time, int64_t step, const char *prefix, int n,
                      const char *const *names, const double *values)
{
    tb_buf summary = {0}, value = {0};
    char tag[512];
    for (int i = 0; i < n; i++) {
        if (!isfinite(values[i]))
            continue;
        snprintf(tag, sizeof tag, "%s%s", prefix, names[i]);
        value.n = 0;
        put_bytes(&value, 1, tag, strlen(tag));
        put_float(&value, 2, (float)values[i]);
        put_bytes(&summary, 1, value.p, value.n);
    }
    put_event_head(b, wall_time, step);
    put_bytes(b, 5, summary.p, summary.n);
    tb_buf_free(&summary);
    tb_buf_free(&value);
}

void tb_record(tb_buf *out, const uint8_t *data, size_t n)
{
    uint8_t len[8];
    for (int i = 0; i < 8; i++)
        len[i] = (uint8_t)((uint64_t)n >> (8 * i));
    put(out, len, 8);
    put_le(out, tb_masked_crc32c(len, 8), 4);
    put(out, data, n);
    put_le(out, tb_masked_crc32c(data, n), 4);
}

/* ---- the writer ------------------------------------------------------------------- */

struct tb_writer {
    FILE *f;
    char path[4400];
};

static double wall_clock(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The T of the file name: now, or one past the newest event file already in dir. */
static long long name_time(const char *dir)
{
    static const char stem[] = "events.out.tfevents.";
    long long t = (long long)time(NULL);
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d));) {
        if (strncmp(e->d_name, stem, sizeof stem - 1))
            continue;
        long long u = strtoll(e->d_name + sizeof stem - 1, NULL, 10);
        if (u >= t)
            t = u + 1;
    }
    if (d)
        closedir(d);
    return t;
}

/* Writes the records of b (already framed) and flushes them to the file. */
static int write_out(tb_writer *w, const tb_buf *b, dllm_err *err)
{
    errno = 0;
    if (fwrite(b->p, 1, b->n, w->f) != b->n || fflush(w->f))
        return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: cannot write: %s", w->path,
                            strerror(errno ? errno : EIO));
    return 0;
}

static int write_event(tb_writer *w, const tb_buf *event, dllm_err *err)
{
    tb_buf rec = {0};
    tb_record(&rec, event->p, event->n);
    int rc = write_out(w, &rec, err);
    tb_buf_free(&rec);
    return rc;
}

int tb_writer_open(tb_writer **out, const char *dir, int64_t restart_step, dllm_err *err)
{
    *out = NULL;
    tb_writer *w = dllm_calloc(1, sizeof *w);
    char host[256] = "localhost";
    if (gethostname(host, sizeof host - 1) || !host[0])
        snprintf(host, sizeof host, "localhost");
    for (char *c = host; *c; c++)   /* a file name: no separators from the host name */
        if (*c == '/')
            *c = '_';
    snprintf(w->path, sizeof w->path, "%s/events.out.tfevents.%010lld.%s.%ld", dir,
             name_time(dir), host, (long)getpid());
    w->f = fopen(w->path, "wbx");   /* never over an existing file */
    if (!w->f) {
        int rc = dllm_err_set(err, DLLM_EXIT_INPUT, "%s: cannot create: %s", w->path,
                              strerror(errno));
        free(w);
        return rc;
    }
    tb_buf ev = {0};
    tb_event_file_version(&ev, wall_clock());
    int rc = write_event(w, &ev, err);
    if (!rc && restart_step >= 0) {
        ev.n = 0;
        tb_event_start(&ev, wall_clock(), restart_step);
        rc = write_event(w, &ev, err);
    }
    tb_buf_free(&ev);
    if (rc) {
        tb_writer_close(w);
        return rc;
    }
    *out = w;
    return 0;
}

int tb_write_scalars(tb_writer *w, int64_t step, const char *prefix, int n,
                     const char *const *names, const double *values, dllm_err *err)
{
    tb_buf ev = {0};
    tb_event_scalars(&ev, wall_clock(), step, prefix, n, names, values);
    int rc = write_event(w, &ev, err);
    tb_buf_free(&ev);
    return rc;
}

const char *tb_writer_path(const tb_writer *w)
{
    return w->path;
}

int tb_writer_close(tb_writer *w)
{
    if (!w)
        return 0;
    int rc = fclose(w->f) ? -1 : 0;
    free(w);
    return rc;
}
