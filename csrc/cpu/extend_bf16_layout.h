// Operand layouts of the extend-attention kernels of bfloat16 products (internal header of
// extend_attention_amx.c, AMX tiles, and extend_attention_dot.c, VDPBF16PS): the head dims
// they take, the request's K rows and V^T packed per KV head (AMX), each work item's queries
// as bf16 pairs per lane (both: the AMX B tiles are the VDPBF16PS operands too), and its
// transposed outputs written back as rows (both).
#pragma once

#include <stdint.h>
#include <string.h>

#include "kv.h"
#include "simd.h"

#if defined(RT_BF16_PAIRS)
#define MAXD 256  // largest head dim taken

// Whether the kernels refuse a head dim or window (rt_extend_attention_bf16_kvbf16's -3;
// kernels.bf16_extend_takes says the same).
static inline int bf16_extend_refuses(int64_t d, int64_t window) {
  return d % 32 != 0 || d > MAXD || window > 0;
}

// 16 x 16 32-bit elements transposed in registers: at s = 8, 4, 2, 1 the off-diagonal s x s
// blocks of every 2s x 2s block swap (rows r and r + s trade lanes).
// (SWAP[level]: the lane indices of _mm512_permutex2var_epi32 for rows r and r + s.)
static const int32_t SWAP[4][2][16] __attribute__((aligned(64))) = {
    {{0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23},
     {8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31}},
    {{0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27},
     {4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31}},
    {{0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29},
     {2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31}},
    {{0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30},
     {1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31}},
};
static inline void transpose16(__m512i x[16]) {
  for (int lv = 0, s = 8; lv < 4; ++lv, s /= 2) {
    const __m512i il = _mm512_load_si512((const void*)SWAP[lv][0]);
    const __m512i ih = _mm512_load_si512((const void*)SWAP[lv][1]);
    for (int r = 0; r < 16; ++r)
      if (!(r & s)) {
        const __m512i a = x[r], b = x[r + s];
        x[r] = _mm512_permutex2var_epi32(a, il, b);
        x[r + s] = _mm512_permutex2var_epi32(a, ih, b);
      }
  }
}

#if defined(RT_AMX)
// Keys t0 .. t0+31 of KV head h: their K rows into kr (32 rows of d bf16) and their V values
// into columns t0 .. t0+31 of vt (d rows of npad bf16), zero past n.
// (inline: the VDPBF16PS kernel, built beside it in the amx variant, does not use it)
static inline void pack_keys(const kv_t* k_buf, const kv_t* v_buf, const int32_t* slots,
                             int64_t n, int64_t t0, int64_t h, int64_t hkv, int64_t d,
                             int64_t npad, uint16_t* kr, uint16_t* vt) {
  static const uint16_t zeros[MAXD];
  const kv_t* vr[32];
  for (int t = 0; t < 32; ++t) {
    const int64_t row = t0 + t < n ? (int64_t)slots[t0 + t] * hkv * d + h * d : -1;
    vr[t] = row < 0 ? zeros : v_buf + row;
    memcpy(kr + t * d, row < 0 ? zeros : k_buf + row, sizeof(uint16_t) * (size_t)d);
  }
  for (int64_t c = 0; c < d; ++c) {  // one 64-byte line of V^T per dim
    uint16_t line[32] __attribute__((aligned(64)));
    for (int t = 0; t < 32; ++t) line[t] = vr[t][c];
    memcpy(vt + c * npad + t0, line, sizeof line);
  }
}
#endif

// The scaled queries of any 16 query rows of one KV head's query heads (lane i's d floats
// at src[i]; lanes from `n` on zero) as d/32 B tiles: each row's 32 dims of a chunk round to
// 16 bf16 pairs, and the 16 x 16 pairs transpose: pair r of the dims is 16 lanes of 32 bits,
// one per query row (a VDPBF16PS operand).
static inline void pack_query_lanes(const float* const* src, int64_t n, int64_t d, float scale,
                                    uint16_t* qt) {
  const vf sc = vset1(scale);
  for (int64_t c = 0; c < d / 32; ++c) {
    __m512i x[16];
    for (int i = 0; i < 16; ++i)
      x[i] = i >= n ? _mm512_setzero_si512()
                    : (__m512i)_mm512_cvtne2ps_pbh(vmul(vload(src[i] + c * 32 + 16), sc),
                                                   vmul(vload(src[i] + c * 32), sc));
    transpose16(x);
    for (int r = 0; r < 16; ++r) _mm512_store_si512((void*)(qt + c * 512 + r * 32), x[r]);
  }
}

// pack_query_lanes of 16 rows of one head, ldq floats apart (rows past `rows` zero).
static inline void pack_queries(const float* qr, int64_t ldq, int64_t rows, int64_t d,
                                float scale, uint16_t* qt) {
  const float* src[16] = {0};
  for (int64_t i = 0; i < rows && i < 16; ++i) src[i] = qr + i * ldq;
  pack_query_lanes(src, rows, d, scale, qt);
}

// Lanes i < n of O^T (d x 16) transposed to their rows dst[i], each divided by its sum.
static inline void write_lanes(const float* ot, vf l, float* const* dst, int64_t n, int64_t d) {
  float inv[16] __attribute__((aligned(64)));
  vstore(inv, vdiv(vset1(1.0f), l));
  for (int64_t c = 0; c < d; c += 16) {
    __m512i x[16];
    for (int r = 0; r < 16; ++r) x[r] = _mm512_castps_si512(vload(ot + (c + r) * 16));
    transpose16(x);
    for (int64_t i = 0; i < n; ++i)
      vstore(dst[i] + c, vmul(_mm512_castsi512_ps(x[i]), vset1(inv[i])));
  }
}

// write_lanes to rows r0 .. r0+rows-1 of one head's output, ldo floats apart.
static inline void write_rows(const float* ot, vf l, float* out, int64_t ldo, int64_t rows,
                              int64_t d) {
  float* dst[16];
  for (int64_t i = 0; i < rows; ++i) dst[i] = out + i * ldo;
  write_lanes(ot, l, dst, rows, d);
}
#endif
