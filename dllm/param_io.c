/* param_io.c: parameter lists to and from safetensors (see param_io.h). */
#include "dllm/param_io.h"

#include "kernels/ops.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int param_io_read(const dllm_param *pl, int np, const char *path, dllm_err *err)
{
    st_archive *ar;
    int rc = st_open(&ar, path, err);
    if (rc)
        return rc;
    for (int i = 0; i < np && !rc; i++) {
        rc = st_read_f32(ar, pl[i].name, pl[i].shape, pl[i].ndim, pl[i].data, err);
        if (!rc)
            rc = param_io_check_finite(&pl[i], path, err);
    }
    st_close(ar);
    return rc;
}

int param_io_check_finite(const dllm_param *p, const char *path, dllm_err *err)
{
    for (size_t k = 0; k < p->numel; k++)
        if (!isfinite(p->data[k]))
            return dllm_err_set(err, DLLM_EXIT_INPUT,
                                "%s: tensor '%s' holds a non-finite value (%g at element %zu): "
                                "the weights are damaged or come from a run that diverged",
                                path, p->name, (double)p->data[k], k);
    return 0;
}

/* What one streamed parameter's fill reads: its values through src (or its data), with
 * its adapter merged into the shared one-tensor buffer first. */
typedef struct {
    const dllm_param *p;
    int i;
    const param_lora *ad; /* NULL: no adapter */
    int rank;
    float scale;
    const param_source *src;
    float *tmp; /* (largest adapted weight) shared: tensors are written one at a time */
} param_fill;

static int read_values(const param_fill *f, size_t off, size_t n, float *dst, dllm_err *err)
{
    if (f->src && f->src->read)
        return f->src->read(f->src->ctx, f->i, off, n, dst, err);
    memcpy(dst, f->p->data + off, n * sizeof(float));
    return 0;
}

static int fill_param(void *ctx, size_t off, size_t n, float *dst, dllm_err *err)
{
    const param_fill *f = ctx;
    if (!f->ad)
        return read_values(f, off, n, dst, err);
    if (off == 0) { /* the tensor's first chunk: W + scale B A, whole, into tmp */
        int rc = read_values(f, 0, f->p->numel, f->tmp, err);
        if (rc)
            return rc;
        op_gemm(false, false, f->ad->out, f->ad->in, f->rank, f->scale, f->ad->B, f->ad->A, 1.0f,
                f->tmp);
    }
    memcpy(dst, f->tmp + off, n * sizeof(float));
    return 0;
}

int param_io_write_dir(const dllm_param *pl, int np, const param_lora *lora, int rank, float scale,
                       const param_source *src, const dllm_model_config *cfg, const char *dir,
                       st_dtype dtype, size_t max_shard_bytes, dllm_err *err)
{
    if (dtype != ST_F32 && dtype != ST_BF16)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: weights can be saved as F32 or BF16, not %s",
                            dir, st_dtype_name(dtype));
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: cannot create directory: %s", dir,
                            strerror(errno));
    size_t maxw = 0;
    for (int i = 0; lora && i < np; i++)
        if (lora[i].A && pl[i].numel > maxw)
            maxw = pl[i].numel;
    float *tmp = maxw ? dllm_malloc(maxw * sizeof(float)) : NULL;
    param_fill *fills = dllm_calloc((size_t)(np ? np : 1), sizeof *fills);
    st_writer *w = st_writer_new();
    st_writer_metadata(w, "format", "pt");
    int rc = 0;
    for (int i = 0; i < np && !rc; i++) {
        bool adapted = lora && lora[i].A;
        if (!adapted && !(src && src->read)) { /* the host array itself, read as written */
            rc = st_writer_add_f32_ref(w, pl[i].name, dtype, pl[i].ndim, pl[i].shape, pl[i].data,
                                       err);
            continue;
        }
        fills[i] = (param_fill){&pl[i], i, adapted ? &lora[i] : NULL, rank, scale, src, tmp};
        rc = st_writer_add_f32_fn(w, pl[i].name, dtype, pl[i].ndim, pl[i].shape, fill_param,
                                  &fills[i], err);
    }
    if (!rc)
        rc = st_writer_save_dir(w, dir, max_shard_bytes, err);
    st_writer_free(w);
    free(fills);
    free(tmp);
    if (rc)
        return rc;
    dllm_model_config c = *cfg;
    snprintf(c.torch_dtype, sizeof c.torch_dtype, "%s", dtype == ST_F32 ? "float32" : "bfloat16");
    return dllm_config_save(&c, dir, err);
}

int param_io_write_file(const dllm_param *pl, int np, const char *path, dllm_err *err)
{
    st_writer *w = st_writer_new();
    st_writer_metadata(w, "format", "pt");
    int rc = 0;
    for (int i = 0; i < np && !rc; i++)
        rc = st_writer_add_f32_ref(w, pl[i].name, ST_F32, pl[i].ndim, pl[i].shape, pl[i].data,
                                   err);
    if (!rc)
        rc = st_writer_save_file(w, path, err);
    st_writer_free(w);
    return rc;
}
