// Causal extend attention over a bfloat16 KV pool on AMX tiles (the "amx" variant): the same
// inputs and result as rt_extend_attention_f32_kvbf16 (extend_attention_f32.c), with both
// products on TDPBF16PS. Queries (scaled) and probabilities are rounded to bfloat16 as GPU
// flash attention does; scores, running max and sum, and the output accumulator are float32.
//
// First the request's keys and values are packed once per call, per KV head, into the B-tile
// layouts (keys past p+e zero): K as (16-key tile, 32-dim chunk) tiles whose row r holds, for
// each of the 16 keys, dims (2r, 2r+1); V as (32-key tile, 16-dim chunk) tiles whose row r
// holds, for each of the 16 dims, keys (2r, 2r+1). A work item (one OpenMP task) is one KV
// head's g query heads over 16 query rows; per block of KB keys each head computes S (16 x KB)
// into four C tiles, an online softmax over its rows in AVX-512, then P (bf16, an A tile) @ V
// into C tiles four dim tiles at a time, which rescale-and-add into its float32 output rows.
// Returns -2 without AMX, -3 for what it does not take (d not a multiple of 32 up to 256, a
// sliding window): the caller then runs the float32 kernel.
#define _GNU_SOURCE
#define RT_KV_BF16 1
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "amx_tiles.h"
#include "kv.h"
#include "rt_cpu.h"
#include "simd.h"

#if defined(RT_AMX)
#define KB 64     // keys per online-softmax block: four 16-key S tiles, two 32-key V tiles
#define MAXD 256  // largest head dim taken

// Tiles (amx_tiles.h) 0-3: C (16 x 16 float32); 4: A (16 x 32 bf16); 5-7: B (16 x 64 bytes).

// exp(x) for x <= 0 to about 4e-5 relative (enough for probabilities rounded to bfloat16, and
// the sum adds the same values): 2^n * 2^f, n = round(x log2 e), a degree-4 polynomial in f.
// Lanes with x = -inf give NaN; the callers mask them to 0.
static inline vf exp_bf16(vf x) {
  const vf y = vmul(x, vset1(1.44269504f)), n = vround(y), f = vsub(y, n);
  vf p = vset1(9.6181291e-3f);
  p = vfma(p, f, vset1(5.5504109e-2f));
  p = vfma(p, f, vset1(2.4022651e-1f));
  p = vfma(p, f, vset1(6.9314718e-1f));
  p = vfma(p, f, vset1(1.0f));
  return vscale2(p, n);
}

// Keys t0 .. t0+31 of KV head h into their K and V tiles (kp: 2 key tiles x d/32 chunks of
// 512 bf16; vp: d/16 chunks of 512), zero past n.
static void pack_keys(const kv_t* k_buf, const kv_t* v_buf, const int32_t* slots, int64_t n,
                      int64_t t0, int64_t h, int64_t hkv, int64_t d, uint16_t* kp,
                      uint16_t* vp) {
  const kv_t* kr[32];
  const kv_t* vr[32];
  for (int t = 0; t < 32; ++t) {
    const int64_t row = t0 + t < n ? (int64_t)slots[t0 + t] * hkv * d + h * d : -1;
    kr[t] = row < 0 ? NULL : k_buf + row;
    vr[t] = row < 0 ? NULL : v_buf + row;
  }
  const int64_t kc = d / 32;
  for (int half = 0; half < 2; ++half)
    for (int64_t c = 0; c < kc; ++c) {
      uint32_t* tile = (uint32_t*)(kp + (half * kc + c) * 512);
      for (int key = 0; key < 16; ++key) {
        const kv_t* src = kr[half * 16 + key];
        for (int r = 0; r < 16; ++r) {
          uint32_t pair = 0;
          if (src) memcpy(&pair, src + c * 32 + 2 * r, sizeof pair);
          tile[r * 16 + key] = pair;
        }
      }
    }
  for (int64_t c = 0; c < d / 16; ++c) {
    uint16_t* tile = vp + c * 512;
    for (int r = 0; r < 16; ++r)
      for (int e = 0; e < 2; ++e) {
        const kv_t* src = vr[2 * r + e];
        for (int col = 0; col < 16; ++col)
          tile[(r * 16 + col) * 2 + e] = src ? src[c * 16 + col] : 0;
      }
  }
}

// One head's 16 query rows: q (16, d) bf16 scaled, o (16, d) unnormalised outputs, m and l
// each row's running max and sum.
typedef struct {
  uint16_t* q;
  float* o;
  float m[16], l[16];
} head_t;

// Keys j0 .. j0+nk-1 (nk <= KB) into one head's rows; row i sees keys up to vis[i].
static void head_block(head_t* hd, const uint16_t* kp, const uint16_t* vp, int64_t j0,
                       int64_t nk, const int64_t* vis, int64_t d, float* s, uint16_t* pb,
                       float* pv) {
  const int64_t kc = d / 32, kt = (nk + 15) / 16, vt = (nk + 31) / 32;
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (int64_t c = 0; c < kc; ++c) {
    _tile_loadd(4, hd->q + c * 32, d * 2);
    // Tile numbers must be constants: the four key tiles unrolled.
    _tile_loadd(5, kp + (0 * kc + c) * 512, 64);
    _tile_dpbf16ps(0, 4, 5);
    if (kt > 1) {
      _tile_loadd(6, kp + (1 * kc + c) * 512, 64);
      _tile_dpbf16ps(1, 4, 6);
    }
    if (kt > 2) {
      _tile_loadd(7, kp + (2 * kc + c) * 512, 64);
      _tile_dpbf16ps(2, 4, 7);
    }
    if (kt > 3) {
      _tile_loadd(5, kp + (3 * kc + c) * 512, 64);
      _tile_dpbf16ps(3, 4, 5);
    }
  }
  _tile_stored(0, s, KB * 4);
  _tile_stored(1, s + 16, KB * 4);
  _tile_stored(2, s + 32, KB * 4);
  _tile_stored(3, s + 48, KB * 4);
  float alpha[16] __attribute__((aligned(64))), lsum[16];
  for (int i = 0; i < 16; ++i) {
    const int64_t seen = vis[i] - j0 + 1;  // keys of this block row i sees (may be <= 0)
    vf sv[KB / 16];
    vmask mk[KB / 16];
    vf mx = vset1(-INFINITY);
    for (int t = 0; t < KB / 16; ++t) {
      mk[t] = vmask_first(seen - 16 * t);
      sv[t] = _mm512_mask_mov_ps(vset1(-INFINITY), mk[t], vload(s + i * KB + 16 * t));
      mx = vmax(mx, sv[t]);
    }
    const float m_old = hd->m[i], m_blk = vhmax(mx), m_new = m_blk > m_old ? m_blk : m_old;
    alpha[i] = m_old - m_new;  // exponentiated below for all 16 rows at once
    vf sum = vzero();
    const vf mv = vset1(m_new);
    for (int t = 0; t < KB / 16; t += 2) {
      const vf p0 = _mm512_maskz_mov_ps(mk[t], exp_bf16(vsub(sv[t], mv)));
      const vf p1 = _mm512_maskz_mov_ps(mk[t + 1], exp_bf16(vsub(sv[t + 1], mv)));
      sum = vadd(sum, vadd(p0, p1));
      _mm512_storeu_si512((void*)(pb + i * KB + 16 * t), (__m512i)_mm512_cvtne2ps_pbh(p1, p0));
    }
    hd->m[i] = m_new;
    lsum[i] = vhsum(sum);
  }
  // alpha = exp(m_old - m_new); a row's first block (m_old = -inf) has no output to rescale.
  const vf d_m = vload(alpha);
  vstore(alpha, _mm512_maskz_mov_ps(vcmp_neq(d_m, vset1(-INFINITY)), vexp(d_m)));
  vstore(hd->l, vfma(vload(hd->l), vload(alpha), vload(lsum)));
  // P (16 x nk) @ V (nk x d), four dim tiles at a time, into o rescaled by alpha.
  for (int64_t c0 = 0; c0 < d / 16; c0 += 4) {
    const int64_t nc = d / 16 - c0 < 4 ? d / 16 - c0 : 4;
    _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
    for (int64_t v = 0; v < vt; ++v) {
      const uint16_t* vb = vp + (v * (d / 16) + c0) * 512;
      _tile_loadd(4, pb + v * 32, KB * 2);
      _tile_loadd(5, vb, 64);
      _tile_dpbf16ps(0, 4, 5);
      _tile_loadd(6, vb + 512, 64);
      _tile_dpbf16ps(1, 4, 6);
      if (nc > 2) {
        _tile_loadd(7, vb + 1024, 64);
        _tile_dpbf16ps(2, 4, 7);
        _tile_loadd(5, vb + 1536, 64);
        _tile_dpbf16ps(3, 4, 5);
      }
    }
    _tile_stored(0, pv, 64 * 4);
    _tile_stored(1, pv + 16, 64 * 4);
    _tile_stored(2, pv + 32, 64 * 4);
    _tile_stored(3, pv + 48, 64 * 4);
    for (int i = 0; i < 16; ++i) {
      const vf a = vset1(alpha[i]);
      float* o = hd->o + i * d + c0 * 16;
      for (int64_t t = 0; t < nc; ++t)
        vstore(o + 16 * t, vfma(vload(o + 16 * t), a, vload(pv + i * 64 + 16 * t)));
    }
  }
}
#endif

int rt_extend_attention_amx_kvbf16(const float* q, int64_t ldq, const kv_t* k_buf,
                                   const kv_t* v_buf, const int32_t* slots, int64_t p,
                                   int64_t e, float* out, int64_t ldo, int64_t hq, int64_t hkv,
                                   int64_t d, float scale, int64_t window) {
#if defined(RT_AMX)
  if (d % 32 != 0 || d > MAXD || window > 0) return -3;
  if (e <= 0) return 0;
  const int64_t n = p + e, npad = (n + KB - 1) / KB * KB, g = hq / hkv;
  const int64_t head_elems = npad * d;  // bf16 per KV head in each packed buffer
  uint16_t* kp = (uint16_t*)aligned_alloc(64, sizeof(uint16_t) * (size_t)(2 * hkv * head_elems));
  if (!kp) return -1;
  uint16_t* vp = kp + hkv * head_elems;
  const int64_t groups = npad / 32, blocks = (e + 15) / 16;
  int failed = 0;
  // (A small call runs on one thread: the barriers would cost more than the work.)
#pragma omp parallel reduction(| : failed) if (hq * e * n >= 32768)
  {
#pragma omp for schedule(static)
    for (int64_t w = 0; w < hkv * groups; ++w) {
      const int64_t h = w / groups, t = w % groups;
      pack_keys(k_buf, v_buf, slots, n, t * 32, h, hkv, d, kp + h * head_elems + t * 32 * d,
                vp + h * head_elems + t * 32 * d);
    }
    rt_configure_tiles();
    uint16_t* qb = (uint16_t*)aligned_alloc(64, sizeof(uint16_t) * (size_t)(16 * d * g));
    float* ob = (float*)aligned_alloc(64, sizeof(float) * (size_t)(16 * d * g));
    head_t* heads = (head_t*)malloc(sizeof(head_t) * (size_t)g);
    float s[16 * KB] __attribute__((aligned(64)));
    float pv[16 * 64] __attribute__((aligned(64)));
    uint16_t pb[16 * KB] __attribute__((aligned(64)));
    failed = !qb || !ob || !heads;
    // Last row blocks (most keys) first, so the threads finish together.
#pragma omp for schedule(dynamic, 1)
    for (int64_t w = 0; w < hkv * blocks; ++w) {
      if (failed) continue;
      const int64_t b = blocks - 1 - w / hkv, h = w % hkv;
      const int64_t r0 = b * 16, rows = e - r0 < 16 ? e - r0 : 16, len = p + r0 + rows;
      int64_t vis[16];  // last key row i sees (padding rows: the last real key)
      for (int i = 0; i < 16; ++i) vis[i] = p + r0 + (i < rows ? i : rows - 1);
      for (int64_t r = 0; r < g; ++r) {
        head_t* hd = &heads[r];
        hd->q = qb + r * 16 * d;
        hd->o = ob + r * 16 * d;
        const float* qr = q + r0 * ldq + (h * g + r) * d;
        for (int i = 0; i < 16; ++i) {
          hd->m[i] = -INFINITY;
          hd->l[i] = 0.0f;
          for (int64_t c = 0; c < d; ++c)
            hd->q[i * d + c] = rt_round_bf16(i < rows ? qr[i * ldq + c] * scale : 0.0f);
        }
        memset(hd->o, 0, sizeof(float) * (size_t)(16 * d));
      }
      const uint16_t* kh = kp + h * head_elems;
      const uint16_t* vh = vp + h * head_elems;
      for (int64_t j0 = 0; j0 < len; j0 += KB) {
        const int64_t nk = len - j0 < KB ? len - j0 : KB;
        for (int64_t r = 0; r < g; ++r)
          head_block(&heads[r], kh + j0 * d, vh + j0 * d, j0, nk, vis, d, s, pb, pv);
      }
      for (int64_t r = 0; r < g; ++r)
        for (int64_t i = 0; i < rows; ++i) {
          float* dst = out + (r0 + i) * ldo + (h * g + r) * d;
          const float inv = 1.0f / heads[r].l[i];
          for (int64_t c = 0; c < d; ++c) dst[c] = heads[r].o[i * d + c] * inv;
        }
    }
    _tile_release();
    free(qb);
    free(ob);
    free(heads);
  }
  free(kp);
  return failed ? -1 : 0;
#else
  (void)q, (void)ldq, (void)k_buf, (void)v_buf, (void)slots, (void)p, (void)e, (void)out;
  (void)ldo, (void)hq, (void)hkv, (void)d, (void)scale, (void)window;
  return -2;  // no AMX in this variant: the caller runs the float32 kernel
#endif
}
