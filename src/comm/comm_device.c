/* comm_device.c: the NCCL communicator of the data-parallel ranks (comm_device.h).
 *
 * Rank 0 makes the unique id and broadcasts it with MPI; every rank then joins with
 * ncclCommInitRank on its current device. Collectives go on the legacy default stream,
 * the one the CUDA backend's ops run on (kernels/cuda/backend_cuda.cu), so the sum is
 * ordered after the backward that wrote the gradients and before the clip that reads
 * them; the host waits for it, as the host path waits for MPI, polling the stream and
 * the communicator's asynchronous error, so a dead peer ends the wait with an error
 * instead of hanging it. At selection the ranks compare their devices' UUIDs: two ranks
 * on one device are refused (an input error naming both ranks and the device). */
#include "config.h"
#include "src/comm/comm_device.h"

#include "kernels/cuda_device.h"
#include "src/comm/comm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#if defined(HAVE_MPI) && (defined(DLLM_CUDA_EMULATION) || defined(HAVE_NCCL))
#define DEVICE_DP 1
/* <nccl.h> declares ncclGroupStart() without (void): C reads that as no prototype */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include "kernels/cuda/nccl_api.h"
#pragma GCC diagnostic pop

static ncclComm_t g_comm;
#endif

/* What one rank reports of its device, gathered by rank 0 to find two ranks on one. */
typedef struct {
    int rank, dev, count;
    char host[64], uuid[48], pci[16]; /* uuid "" when the rank has no device */
} dev_identity;

/* Collective: rank 0 compares the ranks' device UUIDs (unique across machines) and every
 * rank gets its verdict. Two ranks on one device would share its memory and its compute,
 * and NCCL refuses a communicator with a device twice in it, deep inside its set-up. */
static int refuse_shared_device(int d, int count, dllm_err *err)
{
    dev_identity me = {.rank = comm_rank(), .dev = d, .count = count};
    gethostname(me.host, sizeof me.host - 1);
    if (d >= 0 && dllm_cuda_device_identity(d, me.uuid, sizeof me.uuid, me.pci, sizeof me.pci))
        me.uuid[0] = '\0'; /* no identity: nothing to compare (the backend says why later) */
    void *all = NULL;
    size_t bytes = comm_gather_bytes(&me, sizeof me, &all);
    char verdict[512] = "";
    if (comm_rank() == 0) {
        const dev_identity *r = all;
        size_t n = bytes / sizeof me;
        for (size_t i = 0; i < n && !verdict[0]; i++)
            for (size_t j = i + 1; j < n && !verdict[0]; j++)
                if (r[i].uuid[0] && strcmp(r[i].uuid, r[j].uuid) == 0)
                    snprintf(verdict, sizeof verdict,
                             "device: cuda: ranks %d and %d share one device (%s, PCI %s: "
                             "device %d of the %d that host %s shows): every rank needs its "
                             "own; launch at most %d rank%s on host %s, or give each rank its "
                             "own GPU (CUDA_VISIBLE_DEVICES)",
                             r[i].rank, r[j].rank, r[i].uuid, r[i].pci, r[i].dev, r[i].count,
                             r[i].host, r[i].count, r[i].count == 1 ? "" : "s", r[i].host);
    }
    free(all);
    comm_bcast_bytes(verdict, sizeof verdict);
    if (verdict[0])
        return dllm_err_set(err, DLLM_EXIT_INPUT, "%s", verdict);
    return 0;
}

int comm_device_select(int *dev, dllm_err *err)
{
    if (dev)
        *dev = -1;
    if (comm_size() == 1)
        return 0;
    char why[256];
    int count = dllm_cuda_device_count(why, sizeof why);
    /* collective, so every rank asks whether or not it sees a device */
    int local = comm_local_rank(), d = -1;
    /* ranks of one node take its devices in turn; under CUDA_VISIBLE_DEVICES the count
     * is of the visible ones. A rank's failure here is its own: the others go on to the
     * check below and wait there, so it ends every rank (the caller's comm_abort). */
    if (count > 0) {
        d = local % count;
        if (dllm_cuda_set_device(d, why, sizeof why))
            return dllm_err_set(err, DLLM_EXIT_INTERNAL, "rank %d: %s", comm_rank(), why);
    }
    if (refuse_shared_device(d, count, err))
        return err->code;
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

/* Waits for the collective just issued, watching the communicator's asynchronous error
 * meanwhile: a peer that died or lost its network never joins, so waiting on the stream
 * alone would wait forever. On an error the communicator is aborted (its kernels end;
 * it cannot be used again) and the error names the collective. */
static int wait_collective(const char *what, size_t n, dllm_err *err)
{
    long pause_ns = 20000; /* doubling to 1 ms: short collectives pay little */
    for (;;) {
        ncclResult_t async = ncclSuccess, q = ncclCommGetAsyncError(g_comm, &async);
        if (q != ncclSuccess)
            async = q;
        if (async != ncclSuccess && async != ncclInProgress) {
            ncclCommAbort(g_comm);
            g_comm = NULL;
            return dllm_err_set(err, DLLM_EXIT_INTERNAL,
                                "rank %d: NCCL %s of %zu floats failed while in flight: %s (a "
                                "peer rank exited or its network failed); the communicator "
                                "was aborted (NCCL_DEBUG=INFO says more)",
                                comm_rank(), what, n, ncclGetErrorString(async));
        }
        char why[256];
        int idle = dllm_cuda_idle(why, sizeof why);
        if (idle < 0)
            return dllm_err_set(err, DLLM_EXIT_INTERNAL, "rank %d: waiting for the NCCL %s of "
                                "%zu floats: %s", comm_rank(), what, n, why);
        if (idle)
            return 0;
        struct timespec ts = {0, pause_ns};
        nanosleep(&ts, NULL);
        pause_ns = pause_ns < 1000000 ? 2 * pause_ns : 1000000;
    }
}

int comm_device_sum_f(float *x, size_t n, dllm_err *err)
{
    if (!g_comm || n == 0)
        return 0;
    ncclResult_t r = ncclAllReduce(x, x, n, ncclFloat32, ncclSum, g_comm, NULL);
    if (r != ncclSuccess && r != ncclInProgress)
        return dllm_err_set(err, DLLM_EXIT_INTERNAL, "rank %d: ncclAllReduce of %zu floats: %s",
                            comm_rank(), n, ncclGetErrorString(r));
    return wait_collective("all-reduce", n, err);
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
