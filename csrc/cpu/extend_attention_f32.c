// Causal attention for prefill/extend over the token-slot KV pool, float32 (flash-style: one
// pass over the keys with an online softmax, no (query x key) matrix in memory).
//
// One request: `e` new query rows at positions p .. p+e-1 (q rows `ldq` apart, heads of d
// floats side by side); its keys and values for positions 0 .. p+e-1 are already in k_buf /
// v_buf (slots, hkv, d) at slots[0 .. p+e-1]. Query row i attends keys 0 .. p+i.
//
// Layout of the work: a tile is 16 query rows of one query head, held transposed (d x 16)
// so every key gives a 16-lane column of scores by broadcasting its elements: no horizontal
// sums. A work item (one per OpenMP task) is a KV head's query heads over RB row blocks, all
// reading each block of KB keys together. Torch definition: extend_attention_ref in
// radixrt/kernels/cpu.py.
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "rt_cpu.h"
#include "vec_math.h"

#define QB 16   // query rows per tile (one AVX-512 register of lanes)
#define KB 64   // keys per online-softmax block
#define RB 2    // row blocks per work item (times the GQA group's query heads)

#if defined(__AVX512F__)
// One tile: 16 query rows of one query head. qt (d, 16) holds the scaled queries as lanes,
// ot (d, 16) the unnormalised outputs; m, l the running max and sum per lane.
typedef struct {
  float* qt;
  float* ot;
  __m512 m, l;
  int64_t rows, pos0;  // rows in use; position of row 0 (row i sees keys 0 .. pos0 + i)
} tile_t;

static void tile_init(tile_t* t, const float* q, int64_t ldq, int64_t rows, int64_t pos0,
                      int64_t d, float scale) {
  for (int64_t j = 0; j < d; ++j)
    for (int64_t i = 0; i < QB; ++i) t->qt[j * QB + i] = i < rows ? q[i * ldq + j] * scale : 0.0f;
  for (int64_t j = 0; j < d * QB; ++j) t->ot[j] = 0.0f;
  t->m = _mm512_set1_ps(-INFINITY);
  t->l = _mm512_setzero_ps();
  t->rows = rows;
  t->pos0 = pos0;
}

// Keys j0 .. j0+nk-1 (rows k_rows[t], v_rows[t]) into the tile's online softmax.
static void tile_block(tile_t* tl, int64_t j0, int64_t nk, const float* const* kr,
                       const float* const* vr, int64_t d, __m512* sc) {
  const __m512 lane = _mm512_set_ps(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  const float* qt = tl->qt;
  float* ot = tl->ot;
  int64_t t = 0;
  for (; t + 8 <= nk; t += 8) {  // eight keys per pass over qt: eight independent sums
    __m512 s[8];
    for (int u = 0; u < 8; ++u) s[u] = _mm512_setzero_ps();
    for (int64_t c = 0; c < d; ++c) {
      const __m512 qv = _mm512_loadu_ps(qt + c * QB);
      for (int u = 0; u < 8; ++u) s[u] = _mm512_fmadd_ps(qv, _mm512_set1_ps(kr[t + u][c]), s[u]);
    }
    for (int u = 0; u < 8; ++u) sc[t + u] = s[u];
  }
  for (; t < nk; ++t) {
    __m512 s0 = _mm512_setzero_ps();
    for (int64_t c = 0; c < d; ++c)
      s0 = _mm512_fmadd_ps(_mm512_loadu_ps(qt + c * QB), _mm512_set1_ps(kr[t][c]), s0);
    sc[t] = s0;
  }
  __m512 mb = _mm512_set1_ps(-INFINITY);
  for (t = 0; t < nk; ++t) {  // row i sees key j0 + t when j0 + t <= pos0 + i
    const __mmask16 vis =
        _mm512_cmp_ps_mask(lane, _mm512_set1_ps((float)(j0 + t - tl->pos0)), _CMP_GE_OQ);
    sc[t] = _mm512_mask_mov_ps(_mm512_set1_ps(-INFINITY), vis, sc[t]);
    mb = _mm512_max_ps(mb, sc[t]);
  }
  const __m512 m_new = _mm512_max_ps(tl->m, mb);
  const __m512 alpha = exp512(_mm512_sub_ps(tl->m, m_new));  // m = -inf at first: alpha ~ 0
  tl->m = m_new;
  tl->l = _mm512_mul_ps(tl->l, alpha);
  for (int64_t c = 0; c < d; ++c)
    _mm512_storeu_ps(ot + c * QB, _mm512_mul_ps(_mm512_loadu_ps(ot + c * QB), alpha));
  for (t = 0; t < nk; ++t) {
    const __mmask16 vis = _mm512_cmp_ps_mask(sc[t], _mm512_set1_ps(-INFINITY), _CMP_NEQ_OQ);
    sc[t] = _mm512_maskz_mov_ps(vis, exp512(_mm512_sub_ps(sc[t], m_new)));
    tl->l = _mm512_add_ps(tl->l, sc[t]);
  }
  for (t = 0; t + 8 <= nk; t += 8) {  // eight value rows per pass over ot
    for (int64_t c = 0; c < d; ++c) {
      __m512 o0 = _mm512_loadu_ps(ot + c * QB);
      __m512 o1 = _mm512_mul_ps(sc[t + 1], _mm512_set1_ps(vr[t + 1][c]));
      o0 = _mm512_fmadd_ps(sc[t], _mm512_set1_ps(vr[t][c]), o0);
      o1 = _mm512_fmadd_ps(sc[t + 3], _mm512_set1_ps(vr[t + 3][c]), o1);
      o0 = _mm512_fmadd_ps(sc[t + 2], _mm512_set1_ps(vr[t + 2][c]), o0);
      o1 = _mm512_fmadd_ps(sc[t + 5], _mm512_set1_ps(vr[t + 5][c]), o1);
      o0 = _mm512_fmadd_ps(sc[t + 4], _mm512_set1_ps(vr[t + 4][c]), o0);
      o1 = _mm512_fmadd_ps(sc[t + 7], _mm512_set1_ps(vr[t + 7][c]), o1);
      o0 = _mm512_fmadd_ps(sc[t + 6], _mm512_set1_ps(vr[t + 6][c]), o0);
      _mm512_storeu_ps(ot + c * QB, _mm512_add_ps(o0, o1));
    }
  }
  for (; t < nk; ++t)
    for (int64_t c = 0; c < d; ++c)
      _mm512_storeu_ps(ot + c * QB, _mm512_fmadd_ps(sc[t], _mm512_set1_ps(vr[t][c]),
                                                    _mm512_loadu_ps(ot + c * QB)));
}

static void tile_finish(const tile_t* t, float* out, int64_t ldo, int64_t d) {
  float inv[QB];
  _mm512_storeu_ps(inv, _mm512_div_ps(_mm512_set1_ps(1.0f), t->l));
  for (int64_t i = 0; i < t->rows; ++i)
    for (int64_t c = 0; c < d; ++c) out[i * ldo + c] = t->ot[c * QB + i] * inv[i];
}
#endif

int rt_extend_attention_f32(const float* q, int64_t ldq, const float* k_buf,
                            const float* v_buf, const int32_t* slots, int64_t p, int64_t e,
                            float* out, int64_t ldo, int64_t hq, int64_t hkv, int64_t d,
                            float scale) {
#if defined(__AVX512F__)
  // A work item is one KV head's g query heads over RB consecutive row blocks: its
  // g * RB tiles share every K/V block read (from memory once, then from cache).
  const int64_t g = hq / hkv, slot_len = hkv * d, blocks = (e + QB - 1) / QB;
  const int64_t groups = (blocks + RB - 1) / RB, ntiles = g * RB;
  int failed = 0;
#pragma omp parallel reduction(| : failed)
  {
    float* buf = (float*)malloc(sizeof(float) * (size_t)(2 * d * QB * ntiles));
    tile_t* tiles = (tile_t*)aligned_alloc(64, sizeof(tile_t) * (size_t)ntiles);
    __m512* sc = (__m512*)aligned_alloc(64, sizeof(__m512) * KB);
    const float* kr[KB];
    const float* vr[KB];
    failed = !buf || !tiles || !sc;
    // Last row groups (most keys) first, so the threads finish together.
#pragma omp for schedule(dynamic, 1)
    for (int64_t w = 0; w < hkv * groups; ++w) {
      if (failed) continue;
      const int64_t grp = groups - 1 - w / hkv, h = w % hkv;
      const int64_t b0 = grp * RB, nb = blocks - b0 < RB ? blocks - b0 : RB;
      int64_t n = 0, len = 0;
      for (int64_t r = 0; r < g; ++r)
        for (int64_t b = b0; b < b0 + nb; ++b, ++n) {
          const int64_t r0 = b * QB, rows = e - r0 < QB ? e - r0 : QB;
          tiles[n].qt = buf + 2 * n * d * QB;
          tiles[n].ot = tiles[n].qt + d * QB;
          tile_init(&tiles[n], q + r0 * ldq + (h * g + r) * d, ldq, rows, p + r0, d, scale);
          len = p + r0 + rows > len ? p + r0 + rows : len;
        }
      for (int64_t j0 = 0; j0 < len; j0 += KB) {
        const int64_t nk = len - j0 < KB ? len - j0 : KB;
        for (int64_t t = 0; t < nk; ++t) {
          kr[t] = k_buf + (int64_t)slots[j0 + t] * slot_len + h * d;
          vr[t] = v_buf + (int64_t)slots[j0 + t] * slot_len + h * d;
        }
        for (int64_t i = 0; i < n; ++i) {  // each tile sees keys up to pos0 + rows - 1
          const int64_t seen = tiles[i].pos0 + tiles[i].rows - j0;
          if (seen > 0) tile_block(&tiles[i], j0, seen < nk ? seen : nk, kr, vr, d, sc);
        }
      }
      n = 0;
      for (int64_t r = 0; r < g; ++r)
        for (int64_t b = b0; b < b0 + nb; ++b, ++n)
          tile_finish(&tiles[n], out + b * QB * ldo + (h * g + r) * d, ldo, d);
    }
    free(buf);
    free(tiles);
    free(sc);
  }
  return failed ? -1 : 0;
#else
  (void)q, (void)ldq, (void)k_buf, (void)v_buf, (void)slots, (void)p, (void)e, (void)out;
  (void)ldo, (void)hq, (void)hkv, (void)d, (void)scale;
  return -2;  // no vector path on this CPU: the caller uses torch
#endif
}
