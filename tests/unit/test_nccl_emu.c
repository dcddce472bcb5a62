/* test_nccl_emu: the NCCL stand-in of the emulation build (kernels/cuda_emu/nccl.cc) on
 * two MPI ranks: the test launches itself under `mpirun -np 2` and every rank checks
 * all-reduce (sum fp32, avg bf16 in place), reduce, broadcast, all-gather and
 * reduce-scatter on emulated device memory, that a completed collective leaves no
 * asynchronous error, and that a host buffer is refused.
 * SKIP (77) outside the emulation build, without MPI or without mpirun. */
#include "config.h"
#include "tests/harness/harness.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(DLLM_CUDA_EMULATION) && defined(HAVE_MPI)
#include "kernels/cuda/nccl_api.h"
#include "kernels/cuda_device.h"
#include "kernels/ops.h"

#include <math.h>
#include <mpi.h>
#include <unistd.h>

#define REQUIRE(cond, ...)                                                                  \
    do {                                                                                    \
        if (!(cond)) {                                                                      \
            fprintf(stderr, "rank %d: ", rank);                                             \
            fprintf(stderr, __VA_ARGS__);                                                   \
            fprintf(stderr, " (line %d)\n", __LINE__);                                      \
            fails++;                                                                        \
        }                                                                                   \
    } while (0)

/* One rank's part: returns the number of failed checks. */
static int child(void)
{
    int rank = 0, size = 0, fails = 0;
    MPI_Init(NULL, NULL);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    ncclUniqueId id;
    if (rank == 0)
        ncclGetUniqueId(&id);
    MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
    ncclComm_t comm;
    REQUIRE(ncclCommInitRank(&comm, size, id, rank) == ncclSuccess, "init");
    int cnt = 0, me = -1;
    ncclCommCount(comm, &cnt);
    ncclCommUserRank(comm, &me);
    REQUIRE(cnt == size && me == rank, "count %d rank %d", cnt, me);

    enum { N = 1000 };
    float h[N], g[2 * N];
    for (int i = 0; i < N; i++)
        h[i] = (float)(rank * 1000 + i);
    float *d = dllm_cuda_malloc(sizeof h), *d2 = dllm_cuda_malloc(2 * sizeof h);
    dllm_cuda_memcpy_h2d(d, h, sizeof h);
    REQUIRE(ncclAllReduce(d, d2, N, ncclFloat32, ncclSum, comm, NULL) == ncclSuccess, "allreduce");
    ncclResult_t async = ncclInternalError;
    REQUIRE(ncclCommGetAsyncError(comm, &async) == ncclSuccess && async == ncclSuccess,
            "asynchronous error %d after a completed all-reduce", (int)async);
    dllm_cuda_memcpy_d2h(g, d2, sizeof h);
    for (int i = 0; i < N; i++) /* ranks 0..size-1: sum of r*1000 + i */
        REQUIRE(g[i] == (float)(1000 * size * (size - 1) / 2 + size * i), "sum[%d] %g", i, g[i]);

    /* bf16 average in place */
    uint16_t hb[N], gb[N];
    for (int i = 0; i < N; i++)
        hb[i] = op_f32_to_bf16((float)(rank + 1) * 0.5f + (float)(i % 7));
    uint16_t *db = dllm_cuda_malloc(sizeof hb);
    dllm_cuda_memcpy_h2d(db, hb, sizeof hb);
    REQUIRE(ncclAllReduce(db, db, N, ncclBfloat16, ncclAvg, comm, NULL) == ncclSuccess, "avg");
    dllm_cuda_memcpy_d2h(gb, db, sizeof gb);
    for (int i = 0; i < N; i++) {
        float want = 0.5f * (float)(size + 1) * 0.5f + (float)(i % 7);
        REQUIRE(op_bf16_to_f32(gb[i]) == op_bf16_to_f32(op_f32_to_bf16(want)), "avg[%d]", i);
    }

    /* reduce to root 0 with max */
    dllm_cuda_memcpy_h2d(d, h, sizeof h);
    REQUIRE(ncclReduce(d, d2, N, ncclFloat32, ncclMax, 0, comm, NULL) == ncclSuccess, "reduce");
    if (rank == 0) {
        dllm_cuda_memcpy_d2h(g, d2, sizeof h);
        REQUIRE(g[5] == (float)((size - 1) * 1000 + 5), "max %g", g[5]);
    }

    /* broadcast from the last rank */
    dllm_cuda_memcpy_h2d(d, h, sizeof h);
    REQUIRE(ncclBroadcast(d, d, N, ncclFloat32, size - 1, comm, NULL) == ncclSuccess, "bcast");
    dllm_cuda_memcpy_d2h(g, d, sizeof h);
    REQUIRE(g[7] == (float)((size - 1) * 1000 + 7), "bcast %g", g[7]);

    /* all-gather: rank r's block at r * N */
    dllm_cuda_memcpy_h2d(d, h, sizeof h);
    float *dg = dllm_cuda_malloc(sizeof h * (size_t)size);
    REQUIRE(ncclAllGather(d, dg, N, ncclFloat32, comm, NULL) == ncclSuccess, "allgather");
    float *hg = malloc(sizeof h * (size_t)size);
    dllm_cuda_memcpy_d2h(hg, dg, sizeof h * (size_t)size);
    for (int r = 0; r < size; r++)
        REQUIRE(hg[(size_t)r * N + 3] == (float)(r * 1000 + 3), "gather[%d]", r);

    /* reduce-scatter: each rank keeps its N / size slice of the sum */
    dllm_cuda_memcpy_h2d(d, h, sizeof h);
    int slice = N / size;
    REQUIRE(ncclReduceScatter(d, d2, (size_t)slice, ncclFloat32, ncclSum, comm, NULL) ==
                ncclSuccess, "reducescatter");
    dllm_cuda_memcpy_d2h(g, d2, sizeof(float) * (size_t)slice);
    int i0 = rank * slice;
    REQUIRE(g[0] == (float)(1000 * size * (size - 1) / 2 + size * i0), "scatter %g", g[0]);

    /* host memory is not a device buffer: refused */
    REQUIRE(ncclAllReduce(h, h, N, ncclFloat32, ncclSum, comm, NULL) == ncclInvalidArgument,
            "host buffer accepted");
    ncclCommDestroy(comm);
    dllm_cuda_free(d), dllm_cuda_free(d2), dllm_cuda_free(db), dllm_cuda_free(dg);
    free(hg);
    int total = 0;
    MPI_Allreduce(&fails, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Finalize();
    return total;
}

START_TEST(test_two_ranks)
{
    char cmd[4300], self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    ck_assert_msg(n > 0, "cannot find this program's path");
    self[n] = '\0';
    snprintf(cmd, sizeof cmd,
             "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 "
             "mpirun --oversubscribe -np 2 '%s' --rank", self);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST
#endif

Suite *tu_suite(tu_ctx *ctx)
{
#if !defined(DLLM_CUDA_EMULATION)
    return tu_skip(ctx, "the NCCL stand-in exists in the emulation build (--enable-cuda-emulation)");
#elif !defined(HAVE_MPI)
    return tu_skip(ctx, "built without MPI (configure found no ompi-c)");
#else
    if (ctx->argc > 1 && strcmp(ctx->argv[1], "--rank") == 0) {
        ctx->status = child() ? EXIT_FAILURE : EXIT_SUCCESS;
        return NULL;
    }
    if (system("command -v mpirun >/dev/null 2>&1") != 0)
        return tu_skip(ctx, "mpirun not found (apt-get install openmpi-bin)");
    Suite *s = suite_create("nccl_emu");
    TCase *tc = tcase_create("mpi");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_two_ranks);
    suite_add_tcase(s, tc);
    return s;
#endif
}
