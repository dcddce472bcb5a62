/* param_io.c: parameter lists to and from safetensors (see param_io.h). */
#include "dllm/param_io.h"

#include "kernels/ops.h"

#include <errno.h>
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
    for (int i = 0; i < np && !rc; i++)
        rc = st_read_f32(ar, pl[i].name, pl[i].shape, pl[i].ndim, pl[i].data, err);
    st_close(ar);
    return rc;
}

int param_io_write_dir(const dllm_param *pl, int np, const param_lora *lora, int rank, float scale,
                       const dllm_model_config *cfg, const char *dir, st_dtype dtype,
                       size_t max_shard_bytes, dllm_err *err)
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
    st_writer *w = st_writer_new();
    st_writer_metadata(w, "format", "pt");
    int rc = 0;
    for (int i = 0; i < np && !rc; i++) {
        const float *src = pl[i].data;
        if (lora && lora[i].A) { /* merged: W + scale B A */
            const param_lora *ad = &lora[i];
            memcpy(tmp, pl[i].data, pl[i].numel * sizeof(float));
            op_gemm(false, false, ad->out, ad->in, rank, scale, ad->B, ad->A, 1.0f, tmp);
            src = tmp;
        }
        rc = st_writer_add_f32(w, pl[i].name, dtype, pl[i].ndim, pl[i].shape, src, err);
    }
    free(tmp);
    if (!rc)
        rc = st_writer_save_dir(w, dir, max_shard_bytes, err);
    st_writer_free(w);
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
        rc = st_writer_add_f32(w, pl[i].name, ST_F32, pl[i].ndim, pl[i].shape, pl[i].data, err);
    if (!rc)
        rc = st_writer_save_file(w, path, err);
    st_writer_free(w);
    return rc;
}
