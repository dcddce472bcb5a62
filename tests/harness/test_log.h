/* test_log.h: reading what a run logged (RUN/log.h5) from a suite. Both readers take
 * the log's path as a printf format, fail the test on any error, and return malloc'ed
 * data the caller frees. */
#ifndef DLLM_TEST_LOG_H
#define DLLM_TEST_LOG_H

#include "src/log/h5log.h"

#include <check.h>
#include <hdf5.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static inline void tu_log_path(char *path, size_t size, const char *fmt, va_list ap)
{
    int k = vsnprintf(path, size, fmt, ap);
    ck_assert_msg(k > 0 && (size_t)k < size, "log path too long");
}

/* The 1-D dataset dset (for example "steps/alpha") as doubles; *n its length. */
static inline double *tu_log_column(const char *dset, int64_t *n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static inline double *tu_log_column(const char *dset, int64_t *n, const char *fmt, ...)
{
    char path[512];
    va_list ap;
    va_start(ap, fmt);
    tu_log_path(path, sizeof path, fmt, ap);
    va_end(ap);
    h5log *log;
    dllm_err err = {0};
    ck_assert_msg(h5log_open_read(&log, path, &err) == 0, "%s", err.msg);
    double *v;
    ck_assert_msg(h5log_read_column(log, dset, &v, n, &err) == 0, "%s: %s", dset, err.msg);
    h5log_close(log);
    return v;
}

/* The 2-D dataset dset (for example "trajectories/completion_tokens") converted to the
 * native type type of size bytes per element, row-major; *rows, *cols its shape. Opened
 * as the training writes it (SWMR), so a run still going can be read. */
static inline void *tu_log_matrix(const char *dset, hid_t type, size_t size, int64_t *rows,
                                  int64_t *cols, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
static inline void *tu_log_matrix(const char *dset, hid_t type, size_t size, int64_t *rows,
                                  int64_t *cols, const char *fmt, ...)
{
    char path[512];
    va_list ap;
    va_start(ap, fmt);
    tu_log_path(path, sizeof path, fmt, ap);
    va_end(ap);
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    H5Pset_libver_bounds(fapl, H5F_LIBVER_LATEST, H5F_LIBVER_LATEST);
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY | H5F_ACC_SWMR_READ, fapl);
    ck_assert_msg(f >= 0, "%s: cannot open", path);
    hid_t d = H5Dopen2(f, dset, H5P_DEFAULT);
    ck_assert_msg(d >= 0, "%s: no dataset %s", path, dset);
    hid_t sp = H5Dget_space(d);
    hsize_t dims[2];
    ck_assert_int_eq(H5Sget_simple_extent_ndims(sp), 2);
    H5Sget_simple_extent_dims(sp, dims, NULL);
    void *out = malloc(size * (dims[0] * dims[1] + 1)); /* + 1: never malloc(0) */
    ck_assert_ptr_nonnull(out);
    ck_assert(H5Dread(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, out) >= 0);
    H5Sclose(sp);
    H5Dclose(d);
    H5Fclose(f);
    H5Pclose(fapl);
    *rows = (int64_t)dims[0];
    *cols = (int64_t)dims[1];
    return out;
}

#endif
