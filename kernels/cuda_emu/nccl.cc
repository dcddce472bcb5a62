/* nccl.cc: the NCCL stand-in of the emulation build, over MPI (kernels/cuda_emu/
 * nccl_emu.h). It lets multi-rank code of the CUDA backend run and be tested on hosts
 * without GPUs: `mpirun -np 2` processes, each with an emulated device.
 *
 * Differences from NCCL, by design: communicators come from MPI_Comm_split of
 * MPI_COMM_WORLD (so every MPI process must call ncclCommInitRank, and MPI must be
 * initialised); collectives complete before returning (no stream ordering to get wrong,
 * and no overlap); grouped calls run one by one in call order, so every rank must issue
 * them in the same order (NCCL requires that too); sums are MPI's, whose order is not
 * NCCL's ring or tree order (last-bit differences in float sums); bfloat16 is reduced in
 * fp32 and rounded once. Without MPI (configure found none) only single-rank
 * communicators exist and collectives are copies.
 *
 * A dead peer, emulated: with DLLM_EMU_NCCL_LOSE_PEER=n, this process's n-th collective
 * (counted from 1 over all its communicators) is accepted (ncclSuccess, as an enqueued
 * collective is) but moves no data and never completes: the emulated streams stay busy
 * (dllm_emu::stall) and ncclCommGetAsyncError answers ncclRemoteError, as NCCL does when
 * a peer process exits or its network fails. ncclCommAbort ends it: local, as NCCL's (it
 * does not free the MPI communicator, which would wait for the peer), and the streams are
 * idle again. Later collectives on an aborted communicator are the caller's error. */
#include "config.h"

#include "kernels/cuda_emu/emu_internal.h"
#include "kernels/cuda_emu/nccl_emu.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unistd.h>
#include <vector>

#ifdef HAVE_MPI
#define OMPI_SKIP_MPICXX 1 /* the C API only: the C++ bindings do not build warning-free */
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#endif

struct ncclComm {
    int nranks, rank;
    ncclResult_t async; /* ncclRemoteError once its peer is lost */
#ifdef HAVE_MPI
    MPI_Comm mc;
#endif
};

namespace {

size_t type_size(ncclDataType_t t)
{
    switch (t) {
    case ncclInt8:
    case ncclUint8: return 1;
    case ncclBfloat16: return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32: return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64: return 8;
    default: return 0;
    }
}

ncclResult_t bad(const char *fn, const char *why)
{
    fprintf(stderr, "dllm-rl: NCCL stand-in: %s: %s\n", fn, why);
    return ncclInvalidArgument;
}

bool dev(const void *p, size_t bytes) { return bytes == 0 || dllm_emu::is_device_range(p, bytes); }

float bf16_to_f32(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }
uint16_t f32_to_bf16(float f) { return __float2bfloat16_rn(f).x; }

#ifdef HAVE_MPI
bool mpi_type(ncclDataType_t t, MPI_Datatype *m)
{
    switch (t) {
    case ncclInt8: *m = MPI_INT8_T; return true;
    case ncclUint8: *m = MPI_UINT8_T; return true;
    case ncclInt32: *m = MPI_INT32_T; return true;
    case ncclUint32: *m = MPI_UINT32_T; return true;
    case ncclInt64: *m = MPI_INT64_T; return true;
    case ncclUint64: *m = MPI_UINT64_T; return true;
    case ncclFloat32: *m = MPI_FLOAT; return true;
    case ncclFloat64: *m = MPI_DOUBLE; return true;
    case ncclBfloat16: *m = MPI_FLOAT; return true; /* converted around the call */
    default: return false;
    }
}

bool mpi_op(ncclRedOp_t op, MPI_Op *m)
{
    switch (op) {
    case ncclSum:
    case ncclAvg: *m = MPI_SUM; return true;
    case ncclProd: *m = MPI_PROD; return true;
    case ncclMax: *m = MPI_MAX; return true;
    case ncclMin: *m = MPI_MIN; return true;
    }
    return false;
}
#endif

/* recv[i] /= nranks for avg (floating types; integers divide as integers). */
void divide(void *buf, size_t n, ncclDataType_t t, int nranks)
{
    for (size_t i = 0; i < n; i++) {
        switch (t) {
        case ncclFloat32: ((float *)buf)[i] /= (float)nranks; break;
        case ncclFloat64: ((double *)buf)[i] /= (double)nranks; break;
        case ncclInt32: ((int32_t *)buf)[i] /= nranks; break;
        case ncclUint32: ((uint32_t *)buf)[i] /= (uint32_t)nranks; break;
        case ncclInt64: ((int64_t *)buf)[i] /= nranks; break;
        case ncclUint64: ((uint64_t *)buf)[i] /= (uint64_t)nranks; break;
        case ncclInt8: ((int8_t *)buf)[i] = (int8_t)(((int8_t *)buf)[i] / nranks); break;
        case ncclUint8: ((uint8_t *)buf)[i] = (uint8_t)(((uint8_t *)buf)[i] / nranks); break;
        default: break;
        }
    }
}

/* Is this collective the one DLLM_EMU_NCCL_LOSE_PEER names? Then the communicator has
 * lost its peer: the caller returns ncclSuccess without communicating. */
bool peer_lost(ncclComm_t c)
{
    static long calls;
    const char *e = getenv("DLLM_EMU_NCCL_LOSE_PEER");
    calls++;
    if (c->async == ncclSuccess && !(e && *e && atol(e) == calls))
        return false;
    c->async = ncclRemoteError;
    dllm_emu::stall(true);
    return true;
}

/* The reduction of count elements into recv (all ranks, or root only when root >= 0). */
ncclResult_t reduce(const char *fn, const void *send, void *recv, size_t count,
                    ncclDataType_t t, ncclRedOp_t op, int root, ncclComm_t c)
{
    size_t es = type_size(t);
    if (!c)
        return bad(fn, "NULL communicator");
    if (!es)
        return bad(fn, "data type outside the stand-in (no fp16/fp8)");
    if ((int)op < 0 || (int)op > ncclAvg)
        return bad(fn, "unknown reduction");
    if (root >= c->nranks)
        return bad(fn, "root out of range");
    bool writes = root < 0 || root == c->rank;
    if (!dev(send, count * es) || (writes && !dev(recv, count * es)))
        return bad(fn, "buffers must be device memory (cudaMalloc) of count elements");
    if (peer_lost(c))
        return ncclSuccess;
    std::vector<float> fs, fr;
    const void *s = send;
    void *r = recv;
    if (t == ncclBfloat16) {
        fs.resize(count);
        fr.resize(count);
        for (size_t i = 0; i < count; i++)
            fs[i] = bf16_to_f32(((const uint16_t *)send)[i]);
        s = fs.data();
        r = fr.data();
    }
#ifdef HAVE_MPI
    MPI_Datatype mt = MPI_FLOAT;
    MPI_Op mo = MPI_SUM;
    if (!mpi_type(t, &mt) || !mpi_op(op, &mo))
        return bad(fn, "type or reduction outside the stand-in");
    bool in_place = s == r;
    int rc = root < 0 ? MPI_Allreduce(in_place ? MPI_IN_PLACE : s, r, (int)count, mt, mo, c->mc)
                      : MPI_Reduce(in_place && root == c->rank ? MPI_IN_PLACE : s, r,
                                   (int)count, mt, mo, root, c->mc);
    if (rc != MPI_SUCCESS)
        return ncclSystemError;
#else
    if (s != r)
        memcpy(r, s, count * (t == ncclBfloat16 ? 4 : es));
#endif
    if (!writes)
        return ncclSuccess;
    if (t == ncclBfloat16) {
        for (size_t i = 0; i < count; i++) {
            float v = fr[i] / (op == ncclAvg ? (float)c->nranks : 1.0f);
            ((uint16_t *)recv)[i] = f32_to_bf16(v);
        }
    } else if (op == ncclAvg) {
        divide(recv, count, t, c->nranks);
    }
    return ncclSuccess;
}

} // namespace

extern "C" {

const char *ncclGetErrorString(ncclResult_t r)
{
    switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error";
    case ncclSystemError: return "unhandled system error (MPI, in the stand-in)";
    case ncclInternalError: return "internal error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    }
    return "unknown result code";
}

ncclResult_t ncclGetVersion(int *version)
{
    if (!version)
        return ncclInvalidArgument;
    *version = NCCL_MAJOR * 10000 + NCCL_MINOR * 100 + NCCL_PATCH;
    return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
    static unsigned counter;
    if (!id)
        return ncclInvalidArgument;
    memset(id, 0, sizeof *id);
    long long t = (long long)std::chrono::steady_clock::now().time_since_epoch().count();
    snprintf(id->internal, sizeof id->internal, "dllm-emu:%ld:%lld:%u", (long)getpid(), t,
             ++counter);
    return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank)
{
    if (!comm || nranks < 1 || rank < 0 || rank >= nranks)
        return bad("ncclCommInitRank", "bad nranks or rank");
    *comm = NULL;
    ncclComm *c = new ncclComm();
    c->nranks = nranks;
    c->rank = rank;
#ifdef HAVE_MPI
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        delete c;
        fprintf(stderr, "dllm-rl: NCCL stand-in: ncclCommInitRank before MPI_Init\n");
        return ncclInvalidUsage;
    }
    /* the id's bytes (FNV-1a) as the split colour: ranks with one id share a comm */
    uint32_t h = 2166136261u;
    for (int i = 0; i < NCCL_UNIQUE_ID_BYTES; i++)
        h = (h ^ (unsigned char)id.internal[i]) * 16777619u;
    if (MPI_Comm_split(MPI_COMM_WORLD, (int)(h & 0x3FFFFFFF), rank, &c->mc) != MPI_SUCCESS) {
        delete c;
        return ncclSystemError;
    }
    int size = 0, me = 0;
    MPI_Comm_size(c->mc, &size);
    MPI_Comm_rank(c->mc, &me);
    if (size != nranks || me != rank) {
        MPI_Comm_free(&c->mc);
        delete c;
        return bad("ncclCommInitRank", "the processes sharing this id are not nranks ranks "
                                       "numbered 0 .. nranks-1");
    }
#else
    (void)id;
    if (nranks != 1) {
        delete c;
        return bad("ncclCommInitRank", "built without MPI: only single-rank communicators");
    }
#endif
    *comm = c;
    return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t c)
{
    if (!c)
        return ncclInvalidArgument;
#ifdef HAVE_MPI
    MPI_Comm_free(&c->mc);
#endif
    delete c;
    return ncclSuccess;
}

/* Local, as NCCL's: the MPI communicator is left (freeing it may wait on a lost peer). */
ncclResult_t ncclCommAbort(ncclComm_t c)
{
    if (!c)
        return ncclInvalidArgument;
    if (c->async == ncclSuccess)
        return ncclCommDestroy(c);
    dllm_emu::stall(false);
    delete c;
    return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t *async)
{
    if (!c || !async)
        return ncclInvalidArgument;
    *async = c->async;
    return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t c, int *count)
{
    if (!c || !count)
        return ncclInvalidArgument;
    *count = c->nranks;
    return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t c, int *rank)
{
    if (!c || !rank)
        return ncclInvalidArgument;
    *rank = c->rank;
    return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void *s, void *r, size_t count, ncclDataType_t t,
                           ncclRedOp_t op, ncclComm_t c, struct CUstream_st *)
{
    return reduce("ncclAllReduce", s, r, count, t, op, -1, c);
}

ncclResult_t ncclReduce(const void *s, void *r, size_t count, ncclDataType_t t, ncclRedOp_t op,
                        int root, ncclComm_t c, struct CUstream_st *)
{
    if (root < 0)
        return bad("ncclReduce", "root out of range");
    return reduce("ncclReduce", s, r, count, t, op, root, c);
}

ncclResult_t ncclBroadcast(const void *s, void *r, size_t count, ncclDataType_t t, int root,
                           ncclComm_t c, struct CUstream_st *)
{
    size_t es = type_size(t);
    if (!c || !es || root < 0 || root >= c->nranks)
        return bad("ncclBroadcast", "bad communicator, type or root");
    if ((c->rank == root && !dev(s, count * es)) || !dev(r, count * es))
        return bad("ncclBroadcast", "buffers must be device memory of count elements");
    if (peer_lost(c))
        return ncclSuccess;
    if (c->rank == root && s != r)
        memmove(r, s, count * es);
#ifdef HAVE_MPI
    if (MPI_Bcast(r, (int)(count * es), MPI_BYTE, root, c->mc) != MPI_SUCCESS)
        return ncclSystemError;
#endif
    return ncclSuccess;
}

ncclResult_t ncclAllGather(const void *s, void *r, size_t n, ncclDataType_t t, ncclComm_t c,
                           struct CUstream_st *)
{
    size_t es = type_size(t);
    if (!c || !es)
        return bad("ncclAllGather", "bad communicator or type");
    if (!dev(s, n * es) || !dev(r, n * es * (size_t)c->nranks))
        return bad("ncclAllGather", "buffers must be device memory (recv: nranks * sendcount)");
    if (peer_lost(c))
        return ncclSuccess;
    bool in_place = (const char *)s == (const char *)r + (size_t)c->rank * n * es;
#ifdef HAVE_MPI
    if (MPI_Allgather(in_place ? MPI_IN_PLACE : s, (int)(n * es), MPI_BYTE, r, (int)(n * es),
                      MPI_BYTE, c->mc) != MPI_SUCCESS)
        return ncclSystemError;
#else
    if (!in_place)
        memmove(r, s, n * es);
#endif
    return ncclSuccess;
}

ncclResult_t ncclReduceScatter(const void *s, void *r, size_t n, ncclDataType_t t,
                               ncclRedOp_t op, ncclComm_t c, struct CUstream_st *)
{
    size_t es = type_size(t);
    if (!c || !es)
        return bad("ncclReduceScatter", "bad communicator or type");
    size_t total = n * (size_t)c->nranks;
    if (!dev(s, total * es) || !dev(r, n * es))
        return bad("ncclReduceScatter", "buffers must be device memory (send: nranks * recvcount)");
    /* all-reduce into a host copy, keep this rank's slice: simple, and the same numbers */
    void *tmp = NULL;
    if (cudaMalloc(&tmp, total * es) != cudaSuccess)
        return ncclUnhandledCudaError;
    ncclResult_t rc = reduce("ncclReduceScatter", s, tmp, total, t, op, -1, c);
    if (rc == ncclSuccess)
        memmove(r, (char *)tmp + (size_t)c->rank * n * es, n * es);
    cudaFree(tmp);
    return rc;
}

ncclResult_t ncclGroupStart(void) { return ncclSuccess; }
ncclResult_t ncclGroupEnd(void) { return ncclSuccess; }

} /* extern "C" */
