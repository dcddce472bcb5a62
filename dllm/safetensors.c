/* safetensors.c: Hugging Face safetensors, read (mmap) and write.
 *
 * File layout: u64 little-endian N | N bytes of JSON header | data section.
 *   header = {"NAME": {"dtype": "BF16", "shape": [r, c], "data_offsets": [b, e]},
 *             ..., "__metadata__": {"key": "value"}}
 * Offsets are relative to the data section. As in the reference
 * implementation, a valid file has: N <= 100 MiB and 8 + N <= file size, each
 * tensor's e - b == numel * dtype size, and the tensors, sorted by b, tile the
 * data section exactly (no overlap, no hole, nothing after the last one).
 * Everything here treats the file as hostile: sizes use checked 64-bit
 * arithmetic and every error names the file and, where there is one, the tensor.
 * One file on purpose: the reader and the writer share the header grammar, the
 * dtype table and the shard index, and are checked against each other.
 *
 * Sharded checkpoints: DIR/model.safetensors.index.json
 *   {"metadata": {"total_size": bytes}, "weight_map": {"NAME": "model-00001-of-0000n.safetensors"}}
 * and every tensor must live in exactly the shard the index names.
 *
 * Data are little-endian; so must be the host (checked at compile time). Tensor
 * data pointers are views into the mapping and may be unaligned when a file
 * was not written by us (conversions below go through memcpy). */
#include "dllm/safetensors.h"
#include "dllm/json_util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors.c assumes a little-endian host"
#endif

#define ST_INDEX_NAME "model.safetensors.index.json"
#define ST_SINGLE_NAME "model.safetensors"

/* ---------------------------------------------------------------- dtypes */

static const struct {
    const char *name;
    size_t size;
} dtype_info[ST_NDTYPES] = {
    [ST_F32] = {"F32", 4},         [ST_BF16] = {"BF16", 2},       [ST_F16] = {"F16", 2},
    [ST_F8_E4M3] = {"F8_E4M3", 1}, [ST_F8_E5M2] = {"F8_E5M2", 1}, [ST_F64] = {"F64", 8},
    [ST_I64] = {"I64", 8},         [ST_I32] = {"I32", 4},         [ST_I16] = {"I16", 2},
    [ST_I8] = {"I8", 1},           [ST_U8] = {"U8", 1},           [ST_BOOL] = {"BOOL", 1},
};

const char *st_dtype_name(st_dtype d)
{
    return (unsigned)d < ST_NDTYPES ? dtype_info[d].name : "?";
}

size_t st_dtype_size(st_dtype d)
{
    return (unsigned)d < ST_NDTYPES ? dtype_info[d].size : 0;
}

int st_dtype_parse(const char *name, st_dtype *out)
{
    for (int d = 0; d < ST_NDTYPES; d++)
        if (strcmp(name, dtype_info[d].name) == 0) {
            *out = (st_dtype)d;
            return 0;
        }
    return -1;
}

/* ---------------------------------------------------- scalar conversions */

static float bits_to_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint32_t f32_to_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* bf16 is the top half of an fp32. */
static float bf16_to_f32(uint16_t h) { return bits_to_f32((uint32_t)h << 16); }

/* Round to nearest even; NaN stays NaN (quiet bit set, sign kept); overflow -> inf. */
static uint16_t f32_to_bf16(float f)
{
    uint32_t u = f32_to_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

/* IEEE half: 1 sign, 5 exponent (bias 15), 10 mantissa bits. */
static float f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    if (exp == 0x1f)
        return bits_to_f32(sign | 0x7f800000u | (man << 13));
    if (exp == 0) /* zero or subnormal: man * 2^-24, exact in fp32 */
        return bits_to_f32(sign | f32_to_bits((float)man * 0x1p-24f));
    return bits_to_f32(sign | ((exp + 112) << 23) | (man << 13));
}

/* Round to nearest even, overflow -> inf, NaN stays NaN. */
static uint16_t f32_to_f16(float f)
{
    uint32_t u = f32_to_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) /* NaN */
        return (uint16_t)(sign | 0x7e00 | ((a >> 13) & 0x3ff));
    if (a >= 0x477ff000u) /* >= 65520 (halfway past 65504) and inf */
        return (uint16_t)(sign | 0x7c00);
    if (a < 0x38800000u) { /* below 2^-14: a half subnormal (or zero) */
        uint32_t e = a >> 23;
        if (e < 102) /* below 2^-25: rounds to zero */
            return sign;
        uint32_t m = (a & 0x7fffff) | 0x800000, shift = 126 - e;
        uint32_t q = m >> shift, r = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (r > half || (r == half && (q & 1)))
            q++;
        return (uint16_t)(sign | q);
    }
    uint32_t q = (a >> 13) - (112u << 10), r = a & 0x1fff;
    if (r > 0x1000 || (r == 0x1000 && (q & 1)))
        q++;
    return (uint16_t)(sign | q);
}

/* OCP FP8 E4M3 ("fn"): bias 7, no infinities, S.1111.111 is NaN, max 448. */
static float e4m3_to_f32(uint8_t b)
{
    float sign = (b & 0x80) ? -1.0f : 1.0f;
    int exp = (b >> 3) & 0xf, man = b & 7;
    if (exp == 0xf && man == 7)
        return copysignf(NAN, sign);
    if (exp == 0)
        return sign * ldexpf((float)man, -9); /* man/8 * 2^-6 */
    return sign * ldexpf((float)(8 + man), exp - 10); /* (1 + man/8) * 2^(exp-7) */
}

/* FP8 E5M2 is the top byte of an IEEE half. */
static float e5m2_to_f32(uint8_t b) { return f16_to_f32((uint16_t)(b << 8)); }

/* ----------------------------------------------------------- the archive */

typedef struct {
    char *path;
    void *map;   /* whole file, read-only; NULL when not mapped */
    size_t size;
    json_t *meta; /* "__metadata__" object or NULL */
} st_file;

struct st_archive {
    char *path;     /* what st_open was given */
    st_file *files; /* each file's path stays put: tensors point at it */
    int nfiles;
    st_tensor *t;   /* sorted by name */
    int n, cap;
};

static char *path_join(const char *dir, const char *name)
{
    size_t a = strlen(dir), b = strlen(name);
    while (a > 1 && dir[a - 1] == '/')
        a--;
    char *p = dllm_malloc(a + b + 2);
    memcpy(p, dir, a);
    p[a] = '/';
    memcpy(p + a + 1, name, b + 1);
    return p;
}

static void fmt_shape(char *buf, size_t cap, const int64_t *shape, int ndim)
{
    size_t k = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < ndim && k < cap; i++)
        k += (size_t)snprintf(buf + k, cap - k, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (k < cap)
        snprintf(buf + k, cap - k, "]");
}

/* a * b into *out, false on overflow (both non-negative). */
static bool mul_ok(int64_t a, int64_t b, int64_t *out)
{
    return !__builtin_mul_overflow(a, b, out);
}

typedef struct {
    uint64_t begin, end;
    int idx; /* into a->t */
} st_span;

static int cmp_span(const void *pa, const void *pb)
{
    const st_span *x = pa, *y = pb;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end)
        return x->end < y->end ? -1 : 1;
    return 0;
}

/* Reads [begin, end] as two non-negative integers. */
static bool parse_offsets(const json_t *v, uint64_t *begin, uint64_t *end)
{
    if (!json_is_array(v) || json_array_size(v) != 2)
        return false;
    const json_t *b = json_array_get(v, 0), *e = json_array_get(v, 1);
    if (!json_is_integer(b) || !json_is_integer(e) || json_integer_value(b) < 0 ||
        json_integer_value(e) < 0)
        return false;
    *begin = (uint64_t)json_integer_value(b);
    *end = (uint64_t)json_integer_value(e);
    return true;
}

/* Fills t (name already set) from the header entry; sets begin/end. */
static int parse_entry(const char *path, const char *name, const json_t *v, st_tensor *t,
                       uint64_t *begin, uint64_t *end, dllm_err *err)
{
    if (!json_is_object(v))
        return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: tensor '%s': entry is not an object (found %s)",
                            path, name, ju_type_name(v));
    const json_t *dt = json_object_get(v, "dtype"), *sh = json_object_get(v, "shape"),
                 *off = json_object_get(v, "data_offsets");
    if (!dt || !sh || !off)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: tensor '%s': missing '%s'", path, name,
                            !dt ? "dtype" : !sh ? "shape" : "data_offsets");
    if (!json_is_string(dt))
        return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: tensor '%s': 'dtype' must be a string, found %s",
                            path, name, ju_type_name(dt));
    if (st_dtype_parse(json_string_value(dt), &t->dtype))
        return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: tensor '%s': unknown dtype '%s'", path, name,
                            json_string_value(dt));
    if (!json_is_array(sh))
        return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: tensor '%s': 'shape' must be an array, found %s",
                            path, name, ju_type_name(sh));
    if (json_array_size(sh) > ST_MAX_DIMS)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: tensor '%s': %zu dimensions (at most %d supported)",
                            path, name, json_array_size(sh), ST_MAX_DIMS);
    t->ndim = (int)json_array_size(sh);
    int64_t numel = 1;
    bool overflow = false;
    for (int i = 0; i < t->ndim; i++) {
        const json_t *d = json_array_get(sh, (size_t)i);
        if (!json_is_integer(d) || json_integer_value(d) < 0)
            return dllm_err_set(err, DLLM_EXIT_INPUT,
                                "%s: tensor '%s': shape entries must be non-negative integers", path, name);
        t->shape[i] = json_integer_value(d);
        overflow = overflow || !mul_ok(numel, t->shape[i], &numel);
    }
    int64_t nbytes;
    if (overflow || !mul_ok(numel, (int64_t)st_dtype_size(t->dtype), &nbytes)) {
        char s[256];
        fmt_shape(s, sizeof s, t->shape, t->ndim);
        return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: tensor '%s': shape %s overflows 64 bits",
                            path, name, s);
    }
    t->numel = numel;
    if (!parse_offsets(off, begin, end))
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "%s: tensor '%s': 'data_offsets' must be [begin, end], two non-negative integers",
                            path, name);
    if (*end < *begin)
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "%s: tensor '%s': data_offsets [%llu, %llu] end before they begin", path,
                            name, (unsigned long long)*begin, (unsigned long long)*end);
    if (*end - *begin != (uint64_t)nbytes) {
        char s[256];
        fmt_shape(s, sizeof s, t->shape, t->ndim);
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "%s: tensor '%s': shape %s of dtype %s needs %lld bytes, but data_offsets "
                            "[%llu, %llu] hold %llu",
                            path, name, s, st_dtype_name(t->dtype), (long long)nbytes,
                            (unsigned long long)*begin, (unsigned long long)*end,
                            (unsigned long long)(*end - *begin));
    }
    t->nbytes = (size_t)nbytes;
    return DLLM_OK;
}

static void add_tensor_slot(st_archive *a)
{
    if (a->n == a->cap) {
        a->cap = a->cap ? 2 * a->cap : 64;
        a->t = dllm_realloc(a->t, (size_t)a->cap * sizeof *a->t);
    }
    memset(&a->t[a->n], 0, sizeof a->t[a->n]);
}

/* Checks that the spans tile [0, data_len) exactly. */
static int check_tiling(const st_archive *a, const char *path, st_span *sp, int n,
                        uint64_t data_len, dllm_err *err)
{
    qsort(sp, (size_t)n, sizeof *sp, cmp_span);
    uint64_t at = 0;
    for (int i = 0; i < n; i++) {
        if (sp[i].begin < at)
            return dllm_err_set(err, DLLM_EXIT_INPUT,
                                "%s: tensor '%s' (data_offsets [%llu, %llu]) overlaps tensor '%s' "
                                "(data_offsets [%llu, %llu])",
                                path, a->t[sp[i].idx].name, (unsigned long long)sp[i].begin,
                                (unsigned long long)sp[i].end, a->t[sp[i - 1].idx].name,
                                (unsigned long long)sp[i - 1].begin, (unsigned long long)sp[i - 1].end);
        if (sp[i].begin > at)
            return dllm_err_set(err, DLLM_EXIT_INPUT,
                                "%s: data section bytes [%llu, %llu) before tensor '%s' belong to no "
                                "tensor (a hole)",
                                path, (unsigned long long)at, (unsigned long long)sp[i].begin,
                                a->t[sp[i].idx].name);
        at = sp[i].end;
    }
    if (at != data_len)
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "%s: the data section has %llu bytes but the tensors cover only %llu "
                            "(trailing bytes)",
                            path, (unsigned long long)data_len, (unsigned long long)at);
    return DLLM_OK;
}

/* Maps one file, validates its header and appends its tensors to a. */
static int parse_file(st_archive *a, const char *path, dllm_err *err)
{
    st_file *f = &a->files[a->nfiles++];
    memset(f, 0, sizeof *f);
    f->path = dllm_strdup(path);
    path = f->path; /* tensors keep pointing at this copy */

    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: not a regular file", path);
    }
    size_t size = (size_t)sb.st_size;
    if (size < 8) {
        close(fd);
        if (size == 0)
            return dllm_err_set(err, DLLM_EXIT_INPUT,
                                "%s: empty file (a safetensors file starts with an 8-byte header length)",
                                path);
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "%s: truncated: %zu bytes, shorter than the 8-byte header length", path, size);
    }
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: mmap failed: %s", path, strerror(errno));
    f->map = map;
    f->size = size;
    const uint8_t *bytes = map;

    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = (n << 8) | bytes[i];
    if (n > ST_MAX_HEADER)
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "%s: header length %llu exceeds the %u-byte limit (corrupt or not a "
                            "safetensors file)",
                            path, (unsigned long long)n, ST_MAX_HEADER);
    if (n > size - 8)
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "%s: header length %llu runs past the end of the file (%zu bytes): truncated "
                            "or corrupt",
                            path, (unsigned long long)n, size);

    json_error_t jerr;
    json_t *root = json_loadb((const char *)bytes + 8, (size_t)n, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        if (json_error_code(&jerr) == json_error_duplicate_key) /* two tensors, one name */
            return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: header names a tensor twice: %s", path,
                                jerr.text);
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "%s: header is not valid JSON: %s (line %d, column %d)", path, jerr.text,
                            jerr.line, jerr.column);
    }
    if (!json_is_object(root)) {
        int rc = dllm_err_set(err, DLLM_EXIT_INPUT, "%s: header is not a JSON object (found %s)",
                              path, ju_type_name(root));
        json_decref(root);
        return rc;
    }

    const uint8_t *data = bytes + 8 + n;
    uint64_t data_len = size - 8 - n;
    size_t nent = json_object_size(root);
    st_span *sp = dllm_malloc(nent * sizeof *sp);
    int nsp = 0, rc = DLLM_OK;
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
        if (strcmp(key, "__metadata__") == 0) {
            const char *mk;
            json_t *mv;
            bool ok = json_is_object(v);
            if (ok)
                json_object_foreach(v, mk, mv) ok = ok && json_is_string(mv);
            if (!ok) {
                rc = dllm_err_set(err, DLLM_EXIT_INPUT,
                                  "%s: __metadata__ must be an object of string values", path);
                goto out;
            }
            f->meta = json_incref(v);
            continue;
        }
        add_tensor_slot(a);
        st_tensor *t = &a->t[a->n];
        uint64_t b = 0, e = 0;
        rc = parse_entry(path, key, v, t, &b, &e, err);
        if (rc)
            goto out;
        if (e > data_len) {
            rc = dllm_err_set(err, DLLM_EXIT_INPUT,
                              "%s: tensor '%s': data_offsets [%llu, %llu] run past the data section "
                              "(%llu bytes)",
                              path, key, (unsigned long long)b, (unsigned long long)e,
                              (unsigned long long)data_len);
            goto out;
        }
        t->name = dllm_strdup(key);
        t->file = path;
        t->data = data + b;
        sp[nsp++] = (st_span){b, e, a->n};
        a->n++;
    }
    rc = check_tiling(a, path, sp, nsp, data_len, err);
out:
    free(sp);
    json_decref(root);
    return rc;
}

static int cmp_tensor_name(const void *pa, const void *pb)
{
    return strcmp(((const st_tensor *)pa)->name, ((const st_tensor *)pb)->name);
}

static int cmp_str(const void *pa, const void *pb)
{
    return strcmp(*(const char *const *)pa, *(const char *const *)pb);
}

/* A shard name must stay inside the checkpoint directory. */
static bool safe_file_name(const char *s)
{
    return s[0] && !strchr(s, '/') && strcmp(s, ".") != 0 && strcmp(s, "..") != 0;
}

static int open_index(st_archive *a, const char *dir, const char *index_path, dllm_err *err)
{
    json_t *root;
    int rc = ju_load_file(&root, index_path, err);
    if (rc)
        return rc;
    const json_t *wm = json_object_get(root, "weight_map");
    const char **shards = NULL;
    char *sp = NULL;
    if (!json_is_object(wm) || json_object_size(wm) == 0) {
        rc = dllm_err_set(err, DLLM_EXIT_INPUT, "%s: key 'weight_map': expected a non-empty object",
                          index_path);
        goto out;
    }
    /* The distinct shard names, sorted (so files[0] is shard 1). */
    size_t nw = json_object_size(wm), ns = 0;
    shards = dllm_malloc(nw * sizeof *shards);
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)wm, key, v) {
        if (!json_is_string(v) || !safe_file_name(json_string_value(v))) {
            rc = dllm_err_set(err, DLLM_EXIT_INPUT,
                              "%s: weight_map['%s']: expected a file name in this directory", index_path,
                              key);
            goto out;
        }
        shards[ns++] = json_string_value(v);
    }
    qsort(shards, ns, sizeof *shards, cmp_str);
    size_t u = 0;
    for (size_t i = 0; i < ns; i++)
        if (u == 0 || strcmp(shards[u - 1], shards[i]) != 0)
            shards[u++] = shards[i];
    ns = u;

    a->files = dllm_calloc(ns, sizeof *a->files);
    for (size_t i = 0; i < ns; i++) {
        sp = path_join(dir, shards[i]);
        if (access(sp, F_OK) != 0) {
            rc = dllm_err_set(err, DLLM_EXIT_INPUT, "%s: %s (shard listed in %s)", sp, strerror(errno),
                              index_path);
            goto out;
        }
        rc = parse_file(a, sp, err);
        if (rc)
            goto out;
        free(sp);
        sp = NULL;
    }
    /* Every tensor must sit in the shard the index names... */
    for (int i = 0; i < a->n; i++) {
        const st_tensor *t = &a->t[i];
        const json_t *where = json_object_get(wm, t->name);
        if (!where) {
            rc = dllm_err_set(err, DLLM_EXIT_INPUT, "%s: tensor '%s' is not listed in %s", t->file,
                              t->name, index_path);
            goto out;
        }
        sp = path_join(dir, json_string_value(where));
        if (strcmp(sp, t->file) != 0) {
            rc = dllm_err_set(err, DLLM_EXIT_INPUT,
                              "%s: tensor '%s' is in this file, but %s places it in %s", t->file,
                              t->name, index_path, json_string_value(where));
            goto out;
        }
        free(sp);
        sp = NULL;
    }
    /* ...and every tensor the index names must exist (in that shard, by the above). */
    qsort(a->t, (size_t)a->n, sizeof *a->t, cmp_tensor_name);
    json_object_foreach((json_t *)wm, key, v) {
        if (!st_find(a, key)) {
            sp = path_join(dir, json_string_value(v));
            rc = dllm_err_set(err, DLLM_EXIT_INPUT, "%s: missing tensor '%s' (listed in %s)", sp, key,
                              index_path);
            goto out;
        }
    }
out:
    free(sp);
    free(shards);
    json_decref(root);
    return rc;
}

int st_open(st_archive **out, const char *path, dllm_err *err)
{
    *out = NULL;
    struct stat sb;
    if (stat(path, &sb) != 0)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: %s", path, strerror(errno));
    st_archive *a = dllm_calloc(1, sizeof *a);
    a->path = dllm_strdup(path);
    int rc;
    if (S_ISDIR(sb.st_mode)) {
        char *single = path_join(path, ST_SINGLE_NAME), *index = path_join(path, ST_INDEX_NAME);
        if (access(single, F_OK) == 0) {
            a->files = dllm_calloc(1, sizeof *a->files);
            rc = parse_file(a, single, err);
        } else if (access(index, F_OK) == 0) {
            rc = open_index(a, path, index, err);
        } else {
            rc = dllm_err_set(err, DLLM_EXIT_INPUT, "%s: no %s or %s in this directory", path,
                              ST_SINGLE_NAME, ST_INDEX_NAME);
        }
        free(single);
        free(index);
    } else {
        a->files = dllm_calloc(1, sizeof *a->files);
        rc = parse_file(a, path, err);
    }
    if (!rc) {
        qsort(a->t, (size_t)a->n, sizeof *a->t, cmp_tensor_name);
        for (int i = 1; i < a->n && !rc; i++)
            if (strcmp(a->t[i - 1].name, a->t[i].name) == 0)
                rc = dllm_err_set(err, DLLM_EXIT_INPUT, "%s: tensor '%s' appears twice (also in %s)",
                                  a->t[i].file, a->t[i].name, a->t[i - 1].file);
    }
    if (rc) {
        st_close(a);
        return rc;
    }
    *out = a;
    return DLLM_OK;
}

void st_close(st_archive *a)
{
    if (!a)
        return;
    for (int i = 0; i < a->n; i++)
        free((char *)a->t[i].name);
    free(a->t);
    for (int i = 0; i < a->nfiles; i++) {
        if (a->files[i].map)
            munmap(a->files[i].map, a->files[i].size);
        json_decref(a->files[i].meta);
        free(a->files[i].path);
    }
    free(a->files);
    free(a->path);
    free(a);
}

int st_count(const st_archive *a) { return a->n; }

const st_tensor *st_at(const st_archive *a, int i)
{
    return i >= 0 && i < a->n ? &a->t[i] : NULL;
}

const st_tensor *st_find(const st_archive *a, const char *name)
{
    int lo = 0, hi = a->n - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2, c = strcmp(name, a->t[mid].name);
        if (c == 0)
            return &a->t[mid];
        if (c < 0)
            hi = mid - 1;
        else
            lo = mid + 1;
    }
    return NULL;
}

const char *st_metadata(const st_archive *a, const char *key)
{
    if (a->nfiles == 0 || !a->files[0].meta)
        return NULL;
    return json_string_value(json_object_get(a->files[0].meta, key));
}

int st_read_f32(const st_archive *a, const char *name, const int64_t *shape, int ndim,
                float *dst, dllm_err *err)
{
    const st_tensor *t = st_find(a, name);
    size_t n = t ? (size_t)t->numel : 0;
    return st_read_f32_range(a, name, shape, ndim, 0, n, dst, err);
}

int st_read_f32_range(const st_archive *a, const char *name, const int64_t *shape, int ndim,
                      size_t off, size_t n, float *dst, dllm_err *err)
{
    const st_tensor *t = st_find(a, name);
    if (!t)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: missing tensor '%s'", a->path, name);
    bool same = t->ndim == ndim;
    for (int i = 0; same && i < ndim; i++)
        same = t->shape[i] == shape[i];
    if (!same) {
        char want[256], got[256];
        fmt_shape(want, sizeof want, shape, ndim);
        fmt_shape(got, sizeof got, t->shape, t->ndim);
        return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: tensor '%s': expected shape %s, found %s",
                            t->file, name, want, got);
    }
    if (off > (size_t)t->numel || n > (size_t)t->numel - off)
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "%s: tensor '%s': elements [%zu, %zu) outside its %lld", t->file,
                            name, off, off + n, (long long)t->numel);
    const uint8_t *src = (const uint8_t *)t->data + off * st_dtype_size(t->dtype);
    int64_t cnt = (int64_t)n;
    switch (t->dtype) {
    case ST_F32:
        if (cnt)
            memcpy(dst, src, n * sizeof(float));
        break;
    case ST_BF16: /* threads help with multi-GB checkpoints; tiny tensors stay serial */
#pragma omp parallel for if (cnt > (1 << 20))
        for (int64_t i = 0; i < cnt; i++) {
            uint16_t h;
            memcpy(&h, src + 2 * i, 2);
            dst[i] = bf16_to_f32(h);
        }
        break;
    case ST_F16:
#pragma omp parallel for if (cnt > (1 << 20))
        for (int64_t i = 0; i < cnt; i++) {
            uint16_t h;
            memcpy(&h, src + 2 * i, 2);
            dst[i] = f16_to_f32(h);
        }
        break;
    case ST_F8_E4M3:
        for (int64_t i = 0; i < cnt; i++)
            dst[i] = e4m3_to_f32(src[i]);
        break;
    case ST_F8_E5M2:
        for (int64_t i = 0; i < cnt; i++)
            dst[i] = e5m2_to_f32(src[i]);
        break;
    default:
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "%s: tensor '%s': dtype %s cannot be read as floating point (need F32, "
                            "BF16, F16, F8_E4M3 or F8_E5M2)",
                            t->file, name, st_dtype_name(t->dtype));
    }
    return DLLM_OK;
}

/* ----------------------------------------------------------------- writer */

typedef struct {
    char *name;
    st_dtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    uint8_t *bytes; /* nbytes, little-endian; NULL: streamed */
    size_t nbytes;
    st_fill_fn fill; /* streamed: produces the values at write time */
    void *ctx;
} st_wtensor;

struct st_writer {
    st_wtensor *t; /* in the order added (shards are filled in this order) */
    int n, cap;
    char **mkey, **mval;
    int nmeta;
};

st_writer *st_writer_new(void)
{
    st_writer *w = dllm_calloc(1, sizeof *w);
    st_writer_metadata(w, "format", "pt"); /* what torch/transformers write */
    return w;
}

void st_writer_free(st_writer *w)
{
    if (!w)
        return;
    for (int i = 0; i < w->n; i++) {
        free(w->t[i].name);
        free(w->t[i].bytes);
    }
    free(w->t);
    for (int i = 0; i < w->nmeta; i++) {
        free(w->mkey[i]);
        free(w->mval[i]);
    }
    free(w->mkey);
    free(w->mval);
    free(w);
}

void st_writer_metadata(st_writer *w, const char *key, const char *value)
{
    for (int i = 0; i < w->nmeta; i++)
        if (strcmp(w->mkey[i], key) == 0) {
            free(w->mval[i]);
            w->mval[i] = dllm_strdup(value);
            return;
        }
    w->mkey = dllm_realloc(w->mkey, (size_t)(w->nmeta + 1) * sizeof *w->mkey);
    w->mval = dllm_realloc(w->mval, (size_t)(w->nmeta + 1) * sizeof *w->mval);
    w->mkey[w->nmeta] = dllm_strdup(key);
    w->mval[w->nmeta] = dllm_strdup(value);
    w->nmeta++;
}

/* Validates and appends an entry with an uninitialised buffer of the right size. */
static st_wtensor *writer_push(st_writer *w, const char *name, st_dtype dtype, int ndim,
                               const int64_t *shape, bool alloc, dllm_err *err)
{
    if (!name[0] || strcmp(name, "__metadata__") == 0) {
        dllm_err_set(err, DLLM_EXIT_INPUT, "tensor name '%s' is not allowed", name);
        return NULL;
    }
    if ((unsigned)dtype >= ST_NDTYPES || ndim < 0 || ndim > ST_MAX_DIMS) {
        dllm_err_set(err, DLLM_EXIT_INPUT, "tensor '%s': bad dtype or %d dimensions", name, ndim);
        return NULL;
    }
    for (int i = 0; i < w->n; i++)
        if (strcmp(w->t[i].name, name) == 0) {
            dllm_err_set(err, DLLM_EXIT_INPUT, "tensor '%s' added twice", name);
            return NULL;
        }
    int64_t numel = 1, nbytes;
    bool ok = true;
    for (int i = 0; i < ndim; i++)
        ok = ok && shape[i] >= 0 && mul_ok(numel, shape[i], &numel);
    if (!ok || !mul_ok(numel, (int64_t)st_dtype_size(dtype), &nbytes)) {
        char s[256];
        fmt_shape(s, sizeof s, shape, ndim);
        dllm_err_set(err, DLLM_EXIT_INPUT, "tensor '%s': invalid shape %s", name, s);
        return NULL;
    }
    if (w->n == w->cap) {
        w->cap = w->cap ? 2 * w->cap : 64;
        w->t = dllm_realloc(w->t, (size_t)w->cap * sizeof *w->t);
    }
    st_wtensor *t = &w->t[w->n++];
    memset(t, 0, sizeof *t);
    t->name = dllm_strdup(name);
    t->dtype = dtype;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++)
        t->shape[i] = shape[i];
    t->nbytes = (size_t)nbytes;
    t->bytes = alloc ? dllm_malloc(t->nbytes ? t->nbytes : 1) : NULL;
    return t;
}

/* fp32 values to dtype's little-endian bytes (F32, BF16 or F16). */
static void encode_f32(st_dtype dtype, const float *src, size_t n, uint8_t *out)
{
    if (dtype == ST_F32) {
        if (n)
            memcpy(out, src, n * sizeof(float));
        return;
    }
    uint16_t *d = (uint16_t *)out;
    for (size_t i = 0; i < n; i++)
        d[i] = dtype == ST_BF16 ? f32_to_bf16(src[i]) : f32_to_f16(src[i]);
}

static int check_f32_dtype(const char *name, st_dtype dtype, dllm_err *err)
{
    if (dtype != ST_F32 && dtype != ST_BF16 && dtype != ST_F16)
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "tensor '%s': cannot store fp32 values as %s (F32, BF16 or F16 only)", name,
                            st_dtype_name(dtype));
    return DLLM_OK;
}

int st_writer_add_f32(st_writer *w, const char *name, st_dtype dtype, int ndim,
                      const int64_t *shape, const float *src, dllm_err *err)
{
    if (check_f32_dtype(name, dtype, err))
        return DLLM_EXIT_INPUT;
    st_wtensor *t = writer_push(w, name, dtype, ndim, shape, true, err);
    if (!t)
        return err ? err->code : DLLM_EXIT_INPUT;
    encode_f32(dtype, src, t->nbytes / st_dtype_size(dtype), t->bytes);
    return DLLM_OK;
}

int st_writer_add_f32_fn(st_writer *w, const char *name, st_dtype dtype, int ndim,
                         const int64_t *shape, st_fill_fn fill, void *ctx, dllm_err *err)
{
    if (check_f32_dtype(name, dtype, err))
        return DLLM_EXIT_INPUT;
    st_wtensor *t = writer_push(w, name, dtype, ndim, shape, false, err);
    if (!t)
        return err ? err->code : DLLM_EXIT_INPUT;
    t->fill = fill, t->ctx = ctx;
    return DLLM_OK;
}

/* The _ref form: a fill that reads the caller's array (ctx) itself. */
static int fill_from_array(void *ctx, size_t off, size_t n, float *dst, dllm_err *err)
{
    (void)err;
    memcpy(dst, (const float *)ctx + off, n * sizeof(float));
    return DLLM_OK;
}

int st_writer_add_f32_ref(st_writer *w, const char *name, st_dtype dtype, int ndim,
                          const int64_t *shape, const float *src, dllm_err *err)
{
    return st_writer_add_f32_fn(w, name, dtype, ndim, shape, fill_from_array, (void *)src, err);
}

int st_writer_add_raw(st_writer *w, const char *name, st_dtype dtype, int ndim,
                      const int64_t *shape, const void *bytes, dllm_err *err)
{
    st_wtensor *t = writer_push(w, name, dtype, ndim, shape, true, err);
    if (!t)
        return err ? err->code : DLLM_EXIT_INPUT;
    if (t->nbytes)
        memcpy(t->bytes, bytes, t->nbytes);
    return DLLM_OK;
}

/* Data order: widest dtype first, then by name (as the reference
 * implementation), so every tensor starts at a multiple of its element size
 * once the header is padded to 8 bytes. */
static int cmp_wtensor_layout(const void *pa, const void *pb)
{
    const st_wtensor *x = *(const st_wtensor *const *)pa, *y = *(const st_wtensor *const *)pb;
    size_t sx = st_dtype_size(x->dtype), sy = st_dtype_size(y->dtype);
    if (sx != sy)
        return sx > sy ? -1 : 1;
    return strcmp(x->name, y->name);
}

static char *tmp_name(const char *path)
{
    size_t n = strlen(path);
    char *p = dllm_malloc(n + 5);
    memcpy(p, path, n);
    memcpy(p + n, ".tmp", 5);
    return p;
}

/* A streamed tensor's values, ST_STREAM_CHUNK at a time, into f; the chunk buffers are
 * allocated on first use. Sets *bad on a write error; returns a fill's error. */
static int write_streamed(const st_wtensor *t, FILE *f, float **chunk, uint8_t **bytes, bool *bad,
                          dllm_err *err)
{
    size_t es = st_dtype_size(t->dtype), numel = t->nbytes / es;
    for (size_t off = 0; off < numel && !*bad; off += ST_STREAM_CHUNK) {
        size_t n = numel - off < ST_STREAM_CHUNK ? numel - off : ST_STREAM_CHUNK;
        if (!*chunk) {
            *chunk = dllm_malloc(ST_STREAM_CHUNK * sizeof(float));
            *bytes = dllm_malloc(ST_STREAM_CHUNK * sizeof(float));
        }
        int rc = t->fill(t->ctx, off, n, *chunk, err);
        if (rc)
            return rc;
        encode_f32(t->dtype, *chunk, n, *bytes);
        *bad = fwrite(*bytes, 1, n * es, f) != n * es;
    }
    return DLLM_OK;
}

/* Writes the tensors ts[0..n) as one file at path (through path.tmp). */
static int write_one(const st_writer *w, const st_wtensor **ts, int n, const char *path,
                     dllm_err *err)
{
    qsort(ts, (size_t)n, sizeof *ts, cmp_wtensor_layout);
    json_t *root = json_object(), *meta = json_object();
    for (int i = 0; i < w->nmeta; i++)
        json_object_set_new(meta, w->mkey[i], json_string(w->mval[i]));
    json_object_set_new(root, "__metadata__", meta);
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        json_t *e = json_object(), *shape = json_array();
        for (int d = 0; d < ts[i]->ndim; d++)
            json_array_append_new(shape, json_integer(ts[i]->shape[d]));
        json_object_set_new(e, "dtype", json_string(st_dtype_name(ts[i]->dtype)));
        json_object_set_new(e, "shape", shape);
        json_object_set_new(e, "data_offsets",
                            json_pack("[II]", (json_int_t)off, (json_int_t)(off + ts[i]->nbytes)));
        json_object_set_new(root, ts[i]->name, e);
        off += ts[i]->nbytes;
    }
    char *header = json_dumps(root, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(root);
    if (!header)
        return dllm_err_set(err, DLLM_EXIT_INTERNAL, "%s: cannot encode the header", path);
    size_t hlen = strlen(header), padded = (hlen + 7) & ~(size_t)7;
    uint8_t lenb[8];
    for (int i = 0; i < 8; i++)
        lenb[i] = (uint8_t)((uint64_t)padded >> (8 * i));

    char *tmp = tmp_name(path);
    int rc = DLLM_OK;
    float *chunk = NULL; /* the streamed tensors' one bounded buffer, and its bytes */
    uint8_t *bytes = NULL;
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        rc = dllm_err_set(err, DLLM_EXIT_INPUT, "%s: %s", tmp, strerror(errno));
        goto out;
    }
    bool bad = fwrite(lenb, 1, 8, f) != 8 || fwrite(header, 1, hlen, f) != hlen;
    for (size_t i = hlen; i < padded && !bad; i++)
        bad = fputc(' ', f) == EOF;
    for (int i = 0; i < n && !bad && !rc; i++) {
        if (ts[i]->bytes)
            bad = fwrite(ts[i]->bytes, 1, ts[i]->nbytes, f) != ts[i]->nbytes;
        else
            rc = write_streamed(ts[i], f, &chunk, &bytes, &bad, err);
    }
    bad = bad || fflush(f) != 0 || fsync(fileno(f)) != 0;
    bad = (fclose(f) != 0) || bad;
    if (rc) {
        unlink(tmp);
        goto out;
    }
    if (bad) {
        rc = dllm_err_set(err, DLLM_EXIT_INTERNAL, "%s: write failed: %s", tmp, strerror(errno));
        unlink(tmp);
        goto out;
    }
    if (rename(tmp, path) != 0) {
        rc = dllm_err_set(err, DLLM_EXIT_INTERNAL, "%s: cannot rename to %s: %s", tmp, path,
                          strerror(errno));
        unlink(tmp);
    }
out:
    free(chunk);
    free(bytes);
    free(tmp);
    free(header);
    return rc;
}

int st_writer_save_file(st_writer *w, const char *path, dllm_err *err)
{
    const st_wtensor **ts = dllm_malloc((size_t)w->n * sizeof *ts);
    for (int i = 0; i < w->n; i++)
        ts[i] = &w->t[i];
    int rc = write_one(w, ts, w->n, path, err);
    free(ts);
    return rc;
}

/* Is name "model-IIIII-of-NNNNN.safetensors"? Sets i and n. */
static bool is_shard_name(const char *name, int *i, int *n)
{
    int used = 0;
    if (strlen(name) != 32 || sscanf(name, "model-%5d-of-%5d.safetensors%n", i, n, &used) != 2)
        return false;
    return used == 32;
}

/* Removes files of an earlier save that the new layout does not use, so a
 * reader cannot pick up stale weights: nshards = 0 means a single file. */
static void remove_stale(const char *dir, int nshards)
{
    char *p = path_join(dir, nshards ? ST_SINGLE_NAME : ST_INDEX_NAME);
    unlink(p);
    free(p);
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        int i, n;
        if (is_shard_name(e->d_name, &i, &n) && (n != nshards || i < 1 || i > n)) {
            p = path_join(dir, e->d_name);
            unlink(p);
            free(p);
        }
    }
    closedir(d);
}

int st_writer_save_dir(st_writer *w, const char *dir, size_t max_shard_bytes, dllm_err *err)
{
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: cannot create directory: %s", dir,
                            strerror(errno));
    uint64_t total = 0;
    for (int i = 0; i < w->n; i++)
        total += w->t[i].nbytes;
    /* Greedy in the order added, as transformers: a new shard starts when the
     * next tensor would overflow the current one; a tensor larger than the
     * limit gets a shard of its own. */
    int *shard = dllm_malloc((size_t)(w->n ? w->n : 1) * sizeof *shard), nshards = 0;
    uint64_t cur = 0;
    for (int i = 0; i < w->n; i++) {
        if (nshards == 0 || (cur > 0 && cur + w->t[i].nbytes > max_shard_bytes)) {
            nshards++;
            cur = 0;
        }
        shard[i] = nshards - 1;
        cur += w->t[i].nbytes;
    }
    int rc;
    if (max_shard_bytes == 0 || total <= max_shard_bytes || nshards <= 1) {
        char *p = path_join(dir, ST_SINGLE_NAME);
        rc = st_writer_save_file(w, p, err);
        free(p);
        if (!rc)
            remove_stale(dir, 0);
        free(shard);
        return rc;
    }
    const st_wtensor **ts = dllm_malloc((size_t)w->n * sizeof *ts);
    json_t *index = json_object(), *wm = json_object();
    rc = DLLM_OK;
    for (int s = 0; s < nshards && !rc; s++) {
        char name[64];
        snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", s + 1, nshards);
        int n = 0;
        for (int i = 0; i < w->n; i++)
            if (shard[i] == s) {
                ts[n++] = &w->t[i];
                json_object_set_new(wm, w->t[i].name, json_string(name));
            }
        char *p = path_join(dir, name);
        rc = write_one(w, ts, n, p, err);
        free(p);
    }
    json_object_set_new(index, "metadata", json_pack("{sI}", "total_size", (json_int_t)total));
    json_object_set_new(index, "weight_map", wm);
    if (!rc) {
        char *p = path_join(dir, ST_INDEX_NAME);
        rc = ju_save_file(index, p, JSON_INDENT(2) | JSON_SORT_KEYS, err);
        free(p);
    }
    if (!rc)
        remove_stale(dir, nshards);
    json_decref(index);
    free(ts);
    free(shard);
    return rc;
}
