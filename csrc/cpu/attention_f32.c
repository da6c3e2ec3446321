// Paged decode attention over the token-slot KV pool, float32: each request's new K/V is
// stored in its slot, then its query heads attend over req_to_token[row, :seq_len]. Torch
// definition: decode_attention_ref in radixrt/kernels/cpu.py.
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rt_cpu.h"
#include "vec_math.h"

#ifndef RANGE_KEYS
#define RANGE_KEYS 512  // keys per range of a split-key request (at least)
#endif
#ifndef MAX_RANGES
#define MAX_RANGES 8
#endif

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
static float softmax_numerators(float* sc, int64_t len, float m) {
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
  static void weighted_rows_##D(const float* p, const float* v, const int32_t* slots,       \
                                int64_t len, int64_t slot_len, float* o) {                  \
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

// Query heads [h0*g, h1*g) of one request (q (hq, d), out (hq, d)) attend over `len` slots
// through KV heads [h0, h1): one pass over the K rows, then one over the V rows, each reading
// the (h1 - h0) * d contiguous floats of a slot once for all their query heads.
// sc: scratch ((h1 - h0) * g, len). With ml == NULL the output rows are the attention
// outputs; else they are left unnormalised (sum of exp(score - max) * v) and the max and the
// sum of exp(score - max) of query head q0 + j go to ml[2j], ml[2j + 1] (one key range's
// part of a split softmax).
static void attend_heads(const float* q, float* out, int64_t g, int64_t h0, int64_t h1,
                         const float* k_buf, const float* v_buf, const int32_t* slots,
                         int64_t len, int64_t slot_len, int64_t d, float scale, float* sc,
                         float* ml) {
  const int64_t nq = (h1 - h0) * g, q0 = h0 * g;
  int64_t l0 = 0;
#if defined(__AVX512F__)
  if (d % 16 == 0) {  // 16 keys at a time: 16 dot products, then one transposing reduction
    for (; l0 + 16 <= len; l0 += 16)
      for (int64_t h = h0, j = 0; h < h1; ++h)
        for (int64_t r = 0; r < g; ++r, ++j)
          _mm512_storeu_ps(sc + j * len + l0,
                           _mm512_mul_ps(_mm512_set1_ps(scale),
                                         dots16(q + (q0 + j) * d, k_buf + h * d, slots + l0,
                                                slot_len, d)));
  }
#endif
  for (int64_t l = l0; l < len; ++l) {
    const float* krow = k_buf + (int64_t)slots[l] * slot_len;
    for (int64_t h = h0, j = 0; h < h1; ++h)
      for (int64_t r = 0; r < g; ++r, ++j)
        sc[j * len + l] = scale * dot_f32(q + (q0 + j) * d, krow + h * d, d);
  }
  for (int64_t j = 0; j < nq; ++j) {
    float* row = sc + j * len;
    const float m = max_f32(row, len);
    const float sum = softmax_numerators(row, len, m);
    if (ml) {
      ml[2 * j] = m;
      ml[2 * j + 1] = sum;
      continue;
    }
    const float inv = 1.0f / sum;
    for (int64_t l = 0; l < len; ++l) row[l] *= inv;
  }
  float* o = out + q0 * d;
#if defined(__AVX512F__)
  if (d == 64 || d == 128) {  // one query head at a time, its output row in registers
    for (int64_t h = h0, j = 0; h < h1; ++h)
      for (int64_t r = 0; r < g; ++r, ++j) {
        if (d == 64)
          weighted_rows_64(sc + j * len, v_buf + h * d, slots, len, slot_len, o + j * d);
        else
          weighted_rows_128(sc + j * len, v_buf + h * d, slots, len, slot_len, o + j * d);
      }
    return;
  }
#endif
  memset(o, 0, sizeof(float) * (size_t)(nq * d));
  for (int64_t l = 0; l < len; ++l) {
    const float* vrow = v_buf + (int64_t)slots[l] * slot_len;
    for (int64_t h = h0, j = 0; h < h1; ++h)
      for (int64_t r = 0; r < g; ++r, ++j) axpy_f32(o + j * d, sc[j * len + l], vrow + h * d, d);
  }
}

// Split-key attention: request i's keys in `ranges` near-equal ranges, each a work item over
// all heads leaving its unnormalised output and (max, sum) per query head in
// part[(i * ranges + r) * hq * (d + 2) ..] (outputs, then the pairs); then per request and
// head the ranges are merged: out = sum_r e^(m_r - M) o_r / sum_r e^(m_r - M) l_r.
static void attend_ranges(const float* q, int64_t ldq, const float* k_buf, const float* v_buf,
                          const int32_t* req_to_token, int64_t ld_table, const int64_t* rows,
                          const int64_t* seq_lens, float* out, int64_t ldo, int64_t b,
                          int64_t hq, int64_t hkv, int64_t d, float scale, int64_t ranges,
                          int64_t max_len, float* part) {
  const int64_t g = hq / hkv, slot_len = hkv * d, stride = hq * (d + 2);
  const int64_t range_len = (max_len + ranges - 1) / ranges;
#pragma omp parallel
  {
    float* sc = (float*)malloc(sizeof(float) * (size_t)(hq * range_len + 16));
#pragma omp for schedule(dynamic, 1)
    for (int64_t work = 0; work < b * ranges; ++work) {
      const int64_t i = work / ranges, r = work % ranges, len = seq_lens[i];
      const int64_t l0 = r * ((len + ranges - 1) / ranges);
      const int64_t l1 = l0 + (len + ranges - 1) / ranges < len ? l0 + (len + ranges - 1) / ranges
                                                                : len;
      float* o = part + work * stride;
      float* ml = o + hq * d;
      if (!sc || l1 <= l0) {  // an empty range adds nothing; no scratch: NaN, not stale rows
        for (int64_t j = 0; j < hq; ++j) {
          ml[2 * j] = sc ? -INFINITY : NAN;
          ml[2 * j + 1] = 0.0f;
        }
        continue;
      }
      attend_heads(q + i * ldq, o, g, 0, hkv, k_buf, v_buf,
                   req_to_token + rows[i] * ld_table + l0, l1 - l0, slot_len, d, scale, sc, ml);
    }
    free(sc);
  }
  for (int64_t i = 0; i < b; ++i)
    for (int64_t j = 0; j < hq; ++j) {
      float m = -INFINITY, den = 0.0f;
      for (int64_t r = 0; r < ranges; ++r) {
        const float mr = part[(i * ranges + r) * stride + hq * d + 2 * j];
        m = mr > m || isnan(mr) ? mr : m;
      }
      float* dst = out + i * ldo + j * d;
      for (int64_t c = 0; c < d; ++c) dst[c] = 0.0f;
      for (int64_t r = 0; r < ranges; ++r) {
        const float* pr = part + (i * ranges + r) * stride;
        const float mr = pr[hq * d + 2 * j];
        if (mr == -INFINITY) continue;  // an empty range
        const float w = expf(mr - m);
        den += w * pr[hq * d + 2 * j + 1];
        for (int64_t c = 0; c < d; ++c) dst[c] += w * pr[j * d + c];
      }
      for (int64_t c = 0; c < d; ++c) dst[c] /= den;
    }
}

void rt_decode_attention_f32(const float* q, int64_t ldq, const float* k_new,
                             const float* v_new, int64_t ld_new, float* k_buf, float* v_buf,
                             const int64_t* out_loc, const int32_t* req_to_token,
                             int64_t ld_table, const int64_t* rows, const int64_t* seq_lens,
                             float* out, int64_t ldo, int64_t b, int64_t hq, int64_t hkv,
                             int64_t d, float scale) {
  const int64_t g = hq / hkv, slot_len = hkv * d;
  int64_t max_len = 0;
  for (int64_t i = 0; i < b; ++i) max_len = seq_lens[i] > max_len ? seq_lens[i] : max_len;
  // Request i owns slot out_loc[i]: storing its new K/V races with no other request.
  for (int64_t i = 0; i < b; ++i) {
    memcpy(k_buf + out_loc[i] * slot_len, k_new + i * ld_new, sizeof(float) * (size_t)slot_len);
    memcpy(v_buf + out_loc[i] * slot_len, v_new + i * ld_new, sizeof(float) * (size_t)slot_len);
  }
  // Few requests over long contexts: one work item per (request, key range), all heads, the
  // ranges' partial softmaxes merged afterwards. Few requests otherwise: one per (request,
  // KV head). Else one per request, all heads.
  const int64_t ranges = b < 4 && max_len >= 2 * RANGE_KEYS
                             ? (max_len / RANGE_KEYS < MAX_RANGES ? max_len / RANGE_KEYS : MAX_RANGES)
                             : 1;
  float* part = ranges > 1 ? (float*)malloc(sizeof(float) * (size_t)(b * ranges * hq * (d + 2)))
                           : 0;
  if (part) {
    attend_ranges(q, ldq, k_buf, v_buf, req_to_token, ld_table, rows, seq_lens, out, ldo, b, hq,
                  hkv, d, scale, ranges, max_len, part);
    free(part);
    return;
  }
  const int64_t split = b < 4 ? hkv : 1, per = hkv / split;
#pragma omp parallel if (b * split > 1 && max_len * b * hq > 1024)
  {
    float* sc = (float*)malloc(sizeof(float) * (size_t)(per * g * max_len + 16));
#pragma omp for schedule(dynamic, 1)
    for (int64_t work = 0; work < b * split; ++work) {
      const int64_t i = work / split, h0 = (work % split) * per;
      if (!sc) {  // no scratch memory: the rows read NaN rather than stale values
        for (int64_t j = h0 * g * d; j < (h0 + per) * g * d; ++j) out[i * ldo + j] = NAN;
        continue;
      }
      attend_heads(q + i * ldq, out + i * ldo, g, h0, h0 + per, k_buf, v_buf,
                   req_to_token + rows[i] * ld_table, seq_lens[i], slot_len, d, scale, sc, 0);
    }
    free(sc);
  }
}
