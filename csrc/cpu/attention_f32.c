// Paged decode attention over the token-slot KV pool, float32 arithmetic over float32,
// bfloat16 or fp8 KV (kv.h; attention_kv*.c build the narrower pools' copies), and over a
// bfloat16 pool also with bfloat16 products (rt_decode_attention_bf16_kvbf16,
// attention_pairs.h): each request's new K/V is stored in its slot (rounded to the pool's
// type), then its query heads attend over req_to_token[row, :seq_len]. Torch definition:
// decode_attention_ref in radixrt/model/cpu/reference.py.
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "attention_heads.h"
#include "rt_cpu.h"

#ifndef RANGE_KEYS
#define RANGE_KEYS 512  // keys per range of a split-key request (at least)
#endif
#ifndef MAX_RANGES
#define MAX_RANGES 8
#endif

// Split-key attention: request i's keys in `ranges` near-equal ranges, each a work item over
// all heads leaving its unnormalised output and (max, sum) per query head in
// part[(i * ranges + r) * hq * (d + 2) ..] (outputs, then the pairs); then per request and
// head the ranges are merged: out = sum_r e^(m_r - M) o_r / sum_r e^(m_r - M) l_r.
static void attend_ranges(const float* q, int64_t ldq, const kv_t* k_buf, const kv_t* v_buf,
                          const int32_t* req_to_token, int64_t ld_table, const int64_t* rows,
                          const int64_t* seq_lens, float* out, int64_t ldo, int64_t b,
                          int64_t hq, int64_t hkv, int64_t d, float scale, int64_t ranges,
                          int64_t max_len, float* part, int bf16) {
  const int64_t g = hq / hkv, slot_len = hkv * KV_ROW(d), stride = hq * (d + 2);
  const int64_t range_len = (max_len + ranges - 1) / ranges;
#pragma omp parallel
  {
    float* sc = (float*)malloc(sizeof(float) * (size_t)(hq * range_len + 16));
#pragma omp for schedule(dynamic, 1)
    for (int64_t work = 0; work < b * ranges; ++work) {
      const int64_t i = work / ranges, r = work % ranges, len = seq_lens[i];
      const int64_t span = (len + ranges - 1) / ranges, l0 = r * span;
      const int64_t l1 = l0 + span < len ? l0 + span : len;
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
                   req_to_token + rows[i] * ld_table + l0, l1 - l0, slot_len, d, scale, sc, ml,
                   bf16);
    }
    free(sc);
  }
  for (int64_t i = 0; i < b; ++i)
    for (int64_t j = 0; j < hq; ++j) {
      const float *o[MAX_RANGES], *ml[MAX_RANGES];
      for (int64_t r = 0; r < ranges; ++r) {
        const float* pr = part + (i * ranges + r) * stride;
        o[r] = pr + j * d;
        ml[r] = pr + hq * d + 2 * j;
      }
      merge_parts(o, ml, ranges, d, out + i * ldo + j * d);
    }
}

// Store t rows of new K/V (hkv*d floats each, rows ld_new apart) at slots out_loc[0..t).
void KV_NAME(rt_store_kv)(const float* k_new, const float* v_new, int64_t ld_new, kv_t* k_buf,
                          kv_t* v_buf, const int64_t* out_loc, int64_t t, int64_t hkv,
                          int64_t d) {
  const int64_t slot_len = hkv * KV_ROW(d);
  for (int64_t i = 0; i < t; ++i) {
    kv_store_row(k_buf + out_loc[i] * slot_len, k_new + i * ld_new, hkv, d);
    kv_store_row(v_buf + out_loc[i] * slot_len, v_new + i * ld_new, hkv, d);
  }
}

// The decode pass of rt_decode_attention_f32 (bf16 0) and rt_decode_attention_bf16_kvbf16
// (bf16 1: q already scaled and rounded to bfloat16, scale 1).
static void decode(const float* q, int64_t ldq, const float* k_new, const float* v_new,
                   int64_t ld_new, kv_t* k_buf, kv_t* v_buf, const int64_t* out_loc,
                   const int32_t* req_to_token, int64_t ld_table, const int64_t* rows,
                   const int64_t* seq_lens, float* out, int64_t ldo, int64_t b, int64_t hq,
                   int64_t hkv, int64_t d, float scale, int bf16) {
  const int64_t g = hq / hkv, slot_len = hkv * KV_ROW(d);
  int64_t max_len = 0;
  for (int64_t i = 0; i < b; ++i) max_len = seq_lens[i] > max_len ? seq_lens[i] : max_len;
  // Row i owns slot out_loc[i]: storing its new K/V races with no other row. Every row is
  // stored before any attends: consecutive rows of one request (a draft being verified, its
  // seq_lens one apart) read the K/V of the rows before them.
  // k_new == NULL: the new K/V are in the pool already (stored by the caller), out_loc unused.
  for (int64_t i = 0; k_new && i < b; ++i) {
    kv_store_row(k_buf + out_loc[i] * slot_len, k_new + i * ld_new, hkv, d);
    kv_store_row(v_buf + out_loc[i] * slot_len, v_new + i * ld_new, hkv, d);
  }
  // Requests sharing a cached prefix: it is read once for all of them (attend_shared).
  if (b > 1 && attend_shared(q, ldq, k_buf, v_buf, req_to_token, ld_table, rows, seq_lens,
                             k_new ? out_loc : 0, out, ldo, b, hq, hkv, d, scale, bf16) == 0)
    return;
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
                  hkv, d, scale, ranges, max_len, part, bf16);
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
                   req_to_token + rows[i] * ld_table, seq_lens[i], slot_len, d, scale, sc, 0,
                   bf16);
    }
    free(sc);
  }
}

void KV_NAME(rt_decode_attention_f32)(const float* q, int64_t ldq, const float* k_new,
                                      const float* v_new, int64_t ld_new, kv_t* k_buf,
                                      kv_t* v_buf, const int64_t* out_loc,
                                      const int32_t* req_to_token, int64_t ld_table,
                                      const int64_t* rows, const int64_t* seq_lens, float* out,
                                      int64_t ldo, int64_t b, int64_t hq, int64_t hkv,
                                      int64_t d, float scale) {
  decode(q, ldq, k_new, v_new, ld_new, k_buf, v_buf, out_loc, req_to_token, ld_table, rows,
         seq_lens, out, ldo, b, hq, hkv, d, scale, 0);
}

#if defined(RT_KV_BF16)
// The same pass with bfloat16 products (attention_pairs.h): q * scale rounded to bfloat16 once
// here, into memory this call owns and frees; no memory for it: the rows read NaN.
void rt_decode_attention_bf16_kvbf16(const float* q, int64_t ldq, const float* k_new,
                                     const float* v_new, int64_t ld_new, kv_t* k_buf,
                                     kv_t* v_buf, const int64_t* out_loc,
                                     const int32_t* req_to_token, int64_t ld_table,
                                     const int64_t* rows, const int64_t* seq_lens, float* out,
                                     int64_t ldo, int64_t b, int64_t hq, int64_t hkv, int64_t d,
                                     float scale) {
  const int64_t hd = hq * d;
  float* qs = (float*)malloc(sizeof(float) * (size_t)(b * hd + 1));
  if (!qs) {
    for (int64_t i = 0; i < b; ++i)
      for (int64_t j = 0; j < hd; ++j) out[i * ldo + j] = NAN;
    return;
  }
  for (int64_t i = 0; i < b; ++i) {
    for (int64_t j = 0; j < hd; ++j) qs[i * hd + j] = q[i * ldq + j] * scale;
    round_bf16_f32(qs + i * hd, hd);
  }
  decode(qs, hd, k_new, v_new, ld_new, k_buf, v_buf, out_loc, req_to_token, ld_table, rows,
         seq_lens, out, ldo, b, hq, hkv, d, 1.0f, 1);
  free(qs);
}
#endif
