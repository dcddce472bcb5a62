/* safetensors.h: reading and writing Hugging Face safetensors checkpoints.
 *
 * Files are treated as hostile: the header length is bounded, the JSON must be
 * well formed, every tensor's dtype/shape/offsets must be consistent
 * (byte size = numel * dtype size), offsets ordered, disjoint and inside the
 * data section. Every error names the file and, where there is one, the tensor.
 * Reading maps the files (mmap); tensor data are read-only views. */
#ifndef DLLM_SAFETENSORS_H
#define DLLM_SAFETENSORS_H

#include "kernels/base.h"

#define ST_MAX_DIMS 8
#define ST_MAX_HEADER (100u << 20) /* 100 MiB, as the reference implementation */

typedef enum {
    ST_F32, ST_BF16, ST_F16, ST_F8_E4M3, ST_F8_E5M2,
    ST_F64, ST_I64, ST_I32, ST_I16, ST_I8, ST_U8, ST_BOOL,
    ST_NDTYPES
} st_dtype;

const char *st_dtype_name(st_dtype d); /* "F32", "BF16", ... */
size_t st_dtype_size(st_dtype d);
int st_dtype_parse(const char *name, st_dtype *out); /* 0 on success */

typedef struct {
    const char *name;
    st_dtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    int64_t numel;
    const void *data; /* mapped, read-only */
    size_t nbytes;
    const char *file; /* path of the file it lives in */
} st_tensor;

typedef struct st_archive st_archive;

/* Opens a .safetensors file, or a directory holding model.safetensors or
 * model.safetensors.index.json (+ shards). */
int st_open(st_archive **out, const char *path, dllm_err *err);
void st_close(st_archive *a);
int st_count(const st_archive *a);
const st_tensor *st_at(const st_archive *a, int i);
const st_tensor *st_find(const st_archive *a, const char *name);
/* __metadata__ value of the first file, or NULL. */
const char *st_metadata(const st_archive *a, const char *key);

/* Finds `name`, checks its shape equals shape[0..ndim) and converts it to fp32
 * into dst (F32, BF16, F16, F8_E4M3, F8_E5M2). Errors name file and tensor:
 * "DIR/model-00001-of-00002.safetensors: tensor 'model.transformer.wte.weight':
 *  expected shape [128, 64], found [128, 32]"; a missing tensor names the
 * archive path. */
int st_read_f32(const st_archive *a, const char *name, const int64_t *shape, int ndim,
                float *dst, dllm_err *err);
/* The same for the elements [off, off + n) of the tensor in row-major order (a bounded
 * host buffer streaming a large tensor somewhere else, e.g. up to a device). A range
 * outside the tensor is an input error naming file and tensor. */
int st_read_f32_range(const st_archive *a, const char *name, const int64_t *shape, int ndim,
                      size_t off, size_t n, float *dst, dllm_err *err);

/* Writer: collects tensors (data copied and converted from fp32 to dtype at
 * add time), then writes one file, or shards of at most max_shard_bytes plus
 * model.safetensors.index.json when the total exceeds it (max_shard_bytes = 0:
 * always one file). Files are written to a temporary name and renamed. */
typedef struct st_writer st_writer;
st_writer *st_writer_new(void);
void st_writer_free(st_writer *w);
void st_writer_metadata(st_writer *w, const char *key, const char *value);
int st_writer_add_f32(st_writer *w, const char *name, st_dtype dtype, int ndim,
                      const int64_t *shape, const float *src, dllm_err *err);
int st_writer_add_raw(st_writer *w, const char *name, st_dtype dtype, int ndim,
                      const int64_t *shape, const void *bytes, dllm_err *err);
/* Streamed tensors: nothing is copied at add time; the values are produced while the
 * file is written, ST_STREAM_CHUNK elements at a time through one bounded host buffer,
 * so a checkpoint never holds a second copy of the model in host memory. fill writes
 * the fp32 values of elements [off, off + n) to dst, in order of off within a tensor
 * (a tensor's chunks are asked for consecutively); a nonzero return aborts the save
 * with err set. The _ref form reads src itself when the file is written: src must
 * stay valid and unchanged until the save returns. F32, BF16 or F16. */
#define ST_STREAM_CHUNK ((size_t)1 << 22)
typedef int (*st_fill_fn)(void *ctx, size_t off, size_t n, float *dst, dllm_err *err);
int st_writer_add_f32_fn(st_writer *w, const char *name, st_dtype dtype, int ndim,
                         const int64_t *shape, st_fill_fn fill, void *ctx, dllm_err *err);
int st_writer_add_f32_ref(st_writer *w, const char *name, st_dtype dtype, int ndim,
                          const int64_t *shape, const float *src, dllm_err *err);
/* dir + "model.safetensors" (or sharded "model-0000i-of-0000n.safetensors"). */
int st_writer_save_dir(st_writer *w, const char *dir, size_t max_shard_bytes, dllm_err *err);
/* One file at an explicit path (optimizer state, adapters). */
int st_writer_save_file(st_writer *w, const char *path, dllm_err *err);

#endif
