/* counting_backend.h: a backend that is another one but counts what crosses between it
 * and the host, so a suite can bound the transfers of a device loop. */
#ifndef DLLM_TEST_COUNTING_BACKEND_H
#define DLLM_TEST_COUNTING_BACKEND_H

#include "kernels/backend.h"

#include <stddef.h>

typedef struct {
    size_t n_down, bytes_down, max_down; /* downloads (backend -> host); the largest one */
    size_t n_up, bytes_up;               /* uploads (host -> backend) */
} tu_transfers;

/* The counts since the last tu_counting_backend or tu_count_reset. */
extern tu_transfers tu_counted;

/* real with upload and download counted; one at a time (static storage); resets the counts. */
dllm_backend *tu_counting_backend(dllm_backend *real);
void tu_count_reset(void);

#endif
