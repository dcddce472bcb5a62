/* blas_threads.c: see blas_threads.h. */
#include "kernels/cpu/blas_threads.h"

#include <cblas.h>
#ifdef _OPENMP
#include <omp.h>
#endif

int blas_hold(void)
{
#ifdef _OPENMP
    if (omp_in_parallel())
        return 0;
#endif
    if (openblas_get_parallel() != OPENBLAS_THREAD)
        return 0;
    int n = openblas_get_num_threads();
    if (n <= 1)
        return 0;
    openblas_set_num_threads(1);
    return n;
}

void blas_release(int saved)
{
    if (saved > 0)
        openblas_set_num_threads(saved);
}
