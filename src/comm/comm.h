/* comm.h: the data-parallel communicator. Ranks are launched by MPI
 * (`mpirun -np N dllm-rl train ...`); built without MPI, or started without
 * an MPI launcher, there is one rank, MPI is never initialised, and every
 * collective is the identity. On the CPU
 * backend gradients are all-reduced with MPI itself (NCCL takes over on GPUs).
 * Sums are in the order MPI gives; ranks hold whole groups. */
#ifndef DLLM_COMM_H
#define DLLM_COMM_H

#include <stddef.h>
#include <stdint.h>

void comm_init(int *argc, char ***argv);
void comm_finalize(void);
int comm_rank(void);
int comm_size(void);
int comm_local_rank(void); /* among this node's ranks: picks the rank's device */
void comm_sum_d(double *x, size_t n);   /* in place, every rank gets the sum */
void comm_sum_f(float *x, size_t n);
void comm_max_d(double *x, size_t n);
void comm_bcast_bytes(void *buf, size_t n); /* from rank 0 */
void comm_barrier(void);
/* Ends every rank with exit status `code` (MPI_Abort; one rank: exit). For a failure
 * one rank meets alone after the ranks' agreement points: the others would wait for it
 * in their next collective (or inside NCCL's set-up) forever. */
void comm_abort(int code);
/* Gathers variable-size byte blocks to rank 0: out (rank 0 only) receives the
 * concatenation in rank order; returns its size. */
size_t comm_gather_bytes(const void *buf, size_t n, void **out);

#endif
