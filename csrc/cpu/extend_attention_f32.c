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

// One tile: QB query rows (lanes), each a row of one of a KV head's query heads at its own
// position. qt (d, QB) holds the scaled queries as lanes, ot (d, QB) the unnormalised
// outputs; m, l the running max and sum per lane (two halves).
typedef struct {
  float* qt;
  float* ot;
  vf m[2], l[2];
  vf pos[2];              // per lane, its row's position: it sees keys up to pos
  int64_t lo[2], hi[2];  // per half, its lanes' least and greatest position
  int64_t window;        // > 0: a lane sees keys pos - window + 1 .. pos only
} tile_t;

// Lanes i < n: query row src[i] (d floats) at position pos[i]; lanes past n repeat lane n-1's
// position with zero queries (their outputs are not written).
static void tile_init(tile_t* t, const float* const* src, const int64_t* pos, int64_t n,
                      int64_t window, int64_t d, float scale) {
  float lanes[QB];
  for (int64_t j = 0; j < d; ++j)
    for (int64_t i = 0; i < QB; ++i) t->qt[j * QB + i] = i < n ? src[i][j] * scale : 0.0f;
  for (int64_t j = 0; j < d * QB; ++j) t->ot[j] = 0.0f;
  for (int64_t i = 0; i < QB; ++i) lanes[i] = (float)pos[i < n ? i : n - 1];
  for (int h = 0; h < 2; ++h) {
    t->m[h] = vset1(-INFINITY);
    t->l[h] = vzero();
    t->pos[h] = vload(lanes + VW * h);
    t->lo[h] = pos[VW * h < n ? VW * h : n - 1];  // (positions do not decrease along lanes)
    t->hi[h] = pos[VW * h + VW - 1 < n ? VW * h + VW - 1 : n - 1];
  }
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
  // A lane at position pos sees key j0 + t when j0 + t <= pos and, with a window,
  // j0 + t > pos - window. Every key is visible to every lane unless the block reaches past
  // the half's least position (the diagonal) or starts before its greatest one's window;
  // hidden scores become -inf.
  const int64_t w = tl->window;
  const int diagonal = j0 + nk - 1 > tl->lo[h];
  const int windowed = w > 0 && j0 <= tl->hi[h] - w;
  const vf pos = tl->pos[h];
  vf mb = vset1(-INFINITY);
  for (int64_t t = 0; t < nk; ++t) {
    vf s = sc[2 * t + h];
    if (diagonal) {
      const vmask vis = vcmp_ge(pos, vset1((float)(j0 + t)));
      s = vselect(vis, s, vset1(-INFINITY));
    }
    if (windowed) {  // the lane keeps the key while j0 + t + w - 1 >= pos
      const vmask vis = vcmp_ge(vset1((float)(j0 + t + w - 1)), pos);
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
  // A half sees some key of the block unless the block starts past its greatest position,
  // or (with a window) ends before its least one's window (then it has nothing to add).
  for (int h = 0; h < 2; ++h) {
    const int before = tl->window > 0 && j0 + nk - 1 <= tl->lo[h] - tl->window;
    if (j0 <= tl->hi[h] && !before) softmax_half(tl, h, j0, nk, d, sc);
    else
      for (int64_t t = 0; t < nk; ++t) sc[2 * t + h] = vzero();
  }
  accumulate(tl->ot, vr, nk, d, sc);
}

// Lanes i < n's outputs, each divided by its sum, to their rows dst[i].
static void tile_finish(const tile_t* t, float* const* dst, int64_t n, int64_t d) {
  float inv[QB];
  vstore(inv, vdiv(vset1(1.0f), t->l[0]));
  vstore(inv + VW, vdiv(vset1(1.0f), t->l[1]));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < d; ++c) dst[i][c] = t->ot[c * QB + i] * inv[i];
}

// Lane l (counted over the work item's row block) of tile r: its row, and its query head of
// KV head h; `mixed` lanes are (row, query head) pairs, else tile r is query head r's rows.
static inline int64_t lane_row(int mixed, int64_t g, int64_t l) { return mixed ? l / g : l; }
static inline int64_t lane_head(int mixed, int64_t g, int64_t h, int64_t l, int64_t r) {
  return h * g + (mixed ? l % g : r);
}
#endif

int KV_NAME(rt_extend_attention_f32)(const float* q, int64_t ldq, const kv_t* k_buf,
                                     const kv_t* v_buf, const int32_t* slots, int64_t p,
                                     int64_t e, float* out, int64_t ldo, int64_t hq, int64_t hkv,
                                     int64_t d, float scale, int64_t window) {
#if defined(RT_SIMD)
  // A work item is one KV head's g query heads over one row block: its g tiles share every
  // K/V block read (from memory once, then from cache). Under QB rows, a tile's lanes are
  // (row, query head) pairs of the KV head instead, lane l row l / g and head l % g: the g
  // heads share ceil(e g / QB) tiles rather than taking one each (a prompt's last tokens after
  // a cached prefix). A lane computes the same either way: its keys, blocks and order are its
  // own, and a block that hides all its keys leaves it exactly as it was.
  const int64_t g = hq / hkv, slot_len = hkv * KV_ROW(d);
  const int mixed = g > 1 && e < QB;
  const int64_t lanes = mixed ? e * g : e, per_item = mixed ? 1 : g;
  const int64_t blocks = (lanes + QB - 1) / QB;
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
      const int64_t l0 = b * QB, n = lanes - l0 < QB ? lanes - l0 : QB;
      // Each tile's lanes: their query rows and positions (the same positions in every tile).
      const float* src[QB];
      int64_t pos[QB];
      for (int64_t r = 0; r < per_item; ++r) {
        for (int64_t i = 0; i < n; ++i) {
          const int64_t row = lane_row(mixed, g, l0 + i);
          src[i] = q + row * ldq + lane_head(mixed, g, h, l0 + i, r) * d;
          pos[i] = p + row;
        }
        tiles[r].qt = buf + 2 * r * d * QB;
        tiles[r].ot = tiles[r].qt + d * QB;
        tile_init(&tiles[r], src, pos, n, window, d, scale);
      }
      const int64_t lo = pos[0], len = pos[n - 1] + 1;
      // With a window, keys before the least position's window are seen by no lane.
      const int64_t start = window > 0 && lo - window + 1 > 0 ? lo - window + 1 : 0;
      for (int64_t j0 = start; j0 < len; j0 += KB) {
        const int64_t nk = len - j0 < KB ? len - j0 : KB;
        for (int64_t t = 0; t < nk; ++t) {
          const int64_t row = (int64_t)slots[j0 + t] * slot_len + h * KV_ROW(d);
          kr[t] = kv_row_f32(k_buf + row, d, wide + t * d);
          vr[t] = kv_row_f32(v_buf + row, d, wide + (KB + t) * d);
        }
        for (int64_t r = 0; r < per_item; ++r) tile_block(&tiles[r], j0, nk, kr, vr, d, sc);
      }
      for (int64_t r = 0; r < per_item; ++r) {
        float* dst[QB];
        for (int64_t i = 0; i < n; ++i)
          dst[i] = out + lane_row(mixed, g, l0 + i) * ldo + lane_head(mixed, g, h, l0 + i, r) * d;
        tile_finish(&tiles[r], dst, n, d);
      }
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
