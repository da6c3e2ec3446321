// float32 element-wise kernels: RMSNorm (optionally fused with the residual add), rotate-half
// rotary in place, SiLU(gate) * up. Their torch definitions: radixrt/model/layers/{norm,rotary,
// activation}.py.
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "rt_cpu.h"
#include "simd.h"

void rt_rmsnorm_f32(float* x, int64_t ldx, float* residual, int64_t ldr, const float* w,
                    int64_t t, int64_t h, float eps) {
#pragma omp parallel for schedule(static) if (t * h > 65536)
  for (int64_t row = 0; row < t; ++row) {
    float* xr = x + row * ldx;
    float* src = xr;
    if (residual) {
      src = residual + row * ldr;
      for (int64_t j = 0; j < h; ++j) src[j] += xr[j];
    }
    float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
    for (int64_t j = 0; j < h; ++j) ss += src[j] * src[j];
    const float scale = 1.0f / sqrtf(ss / (float)h + eps);
    for (int64_t j = 0; j < h; ++j) xr[j] = w[j] * (src[j] * scale);
  }
}

void rt_rotary_f32(float* q, int64_t ldq, int64_t hq, float* k, int64_t ldk, int64_t hk,
                   const float* cos, const float* sin, int64_t ldc, int64_t t, int64_t d) {
  const int64_t half = d / 2;
#pragma omp parallel for schedule(static) if (t * (hq + hk) * d > 65536)
  for (int64_t row = 0; row < t; ++row) {
    const float* c = cos + row * ldc;
    const float* s = sin + row * ldc;
    for (int64_t head = 0; head < hq + hk; ++head) {
      float* x = head < hq ? q + row * ldq + head * d : k + row * ldk + (head - hq) * d;
      for (int64_t j = 0; j < half; ++j) {
        const float x1 = x[j], x2 = x[j + half];
        x[j] = x1 * c[j] - x2 * s[j];
        x[j + half] = x2 * c[j + half] + x1 * s[j + half];
      }
    }
  }
}

void rt_silu_mul_f32(const float* gu, int64_t ldg, float* out, int64_t ldo, int64_t t,
                     int64_t inter) {
#pragma omp parallel for schedule(static) if (t * inter > 65536)
  for (int64_t row = 0; row < t; ++row) {
    const float* g = gu + row * ldg;
    const float* u = g + inter;
    float* o = out + row * ldo;
    int64_t j = 0;
#if defined(RT_SIMD)
    for (; j + VW <= inter; j += VW) {
      const vf gv = vload(g + j);
      const vf silu = vdiv(gv, vadd(vset1(1.0f), vexp(vsub(vzero(), gv))));
      vstore(o + j, vmul(silu, vload(u + j)));
    }
#endif
    for (; j < inter; ++j) o[j] = g[j] / (1.0f + expf(-g[j])) * u[j];
  }
}

const char* rt_isa(void) { return RT_ISA; }
