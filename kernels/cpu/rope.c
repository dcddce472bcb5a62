/* rope.c: rotary position embedding, rotate-half form over the whole head.
 *
 * For i < HD/2: inv_freq[i] = 1 / theta^(2i/HD) and angle = pos * inv_freq[i],
 * both in fp32 as torch computes them; cos/sin are evaluated in double on that
 * fp32 angle and rounded, which agrees with torch's fp32 cos/sin to an ulp.
 *   out[i]      = x[i] * cos - x[i+HD/2] * sin
 *   out[i+HD/2] = x[i+HD/2] * cos + x[i] * sin
 * The backward is the transpose, i.e. the rotation by -angle. Both allow
 * out == inp. op_rope_bwd accumulates into dinp like every backward; called in
 * place (dinp == dout) it replaces dout by its rotation, since there is no
 * separate buffer to accumulate into. */
#include "kernels/ops.h"
#include "kernels/base.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define PAR_MIN 32768

void op_rope_table_init(op_rope_table *t, int max_pos, int head_dim, float theta)
{
    int half = head_dim / 2;
    t->max_pos = max_pos;
    t->half = half;
    t->cos = dllm_malloc((size_t)max_pos * half * sizeof(float) + 1);
    t->sin = dllm_malloc((size_t)max_pos * half * sizeof(float) + 1);
    for (int i = 0; i < half; i++) {
        float inv_freq = 1.0f / powf(theta, (float)(2 * i) / (float)head_dim);
        for (int p = 0; p < max_pos; p++) {
            float angle = (float)p * inv_freq;
            t->cos[(size_t)p * half + i] = (float)cos((double)angle);
            t->sin[(size_t)p * half + i] = (float)sin((double)angle);
        }
    }
}

void op_rope_table_free(op_rope_table *t)
{
    free(t->cos);
    free(t->sin);
    t->cos = t->sin = NULL;
    t->max_pos = t->half = 0;
}

/* Rotates every head of every row by +angle (dir = 1) or -angle (dir = -1);
 * accumulate adds the result to out instead of storing it. */
static void rope_rotate(float *out, const float *inp, const int32_t *pos,
                        const op_rope_table *t, int N, int NH, int HD, float dir,
                        bool accumulate)
{
    // out, inp (N, NH, HD); pos (N)
    int half = HD / 2;
    if (half != t->half) {
        fprintf(stderr, "rope: head dim %d does not match the table (half %d)\n", HD, t->half);
        abort();
    }
#pragma omp parallel for if ((size_t)N * NH * HD > PAR_MIN)
    for (int n = 0; n < N; n++) {
        int p = pos[n];
        if (p < 0 || p >= t->max_pos) {
            fprintf(stderr, "rope: position %d outside the table [0, %d)\n", p, t->max_pos);
            abort();
        }
        const float *cs = t->cos + (size_t)p * half;
        const float *sn = t->sin + (size_t)p * half;
        for (int h = 0; h < NH; h++) {
            const float *x = inp + ((size_t)n * NH + h) * HD;
            float *o = out + ((size_t)n * NH + h) * HD;
            for (int i = 0; i < half; i++) {
                float x1 = x[i], x2 = x[i + half];
                float c = cs[i], s = dir * sn[i];
                float o1 = x1 * c - x2 * s, o2 = x2 * c + x1 * s;
                if (accumulate) {
                    o[i] += o1;
                    o[i + half] += o2;
                } else {
                    o[i] = o1;
                    o[i + half] = o2;
                }
            }
        }
    }
}

void op_rope_fwd(float *out, const float *inp, const int32_t *pos, const op_rope_table *t,
                 int N, int NH, int HD)
{
    rope_rotate(out, inp, pos, t, N, NH, HD, 1.0f, false);
}

void op_rope_bwd(float *dinp, const float *dout, const int32_t *pos, const op_rope_table *t,
                 int N, int NH, int HD)
{
    if (!dinp)
        return;
    rope_rotate(dinp, dout, pos, t, N, NH, HD, -1.0f, dinp != dout);
}
