// The decode attention's bfloat16-product pieces (internal header of attention_heads.h):
// what rt_decode_attention_bf16_kvbf16 computes, on every variant, and its VDPBF16PS form on
// the amx and avx512bf16 ones.
//
// Arithmetic (the extend kernel's, extend_attention_dot.c): the queries times the scale and
// the softmax probabilities are rounded to bfloat16; K and V are the pool's bfloat16; every
// product of two bfloat16 is exact in float32 and the sums, max, softmax and outputs are
// float32. The callers round the queries once (so `scale` is 1 here), and the V pass the
// probabilities (round_bf16_f32 or probs_to_bf16); the float32 loops then compute the same
// thing in FMAs, and
// the VDPBF16PS loops below (RT_PAIR_DOT) take two products per lane per instruction and read
// the rows without widening them.
#pragma once

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "attention_rows.h"
#include "kv.h"
#include "simd.h"

#if defined(RT_KV_BF16) && defined(RT_BF16_PAIRS)
#define RT_PAIR_DOT 1
// Head dims whose K rows (PAIR_KEYS) and V rows (PAIR_VALUES) the VDPBF16PS loops read; the
// others take the float32 loops, on the same values.
#define PAIR_KEYS(d) ((d) % 32 == 0 && (d) <= 128)
#define PAIR_VALUES(d) ((d) == 64 || (d) == 128)
#else
#define PAIR_KEYS(d) 0
#define PAIR_VALUES(d) 0
#endif

// x[0 .. n) rounded to bfloat16 (nearest even), kept as float32.
static inline void round_bf16_f32(float* x, int64_t n) {
  int64_t i = 0;
#if defined(RT_PAIR_DOT)
  for (; i + 16 <= n; i += 16) {
    const __m256i h = (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(x + i));
    _mm512_storeu_ps(x + i, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)));
  }
#endif
  for (; i < n; ++i) x[i] = rt_bf16_to_f32(rt_round_bf16(x[i]));
}

#if defined(RT_PAIR_DOT)
// Lane t = q . k_base[slots[t] * slot_len : + d] for 16 keys; q (d floats, bfloat16 values)
// and every K row read as d/32 vectors of bfloat16 (d a multiple of 32, at most 128).
static inline vf dots_keys_pairs(const float* q, const uint16_t* k_base, const int32_t* slots,
                                 int64_t slot_len, int64_t d) {
  __m512bh qv[4];
  for (int64_t c = 0; c < d / 32; ++c)  // exact: q holds bfloat16 values
    qv[c] = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(q + 32 * c + 16), _mm512_loadu_ps(q + 32 * c));
  vf acc[16];
  for (int t = 0; t < 16; ++t) acc[t] = vzero();
  for (int64_t c = 0; c < d / 32; ++c)
    for (int t = 0; t < 16; ++t)
      acc[t] = _mm512_dpbf16_ps(
          acc[t], qv[c],
          (__m512bh)_mm512_loadu_si512(k_base + (int64_t)slots[t] * slot_len + 32 * c));
  return vsum_lanes(acc);
}

// Queries per KV head from which scores_pairs_gemm takes a head's scores: a group's (g query
// heads per KV head times the requests sharing its keys), or a request's own where hq / hkv is
// this many. Measured on Zen 4 against dots_keys_pairs: 48 queries 0.77-0.85x the time, 6-7
// 0.84-0.99x, 4 1.00-1.06x (docs/benchmarks.md, section 8).
#ifndef PAIR_GEMM_QUERIES
#define PAIR_GEMM_QUERIES 6
#endif
#define PAIR_GEMM_BLOCK 8  // queries per register block of scores_pairs_gemm

// kt (16 rows of 16 words) = the transpose of the 16 words at each of r[0..16): row c holds
// word c of r[t] in lane t (three interleaving stages within 128-bit lanes, then lanes).
static inline void transpose_words_16(const __m512i r[16], uint32_t* kt) {
  __m512i t[16], u[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  for (int m = 0; m < 4; ++m) {  // u[4m + e], lane k: word 4k + e of rows 4m .. 4m + 3
    u[4 * m] = _mm512_unpacklo_epi64(t[4 * m], t[4 * m + 2]);
    u[4 * m + 1] = _mm512_unpackhi_epi64(t[4 * m], t[4 * m + 2]);
    u[4 * m + 2] = _mm512_unpacklo_epi64(t[4 * m + 1], t[4 * m + 3]);
    u[4 * m + 3] = _mm512_unpackhi_epi64(t[4 * m + 1], t[4 * m + 3]);
  }
  for (int e = 0; e < 4; ++e) {
    const __m512i x0 = _mm512_shuffle_i32x4(u[e], u[4 + e], 0x88);
    const __m512i x1 = _mm512_shuffle_i32x4(u[e], u[4 + e], 0xdd);
    const __m512i y0 = _mm512_shuffle_i32x4(u[8 + e], u[12 + e], 0x88);
    const __m512i y1 = _mm512_shuffle_i32x4(u[8 + e], u[12 + e], 0xdd);
    _mm512_store_si512(kt + 16 * e, _mm512_shuffle_i32x4(x0, y0, 0x88));
    _mm512_store_si512(kt + 16 * (4 + e), _mm512_shuffle_i32x4(x1, y1, 0x88));
    _mm512_store_si512(kt + 16 * (8 + e), _mm512_shuffle_i32x4(x0, y0, 0xdd));
    _mm512_store_si512(kt + 16 * (12 + e), _mm512_shuffle_i32x4(x1, y1, 0xdd));
  }
}

// The 16 slots from slots[0]: slots[0 .. n), then slots[n - 1] again (a short last block's
// keys padded with its last key: their lanes are computed and not stored).
static inline const int32_t* block_slots(const int32_t* slots, int64_t n, int32_t tail[16]) {
  if (n >= 16) return slots;
  for (int64_t t = 0; t < 16; ++t) tail[t] = slots[t < n ? t : n - 1];
  return tail;
}

// Scores of PAIR_GEMM_BLOCK queries (qp: their bfloat16 pairs, rows of `words` = d/2) over the
// 16 keys of kt (d/2 rows of 16 words: word c of key t in lane t), one VDPBF16PS per word row
// and query (the query's pair broadcast): the first `rows` rows of sc (ldsc apart) get scale *
// the dots in the lanes of `keep`.
static inline void scores_pairs_block(const uint32_t* qp, int64_t words, const uint32_t* kt,
                                      float scale, float* sc, int64_t ldsc, int64_t rows,
                                      __mmask16 keep) {
  vf acc[PAIR_GEMM_BLOCK];
  for (int r = 0; r < PAIR_GEMM_BLOCK; ++r) acc[r] = vzero();
  for (int64_t c = 0; c < words; ++c) {
    const __m512bh kv = (__m512bh)_mm512_load_si512(kt + 16 * c);
    for (int r = 0; r < PAIR_GEMM_BLOCK; ++r)
      acc[r] = _mm512_dpbf16_ps(acc[r], (__m512bh)_mm512_set1_epi32((int)qp[r * words + c]), kv);
  }
  for (int r = 0; r < rows; ++r)
    _mm512_mask_storeu_ps(sc + r * ldsc, keep, vmul(vset1(scale), acc[r]));
}

// The scores sc (nq, len) of nq = (h1 - h0) * g query heads (q (hq, d), bfloat16 values, from
// head q0 = h0 * g) over `len` keys of KV heads [h0, h1), for many queries per KV head (g >=
// PAIR_GEMM_QUERIES): each 16-key block's K rows transposed into word rows once per head, then
// a small matrix product per PAIR_GEMM_BLOCK queries, no per-key reductions (dots_keys_pairs
// reduces 16 lanes per key and query). The same products as dots_keys_pairs, summed in another
// order. Returns the keys done: len, or 0 without memory. qp is this call's, freed before it
// returns.
static int64_t scores_pairs_gemm(const float* q, int64_t g, int64_t h0, int64_t h1,
                                 const uint16_t* k_buf, const int32_t* slots, int64_t len,
                                 int64_t slot_len, int64_t d, float scale, float* sc) {
  const int64_t nq = (h1 - h0) * g, q0 = h0 * g, words = d / 2;
  const int64_t nqp = nq + PAIR_GEMM_BLOCK;  // a head's last block reads up to 7 rows past it
  uint32_t* qp = (uint32_t*)aligned_alloc(64, sizeof(uint32_t) * (size_t)(nqp * words + 16));
  if (!qp) return 0;
  for (int64_t j = 0; j < nqp; ++j)  // exact: q holds bfloat16 values; rows past nq are 0
    for (int64_t c = 0; c < words; c += 8)
      _mm256_storeu_si256(
          (__m256i*)(qp + j * words + c),
          j < nq ? (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(q + (q0 + j) * d + 2 * c))
                 : _mm256_setzero_si256());
  uint32_t kt[64 * 16] __attribute__((aligned(64)));  // words <= 64 (d <= 128)
  int32_t tail[16];
  for (int64_t l = 0; l < len; l += 16) {
    const int64_t n = len - l < 16 ? len - l : 16;
    const __mmask16 keep = (__mmask16)((1u << n) - 1);
    const int32_t* ks = block_slots(slots + l, n, tail);
    for (int64_t h = h0; h < h1; ++h) {
      const uint16_t* kh = k_buf + h * KV_ROW(d);
      for (int64_t c0 = 0; c0 < words; c0 += 16) {  // (words is a multiple of 16)
        __m512i r[16];
        for (int t = 0; t < 16; ++t)
          r[t] = _mm512_loadu_si512(kh + (int64_t)ks[t] * slot_len + 2 * c0);
        transpose_words_16(r, kt + 16 * c0);
      }
      const int64_t j0 = (h - h0) * g;
      for (int64_t r = 0; r < g; r += PAIR_GEMM_BLOCK)  // (rows past g: not stored)
        scores_pairs_block(qp + (j0 + r) * words, words, kt, scale, sc + (j0 + r) * len + l, len,
                           g - r < PAIR_GEMM_BLOCK ? g - r : PAIR_GEMM_BLOCK, keep);
    }
  }
  free(qp);
  return len;
}

// Rows of float32 probabilities holding bfloat16 values (rounded), converted in place to
// bfloat16: row r's len values become the uint16 words at (uint16_t*)(p + r * ldp), so a key
// pair's weights are one 32-bit word. The floats are gone after.
static inline void probs_to_bf16(float* p, int64_t ldp, int64_t nq, int64_t len) {
  for (int64_t r = 0; r < nq; ++r) {
    float* row = p + r * ldp;
    char* pb = (char*)row;  // word i is written after float i (and every float below it) is read
    int64_t i = 0;
    for (; i + 16 <= len; i += 16)
      _mm256_storeu_si256((__m256i*)(pb + 2 * i),
                          (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(row + i)));
    for (; i < len; ++i) {  // bytes, not a uint16_t lvalue over the floats
      const uint16_t h = rt_round_bf16(row[i]);
      memcpy(pb + 2 * i, &h, sizeof h);
    }
  }
}

// The 32-bit pair (pb[0], pb[1]) as every lane, pb[1] read as 0 where !two.
static inline __m512bh prob_pair(const uint16_t* pb, int two) {
  uint32_t w = 0;  // (bytes copied: the words live in a float buffer, probs_to_bf16)
  if (two)
    memcpy(&w, pb, 4);
  else
    memcpy(&w, pb, 2);  // the low half (x86 is little-endian)
  return (__m512bh)_mm512_set1_epi32((int)w);
}

// Output columns of a 32-column chunk from its two accumulators: _mm512_unpack{lo,hi}_epi16
// of two rows put column 8k + j (j < 4) in lane 4k + j of the lo pairs and column 8k + 4 + j
// in lane 4k + j of the hi ones; COLS_LO gathers columns 0-15, COLS_HI 16-31 (index 16+ is hi).
static const int32_t COLS_LO[16] __attribute__((aligned(64))) = {
    0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23};
static const int32_t COLS_HI[16] __attribute__((aligned(64))) = {
    8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31};

// o (NQ, D) = sum_l pb[r * ldp + l] * v[slots[l] * slot_len : + D] for NQ query heads of one
// KV head (pb: bfloat16 weights, rows ldp apart): two keys per VDPBF16PS (their V rows interleaved as column pairs, each pair of rows
// read once for all NQ heads), the NQ * D / 16 accumulators in registers. pf_bytes > 0: also
// prefetch that many bytes of the slot rows PF_KEYS keys ahead (as weighted_rows does).
#define WEIGHTED_PAIRS(D, NQ)                                                                  \
  static inline void weighted_pairs_##D##_##NQ(const uint16_t* p, int64_t ldp, const uint16_t* v, \
                                               const int32_t* slots, int64_t len,              \
                                               int64_t slot_len, float* o, int64_t pf_bytes) { \
    vf acc[NQ][D / 16];                                                                        \
    for (int r = 0; r < NQ; ++r)                                                               \
      for (int j = 0; j < D / 16; ++j) acc[r][j] = vzero();                                    \
    for (int64_t l = 0; l < len; l += 2) {                                                     \
      const int two = l + 1 < len;                                                             \
      for (int64_t t = l + PF_KEYS; pf_bytes && t < l + PF_KEYS + 2 && t < len; ++t)           \
        prefetch_bytes(v + (int64_t)slots[t] * slot_len, pf_bytes);                            \
      const uint16_t* a = v + (int64_t)slots[l] * slot_len;                                    \
      const uint16_t* b = two ? v + (int64_t)slots[l + 1] * slot_len : a; /* weight 0 */       \
      __m512bh pl[NQ];                                                                         \
      for (int r = 0; r < NQ; ++r) pl[r] = prob_pair(p + r * ldp + l, two);                    \
      for (int c = 0; c < D / 32; ++c) {                                                       \
        const __m512i x = _mm512_loadu_si512(a + 32 * c), y = _mm512_loadu_si512(b + 32 * c);  \
        const __m512bh lo = (__m512bh)_mm512_unpacklo_epi16(x, y);                             \
        const __m512bh hi = (__m512bh)_mm512_unpackhi_epi16(x, y);                             \
        for (int r = 0; r < NQ; ++r) {                                                         \
          acc[r][2 * c] = _mm512_dpbf16_ps(acc[r][2 * c], pl[r], lo);                          \
          acc[r][2 * c + 1] = _mm512_dpbf16_ps(acc[r][2 * c + 1], pl[r], hi);                  \
        }                                                                                      \
      }                                                                                        \
    }                                                                                          \
    const __m512i lo_cols = _mm512_load_si512(COLS_LO), hi_cols = _mm512_load_si512(COLS_HI);  \
    for (int r = 0; r < NQ; ++r)                                                               \
      for (int c = 0; c < D / 32; ++c) {                                                       \
        const vf lo = acc[r][2 * c], hi = acc[r][2 * c + 1];                                   \
        vstore(o + r * D + 32 * c, _mm512_permutex2var_ps(lo, lo_cols, hi));                   \
        vstore(o + r * D + 32 * c + 16, _mm512_permutex2var_ps(lo, hi_cols, hi));              \
      }                                                                                        \
  }
WEIGHTED_PAIRS(64, 1)
WEIGHTED_PAIRS(64, 2)
WEIGHTED_PAIRS(64, 3)
WEIGHTED_PAIRS(64, 4)
WEIGHTED_PAIRS(128, 1)
WEIGHTED_PAIRS(128, 2)
#undef WEIGHTED_PAIRS

// weighted_heads on VDPBF16PS: o (nq, d) for nq query heads of one KV head, p (nq rows of
// ldp floats, the first len of each) rounded to bfloat16 here and overwritten
// (probs_to_bf16); d with PAIR_VALUES, in passes of 4 (d 64) or 2 heads.
static inline void weighted_heads_pairs(float* p, int64_t ldp, int64_t nq, const uint16_t* v,
                                        const int32_t* slots, int64_t len, int64_t slot_len,
                                        int64_t d, float* o, int64_t pf_bytes) {
  probs_to_bf16(p, ldp, nq, len);
  const int64_t per = d == 64 ? 4 : 2;
  const uint16_t* pb = (const uint16_t*)p;
  ldp *= 2;  // in bfloat16 words
  for (int64_t r = 0; r < nq; r += per, pf_bytes = 0) {
    const int64_t n = nq - r < per ? nq - r : per;
    const uint16_t* pr = pb + r * ldp;
    float* orow = o + r * d;
    if (d == 64 && n == 4) weighted_pairs_64_4(pr, ldp, v, slots, len, slot_len, orow, pf_bytes);
    else if (d == 64 && n == 3) weighted_pairs_64_3(pr, ldp, v, slots, len, slot_len, orow, pf_bytes);
    else if (d == 64 && n == 2) weighted_pairs_64_2(pr, ldp, v, slots, len, slot_len, orow, pf_bytes);
    else if (d == 64) weighted_pairs_64_1(pr, ldp, v, slots, len, slot_len, orow, pf_bytes);
    else if (n == 2) weighted_pairs_128_2(pr, ldp, v, slots, len, slot_len, orow, pf_bytes);
    else weighted_pairs_128_1(pr, ldp, v, slots, len, slot_len, orow, pf_bytes);
  }
}
#endif
