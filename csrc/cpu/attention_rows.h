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

#ifndef PF_LOCALITY
#define PF_LOCALITY 3
#endif
// Prefetches the bytes [p, p + n) (the lines they touch). Scattered KV slots defeat the
// hardware prefetcher: the kernels fetch the rows they will read next themselves.
static inline void prefetch_bytes(const void* p, int64_t n) {
  for (int64_t off = 0; off < n + 63; off += 64) __builtin_prefetch((const char*)p + off, 0, PF_LOCALITY);
}

#ifndef PF_KEYS
#define PF_KEYS 8  // keys ahead whose V rows weighted_rows prefetches
#endif
#ifndef PF_BLOCKS
#define PF_BLOCKS 2  // blocks of VW keys ahead whose K rows attend_heads prefetches
#endif

#if defined(RT_VEC)
// Accumulator vectors of one weighted_rows pass (NQ query heads x D / VW): half the vector
// registers, leaving the rest for the row being read and the broadcast weights.
#if VW == 8
#define ACC_VECS 8
#else
#define ACC_VECS 16
#endif

// o (NQ, D): row r = sum_l p[r * ldp + l] * v[slots[l] * slot_len : + D] for NQ query heads
// of one KV head, each V row read (and widened) once for all of them, the NQ * D / VW
// accumulators in registers. pf_bytes > 0: the pass also prefetches that many bytes of the
// slot row PF_KEYS keys ahead (the first pass over a run fetches every head's rows).
#define WEIGHTED_ROWS(D, NQ)                                                                   \
  static inline void weighted_rows_##D##_##NQ(const float* p, int64_t ldp, const kv_t* v,      \
                                              const int32_t* slots, int64_t len,               \
                                              int64_t slot_len, float* o, int64_t pf_bytes) {  \
    vf acc[NQ][D / VW];                                                                        \
    for (int r = 0; r < NQ; ++r)                                                               \
      for (int j = 0; j < D / VW; ++j) acc[r][j] = vzero();                                    \
    for (int64_t l = 0; l < len; ++l) {                                                        \
      if (pf_bytes && l + PF_KEYS < len)                                                       \
        prefetch_bytes(v + (int64_t)slots[l + PF_KEYS] * slot_len, pf_bytes);                  \
      const kv_t* row = v + (int64_t)slots[l] * slot_len;                                      \
      const float s = kv_scale(row, D);                                                        \
      vf pl[NQ];                                                                               \
      for (int r = 0; r < NQ; ++r) pl[r] = vset1(p[r * ldp + l] * s);                          \
      for (int j = 0; j < D / VW; ++j) {                                                       \
        const vf x = vload_kv(row + VW * j);                                                   \
        for (int r = 0; r < NQ; ++r) acc[r][j] = vfma(pl[r], x, acc[r][j]);                    \
      }                                                                                        \
    }                                                                                          \
    for (int r = 0; r < NQ; ++r)                                                               \
      for (int j = 0; j < D / VW; ++j) vstore(o + r * D + VW * j, acc[r][j]);                  \
  }
WEIGHTED_ROWS(64, 1)
WEIGHTED_ROWS(64, 2)
WEIGHTED_ROWS(64, 3)
WEIGHTED_ROWS(64, 4)
WEIGHTED_ROWS(128, 1)
WEIGHTED_ROWS(128, 2)
#undef WEIGHTED_ROWS

// o (nq, d) = the weighted sums of nq query heads of one KV head (weights p (nq, ldp), the
// first len of each row) over its V rows v[slots[l] * slot_len : + d], in passes of as many
// heads as ACC_VECS holds (d 64 or 128; returns -1 for other d, 0 when done). The first pass
// prefetches pf_bytes of each slot row ahead (weighted_rows).
static inline int weighted_heads(const float* p, int64_t ldp, int64_t nq, const kv_t* v,
                                 const int32_t* slots, int64_t len, int64_t slot_len,
                                 int64_t d, float* o, int64_t pf_bytes) {
  if (d != 64 && d != 128) return -1;
  const int64_t per = ACC_VECS / (d / VW) > 1 ? ACC_VECS / (d / VW) : 1;
  for (int64_t r = 0; r < nq; r += per, pf_bytes = 0) {
    const int64_t n = nq - r < per ? nq - r : per;
    const float* pr = p + r * ldp;
    float* orow = o + r * d;
    if (d == 64 && n == 4) weighted_rows_64_4(pr, ldp, v, slots, len, slot_len, orow, pf_bytes);
    else if (d == 64 && n == 3) weighted_rows_64_3(pr, ldp, v, slots, len, slot_len, orow, pf_bytes);
    else if (d == 64 && n == 2) weighted_rows_64_2(pr, ldp, v, slots, len, slot_len, orow, pf_bytes);
    else if (d == 64) weighted_rows_64_1(pr, ldp, v, slots, len, slot_len, orow, pf_bytes);
    else if (n == 2) weighted_rows_128_2(pr, ldp, v, slots, len, slot_len, orow, pf_bytes);
    else weighted_rows_128_1(pr, ldp, v, slots, len, slot_len, orow, pf_bytes);
  }
  return 0;
}

// Lane t = q . kb[t * d : + d] for VW float32 rows (a block of keys widened once for all the
// query heads that read it); d a multiple of VW.
static inline vf dots_rows(const float* q, const float* kb, int64_t d) {
  vf acc[VW];
  for (int t = 0; t < VW; ++t) acc[t] = vzero();
  for (int64_t j = 0; j < d; j += VW) {
    const vf qv = vload(q + j);
    for (int t = 0; t < VW; ++t) acc[t] = vfma(qv, vload(kb + t * d + j), acc[t]);
  }
  return vsum_lanes(acc);
}

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
