/* comm_device.h: the device side of data parallelism. With several MPI ranks and
 * `device: cuda`, each rank drives one CUDA device (its local rank modulo the devices it
 * sees) and the device gradients are summed with NCCL; the communicator's unique id
 * travels over MPI (comm.h). With one rank none of this is made and every call is the
 * identity. Built without NCCL (or without MPI), opening it with several ranks is an
 * input error. The emulation build's NCCL stand-in sums in MPI's order. */
#ifndef DLLM_COMM_DEVICE_H
#define DLLM_COMM_DEVICE_H

#include "kernels/backend.h"
#include "kernels/base.h"

#include <stdbool.h>
#include <stddef.h>

/* Makes this rank's device current: call before anything is allocated on the device.
 * One rank: nothing. No visible device: nothing (the device backend says why later).
 * *dev (may be NULL) receives the chosen device, -1 when none was set. */
int comm_device_select(int *dev, dllm_err *err);
/* Creates the NCCL communicator over all ranks (collective: every rank calls it), on the
 * device select chose. One rank: nothing. */
int comm_device_open(dllm_err *err);
bool comm_device_active(void);
/* In place sum over the ranks of n floats of device memory (fp32); the identity when no
 * communicator is open. Returns when the sum is in x. */
int comm_device_sum_f(float *x, size_t n, dllm_err *err);
/* In place sum over the ranks of n floats in be's memory: the host's through MPI
 * (comm_sum_f), a device's through the communicator (comm_device_sum_f). */
int comm_sum_backend_f(dllm_backend *be, float *x, size_t n, dllm_err *err);
/* Destroys the communicator (before MPI is finalised). */
void comm_device_close(void);

#endif
