// Causal attention for prefill/extend over the token-slot KV pool, float32 (flash-style: one
// pass over the keys with an online softmax, no (query x key) matrix in memory).
//
// One request: `e` new query rows at positions p .. p+e-1 (q rows `ldq` apart, heads of d
// floats side by side); its keys and values for positions 0 .. p+e-1 are already in k_buf /
// v_buf (slots, hkv, d) at slots[0 .. p+e-1]. Query row i attends keys 0 .. p+i.
//
// Layout of the work: a tile is QB = 32 query rows of one query head, held transposed
// (d x 32, two AVX-512 registers of lanes per element) so that scores and outputs need no
// horizontal sums. Both products are register-blocked like a GEMM micro-kernel: scores take
// KU keys at a time (2 * KU accumulators, each q load feeding KU broadcasts), outputs KU
// value elements at a time (2 * KU accumulators over the block's keys). A work item (one
// per OpenMP task) is a KV head's g query heads over one row block, all reading each block
// of KB keys together. Torch definition: extend_attention_ref in radixrt/kernels/cpu.py.
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "rt_cpu.h"
#include "vec_math.h"

#define QB 32  // query rows per tile (two AVX-512 registers of lanes)
#define KB 64  // keys per online-softmax block
#define KU 8   // keys per score block; value elements per output block

#if defined(__AVX512F__)
// One tile: 32 query rows of one query head. qt (d, QB) holds the scaled queries as lanes,
// ot (d, QB) the unnormalised outputs; m, l the running max and sum per lane (two halves).
typedef struct {
  float* qt;
  float* ot;
  __m512 m[2], l[2];
  int64_t rows, pos0;  // rows in use; position of row 0 (row i sees keys 0 .. pos0 + i)
} tile_t;

static void tile_init(tile_t* t, const float* q, int64_t ldq, int64_t rows, int64_t pos0,
                      int64_t d, float scale) {
  for (int64_t j = 0; j < d; ++j)
    for (int64_t i = 0; i < QB; ++i) t->qt[j * QB + i] = i < rows ? q[i * ldq + j] * scale : 0.0f;
  for (int64_t j = 0; j < d * QB; ++j) t->ot[j] = 0.0f;
  for (int h = 0; h < 2; ++h) {
    t->m[h] = _mm512_set1_ps(-INFINITY);
    t->l[h] = _mm512_setzero_ps();
  }
  t->rows = rows;
  t->pos0 = pos0;
}

// sc[2t + h] = scores of key t for lanes of half h, keys 0 .. nk-1 (rows kr[t]).
static void scores(const float* qt, const float* const* kr, int64_t nk, int64_t d, __m512* sc) {
  int64_t t = 0;
  for (; t + KU <= nk; t += KU) {
    const float* k[KU];
    __m512 s0[KU], s1[KU];
    for (int u = 0; u < KU; ++u) {
      k[u] = kr[t + u];
      s0[u] = _mm512_setzero_ps();
      s1[u] = _mm512_setzero_ps();
    }
    for (int64_t c = 0; c < d; ++c) {
      const __m512 qa = _mm512_loadu_ps(qt + c * QB), qb = _mm512_loadu_ps(qt + c * QB + 16);
      for (int u = 0; u < KU; ++u) {
        const __m512 kv = _mm512_set1_ps(k[u][c]);
        s0[u] = _mm512_fmadd_ps(qa, kv, s0[u]);
        s1[u] = _mm512_fmadd_ps(qb, kv, s1[u]);
      }
    }
    for (int u = 0; u < KU; ++u) {
      sc[2 * (t + u)] = s0[u];
      sc[2 * (t + u) + 1] = s1[u];
    }
  }
  for (; t < nk; ++t) {
    __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
    for (int64_t c = 0; c < d; ++c) {
      const __m512 kv = _mm512_set1_ps(kr[t][c]);
      s0 = _mm512_fmadd_ps(_mm512_loadu_ps(qt + c * QB), kv, s0);
      s1 = _mm512_fmadd_ps(_mm512_loadu_ps(qt + c * QB + 16), kv, s1);
    }
    sc[2 * t] = s0;
    sc[2 * t + 1] = s1;
  }
}

// Online softmax of one half (lanes 16h .. 16h+15) over keys j0 .. j0+nk-1: sc becomes the
// probabilities' numerators, the half's output columns are rescaled to the new max.
static void softmax_half(tile_t* tl, int h, int64_t j0, int64_t nk, int64_t d, __m512* sc) {
  // Row i sees key j0 + t when j0 + t <= pos0 + i: every key is visible to every row unless
  // the block reaches past pos0 + 16h (a block on the diagonal); hidden scores become -inf.
  const int diagonal = j0 + nk - 1 > tl->pos0 + 16 * h;
  const __m512 lane = _mm512_add_ps(
      _mm512_set_ps(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
      _mm512_set1_ps((float)(16 * h)));
  __m512 mb = _mm512_set1_ps(-INFINITY);
  for (int64_t t = 0; t < nk; ++t) {
    __m512 s = sc[2 * t + h];
    if (diagonal) {
      const __mmask16 vis =
          _mm512_cmp_ps_mask(lane, _mm512_set1_ps((float)(j0 + t - tl->pos0)), _CMP_GE_OQ);
      s = sc[2 * t + h] = _mm512_mask_mov_ps(_mm512_set1_ps(-INFINITY), vis, s);
    }
    mb = _mm512_max_ps(mb, s);
  }
  const __m512 m_new = _mm512_max_ps(tl->m[h], mb);
  const __m512 alpha = exp512(_mm512_sub_ps(tl->m[h], m_new));  // m = -inf at first: ~0
  tl->m[h] = m_new;
  float* ot = tl->ot + 16 * h;
  for (int64_t c = 0; c < d; ++c)
    _mm512_storeu_ps(ot + c * QB, _mm512_mul_ps(_mm512_loadu_ps(ot + c * QB), alpha));
  __m512 sum = _mm512_setzero_ps();
  for (int64_t t = 0; t < nk; ++t) {
    __m512 p = exp512(_mm512_sub_ps(sc[2 * t + h], m_new));
    if (diagonal)  // exp(-inf - m) is NaN where m is -inf too: hidden keys are exactly 0
      p = _mm512_maskz_mov_ps(
          _mm512_cmp_ps_mask(sc[2 * t + h], _mm512_set1_ps(-INFINITY), _CMP_NEQ_OQ), p);
    sc[2 * t + h] = p;
    sum = _mm512_add_ps(sum, p);
  }
  tl->l[h] = _mm512_add_ps(_mm512_mul_ps(tl->l[h], alpha), sum);
}

// ot (d, QB) += sum over keys t of vr[t] (d) x p[t] (QB lanes), KU value elements at a time.
static void accumulate(float* ot, const float* const* vr, int64_t nk, int64_t d,
                       const __m512* sc) {
  int64_t c0 = 0;
  for (; c0 + KU <= d; c0 += KU) {
    __m512 a0[KU], a1[KU];
    for (int r = 0; r < KU; ++r) {
      a0[r] = _mm512_loadu_ps(ot + (c0 + r) * QB);
      a1[r] = _mm512_loadu_ps(ot + (c0 + r) * QB + 16);
    }
    for (int64_t t = 0; t < nk; ++t) {
      const __m512 pa = sc[2 * t], pb = sc[2 * t + 1];
      const float* v = vr[t] + c0;
      for (int r = 0; r < KU; ++r) {
        const __m512 vv = _mm512_set1_ps(v[r]);
        a0[r] = _mm512_fmadd_ps(pa, vv, a0[r]);
        a1[r] = _mm512_fmadd_ps(pb, vv, a1[r]);
      }
    }
    for (int r = 0; r < KU; ++r) {
      _mm512_storeu_ps(ot + (c0 + r) * QB, a0[r]);
      _mm512_storeu_ps(ot + (c0 + r) * QB + 16, a1[r]);
    }
  }
  for (; c0 < d; ++c0) {
    __m512 a0 = _mm512_loadu_ps(ot + c0 * QB), a1 = _mm512_loadu_ps(ot + c0 * QB + 16);
    for (int64_t t = 0; t < nk; ++t) {
      const __m512 vv = _mm512_set1_ps(vr[t][c0]);
      a0 = _mm512_fmadd_ps(sc[2 * t], vv, a0);
      a1 = _mm512_fmadd_ps(sc[2 * t + 1], vv, a1);
    }
    _mm512_storeu_ps(ot + c0 * QB, a0);
    _mm512_storeu_ps(ot + c0 * QB + 16, a1);
  }
}

// Keys j0 .. j0+nk-1 (rows kr[t], vr[t]) into the tile's online softmax.
static void tile_block(tile_t* tl, int64_t j0, int64_t nk, const float* const* kr,
                       const float* const* vr, int64_t d, __m512* sc) {
  scores(tl->qt, kr, nk, d, sc);
  // The upper half's rows see more keys than the lower's; both see the block's first key
  // unless it lies past the lower half (then the lower half has nothing new to add).
  for (int h = 0; h < 2; ++h)
    if (j0 <= tl->pos0 + 16 * h + 15) softmax_half(tl, h, j0, nk, d, sc);
    else
      for (int64_t t = 0; t < nk; ++t) sc[2 * t + h] = _mm512_setzero_ps();
  accumulate(tl->ot, vr, nk, d, sc);
}

static void tile_finish(const tile_t* t, float* out, int64_t ldo, int64_t d) {
  float inv[QB];
  _mm512_storeu_ps(inv, _mm512_div_ps(_mm512_set1_ps(1.0f), t->l[0]));
  _mm512_storeu_ps(inv + 16, _mm512_div_ps(_mm512_set1_ps(1.0f), t->l[1]));
  for (int64_t i = 0; i < t->rows; ++i)
    for (int64_t c = 0; c < d; ++c) out[i * ldo + c] = t->ot[c * QB + i] * inv[i];
}
#endif

int rt_extend_attention_f32(const float* q, int64_t ldq, const float* k_buf,
                            const float* v_buf, const int32_t* slots, int64_t p, int64_t e,
                            float* out, int64_t ldo, int64_t hq, int64_t hkv, int64_t d,
                            float scale) {
#if defined(__AVX512F__)
  // A work item is one KV head's g query heads over one row block: its g tiles share every
  // K/V block read (from memory once, then from cache).
  const int64_t g = hq / hkv, slot_len = hkv * d, blocks = (e + QB - 1) / QB;
  int failed = 0;
#pragma omp parallel reduction(| : failed)
  {
    float* buf = (float*)malloc(sizeof(float) * (size_t)(2 * d * QB * g));
    tile_t* tiles = (tile_t*)aligned_alloc(64, sizeof(tile_t) * (size_t)g);
    __m512* sc = (__m512*)aligned_alloc(64, sizeof(__m512) * 2 * KB);
    const float* kr[KB];
    const float* vr[KB];
    failed = !buf || !tiles || !sc;
    // Last row blocks (most keys) first, so the threads finish together.
#pragma omp for schedule(dynamic, 1)
    for (int64_t w = 0; w < hkv * blocks; ++w) {
      if (failed) continue;
      const int64_t b = blocks - 1 - w / hkv, h = w % hkv;
      const int64_t r0 = b * QB, rows = e - r0 < QB ? e - r0 : QB, len = p + r0 + rows;
      for (int64_t r = 0; r < g; ++r) {
        tiles[r].qt = buf + 2 * r * d * QB;
        tiles[r].ot = tiles[r].qt + d * QB;
        tile_init(&tiles[r], q + r0 * ldq + (h * g + r) * d, ldq, rows, p + r0, d, scale);
      }
      for (int64_t j0 = 0; j0 < len; j0 += KB) {
        const int64_t nk = len - j0 < KB ? len - j0 : KB;
        for (int64_t t = 0; t < nk; ++t) {
          kr[t] = k_buf + (int64_t)slots[j0 + t] * slot_len + h * d;
          vr[t] = v_buf + (int64_t)slots[j0 + t] * slot_len + h * d;
        }
        for (int64_t r = 0; r < g; ++r) tile_block(&tiles[r], j0, nk, kr, vr, d, sc);
      }
      for (int64_t r = 0; r < g; ++r)
        tile_finish(&tiles[r], out + r0 * ldo + (h * g + r) * d, ldo, d);
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
