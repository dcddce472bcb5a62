/* h5log.c: the run log (layout and crash-safety contract in h5log.h).
 *
 * Every group is a set of datasets that share their first dimension (rows):
 * /steps, /trajectories, /mismatch_by_step, /eval/<task>. The writer keeps one
 * row counter per group and extends every dataset of the group together; a
 * reader trusts only the rows that every dataset of a group has. Rows are
 * matched across groups by their `step` column, which is also what resume
 * filters on. HDF5 error stacks are not printed: failures become dllm_err
 * messages naming the file and dataset, with HDF5's innermost reason.
 * (Over 900 lines: the writer, the SWMR reader and resume share the handle and
 * the layout tables, and splitting them would put the layout in two places.) */
#include "src/log/h5log.h"

#include <hdf5.h>

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- the tables ---- */

static const char *const metric_names[H5LOG_N_METRICS] = {
#define H5LOG_METRIC_NAME_(name) #name,
    H5LOG_STEP_METRICS(H5LOG_METRIC_NAME_)
#undef H5LOG_METRIC_NAME_
};

#include <stddef.h>

/* element kinds and row widths: the public table's */
#define K_I64 H5LOG_I64
#define K_I32 H5LOG_I32
#define K_I16 H5LOG_I16
#define K_F64 H5LOG_F64
#define K_F32 H5LOG_F32
#define W_1 H5LOG_W1
#define W_P H5LOG_WP
#define W_G H5LOG_WG
#define W_STEP H5LOG_WSTEP

/* /trajectories, in file creation order (the indices of the columns read back). */
enum { T_STEP, T_PROMPT_INDEX, T_GROUP, T_PROMPT_LEN, T_COMPLETION_LEN, T_PROMPT_TOKENS,
       T_COMPLETION_TOKENS, N_TRAJ = H5LOG_N_TRAJ };
#define TB(field) offsetof(h5log_traj_batch, field)
const h5log_traj_col h5log_traj_cols[H5LOG_N_TRAJ] = {
    {"step", K_I64, W_STEP, TB(step)},
    {"prompt_index", K_I64, W_1, TB(prompt_index)},
    {"group", K_I64, W_1, TB(group)},
    {"prompt_len", K_I32, W_1, TB(prompt_len)},
    {"completion_len", K_I32, W_1, TB(completion_len)},
    {"prompt_tokens", K_I32, W_P, TB(prompt_tokens)},
    {"completion_tokens", K_I32, W_G, TB(completion_tokens)},
    {"reward", K_F64, W_1, TB(reward)},
    {"advantage", K_F64, W_1, TB(advantage)},
    {"l_mu", K_F64, W_1, TB(l_mu)},
    {"l_pi", K_F64, W_1, TB(l_pi)},
    {"log_w", K_F64, W_1, TB(log_w)},
    {"coef", K_F64, W_1, TB(coef)},
    {"log_w_se", K_F64, W_1, TB(log_w_se)},
    {"l_mu_exact", K_F64, W_1, TB(l_mu_exact)},
    {"token_log_ratio", K_F32, W_G, TB(token_log_ratio)},
    {"commit_step", K_I16, W_G, TB(commit_step)},
    {"commit_prob", K_F32, W_G, TB(commit_prob)},
    {"correct", K_F64, W_1, TB(correct)},
    {"token_entropy", K_F32, W_G, TB(token_entropy)},
};
#undef TB
#define traj_fields h5log_traj_cols

const void *h5log_traj_col_data(const h5log_traj_batch *b, int c)
{
    if (c < 0 || c >= N_TRAJ || traj_fields[c].width == W_STEP)
        return NULL;
    return *(const void *const *)((const char *)b + traj_fields[c].off);
}

enum { E_STEP, E_ACCURACY, E_ACCURACY_SE, E_REWARD_MEAN, N_EVAL };
static const char *const eval_fields[N_EVAL] = {"step", "accuracy", "accuracy_se",
                                                "reward_mean"};

static const char *const attr_strings[] = {"config_yaml", "version", "git_revision",
                                           "device", "started", "machine"};
enum { N_ATTR_STR = 6 };

static hid_t mem_type(int kind)
{
    switch (kind) {
    case K_I64: return H5T_NATIVE_INT64;
    case K_I32: return H5T_NATIVE_INT32;
    case K_I16: return H5T_NATIVE_INT16;
    case K_F32: return H5T_NATIVE_FLOAT;
    default: return H5T_NATIVE_DOUBLE;
    }
}

static hid_t file_type(int kind)
{
    switch (kind) {
    case K_I64: return H5T_STD_I64LE;
    case K_I32: return H5T_STD_I32LE;
    case K_I16: return H5T_STD_I16LE;
    case K_F32: return H5T_IEEE_F32LE;
    default: return H5T_IEEE_F64LE;
    }
}

static size_t kind_size(int kind)
{
    switch (kind) {
    case K_I64: case K_F64: return 8;
    case K_I32: case K_F32: return 4;
    default: return 2;
    }
}

size_t h5log_kind_size(h5log_kind kind) { return kind_size((int)kind); }

/* The pad / fill value of a kind: -1 for integers, NaN for floats. */
static void fill_value(int kind, void *out)
{
    switch (kind) {
    case K_I64: *(int64_t *)out = -1; break;
    case K_I32: *(int32_t *)out = -1; break;
    case K_I16: *(int16_t *)out = -1; break;
    case K_F32: *(float *)out = NAN; break;
    default: *(double *)out = NAN; break;
    }
}

const char *h5log_metric_name(int i)
{
    return i >= 0 && i < H5LOG_N_METRICS ? metric_names[i] : NULL;
}

int h5log_metric_index(const char *name)
{
    for (int i = 0; i < H5LOG_N_METRICS; i++)
        if (name && !strcmp(name, metric_names[i]))
            return i;
    return -1;
}

void h5log_values_nan(double *values)
{
    for (int i = 0; i < H5LOG_N_METRICS; i++)
        values[i] = NAN;
}

/* ---- the handle ---- */

struct h5log {
    char *path;
    hid_t file;
    bool writable;
    bool cut;                        /* read from a padded image (open_cut_file) */
    struct cut_cap { char group[300]; int64_t rows; } *caps; /* (ncaps) a cut file's */
    /* Every dataset the log reads is opened once, here (log_dset): HDF5 1.10's
     * H5Drefresh on one handle of a chunked dataset while another handle to it is
     * open leaves the chunk map inconsistent, and a later multi-chunk read fails
     * ("can't insert duplicate key"). */
    struct open_dset { char *name; hid_t id; } *open;
    int n_open;
    int ncaps;                       /* intact rows per group (cut_caps) */
    h5log_meta meta;                 /* strings owned by meta_str */
    char *meta_str[N_ATTR_STR];
    h5log_dims dims;                 /* names owned by task_names */
    char **task_names;
    hid_t steps_step;                /* /steps/step */
    hid_t metric[H5LOG_N_METRICS];   /* /steps/<metric>; -1 when absent (reading) */
    int64_t n_steps;                 /* rows written (writer) */
    hid_t traj[N_TRAJ];              /* -1 when absent (reading) */
    int64_t n_traj;
    hid_t mm_step, mm_d;             /* /mismatch_by_step */
    int64_t n_mm;
    hid_t pk_step, pk_v;             /* /pass_at_k, -1 when absent */
    int64_t n_pk;
    hid_t (*eval)[N_EVAL];           /* (n_eval_tasks) */
    int64_t *n_eval;                 /* (n_eval_tasks) */
    void *scratch;                   /* packing buffer for padded rows */
    size_t scratch_cap;
};

/* ---- HDF5 error capture ---- */

/* Once per process, before the first HDF5 call: HDF5's error stacks are never
 * printed (every failure becomes one dllm_err line), and the library is not torn
 * down at exit. A file whose close failed (a full disk) stays open inside HDF5,
 * and its teardown at exit would retry that close: pages of diagnostics, "infinite
 * loop closing library", or a crash. Every step is flushed, so nothing is lost by
 * not closing at exit: a log left open reads like one whose writer was killed. */
static void h5_setup(void)
{
    static bool done;
    if (done)
        return;
    done = true;
    H5dont_atexit();
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
}

/* Silences HDF5's own stack printing for the duration of a public call. */
typedef struct {
    H5E_auto2_t func;
    void *data;
} h5_quiet;

static h5_quiet quiet_begin(void)
{
    h5_setup();
    h5_quiet q = {0};
    H5Eget_auto2(H5E_DEFAULT, &q.func, &q.data);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    return q;
}

static void quiet_end(h5_quiet q)
{
    H5Eset_auto2(H5E_DEFAULT, q.func, q.data);
}

static herr_t walk_innermost(unsigned n, const H5E_error2_t *e, void *data)
{
    /* the file driver's message is long (time, file name, buffer address): its
     * errno is what matters, and it could fall past the buffer's end */
    const char *en = e->desc ? strstr(e->desc, "errno = ") : NULL;
    if (n == 0 && en)
        snprintf((char *)data, 200, "errno = %d", atoi(en + 8));
    else if (n == 0 && e->desc)
        snprintf((char *)data, 200, "%s", e->desc);
    return 0;
}

/* HDF5's innermost reason for the last failure, or "HDF5 error". */
static const char *h5_reason(char *buf)
{
    buf[0] = 0;
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, walk_innermost, buf);
    H5Eclear2(H5E_DEFAULT);
    if (!buf[0])
        snprintf(buf, 200, "HDF5 error");
    return buf;
}

/* The errno of a failed read or write: HDF5's file driver puts it in its message
 * ("... errno = 28, error message = ..."); 0 when there is none. */
static int reason_errno(const char *reason)
{
    const char *e = strstr(reason, "errno = ");
    return e ? atoi(e + 8) : 0;
}

static int h5_fail(dllm_err *err, int code, const char *path, const char *what)
{
    char reason[200];
    h5_reason(reason);
    int e = reason_errno(reason);
    if (e == ENOSPC || e == EFBIG || e == EDQUOT)
        return dllm_err_set(err, code, "%s: %s: %s (the disk is full or a file-size limit, "
                            "ulimit -f, was reached)", path, what, strerror(e));
    if (e)
        return dllm_err_set(err, code, "%s: %s: %s", path, what, strerror(e));
    return dllm_err_set(err, code, "%s: %s: %s", path, what, reason);
}

/* ---- small dataset helpers ---- */

static void close_id(hid_t *id)
{
    if (*id >= 0) {
        H5Oclose(*id);
        *id = -1;
    }
}

static int64_t rows_of(hid_t d)
{
    if (d < 0)
        return -1;
    H5Drefresh(d);  /* SWMR readers: see the writer's latest extent */
    hid_t s = H5Dget_space(d);
    hsize_t dims[2] = {0, 0};
    int rank = s >= 0 ? H5Sget_simple_extent_dims(s, dims, NULL) : -1;
    if (s >= 0)
        H5Sclose(s);
    return rank >= 1 ? (int64_t)dims[0] : -1;
}

/* Rows of d from the first on that lie in chunks written wholly within the
 * first real_size bytes of the file. In a cut file (open_cut_file) a chunk past
 * them reads as zeros, and a row past the chunks written belongs to the write
 * that failed (the writer extends a dataset and writes the rows at once). */
static int64_t intact_rows(hid_t d, int64_t real_size)
{
    int64_t rows = rows_of(d);
    hid_t dcpl = H5Dget_create_plist(d);
    hsize_t cdims[2] = {0, 0};
    int crank = dcpl >= 0 ? H5Pget_chunk(dcpl, 2, cdims) : -1;
    if (dcpl >= 0)
        H5Pclose(dcpl);
    hid_t s = H5Dget_space(d);
    hsize_t nchunks = 0;
    if (crank < 1 || cdims[0] == 0 || s < 0 || H5Dget_num_chunks(d, s, &nchunks) < 0)
        nchunks = 0, rows = 0;
    /* chunk i covers rows [off, off + cdims[0]): count the run from row 0 */
    int64_t covered = 0;
    for (bool grew = true; grew;) {
        grew = false;
        for (hsize_t i = 0; i < nchunks; i++) {
            hsize_t off[2] = {0, 0}, size = 0;
            haddr_t addr = HADDR_UNDEF;
            unsigned mask;
            if (H5Dget_chunk_info(d, s, i, off, &mask, &addr, &size) >= 0 &&
                (int64_t)off[0] == covered && addr != HADDR_UNDEF &&
                addr + size <= (hsize_t)real_size) {
                covered += (int64_t)cdims[0];
                grew = true;
            }
        }
    }
    if (s >= 0)
        H5Sclose(s);
    return covered < rows ? covered : rows;
}

static int rank_of(hid_t d)
{
    hid_t s = H5Dget_space(d);
    int rank = s >= 0 ? H5Sget_simple_extent_ndims(s) : -1;
    if (s >= 0)
        H5Sclose(s);
    return rank;
}

static int64_t width_of(hid_t d)
{
    hid_t s = H5Dget_space(d);
    hsize_t dims[2] = {0, 1};
    int rank = s >= 0 ? H5Sget_simple_extent_dims(s, dims, NULL) : -1;
    if (s >= 0)
        H5Sclose(s);
    return rank == 1 ? 1 : rank == 2 ? (int64_t)dims[1] : -1;
}

static const struct { const char *group, *name, *units, *description; } dataset_docs[] = {
#define H5LOG_DOC_(g, n, u, d) {g, n, u, d},
    H5LOG_DATASET_DOCS(H5LOG_DOC_)
#undef H5LOG_DOC_
};

int h5log_dataset_doc(const char *group, const char *name, const char **units,
                      const char **description)
{
    for (size_t i = 0; i < sizeof dataset_docs / sizeof dataset_docs[0]; i++)
        if (!strcmp(dataset_docs[i].group, group) && !strcmp(dataset_docs[i].name, name)) {
            *units = dataset_docs[i].units;
            *description = dataset_docs[i].description;
            return 0;
        }
    return -1;
}

static int write_str_attr(hid_t loc, const char *name, const char *val);

/* Chunked dataset with rows unlimited: rank 1 when width == 0, else (rows, width),
 * with its units and description attributes (group: its H5LOG_DATASET_DOCS group). */
static hid_t create_dset(hid_t loc, const char *group, const char *name, int kind, hsize_t width,
                         size_t chunk_bytes)
{
    const char *units, *desc;
    if (h5log_dataset_doc(group, name, &units, &desc))
        return -1;
    int rank = width ? 2 : 1;
    hsize_t w = width ? width : 1;
    hsize_t dims[2] = {0, w}, maxdims[2] = {H5S_UNLIMITED, w};
    hsize_t rows = chunk_bytes / (w * kind_size(kind));
    rows = rows < 1 ? 1 : rows > 4096 ? 4096 : rows;
    hsize_t chunk[2] = {rows, w};
    unsigned char fill[8];
    fill_value(kind, fill);
    hid_t space = H5Screate_simple(rank, dims, maxdims);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    hid_t d = -1;
    if (space >= 0 && dcpl >= 0 && H5Pset_chunk(dcpl, rank, chunk) >= 0 &&
        H5Pset_fill_value(dcpl, mem_type(kind), fill) >= 0)
        d = H5Dcreate2(loc, name, file_type(kind), space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    if (d >= 0 && (write_str_attr(d, "units", units) || write_str_attr(d, "description", desc))) {
        H5Dclose(d);
        d = -1;
    }
    if (dcpl >= 0)
        H5Pclose(dcpl);
    if (space >= 0)
        H5Sclose(space);
    return d;
}

/* Writes rows [row0, row0 + nrows) of d from buf (nrows, width) in memtype,
 * extending d to row0 + nrows rows. */
static int write_rows(hid_t d, hid_t memtype, int64_t row0, int64_t nrows, const void *buf)
{
    int64_t width = width_of(d);
    hid_t fs = H5Dget_space(d);
    if (fs < 0 || width < 0)
        return -1;
    int rank = H5Sget_simple_extent_ndims(fs);
    H5Sclose(fs);
    hsize_t dims[2] = {(hsize_t)(row0 + nrows), (hsize_t)width};
    if (H5Dset_extent(d, dims) < 0)
        return -1;
    if (nrows == 0)
        return 0;
    fs = H5Dget_space(d);
    hsize_t start[2] = {(hsize_t)row0, 0}, count[2] = {(hsize_t)nrows, (hsize_t)width};
    hid_t ms = H5Screate_simple(rank, count, NULL);
    herr_t st = -1;
    if (fs >= 0 && ms >= 0 &&
        H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL) >= 0)
        st = H5Dwrite(d, memtype, ms, fs, H5P_DEFAULT, buf);
    if (ms >= 0)
        H5Sclose(ms);
    if (fs >= 0)
        H5Sclose(fs);
    return st < 0 ? -1 : 0;
}

/* Reads rows [0, nrows) of d into buf (nrows, width) in memtype. */
static int read_rows(hid_t d, hid_t memtype, int64_t nrows, void *buf)
{
    if (nrows == 0)
        return 0;
    int64_t width = width_of(d);
    hid_t fs = H5Dget_space(d);
    if (fs < 0 || width < 0)
        return -1;
    int rank = H5Sget_simple_extent_ndims(fs);
    hsize_t start[2] = {0, 0}, count[2] = {(hsize_t)nrows, (hsize_t)width};
    hid_t ms = H5Screate_simple(rank, count, NULL);
    herr_t st = -1;
    if (ms >= 0 && H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL) >= 0)
        st = H5Dread(d, memtype, ms, fs, H5P_DEFAULT, buf);
    if (ms >= 0)
        H5Sclose(ms);
    H5Sclose(fs);
    return st < 0 ? -1 : 0;
}

static hid_t open_dset_opt(hid_t loc, const char *name)
{
    if (H5Lexists(loc, name, H5P_DEFAULT) <= 0)
        return -1;
    return H5Dopen2(loc, name, H5P_DEFAULT);
}

/* ---- attributes ---- */

static int write_str_attr(hid_t loc, const char *name, const char *val)
{
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, H5T_VARIABLE);
    H5Tset_cset(t, H5T_CSET_UTF8);
    hid_t s = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(loc, name, t, s, H5P_DEFAULT, H5P_DEFAULT);
    const char *v = val ? val : "";
    herr_t st = a >= 0 ? H5Awrite(a, t, &v) : -1;
    if (a >= 0)
        H5Aclose(a);
    H5Sclose(s);
    H5Tclose(t);
    return st < 0 ? -1 : 0;
}

/* Reads a string attribute (variable or fixed length) into a malloc'd string;
 * NULL when absent or not a string. */
static char *read_str_attr(hid_t loc, const char *name)
{
    if (H5Aexists(loc, name) <= 0)
        return NULL;
    hid_t a = H5Aopen(loc, name, H5P_DEFAULT);
    hid_t ft = a >= 0 ? H5Aget_type(a) : -1;
    char *out = NULL;
    if (ft >= 0 && H5Tget_class(ft) == H5T_STRING) {
        hid_t mt = H5Tcopy(ft);
        if (H5Tis_variable_str(ft) > 0) {
            char *v = NULL;
            if (H5Aread(a, mt, &v) >= 0 && v) {
                out = dllm_strdup(v);
                H5free_memory(v);
            }
        } else {
            size_t n = H5Tget_size(ft);
            char *buf = dllm_calloc(n + 1, 1);
            if (H5Aread(a, mt, buf) >= 0)
                out = buf;
            else
                free(buf);
        }
        H5Tclose(mt);
    }
    if (ft >= 0)
        H5Tclose(ft);
    if (a >= 0)
        H5Aclose(a);
    return out;
}

static int write_meta(hid_t file, const h5log_meta *m)
{
    const char *vals[N_ATTR_STR] = {m->config_yaml, m->version, m->git_revision, m->device,
                                    m->started, m->machine};
    for (int i = 0; i < N_ATTR_STR; i++)
        if (write_str_attr(file, attr_strings[i], vals[i]))
            return -1;
    hid_t s = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(file, "seed", H5T_STD_I64LE, s, H5P_DEFAULT, H5P_DEFAULT);
    herr_t st = a >= 0 ? H5Awrite(a, H5T_NATIVE_INT64, &m->seed) : -1;
    if (a >= 0)
        H5Aclose(a);
    H5Sclose(s);
    return st < 0 ? -1 : 0;
}

/* Copies meta (strings) into the handle. */
static void set_meta(h5log *log, const h5log_meta *m)
{
    const char *vals[N_ATTR_STR] = {m->config_yaml, m->version, m->git_revision, m->device,
                                    m->started, m->machine};
    for (int i = 0; i < N_ATTR_STR; i++) {
        free(log->meta_str[i]);
        log->meta_str[i] = dllm_strdup(vals[i] ? vals[i] : "");
    }
    log->meta.config_yaml = log->meta_str[0];
    log->meta.version = log->meta_str[1];
    log->meta.git_revision = log->meta_str[2];
    log->meta.device = log->meta_str[3];
    log->meta.started = log->meta_str[4];
    log->meta.machine = log->meta_str[5];
    log->meta.seed = m->seed;
}

static void read_meta(h5log *log)
{
    for (int i = 0; i < N_ATTR_STR; i++) {
        char *v = read_str_attr(log->file, attr_strings[i]);
        log->meta_str[i] = v ? v : dllm_strdup("");
    }
    log->meta.config_yaml = log->meta_str[0];
    log->meta.version = log->meta_str[1];
    log->meta.git_revision = log->meta_str[2];
    log->meta.device = log->meta_str[3];
    log->meta.started = log->meta_str[4];
    log->meta.machine = log->meta_str[5];
    log->meta.seed = -1;
    if (H5Aexists(log->file, "seed") > 0) {
        hid_t a = H5Aopen(log->file, "seed", H5P_DEFAULT);
        if (a >= 0) {
            H5Aread(a, H5T_NATIVE_INT64, &log->meta.seed);
            H5Aclose(a);
        }
    }
}

static void set_tasks(h5log *log, int n, const char *const *names)
{
    log->task_names = dllm_calloc(n ? (size_t)n : 1, sizeof(char *));
    for (int i = 0; i < n; i++)
        log->task_names[i] = dllm_strdup(names[i]);
    log->dims.n_eval_tasks = n;
    log->dims.eval_tasks = (const char *const *)log->task_names;
    log->eval = dllm_malloc((n ? (size_t)n : 1) * sizeof *log->eval);
    log->n_eval = dllm_calloc(n ? (size_t)n : 1, sizeof *log->n_eval);
    for (int i = 0; i < n; i++)
        for (int f = 0; f < N_EVAL; f++)
            log->eval[i][f] = -1;
}

static h5log *log_alloc(const char *path)
{
    h5log *log = dllm_calloc(1, sizeof *log);
    log->path = dllm_strdup(path);
    log->file = -1;
    log->steps_step = log->mm_step = log->mm_d = log->pk_step = log->pk_v = -1;
    for (int i = 0; i < H5LOG_N_METRICS; i++)
        log->metric[i] = -1;
    for (int i = 0; i < N_TRAJ; i++)
        log->traj[i] = -1;
    return log;
}

/* The named fields are views of log->open's handles: closed there, once. */
static void close_objects(h5log *log)
{
    log->steps_step = log->mm_step = log->mm_d = log->pk_step = log->pk_v = -1;
    for (int i = 0; i < H5LOG_N_METRICS; i++)
        log->metric[i] = -1;
    for (int i = 0; i < N_TRAJ; i++)
        log->traj[i] = -1;
    for (int t = 0; t < log->dims.n_eval_tasks; t++)
        for (int f = 0; f < N_EVAL; f++)
            log->eval[t][f] = -1;
    for (int i = 0; i < log->n_open; i++) {
        close_id(&log->open[i].id);
        free(log->open[i].name);
    }
    free(log->open);
    log->open = NULL;
    log->n_open = 0;
}

/* The log's one handle to dataset name (no leading slash), opened on first use;
 * -1 when it cannot be opened. Never closed by the caller. */
static hid_t log_dset(h5log *log, const char *name)
{
    while (name[0] == '/')
        name++;
    for (int i = 0; i < log->n_open; i++)
        if (!strcmp(log->open[i].name, name))
            return log->open[i].id;
    hid_t d = H5Dopen2(log->file, name, H5P_DEFAULT);
    if (d < 0)
        return -1;
    log->open = dllm_realloc(log->open, (size_t)(log->n_open + 1) * sizeof *log->open);
    log->open[log->n_open++] = (struct open_dset){dllm_strdup(name), d};
    return d;
}

static void log_free(h5log *log)
{
    if (!log)
        return;
    close_objects(log);
    if (log->file >= 0)
        H5Fclose(log->file);
    for (int i = 0; i < N_ATTR_STR; i++)
        free(log->meta_str[i]);
    for (int i = 0; i < log->dims.n_eval_tasks; i++)
        free(log->task_names[i]);
    free(log->task_names);
    free(log->eval);
    free(log->n_eval);
    free(log->scratch);
    free(log->caps);
    free(log->path);
    free(log);
}

static void *scratch(h5log *log, size_t n)
{
    if (n > log->scratch_cap) {
        log->scratch = dllm_realloc(log->scratch, n);
        log->scratch_cap = n;
    }
    return log->scratch;
}

/* ---- creating the layout ---- */

static int check_name(const char *name)
{
    return name && name[0] && !strchr(name, '/') && strcmp(name, ".") != 0;
}

static int check_dims(const char *path, const h5log_dims *d, dllm_err *err)
{
    if (d->max_prompt < 1 || d->max_completion < 1 || d->denoise_steps < 1)
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "%s: log sizes must be >= 1 (prompt %d, completion %d, "
                            "denoising steps %d)",
                            path, d->max_prompt, d->max_completion, d->denoise_steps);
    if (d->n_eval_tasks < 0 || (d->n_eval_tasks > 0 && !d->eval_tasks))
        return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: bad eval task list", path);
    for (int i = 0; i < d->n_eval_tasks; i++) {
        if (!check_name(d->eval_tasks[i]))
            return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: bad eval task name '%s'", path,
                                d->eval_tasks[i] ? d->eval_tasks[i] : "(null)");
        for (int j = 0; j < i; j++)
            if (!strcmp(d->eval_tasks[i], d->eval_tasks[j]))
                return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: eval task '%s' listed twice",
                                    path, d->eval_tasks[i]);
    }
    return 0;
}

enum { READ_ATTEMPTS = 28, LOG_PAGE = 4096 };

/* Creates (create) or opens path with the latest format (what SWMR needs);
 * on failure reason gets HDF5's innermost message. */
static hid_t file_open(const char *path, unsigned flags, bool create, char reason[200])
{
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    if (fapl >= 0)
        H5Pset_libver_bounds(fapl, H5F_LIBVER_LATEST, H5F_LIBVER_LATEST);
    /* An SWMR reader retries a metadata read whose checksum fails (the writer may be
     * rewriting it), sleeping 1, 2, 4, ... ns between tries: HDF5's default of 100
     * tries never ends on a damaged file. READ_ATTEMPTS tries wait about 0.3 s in
     * all, far longer than a writer takes to rewrite one entry. */
    if (fapl >= 0 && (flags & H5F_ACC_SWMR_READ))
        H5Pset_metadata_read_attempts(fapl, READ_ATTEMPTS);
    /* Paged file space: no metadata entry smaller than a page crosses a page boundary.
     * A process killed inside a write leaves the file torn only between pages (the
     * kernel stops a write to the page cache between pages for a fatal signal), so a
     * SIGKILL can no longer leave an object header half old and half new (a checksum
     * failure that made the whole log unreadable: about 1 kill in 170, every damaged
     * header across a 4 KiB boundary). */
    hid_t fcpl = create ? H5Pcreate(H5P_FILE_CREATE) : H5P_DEFAULT;
    if (create && fcpl >= 0 &&
        (H5Pset_file_space_strategy(fcpl, H5F_FSPACE_STRATEGY_PAGE, 0, 1) < 0 ||
         H5Pset_file_space_page_size(fcpl, LOG_PAGE) < 0)) {
        H5Pclose(fcpl);
        fcpl = -1;
    }
    hid_t f = create ? (fcpl >= 0 ? H5Fcreate(path, flags, fcpl, fapl) : -1)
                     : H5Fopen(path, flags, fapl);
    if (f < 0)
        h5_reason(reason);  /* before H5Pclose clears the error stack */
    if (create && fcpl >= 0)
        H5Pclose(fcpl);
    H5Pclose(fapl);
    return f;
}

/* Writes attributes and every dataset into the freshly created file; all
 * objects it opens are closed again. */
static int create_layout(hid_t file, const char *path, const h5log_meta *meta,
                         const h5log_dims *dims, dllm_err *err)
{
    if (write_meta(file, meta))
        return h5_fail(err, DLLM_EXIT_INPUT, path, "writing the attributes");
    const size_t chunk_bytes = 64 * 1024;
    hid_t g = H5Gcreate2(file, "steps", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (g < 0)
        return h5_fail(err, DLLM_EXIT_INTERNAL, path, "creating /steps");
    hid_t d = create_dset(g, "steps", "step", K_I64, 0, 4096);
    int bad = d < 0;
    close_id(&d);
    for (int i = 0; i < H5LOG_N_METRICS && !bad; i++) {
        d = create_dset(g, "steps", metric_names[i], K_F64, 0, 4096);
        bad = d < 0;
        close_id(&d);
    }
    H5Gclose(g);
    if (bad)
        return h5_fail(err, DLLM_EXIT_INTERNAL, path, "creating /steps datasets");

    g = H5Gcreate2(file, "trajectories", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (g < 0)
        return h5_fail(err, DLLM_EXIT_INTERNAL, path, "creating /trajectories");
    for (int i = 0; i < N_TRAJ && !bad; i++) {
        int w = traj_fields[i].width;
        hsize_t width = w == W_P ? (hsize_t)dims->max_prompt
                        : w == W_G ? (hsize_t)dims->max_completion : 0;
        d = create_dset(g, "trajectories", traj_fields[i].name, traj_fields[i].kind, width, chunk_bytes);
        bad = d < 0;
        close_id(&d);
    }
    H5Gclose(g);
    if (bad)
        return h5_fail(err, DLLM_EXIT_INTERNAL, path, "creating /trajectories datasets");

    g = H5Gcreate2(file, "mismatch_by_step", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (g < 0)
        return h5_fail(err, DLLM_EXIT_INTERNAL, path, "creating /mismatch_by_step");
    d = create_dset(g, "mismatch_by_step", "step", K_I64, 0, 4096);
    bad = d < 0;
    close_id(&d);
    if (!bad) {
        d = create_dset(g, "mismatch_by_step", "mean_abs_d", K_F64, (hsize_t)dims->denoise_steps, chunk_bytes);
        bad = d < 0;
        close_id(&d);
    }
    H5Gclose(g);
    if (bad)
        return h5_fail(err, DLLM_EXIT_INTERNAL, path, "creating /mismatch_by_step datasets");

    if (dims->group_size > 0) {
        g = H5Gcreate2(file, "pass_at_k", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        if (g < 0)
            return h5_fail(err, DLLM_EXIT_INTERNAL, path, "creating /pass_at_k");
        d = create_dset(g, "pass_at_k", "step", K_I64, 0, 4096);
        bad = d < 0;
        close_id(&d);
        if (!bad) {
            d = create_dset(g, "pass_at_k", "value", K_F64, (hsize_t)dims->group_size, 4096);
            bad = d < 0;
            close_id(&d);
        }
        H5Gclose(g);
        if (bad)
            return h5_fail(err, DLLM_EXIT_INTERNAL, path, "creating /pass_at_k datasets");
    }

    /* Track creation order so readers list the tasks as configured. */
    hid_t gcpl = H5Pcreate(H5P_GROUP_CREATE);
    H5Pset_link_creation_order(gcpl, H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED);
    g = H5Gcreate2(file, "eval", H5P_DEFAULT, gcpl, H5P_DEFAULT);
    H5Pclose(gcpl);
    if (g < 0)
        return h5_fail(err, DLLM_EXIT_INTERNAL, path, "creating /eval");
    for (int t = 0; t < dims->n_eval_tasks && !bad; t++) {
        hid_t gt = H5Gcreate2(g, dims->eval_tasks[t], H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        bad = gt < 0;
        for (int f = 0; f < N_EVAL && !bad; f++) {
            d = create_dset(gt, "eval", eval_fields[f], f == E_STEP ? K_I64 : K_F64, 0, 1024);
            bad = d < 0;
            close_id(&d);
        }
        if (gt >= 0)
            H5Gclose(gt);
    }
    H5Gclose(g);
    if (bad)
        return h5_fail(err, DLLM_EXIT_INTERNAL, path, "creating /eval datasets");
    return 0;
}

/* ---- opening the datasets of an open file ---- */

static int64_t min_rows(int64_t a, int64_t b)
{
    return a < 0 ? b : b < 0 ? a : a < b ? a : b;
}

/* A file HDF5 cannot read where its own structure says an object is: its
 * checksums failed, or a link leads nowhere. Such a file cannot be repaired. */
static int damaged(dllm_err *err, const char *path, const char *what)
{
    char reason[200];
    h5_reason(reason);
    return dllm_err_set(err, DLLM_EXIT_INPUT,
                        "%s: the log is damaged (/%s cannot be read: %s); it cannot be repaired: "
                        "restore it from a copy, or start the run again",
                        path, what, reason);
}

/* Opens dataset name of the layout into *d: -1 when the file lacks it; an
 * input error when it is there but unreadable (damaged). */
static int open_layout_dset(h5log *log, const char *name, hid_t *d, dllm_err *err)
{
    *d = -1;
    /* each group on the way first: H5Lexists fails below a missing group */
    char prefix[512];
    htri_t there = 1;
    for (const char *p = strchr(name, '/'); p && there > 0; p = strchr(p + 1, '/')) {
        snprintf(prefix, sizeof prefix, "%.*s", (int)(p - name), name);
        there = H5Lexists(log->file, prefix, H5P_DEFAULT);
    }
    if (there > 0)
        there = H5Lexists(log->file, name, H5P_DEFAULT);
    if (there < 0)
        return damaged(err, log->path, name);
    if (!there)
        return 0;
    *d = log_dset(log, name);
    return *d < 0 ? damaged(err, log->path, name) : 0;
}

/* The rows of d that a reader trusts: all of them, unless the file was cut;
 * then its group's intact rows (cut_caps). */
static int64_t log_rows(const h5log *log, hid_t d)
{
    int64_t n = rows_of(d);
    if (!log->cut || d < 0)
        return n;
    char name[512];
    if (H5Iget_name(d, name, sizeof name) <= 0)
        return 0;
    char *slash = strrchr(name, '/');
    if (slash)
        *slash = '\0';
    for (int i = 0; i < log->ncaps; i++)
        if (!strcmp(log->caps[i].group, name[0] == '/' ? name + 1 : name))
            return min_rows(n, log->caps[i].rows);
    return 0;
}

/* Opens every dataset of the layout that exists; the writer requires all. */
static int open_objects(h5log *log, dllm_err *err)
{
    if (open_layout_dset(log, "steps/step", &log->steps_step, err))
        return err->code;
    if (log->steps_step < 0)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: not a run log (no /steps/step)",
                            log->path);
    int64_t n = rows_of(log->steps_step);
    char name[512];
    for (int i = 0; i < H5LOG_N_METRICS; i++) {
        snprintf(name, sizeof name, "steps/%s", metric_names[i]);
        if (open_layout_dset(log, name, &log->metric[i], err))
            return err->code;
        if (log->metric[i] < 0 && log->writable)
            return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: missing dataset /%s", log->path,
                                name);
        n = min_rows(n, rows_of(log->metric[i]));
    }
    log->n_steps = n;

    n = -1;
    for (int i = 0; i < N_TRAJ; i++) {
        snprintf(name, sizeof name, "trajectories/%s", traj_fields[i].name);
        if (open_layout_dset(log, name, &log->traj[i], err))
            return err->code;
        if (log->traj[i] < 0 && log->writable)
            return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: missing dataset /%s", log->path,
                                name);
        n = min_rows(n, rows_of(log->traj[i]));
    }
    log->n_traj = n < 0 ? 0 : n;
    if (log->traj[T_PROMPT_TOKENS] >= 0)
        log->dims.max_prompt = (int)width_of(log->traj[T_PROMPT_TOKENS]);
    if (log->traj[T_COMPLETION_TOKENS] >= 0)
        log->dims.max_completion = (int)width_of(log->traj[T_COMPLETION_TOKENS]);

    if (open_layout_dset(log, "mismatch_by_step/step", &log->mm_step, err) ||
        open_layout_dset(log, "mismatch_by_step/mean_abs_d", &log->mm_d, err))
        return err->code;
    if ((log->mm_step < 0 || log->mm_d < 0) && log->writable)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: missing /mismatch_by_step", log->path);
    n = min_rows(rows_of(log->mm_step), rows_of(log->mm_d));
    log->n_mm = n < 0 ? 0 : n;
    if (log->mm_d >= 0)
        log->dims.denoise_steps = (int)width_of(log->mm_d);
    /* optional: logs written before pass@k have none */
    if (open_layout_dset(log, "pass_at_k/step", &log->pk_step, err) ||
        open_layout_dset(log, "pass_at_k/value", &log->pk_v, err))
        return err->code;
    n = min_rows(rows_of(log->pk_step), rows_of(log->pk_v));
    log->n_pk = n < 0 ? 0 : n;
    log->dims.group_size = log->pk_v >= 0 && log->pk_step >= 0 ? (int)width_of(log->pk_v) : 0;

    for (int t = 0; t < log->dims.n_eval_tasks; t++) {
        n = -1;
        for (int k = 0; k < N_EVAL; k++) {
            snprintf(name, sizeof name, "eval/%s/%s", log->task_names[t], eval_fields[k]);
            if (open_layout_dset(log, name, &log->eval[t][k], err))
                return err->code;
            if (log->eval[t][k] < 0 && log->writable)
                return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: missing dataset /%s",
                                    log->path, name);
            n = min_rows(n, rows_of(log->eval[t][k]));
        }
        log->n_eval[t] = n < 0 ? 0 : n;
    }
    return 0;
}

typedef struct {
    char **names;
    int n;
} name_list;

static herr_t collect_name(hid_t g, const char *name, const H5L_info_t *info, void *data)
{
    (void)g; (void)info;
    name_list *l = data;
    l->names = dllm_realloc(l->names, (size_t)(l->n + 1) * sizeof(char *));
    l->names[l->n++] = dllm_strdup(name);
    return 0;
}

/* Names of the links in group gpath (creation order when tracked); empty when
 * the group is missing. */
static name_list list_group(hid_t file, const char *gpath)
{
    name_list l = {0};
    if (H5Lexists(file, gpath, H5P_DEFAULT) <= 0)
        return l;
    hid_t g = H5Gopen2(file, gpath, H5P_DEFAULT);
    if (g < 0)
        return l;
    if (H5Literate(g, H5_INDEX_CRT_ORDER, H5_ITER_INC, NULL, collect_name, &l) < 0) {
        H5Eclear2(H5E_DEFAULT);
        for (int i = 0; i < l.n; i++)
            free(l.names[i]);
        free(l.names);
        l = (name_list){0};
        H5Literate(g, H5_INDEX_NAME, H5_ITER_INC, NULL, collect_name, &l);
    }
    H5Gclose(g);
    return l;
}

static void free_list(name_list *l)
{
    for (int i = 0; i < l->n; i++)
        free(l->names[i]);
    free(l->names);
    *l = (name_list){0};
}

static hid_t open_cut_file(const char *path, int64_t size, int64_t want);

/* A cut file's intact rows per group: the fewest, over the group's datasets, of
 * intact_rows. Found on a handle of their own, opened and closed here, which
 * keeps the chunk listing apart from the handle the log is read with. */
static void cut_caps(h5log *log, const char *path, int64_t size, int64_t want)
{
    hid_t f = open_cut_file(path, size, want);
    if (f < 0)
        return;
    name_list groups = {0}, evals = list_group(f, "eval");
    const char *fixed[] = {"steps", "trajectories", "mismatch_by_step"};
    for (int i = 0; i < 3; i++)
        collect_name(f, fixed[i], NULL, &groups);
    for (int i = 0; i < evals.n; i++) {
        char g[300];
        snprintf(g, sizeof g, "eval/%s", evals.names[i]);
        collect_name(f, g, NULL, &groups);
    }
    log->caps = dllm_calloc(groups.n ? (size_t)groups.n : 1, sizeof *log->caps);
    for (int g = 0; g < groups.n; g++) {
        name_list l = list_group(f, groups.names[g]);
        int64_t cap = INT64_MAX;
        for (int i = 0; i < l.n; i++) {
            char name[620];
            snprintf(name, sizeof name, "%s/%s", groups.names[g], l.names[i]);
            hid_t d = open_dset_opt(f, name);
            cap = d >= 0 ? min_rows(cap, intact_rows(d, size)) : 0;
            if (d >= 0)
                H5Dclose(d);
        }
        snprintf(log->caps[log->ncaps].group, sizeof log->caps[0].group, "%s", groups.names[g]);
        log->caps[log->ncaps++].rows = cap;
        free_list(&l);
    }
    free_list(&groups);
    free_list(&evals);
    H5Fclose(f);
}

static int64_t group_rows(h5log *log, const char *gpath)
{
    name_list l = list_group(log->file, gpath);
    int64_t n = -1;
    for (int i = 0; i < l.n; i++) {
        char name[620];
        snprintf(name, sizeof name, "%s/%s", gpath, l.names[i]);
        H5O_info_t info;
        if (H5Oget_info_by_name2(log->file, name, &info, H5O_INFO_BASIC, H5P_DEFAULT) >= 0 &&
            info.type == H5O_TYPE_DATASET) {
            hid_t d = log_dset(log, name);
            if (d >= 0)
                n = min_rows(n, log_rows(log, d));
        }
    }
    free_list(&l);
    return n < 0 ? 0 : n;
}

/* ---- create / open ---- */

int h5log_create(h5log **out, const char *path, const h5log_meta *meta,
                 const h5log_dims *dims, dllm_err *err)
{
    *out = NULL;
    int rc = check_dims(path, dims, err);
    if (rc)
        return rc;
    h5_quiet q = quiet_begin();
    h5log *log = log_alloc(path);
    log->writable = true;
    set_meta(log, meta);
    set_tasks(log, dims->n_eval_tasks, dims->eval_tasks);
    log->dims = *dims;
    log->dims.eval_tasks = (const char *const *)log->task_names;
    char reason[200];
    log->file = file_open(path, H5F_ACC_TRUNC, true, reason);
    if (log->file < 0)
        rc = dllm_err_set(err, DLLM_EXIT_INPUT, "%s: cannot create: %s", path, reason);
    if (!rc)
        rc = create_layout(log->file, path, meta, dims, err);
    /* From here on the writer only extends datasets (the SWMR contract). */
    if (!rc && H5Fstart_swmr_write(log->file) < 0)
        rc = h5_fail(err, DLLM_EXIT_INTERNAL, path, "starting SWMR write");
    if (!rc)
        rc = open_objects(log, err);
    if (!rc && H5Fflush(log->file, H5F_SCOPE_GLOBAL) < 0)
        rc = h5_fail(err, DLLM_EXIT_INTERNAL, path, "flush");
    quiet_end(q);
    if (rc) {
        log_free(log);
        return rc;
    }
    *out = log;
    return 0;
}

/* Opens path for reading: SWMR read (needs the 1.10 format), else plain. */
/* The file size that path's superblock records (version 2 or 3 with 8-byte
 * addresses, what the writer makes: signature, version, offset and length sizes,
 * flags, then base, extension and end-of-file addresses); -1 for another. */
static int64_t recorded_size(const char *path)
{
    unsigned char b[36];
    FILE *f = fopen(path, "rb");
    size_t n = f ? fread(b, 1, sizeof b, f) : 0;
    if (f)
        fclose(f);
    if (n < sizeof b || memcmp(b, "\211HDF\r\n\032\n", 8) || (b[8] != 2 && b[8] != 3) ||
        b[9] != 8)
        return -1;
    uint64_t base = 0, eof = 0;
    for (int i = 7; i >= 0; i--) {
        base = base << 8 | b[12 + i];
        eof = eof << 8 | b[28 + i];
    }
    return base + eof > (uint64_t)INT64_MAX ? -1 : (int64_t)(base + eof);
}

/* Opens a log whose last write failed part way (a full disk, a file-size limit):
 * its superblock already records the size the failed write would have made. An
 * image of the file padded with zeros to that size opens (read only, in memory)
 * with every step flushed before the failure; what the failed write would have
 * added reads as a step that never completed. The file itself is not touched. */
static hid_t open_cut_file(const char *path, int64_t size, int64_t want)
{
    unsigned char *buf = calloc((size_t)want, 1);
    FILE *f = buf ? fopen(path, "rb") : NULL;
    bool ok = f && fread(buf, 1, (size_t)size, f) == (size_t)size;
    if (f)
        fclose(f);
    hid_t fapl = ok ? H5Pcreate(H5P_FILE_ACCESS) : -1;
    hid_t file = -1;
    /* the core driver refuses an image under the name of a file that exists: this
     * name cannot exist (path is a file, not a directory) */
    char *name = dllm_malloc(strlen(path) + 16);
    sprintf(name, "%s/image", path);
    if (fapl >= 0 && H5Pset_fapl_core(fapl, 1 << 20, false) >= 0 &&
        H5Pset_file_image(fapl, buf, (size_t)want) >= 0)
        file = H5Fopen(name, H5F_ACC_RDONLY, fapl);
    if (fapl >= 0)
        H5Pclose(fapl);
    free(name);
    free(buf);
    return file;
}

static int open_file_read(const char *path, h5log *log, bool allow_cut, dllm_err *err)
{
    hid_t *file = &log->file;
    struct stat st;
    if (stat(path, &st) != 0)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: %s", path, strerror(errno));
    if (!S_ISREG(st.st_mode))
        return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: not a file", path);
    char reason[200];
    *file = file_open(path, H5F_ACC_RDONLY | H5F_ACC_SWMR_READ, false, reason);
    if (*file >= 0)
        return 0;
    *file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (*file >= 0)
        return 0;
    H5Eclear2(H5E_DEFAULT);
    int64_t want = recorded_size(path);
    if (want > (int64_t)st.st_size && !allow_cut)
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "%s: shorter than it records (%lld of %lld bytes): cut short while it "
                            "was written (a full disk or a file-size limit) or truncated since; "
                            "`dllm-rl train --resume` of its run keeps the steps up to the last "
                            "checkpoint if they are intact, else restore it from a copy",
                            path, (long long)st.st_size, (long long)want);
    /* a failed write adds a step's chunks and metadata, not gigabytes: a larger
     * recorded size is a damaged superblock (and no image of it is made) */
    if (want > (int64_t)st.st_size && want - (int64_t)st.st_size <= ((int64_t)1 << 30)) {
        cut_caps(log, path, (int64_t)st.st_size, want);
        *file = open_cut_file(path, (int64_t)st.st_size, want);
        log->cut = *file >= 0;
        if (log->cut)
            return 0;
        H5Eclear2(H5E_DEFAULT);
    }
    return dllm_err_set(err, DLLM_EXIT_INPUT,
                        "%s: not a readable HDF5 log (%s); it cannot be repaired: restore it from "
                        "a copy, or start the run again", path, reason);
}

/* allow_cut: a file cut short by a failed write is read (resume), else refused. */
static int open_read_file(h5log **out, const char *path, bool allow_cut, dllm_err *err)
{
    *out = NULL;
    h5log *log = log_alloc(path);
    int rc = open_file_read(path, log, allow_cut, err);
    if (!rc) {
        read_meta(log);
        name_list tasks = list_group(log->file, "eval");
        set_tasks(log, tasks.n, (const char *const *)tasks.names);
        free_list(&tasks);
        rc = open_objects(log, err);
    }
    if (rc) {
        log_free(log);
        return rc;
    }
    *out = log;
    return 0;
}

int h5log_open_read(h5log **out, const char *path, dllm_err *err)
{
    h5_quiet q = quiet_begin();
    int rc = open_read_file(out, path, false, err);
    quiet_end(q);
    return rc;
}

/* ---- resume ---- */

/* Copies the rows of group gpath whose `step` is <= last_step from src to dst
 * (dst has the full layout, empty). *copied gets the number of rows, *last the
 * step of the last one (unchanged when none). */
static int copy_group(h5log *old, hid_t dst, const char *gpath, int64_t last_step,
                      int64_t *copied, int64_t *last, dllm_err *err)
{
    hid_t src = old->file;
    const char *src_path = old->path;
    *copied = 0;
    int64_t n = group_rows(old, gpath);
    char name[512];
    snprintf(name, sizeof name, "%s/step", gpath);
    hid_t sd = n > 0 && H5Lexists(src, name, H5P_DEFAULT) > 0 ? log_dset(old, name) : -1;
    if (sd < 0)
        return 0;  /* empty or missing group: nothing to copy */
    int64_t *step = dllm_malloc((size_t)n * sizeof *step);
    int rc = read_rows(sd, H5T_NATIVE_INT64, n, step);
    if (rc) {
        free(step);
        return h5_fail(err, DLLM_EXIT_INPUT, src_path, name);
    }
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++)
        if (step[i] <= last_step) {
            k++;
            *last = step[i];
        }
    name_list fields = list_group(dst, gpath);
    void *buf = NULL;
    for (int i = 0; i < fields.n && !rc; i++) {
        snprintf(name, sizeof name, "%s/%s", gpath, fields.names[i]);
        hid_t dd = H5Dopen2(dst, name, H5P_DEFAULT);
        hid_t ds = H5Lexists(src, name, H5P_DEFAULT) > 0 ? log_dset(old, name) : -1;
        if (dd < 0) {
            rc = h5_fail(err, DLLM_EXIT_INTERNAL, src_path, name);
        } else if (ds < 0) {
            /* A dataset the old log lacks: rows of fill values. */
            hsize_t dims[2] = {(hsize_t)k, (hsize_t)width_of(dd)};
            if (H5Dset_extent(dd, dims) < 0)
                rc = h5_fail(err, DLLM_EXIT_INTERNAL, src_path, name);
        } else if (width_of(ds) != width_of(dd)) {
            rc = dllm_err_set(err, DLLM_EXIT_INPUT, "%s: /%s has rows of %lld, expected %lld",
                              src_path, name, (long long)width_of(ds), (long long)width_of(dd));
        } else {
            hid_t ft = H5Dget_type(dd);
            hid_t mt = H5Tget_native_type(ft, H5T_DIR_ASCEND);
            size_t row = H5Tget_size(mt) * (size_t)width_of(dd);
            buf = dllm_realloc(buf, (size_t)n * row + 1);
            if (read_rows(ds, mt, n, buf) < 0) {
                rc = h5_fail(err, DLLM_EXIT_INPUT, src_path, name);
            } else {
                int64_t j = 0;  /* compact the kept rows in place */
                for (int64_t r = 0; r < n; r++)
                    if (step[r] <= last_step) {
                        if (j != r)
                            memcpy((char *)buf + j * row, (char *)buf + r * row, row);
                        j++;
                    }
                if (write_rows(dd, mt, 0, k, buf) < 0)
                    rc = h5_fail(err, DLLM_EXIT_INTERNAL, src_path, name);
            }
            H5Tclose(mt);
            H5Tclose(ft);
        }
        if (dd >= 0)
            H5Oclose(dd);
    }
    free(buf);
    free_list(&fields);
    free(step);
    *copied = k;
    return rc;
}

static int resume_copy(h5log *old, const char *tmp, int64_t last_step, dllm_err *err)
{
    const char *path = old->path;
    char reason[200];
    hid_t f = file_open(tmp, H5F_ACC_TRUNC, true, reason);
    if (f < 0)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: cannot create: %s", tmp, reason);
    h5log_dims dims = old->dims;
    if (dims.max_prompt < 1 || dims.max_completion < 1 || dims.denoise_steps < 1) {
        H5Fclose(f);
        return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: incomplete layout (no trajectory "
                            "or mismatch datasets)", path);
    }
    int rc = create_layout(f, tmp, &old->meta, &dims, err);
    int64_t copied = 0, last = INT64_MIN;
    if (!rc)
        rc = copy_group(old, f, "steps", last_step, &copied, &last, err);
    if (!rc && (copied ? last : 0) < last_step)
        rc = dllm_err_set(err, DLLM_EXIT_INPUT,
                          "%s: the log ends at step %lld, cannot resume at step %lld "
                          "(steps would be missing)",
                          path, copied ? (long long)last : 0LL, (long long)last_step);
    int64_t dummy_n, dummy_last;
    if (!rc)
        rc = copy_group(old, f, "trajectories", last_step, &dummy_n,
                        &dummy_last, err);
    if (!rc)
        rc = copy_group(old, f, "mismatch_by_step", last_step, &dummy_n,
                        &dummy_last, err);
    if (!rc && dims.group_size > 0)
        rc = copy_group(old, f, "pass_at_k", last_step, &dummy_n, &dummy_last, err);
    for (int t = 0; t < dims.n_eval_tasks && !rc; t++) {
        char g[512];
        snprintf(g, sizeof g, "eval/%s", dims.eval_tasks[t]);
        rc = copy_group(old, f, g, last_step, &dummy_n, &dummy_last, err);
    }
    if (H5Fclose(f) < 0 && !rc)
        rc = h5_fail(err, DLLM_EXIT_INTERNAL, tmp, "close");
    return rc;
}

static int resume(h5log **out, const char *path, int64_t last_step, dllm_err *err)
{
    h5log *old;
    int rc = open_read_file(&old, path, true, err);
    if (rc)
        return rc;
    size_t n = strlen(path) + 5;
    char *tmp = dllm_malloc(n);
    snprintf(tmp, n, "%s.tmp", path);
    rc = resume_copy(old, tmp, last_step, err);
    log_free(old);
    if (!rc && rename(tmp, path) != 0)
        rc = dllm_err_set(err, DLLM_EXIT_INPUT, "%s: rename from %s: %s", path, tmp,
                          strerror(errno));
    if (rc) {
        unlink(tmp);
        free(tmp);
        return rc;
    }
    free(tmp);
    /* The copy was closed cleanly, so it may be reopened for writing. */
    h5log *log = log_alloc(path);
    log->writable = true;
    char reason[200];
    log->file = file_open(path, H5F_ACC_RDWR | H5F_ACC_SWMR_WRITE, false, reason);
    if (log->file < 0)
        rc = dllm_err_set(err, DLLM_EXIT_INTERNAL, "%s: reopening for SWMR write: %s", path,
                          reason);
    if (!rc) {
        read_meta(log);
        name_list tasks = list_group(log->file, "eval");
        set_tasks(log, tasks.n, (const char *const *)tasks.names);
        free_list(&tasks);
        rc = open_objects(log, err);
    }
    if (rc) {
        log_free(log);
        return rc;
    }
    *out = log;
    return 0;
}

int h5log_resume(h5log **out, const char *path, int64_t last_step, dllm_err *err)
{
    *out = NULL;
    h5_quiet q = quiet_begin();
    int rc = resume(out, path, last_step, err);
    quiet_end(q);
    return rc;
}

/* ---- appending ---- */

static int not_writable(h5log *log, dllm_err *err)
{
    return dllm_err_set(err, DLLM_EXIT_INTERNAL, "%s: log opened for reading", log->path);
}

int h5log_flush(h5log *log, dllm_err *err)
{
    if (H5Fflush(log->file, H5F_SCOPE_GLOBAL) < 0)
        return h5_fail(err, DLLM_EXIT_INTERNAL, log->path, "flush");
    return 0;
}

int h5log_append_step(h5log *log, int64_t step, const double *values, dllm_err *err)
{
    if (!log->writable)
        return not_writable(log, err);
    int64_t r = log->n_steps;
    for (int i = 0; i < H5LOG_N_METRICS; i++)
        if (write_rows(log->metric[i], H5T_NATIVE_DOUBLE, r, 1, &values[i]) < 0)
            return h5_fail(err, DLLM_EXIT_INTERNAL, log->path, metric_names[i]);
    /* The step column last: a row is complete once every dataset has it. */
    if (write_rows(log->steps_step, H5T_NATIVE_INT64, r, 1, &step) < 0)
        return h5_fail(err, DLLM_EXIT_INTERNAL, log->path, "/steps/step");
    log->n_steps = r + 1;
    return h5log_flush(log, err);
}

int h5log_append_step_named(h5log *log, int64_t step, int n, const char *const *names,
                            const double *values, dllm_err *err)
{
    double v[H5LOG_N_METRICS];
    h5log_values_nan(v);
    for (int i = 0; i < n; i++) {
        int k = h5log_metric_index(names[i]);
        if (k < 0)
            return dllm_err_set(err, DLLM_EXIT_INTERNAL, "%s: unknown step metric '%s'",
                                log->path, names[i] ? names[i] : "(null)");
        v[k] = values[i];
    }
    return h5log_append_step(log, step, v, err);
}

/* Packs column f of batch b into (n, width) rows of its kind, padding. */
static const void *pack_traj(h5log *log, const h5log_traj_batch *b, int f)
{
    int n = b->n, kind = traj_fields[f].kind;
    size_t es = kind_size(kind);
    int width = traj_fields[f].width == W_P ? log->dims.max_prompt
                : traj_fields[f].width == W_G ? log->dims.max_completion : 1;
    unsigned char *buf = scratch(log, (size_t)n * (size_t)width * es);
    unsigned char pad[8];
    fill_value(kind, pad);
    if (traj_fields[f].width == W_STEP) {
        for (int i = 0; i < n; i++)
            memcpy(buf + (size_t)i * es, &b->step, es);
        return buf;
    }
    const void *src = h5log_traj_col_data(b, f);
    const int32_t *len = traj_fields[f].width == W_P   ? b->prompt_len
                         : traj_fields[f].width == W_G ? b->completion_len
                                                       : NULL;
    int stride = traj_fields[f].width == W_P   ? b->prompt_stride
                 : traj_fields[f].width == W_G ? b->completion_stride
                                               : 1;
    for (int i = 0; i < n; i++) {
        int keep = !src ? 0 : len ? len[i] : 1;
        unsigned char *row = buf + (size_t)i * (size_t)width * es;
        if (keep)
            memcpy(row, (const unsigned char *)src + (size_t)i * (size_t)stride * es,
                   (size_t)keep * es);
        for (int t = keep; t < width; t++)
            memcpy(row + (size_t)t * es, pad, es);
    }
    return buf;
}

int h5log_append_trajectories(h5log *log, const h5log_traj_batch *b, dllm_err *err)
{
    if (!log->writable)
        return not_writable(log, err);
    if (b->n < 0 || (b->n > 0 && (!b->prompt_len || !b->completion_len)))
        return dllm_err_set(err, DLLM_EXIT_INTERNAL,
                            "%s: trajectory batch needs prompt_len and completion_len",
                            log->path);
    for (int i = 0; i < b->n; i++) {
        int pl = b->prompt_len[i], cl = b->completion_len[i];
        if (pl < 0 || pl > log->dims.max_prompt || (pl && b->prompt_tokens &&
                                                    pl > b->prompt_stride))
            return dllm_err_set(err, DLLM_EXIT_INPUT,
                                "%s: step %lld completion %d: prompt of %d tokens, the log "
                                "holds at most %d", log->path, (long long)b->step, i, pl,
                                log->dims.max_prompt);
        if (cl < 0 || cl > log->dims.max_completion ||
            (cl && b->completion_tokens && cl > b->completion_stride))
            return dllm_err_set(err, DLLM_EXIT_INPUT,
                                "%s: step %lld completion %d: %d completion tokens, the log "
                                "holds at most %d", log->path, (long long)b->step, i, cl,
                                log->dims.max_completion);
    }
    int64_t r = log->n_traj;
    /* The step column last, as in append_step. */
    for (int f = N_TRAJ - 1; f >= 0; f--) {  /* T_STEP is 0 */
        if (write_rows(log->traj[f], mem_type(traj_fields[f].kind), r, b->n,
                       pack_traj(log, b, f)) < 0) {
            char what[128];
            snprintf(what, sizeof what, "/trajectories/%s", traj_fields[f].name);
            return h5_fail(err, DLLM_EXIT_INTERNAL, log->path, what);
        }
    }
    log->n_traj = r + b->n;
    /* on disk before the step's row is appended: HDF5 orders flushes within a
     * dataset, not across datasets, so a kill could otherwise leave a logged
     * step without its trajectories */
    return h5log_flush(log, err);
}

int h5log_append_mismatch(h5log *log, int64_t step, const double *mean_abs_d, dllm_err *err)
{
    if (!log->writable)
        return not_writable(log, err);
    int64_t r = log->n_mm;
    if (write_rows(log->mm_d, H5T_NATIVE_DOUBLE, r, 1, mean_abs_d) < 0 ||
        write_rows(log->mm_step, H5T_NATIVE_INT64, r, 1, &step) < 0)
        return h5_fail(err, DLLM_EXIT_INTERNAL, log->path, "/mismatch_by_step");
    log->n_mm = r + 1;
    return 0;
}

int h5log_append_pass_at_k(h5log *log, int64_t step, const double *pass_at_k, dllm_err *err)
{
    if (!log->writable)
        return not_writable(log, err);
    if (log->pk_v < 0)
        return 0;
    int64_t r = log->n_pk;
    if (write_rows(log->pk_v, H5T_NATIVE_DOUBLE, r, 1, pass_at_k) < 0 ||
        write_rows(log->pk_step, H5T_NATIVE_INT64, r, 1, &step) < 0)
        return h5_fail(err, DLLM_EXIT_INTERNAL, log->path, "/pass_at_k");
    log->n_pk = r + 1;
    return 0;
}

int h5log_append_eval(h5log *log, const char *task, int64_t step, double accuracy,
                      double accuracy_se, double reward_mean, dllm_err *err)
{
    if (!log->writable)
        return not_writable(log, err);
    int t = -1;
    for (int i = 0; i < log->dims.n_eval_tasks && t < 0; i++)
        if (task && !strcmp(task, log->task_names[i]))
            t = i;
    if (t < 0)
        return dllm_err_set(err, DLLM_EXIT_INTERNAL,
                            "%s: eval task '%s' was not declared when the log was created",
                            log->path, task ? task : "(null)");
    int64_t r = log->n_eval[t];
    double v[N_EVAL] = {0, accuracy, accuracy_se, reward_mean};
    for (int f = N_EVAL - 1; f >= 0; f--) {
        int bad = f == E_STEP ? write_rows(log->eval[t][f], H5T_NATIVE_INT64, r, 1, &step)
                              : write_rows(log->eval[t][f], H5T_NATIVE_DOUBLE, r, 1, &v[f]);
        if (bad < 0) {
            char what[300];
            snprintf(what, sizeof what, "/eval/%s/%s", task, eval_fields[f]);
            return h5_fail(err, DLLM_EXIT_INTERNAL, log->path, what);
        }
    }
    log->n_eval[t] = r + 1;
    return h5log_flush(log, err);
}

int h5log_close(h5log *log)
{
    if (!log)
        return 0;
    int bad = 0;
    close_objects(log);
    if (log->file >= 0) {
        bad = H5Fclose(log->file) < 0;
        log->file = -1;
    }
    log_free(log);
    return bad;
}

/* ---- reading ---- */

const h5log_meta *h5log_get_meta(const h5log *log) { return &log->meta; }
const h5log_dims *h5log_get_dims(const h5log *log) { return &log->dims; }
const char *h5log_path(const h5log *log) { return log->path; }

int64_t h5log_nsteps(h5log *log)
{
    if (log->writable)
        return log->n_steps;
    int64_t n = log_rows(log, log->steps_step);
    for (int i = 0; i < H5LOG_N_METRICS; i++)
        n = min_rows(n, log_rows(log, log->metric[i]));
    return n < 0 ? 0 : n;
}

int64_t h5log_ntrajectories(h5log *log)
{
    if (log->writable)
        return log->n_traj;
    int64_t n = -1;
    for (int i = 0; i < N_TRAJ; i++)
        n = min_rows(n, log_rows(log, log->traj[i]));
    return n < 0 ? 0 : n;
}

static int read_column(h5log *log, const char *dset, double **out, int64_t *n,
                       dllm_err *err)
{
    *out = NULL;
    *n = 0;
    while (dset[0] == '/')
        dset++;
    if (H5Lexists(log->file, dset, H5P_DEFAULT) <= 0)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: no dataset /%s", log->path, dset);
    hid_t d = log_dset(log, dset);
    if (d < 0)
        return h5_fail(err, DLLM_EXIT_INPUT, log->path, dset);
    if (rank_of(d) != 1) {
        return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: /%s is not 1-D", log->path, dset);
    }
    /* Complete rows only: the group's common length. */
    char group[512];
    snprintf(group, sizeof group, "%s", dset);
    char *slash = strrchr(group, '/');
    int64_t rows = slash ? (*slash = 0, group_rows(log, group)) : log_rows(log, d);
    if (!strcmp(group, "steps"))
        rows = min_rows(rows, h5log_nsteps(log));
    double *v = dllm_malloc((size_t)(rows ? rows : 1) * sizeof *v);
    if (read_rows(d, H5T_NATIVE_DOUBLE, rows, v) < 0) {
        free(v);
        return h5_fail(err, DLLM_EXIT_INPUT, log->path, dset);
    }
    *out = v;
    *n = rows;
    return 0;
}

int h5log_read_column(h5log *log, const char *dset, double **out, int64_t *n,
                      dllm_err *err)
{
    h5_quiet q = quiet_begin();
    int rc = read_column(log, dset, out, n, err);
    quiet_end(q);
    return rc;
}

int h5log_read_metric(h5log *log, const char *metric, double **out, int64_t *n,
                      dllm_err *err)
{
    char name[300];
    snprintf(name, sizeof name, "steps/%s", metric);
    return h5log_read_column(log, name, out, n, err);
}
