// y = x @ W^T (+ bias) for CPU, float32 activations, with W pre-packed into column panels of
// float32 (rt_linear_f32), of bfloat16 (rt_linear_bf16: half the bytes, widened to float32 in
// registers, so exact float32 arithmetic on bf16-rounded weights on every ISA) or of int8 with
// one float32 scale per output column (rt_linear_q8, weight-only quantization:
// W[n, k] ~= Wq[n, k] * scale[n]).
//
// Packed layout: W (N, K) row-major becomes Wp (P, K, NR), P = ceil(N / NR): panel p holds
// output columns [p*NR, p*NR + NR) with the NR values of one k contiguous; columns past N are
// zero. One pass over a panel streams it from memory once, so a batch-1 step reads every
// weight byte exactly once, and the micro-kernel needs no horizontal sums. An int8 tile
// converts each panel row to float32 in registers once for all of its rows, sums x * Wq over
// its k range and scales the sums once: y = base + scale * sum (base the bias or y so far).
// (Converting a panel's k range once per chunk into a float32 buffer shared by its row blocks
// was measured slower at every row count from 8 to 64, on AVX2 and AVX-512.)
//
// Work split: OpenMP threads take (panel, row-chunk) pairs, the chunks at most MC rows and as
// even as multiples of MR allow (rt_even_chunk); a tile is MR rows x NR columns
// kept in registers (on AVX2 as sub-tiles of at most 6 rows x 16 columns, see tile_any) over a
// K range of KC (all of K when the chunk has <= MR rows).
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rt_cpu.h"
#include "simd.h"

#define NR 32
#ifndef MR
#define MR 12
#endif
// K range per pass of a multi-block chunk. AVX2's 6 x 16 sub-tiles reload and store their
// accumulators once per range, and twice as many of them cover a tile: longer ranges measured
// 15% faster at 64-1024 rows (384-1024 alike; the panel range then sits in L2, not L1), while
// AVX-512 was best at 128-256.
#ifndef KC
#if defined(RT_SIMD) && VW == 8
#define KC 512
#else
#define KC 128
#endif
#endif
#ifndef MC
#define MC 96
#endif
// Software prefetch into L2 (the weights are streamed from memory once per step; L1 holds
// the k range in use): PF_ROWS panel rows ahead for a single-tile chunk; with several row
// blocks, the next PF_NEXT rows are fetched a share per block, spread over all of its tiles so
// that memory is kept busy the whole time rather than only during the first block.
#ifndef PF_ROWS
#define PF_ROWS 64
#endif
#ifndef PF_NEXT
#define PF_NEXT KC
#endif
#ifndef PF_HINT
#define PF_HINT _MM_HINT_T1
#endif

#include <math.h>

void rt_pack_f32(const float* w, int64_t n, int64_t k, float* wp) {
  const int64_t panels = (n + NR - 1) / NR;
#pragma omp parallel for schedule(static)
  for (int64_t p = 0; p < panels; ++p) {
    float* dst = wp + p * k * NR;
    for (int64_t kk = 0; kk < k; ++kk) {
      for (int64_t j = 0; j < NR; ++j) {
        const int64_t col = p * NR + j;
        dst[kk * NR + j] = col < n ? w[col * k + kk] : 0.0f;
      }
    }
  }
}

// Per output column n: scale[n] = max_k |w[n, k]| / 127 (1 for an all-zero column), the
// column's values round(w / scale) in [-127, 127], packed like rt_pack_f32; scale has
// ceil(n / NR) * NR entries, zero past n. (bfloat16 panels are laid out by the caller, the
// same way: radixrt/model/cpu/kernels.py pack_weight_bf16.)
void rt_pack_q8(const float* w, int64_t n, int64_t k, int8_t* wp, float* scale) {
  const int64_t panels = (n + NR - 1) / NR;
#pragma omp parallel for schedule(static)
  for (int64_t p = 0; p < panels; ++p) {
    int8_t* dst = wp + p * k * NR;
    for (int64_t j = 0; j < NR; ++j) {
      const int64_t col = p * NR + j;
      float amax = 0.0f;
      for (int64_t kk = 0; col < n && kk < k; ++kk) amax = fmaxf(amax, fabsf(w[col * k + kk]));
      const float s = col >= n ? 0.0f : amax > 0.0f ? amax / 127.0f : 1.0f;
      scale[col] = s;
      for (int64_t kk = 0; kk < k; ++kk) {
        const float q = col < n ? nearbyintf(w[col * k + kk] / s) : 0.0f;
        dst[kk * NR + j] = (int8_t)(q > 127.0f ? 127.0f : q < -127.0f ? -127.0f : q);
      }
    }
  }
}

// Panel element types (the WK argument of the tiles).
#define WK_F32 0
#define WK_Q8 1
#define WK_BF16 2

#if defined(RT_SIMD)
#define NV (NR / VW)  // vectors per panel row: 2 (AVX-512) or 4 (AVX2)

// Rows [0, R) x panel vectors [c0, c0 + C) of a tile over k in [k0, k1), R and C constants
// so the accumulators stay in registers: R * C + C + 1 vector registers (AVX-512: 12 x 2,
// 27 of 32; AVX2: 6 x 2 or 2 x 4, 15 or 13 of 16). xb: packed rows, element (k, i) at
// xb[k * xs + i]. WK (a constant) is the panels' element type: WK_F32, WK_BF16, or WK_Q8
// (int8 with `scale` per column).
// The tile's result is added to bias/zero when `first`, else to y. When pf > 0, prefetches
// panel row kk + pf for kk = k0 + pf_phase, then every pf_every rows.
static inline __attribute__((always_inline)) void tile(
    const float* xb, int64_t xs, const void* wp, int64_t k0, int64_t k1, float* y, int64_t ldy,
    const int R, const int C, const int c0, const vmask* mask, const float* bias,
    const float* scale, int first, const int WK, int64_t pf, int pf_every, int pf_phase) {
  const int Q8 = WK == WK_Q8;
  vf acc[MR][NV];
#pragma GCC unroll 12
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) {
      const int64_t off = (int64_t)(c0 + c) * VW;
      // float32: accumulate onto the base directly; int8: from zero, scaled at the end.
      acc[i][c] = Q8 || (first && !bias) ? vzero()
                  : first              ? vload_mask(mask[c0 + c], bias + off)
                                       : vload_mask(mask[c0 + c], y + i * ldy + off);
    }
  const int64_t esize = WK == WK_Q8 ? 1 : WK == WK_BF16 ? 2 : 4;
  const int64_t row_bytes = NR * esize;
  const char* w = (const char*)wp + k0 * row_bytes + (int64_t)c0 * VW * esize;
  const float* xk = xb + k0 * xs;
  int countdown = pf_phase + 1;
  for (int64_t kk = k0; kk < k1; ++kk, w += row_bytes, xk += xs) {
    if (pf && --countdown == 0) {  // pf float32 panel rows' bytes ahead: the row there
      countdown = pf_every;
      _mm_prefetch(w + pf * NR * 4, PF_HINT);
      if (WK == WK_F32) _mm_prefetch(w + pf * NR * 4 + 64, PF_HINT);
    }
    vf wv[NV];
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c)
      wv[c] = WK == WK_Q8     ? vload_i8((const int8_t*)w + c * VW)
              : WK == WK_BF16 ? vload_bf16((const uint16_t*)w + c * VW)
                              : vload((const float*)w + c * VW);
#pragma GCC unroll 12
    for (int i = 0; i < R; ++i) {
      const vf xv = vset1(xk[i]);
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) acc[i][c] = vfma(wv[c], xv, acc[i][c]);
    }
  }
#pragma GCC unroll 12
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) {
      const int64_t off = (int64_t)(c0 + c) * VW;
      vf out = acc[i][c];
      if (Q8) {
        const vf base = first ? (bias ? vload_mask(mask[c0 + c], bias + off) : vzero())
                              : vload_mask(mask[c0 + c], y + i * ldy + off);
        out = vfma(out, vload(scale + off), base);
      }
      vstore_mask(y + i * ldy + off, mask[c0 + c], out);
    }
}

// One R-row sub-tile at panel vectors [c0, c0 + C), R chosen at run time (C and WK constants
// at every call site: inlined, so each (R, C, WK) is its own register-blocked loop).
static inline __attribute__((always_inline)) void subtile(
    const float* xb, int64_t xs, const void* wp, int64_t k0, int64_t k1, float* y, int64_t ldy,
    int r, const int C, int c0, const vmask* mask, const float* bias, const float* scale,
    int first, const int WK, int64_t pf, int pf_every, int pf_phase) {
  switch (r) {
#define CASE(R)                                                                            \
  case R:                                                                                  \
    tile(xb, xs, wp, k0, k1, y, ldy, R, C, c0, mask, bias, scale, first, WK, pf, pf_every, \
         pf_phase);                                                                        \
    break;
    CASE(1) CASE(2) CASE(3) CASE(4) CASE(5) CASE(6)
#if NV == 2
    CASE(7) CASE(8) CASE(9) CASE(10) CASE(11) CASE(12)
#endif
#undef CASE
  }
}

// An mr x NR tile (mr <= MR), ncols of its columns valid. AVX-512: one sub-tile of all the
// rows and both vectors. AVX2: up to 2 rows over all four vectors (decode), else groups of up
// to 6 rows, each over the panel's two halves in turn (one prefetch stream, the first's).
static inline __attribute__((always_inline)) void tile_q(
    const float* xb, int64_t xs, const void* wp, int64_t k0, int64_t k1, float* y, int64_t ldy,
    int mr, int ncols, const float* bias, const float* scale, int first, const int WK,
    int64_t pf, int pf_every, int pf_phase) {
  vmask mask[NV];
  for (int c = 0; c < NV; ++c) mask[c] = vmask_first(ncols - c * VW);
#if NV == 2
  subtile(xb, xs, wp, k0, k1, y, ldy, mr, 2, 0, mask, bias, scale, first, WK, pf, pf_every,
          pf_phase);
#else
  if (mr <= 2) {
    subtile(xb, xs, wp, k0, k1, y, ldy, mr, 4, 0, mask, bias, scale, first, WK, pf, pf_every,
            pf_phase);
    return;
  }
  const int groups = (mr + 5) / 6;
  for (int g = 0, i0 = 0; g < groups; ++g) {
    const int rows = (mr - i0) / (groups - g);  // near-equal groups: 8 rows are 4 + 4
    for (int c0 = 0; c0 < NV; c0 += 2)
      subtile(xb + i0, xs, wp, k0, k1, y + i0 * ldy, ldy, rows, 2, c0, mask, bias, scale, first,
              WK, g == 0 && c0 == 0 ? pf : 0, pf_every, pf_phase);
    i0 += rows;
  }
#endif
}

static void tile_f32(const float* xb, int64_t xs, const void* wp, int64_t k0, int64_t k1,
                     float* y, int64_t ldy, int mr, int ncols, const float* bias,
                     const float* scale, int first, int64_t pf, int pf_every, int pf_phase) {
  tile_q(xb, xs, wp, k0, k1, y, ldy, mr, ncols, bias, scale, first, WK_F32, pf, pf_every,
         pf_phase);
}

static void tile_q8(const float* xb, int64_t xs, const void* wp, int64_t k0, int64_t k1,
                    float* y, int64_t ldy, int mr, int ncols, const float* bias,
                    const float* scale, int first, int64_t pf, int pf_every, int pf_phase) {
  tile_q(xb, xs, wp, k0, k1, y, ldy, mr, ncols, bias, scale, first, WK_Q8, pf, pf_every,
         pf_phase);
}

#if !defined(RT_BF16_PAIRS)  // (amx and avx512bf16 run bfloat16 weights as k pairs)
static void tile_bf16(const float* xb, int64_t xs, const void* wp, int64_t k0, int64_t k1,
                      float* y, int64_t ldy, int mr, int ncols, const float* bias,
                      const float* scale, int first, int64_t pf, int pf_every, int pf_phase) {
  tile_q(xb, xs, wp, k0, k1, y, ldy, mr, ncols, bias, scale, first, WK_BF16, pf, pf_every,
         pf_phase);
}
#endif

#else  // portable C: the same blocking, left to the compiler's vectoriser

static inline void tile_portable(const float* xb, int64_t xs, const void* wp, int64_t k0,
                                 int64_t k1, float* y, int64_t ldy, int mr, int ncols,
                                 const float* bias, const float* scale, int first,
                                 const int WK) {
  const int Q8 = WK == WK_Q8;
  float acc[MR][NR];
  for (int i = 0; i < mr; ++i)
    for (int j = 0; j < NR; ++j) acc[i][j] = 0.0f;
  for (int64_t kk = k0; kk < k1; ++kk) {
    float w[NR];
    for (int j = 0; j < NR; ++j)
      w[j] = WK == WK_Q8     ? (float)((const int8_t*)wp)[kk * NR + j]
             : WK == WK_BF16 ? rt_bf16_to_f32(((const uint16_t*)wp)[kk * NR + j])
                             : ((const float*)wp)[kk * NR + j];
    for (int i = 0; i < mr; ++i) {
      const float xv = xb[kk * xs + i];
      for (int j = 0; j < NR; ++j) acc[i][j] += w[j] * xv;
    }
  }
  for (int i = 0; i < mr; ++i)
    for (int j = 0; j < ncols; ++j) {
      const float base = first ? (bias ? bias[j] : 0.0f) : y[i * ldy + j];
      y[i * ldy + j] = base + (Q8 ? scale[j] : 1.0f) * acc[i][j];
    }
}

static void tile_f32(const float* xb, int64_t xs, const void* wp, int64_t k0, int64_t k1,
                     float* y, int64_t ldy, int mr, int ncols, const float* bias,
                     const float* scale, int first, int64_t pf, int pf_every, int pf_phase) {
  (void)pf, (void)pf_every, (void)pf_phase;
  tile_portable(xb, xs, wp, k0, k1, y, ldy, mr, ncols, bias, scale, first, WK_F32);
}

static void tile_q8(const float* xb, int64_t xs, const void* wp, int64_t k0, int64_t k1,
                    float* y, int64_t ldy, int mr, int ncols, const float* bias,
                    const float* scale, int first, int64_t pf, int pf_every, int pf_phase) {
  (void)pf, (void)pf_every, (void)pf_phase;
  tile_portable(xb, xs, wp, k0, k1, y, ldy, mr, ncols, bias, scale, first, WK_Q8);
}

static void tile_bf16(const float* xb, int64_t xs, const void* wp, int64_t k0, int64_t k1,
                      float* y, int64_t ldy, int mr, int ncols, const float* bias,
                      const float* scale, int first, int64_t pf, int pf_every, int pf_phase) {
  (void)pf, (void)pf_every, (void)pf_phase;
  tile_portable(xb, xs, wp, k0, k1, y, ldy, mr, ncols, bias, scale, first, WK_BF16);
}

#endif

// xp (ceil(m/MR), k, MR) <- x (m, k): each block of MR rows transposed so a tile broadcasts
// its rows' k-th values from one pointer at fixed offsets; rows past m are zero.
static void pack_rows(const float* x, int64_t ldx, int64_t m, int64_t k, float* xp) {
  const int64_t blocks = (m + MR - 1) / MR;
#pragma omp parallel for schedule(static) if (m * k > 65536)
  for (int64_t b = 0; b < blocks; ++b) {
    float* dst = xp + b * k * MR;
    const int64_t rows = m - b * MR < MR ? m - b * MR : MR;
    const float* src = x + b * MR * ldx;
    // Writes in order; the block's rows are read as `rows` sequential streams.
    for (int64_t kk = 0; kk < k; ++kk, dst += MR) {
      int64_t i = 0;
      for (; i < rows; ++i) dst[i] = src[i * ldx + kk];
      for (; i < MR; ++i) dst[i] = 0.0f;
    }
  }
}

// The calling thread's buffer for a GEMM's packed or rounded rows (this file's and
// gemm_amx.c's), grown as needed and kept: a fresh buffer per call would be fresh pages, and
// page faults, on every step. Owned by the thread; one GEMM uses it at a time.
void* rt_row_scratch(size_t bytes) {
  static _Thread_local void* buf = 0;
  static _Thread_local size_t cap = 0;
  if (bytes > cap) {
    free(buf);
    cap = bytes + bytes / 4;
    buf = aligned_alloc(64, (cap + 63) / 64 * 64);
    if (!buf) cap = 0;
  }
  return buf;
}

typedef void (*tile_fn)(const float* xb, int64_t xs, const void* wp, int64_t k0, int64_t k1,
                        float* y, int64_t ldy, int mr, int ncols, const float* bias,
                        const float* scale, int first, int64_t pf, int pf_every, int pf_phase);

// The work split shared by every weight type; esize: bytes per packed weight.
static void linear(const float* x, int64_t ldx, int64_t m, int64_t k, const void* wp,
                   int64_t esize, const float* scale, int64_t n, const float* bias, float* y,
                   int64_t ldy, tile_fn tile_any) {
  if (m <= 0 || n <= 0) return;
  // One row is used in place (element (k, 0) at x[k]); more rows are packed into xp.
  float* xp = 0;
  if (m > 1) {
    xp = (float*)rt_row_scratch((size_t)((m + MR - 1) / MR) * (size_t)(k * MR) * sizeof(float));
    if (!xp) {  // no memory for the packed rows: one row at a time, unpacked
      for (int64_t r = 0; r < m; ++r)
        linear(x + r * ldx, ldx, 1, k, wp, esize, scale, n, bias, y + r * ldy, ldy, tile_any);
      return;
    }
    pack_rows(x, ldx, m, k, xp);
  }
  const int64_t panels = (n + NR - 1) / NR;
  // Chunks start at multiples of MR: x is packed in MR-row blocks.
  const int64_t mc = rt_even_chunk(m, MC, MR), chunks = (m + mc - 1) / mc;
  const int64_t work = panels * chunks;
#pragma omp parallel for schedule(static) if (work > 1 && m * n * k > 32768)
  for (int64_t t = 0; t < work; ++t) {
    const int64_t p = t % panels, c = t / panels;
    const int64_t r0 = c * mc, r1 = r0 + mc < m ? r0 + mc : m;
    const int64_t col = p * NR;
    const int ncols = n - col < NR ? (int)(n - col) : NR;
    const void* pw = (const char*)wp + p * k * NR * esize;
    const float* pb = bias ? bias + col : 0;
    const float* ps = scale ? scale + col : 0;
    const int64_t kc = r1 - r0 <= MR ? k : KC;
    const int64_t pf = kc == k ? PF_ROWS : PF_NEXT;
    const int every = kc == k ? 1 : (int)((r1 - r0 + MR - 1) / MR);  // row blocks share pf
    for (int64_t k0 = 0; k0 < k; k0 += kc) {
      const int64_t k1 = k0 + kc < k ? k0 + kc : k;
      for (int64_t i = r0; i < r1; i += MR) {
        const int mr = r1 - i < MR ? (int)(r1 - i) : MR;
        const float* xb = xp ? xp + (i / MR) * k * MR : x;
        const int phase = kc == k ? 0 : (int)((i - r0) / MR);
        tile_any(xb, xp ? MR : 1, pw, k0, k1, y + i * ldy + col, ldy, mr, ncols, pb, ps,
                 k0 == 0, pf, every, phase);
      }
    }
  }
}

void rt_linear_f32(const float* x, int64_t ldx, int64_t m, int64_t k, const float* wp,
                   int64_t n, const float* bias, float* y, int64_t ldy) {
  linear(x, ldx, m, k, wp, sizeof(float), 0, n, bias, y, ldy, tile_f32);
}

void rt_linear_q8(const float* x, int64_t ldx, int64_t m, int64_t k, const int8_t* wp,
                  const float* scale, int64_t n, const float* bias, float* y, int64_t ldy) {
  linear(x, ldx, m, k, wp, 1, scale, n, bias, y, ldy, tile_q8);
}

#if !defined(RT_AMX)
int rt_amx_ready(void) { return -1; }  // no tiles in this variant
#endif

// amx and avx512bf16 have their own layout (gemm_amx.c) and kernels (gemm_amx.c,
// gemm_bf16dot.c)
#if !defined(RT_BF16_PAIRS)
int64_t rt_bf16_packed_size(int64_t n, int64_t k) { return (n + NR - 1) / NR * NR * k; }

// bfloat16 panels: the layout of rt_pack_f32, each value rounded to nearest even.
void rt_pack_bf16(const float* w, int64_t n, int64_t k, uint16_t* wp) {
  const int64_t panels = (n + NR - 1) / NR;
#pragma omp parallel for schedule(static)
  for (int64_t p = 0; p < panels; ++p)
    for (int64_t kk = 0; kk < k; ++kk)
      for (int64_t j = 0; j < NR; ++j) {
        const int64_t col = p * NR + j;
        wp[(p * k + kk) * NR + j] = rt_round_bf16(col < n ? w[col * k + kk] : 0.0f);
      }
}

void rt_unpack_bf16(const uint16_t* wp, int64_t n, int64_t k, float* w) {
  for (int64_t col = 0; col < n; ++col)
    for (int64_t kk = 0; kk < k; ++kk) w[col * k + kk] = rt_bf16_to_f32(wp[((col / NR) * k + kk) * NR + col % NR]);
}

void rt_linear_bf16(const float* x, int64_t ldx, int64_t m, int64_t k, const uint16_t* wp,
                    int64_t n, const float* bias, float* y, int64_t ldy) {
  linear(x, ldx, m, k, wp, 2, 0, n, bias, y, ldy, tile_bf16);
}
#endif
