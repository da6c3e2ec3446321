// Vector pieces of the decode attention (internal header of attention_f32.c): dot products,
// the softmax's max and numerators, and the weighted sum of V rows, each over simd.h's
// vectors with a portable tail (or whole loop where the build has no vector ISA). K/V rows
// are kv_t (kv.h): widened to float32 as they are loaded, and a row's dot product or weight
// times its kv_scale (fp8; 1 otherwise).
#pragma once

#include <math.h>
#include <stdint.h>

#include "kv.h"
#include "simd.h"

// q (d) . k (d), k a K row of the pool (its scale applied).
static inline float dot_kv(const float* q, const kv_t* k, int64_t d) {
  float dot = 0.0f;
  int64_t j = 0;
#if defined(RT_VEC)
  vf acc = vzero();
  for (; j + VW <= d; j += VW) acc = vfma(vload(q + j), vload_kv(k + j), acc);
  dot = vhsum(acc);
#endif
  for (; j < d; ++j) dot += q[j] * kv_get(k, j);
  return dot * kv_scale(k, d);
}

// o (d) += p * v (d), v a V row of the pool (its scale applied).
static inline void axpy_kv(float* o, float p, const kv_t* v, int64_t d) {
  int64_t j = 0;
  p *= kv_scale(v, d);
#if defined(RT_VEC)
  const vf pv = vset1(p);
  for (; j + VW <= d; j += VW) vstore(o + j, vfma(pv, vload_kv(v + j), vload(o + j)));
#endif
  for (; j < d; ++j) o[j] += p * kv_get(v, j);
}

// o (d) += p * v (d)
static inline void axpy_f32(float* o, float p, const float* v, int64_t d) {
  int64_t j = 0;
#if defined(RT_VEC)
  const vf pv = vset1(p);
  for (; j + VW <= d; j += VW) vstore(o + j, vfma(pv, vload(v + j), vload(o + j)));
#endif
  for (; j < d; ++j) o[j] += p * v[j];
}

static inline float max_f32(const float* x, int64_t n) {
  float m = -INFINITY;
  int64_t l = 0;
#if defined(RT_VEC)
  if (n >= VW) {
    vf mv = vload(x);
    for (l = VW; l + VW <= n; l += VW) mv = vmax(mv, vload(x + l));
    m = vhmax(mv);
  }
#endif
  for (; l < n; ++l) m = x[l] > m ? x[l] : m;
  return m;
}

// sc[l] = exp(sc[l] - m) in place; returns the sum.
static inline float softmax_numerators(float* sc, int64_t len, float m) {
  float sum = 0.0f;
  int64_t l = 0;
#if defined(RT_VEC)
  vf acc = vzero();
  for (; l + VW <= len; l += VW) {
    const vf e = vexp(vsub(vload(sc + l), vset1(m)));
    vstore(sc + l, e);
    acc = vadd(acc, e);
  }
  sum = vhsum(acc);
#endif
  for (; l < len; ++l) {
    sc[l] = expf(sc[l] - m);
    sum += sc[l];
  }
  return sum;
}

#if defined(RT_VEC)
// o (D) = sum_l p[l] * v[slots[l] * slot_len : + D], the D/VW accumulators held in registers
// (D = 128 on AVX2 takes all 16: the compiler spills one or two).
#define WEIGHTED_ROWS(D)                                                                    \
  static inline void weighted_rows_##D(const float* p, const kv_t* v,                       \
                                       const int32_t* slots, int64_t len, int64_t slot_len,   \
                                       float* o) {                                            \
    vf acc[D / VW];                                                                         \
    for (int j = 0; j < D / VW; ++j) acc[j] = vzero();                                      \
    for (int64_t l = 0; l < len; ++l) {                                                     \
      const kv_t* row = v + (int64_t)slots[l] * slot_len;                                   \
      const vf pl = vset1(p[l] * kv_scale(row, D));                                         \
      for (int j = 0; j < D / VW; ++j) acc[j] = vfma(pl, vload_kv(row + VW * j), acc[j]);   \
    }                                                                                       \
    for (int j = 0; j < D / VW; ++j) vstore(o + VW * j, acc[j]);                            \
  }
WEIGHTED_ROWS(64)
WEIGHTED_ROWS(128)
#undef WEIGHTED_ROWS

// Lane t = q . k_base[slots[t] * slot_len : + d] for VW keys (scaled); d a multiple of VW.
static inline vf dots_keys(const float* q, const kv_t* k_base, const int32_t* slots,
                           int64_t slot_len, int64_t d) {
  vf acc[VW];
  for (int t = 0; t < VW; ++t) acc[t] = vzero();
  for (int64_t j = 0; j < d; j += VW) {
    const vf qv = vload(q + j);
    for (int t = 0; t < VW; ++t)
      acc[t] = vfma(qv, vload_kv(k_base + (int64_t)slots[t] * slot_len + j), acc[t]);
  }
#if KV_SCALED
  float s[VW];
  for (int t = 0; t < VW; ++t) s[t] = kv_scale(k_base + (int64_t)slots[t] * slot_len, d);
  return vmul(vsum_lanes(acc), vload(s));
#else
  return vsum_lanes(acc);
#endif
}
#endif
