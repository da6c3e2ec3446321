// The k-pair layout of bfloat16 weights and what its two kernels share (internal header of
// gemm_amx.c, AMX tiles, and gemm_bf16dot.c, VDPBF16PS): x rounded to bfloat16 rows and the
// epilogues that write a block of float32 sums as y (bias added) or as silu(gate) * up. One
// copy, so that both variants round and finish alike. Also the extend attention kernels'
// exponential (extend_attention_amx.c, extend_attention_dot.c).
#pragma once

#include <stdint.h>

#include "simd.h"

#if defined(RT_BF16_PAIRS)
// xb (mp, kp) <- x (m, k) rounded to bf16, rows past m and columns past k zero.
static inline void round_rows(const float* x, int64_t ldx, int64_t m, int64_t k,
                              uint16_t* xb, int64_t mp, int64_t kp) {
#pragma omp parallel for schedule(static) if (m * k > 65536)
  for (int64_t i = 0; i < mp; ++i)
    for (int64_t j = 0; j < kp; j += 16) {
      const vmask live = vmask_first(i < m ? k - j : 0);
      const vf v = vload_mask(live, x + i * ldx + j);
      _mm256_storeu_si256((__m256i*)(xb + i * kp + j), (__m256i)_mm512_cvtneps_pbh(v));
    }
}

// y rows [r0, r0 + 16) of panel p from a 16 x 32 float32 block, bias added.
static inline void write_block(const float* blk, float* y, int64_t ldy, int64_t r0, int64_t m,
                               int64_t col, int64_t n, const float* bias) {
  const vmask lo = vmask_first(n - col), hi = vmask_first(n - col - 16);
  const vf b0 = bias ? vload_mask(lo, bias + col) : vzero();
  const vf b1 = bias ? vload_mask(hi, bias + col + 16) : vzero();
  for (int64_t i = 0; i < 16 && r0 + i < m; ++i) {
    vstore_mask(y + (r0 + i) * ldy + col, lo, vadd(vload(blk + i * 32), b0));
    vstore_mask(y + (r0 + i) * ldy + col + 16, hi, vadd(vload(blk + i * 32 + 16), b1));
  }
}

// out rows of silu(g) * u for one 16 x 32 block [g | u] (16 gate columns, their 16 up columns)
// at rows r0.., gate column col: the bias added and silu taken as rt_silu_mul_f32 does.
static inline void write_silu(const float* blk, float* out, int64_t ldo, int64_t r0, int64_t m,
                              int64_t col, int64_t inter, const float* bias) {
  const vf bg = bias ? vload(bias + col) : vzero();
  const vf bu = bias ? vload(bias + inter + col) : vzero();
  for (int64_t i = 0; i < 16 && r0 + i < m; ++i) {
    const vf g = vadd(vload(blk + i * 32), bg), u = vadd(vload(blk + i * 32 + 16), bu);
    const vf silu = vdiv(g, vadd(vset1(1.0f), vexp(vsub(vzero(), g))));
    vstore(out + (r0 + i) * ldo + col, vmul(silu, u));
  }
}

// The extend kernels' softmax (AMX tiles, VDPBF16PS): 2^x for x <= 0: 2^n * 2^f, n = round(x), f in [-1/2, 1/2], a degree-3 polynomial in f
// (fitted to minimise the relative error): relative error under 7.6e-5, far below the 2^-9
// of the bfloat16 the probabilities are rounded to. The callers pass (s - m) log2 e, one
// fused multiply-add (LOG2E). x = -inf gives NaN; the callers mask those lanes to 0.
#define LOG2E 1.44269504f
static inline vf exp2_bf16(vf x) {
  const vf n = vround(x), f = vsub(x, n);
  vf p = vset1(0.055171f);
  p = vfma(p, f, vset1(0.2426095f));
  p = vfma(p, f, vset1(0.69326095f));
  p = vfma(p, f, vset1(0.99992817f));
  return vscale2(p, n);
}

#endif
