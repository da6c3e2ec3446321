// Query heads of one request (or of a group of requests) attending over a run of KV slots:
// the work item of the decode attention (internal header of attention_f32.c and
// attention_shared.c).
#pragma once

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "attention_pairs.h"
#include "attention_rows.h"

// o (nq, d) = sum_l p[j * len + l] * V rows of query head j's KV head, for the query heads
// [h0*g, h1*g) (p: sc of attend_heads, nq rows of len). `bf16`: p rounded to bfloat16 first
// (the rows are overwritten).
static void weighted_sums(float* sc, int64_t len, int64_t g, int64_t h0, int64_t h1,
                          const kv_t* v_buf, const int32_t* slots, int64_t slot_len, int64_t d,
                          float* o, int64_t row_bytes, int bf16) {
  const int64_t nq = (h1 - h0) * g;
#if defined(RT_PAIR_DOT)
  if (bf16 && PAIR_VALUES(d)) {  // (rounded as they are converted to pairs)
    for (int64_t h = h0; h < h1; ++h)
      weighted_heads_pairs(sc + (h - h0) * g * len, len, g, v_buf + h * KV_ROW(d), slots, len,
                           slot_len, d, o + (h - h0) * g * d, h == h0 ? row_bytes : 0);
    return;
  }
#endif
  if (bf16) round_bf16_f32(sc, nq * len);
#if defined(RT_VEC)
  // Per KV head, its g query heads in passes over the V rows; the first head's pass fetches
  // the rows of every head [h0, h1) ahead.
  if (d == 64 || d == 128) {
    for (int64_t h = h0; h < h1; ++h)
      weighted_heads(sc + (h - h0) * g * len, len, g, v_buf + h * KV_ROW(d), slots, len,
                     slot_len, d, o + (h - h0) * g * d, h == h0 ? row_bytes : 0);
    return;
  }
#endif
  memset(o, 0, sizeof(float) * (size_t)(nq * d));
  for (int64_t l = 0; l < len; ++l) {
    const kv_t* vrow = v_buf + (int64_t)slots[l] * slot_len;
    for (int64_t h = h0, j = 0; h < h1; ++h)
      for (int64_t r = 0; r < g; ++r, ++j)
        axpy_kv(o + j * d, sc[j * len + l], vrow + h * KV_ROW(d), d);
  }
}

// Query heads [h0*g, h1*g) of one request (q (hq, d), out (hq, d)) attend over `len` slots
// through KV heads [h0, h1): one pass over the K rows, then one over the V rows, each reading
// the (h1 - h0) * d contiguous floats of a slot once for all their query heads.
// sc: scratch ((h1 - h0) * g, len). With ml == NULL the output rows are the attention
// outputs; else they are left unnormalised (sum of exp(score - max) * v) and the max and the
// sum of exp(score - max) of query head q0 + j go to ml[2j], ml[2j + 1] (one key range's
// part of a split softmax). `bf16` (a bfloat16 pool only): attention_pairs.h's arithmetic, q
// already scaled and rounded (scale 1), the probabilities rounded for the V pass
// (weighted_sums) and the output divided by the sum after it.
static void attend_heads(const float* q, float* out, int64_t g, int64_t h0, int64_t h1,
                         const kv_t* k_buf, const kv_t* v_buf, const int32_t* slots,
                         int64_t len, int64_t slot_len, int64_t d, float scale, float* sc,
                         float* ml, int bf16) {
  const int64_t nq = (h1 - h0) * g, q0 = h0 * g;
  // The bytes of a slot row that heads [h0, h1) read, from its head h0's row.
  const int64_t row_bytes = (h1 - h0) * KV_ROW(d) * (int64_t)sizeof(kv_t);
  float inv_sum[bf16 && !ml ? nq : 1];  // bf16: 1 / each query head's sum
  int64_t l0 = 0;
#if defined(RT_PAIR_DOT)
  if (bf16 && PAIR_KEYS(d) && g >= PAIR_GEMM_QUERIES)  // many queries per KV head: a product
    l0 = scores_pairs_gemm(q, g, h0, h1, k_buf, slots, len, slot_len, d, scale, sc);
  if (bf16 && PAIR_KEYS(d) && l0 == 0) {  // K rows read as bfloat16 pairs, in place
    const kv_t* k0 = k_buf + h0 * KV_ROW(d);
    for (int64_t t = 0; t < PF_BLOCKS * VW && t < len; ++t)
      prefetch_bytes(k0 + (int64_t)slots[t] * slot_len, row_bytes);
    for (; l0 + VW <= len; l0 += VW) {
      for (int64_t t = l0 + PF_BLOCKS * VW; t < l0 + (PF_BLOCKS + 1) * VW && t < len; ++t)
        prefetch_bytes(k0 + (int64_t)slots[t] * slot_len, row_bytes);
      for (int64_t h = h0, j = 0; h < h1; ++h)
        for (int64_t r = 0; r < g; ++r, ++j)
          vstore(sc + j * len + l0,
                 vmul(vset1(scale), dots_keys_pairs(q + (q0 + j) * d, k_buf + h * KV_ROW(d),
                                                    slots + l0, slot_len, d)));
    }
    if (l0 < len) {  // the last len % 16 keys: a block padded with the last key, cut at store
      int32_t tail[16];
      const int32_t* ks = block_slots(slots + l0, len - l0, tail);
      const __mmask16 keep = (__mmask16)((1u << (len - l0)) - 1);
      for (int64_t h = h0, j = 0; h < h1; ++h)
        for (int64_t r = 0; r < g; ++r, ++j)
          _mm512_mask_storeu_ps(
              sc + j * len + l0, keep,
              vmul(vset1(scale),
                   dots_keys_pairs(q + (q0 + j) * d, k_buf + h * KV_ROW(d), ks, slot_len, d)));
      l0 = len;
    }
  }
#endif
#if defined(RT_VEC)
  if (l0 == 0 && d % VW == 0 && d <= 128) {  // VW keys at a time: VW dots, one transposing sum
    const kv_t* k0 = k_buf + h0 * KV_ROW(d);
    for (int64_t t = 0; t < PF_BLOCKS * VW && t < len; ++t)
      prefetch_bytes(k0 + (int64_t)slots[t] * slot_len, row_bytes);
    // bfloat16 and fp8 K rows read by several queries (g > 1) are widened once per block and
    // head (fp8 with its scale applied) into kb (VW, d); float32 rows are read in place.
    const int widen = g > 1 && (KV_SCALED || sizeof(kv_t) != sizeof(float));
    float kb[VW * 128];
    for (; l0 + VW <= len; l0 += VW) {
      for (int64_t t = l0 + PF_BLOCKS * VW; t < l0 + (PF_BLOCKS + 1) * VW && t < len; ++t)
        prefetch_bytes(k0 + (int64_t)slots[t] * slot_len, row_bytes);
      for (int64_t h = h0, j = 0; h < h1; ++h) {
        const kv_t* kh = k_buf + h * KV_ROW(d);
        if (!widen) {
          for (int64_t r = 0; r < g; ++r, ++j)
            vstore(sc + j * len + l0,
                   vmul(vset1(scale), dots_keys(q + (q0 + j) * d, kh, slots + l0, slot_len, d)));
          continue;
        }
        for (int64_t t = 0; t < VW; ++t)  // (kv_row_f32 writes kb for every widened type)
          kv_row_f32(kh + (int64_t)slots[l0 + t] * slot_len, d, kb + t * d);
        for (int64_t r = 0; r < g; ++r, ++j)
          vstore(sc + j * len + l0, vmul(vset1(scale), dots_rows(q + (q0 + j) * d, kb, d)));
      }
    }
  }
#endif
  for (int64_t l = l0; l < len; ++l) {
    const kv_t* krow = k_buf + (int64_t)slots[l] * slot_len;
    for (int64_t h = h0, j = 0; h < h1; ++h)
      for (int64_t r = 0; r < g; ++r, ++j)
        sc[j * len + l] = scale * dot_kv(q + (q0 + j) * d, krow + h * KV_ROW(d), d);
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
    if (bf16) {
      inv_sum[j] = 1.0f / sum;  // the output's, after the V pass
      continue;
    }
    const float inv = 1.0f / sum;
    for (int64_t l = 0; l < len; ++l) row[l] *= inv;
  }
  float* o = out + q0 * d;
  weighted_sums(sc, len, g, h0, h1, v_buf, slots, slot_len, d, o, row_bytes, bf16);
  for (int64_t j = 0; bf16 && !ml && j < nq; ++j)
    for (int64_t c = 0; c < d; ++c) o[j * d + c] *= inv_sum[j];
}

// Split softmax, merged: dst (d) = sum_k e^(m_k - M) o_k / sum_k e^(m_k - M) l_k over n parts,
// part k's unnormalised output row o[k] (d) and its (max, sum) at ml[k][0], ml[k][1] (as
// attend_heads leaves them). A part with max -inf is empty (its row is not read); a NaN max
// (a part that had no scratch memory) makes the row NaN.
static inline void merge_parts(const float* const* o, const float* const* ml, int64_t n,
                               int64_t d, float* dst) {
  float m = -INFINITY, den = 0.0f;
  for (int64_t k = 0; k < n; ++k) m = ml[k][0] > m || isnan(ml[k][0]) ? ml[k][0] : m;
  memset(dst, 0, sizeof(float) * (size_t)d);
  for (int64_t k = 0; k < n; ++k) {
    if (ml[k][0] == -INFINITY) continue;
    const float w = expf(ml[k][0] - m);
    den += w * ml[k][1];
    axpy_f32(dst, w, o[k], d);
  }
  const float inv = 1.0f / den;
  for (int64_t c = 0; c < d; ++c) dst[c] *= inv;
}

// Cascade decode (attention_shared.c): requests sharing the first 64+ slots of their rows attend
// over them once per group. Returns 0, or -1 when no group formed or memory for the plan ran
// out (the caller then attends per request). out_loc (b,) or NULL: the slots this pass stored.
// `bf16`: as attend_heads'.
#define attend_shared KV_NAME(attend_shared)
int attend_shared(const float* q, int64_t ldq, const kv_t* k_buf, const kv_t* v_buf,
                  const int32_t* req_to_token, int64_t ld_table, const int64_t* rows,
                  const int64_t* seq_lens, const int64_t* out_loc, float* out, int64_t ldo,
                  int64_t b, int64_t hq, int64_t hkv, int64_t d, float scale, int bf16);
