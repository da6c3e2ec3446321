// y = x @ W^T (+ bias) with W in bfloat16 k pairs (gemm_amx.c packs them; PAIR_AT) on VDPBF16PS:
// the "avx512bf16" library variant (AVX512_BF16 without AMX: AMD EPYC Zen 4 and Zen 5, Intel
// Cooper Lake); x and y float32. x is rounded to bfloat16 as the AMX kernel rounds it
// (bf16_pairs.h); every output lane accumulates its k pairs in float32, in k order, whatever
// the tile shape, so a column's sum does not depend on which work item computed it.
//
// One row r of a packed B tile (16 columns x one k pair) is one VDPBF16PS operand, and the
// pair (x[i, 2r], x[i, 2r + 1]) one 32-bit broadcast. A micro-tile is R <= MR rows x C <= 4
// column halves of 16 columns (24 float32 accumulators at 6 x 4): per k pair it loads C B
// rows and R broadcasts for R * C dot products. Work items are (chunk of at most CHUNK_ROWS
// rows, the chunks even, pair of panels), chunk-major: a chunk's rounded rows stay in L1/L2
// across the panels, a panel pair's B (2 KiB per panel and 32 k's) in L2 across the chunk's
// micro-tiles. A decode call (at most DECODE_CALL rows) is one micro-tile of all its rows per
// panel (two past MR_DECODE), the panels split over the threads: each weight byte is read
// from memory once, a panel one stream the hardware prefetcher follows (a software prefetch
// per k pair, as this kernel had, cost 8-16% of a call of 4-16 rows on Zen 4 and saved
// nothing at 1 row: its instructions compete with the dot products).
//
// rt_linear_bf16_silu: the gate_up projection and SiLU in one pass, as the AMX kernel does
// it: a micro-tile holds 32 gate columns (panel p) and their 32 up columns (panel p + n/64),
// and the epilogue writes silu(g) * u; bit for bit rt_linear_bf16 then rt_silu_mul_f32.
#include <stdint.h>

#include "bf16_pairs.h"
#include "rt_cpu.h"
#include "simd.h"

#if defined(RT_BF16_DOT)
#define MR 6            // rows per micro-tile of a prefill-sized call (4 column halves)
#define MR_DECODE 12    // rows of one decode micro-tile (2 halves)
#define DECODE_CALL 16  // a call of at most this many rows is decode-sized (guard.DECODE_ROWS)
#define CHUNK_ROWS 96   // rows per work item at most (16 micro-tiles; 110 KB of rounded x at
                        // K 576), the chunks even (rt_even_chunk)
#define ROW_STEP 64     // bf16 values from k pair r of a half to pair r + 1 (PAIR_AT)
#define HALF_OFF 32     // from half 0 of a block to half 1

// dst[c] + i * 32 (16 floats) <- row i of x (xr, rows kp apart) times column half c, whose
// kb blocks of 1024 bfloat16 start at col[c], for R rows and C halves (R * C <= 24; constants
// after inlining: the accumulators stay in registers).
static inline __attribute__((always_inline)) void tile(const uint16_t* xr, int64_t kp, int R,
                                                       int C, const uint16_t* const* col,
                                                       int64_t kb, float* const* dst) {
  __m512 acc[MR_DECODE][4];
  for (int i = 0; i < R; ++i)
    for (int c = 0; c < C; ++c) acc[i][c] = _mm512_setzero_ps();
  for (int64_t b = 0; b < kb; ++b)
    for (int r = 0; r < 16; ++r) {
      __m512i w[4];
      for (int c = 0; c < C; ++c) w[c] = _mm512_loadu_si512(col[c] + b * 1024 + r * ROW_STEP);
      const int64_t kk = b * 16 + r;  // the k pair
      for (int i = 0; i < R; ++i) {
        const __m512i a = _mm512_set1_epi32(((const int32_t*)(xr + i * kp))[kk]);
        for (int c = 0; c < C; ++c)
          acc[i][c] = _mm512_dpbf16_ps(acc[i][c], (__m512bh)a, (__m512bh)w[c]);
      }
    }
  for (int i = 0; i < R; ++i)
    for (int c = 0; c < C; ++c) _mm512_storeu_ps(dst[c] + i * 32, acc[i][c]);
}

// `tile` for a run-time row count: 4 halves for rows <= MR (a prefill micro-tile), 2 halves
// for rows <= MR_DECODE (a decode call's panel, or a prefill call's odd last one).
static void tile_rows(const uint16_t* xr, int64_t kp, int rows, int C,
                      const uint16_t* const* col, int64_t kb, float* const* dst) {
#define ROWS(R)                                 \
  case R:                                       \
    if (C == 4 && R <= MR) /* (constant) */     \
      tile(xr, kp, R, 4, col, kb, dst);         \
    else                                        \
      tile(xr, kp, R, 2, col, kb, dst);         \
    break;
  switch (rows) {
    ROWS(1)
    ROWS(2)
    ROWS(3)
    ROWS(4)
    ROWS(5)
    ROWS(6)
    ROWS(7)
    ROWS(8)
    ROWS(9)
    ROWS(10)
    ROWS(11)
    ROWS(12)
    default:
      break;
  }
#undef ROWS
}

// Rows [0, m) (m <= DECODE_CALL) of x times one panel's two halves into dst[c] + i * 32: one
// micro-tile, or two of at most 8 rows (the second reads the panel again from L1/L2).
static void decode_rows(const uint16_t* xr, int64_t kp, int m, const uint16_t* const* col,
                        int64_t kb, float* const* dst) {
  if (m <= MR_DECODE) {
    tile_rows(xr, kp, m, 2, col, kb, dst);
    return;
  }
  const int h = (m + 1) / 2;
  float* const rest[2] = {dst[0] + h * 32, dst[1] + h * 32};
  tile_rows(xr, kp, h, 2, col, kb, dst);
  tile_rows(xr + h * kp, kp, m - h, 2, col, kb, rest);
}

// x (m, k) rounded to bfloat16 rows of kp (zero padded) in this thread's scratch, or NULL.
static uint16_t* rounded_rows(const float* x, int64_t ldx, int64_t m, int64_t k, int64_t kp) {
  uint16_t* xb = (uint16_t*)rt_row_scratch((size_t)(m * kp) * sizeof(uint16_t));
  if (xb) round_rows(x, ldx, m, k, xb, m, kp);
  return xb;
}

void rt_linear_bf16(const float* x, int64_t ldx, int64_t m, int64_t k, const uint16_t* wp,
                    int64_t n, const float* bias, float* y, int64_t ldy) {
  if (m <= 0 || n <= 0) return;
  const int64_t kb = (k + 31) / 32, kp = kb * 32, panels = (n + 31) / 32;
  const int64_t pairs = (panels + 1) / 2, rows_per = rt_even_chunk(m, CHUNK_ROWS, 1);
  const int64_t chunks = (m + rows_per - 1) / rows_per;
  const uint16_t* xb = rounded_rows(x, ldx, m, k, kp);
  if (!xb) return;  // (no memory for the rounded rows: the caller's y is left as it was)
  if (m <= DECODE_CALL) {  // decode: all rows per panel, each weight byte read once from memory
#pragma omp parallel for schedule(static) if (panels > 1 && m * n * k > 32768)
    for (int64_t p = 0; p < panels; ++p) {
      const uint16_t* const col[2] = {wp + p * kb * 1024, wp + p * kb * 1024 + HALF_OFF};
      float blk[16 * 32] __attribute__((aligned(64)));
      float* const dst[2] = {blk, blk + 16};
      decode_rows(xb, kp, (int)m, col, kb, dst);
      write_block(blk, y, ldy, 0, m, p * 32, n, bias);
    }
    return;
  }
#pragma omp parallel for schedule(static) if (chunks * pairs > 1 && m * n * k > 32768)
  for (int64_t t = 0; t < chunks * pairs; ++t) {
    const int64_t c = t / pairs, p = t % pairs * 2;  // chunk-major; panels p, p + 1
    const int C = p + 1 < panels ? 4 : 2;
    const uint16_t* const col[4] = {wp + p * kb * 1024, wp + p * kb * 1024 + HALF_OFF,
                                    wp + (p + 1) * kb * 1024, wp + (p + 1) * kb * 1024 + HALF_OFF};
    float blk[2][16 * 32] __attribute__((aligned(64)));  // per panel: rows of [half 0 | 1]
    float* const dst[4] = {blk[0], blk[0] + 16, blk[1], blk[1] + 16};
    const int64_t end = (c + 1) * rows_per < m ? (c + 1) * rows_per : m;
    for (int64_t r0 = c * rows_per; r0 < end; r0 += MR) {
      const int rows = (int)(end - r0 < MR ? end - r0 : MR);
      tile_rows(xb + r0 * kp, kp, rows, C, col, kb, dst);
      write_block(blk[0], y, ldy, r0, r0 + rows, p * 32, n, bias);
      if (C == 4) write_block(blk[1], y, ldy, r0, r0 + rows, (p + 1) * 32, n, bias);
    }
  }
}

int rt_linear_bf16_silu(const float* x, int64_t ldx, int64_t m, int64_t k, const uint16_t* wp,
                        int64_t n, const float* bias, float* out, int64_t ldo) {
  if (n % 64 != 0) return -3;
  if (m <= 0) return 0;
  const int64_t kb = (k + 31) / 32, kp = kb * 32, inter = n / 2, gates = inter / 32;
  const int64_t rows_per = rt_even_chunk(m, CHUNK_ROWS, 1), chunks = (m + rows_per - 1) / rows_per;
  const uint16_t* xb = rounded_rows(x, ldx, m, k, kp);
  if (!xb) return -1;
  if (m <= DECODE_CALL) {  // decode: a gate panel, then its up panel, each read once
#pragma omp parallel for schedule(static) if (gates > 1 && m * n * k > 32768)
    for (int64_t p = 0; p < gates; ++p) {
      const uint16_t* const gate[2] = {wp + p * kb * 1024, wp + p * kb * 1024 + HALF_OFF};
      const uint16_t* const up[2] = {wp + (p + gates) * kb * 1024,
                                     wp + (p + gates) * kb * 1024 + HALF_OFF};
      float blk[2][16 * 32] __attribute__((aligned(64)));  // per half: rows of [gate | up]
      float* const dst_gate[2] = {blk[0], blk[1]};
      float* const dst_up[2] = {blk[0] + 16, blk[1] + 16};
      decode_rows(xb, kp, (int)m, gate, kb, dst_gate);
      decode_rows(xb, kp, (int)m, up, kb, dst_up);
      write_silu(blk[0], out, ldo, 0, m, p * 32, inter, bias);
      write_silu(blk[1], out, ldo, 0, m, p * 32 + 16, inter, bias);
    }
    return 0;
  }
#pragma omp parallel for schedule(static) if (chunks * gates > 1 && m * n * k > 32768)
  for (int64_t t = 0; t < chunks * gates; ++t) {
    const int64_t c = t / gates, p = t % gates;  // gate panel p, its up panel p + gates
    const uint16_t* const col[4] = {wp + p * kb * 1024, wp + p * kb * 1024 + HALF_OFF,
                                    wp + (p + gates) * kb * 1024,
                                    wp + (p + gates) * kb * 1024 + HALF_OFF};
    float blk[2][16 * 32] __attribute__((aligned(64)));  // per half: rows of [gate | up]
    float* const dst[4] = {blk[0], blk[1], blk[0] + 16, blk[1] + 16};
    const int64_t end = (c + 1) * rows_per < m ? (c + 1) * rows_per : m;
    for (int64_t r0 = c * rows_per; r0 < end; r0 += MR) {
      const int rows = (int)(end - r0 < MR ? end - r0 : MR);
      tile_rows(xb + r0 * kp, kp, rows, 4, col, kb, dst);
      write_silu(blk[0], out, ldo, r0, r0 + rows, p * 32, inter, bias);
      write_silu(blk[1], out, ldo, r0, r0 + rows, p * 32 + 16, inter, bias);
    }
  }
  return 0;
}
#endif
