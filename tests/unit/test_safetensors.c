/* test_safetensors.c: the safetensors reader/writer.
 *
 * - files written by the Python safetensors library (tests/ref/
 *   make_checkpoint_fixtures.py) load with the values torch reports,
 *   single-file and sharded (huggingface_hub layout);
 * - the writer's fp32 -> BF16/F16 rounding matches torch bit for bit;
 * - round trips (single, sharded, metadata, stale-file cleanup);
 * - a corpus of malformed files, generated here, each rejected with exit
 *   code 2 and a message naming the file and, where there is one, the tensor.
 *
 * DLLM_ST_GOLDEN_OUT=DIR also leaves the writer's files in DIR for the
 * reference check (make_checkpoint_fixtures.py --check-ours DIR). */
#include <check.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dllm/safetensors.h"
#include "tests/harness/harness.h"

static void pathf(char *buf, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void pathf(char *buf, size_t n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, n, fmt, ap);
    va_end(ap);
}

static const char *data_dir(void)
{
    const char *d = getenv("DLLM_TEST_DATA");
    return d ? d : "tests/data";
}

static void write_raw(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(p, 1, n, f), n);
    fclose(f);
}

/* u64 header length + header + data_len zero bytes. */
static void write_st(const char *path, const char *header, size_t data_len)
{
    size_t h = strlen(header);
    uint8_t *buf = calloc(1, 8 + h + data_len + 1);
    for (int i = 0; i < 8; i++)
        buf[i] = (uint8_t)((uint64_t)h >> (8 * i));
    memcpy(buf + 8, header, h);
    write_raw(path, buf, 8 + h + data_len);
    free(buf);
}

static uint32_t f2u(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float u2f(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Bitwise equality, except any NaN matches any NaN. */
static void assert_same(const float *got, const float *want, int64_t n, const char *what)
{
    for (int64_t i = 0; i < n; i++) {
        if (isnan(want[i]))
            ck_assert_msg(isnan(got[i]), "%s[%lld]: want NaN, got %g", what, (long long)i, got[i]);
        else
            ck_assert_msg(f2u(got[i]) == f2u(want[i]), "%s[%lld]: want %08x (%g), got %08x (%g)", what,
                          (long long)i, f2u(want[i]), want[i], f2u(got[i]), got[i]);
    }
}

/* ------------------------------------------------ expected-value files */

typedef struct {
    char name[256], dtype[16];
    int ndim;
    int64_t shape[ST_MAX_DIMS], numel;
    float *vals;
} expect_t;

static int load_expected(const char *path, expect_t **out)
{
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    expect_t *e = NULL;
    int n = 0;
    expect_t x;
    while (fscanf(f, "%255s %15s %d", x.name, x.dtype, &x.ndim) == 3) {
        ck_assert_int_le(x.ndim, ST_MAX_DIMS);
        for (int i = 0; i < x.ndim; i++)
            ck_assert_int_eq(fscanf(f, "%lld", (long long *)&x.shape[i]), 1);
        ck_assert_int_eq(fscanf(f, "%lld", (long long *)&x.numel), 1);
        x.vals = malloc((size_t)(x.numel ? x.numel : 1) * sizeof(float));
        for (int64_t i = 0; i < x.numel; i++) {
            unsigned u;
            ck_assert_int_eq(fscanf(f, "%x", &u), 1);
            x.vals[i] = u2f(u);
        }
        e = realloc(e, (size_t)(n + 1) * sizeof *e);
        e[n++] = x;
    }
    fclose(f);
    *out = e;
    return n;
}

static void check_against(const st_archive *a, const expect_t *e, int n)
{
    dllm_err err = {0};
    for (int k = 0; k < n; k++) {
        const st_tensor *t = st_find(a, e[k].name);
        ck_assert_msg(t != NULL, "missing %s", e[k].name);
        ck_assert_str_eq(st_dtype_name(t->dtype), e[k].dtype);
        ck_assert_int_eq(t->numel, e[k].numel);
        float *got = malloc((size_t)(e[k].numel ? e[k].numel : 1) * sizeof(float));
        int rc = st_read_f32(a, e[k].name, e[k].shape, e[k].ndim, got, &err);
        ck_assert_msg(rc == 0, "%s", err.msg);
        assert_same(got, e[k].vals, e[k].numel, e[k].name);
        free(got);
    }
}

static void free_expected(expect_t *e, int n)
{
    for (int i = 0; i < n; i++)
        free(e[i].vals);
    free(e);
}

/* ------------------------------------------------------------- dtypes */

START_TEST(test_dtype_table)
{
    for (int d = 0; d < ST_NDTYPES; d++) {
        st_dtype back;
        ck_assert_int_eq(st_dtype_parse(st_dtype_name((st_dtype)d), &back), 0);
        ck_assert_int_eq(back, d);
        ck_assert_uint_gt(st_dtype_size((st_dtype)d), 0);
    }
    st_dtype x;
    ck_assert_int_ne(st_dtype_parse("F12", &x), 0);
    ck_assert_uint_eq(st_dtype_size(ST_BF16), 2);
    ck_assert_uint_eq(st_dtype_size(ST_F8_E4M3), 1);
    ck_assert_uint_eq(st_dtype_size(ST_I64), 8);
}
END_TEST

/* ------------------------------------------------- reference fixtures */

START_TEST(test_ref_single)
{
    char path[512], exp[512];
    pathf(path, sizeof path, "%s/checkpoint/ref_single.safetensors", data_dir());
    pathf(exp, sizeof exp, "%s/checkpoint/ref_single.expected", data_dir());
    st_archive *a;
    dllm_err err = {0};
    ck_assert_msg(st_open(&a, path, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(st_count(a), 7);
    ck_assert_str_eq(st_metadata(a, "format"), "pt");
    ck_assert_str_eq(st_metadata(a, "origin"), "safetensors-python");
    ck_assert_ptr_null(st_metadata(a, "nope"));
    expect_t *e;
    int n = load_expected(exp, &e);
    ck_assert_int_eq(n, 6); /* every float tensor, incl. the empty one */
    check_against(a, e, n);
    free_expected(e, n);

    /* Tensors come sorted by name; the I64 one is readable raw only. */
    for (int i = 1; i < st_count(a); i++)
        ck_assert_int_lt(strcmp(st_at(a, i - 1)->name, st_at(a, i)->name), 0);
    const st_tensor *ids = st_find(a, "model.i64.ids");
    ck_assert_ptr_nonnull(ids);
    ck_assert_int_eq(ids->dtype, ST_I64);
    int64_t v[5];
    memcpy(v, ids->data, sizeof v);
    ck_assert_int_eq(v[0], 1);
    ck_assert_int_eq(v[1], -2);
    ck_assert_int_eq(v[3], (int64_t)1 << 40);
    ck_assert_int_eq(v[4], -((int64_t)1 << 50));
    float dummy[5];
    int64_t shape[1] = {5};
    ck_assert_int_eq(st_read_f32(a, "model.i64.ids", shape, 1, dummy, &err), DLLM_EXIT_INPUT);
    ck_assert_ptr_nonnull(strstr(err.msg, "model.i64.ids"));
    ck_assert_ptr_nonnull(strstr(err.msg, "ref_single.safetensors"));
    const st_tensor *empty = st_find(a, "model.empty");
    ck_assert_int_eq(empty->numel, 0);
    ck_assert_int_eq(empty->ndim, 2);
    ck_assert_str_eq(empty->file, path);
    st_close(a);
}
END_TEST

START_TEST(test_ref_sharded)
{
    char dir[512], exp[512];
    pathf(dir, sizeof dir, "%s/checkpoint/ref_sharded", data_dir());
    pathf(exp, sizeof exp, "%s/checkpoint/ref_sharded.expected", data_dir());
    st_archive *a;
    dllm_err err = {0};
    ck_assert_msg(st_open(&a, dir, &err) == 0, "%s", err.msg);
    expect_t *e;
    int n = load_expected(exp, &e);
    ck_assert_int_eq(st_count(a), n);
    check_against(a, e, n);
    free_expected(e, n);
    ck_assert_str_eq(st_metadata(a, "format"), "pt");
    /* The tensor knows its shard. */
    const st_tensor *t = st_find(a, "model.transformer.wte.weight");
    ck_assert_ptr_nonnull(strstr(t->file, "model-00001-of-"));
    st_close(a);
}
END_TEST

/* The writer's BF16/F16 rounding equals torch's (conversions.safetensors). */
static void load_conversions(st_archive **a, float **x, int64_t *n)
{
    char path[512];
    pathf(path, sizeof path, "%s/checkpoint/conversions.safetensors", data_dir());
    dllm_err err = {0};
    ck_assert_msg(st_open(a, path, &err) == 0, "%s", err.msg);
    const st_tensor *in = st_find(*a, "input");
    ck_assert_ptr_nonnull(in);
    *n = in->numel;
    *x = malloc((size_t)*n * sizeof(float));
    ck_assert_int_eq(st_read_f32(*a, "input", n, 1, *x, &err), 0);
}

static st_writer *conversions_writer(const float *x, int64_t n)
{
    st_writer *w = st_writer_new();
    st_writer_metadata(w, "writer", "dllm-rl");
    dllm_err err = {0};
    ck_assert_int_eq(st_writer_add_f32(w, "input.f32", ST_F32, 1, &n, x, &err), 0);
    ck_assert_int_eq(st_writer_add_f32(w, "input.bf16", ST_BF16, 1, &n, x, &err), 0);
    ck_assert_int_eq(st_writer_add_f32(w, "input.f16", ST_F16, 1, &n, x, &err), 0);
    return w;
}

START_TEST(test_writer_matches_torch)
{
    st_archive *ref;
    float *x;
    int64_t n;
    load_conversions(&ref, &x, &n);
    st_writer *w = conversions_writer(x, n);
    char path[512], dir[512];
    pathf(path, sizeof path, "%s/ours_single.safetensors", tu_dir);
    pathf(dir, sizeof dir, "%s/ours_sharded", tu_dir);
    dllm_err err = {0};
    ck_assert_msg(st_writer_save_file(w, path, &err) == 0, "%s", err.msg);
    ck_assert_msg(st_writer_save_dir(w, dir, (size_t)n * 3, &err) == 0, "%s", err.msg);
    const char *golden = getenv("DLLM_ST_GOLDEN_OUT");
    if (golden && golden[0]) {
        char p2[512], d2[512];
        mkdir(golden, 0777);
        pathf(p2, sizeof p2, "%s/ours_single.safetensors", golden);
        pathf(d2, sizeof d2, "%s/ours_sharded", golden);
        ck_assert_msg(st_writer_save_file(w, p2, &err) == 0, "%s", err.msg);
        ck_assert_msg(st_writer_save_dir(w, d2, (size_t)n * 3, &err) == 0, "%s", err.msg);
    }
    st_writer_free(w);

    const char *where[2] = {path, dir};
    float *want = malloc((size_t)n * sizeof(float)), *got = malloc((size_t)n * sizeof(float));
    for (int k = 0; k < 2; k++) {
        st_archive *a;
        ck_assert_msg(st_open(&a, where[k], &err) == 0, "%s", err.msg);
        ck_assert_str_eq(st_metadata(a, "writer"), "dllm-rl");
        const char *pairs[3][2] = {{"input.f32", "input"}, {"input.bf16", "bf16"}, {"input.f16", "f16"}};
        for (int p = 0; p < 3; p++) {
            ck_assert_int_eq(st_read_f32(a, pairs[p][0], &n, 1, got, &err), 0);
            ck_assert_int_eq(st_read_f32(ref, pairs[p][1], &n, 1, want, &err), 0);
            assert_same(got, want, n, pairs[p][0]);
            /* and the stored bytes themselves equal torch's (NaN aside) */
            const st_tensor *tg = st_find(a, pairs[p][0]), *tw = st_find(ref, pairs[p][1]);
            ck_assert_int_eq(tg->dtype, tw->dtype);
            ck_assert_uint_eq(tg->nbytes, tw->nbytes);
        }
        st_close(a);
    }
    free(want);
    free(got);
    free(x);
    st_close(ref);
}
END_TEST

/* --------------------------------------------------------- round trips */

static float *randn(int64_t n, uint64_t seed)
{
    float *x = malloc((size_t)n * sizeof(float));
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (int64_t i = 0; i < n; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        x[i] = ((float)(s >> 40) / (float)(1 << 24) - 0.5f) * 8.0f;
    }
    return x;
}

START_TEST(test_roundtrip_single)
{
    const st_dtype dts[3] = {ST_F32, ST_BF16, ST_F16};
    int64_t shape[2] = {7, 5}, n = 35;
    float *x = randn(n, 3), *y = malloc((size_t)n * sizeof(float));
    char dir[512];
    pathf(dir, sizeof dir, "%s/rt_single", tu_dir);
    st_writer *w = st_writer_new();
    dllm_err err = {0};
    for (int k = 0; k < 3; k++) {
        char name[64];
        pathf(name, sizeof name, "t.%s", st_dtype_name(dts[k]));
        ck_assert_int_eq(st_writer_add_f32(w, name, dts[k], 2, shape, x, &err), 0);
    }
    int64_t one = 3;
    const uint8_t raw[3] = {1, 0, 1};
    ck_assert_int_eq(st_writer_add_raw(w, "flags", ST_BOOL, 1, &one, raw, &err), 0);
    ck_assert_int_eq(st_writer_add_f32(w, "scalar", ST_F32, 0, NULL, x, &err), 0);
    ck_assert_msg(st_writer_save_dir(w, dir, 0, &err) == 0, "%s", err.msg);
    st_writer_free(w);

    st_archive *a;
    ck_assert_msg(st_open(&a, dir, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(st_count(a), 5);
    ck_assert_str_eq(st_metadata(a, "format"), "pt");
    for (int k = 0; k < 3; k++) {
        char name[64];
        pathf(name, sizeof name, "t.%s", st_dtype_name(dts[k]));
        const st_tensor *t = st_find(a, name);
        ck_assert_int_eq(t->dtype, dts[k]);
        ck_assert_int_eq(t->ndim, 2);
        ck_assert_int_eq(t->shape[0], 7);
        ck_assert_int_eq(t->shape[1], 5);
        ck_assert_uint_eq((uintptr_t)t->data % st_dtype_size(t->dtype), 0); /* aligned */
        ck_assert_int_eq(st_read_f32(a, name, shape, 2, y, &err), 0);
        /* F32 exact; BF16 8 and F16 11 significant bits, round to nearest */
        float tol = dts[k] == ST_F32 ? 0.0f : dts[k] == ST_BF16 ? 0x1p-8f : 0x1p-11f;
        for (int64_t i = 0; i < n; i++)
            ck_assert_msg(fabsf(y[i] - x[i]) <= tol * fabsf(x[i]) + 1e-7f, "%s[%lld]: %g vs %g", name,
                          (long long)i, y[i], x[i]);
    }
    const st_tensor *fl = st_find(a, "flags");
    ck_assert_int_eq(fl->dtype, ST_BOOL);
    ck_assert_int_eq(memcmp(fl->data, raw, 3), 0);
    const st_tensor *sc = st_find(a, "scalar");
    ck_assert_int_eq(sc->ndim, 0);
    ck_assert_int_eq(sc->numel, 1);
    st_close(a);

    /* The file is the documented layout: header length a multiple of 8. */
    char path[600];
    pathf(path, sizeof path, "%s/model.safetensors", dir);
    FILE *f = fopen(path, "rb");
    uint8_t len[8];
    ck_assert_uint_eq(fread(len, 1, 8, f), 8);
    fclose(f);
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--)
        hl = hl << 8 | len[i];
    ck_assert_uint_eq(hl % 8, 0);
    free(x);
    free(y);
}
END_TEST

/* Streamed tensors: a fill producing the values a chunk at a time (counting its calls,
 * and failing when asked). */
typedef struct {
    const float *x;
    size_t next; /* the offset the writer must ask for next */
    int calls, fail_at;
} fill_ctx;

static int fill_from(void *ctx, size_t off, size_t n, float *dst, dllm_err *err)
{
    fill_ctx *c = ctx;
    ck_assert_uint_eq(off, c->next); /* chunks in order, consecutively */
    ck_assert_uint_le(n, ST_STREAM_CHUNK);
    if (++c->calls == c->fail_at)
        return dllm_err_set(err, DLLM_EXIT_INTERNAL, "device gone");
    memcpy(dst, c->x + off, n * sizeof(float));
    c->next = off + n;
    return 0;
}

static bool same_files(const char *a, const char *b)
{
    char cmd[1400];
    pathf(cmd, sizeof cmd, "diff -r %s %s >/dev/null", a, b);
    return system(cmd) == 0;
}

/* The streamed forms (fill, ref) write byte for byte what add_f32's copies write, in
 * every fp32 dtype, single-file and sharded, a tensor longer than one chunk included;
 * a fill's error aborts the save and leaves no file behind. Range reads equal the
 * matching slices of a whole read; a range past the end is refused naming the tensor. */
START_TEST(test_streamed_writer)
{
    const st_dtype dts[3] = {ST_F32, ST_BF16, ST_F16};
    size_t big = ST_STREAM_CHUNK + 1234;
    float *x = randn((int64_t)big, 9);
    dllm_err err = {0};
    for (int sharded = 0; sharded < 2; sharded++) {
        char da[512], db[512];
        pathf(da, sizeof da, "%s/stream_copy_%d", tu_dir, sharded);
        pathf(db, sizeof db, "%s/stream_fill_%d", tu_dir, sharded);
        st_writer *wa = st_writer_new(), *wb = st_writer_new();
        fill_ctx fc[3];
        for (int k = 0; k < 3; k++) {
            char name[64];
            int64_t shape[2] = {k == 0 ? (int64_t)big : 37, 1};
            pathf(name, sizeof name, "t.%d", k);
            ck_assert_int_eq(st_writer_add_f32(wa, name, dts[k], 2, shape, x, &err), 0);
            fc[k] = (fill_ctx){x, 0, 0, 0};
            if (k == 2)
                ck_assert_int_eq(st_writer_add_f32_ref(wb, name, dts[k], 2, shape, x, &err), 0);
            else
                ck_assert_int_eq(st_writer_add_f32_fn(wb, name, dts[k], 2, shape, fill_from, &fc[k],
                                                      &err), 0);
        }
        size_t shard = sharded ? 1024 : 0;
        ck_assert_msg(st_writer_save_dir(wa, da, shard, &err) == 0, "%s", err.msg);
        ck_assert_msg(st_writer_save_dir(wb, db, shard, &err) == 0, "%s", err.msg);
        ck_assert_int_eq(fc[0].calls, 2); /* the long tensor in two chunks */
        ck_assert_int_eq(fc[1].calls, 1);
        ck_assert_msg(same_files(da, db), "streamed files differ from copied ones");
        st_writer_free(wa);
        st_writer_free(wb);
    }
    /* a failing fill: an error, and no file (nor temporary) left */
    char dc[512], p[700];
    pathf(dc, sizeof dc, "%s/stream_fail", tu_dir);
    mkdir(dc, 0755);
    pathf(p, sizeof p, "%s/opt.safetensors", dc);
    st_writer *w = st_writer_new();
    int64_t shape[1] = {(int64_t)big};
    fill_ctx bad = {x, 0, 0, 2};
    ck_assert_int_eq(st_writer_add_f32_fn(w, "m", ST_F32, 1, shape, fill_from, &bad, &err), 0);
    ck_assert_int_eq(st_writer_save_file(w, p, &err), DLLM_EXIT_INTERNAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "device gone"));
    ck_assert_int_ne(access(p, F_OK), 0);
    pathf(p, sizeof p, "%s/opt.safetensors.tmp", dc);
    ck_assert_int_ne(access(p, F_OK), 0);
    st_writer_free(w);

    /* range reads */
    char dr[512];
    pathf(dr, sizeof dr, "%s/stream_copy_0", tu_dir);
    st_archive *a;
    ck_assert_msg(st_open(&a, dr, &err) == 0, "%s", err.msg);
    for (int k = 0; k < 3; k++) {
        char name[64];
        int64_t sh[2] = {k == 0 ? (int64_t)big : 37, 1};
        size_t n = (size_t)sh[0];
        pathf(name, sizeof name, "t.%d", k);
        float *whole = malloc(n * sizeof(float)), *part = malloc(n * sizeof(float));
        ck_assert_int_eq(st_read_f32(a, name, sh, 2, whole, &err), 0);
        for (size_t off = 0; off < n; off += 7919) {
            size_t c = n - off < 7919 ? n - off : 7919;
            ck_assert_int_eq(st_read_f32_range(a, name, sh, 2, off, c, part + off, &err), 0);
        }
        ck_assert(memcmp(whole, part, n * sizeof(float)) == 0);
        ck_assert_int_eq(st_read_f32_range(a, name, sh, 2, n - 1, 2, part, &err), DLLM_EXIT_INPUT);
        ck_assert_ptr_nonnull(strstr(err.msg, name));
        free(whole);
        free(part);
    }
    st_close(a);
    free(x);
}
END_TEST

START_TEST(test_roundtrip_sharded)
{
    char dir[512], p[700];
    pathf(dir, sizeof dir, "%s/rt_sharded", tu_dir);
    st_writer *w = st_writer_new();
    st_writer_metadata(w, "step", "12");
    dllm_err err = {0};
    int64_t shape[2] = {16, 16};
    float *x[10];
    size_t total = 0;
    for (int i = 0; i < 10; i++) {
        char name[64];
        pathf(name, sizeof name, "layer.%d.w", i);
        x[i] = randn(256, 100 + (uint64_t)i);
        ck_assert_int_eq(st_writer_add_f32(w, name, i % 2 ? ST_BF16 : ST_F32, 2, shape, x[i], &err), 0);
        total += (i % 2 ? 2u : 4u) * 256;
    }
    ck_assert_msg(st_writer_save_dir(w, dir, 2048, &err) == 0, "%s", err.msg);
    /* 1024 + 512 bytes per pair of tensors, greedy up to 2048 bytes: one pair a shard */
    pathf(p, sizeof p, "%s/model.safetensors.index.json", dir);
    ck_assert_int_eq(access(p, F_OK), 0);
    pathf(p, sizeof p, "%s/model-00005-of-00005.safetensors", dir);
    ck_assert_int_eq(access(p, F_OK), 0);
    pathf(p, sizeof p, "%s/model.safetensors", dir);
    ck_assert_int_ne(access(p, F_OK), 0);

    st_archive *a;
    ck_assert_msg(st_open(&a, dir, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(st_count(a), 10);
    ck_assert_str_eq(st_metadata(a, "step"), "12");
    float y[256];
    for (int i = 0; i < 10; i += 2) {
        char name[64];
        pathf(name, sizeof name, "layer.%d.w", i);
        ck_assert_int_eq(st_read_f32(a, name, shape, 2, y, &err), 0);
        ck_assert_int_eq(memcmp(y, x[i], sizeof y), 0);
    }
    st_close(a);

    /* total_size is the sum of tensor bytes */
    char *text;
    pathf(p, sizeof p, "%s/model.safetensors.index.json", dir);
    ck_assert_int_eq(dllm_read_file(p, &text, NULL, &err), 0);
    char want[64];
    pathf(want, sizeof want, "\"total_size\": %zu", total);
    ck_assert_msg(strstr(text, want) != NULL, "%s", text);
    free(text);

    /* Saving again as one file removes the shards and the index. */
    ck_assert_int_eq(st_writer_save_dir(w, dir, 0, &err), 0);
    pathf(p, sizeof p, "%s/model.safetensors.index.json", dir);
    ck_assert_int_ne(access(p, F_OK), 0);
    pathf(p, sizeof p, "%s/model-00001-of-00005.safetensors", dir);
    ck_assert_int_ne(access(p, F_OK), 0);
    ck_assert_msg(st_open(&a, dir, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(st_count(a), 10);
    st_close(a);
    st_writer_free(w);
    for (int i = 0; i < 10; i++)
        free(x[i]);
}
END_TEST

START_TEST(test_writer_rejects)
{
    st_writer *w = st_writer_new();
    dllm_err err = {0};
    int64_t shape[1] = {2}, bad[1] = {-1};
    float x[2] = {1, 2};
    ck_assert_int_eq(st_writer_add_f32(w, "a", ST_F32, 1, shape, x, &err), 0);
    ck_assert_int_eq(st_writer_add_f32(w, "a", ST_F32, 1, shape, x, &err), DLLM_EXIT_INPUT);
    ck_assert_ptr_nonnull(strstr(err.msg, "'a'"));
    ck_assert_int_eq(st_writer_add_f32(w, "b", ST_I32, 1, shape, x, &err), DLLM_EXIT_INPUT);
    ck_assert_ptr_nonnull(strstr(err.msg, "'b'"));
    ck_assert_int_eq(st_writer_add_f32(w, "c", ST_F32, 1, bad, x, &err), DLLM_EXIT_INPUT);
    ck_assert_ptr_nonnull(strstr(err.msg, "'c'"));
    ck_assert_int_eq(st_writer_add_f32(w, "__metadata__", ST_F32, 1, shape, x, &err), DLLM_EXIT_INPUT);
    char p[512];
    pathf(p, sizeof p, "%s/no/such/dir/x.safetensors", tu_dir);
    ck_assert_int_ne(st_writer_save_file(w, p, &err), 0);
    ck_assert_ptr_nonnull(strstr(err.msg, "x.safetensors"));
    st_writer_free(w);
}
END_TEST

/* ------------------------------------------------------ hostile files */

enum { K_HEADER, K_EMPTY, K_SHORT, K_ABSURD, K_PAST_END };

typedef struct {
    const char *file;   /* base name under the scratch dir */
    int kind;
    const char *header; /* K_HEADER: header text */
    size_t data_len;
    const char *want[2]; /* substrings the message must hold (besides the path) */
} bad_case;

static const bad_case bad_cases[] = {
    {"empty", K_EMPTY, NULL, 0, {"empty", NULL}},
    {"truncated", K_SHORT, NULL, 0, {"truncated", NULL}},
    {"absurd", K_ABSURD, NULL, 0, {"header length", "limit"}},
    {"pastend", K_PAST_END, NULL, 0, {"header length", "end of the file"}},
    {"garbage", K_HEADER, "this is not json {", 0, {"not valid JSON", NULL}},
    {"array", K_HEADER, "[1, 2, 3]", 0, {"not a JSON object", NULL}},
    {"notobj", K_HEADER, "{\"w.entry\": 5}", 0, {"'w.entry'", "not an object"}},
    {"nodtype", K_HEADER, "{\"w.nod\": {\"shape\": [1], \"data_offsets\": [0, 4]}}", 4,
     {"'w.nod'", "dtype"}},
    {"noshape", K_HEADER, "{\"w.nos\": {\"dtype\": \"F32\", \"data_offsets\": [0, 4]}}", 4,
     {"'w.nos'", "shape"}},
    {"nooffsets", K_HEADER, "{\"w.noo\": {\"dtype\": \"F32\", \"shape\": [1]}}", 4,
     {"'w.noo'", "data_offsets"}},
    {"dtypetype", K_HEADER, "{\"w.dt\": {\"dtype\": 7, \"shape\": [1], \"data_offsets\": [0, 4]}}", 4,
     {"'w.dt'", "dtype"}},
    {"shapetype", K_HEADER, "{\"w.st\": {\"dtype\": \"F32\", \"shape\": \"1\", \"data_offsets\": [0, 4]}}",
     4, {"'w.st'", "shape"}},
    {"offtype", K_HEADER, "{\"w.ot\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0]}}", 4,
     {"'w.ot'", "data_offsets"}},
    {"baddtype", K_HEADER, "{\"w.bad\": {\"dtype\": \"F12\", \"shape\": [1], \"data_offsets\": [0, 4]}}",
     4, {"'w.bad'", "unknown dtype 'F12'"}},
    {"negshape", K_HEADER, "{\"w.neg\": {\"dtype\": \"F32\", \"shape\": [-1], \"data_offsets\": [0, 4]}}",
     4, {"'w.neg'", "non-negative"}},
    {"overflow", K_HEADER,
     "{\"w.big\": {\"dtype\": \"F32\", \"shape\": [4294967296, 4294967296, 4], \"data_offsets\": [0, 4]}}",
     4, {"'w.big'", "overflows"}},
    {"bytesoverflow", K_HEADER,
     "{\"w.big8\": {\"dtype\": \"F64\", \"shape\": [2305843009213693952], \"data_offsets\": [0, 8]}}", 8,
     {"'w.big8'", "overflows"}},
    {"endbefore", K_HEADER, "{\"w.rev\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [8, 4]}}",
     8, {"'w.rev'", "end before"}},
    {"mismatch", K_HEADER, "{\"w.mm\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 4]}}", 4,
     {"'w.mm'", "needs 8 bytes"}},
    {"oob", K_HEADER, "{\"w.oob\": {\"dtype\": \"F32\", \"shape\": [100], \"data_offsets\": [0, 400]}}",
     8, {"'w.oob'", "past the data section"}},
    {"overlap", K_HEADER,
     "{\"w.a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]},"
     " \"w.b\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [4, 12]}}",
     12, {"'w.b'", "overlaps tensor 'w.a'"}},
    {"hole", K_HEADER,
     "{\"w.a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]},"
     " \"w.h\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [8, 12]}}",
     12, {"'w.h'", "hole"}},
    {"leadhole", K_HEADER, "{\"w.lead\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 8]}}",
     8, {"'w.lead'", "hole"}},
    {"trailing", K_HEADER, "{\"w.t\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}", 8,
     {"trailing", NULL}},
    {"duplicate", K_HEADER,
     "{\"w.dup\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]},"
     " \"w.dup\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 8]}}",
     8, {"w.dup", "names a tensor twice"}},
    {"metadata", K_HEADER, "{\"__metadata__\": {\"format\": 1}}", 0, {"__metadata__", NULL}},
    {"toomanydims", K_HEADER,
     "{\"w.dims\": {\"dtype\": \"U8\", \"shape\": [1,1,1,1,1,1,1,1,1], \"data_offsets\": [0, 1]}}", 1,
     {"'w.dims'", "dimensions"}},
};

START_TEST(test_hostile_file)
{
    const bad_case *c = &bad_cases[_i];
    char path[512];
    pathf(path, sizeof path, "%s/bad-%s.safetensors", tu_dir, c->file);
    uint8_t buf[64] = {0};
    switch (c->kind) {
    case K_HEADER: write_st(path, c->header, c->data_len); break;
    case K_EMPTY: write_raw(path, buf, 0); break;
    case K_SHORT: write_raw(path, buf, 5); break;
    case K_ABSURD: /* 1 TiB header length */
        buf[5] = 1;
        write_raw(path, buf, 40);
        break;
    case K_PAST_END: /* 1000-byte header in a 40-byte file */
        buf[0] = 0xe8, buf[1] = 0x03;
        memcpy(buf + 8, "{}", 2);
        write_raw(path, buf, 40);
        break;
    }
    st_archive *a = (st_archive *)1;
    dllm_err err = {0};
    int rc = st_open(&a, path, &err);
    ck_assert_msg(rc == DLLM_EXIT_INPUT, "%s: rc %d (%s)", c->file, rc, err.msg);
    ck_assert_ptr_null(a);
    ck_assert_msg(strstr(err.msg, path) != NULL, "%s: message lacks the path: %s", c->file, err.msg);
    for (int k = 0; k < 2; k++)
        if (c->want[k])
            ck_assert_msg(strstr(err.msg, c->want[k]) != NULL, "%s: message lacks \"%s\": %s", c->file,
                          c->want[k], err.msg);
}
END_TEST

/* A two-shard checkpoint: shard 1 holds a, shard 2 holds b (one F32 each). */
static void make_shards(const char *dir, const char *index_json)
{
    char p[700];
    mkdir(dir, 0777);
    pathf(p, sizeof p, "%s/model-00001-of-00002.safetensors", dir);
    write_st(p, "{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}", 4);
    pathf(p, sizeof p, "%s/model-00002-of-00002.safetensors", dir);
    write_st(p, "{\"b\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}", 4);
    pathf(p, sizeof p, "%s/model.safetensors.index.json", dir);
    write_raw(p, index_json, strlen(index_json));
}

static void expect_open_error(const char *path, const char *in_msg[3])
{
    st_archive *a;
    dllm_err err = {0};
    int rc = st_open(&a, path, &err);
    ck_assert_msg(rc == DLLM_EXIT_INPUT, "rc %d (%s)", rc, err.msg);
    for (int k = 0; k < 3; k++)
        if (in_msg[k])
            ck_assert_msg(strstr(err.msg, in_msg[k]) != NULL, "message lacks \"%s\": %s", in_msg[k],
                          err.msg);
}

START_TEST(test_index_ok)
{
    char dir[512];
    pathf(dir, sizeof dir, "%s/idx_ok", tu_dir);
    make_shards(dir, "{\"metadata\": {\"total_size\": 8}, \"weight_map\": {"
                     "\"a\": \"model-00001-of-00002.safetensors\", \"b\": \"model-00002-of-00002.safetensors\"}}");
    st_archive *a;
    dllm_err err = {0};
    ck_assert_msg(st_open(&a, dir, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(st_count(a), 2);
    ck_assert_ptr_nonnull(strstr(st_find(a, "b")->file, "model-00002-of-00002"));
    st_close(a);
}
END_TEST

START_TEST(test_index_missing_shard)
{
    char dir[512];
    pathf(dir, sizeof dir, "%s/idx_missing", tu_dir);
    make_shards(dir, "{\"weight_map\": {\"a\": \"model-00001-of-00002.safetensors\","
                     " \"b\": \"model-00002-of-00002.safetensors\", \"c\": \"model-00003-of-00003.safetensors\"}}");
    const char *want[3] = {"model-00003-of-00003.safetensors", "model.safetensors.index.json", dir};
    expect_open_error(dir, want);
}
END_TEST

START_TEST(test_index_wrong_shard)
{
    char dir[512];
    pathf(dir, sizeof dir, "%s/idx_wrong", tu_dir);
    /* both shards named, tensors swapped */
    make_shards(dir, "{\"weight_map\": {\"a\": \"model-00002-of-00002.safetensors\","
                     " \"b\": \"model-00001-of-00002.safetensors\"}}");
    const char *want[3] = {"model-00001-of-00002.safetensors: tensor 'a'", "places it in",
                           "model-00002-of-00002.safetensors"};
    expect_open_error(dir, want);
    /* only the wrong shard named: a is looked for there and is missing */
    make_shards(dir, "{\"weight_map\": {\"a\": \"model-00002-of-00002.safetensors\","
                     " \"b\": \"model-00002-of-00002.safetensors\"}}");
    const char *want2[3] = {"model-00002-of-00002.safetensors", "missing tensor 'a'", NULL};
    expect_open_error(dir, want2);
}
END_TEST

START_TEST(test_index_tensor_not_in_shard)
{
    char dir[512];
    pathf(dir, sizeof dir, "%s/idx_absent", tu_dir);
    make_shards(dir, "{\"weight_map\": {\"a\": \"model-00001-of-00002.safetensors\","
                     " \"b\": \"model-00002-of-00002.safetensors\", \"c\": \"model-00002-of-00002.safetensors\"}}");
    const char *want[3] = {"model-00002-of-00002.safetensors", "missing tensor 'c'", NULL};
    expect_open_error(dir, want);
}
END_TEST

START_TEST(test_index_unlisted_tensor)
{
    char dir[512];
    pathf(dir, sizeof dir, "%s/idx_unlisted", tu_dir);
    make_shards(dir, "{\"weight_map\": {\"a\": \"model-00001-of-00002.safetensors\"}}");
    /* shard 2 is not named by the index, so it is never read: the index
     * alone defines the checkpoint. Now name it with a's entry only. */
    st_archive *a;
    dllm_err err = {0};
    ck_assert_msg(st_open(&a, dir, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(st_count(a), 1);
    st_close(a);
    make_shards(dir, "{\"weight_map\": {\"b\": \"model-00002-of-00002.safetensors\","
                     " \"x\": \"model-00001-of-00002.safetensors\"}}");
    const char *want[3] = {"model-00001-of-00002.safetensors", "'a'", "not listed"};
    expect_open_error(dir, want);
}
END_TEST

START_TEST(test_index_hostile)
{
    char dir[512];
    pathf(dir, sizeof dir, "%s/idx_bad", tu_dir);
    make_shards(dir, "{\"weight_map\": {\"a\": ");
    const char *want[3] = {"model.safetensors.index.json:1:", NULL, NULL};
    expect_open_error(dir, want);
    make_shards(dir, "{\"weight_map\": {\"a\": \"../model-00001-of-00002.safetensors\"}}");
    const char *want2[3] = {"model.safetensors.index.json", "weight_map['a']", NULL};
    expect_open_error(dir, want2);
    make_shards(dir, "{\"metadata\": {}}");
    const char *want3[3] = {"model.safetensors.index.json", "weight_map", NULL};
    expect_open_error(dir, want3);
}
END_TEST

START_TEST(test_open_missing)
{
    char dir[512], p[600];
    pathf(dir, sizeof dir, "%s/empty_dir", tu_dir);
    mkdir(dir, 0777);
    const char *want[3] = {dir, "model.safetensors", NULL};
    expect_open_error(dir, want);
    pathf(p, sizeof p, "%s/nonexistent.safetensors", tu_dir);
    const char *want2[3] = {p, NULL, NULL};
    expect_open_error(p, want2);
}
END_TEST

START_TEST(test_read_errors)
{
    char dir[512];
    pathf(dir, sizeof dir, "%s/read_err", tu_dir);
    st_writer *w = st_writer_new();
    dllm_err err = {0};
    int64_t shape[2] = {128, 32};
    float *x = randn(128 * 32, 5), *y = malloc(128 * 64 * sizeof(float));
    ck_assert_int_eq(st_writer_add_f32(w, "model.transformer.wte.weight", ST_BF16, 2, shape, x, &err), 0);
    ck_assert_int_eq(st_writer_add_f32(w, "model.transformer.ln_f.weight", ST_F32, 1, shape + 1, x, &err), 0);
    ck_assert_int_eq(st_writer_save_dir(w, dir, 8192, &err), 0); /* two shards */
    st_writer_free(w);
    st_archive *a;
    ck_assert_msg(st_open(&a, dir, &err) == 0, "%s", err.msg);

    int64_t want_shape[2] = {128, 64};
    ck_assert_int_eq(st_read_f32(a, "model.transformer.wte.weight", want_shape, 2, y, &err),
                     DLLM_EXIT_INPUT);
    char msg[1024];
    pathf(msg, sizeof msg,
          "%s/model-00001-of-00002.safetensors: tensor 'model.transformer.wte.weight': "
          "expected shape [128, 64], found [128, 32]",
          dir);
    ck_assert_str_eq(err.msg, msg);

    ck_assert_int_eq(st_read_f32(a, "model.transformer.ln_f.weight", want_shape, 1, y, &err),
                     DLLM_EXIT_INPUT);
    ck_assert_ptr_nonnull(strstr(err.msg, "expected shape [128], found [32]"));

    ck_assert_int_eq(st_read_f32(a, "model.transformer.blocks.0.q_proj.weight", want_shape, 2, y, &err),
                     DLLM_EXIT_INPUT);
    pathf(msg, sizeof msg, "%s: missing tensor 'model.transformer.blocks.0.q_proj.weight'", dir);
    ck_assert_str_eq(err.msg, msg);
    st_close(a);
    free(x);
    free(y);
}
END_TEST

/* Hand-made FP8 and half values, independent of the fixture. */
START_TEST(test_small_decoders)
{
    char path[512];
    pathf(path, sizeof path, "%s/fp8.safetensors", tu_dir);
    /* e4m3: 0x38 = 1.0, 0x7e = 448, 0xb8 = -1.0, 0x01 = 2^-9, 0x7f = NaN;
     * e5m2: 0x3c = 1.0, 0x7b = 57344, 0x7c = inf; f16: 0x3c00 = 1, 0xc000 = -2, 0x0001 = 2^-24 */
    const char *h = "{\"e4\": {\"dtype\": \"F8_E4M3\", \"shape\": [5], \"data_offsets\": [0, 5]},"
                    " \"e5\": {\"dtype\": \"F8_E5M2\", \"shape\": [3], \"data_offsets\": [5, 8]},"
                    " \"h\": {\"dtype\": \"F16\", \"shape\": [3], \"data_offsets\": [8, 14]},"
                    " \"b\": {\"dtype\": \"BF16\", \"shape\": [1], \"data_offsets\": [14, 16]}}";
    size_t hl = strlen(h);
    uint8_t buf[512] = {0};
    buf[0] = (uint8_t)hl, buf[1] = (uint8_t)(hl >> 8);
    memcpy(buf + 8, h, hl);
    const uint8_t data[16] = {0x38, 0x7e, 0xb8, 0x01, 0x7f, 0x3c, 0x7b, 0x7c,
                              0x00, 0x3c, 0x00, 0xc0, 0x01, 0x00, 0xc0, 0x3f};
    memcpy(buf + 8 + hl, data, 16);
    write_raw(path, buf, 8 + hl + 16);
    st_archive *a;
    dllm_err err = {0};
    ck_assert_msg(st_open(&a, path, &err) == 0, "%s", err.msg);
    float y[5];
    int64_t n5 = 5, n3 = 3, n1 = 1;
    ck_assert_int_eq(st_read_f32(a, "e4", &n5, 1, y, &err), 0);
    ck_assert(y[0] == 1.0f && y[1] == 448.0f && y[2] == -1.0f && y[3] == 0x1p-9f && isnan(y[4]));
    ck_assert_int_eq(st_read_f32(a, "e5", &n3, 1, y, &err), 0);
    ck_assert(y[0] == 1.0f && y[1] == 57344.0f && isinf(y[2]));
    ck_assert_int_eq(st_read_f32(a, "h", &n3, 1, y, &err), 0);
    ck_assert(y[0] == 1.0f && y[1] == -2.0f && y[2] == 0x1p-24f);
    ck_assert_int_eq(st_read_f32(a, "b", &n1, 1, y, &err), 0);
    ck_assert(y[0] == 1.5f);
    st_close(a);
}
END_TEST

static Suite *safetensors_suite(void)
{
    Suite *s = suite_create("safetensors");
    TCase *tc = tcase_create("reference");
    tcase_add_test(tc, test_dtype_table);
    tcase_add_test(tc, test_ref_single);
    tcase_add_test(tc, test_ref_sharded);
    tcase_add_test(tc, test_writer_matches_torch);
    tcase_add_test(tc, test_small_decoders);
    suite_add_tcase(s, tc);
    tc = tcase_create("roundtrip");
    tcase_add_test(tc, test_roundtrip_single);
    tcase_add_test(tc, test_roundtrip_sharded);
    tcase_add_test(tc, test_streamed_writer);
    tcase_add_test(tc, test_writer_rejects);
    suite_add_tcase(s, tc);
    tc = tcase_create("hostile");
    tcase_add_loop_test(tc, test_hostile_file, 0, (int)(sizeof bad_cases / sizeof bad_cases[0]));
    tcase_add_test(tc, test_index_ok);
    tcase_add_test(tc, test_index_missing_shard);
    tcase_add_test(tc, test_index_wrong_shard);
    tcase_add_test(tc, test_index_tensor_not_in_shard);
    tcase_add_test(tc, test_index_unlisted_tensor);
    tcase_add_test(tc, test_index_hostile);
    tcase_add_test(tc, test_open_missing);
    tcase_add_test(tc, test_read_errors);
    suite_add_tcase(s, tc);
    return s;
}

Suite *tu_suite(tu_ctx *ctx)
{
    return tu_scratch(ctx) ? safetensors_suite() : NULL;
}
