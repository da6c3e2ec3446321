// Paged decode attention over the token-slot KV pool, float32: each request's new K/V is
// stored in its slot, then its query heads attend over req_to_token[row, :seq_len]. Torch
// definition: decode_attention_ref in radixrt/kernels/cpu.py.
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rt_cpu.h"
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
// sc: scratch ((h1 - h0) * g, len).
static void attend_heads(const float* q, float* out, int64_t g, int64_t h0, int64_t h1,
                         const float* k_buf, const float* v_buf, const int32_t* slots,
                         int64_t len, int64_t slot_len, int64_t d, float scale, float* sc) {
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
    const float inv = 1.0f / softmax_numerators(row, len, m);
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
  // Few requests: one work item per (request, KV head); else one per request, all heads.
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
                   req_to_token + rows[i] * ld_table, seq_lens[i], slot_len, d, scale, sc);
    }
    free(sc);
  }
}
