// Vector pieces of the decode attention (internal header of attention_f32.c): dot products,
// the softmax's max and numerators, and the weighted sum of V rows, each with a portable
// fallback where AVX-512 is missing.
#pragma once

#include <math.h>
#include <stdint.h>

#include "vec_math.h"

static inline float dot_f32(const float* a, const float* b, int64_t d) {
  float dot = 0.0f;
  int64_t j = 0;
#if defined(__AVX512F__)
  __m512 acc = _mm512_setzero_ps();
  for (; j + 16 <= d; j += 16)
    acc = _mm512_fmadd_ps(_mm512_loadu_ps(a + j), _mm512_loadu_ps(b + j), acc);
  dot = _mm512_reduce_add_ps(acc);
#endif
  for (; j < d; ++j) dot += a[j] * b[j];
  return dot;
}

// o (d) += p * v (d)
static inline void axpy_f32(float* o, float p, const float* v, int64_t d) {
  int64_t j = 0;
#if defined(__AVX512F__)
  const __m512 pv = _mm512_set1_ps(p);
  for (; j + 16 <= d; j += 16)
    _mm512_storeu_ps(o + j, _mm512_fmadd_ps(pv, _mm512_loadu_ps(v + j), _mm512_loadu_ps(o + j)));
#endif
  for (; j < d; ++j) o[j] += p * v[j];
}

static inline float max_f32(const float* x, int64_t n) {
  float m = -INFINITY;
  int64_t l = 0;
#if defined(__AVX512F__)
  if (n >= 16) {
    __m512 mv = _mm512_loadu_ps(x);
    for (l = 16; l + 16 <= n; l += 16) mv = _mm512_max_ps(mv, _mm512_loadu_ps(x + l));
    m = _mm512_reduce_max_ps(mv);
  }
#endif
  for (; l < n; ++l) m = x[l] > m ? x[l] : m;
  return m;
}

// sc[l] = exp(sc[l] - m) in place; returns the sum.
static inline float softmax_numerators(float* sc, int64_t len, float m) {
  float sum = 0.0f;
  int64_t l = 0;
#if defined(__AVX512F__)
  __m512 acc = _mm512_setzero_ps();
  for (; l + 16 <= len; l += 16) {
    const __m512 e = exp512(_mm512_sub_ps(_mm512_loadu_ps(sc + l), _mm512_set1_ps(m)));
    _mm512_storeu_ps(sc + l, e);
    acc = _mm512_add_ps(acc, e);
  }
  sum = _mm512_reduce_add_ps(acc);
#endif
  for (; l < len; ++l) {
    sc[l] = expf(sc[l] - m);
    sum += sc[l];
  }
  return sum;
}

#if defined(__AVX512F__)
// o (D) = sum_l p[l] * v[slots[l] * slot_len : + D], the D/16 accumulators held in registers.
#define WEIGHTED_ROWS(D)                                                                    \
  static inline void weighted_rows_##D(const float* p, const float* v,                      \
                                       const int32_t* slots, int64_t len, int64_t slot_len,   \
                                       float* o) {                                            \
    __m512 acc[D / 16];                                                                     \
    for (int j = 0; j < D / 16; ++j) acc[j] = _mm512_setzero_ps();                          \
    for (int64_t l = 0; l < len; ++l) {                                                     \
      const float* row = v + (int64_t)slots[l] * slot_len;                                  \
      const __m512 pl = _mm512_set1_ps(p[l]);                                               \
      for (int j = 0; j < D / 16; ++j)                                                      \
        acc[j] = _mm512_fmadd_ps(pl, _mm512_loadu_ps(row + 16 * j), acc[j]);                \
    }                                                                                       \
    for (int j = 0; j < D / 16; ++j) _mm512_storeu_ps(o + 16 * j, acc[j]);                  \
  }
WEIGHTED_ROWS(64)
WEIGHTED_ROWS(128)
#undef WEIGHTED_ROWS
#endif

#if defined(__AVX512F__)
// Lane i of the result = sum of the 16 lanes of a[i], for 16 vectors at once.
static inline __m512 sum16(__m512 a[16]) {
  __m512 t[8], u[4];
  for (int p = 0; p < 8; ++p)  // per 128-bit lane: [x0+x2, y0+y2, x1+x3, y1+y3]
    t[p] = _mm512_add_ps(_mm512_unpacklo_ps(a[2 * p], a[2 * p + 1]),
                         _mm512_unpackhi_ps(a[2 * p], a[2 * p + 1]));
  for (int p = 0; p < 4; ++p) {  // per 128-bit lane: partial sums of a[4p .. 4p+3]
    const __m512d x = _mm512_castps_pd(t[2 * p]), y = _mm512_castps_pd(t[2 * p + 1]);
    u[p] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(x, y)),
                         _mm512_castpd_ps(_mm512_unpackhi_pd(x, y)));
  }
  const __m512 w01 = _mm512_add_ps(_mm512_shuffle_f32x4(u[0], u[1], 0x88),
                                   _mm512_shuffle_f32x4(u[0], u[1], 0xDD));
  const __m512 w23 = _mm512_add_ps(_mm512_shuffle_f32x4(u[2], u[3], 0x88),
                                   _mm512_shuffle_f32x4(u[2], u[3], 0xDD));
  return _mm512_add_ps(_mm512_shuffle_f32x4(w01, w23, 0x88),
                       _mm512_shuffle_f32x4(w01, w23, 0xDD));
}

// Lane t = q . k_base[slots[t] * slot_len : + d] for 16 keys; d a multiple of 16.
static inline __m512 dots16(const float* q, const float* k_base, const int32_t* slots,
                            int64_t slot_len, int64_t d) {
  __m512 acc[16];
  for (int t = 0; t < 16; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t j = 0; j < d; j += 16) {
    const __m512 qv = _mm512_loadu_ps(q + j);
    for (int t = 0; t < 16; ++t)
      acc[t] = _mm512_fmadd_ps(qv, _mm512_loadu_ps(k_base + (int64_t)slots[t] * slot_len + j),
                               acc[t]);
  }
  return sum16(acc);
}
#endif
