// Causal attention for prefill/extend over the token-slot KV pool, float32 arithmetic over
// float32 or bfloat16 KV (kv.h; extend_attention_kvbf16.c builds the latter; a block of
// bfloat16 K/V rows is widened once for the tiles that read it), flash-style: one pass over
// the keys with an online softmax, no (query x key) matrix in memory.
//
// One request: `e` new query rows at positions p .. p+e-1 (q rows `ldq` apart, heads of d
// floats side by side); its keys and values for positions 0 .. p+e-1 are already in k_buf /
// v_buf (slots, hkv, d) at slots[0 .. p+e-1]. Query row i attends keys 0 .. p+i, or with a
// sliding window w > 0 keys p+i-w+1 .. p+i (key blocks before a tile's window are skipped).
//
// Layout of the work: a tile is QB (two vectors' lanes) query rows of one query head, held
// transposed (d x QB, two vector registers of lanes per element) so that scores and outputs
// need no horizontal sums. Both products are register-blocked like a GEMM micro-kernel: scores take
// KU keys at a time (2 * KU accumulators, each q load feeding KU broadcasts), outputs KU
// value elements at a time (2 * KU accumulators over the block's keys). A work item (one
// per OpenMP task) is a KV head's g query heads over one row block, all reading each block
// of KB keys together. Torch definition: extend_attention_ref in radixrt/model/cpu/kernels.py.
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "kv.h"
#include "rt_cpu.h"
#include "simd.h"

#if defined(RT_SIMD)
#define QB (2 * VW)  // query rows per tile: two vectors of lanes (32 on AVX-512, 16 on AVX2)
#define KB 64        // keys per online-softmax block
// Keys per score block and value elements per output block: 2 * KU accumulators, plus two
// vectors of q and a broadcast (AVX-512: 19 of 32 registers; AVX2: 11 of 16).
#define KU (VW == 16 ? 8 : 4)

// One tile: QB query rows of one query head. qt (d, QB) holds the scaled queries as lanes,
// ot (d, QB) the unnormalised outputs; m, l the running max and sum per lane (two halves).
typedef struct {
  float* qt;
  float* ot;
  vf m[2], l[2];
  int64_t rows, pos0;  // rows in use; position of row 0 (row i sees keys 0 .. pos0 + i)
  int64_t window;      // > 0: row i sees keys pos0 + i - window + 1 .. pos0 + i only
} tile_t;

static void tile_init(tile_t* t, const float* q, int64_t ldq, int64_t rows, int64_t pos0,
                      int64_t window, int64_t d, float scale) {
  for (int64_t j = 0; j < d; ++j)
    for (int64_t i = 0; i < QB; ++i) t->qt[j * QB + i] = i < rows ? q[i * ldq + j] * scale : 0.0f;
  for (int64_t j = 0; j < d * QB; ++j) t->ot[j] = 0.0f;
  for (int h = 0; h < 2; ++h) {
    t->m[h] = vset1(-INFINITY);
    t->l[h] = vzero();
  }
  t->rows = rows;
  t->pos0 = pos0;
  t->window = window;
}

// sc[2t + h] = scores of key t for lanes of half h, keys 0 .. nk-1 (rows kr[t]).
static void scores(const float* qt, const float* const* kr, int64_t nk, int64_t d, vf* sc) {
  int64_t t = 0;
  for (; t + KU <= nk; t += KU) {
    const float* k[KU];
    vf s0[KU], s1[KU];
    for (int u = 0; u < KU; ++u) {
      k[u] = kr[t + u];
      s0[u] = vzero();
      s1[u] = vzero();
    }
    for (int64_t c = 0; c < d; ++c) {
      const vf qa = vload(qt + c * QB), qb = vload(qt + c * QB + VW);
      for (int u = 0; u < KU; ++u) {
        const vf kv = vset1(k[u][c]);
        s0[u] = vfma(qa, kv, s0[u]);
        s1[u] = vfma(qb, kv, s1[u]);
      }
    }
    for (int u = 0; u < KU; ++u) {
      sc[2 * (t + u)] = s0[u];
      sc[2 * (t + u) + 1] = s1[u];
    }
  }
  for (; t < nk; ++t) {
    vf s0 = vzero(), s1 = vzero();
    for (int64_t c = 0; c < d; ++c) {
      const vf kv = vset1(kr[t][c]);
      s0 = vfma(vload(qt + c * QB), kv, s0);
      s1 = vfma(vload(qt + c * QB + VW), kv, s1);
    }
    sc[2 * t] = s0;
    sc[2 * t + 1] = s1;
  }
}

// Online softmax of one half (lanes VW*h .. VW*h + VW-1) over keys j0 .. j0+nk-1: sc becomes the
// probabilities' numerators, the half's output columns are rescaled to the new max.
static void softmax_half(tile_t* tl, int h, int64_t j0, int64_t nk, int64_t d, vf* sc) {
  // Lane i (row VW*h + i of the tile) sees key j0 + t when j0 + t <= pos0 + VW*h + i and, with
  // a window, j0 + t > pos0 + VW*h + i - window. Every key is visible to every lane unless the
  // block reaches past the half's first row (the diagonal) or starts before its last row's
  // window; hidden scores become -inf.
  const int64_t w = tl->window, first = tl->pos0 + VW * h;
  const int diagonal = j0 + nk - 1 > first;
  const int windowed = w > 0 && j0 <= first + VW - 1 - w;
  const vf lane = vadd(vlanes(), vset1((float)(VW * h)));
  vf mb = vset1(-INFINITY);
  for (int64_t t = 0; t < nk; ++t) {
    vf s = sc[2 * t + h];
    if (diagonal) {
      const vmask vis = vcmp_ge(lane, vset1((float)(j0 + t - tl->pos0)));
      s = vselect(vis, s, vset1(-INFINITY));
    }
    if (windowed) {  // lane i keeps the key while j0 + t - pos0 + w - 1 >= i
      const vmask vis = vcmp_ge(vset1((float)(j0 + t - tl->pos0 + w - 1)), lane);
      s = vselect(vis, s, vset1(-INFINITY));
    }
    sc[2 * t + h] = s;
    mb = vmax(mb, s);
  }
  const vf m_new = vmax(tl->m[h], mb);
  // A lane that has seen no key yet (m_new = -inf; a window can hide a whole block from a
  // lane) keeps its zeros: its rescale factor is 0, not exp(-inf + inf) = NaN.
  const vmask seen = vcmp_neq(m_new, vset1(-INFINITY));
  const vf alpha = vselect(seen, vexp(vsub(tl->m[h], m_new)), vzero());
  tl->m[h] = m_new;
  float* ot = tl->ot + VW * h;
  for (int64_t c = 0; c < d; ++c)
    vstore(ot + c * QB, vmul(vload(ot + c * QB), alpha));
  vf sum = vzero();
  for (int64_t t = 0; t < nk; ++t) {
    vf p = vexp(vsub(sc[2 * t + h], m_new));
    if (diagonal || windowed)  // exp(-inf - m) is NaN where m is -inf too: hidden keys are 0
      p = vselect(vcmp_neq(sc[2 * t + h], vset1(-INFINITY)), p, vzero());
    sc[2 * t + h] = p;
    sum = vadd(sum, p);
  }
  tl->l[h] = vadd(vmul(tl->l[h], alpha), sum);
}

// ot (d, QB) += sum over keys t of vr[t] (d) x p[t] (QB lanes), KU value elements at a time.
static void accumulate(float* ot, const float* const* vr, int64_t nk, int64_t d,
                       const vf* sc) {
  int64_t c0 = 0;
  for (; c0 + KU <= d; c0 += KU) {
    vf a0[KU], a1[KU];
    for (int r = 0; r < KU; ++r) {
      a0[r] = vload(ot + (c0 + r) * QB);
      a1[r] = vload(ot + (c0 + r) * QB + VW);
    }
    for (int64_t t = 0; t < nk; ++t) {
      const vf pa = sc[2 * t], pb = sc[2 * t + 1];
      const float* v = vr[t] + c0;
      for (int r = 0; r < KU; ++r) {
        const vf vv = vset1(v[r]);
        a0[r] = vfma(pa, vv, a0[r]);
        a1[r] = vfma(pb, vv, a1[r]);
      }
    }
    for (int r = 0; r < KU; ++r) {
      vstore(ot + (c0 + r) * QB, a0[r]);
      vstore(ot + (c0 + r) * QB + VW, a1[r]);
    }
  }
  for (; c0 < d; ++c0) {
    vf a0 = vload(ot + c0 * QB), a1 = vload(ot + c0 * QB + VW);
    for (int64_t t = 0; t < nk; ++t) {
      const vf vv = vset1(vr[t][c0]);
      a0 = vfma(sc[2 * t], vv, a0);
      a1 = vfma(sc[2 * t + 1], vv, a1);
    }
    vstore(ot + c0 * QB, a0);
    vstore(ot + c0 * QB + VW, a1);
  }
}

// Keys j0 .. j0+nk-1 (rows kr[t], vr[t]) into the tile's online softmax.
static void tile_block(tile_t* tl, int64_t j0, int64_t nk, const float* const* kr,
                       const float* const* vr, int64_t d, vf* sc) {
  scores(tl->qt, kr, nk, d, sc);
  // The upper half's rows see more keys than the lower's; a half sees some key of the block
  // unless the block starts past its last row, or (with a window) ends before its first
  // row's window (then the half has nothing new to add).
  for (int h = 0; h < 2; ++h) {
    const int64_t first = tl->pos0 + VW * h;
    const int before = tl->window > 0 && j0 + nk - 1 <= first - tl->window;
    if (j0 <= first + VW - 1 && !before) softmax_half(tl, h, j0, nk, d, sc);
    else
      for (int64_t t = 0; t < nk; ++t) sc[2 * t + h] = vzero();
  }
  accumulate(tl->ot, vr, nk, d, sc);
}

static void tile_finish(const tile_t* t, float* out, int64_t ldo, int64_t d) {
  float inv[QB];
  vstore(inv, vdiv(vset1(1.0f), t->l[0]));
  vstore(inv + VW, vdiv(vset1(1.0f), t->l[1]));
  for (int64_t i = 0; i < t->rows; ++i)
    for (int64_t c = 0; c < d; ++c) out[i * ldo + c] = t->ot[c * QB + i] * inv[i];
}
#endif

int KV_NAME(rt_extend_attention_f32)(const float* q, int64_t ldq, const kv_t* k_buf,
                                     const kv_t* v_buf, const int32_t* slots, int64_t p,
                                     int64_t e, float* out, int64_t ldo, int64_t hq, int64_t hkv,
                                     int64_t d, float scale, int64_t window) {
#if defined(RT_SIMD)
  // A work item is one KV head's g query heads over one row block: its g tiles share every
  // K/V block read (from memory once, then from cache).
  const int64_t g = hq / hkv, slot_len = hkv * KV_ROW(d), blocks = (e + QB - 1) / QB;
  int failed = 0;
#pragma omp parallel reduction(| : failed)
  {
    float* buf = (float*)malloc(sizeof(float) * (size_t)(2 * d * QB * g));
    tile_t* tiles = (tile_t*)aligned_alloc(64, sizeof(tile_t) * (size_t)g);
    vf* sc = (vf*)aligned_alloc(64, sizeof(vf) * 2 * KB);
    const float* kr[KB];
    const float* vr[KB];
    // A block's K/V rows as float32: read in place from a float32 pool; widened once per
    // block here from a bfloat16 one, for all the work item's tiles (kv_row_f32).
    float* wide = (float*)malloc(sizeof(float) * (size_t)(2 * KB * d));
    failed = !buf || !tiles || !sc || !wide;
    // Last row blocks (most keys) first, so the threads finish together.
#pragma omp for schedule(dynamic, 1)
    for (int64_t w = 0; w < hkv * blocks; ++w) {
      if (failed) continue;
      const int64_t b = blocks - 1 - w / hkv, h = w % hkv;
      const int64_t r0 = b * QB, rows = e - r0 < QB ? e - r0 : QB, len = p + r0 + rows;
      for (int64_t r = 0; r < g; ++r) {
        tiles[r].qt = buf + 2 * r * d * QB;
        tiles[r].ot = tiles[r].qt + d * QB;
        tile_init(&tiles[r], q + r0 * ldq + (h * g + r) * d, ldq, rows, p + r0, window, d,
                  scale);
      }
      // With a window, keys before the block's first row's window are seen by no row.
      const int64_t start = window > 0 && p + r0 - window + 1 > 0 ? p + r0 - window + 1 : 0;
      for (int64_t j0 = start; j0 < len; j0 += KB) {
        const int64_t nk = len - j0 < KB ? len - j0 : KB;
        for (int64_t t = 0; t < nk; ++t) {
          const int64_t row = (int64_t)slots[j0 + t] * slot_len + h * KV_ROW(d);
          kr[t] = kv_row_f32(k_buf + row, d, wide + t * d);
          vr[t] = kv_row_f32(v_buf + row, d, wide + (KB + t) * d);
        }
        for (int64_t r = 0; r < g; ++r) tile_block(&tiles[r], j0, nk, kr, vr, d, sc);
      }
      for (int64_t r = 0; r < g; ++r)
        tile_finish(&tiles[r], out + r0 * ldo + (h * g + r) * d, ldo, d);
    }
    free(buf);
    free(tiles);
    free(sc);
    free(wide);
  }
  return failed ? -1 : 0;
#else
  (void)q, (void)ldq, (void)k_buf, (void)v_buf, (void)slots, (void)p, (void)e, (void)out;
  (void)ldo, (void)hq, (void)hkv, (void)d, (void)scale, (void)window;
  return -2;  // no vector path on this CPU: the caller uses torch
#endif
}
