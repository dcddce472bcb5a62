/* nccl_emu.h: the subset of NCCL a data-parallel trainer needs, as a stand-in over MPI
 * for the emulation build (kernels/cuda_emu/nccl.cc); C and C++. The names and values
 * are NCCL 2's. Include kernels/cuda/nccl_api.h, which picks this or the real <nccl.h>.
 *
 * Semantics (documented differences from NCCL in nccl.cc's header):
 *  - ncclCommInitRank is collective over MPI_COMM_WORLD: every MPI process calls it,
 *    ranks sharing a unique id form one communicator (MPI_Comm_split by the id); MPI must
 *    be initialised first; built without MPI only single-rank communicators exist;
 *  - collectives run at once and block (the stream argument is accepted and ignored);
 *    buffers must be device memory of the emulation (cudaMalloc); in place allowed;
 *  - types: int8, uint8, int32, uint32, int64, uint64, float32, float64, bfloat16;
 *    ops: sum, prod, max, min, avg (bfloat16 reduces in fp32 and rounds once);
 *  - a lost peer is emulated on request (DLLM_EMU_NCCL_LOSE_PEER, nccl.cc): the
 *    collective is accepted, never completes (the emulated streams stay busy), and the
 *    communicator's asynchronous error becomes ncclRemoteError until ncclCommAbort. */
#ifndef DLLM_NCCL_EMU_H
#define DLLM_NCCL_EMU_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define NCCL_MAJOR 2
#define NCCL_MINOR 21
#define NCCL_PATCH 0
#define NCCL_UNIQUE_ID_BYTES 128
typedef struct {
    char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

typedef enum {
    ncclSuccess = 0,
    ncclUnhandledCudaError = 1,
    ncclSystemError = 2,
    ncclInternalError = 3,
    ncclInvalidArgument = 4,
    ncclInvalidUsage = 5,
    ncclRemoteError = 6,
    ncclInProgress = 7,
} ncclResult_t;

typedef enum { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4 } ncclRedOp_t;

typedef enum {
    ncclInt8 = 0, ncclChar = 0,
    ncclUint8 = 1,
    ncclInt32 = 2, ncclInt = 2,
    ncclUint32 = 3,
    ncclInt64 = 4,
    ncclUint64 = 5,
    ncclFloat16 = 6, ncclHalf = 6,
    ncclFloat32 = 7, ncclFloat = 7,
    ncclFloat64 = 8, ncclDouble = 8,
    ncclBfloat16 = 9,
} ncclDataType_t;

typedef struct ncclComm *ncclComm_t;
/* the stream type of the CUDA API (kernels/cuda_emu/cuda_emu.h), without including it */
struct CUstream_st;

const char *ncclGetErrorString(ncclResult_t r);
ncclResult_t ncclGetVersion(int *version);
ncclResult_t ncclGetUniqueId(ncclUniqueId *id);
ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t ncclCommAbort(ncclComm_t comm);
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError);
ncclResult_t ncclCommCount(const ncclComm_t comm, int *count);
ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank);
ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t type, ncclRedOp_t op, ncclComm_t comm,
                           struct CUstream_st *stream);
ncclResult_t ncclReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t type,
                        ncclRedOp_t op, int root, ncclComm_t comm, struct CUstream_st *stream);
ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t type, int root, ncclComm_t comm,
                           struct CUstream_st *stream);
ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                           ncclDataType_t type, ncclComm_t comm, struct CUstream_st *stream);
ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
                               ncclDataType_t type, ncclRedOp_t op, ncclComm_t comm,
                               struct CUstream_st *stream);
ncclResult_t ncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);

#ifdef __cplusplus
}
#endif
#endif
