// y = x @ W^T (+ bias) with W in bfloat16 on AMX tiles (the "amx" library variant: Xeons since
// Sapphire Rapids); x and y float32. The "avx512bf16" variant packs the same layout (this
// file) and multiplies it with VDPBF16PS (gemm_bf16dot.c). In the other variants
// rt_pack_bf16 / rt_linear_bf16 are gemm.c's (bfloat16 panels widened in registers); the
// layouts differ, so a packed weight is only ever used with the library that packed it.
//
// Packed layout: W (N, K) becomes P = ceil(N/32) panels of 32 output columns; K is padded with
// zeros to KP = ceil(K/32) * 32. Panel p, k block b (32 k's) is 2 B tiles of 16 rows x 64
// bytes, one per 16 columns: row r of half h holds, for each of its 16 columns c, the pair
// (W[p*32 + h*16 + c, b*32 + 2r], W[..., b*32 + 2r + 1]) (the pairs TDPBF16PS multiplies), so
// element (p, b, h, r, c, e) is at ((((p*KB + b)*2 + h)*16 + r)*16 + c)*2 + e; 2 KiB per block.
// The avx512bf16 variant orders a block's rows r-major instead (PAIR_AT).
// Columns past N are zero.
//
// x is rounded to bfloat16 (nearest even) into a per-thread buffer of rows padded to 16 (the
// A tiles); TDPBF16PS accumulates in float32. Threads take (chunk, panel) pairs, the chunks
// at most 128 rows and even (rt_even_chunk), chunk-major so a chunk's rows stay in L2 across
// the panels: for every 32 rows (two A tiles) a 32 x 32 block of y stays in four C tiles over
// all k blocks, then the bias is added and the valid rows and columns written. A call of at
// most 16 rows (decode) uses one A tile and streams each weight byte once, prefetching
// PF_BLOCKS blocks ahead.
//
// rt_linear_bf16_silu: a gated MLP's gate_up projection and SiLU in one pass. A work item is
// (chunk, gate panel, 16-column half): its C tiles hold 32 rows of 16 gate columns and of the
// 16 up columns n/2 further, so the epilogue writes silu(g) * u and the (m, n) product never
// reaches memory (for SmolLM2's prefill, 12.6 MB written and read back per layer at 1024 rows).
#define _GNU_SOURCE  // syscall() under -std=c11
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "amx_tiles.h"
#include "bf16_pairs.h"
#include "rt_cpu.h"
#include "simd.h"

#if defined(RT_BF16_PAIRS)
// Element (p, b, h, r, c, e) of the packed weight. AMX loads each half's 16 rows as one tile
// (rows 64 bytes apart); VDPBF16PS reads row r of both halves together, so the avx512bf16
// variant keeps them adjacent (128 bytes: two neighbouring cache lines per k pair, one
// stream through a panel), which measured 5-25% faster than the tile order at 1-64 rows.
#if defined(RT_BF16_DOT)
#define PAIR_AT(p, kb, b, h, r, c, e) (((((p) * (kb) + (b)) * 16 + (r)) * 2 + (h)) * 16 + (c)) * 2 + (e)
#else
#define PAIR_AT(p, kb, b, h, r, c, e) (((((p) * (kb) + (b)) * 2 + (h)) * 16 + (r)) * 16 + (c)) * 2 + (e)
#endif
int64_t rt_bf16_packed_size(int64_t n, int64_t k) {
  return (n + 31) / 32 * ((k + 31) / 32) * 1024;
}

void rt_pack_bf16(const float* w, int64_t n, int64_t k, uint16_t* wp) {
  const int64_t kb = (k + 31) / 32, panels = (n + 31) / 32;
#pragma omp parallel for schedule(static)
  for (int64_t p = 0; p < panels; ++p)
    for (int64_t b = 0; b < kb; ++b)
      for (int h = 0; h < 2; ++h)
        for (int r = 0; r < 16; ++r)
          for (int c = 0; c < 16; ++c)
            for (int e = 0; e < 2; ++e) {
              const int64_t col = p * 32 + h * 16 + c, kk = b * 32 + 2 * r + e;
              const float v = col < n && kk < k ? w[col * k + kk] : 0.0f;
              wp[PAIR_AT(p, kb, b, h, r, c, e)] = rt_round_bf16(v);
            }
}

void rt_unpack_bf16(const uint16_t* wp, int64_t n, int64_t k, float* w) {
  const int64_t kb = (k + 31) / 32;
  for (int64_t col = 0; col < n; ++col)
    for (int64_t kk = 0; kk < k; ++kk) {
      const int64_t p = col / 32, h = (col % 32) / 16, c = col % 16, b = kk / 32;
      const int64_t r = (kk % 32) / 2, e = kk % 2;
      w[col * k + kk] = rt_bf16_to_f32(wp[PAIR_AT(p, kb, b, h, r, c, e)]);
    }
}

#endif

#if defined(RT_AMX)
#include <sys/syscall.h>
#include <unistd.h>

#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18
#define PF_BLOCKS 4
#ifndef CHUNK_BLOCKS
#define CHUNK_BLOCKS 8  // 16-row blocks of x per work item at most (128 rows: 147 KB at K 576)
#endif

int rt_amx_ready(void) {
  return (int)syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA);
}

// Tiles (amx_tiles.h) 0-3: C (16 rows x 16 float32); 4, 5: A (16 rows x 32 bf16); 6, 7: B.

// C tiles 0, 1 (and 2, 3 when `two`) = the 16 (32) rows of x at a0 (row stride kp) times the
// two 16-column halves whose kb blocks of 1024 bfloat16 start at b0 and b1 (tiles 4-7 are
// scratch). `prefetch`: b1 == b0 + 512 and the blocks PF_BLOCKS ahead are fetched into L1
// (decode: one pass over the weights).
static inline void dot_rows(const uint16_t* a0, int64_t kp, int two, const uint16_t* b0,
                            const uint16_t* b1, int64_t kb, int prefetch) {
  _tile_zero(0);
  _tile_zero(1);
  if (two) {
    _tile_zero(2);
    _tile_zero(3);
  }
  for (int64_t b = 0; b < kb; ++b) {
    if (prefetch && b + PF_BLOCKS < kb)
      for (int line = 0; line < 32; ++line)
        _mm_prefetch((const char*)(b0 + (b + PF_BLOCKS) * 1024) + line * 64, _MM_HINT_T0);
    _tile_loadd(6, b0 + b * 1024, 64);
    _tile_loadd(7, b1 + b * 1024, 64);
    _tile_loadd(4, a0 + b * 32, kp * 2);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    if (two) {
      _tile_loadd(5, a0 + 16 * kp + b * 32, kp * 2);
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
    }
  }
}

void rt_linear_bf16(const float* x, int64_t ldx, int64_t m, int64_t k, const uint16_t* wp,
                    int64_t n, const float* bias, float* y, int64_t ldy) {
  if (m <= 0 || n <= 0) return;
  const int64_t kb = (k + 31) / 32, kp = kb * 32, panels = (n + 31) / 32;
  const int64_t mp = (m + 15) / 16 * 16, blocks = mp / 16;
  const int64_t per = rt_even_chunk(blocks, CHUNK_BLOCKS, 1), chunks = (blocks + per - 1) / per;
  uint16_t* xb = (uint16_t*)rt_row_scratch((size_t)(mp * kp) * sizeof(uint16_t));
  if (!xb) return;  // (no memory for 16 rows of x: the caller's y is left as it was)
  round_rows(x, ldx, m, k, xb, mp, kp);
#pragma omp parallel if (chunks * panels > 1 && m * n * k > 32768)
  {
    rt_configure_tiles();
    float blk[16 * 32] __attribute__((aligned(64)));
#pragma omp for schedule(static)
    for (int64_t t = 0; t < chunks * panels; ++t) {
      const int64_t p = t % panels, c = t / panels;  // chunk-major: a chunk's rows stay in L2
      const uint16_t* pw = wp + p * kb * 1024;
      const int64_t r_end = (c + 1) * per < blocks ? (c + 1) * per : blocks;
      for (int64_t r = c * per; r < r_end; r += 2) {
        const int two = r + 1 < r_end;
        const uint16_t* a0 = xb + r * 16 * kp;
        dot_rows(a0, kp, two, pw, pw + 512, kb, blocks == 1);  // decode: prefetch the panel
        _tile_stored(0, blk, 128);
        _tile_stored(1, blk + 16, 128);
        write_block(blk, y, ldy, r * 16, m, p * 32, n, bias);
        if (two) {
          _tile_stored(2, blk, 128);
          _tile_stored(3, blk + 16, 128);
          write_block(blk, y, ldy, (r + 1) * 16, m, p * 32, n, bias);
        }
      }
    }
    _tile_release();
  }
}
int rt_linear_bf16_silu(const float* x, int64_t ldx, int64_t m, int64_t k, const uint16_t* wp,
                        int64_t n, const float* bias, float* out, int64_t ldo) {
  if (n % 64 != 0) return -3;
  if (m <= 0) return 0;
  const int64_t kb = (k + 31) / 32, kp = kb * 32, inter = n / 2, gates = inter / 32;
  const int64_t mp = (m + 15) / 16 * 16, blocks = mp / 16;
  const int64_t per = rt_even_chunk(blocks, CHUNK_BLOCKS, 1), chunks = (blocks + per - 1) / per;
  const int64_t items = gates * 2;
  uint16_t* xb = (uint16_t*)rt_row_scratch((size_t)(mp * kp) * sizeof(uint16_t));
  if (!xb) return -1;
  round_rows(x, ldx, m, k, xb, mp, kp);
#pragma omp parallel if (chunks * items > 1 && m * n * k > 32768)
  {
    rt_configure_tiles();
    float blk[16 * 32] __attribute__((aligned(64)));
#pragma omp for schedule(static)
    for (int64_t t = 0; t < chunks * items; ++t) {
      // (chunk, gate panel, 16-column half): C tiles 0, 2 gate and 1, 3 up, for 32 rows.
      const int64_t c = t / items, p = t % items / 2, h = t % 2;
      const uint16_t* pg = wp + p * kb * 1024 + h * 512;
      const uint16_t* pu = wp + (p + gates) * kb * 1024 + h * 512;
      const int64_t r_end = (c + 1) * per < blocks ? (c + 1) * per : blocks;
      for (int64_t r = c * per; r < r_end; r += 2) {
        const int two = r + 1 < r_end;
        const uint16_t* a0 = xb + r * 16 * kp;
        dot_rows(a0, kp, two, pg, pu, kb, 0);
        _tile_stored(0, blk, 128);
        _tile_stored(1, blk + 16, 128);
        write_silu(blk, out, ldo, r * 16, m, p * 32 + h * 16, inter, bias);
        if (two) {
          _tile_stored(2, blk, 128);
          _tile_stored(3, blk + 16, 128);
          write_silu(blk, out, ldo, (r + 1) * 16, m, p * 32 + h * 16, inter, bias);
        }
      }
    }
    _tile_release();
  }
  return 0;
}
#elif !defined(RT_BF16_DOT)
int rt_linear_bf16_silu(const float* x, int64_t ldx, int64_t m, int64_t k, const uint16_t* wp,
                        int64_t n, const float* bias, float* out, int64_t ldo) {
  (void)x, (void)ldx, (void)m, (void)k, (void)wp, (void)n, (void)bias, (void)out, (void)ldo;
  return -2;  // gemm.c's panels: the caller runs rt_linear_bf16 and rt_silu_mul_f32
}
#endif
