#include "config.h"
#include "src/comm/comm.h"

#include "kernels/base.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef HAVE_MPI
#include <mpi.h>

static int inited;

/* Started by an MPI launcher? (mpirun/PMIx set these.) A plain process stays a
 * single rank without touching MPI at all. */
static int launched_by_mpi(void)
{
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK",
                                       "PMI_SIZE"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        if (getenv(vars[i]))
            return 1;
    return 0;
}

void comm_init(int *argc, char ***argv)
{
    if (!launched_by_mpi())
        return;
    int flag = 0;
    MPI_Initialized(&flag);
    if (!flag)
        MPI_Init(argc, argv);
    inited = 1;
}

void comm_finalize(void)
{
    int fin = 0;
    if (inited && (MPI_Finalized(&fin), !fin))
        MPI_Finalize();
}

int comm_rank(void)
{
    int r = 0;
    if (inited)
        MPI_Comm_rank(MPI_COMM_WORLD, &r);
    return r;
}

int comm_size(void)
{
    int s = 1;
    if (inited)
        MPI_Comm_size(MPI_COMM_WORLD, &s);
    return s;
}

/* The rank among the processes of this node (those that can share memory): MPI's own
 * answer, which every launcher gives, rather than a launcher's environment variable. */
int comm_local_rank(void)
{
    if (comm_size() == 1)
        return 0;
    MPI_Comm node;
    int r = 0;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, comm_rank(), MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &r);
    MPI_Comm_free(&node);
    return r;
}

/* MPI counts are int: reduce in pieces */
#define PIECE ((size_t)1 << 28)

void comm_sum_d(double *x, size_t n)
{
    if (comm_size() > 1)
        for (size_t o = 0; o < n; o += PIECE)
            MPI_Allreduce(MPI_IN_PLACE, x + o, (int)(n - o < PIECE ? n - o : PIECE), MPI_DOUBLE,
                          MPI_SUM, MPI_COMM_WORLD);
}

void comm_sum_f(float *x, size_t n)
{
    if (comm_size() > 1)
        for (size_t o = 0; o < n; o += PIECE)
            MPI_Allreduce(MPI_IN_PLACE, x + o, (int)(n - o < PIECE ? n - o : PIECE), MPI_FLOAT,
                          MPI_SUM, MPI_COMM_WORLD);
}

void comm_max_d(double *x, size_t n)
{
    if (comm_size() > 1)
        MPI_Allreduce(MPI_IN_PLACE, x, (int)n, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
}

void comm_bcast_bytes(void *buf, size_t n)
{
    if (comm_size() > 1)
        MPI_Bcast(buf, (int)n, MPI_BYTE, 0, MPI_COMM_WORLD);
}

void comm_barrier(void)
{
    if (comm_size() > 1)
        MPI_Barrier(MPI_COMM_WORLD);
}

void comm_abort(int code)
{
    fflush(stdout);
    fflush(stderr);
    if (comm_size() > 1)
        MPI_Abort(MPI_COMM_WORLD, code);
    exit(code);
}

size_t comm_gather_bytes(const void *buf, size_t n, void **out)
{
    int size = comm_size(), rank = comm_rank();
    if (size == 1) {
        *out = dllm_malloc(n);
        memcpy(*out, buf, n);
        return n;
    }
    int mine = (int)n, *counts = NULL, *displs = NULL;
    if (rank == 0) {
        counts = dllm_malloc(sizeof *counts * (size_t)size);
        displs = dllm_malloc(sizeof *displs * (size_t)size);
    }
    MPI_Gather(&mine, 1, MPI_INT, counts, 1, MPI_INT, 0, MPI_COMM_WORLD);
    size_t total = 0;
    if (rank == 0)
        for (int r = 0; r < size; r++) {
            displs[r] = (int)total;
            total += (size_t)counts[r];
        }
    char *all = rank == 0 ? dllm_malloc(total ? total : 1) : NULL;
    MPI_Gatherv(buf, mine, MPI_BYTE, all, counts, displs, MPI_BYTE, 0, MPI_COMM_WORLD);
    free(counts);
    free(displs);
    *out = all;
    return total;
}

#else /* one rank */

void comm_init(int *argc, char ***argv) { (void)argc; (void)argv; }
void comm_finalize(void) {}
int comm_rank(void) { return 0; }
int comm_size(void) { return 1; }
int comm_local_rank(void) { return 0; }
void comm_sum_d(double *x, size_t n) { (void)x; (void)n; }
void comm_sum_f(float *x, size_t n) { (void)x; (void)n; }
void comm_max_d(double *x, size_t n) { (void)x; (void)n; }
void comm_bcast_bytes(void *buf, size_t n) { (void)buf; (void)n; }
void comm_barrier(void) {}
void comm_abort(int code)
{
    fflush(stdout);
    exit(code);
}

size_t comm_gather_bytes(const void *buf, size_t n, void **out)
{
    *out = dllm_malloc(n ? n : 1);
    memcpy(*out, buf, n);
    return n;
}
#endif
