// Causal extend attention over a bfloat16 KV pool on AMX tiles (the "amx" variant's
// rt_extend_attention_bf16_kvbf16): the same inputs and result as rt_extend_attention_f32_kvbf16 (extend_attention_f32.c), with both
// products on TDPBF16PS. Queries (scaled) and probabilities are rounded to bfloat16 as GPU
// flash attention does; scores, running max and sum, and the output accumulator are float32.
//
// Transposed layout: scores are computed as S^T = K Q^T (rows = keys, lanes = the 16 query
// rows of a work item) and the output as O^T = V^T P^T, so the online softmax's max, sum and
// rescale are lane-wise vector operations over 16 queries at once, with no horizontal
// reduction per row. The request's keys are packed once per call, per KV head, as bfloat16
// rows (the A tiles of K Q^T, keys past p+e zero) and its values transposed (V^T, dims x keys:
// the A tiles of V^T P^T). A work item (one OpenMP task) is one KV head's g query heads over 16
// query rows; each head's scaled queries are packed once as the B tiles of K Q^T (row r holds,
// per query, dims (2r, 2r+1)); per block of KB keys it computes S^T (KB x 16) four C tiles
// at a time, the online softmax in AVX-512 (probabilities written as the B tiles of V^T P^T, key
// pairs per query), then V^T P^T into four C tiles at a time, which rescale-and-add into its
// float32 O^T. The packing and transposes are in extend_bf16_layout.h.
// Returns -2 without AMX, -3 for what it does not take (d not a multiple of 32 up to 256, a
// sliding window): the caller then runs the float32 kernel.
#define _GNU_SOURCE
#define RT_KV_BF16 1
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "amx_tiles.h"
#include "bf16_pairs.h"
#include "extend_bf16_layout.h"
#include "kv.h"
#include "rt_cpu.h"
#include "simd.h"

#if defined(RT_AMX)
#define KB 128    // keys per online-softmax block: eight 16-key S^T tiles, four 32-key P^T tiles

// Tiles (amx_tiles.h) 0-3: C (16 x 16 float32); 4, 5: A (16 x 32 bf16); 6, 7: B (16 x 64 bytes).

// One head's 16 query rows: qt the scaled queries as d/32 B tiles (512 bf16 each), ot (d, 16)
// the unnormalised outputs transposed, m and l each query's running max and sum (lanes).
typedef struct {
  uint16_t* qt;
  float* ot;
  vf m, l;
} head_t;

// S^T tile `t` (keys 16t .. 16t+15 from kr) into C tile t; tile numbers must be constants.
#define S_TILE(t, a)                                     \
  do {                                                   \
    _tile_loadd(a, kr + (16 * (t)) * d + c * 32, d * 2); \
    _tile_dpbf16ps(t, a, 6);                             \
  } while (0)

// Up to 64 keys from kr (nk16 16-key tiles) of S^T into st (rows of 16 query lanes).
static void scores(const uint16_t* qt, const uint16_t* kr, int64_t nk16, int64_t d, float* st) {
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (int64_t c = 0; c < d / 32; ++c) {
    _tile_loadd(6, qt + c * 512, 64);
    S_TILE(0, 4);
    if (nk16 > 1) S_TILE(1, 5);
    if (nk16 > 2) S_TILE(2, 4);
    if (nk16 > 3) S_TILE(3, 5);
  }
  _tile_stored(0, st, 64);
  if (nk16 > 1) _tile_stored(1, st + 256, 64);
  if (nk16 > 2) _tile_stored(2, st + 512, 64);
  if (nk16 > 3) _tile_stored(3, st + 768, 64);
}

// C tile c (16 dims) += V^T tile (va, row stride ld) x P^T tile in B tile b.
#define PV_TILE(c, a, b, off)                               \
  do {                                                      \
    _tile_loadd(a, va + (16 * (c)) * ld + (off), ld * 2);   \
    _tile_dpbf16ps(c, a, b);                                \
  } while (0)

// Keys j0 .. j0+nk-1 (nk <= KB) into one head's rows; query i (lane i) sees block keys up to
// seen[i] - 1 (all KB when `full`). kr: the block's K rows; vt: V^T at the block's first key
// (row stride npad); st (KB x 16) and pt (KB/2 x 32 bf16) scratch.
static void head_block(head_t* hd, const uint16_t* kr, const uint16_t* vt, int64_t npad,
                       int64_t nk, __m512i seen, int full, int64_t d, float* st, uint16_t* pt,
                       float* pv) {
  const int64_t kt = (nk + 15) / 16, vg = (nk + 31) / 32, rows = kt * 16;
  scores(hd->qt, kr, kt < 4 ? kt : 4, d, st);
  if (kt > 4) scores(hd->qt, kr + 64 * d, kt - 4, d, st + 1024);
  // Pass 1: the block's max per query over the keys it sees (rows past kt * 16 are unused).
  const vf ninf = vset1(-INFINITY);
  vf mx = ninf;
  if (full) {
    for (int64_t r = 0; r < rows; ++r) mx = vmax(mx, vload(st + r * 16));
  } else {
    for (int64_t r = 0; r < rows; ++r) {
      const vmask mk = _mm512_cmpgt_epi32_mask(seen, _mm512_set1_epi32((int)r));
      mx = _mm512_mask_max_ps(mx, mk, mx, vload(st + r * 16));
    }
  }
  const vf m_new = vmax(hd->m, mx);
  // alpha = 2^(m_old - m_new); a query's first block (m_old = -inf) has no output to rescale,
  // and one whose max did not move keeps it exactly (exp2_bf16(0) is not 1), so a block that
  // hides every key from a query leaves its row as it was: a row's bits do not depend on how
  // far the other rows of its tile reach.
  const vf l2e = vset1(LOG2E), m_l2e = vmul(m_new, l2e);
  const vf alpha = _mm512_mask_blend_ps(
      _mm512_cmp_ps_mask(hd->m, m_new, _CMP_EQ_OQ),
      _mm512_maskz_mov_ps(vcmp_neq(hd->m, ninf), exp2_bf16(vmul(vsub(hd->m, m_new), l2e))),
      vset1(1.0f));
  hd->m = m_new;
  // Pass 2: probabilities, their sum, and P^T as B tiles: row q of 32-key group v holds, per
  // query, keys (32v + 2q, 32v + 2q + 1).
  const __m512i pair = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9,
                                        24, 8, 23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1,
                                        16, 0);
  vf sum = vzero();
  for (int64_t r = 0; r < vg * 32; r += 2) {
    vf p0 = vzero(), p1 = vzero();
    if (r < rows) {
      p0 = exp2_bf16(_mm512_fmsub_ps(vload(st + r * 16), l2e, m_l2e));
      p1 = exp2_bf16(_mm512_fmsub_ps(vload(st + (r + 1) * 16), l2e, m_l2e));
      if (!full) {
        p0 = _mm512_maskz_mov_ps(_mm512_cmpgt_epi32_mask(seen, _mm512_set1_epi32((int)r)), p0);
        p1 = _mm512_maskz_mov_ps(_mm512_cmpgt_epi32_mask(seen, _mm512_set1_epi32((int)r + 1)),
                                 p1);
      }
      sum = vadd(sum, vadd(p0, p1));
    }
    const __m512i bf = (__m512i)_mm512_cvtne2ps_pbh(p1, p0);  // p0's 16 then p1's 16
    _mm512_store_si512((void*)(pt + r * 16), _mm512_permutexvar_epi16(pair, bf));
  }
  hd->l = vfma(hd->l, alpha, sum);
  // O^T (d x 16) = V^T (d x nk) P^T (nk x 16), four 16-dim tiles at a time, rescaled by alpha.
  const int64_t ld = npad;
  for (int64_t c0 = 0; c0 < d / 16; c0 += 4) {
    const int64_t nc = d / 16 - c0 < 4 ? d / 16 - c0 : 4;
    const uint16_t* va = vt + c0 * 16 * npad;
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (int64_t v = 0; v < vg; v += 2) {
      _tile_loadd(6, pt + v * 512, 64);
      PV_TILE(0, 4, 6, v * 32);
      PV_TILE(1, 5, 6, v * 32);
      if (nc > 2) {
        PV_TILE(2, 4, 6, v * 32);
        PV_TILE(3, 5, 6, v * 32);
      }
      if (v + 1 < vg) {
        _tile_loadd(7, pt + (v + 1) * 512, 64);
        PV_TILE(0, 4, 7, v * 32 + 32);
        PV_TILE(1, 5, 7, v * 32 + 32);
        if (nc > 2) {
          PV_TILE(2, 4, 7, v * 32 + 32);
          PV_TILE(3, 5, 7, v * 32 + 32);
        }
      }
    }
    _tile_stored(0, pv, 64);
    _tile_stored(1, pv + 256, 64);
    _tile_stored(2, pv + 512, 64);
    _tile_stored(3, pv + 768, 64);
    float* o = hd->ot + c0 * 16 * 16;
    for (int64_t r = 0; r < nc * 16; ++r)
      vstore(o + r * 16, vfma(vload(o + r * 16), alpha, vload(pv + r * 16)));
  }
}

// rt_extend_attention_bf16_kvbf16 on AMX tiles (on the avx512bf16 variant:
// extend_attention_dot.c; elsewhere -2).
int rt_extend_attention_bf16_kvbf16(const float* q, int64_t ldq, const kv_t* k_buf,
                                    const kv_t* v_buf, const int32_t* slots, int64_t p,
                                    int64_t e, float* out, int64_t ldo, int64_t hq, int64_t hkv,
                                    int64_t d, float scale, int64_t window) {
  if (bf16_extend_refuses(d, window)) return -3;
  if (e <= 0) return 0;
  const int64_t n = p + e, npad = (n + KB - 1) / KB * KB, g = hq / hkv;
  const int64_t head_elems = npad * d;  // bf16 per KV head in each packed buffer
  uint16_t* kp = (uint16_t*)aligned_alloc(64, sizeof(uint16_t) * (size_t)(2 * hkv * head_elems));
  if (!kp) return -1;
  uint16_t* vp = kp + hkv * head_elems;  // per KV head: V^T, d rows of npad keys
  const int64_t groups = npad / 32, blocks = (e + 15) / 16;
  int failed = 0;
  // (A small call runs on one thread: the barriers would cost more than the work.)
#pragma omp parallel reduction(| : failed) if (hq * e * n >= 32768)
  {
#pragma omp for schedule(static)
    for (int64_t w = 0; w < hkv * groups; ++w) {
      const int64_t h = w / groups, t = w % groups;
      pack_keys(k_buf, v_buf, slots, n, t * 32, h, hkv, d, npad, kp + h * head_elems + t * 32 * d,
                vp + h * head_elems);
    }
    rt_configure_tiles();
    uint16_t* qb = (uint16_t*)aligned_alloc(64, sizeof(uint16_t) * (size_t)(16 * d * g));
    float* ob = (float*)aligned_alloc(64, sizeof(float) * (size_t)(16 * d * g));
    head_t* heads = (head_t*)aligned_alloc(64, sizeof(head_t) * (size_t)g);
    float st[KB * 16] __attribute__((aligned(64)));
    float pv[64 * 16] __attribute__((aligned(64)));
    uint16_t pt[KB * 16] __attribute__((aligned(64)));
    failed = !qb || !ob || !heads;
    // Last row blocks (most keys) first, so the threads finish together.
#pragma omp for schedule(dynamic, 1)
    for (int64_t w = 0; w < hkv * blocks; ++w) {
      if (failed) continue;
      const int64_t b = blocks - 1 - w / hkv, h = w % hkv;
      const int64_t r0 = b * 16, rows = e - r0 < 16 ? e - r0 : 16, len = p + r0 + rows;
      // Per lane (query row), the keys it sees: up to p + r0 + i (padding rows: the last one).
      int32_t last[16] __attribute__((aligned(64)));
      for (int i = 0; i < 16; ++i) last[i] = (int32_t)(p + r0 + (i < rows ? i : rows - 1));
      const __m512i lastv = _mm512_load_si512((const void*)last);
      for (int64_t r = 0; r < g; ++r) {
        head_t* hd = &heads[r];
        hd->qt = qb + r * 16 * d;
        hd->ot = ob + r * 16 * d;
        hd->m = vset1(-INFINITY);
        hd->l = vzero();
        pack_queries(q + r0 * ldq + (h * g + r) * d, ldq, rows, d, scale, hd->qt);
        memset(hd->ot, 0, sizeof(float) * (size_t)(16 * d));
      }
      const uint16_t* kh = kp + h * head_elems;
      const uint16_t* vh = vp + h * head_elems;
      for (int64_t j0 = 0; j0 < len; j0 += KB) {
        const int64_t nk = len - j0 < KB ? len - j0 : KB;
        // seen[i] = keys of this block query i sees; every query sees all of them when the
        // block ends at or before the first query's last key.
        const __m512i seen = _mm512_sub_epi32(lastv, _mm512_set1_epi32((int)(j0 - 1)));
        const int full = nk == KB && j0 + KB - 1 <= p + r0;
        for (int64_t r = 0; r < g; ++r)
          head_block(&heads[r], kh + j0 * d, vh + j0, npad, nk, seen, full, d, st, pt, pv);
      }
      for (int64_t r = 0; r < g; ++r)
        write_rows(heads[r].ot, heads[r].l, out + r0 * ldo + (h * g + r) * d, ldo, rows, d);
    }
    _tile_release();
    free(qb);
    free(ob);
    free(heads);
  }
  free(kp);
  return failed ? -1 : 0;
}

#elif !defined(RT_BF16_DOT)
int rt_extend_attention_bf16_kvbf16(const float* q, int64_t ldq, const kv_t* k_buf,
                                    const kv_t* v_buf, const int32_t* slots, int64_t p,
                                    int64_t e, float* out, int64_t ldo, int64_t hq, int64_t hkv,
                                    int64_t d, float scale, int64_t window) {
  (void)q, (void)ldq, (void)k_buf, (void)v_buf, (void)slots, (void)p, (void)e, (void)out;
  (void)ldo, (void)hq, (void)hkv, (void)d, (void)scale, (void)window;
  return -2;  // no bfloat16 products in this variant: the caller runs the float32 kernel
}
#endif
