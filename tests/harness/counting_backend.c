/* counting_backend.c: see counting_backend.h. */
#include "tests/harness/counting_backend.h"

#include <string.h>

tu_transfers tu_counted;

static dllm_backend *real_be;
static dllm_backend_ops counting_ops;
static dllm_backend counting;

static void count_download(dllm_backend *be, void *dst, const void *src, size_t bytes)
{
    (void)be;
    tu_counted.n_down++;
    tu_counted.bytes_down += bytes;
    tu_counted.max_down = bytes > tu_counted.max_down ? bytes : tu_counted.max_down;
    real_be->ops->download(real_be, dst, src, bytes);
}

static void count_upload(dllm_backend *be, void *dst, const void *src, size_t bytes)
{
    (void)be;
    tu_counted.n_up++;
    tu_counted.bytes_up += bytes;
    real_be->ops->upload(real_be, dst, src, bytes);
}

void tu_count_reset(void) { memset(&tu_counted, 0, sizeof tu_counted); }

dllm_backend *tu_counting_backend(dllm_backend *real)
{
    real_be = real;
    counting_ops = *real->ops;
    counting_ops.download = count_download;
    counting_ops.upload = count_upload;
    counting = *real;
    counting.ops = &counting_ops;
    tu_count_reset();
    return &counting;
}
