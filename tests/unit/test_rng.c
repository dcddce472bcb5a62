/* test_rng: the counter-based streams of kernels/rng.h.
 *  - dllm_rng_uniform never returns 0 or 1: the top 53-bit value k = 2^53 - 1,
 *    whose (k + 0.5) / 2^53 rounds to 1.0, is reached through the inverse of
 *    the mixing function and gives 1 - 2^-53; its neighbours keep their values;
 *  - every other draw is bit-identical to (k + 0.5) / 2^53 rounded (a sweep of
 *    k over both ends of the range and random draws);
 *  - the stream is a pure function of (key, counter); below() stays in range. */
#include "kernels/rng.h"
#include "tests/harness/harness.h"

#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

static const double TWO53 = 9007199254740992.0;

/* the multiplicative inverse of an odd a modulo 2^64 (Newton's iteration) */
static uint64_t inv_mod64(uint64_t a)
{
    uint64_t x = a; /* correct to 3 bits for odd a */
    for (int i = 0; i < 6; i++)
        x *= 2 - a * x;
    return x;
}

/* inverse of y = x ^ (x >> s) */
static uint64_t unxorshift(uint64_t y, int s)
{
    uint64_t x = y;
    for (int i = 0; i < 64 / s + 1; i++)
        x = y ^ (x >> s);
    return x;
}

/* inverse of SplitMix64's finaliser as kernels/rng.c applies it */
static uint64_t unmix64(uint64_t z)
{
    z = unxorshift(z, 31);
    z *= inv_mod64(0x94d049bb133111ebULL);
    z = unxorshift(z, 27);
    z *= inv_mod64(0xbf58476d1ce4e5b9ULL);
    return unxorshift(z, 30);
}

/* a stream whose next draw is the 64-bit value v */
static dllm_rng stream_drawing(uint64_t v)
{
    return (dllm_rng){.key = unmix64(v) - 0x9e3779b97f4a7c15ULL, .ctr = 0};
}

static double expected(uint64_t k)
{
    return ((double)k + 0.5) * (1.0 / TWO53);
}

START_TEST(inverse_reaches_the_value)
{
    const uint64_t vs[3] = {0, ~0ULL, 0x0123456789abcdefULL};
    for (int i = 0; i < 3; i++) {
        dllm_rng r = stream_drawing(vs[i]);
        ck_assert_uint_eq(dllm_rng_u64(&r), vs[i]);
    }
}
END_TEST

START_TEST(uniform_never_reaches_one)
{
    const uint64_t top = (1ULL << 53) - 1;
    /* the raw formula does round to 1 here: the case the fix is for */
    ck_assert(expected(top) == 1.0);
    for (uint64_t low = 0; low < 2048; low += 2047) { /* the 11 discarded bits */
        dllm_rng r = stream_drawing((top << 11) | low);
        const double u = dllm_rng_uniform(&r);
        ck_assert_msg(u < 1.0, "u = %.17g", u);
        ck_assert(u == 1.0 - 1.0 / TWO53);
        ck_assert(-log(u) > 0.0); /* a finite Gumbel score */
    }
    /* the bottom: k = 0 gives 2^-54, not 0 */
    dllm_rng r = stream_drawing(0);
    ck_assert(dllm_rng_uniform(&r) == 0.5 / TWO53);
}
END_TEST

START_TEST(other_draws_unchanged)
{
    /* both ends of the range (where rounding to even happens), and random k */
    for (uint64_t j = 1; j < 4096; j++) {
        const uint64_t ks[2] = {((1ULL << 53) - 1) - j, j};
        for (int e = 0; e < 2; e++) {
            dllm_rng r = stream_drawing(ks[e] << 11 | (j & 2047));
            const double u = dllm_rng_uniform(&r);
            ck_assert_msg(u == expected(ks[e]), "k = %llu", (unsigned long long)ks[e]);
            ck_assert(u > 0.0 && u < 1.0);
        }
    }
    dllm_rng s = dllm_rng_make(7, 1, 2, 3);
    for (int i = 0; i < 100000; i++) {
        dllm_rng t = s;
        const uint64_t k = dllm_rng_u64(&t) >> 11;
        const double u = dllm_rng_uniform(&s);
        ck_assert(u == expected(k) && u < 1.0);
    }
}
END_TEST

START_TEST(streams_are_pure_and_below_in_range)
{
    dllm_rng a = dllm_rng_make(1, 2, 3, 4), b = dllm_rng_make(1, 2, 3, 4);
    dllm_rng c = dllm_rng_make(1, 2, 3, 5);
    int differ = 0;
    for (int i = 0; i < 64; i++) {
        const uint64_t x = dllm_rng_u64(&a);
        ck_assert_uint_eq(x, dllm_rng_u64(&b));
        differ += x != dllm_rng_u64(&c);
    }
    ck_assert_int_gt(differ, 60);
    for (int i = 0; i < 1000; i++)
        ck_assert_uint_lt(dllm_rng_below(&a, 7), 7);
}
END_TEST

static Suite *rng_suite(void)
{
    Suite *s = suite_create("rng");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, inverse_reaches_the_value);
    tcase_add_test(tc, uniform_never_reaches_one);
    tcase_add_test(tc, other_draws_unchanged);
    tcase_add_test(tc, streams_are_pure_and_below_in_range);
    suite_add_tcase(s, tc);
    return s;
}

Suite *tu_suite(tu_ctx *ctx)
{
    (void)ctx;
    return rng_suite();
}
