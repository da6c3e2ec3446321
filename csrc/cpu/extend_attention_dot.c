// Causal extend attention over a bfloat16 KV pool on VDPBF16PS (the "avx512bf16" variant):
// rt_extend_attention_bf16_kvbf16 there, with the AMX kernel's inputs, result and rounding
// (extend_attention_amx.c): the scaled queries and the softmax probabilities are rounded to
// bfloat16, scores, running max and sum and the outputs are float32.
//
// Lanes are query rows: a tile is 16 query rows of one query head, its scores and outputs
// vectors of 16 lanes, so the online softmax needs no horizontal reduction. Scores: one
// VDPBF16PS per (key, dim pair), the tile's queries as dim pairs per lane (qp: (d/2, 16)) and
// the key's pair (k[2c], k[2c+1]), adjacent in its pool row, as one 32-bit broadcast; KU keys
// at a time. Outputs O^T (d, 16): one VDPBF16PS per (key pair, dim), the probabilities of two
// keys interleaved per lane and the pair (v[t][c], v[t+1][c]) broadcast from the request's V
// rows packed once per call as key pairs (vp: per KV head (npad/2, d) 32-bit pairs, zeros past
// the last key). A work item (one OpenMP task) is one KV head's g query heads over 16 rows,
// each block of KB keys read by all g tiles; under 16 rows, one KV head's tile of 16
// (row, query head) lanes (a few prompt tokens after a cached prefix: g times fewer tiles).
// -3 for a head dim or window it does not take (the caller then runs the float32 kernel), as
// the AMX kernel; the queries' pairs and the outputs' transposes are its own
// (extend_bf16_layout.h).
#define RT_KV_BF16 1
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bf16_pairs.h"
#include "extend_bf16_layout.h"
#include "kv.h"
#include "rt_cpu.h"
#include "simd.h"

#if defined(RT_BF16_DOT)
#define KB 64    // keys per online-softmax block
#define KU 16    // keys per score register block (16 accumulators)
#define KC 16    // output dims per register block (16 accumulators)

// The 32-bit word at p (two adjacent bfloat16), as every lane of a vector.
static inline __m512bh bcast_pair(const uint16_t* p) {
  uint32_t w;
  memcpy(&w, p, sizeof w);
  return (__m512bh)_mm512_set1_epi32((int)w);
}

// 16-bit lane indices: words 0 .. 15 of a then b interleaved (PAIR_LO), words 16 .. 31
// (PAIR_HI), as _mm512_permutex2var_epi16 reads them; with one operand, lane i of its two
// halves side by side (PAIR_HALVES).
static const uint16_t PAIR_LO[32] __attribute__((aligned(64))) = {
    0, 32, 1, 33, 2, 34, 3, 35, 4, 36, 5, 37, 6, 38, 7, 39,
    8, 40, 9, 41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
static const uint16_t PAIR_HI[32] __attribute__((aligned(64))) = {
    16, 48, 17, 49, 18, 50, 19, 51, 20, 52, 21, 53, 22, 54, 23, 55,
    24, 56, 25, 57, 26, 58, 27, 59, 28, 60, 29, 61, 30, 62, 31, 63};
static const uint16_t PAIR_HALVES[32] __attribute__((aligned(64))) = {
    0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23,
    8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};

typedef struct {
  uint32_t* qp;  // scaled queries, (d/2, 16): lane i of row c holds row i's dims (2c, 2c+1)
  float* ot;     // unnormalised outputs transposed, (d, 16)
  vf m, l;       // running max and sum per lane
} head_t;

// Per KV head h, its V rows of keys 0 .. n-1 as key pairs: vp[h * npad/2 * d + t * d + c] =
// (v[2t][c], v[2t + 1][c]), keys n .. npad-1 zero. Pairs [t0, t1) of head h.
static void pack_values(const uint16_t* v_buf, const int32_t* slots, int64_t n, int64_t t0,
                        int64_t t1, int64_t h, int64_t slot_len, int64_t d, uint32_t* vp) {
  const __m512i lo = _mm512_load_si512(PAIR_LO), hi = _mm512_load_si512(PAIR_HI);
  static const uint16_t zeros[MAXD];
  for (int64_t t = t0; t < t1; ++t) {
    const uint16_t* a = 2 * t < n ? v_buf + (int64_t)slots[2 * t] * slot_len + h * d : zeros;
    const uint16_t* b = 2 * t + 1 < n ? v_buf + (int64_t)slots[2 * t + 1] * slot_len + h * d : zeros;
    uint32_t* dst = vp + t * d;
    for (int64_t c = 0; c < d; c += 32) {
      const __m512i x = _mm512_loadu_si512(a + c), y = _mm512_loadu_si512(b + c);
      _mm512_storeu_si512(dst + c, _mm512_permutex2var_epi16(x, lo, y));
      _mm512_storeu_si512(dst + c + 16, _mm512_permutex2var_epi16(x, hi, y));
    }
  }
}

// sc[t] = scores of keys t = 0 .. nk-1 (K rows kr[t], the head's d bfloat16) for the 16 lanes.
static void scores(const uint32_t* qp, const uint16_t* const* kr, int64_t nk, int64_t d, vf* sc) {
  int64_t t = 0;
  for (; t + KU <= nk; t += KU) {
    vf s[KU];
    for (int u = 0; u < KU; ++u) s[u] = vzero();
    for (int64_t c = 0; c < d / 2; ++c) {
      const __m512bh qa = (__m512bh)_mm512_load_si512(qp + c * 16);
      for (int u = 0; u < KU; ++u) s[u] = _mm512_dpbf16_ps(s[u], qa, bcast_pair(kr[t + u] + 2 * c));
    }
    for (int u = 0; u < KU; ++u) sc[t + u] = s[u];
  }
  for (; t < nk; ++t) {
    vf s = vzero();
    for (int64_t c = 0; c < d / 2; ++c)
      s = _mm512_dpbf16_ps(s, (__m512bh)_mm512_load_si512(qp + c * 16), bcast_pair(kr[t] + 2 * c));
    sc[t] = s;
  }
}

// Keys j0 .. j0+nk-1 into a tile's online softmax and outputs. Lane i sees keys up to
// last[i] (lastv); `diagonal`: some key of the block is past lane 0's last. vp: the head's
// packed V pairs from key j0 (j0 even). pp: scratch for KB/2 probability pairs.
static void head_block(head_t* hd, const uint16_t* const* kr, const uint32_t* vp, int64_t j0,
                       int64_t nk, __m512i lastv, int diagonal, int64_t d, vf* sc, __m512i* pp) {
  scores(hd->qp, kr, nk, d, sc);
  vf mb = vset1(-INFINITY);
  for (int64_t t = 0; t < nk; ++t) {
    if (diagonal) {  // lane i keeps key j0 + t while j0 + t <= last[i]
      const __mmask16 vis = _mm512_cmpge_epi32_mask(lastv, _mm512_set1_epi32((int)(j0 + t)));
      sc[t] = _mm512_mask_blend_ps(vis, vset1(-INFINITY), sc[t]);
    }
    mb = vmax(mb, sc[t]);
  }
  // Every lane has seen key 0 by the first block, so m_new is finite. vexp clamps: exp(-inf)
  // reads about 1e-38, so the first block's alpha multiplies zeros only. The probabilities
  // (rounded to bfloat16 next) on exp2_bf16, hidden keys' (NaN there) zeroed.
  const vf m_new = vmax(hd->m, mb), alpha = vexp(vsub(hd->m, m_new));
  const vf l2e = vset1(LOG2E), m_l2e = vmul(m_new, l2e);
  hd->m = m_new;
  vf sum = vzero();
  for (int64_t t = 0; t < nk; ++t) {
    sc[t] = exp2_bf16(_mm512_fmsub_ps(sc[t], l2e, m_l2e));
    if (diagonal)
      sc[t] = _mm512_maskz_mov_ps(
          _mm512_cmpge_epi32_mask(lastv, _mm512_set1_epi32((int)(j0 + t))), sc[t]);
    sum = vadd(sum, sc[t]);
  }
  hd->l = vfma(hd->l, alpha, sum);
  // Probability pairs: lane i of pp[t] holds (p[2t][i], p[2t + 1][i]); a missing last key 0.
  const __m512i inter = _mm512_load_si512(PAIR_HALVES);
  const int64_t np = (nk + 1) / 2;
  for (int64_t t = 0; t < np; ++t) {
    const vf odd = 2 * t + 1 < nk ? sc[2 * t + 1] : vzero();
    pp[t] = _mm512_permutexvar_epi16(inter, (__m512i)_mm512_cvtne2ps_pbh(odd, sc[2 * t]));
  }
  for (int64_t c0 = 0; c0 < d; c0 += KC) {
    vf a[KC];
    for (int r = 0; r < KC; ++r) a[r] = vmul(vload(hd->ot + (c0 + r) * 16), alpha);
    for (int64_t t = 0; t < np; ++t) {
      const __m512bh p = (__m512bh)pp[t];
      const uint32_t* v = vp + t * d + c0;
      for (int r = 0; r < KC; ++r)
        a[r] = _mm512_dpbf16_ps(a[r], p, (__m512bh)_mm512_set1_epi32((int)v[r]));
    }
    for (int r = 0; r < KC; ++r) vstore(hd->ot + (c0 + r) * 16, a[r]);
  }
}

int rt_extend_attention_bf16_kvbf16(const float* q, int64_t ldq, const kv_t* k_buf,
                                    const kv_t* v_buf, const int32_t* slots, int64_t p,
                                    int64_t e, float* out, int64_t ldo, int64_t hq, int64_t hkv,
                                    int64_t d, float scale, int64_t window) {
  if (bf16_extend_refuses(d, window)) return -3;
  if (e <= 0) return 0;
  const int64_t n = p + e, npad = (n + KB - 1) / KB * KB, g = hq / hkv, slot_len = hkv * d;
  const int64_t head_pairs = npad / 2 * d;  // 32-bit pairs per KV head in vp
  uint32_t* vp = (uint32_t*)aligned_alloc(64, sizeof(uint32_t) * (size_t)(hkv * head_pairs));
  if (!vp) return -1;
  const int64_t chunks = npad / KB, blocks = (e + 15) / 16;
  // Fewer than 16 rows (a prompt's last tokens after a cached prefix): a tile's lanes are
  // (row, query head) pairs of one KV head, lane l row l / g and head l % g, so the g heads
  // share ceil(e g / 16) tiles instead of taking one each. Every lane computes what it would
  // in a tile of its head's rows (its keys, blocks and order are its own; a block past its
  // last key leaves it exactly as it was), so the rows' bits do not depend on the tiling.
  const int64_t lanes = g > 1 && e < 16 ? e * g : 0, tiles = lanes ? (lanes + 15) / 16 : 0;
  int failed = 0;
#pragma omp parallel reduction(| : failed) if (hq * e * n >= 32768)
  {
#pragma omp for schedule(static)
    for (int64_t w = 0; w < hkv * chunks; ++w) {
      const int64_t h = w / chunks, t0 = (w % chunks) * KB / 2;
      pack_values(v_buf, slots, n, t0, t0 + KB / 2, h, slot_len, d, vp + h * head_pairs);
    }
    uint32_t* qb = (uint32_t*)aligned_alloc(64, sizeof(uint32_t) * (size_t)(8 * d * g));
    float* ob = (float*)aligned_alloc(64, sizeof(float) * (size_t)(16 * d * g));
    head_t* heads = (head_t*)aligned_alloc(64, sizeof(head_t) * (size_t)g);  // vf members
    vf* sc = (vf*)aligned_alloc(64, sizeof(vf) * KB);
    __m512i* pp = (__m512i*)aligned_alloc(64, sizeof(__m512i) * KB / 2);
    failed = !qb || !ob || !heads || !sc || !pp;
    const uint16_t* kr[KB];
#pragma omp for schedule(dynamic, 1)
    for (int64_t w = 0; w < hkv * tiles; ++w) {  // (row, head) lanes: see `lanes` above
      if (failed) continue;
      const int64_t t = tiles - 1 - w / hkv, h = w % hkv, l0 = t * 16;
      const int64_t n_l = lanes - l0 < 16 ? lanes - l0 : 16;
      const float* src[16];
      float* dst[16];
      int32_t last[16];
      for (int i = 0; i < 16; ++i) {
        const int64_t l = l0 + (i < n_l ? i : n_l - 1), row = l / g, head = h * g + l % g;
        last[i] = (int32_t)(p + row);  // lanes past n_l: the last lane's
        src[i] = q + row * ldq + head * d;
        dst[i] = out + row * ldo + head * d;
      }
      const __m512i lastv = _mm512_loadu_si512(last);
      head_t hd = {qb, ob, vset1(-INFINITY), vzero()};
      pack_query_lanes(src, n_l, d, scale, (uint16_t*)hd.qp);
      memset(hd.ot, 0, sizeof(float) * (size_t)(16 * d));
      const uint32_t* vh = vp + h * head_pairs;
      const int64_t len = (int64_t)last[15] + 1;  // the tile's last row sees the most keys
      for (int64_t j0 = 0; j0 < len; j0 += KB) {
        const int64_t nk = len - j0 < KB ? len - j0 : KB;
        for (int64_t u = 0; u < nk; ++u) kr[u] = k_buf + (int64_t)slots[j0 + u] * slot_len + h * d;
        head_block(&hd, kr, vh + j0 / 2 * d, j0, nk, lastv, j0 + nk - 1 > last[0], d, sc, pp);
      }
      write_lanes(hd.ot, hd.l, dst, n_l, d);
    }
    // Last row blocks (most keys) first, so the threads finish together.
#pragma omp for schedule(dynamic, 1)
    for (int64_t w = 0; w < (lanes ? 0 : hkv * blocks); ++w) {
      if (failed) continue;
      const int64_t b = blocks - 1 - w / hkv, h = w % hkv;
      const int64_t r0 = b * 16, rows = e - r0 < 16 ? e - r0 : 16, len = p + r0 + rows;
      // Lane i sees keys 0 .. p + r0 + i (lanes past `rows`: the last row's).
      int32_t last[16];
      for (int i = 0; i < 16; ++i) last[i] = (int32_t)(p + r0 + (i < rows ? i : rows - 1));
      const __m512i lastv = _mm512_loadu_si512(last);
      for (int64_t r = 0; r < g; ++r) {
        heads[r] = (head_t){qb + r * 8 * d, ob + r * 16 * d, vset1(-INFINITY), vzero()};
        pack_queries(q + r0 * ldq + (h * g + r) * d, ldq, rows, d, scale, (uint16_t*)heads[r].qp);
        memset(heads[r].ot, 0, sizeof(float) * (size_t)(16 * d));
      }
      const uint32_t* vh = vp + h * head_pairs;
      for (int64_t j0 = 0; j0 < len; j0 += KB) {
        const int64_t nk = len - j0 < KB ? len - j0 : KB;
        for (int64_t t = 0; t < nk; ++t) kr[t] = k_buf + (int64_t)slots[j0 + t] * slot_len + h * d;
        const int diagonal = j0 + nk - 1 > p + r0;
        for (int64_t r = 0; r < g; ++r)
          head_block(&heads[r], kr, vh + j0 / 2 * d, j0, nk, lastv, diagonal, d, sc, pp);
      }
      for (int64_t r = 0; r < g; ++r)
        write_rows(heads[r].ot, heads[r].l, out + r0 * ldo + (h * g + r) * d, ldo, rows, d);
    }
    free(qb);
    free(ob);
    free(heads);
    free(sc);
    free(pp);
  }
  free(vp);
  return failed ? -1 : 0;
}
#endif
