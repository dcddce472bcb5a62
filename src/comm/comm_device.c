/* comm_device.c: the NCCL communicator of the data-parallel ranks (comm_device.h).
 *
 * Rank 0 makes the unique id and broadcasts it with MPI; every rank then joins with
 * ncclCommInitRank on its current device. Collectives go on the legacy default stream,
 * the one the CUDA backend's ops run on (kernels/cuda/backend_cuda.cu), so the sum is
 * ordered after the backward that wrote the gradients and before the clip that reads
 * them; the host waits for it, as the host path waits for MPI. */
#include "config.h"
#include "src/comm/comm_device.h"

#include "kernels/cuda_device.h"
#include "src/comm/comm.h"

#include <stdio.h>

#if defined(HAVE_MPI) && (defined(DLLM_CUDA_EMULATION) || defined(HAVE_NCCL))
#define DEVICE_DP 1
/* <nccl.h> declares ncclGroupStart() without (void): C reads that as no prototype */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include "kernels/cuda/nccl_api.h"
#pragma GCC diagnostic pop

static ncclComm_t g_comm;
#endif

int comm_device_select(int *dev, dllm_err *err)
{
    if (dev)
        *dev = -1;
    if (comm_size() == 1)
        return 0;
    char why[256];
    int count = dllm_cuda_device_count(why, sizeof why);
    if (count <= 0)
        return 0;
    /* ranks of one node take its devices in turn; under CUDA_VISIBLE_DEVICES the count
     * is of the visible ones */
    int d = comm_local_rank() % count;
    if (dllm_cuda_set_device(d, why, sizeof why))
        return dllm_err_set(err, DLLM_EXIT_INTERNAL, "rank %d: %s", comm_rank(), why);
    if (dev)
        *dev = d;
    return 0;
}

#ifdef DEVICE_DP
int comm_device_open(dllm_err *err)
{
    if (comm_size() == 1 || g_comm)
        return 0;
    ncclUniqueId id;
    ncclResult_t r = ncclSuccess;
    if (comm_rank() == 0)
        r = ncclGetUniqueId(&id);
    /* rank 0's failure reaches the others as a flag in the broadcast's place */
    int ok = r == ncclSuccess;
    comm_bcast_bytes(&ok, sizeof ok);
    if (!ok)
        return dllm_err_set(err, DLLM_EXIT_INTERNAL, "ncclGetUniqueId on rank 0: %s",
                            comm_rank() == 0 ? ncclGetErrorString(r) : "failed");
    comm_bcast_bytes(&id, sizeof id);
    r = ncclCommInitRank(&g_comm, comm_size(), id, comm_rank());
    if (r != ncclSuccess) { /* the caller ends every rank (comm_abort): others may wait */
        g_comm = NULL;
        return dllm_err_set(err, DLLM_EXIT_INTERNAL,
                            "rank %d: ncclCommInitRank over %d ranks: %s (NCCL_DEBUG=INFO says "
                            "more)", comm_rank(), comm_size(), ncclGetErrorString(r));
    }
    return 0;
}

bool comm_device_active(void) { return g_comm != NULL; }

int comm_device_sum_f(float *x, size_t n, dllm_err *err)
{
    if (!g_comm || n == 0)
        return 0;
    ncclResult_t r = ncclAllReduce(x, x, n, ncclFloat32, ncclSum, g_comm, NULL);
    if (r != ncclSuccess)
        return dllm_err_set(err, DLLM_EXIT_INTERNAL, "rank %d: ncclAllReduce of %zu floats: %s",
                            comm_rank(), n, ncclGetErrorString(r));
    dllm_cuda_synchronize();
    return 0;
}

void comm_device_close(void)
{
    if (g_comm)
        ncclCommDestroy(g_comm);
    g_comm = NULL;
}

#else /* no NCCL: one rank only */

int comm_device_open(dllm_err *err)
{
    if (comm_size() == 1)
        return 0;
    return dllm_err_set(err, DLLM_EXIT_INPUT,
                        "device: cuda with %d ranks needs NCCL and MPI: this build has %s",
#ifdef HAVE_MPI
                        comm_size(), "no NCCL (configure found no libnccl)"
#else
                        comm_size(), "no MPI"
#endif
    );
}

bool comm_device_active(void) { return false; }

int comm_device_sum_f(float *x, size_t n, dllm_err *err)
{
    (void)x, (void)n, (void)err;
    return 0;
}

void comm_device_close(void) {}
#endif

int comm_sum_backend_f(dllm_backend *be, float *x, size_t n, dllm_err *err)
{
    if (be->kind != DLLM_BACKEND_CPU)
        return comm_device_sum_f(x, n, err);
    comm_sum_f(x, n);
    return 0;
}
