/* wmma_emu.h: the subset of CUDA's warp matrix functions (<mma.h>, nvcuda::wmma) that
 * kernels/cuda/attention_tc.cu and kernels/cuda/gemm_int8.cu use, for the emulation build:
 * m16n16k16 tiles, __nv_bfloat16 operands with float accumulators and signed char operands
 * with int accumulators (matrix_a, matrix_b, row or column major).
 *
 * CUDA leaves the mapping of a fragment's elements to lanes unspecified; here it is fixed:
 * element e = 8 * lane + i of the 16x16 tile (row e / 16, column e % 16, in the tile's
 * logical indexing: A is M x K, B is K x N, the accumulator M x N) is x[i] of that lane.
 * Kernels must not depend on it (a real GPU uses another), which is why our kernels only
 * pass fragments between these functions and go through shared memory otherwise.
 *
 * Every load, store and mma is a warp collective, as CUDA requires ("must be called by all
 * threads in the warp", with the same pointer and stride): the lanes meet in
 * dllm_emu::warp_exchange, so a lane that skips the call, or calls with another pointer or
 * stride, fails the launch. Loads read and stores write each lane's own elements after the
 * meeting, so a lane that reads what other lanes stored without a __syncwarp or
 * __syncthreads in between can see stale data, as on a GPU. The documented restrictions
 * are checked: a 256-bit aligned pointer, ldm a multiple of 8 bf16 or 4 float elements.
 *
 * mma_sync(d, a, b, c): d = a b + c with each bf16 product exact in fp32 and the sixteen
 * products of an element added to c in k order in fp32 (round to nearest). The tensor
 * core's order and internal precision of that sum are not documented (PROBE 14,
 * PROBES.md); this is one fp32 summation, so tests compare against fp32 references with
 * bf16 tolerances, never bit for bit. */
#ifndef DLLM_WMMA_EMU_H
#define DLLM_WMMA_EMU_H

#include "kernels/cuda_emu/cuda_emu.h"

namespace nvcuda {
namespace wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

namespace detail {
enum { TILE = 16, PER_LANE = 8 };
/* Where element i of this lane sits in the tile (row, column). */
static inline void position(int i, int *r, int *c)
{
    int e = (int)::dllm_emu::lane_id() * PER_LANE + i;
    *r = e / TILE;
    *c = e % TILE;
}
struct call {
    const void *ptr;
    unsigned ldm, layout;
};
/* The warp meets; every lane must bring the same pointer, stride and layout. */
static inline void meet(const char *what, const void *ptr, unsigned ldm, unsigned layout,
                        size_t elem)
{
    if ((uintptr_t)ptr % 32)
        ::dllm_emu::warp_matrix_fail(what, "the pointer is not 256-bit aligned");
    if ((ldm * elem) % 16)
        ::dllm_emu::warp_matrix_fail(what, "ldm is not a multiple of 16 bytes");
    call mine = {ptr, ldm, layout}, all[32];
    ::dllm_emu::warp_exchange(0xffffffffu, &mine, sizeof mine, all, -1, what);
    for (int l = 0; l < 32; l++)
        if (all[l].ptr != ptr || all[l].ldm != ldm || all[l].layout != layout)
            ::dllm_emu::warp_matrix_fail(what, "the lanes pass different pointers, strides "
                                               "or layouts");
}
} // namespace detail

template <typename Use, int M, int N, int K, typename T, typename Layout = void>
struct fragment {
    static_assert(M == 16 && N == 16 && K == 16, "the emulation has the m16n16k16 shape only");
    enum { num_elements = detail::PER_LANE };
    T x[detail::PER_LANE];
};

template <typename Use, typename T, typename Layout>
static inline void fill_fragment(fragment<Use, 16, 16, 16, T, Layout> &f, float v)
{
    for (int i = 0; i < detail::PER_LANE; i++)
        f.x[i] = (T)v;
}
template <typename Use, typename Layout>
static inline void fill_fragment(fragment<Use, 16, 16, 16, __nv_bfloat16, Layout> &f, float v)
{
    for (int i = 0; i < detail::PER_LANE; i++)
        f.x[i] = __float2bfloat16_rn(v);
}

/* matrix_a (M x K) and matrix_b (K x N) tiles of bf16 or signed char in their declared
 * layout. */
template <typename Use, typename T, typename Layout>
static inline void load_matrix_sync(fragment<Use, 16, 16, 16, T, Layout> &f, const T *p,
                                    unsigned ldm)
{
    static_assert(std::is_same<T, __nv_bfloat16>::value || std::is_same<T, signed char>::value,
                  "operands are bf16 or signed char");
    static_assert(std::is_same<Layout, row_major>::value ||
                  std::is_same<Layout, col_major>::value, "an operand has a layout");
    const bool row = std::is_same<Layout, row_major>::value;
    detail::meet("wmma::load_matrix_sync", p, ldm, row, sizeof *p);
    for (int i = 0; i < detail::PER_LANE; i++) {
        int r, c;
        detail::position(i, &r, &c);
        f.x[i] = row ? p[(size_t)r * ldm + c] : p[(size_t)c * ldm + r];
    }
}

template <typename T>
static inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, T> &f, const T *p,
                                    unsigned ldm, layout_t layout)
{
    detail::meet("wmma::load_matrix_sync", p, ldm, layout, sizeof *p);
    for (int i = 0; i < detail::PER_LANE; i++) {
        int r, c;
        detail::position(i, &r, &c);
        f.x[i] = layout == mem_row_major ? p[(size_t)r * ldm + c] : p[(size_t)c * ldm + r];
    }
}

template <typename T>
static inline void store_matrix_sync(T *p, const fragment<accumulator, 16, 16, 16, T> &f,
                                     unsigned ldm, layout_t layout)
{
    detail::meet("wmma::store_matrix_sync", p, ldm, layout, sizeof *p);
    for (int i = 0; i < detail::PER_LANE; i++) {
        int r, c;
        detail::position(i, &r, &c);
        (layout == mem_row_major ? p[(size_t)r * ldm + c] : p[(size_t)c * ldm + r]) = f.x[i];
    }
}

template <typename LA, typename LB>
static inline void mma_sync(fragment<accumulator, 16, 16, 16, float> &d,
                            const fragment<matrix_a, 16, 16, 16, __nv_bfloat16, LA> &a,
                            const fragment<matrix_b, 16, 16, 16, __nv_bfloat16, LB> &b,
                            const fragment<accumulator, 16, 16, 16, float> &c)
{
    /* the whole of A and B, gathered from the lanes (this lane's elements of C are its own) */
    struct ab {
        __nv_bfloat16 a[detail::PER_LANE], b[detail::PER_LANE];
    } mine, all[32];
    static_assert(sizeof mine <= ::dllm_emu::WARP_SLOT_BYTES, "one exchange");
    memcpy(mine.a, a.x, sizeof mine.a);
    memcpy(mine.b, b.x, sizeof mine.b);
    ::dllm_emu::warp_exchange(0xffffffffu, &mine, sizeof mine, all, -1, "wmma::mma_sync");
    float out[detail::PER_LANE];
    for (int i = 0; i < detail::PER_LANE; i++) {
        int r, n;
        detail::position(i, &r, &n);
        float acc = c.x[i];
        for (int k = 0; k < detail::TILE; k++) {
            int ea = r * detail::TILE + k, eb = k * detail::TILE + n;
            float pa = __bfloat162float(all[ea / detail::PER_LANE].a[ea % detail::PER_LANE]);
            float pb = __bfloat162float(all[eb / detail::PER_LANE].b[eb % detail::PER_LANE]);
            acc += pa * pb; /* exact product: 8 + 8 significant bits */
        }
        out[i] = acc;
    }
    memcpy(d.x, out, sizeof out); /* d may be c */
}

/* d = a b + c on int8 codes: every product and sum exact in int32 (the codes' sums here
 * never reach 2^31; a tensor core's integer sums are exact too, in any order). */
template <typename LA, typename LB>
static inline void mma_sync(fragment<accumulator, 16, 16, 16, int> &d,
                            const fragment<matrix_a, 16, 16, 16, signed char, LA> &a,
                            const fragment<matrix_b, 16, 16, 16, signed char, LB> &b,
                            const fragment<accumulator, 16, 16, 16, int> &c)
{
    struct ab {
        signed char a[detail::PER_LANE], b[detail::PER_LANE];
    } mine, all[32];
    memcpy(mine.a, a.x, sizeof mine.a);
    memcpy(mine.b, b.x, sizeof mine.b);
    ::dllm_emu::warp_exchange(0xffffffffu, &mine, sizeof mine, all, -1, "wmma::mma_sync");
    int out[detail::PER_LANE];
    for (int i = 0; i < detail::PER_LANE; i++) {
        int r, n;
        detail::position(i, &r, &n);
        int64_t acc = c.x[i];
        for (int k = 0; k < detail::TILE; k++) {
            int ea = r * detail::TILE + k, eb = k * detail::TILE + n;
            acc += (int)all[ea / detail::PER_LANE].a[ea % detail::PER_LANE] *
                   (int)all[eb / detail::PER_LANE].b[eb % detail::PER_LANE];
        }
        if (acc > INT32_MAX || acc < INT32_MIN)
            ::dllm_emu::warp_matrix_fail("wmma::mma_sync", "an int32 accumulator overflows");
        out[i] = (int)acc;
    }
    memcpy(d.x, out, sizeof out);
}

} // namespace wmma
} // namespace nvcuda

#endif
