// W8A8 int8 linear: y = (xq * xs) @ (wq * ws)^T + bias, the int8 weights of rt_pack_q8 (one
// scale ws per output column) times x quantized here per row, symmetric: xs[i] = max_k
// |x[i, k]| / 127, xq = round(x / xs) in [-127, 127] (nearest even; a zero row stays zero).
// Products are summed exactly in int32, then y = bias + sum * xs[i] * ws[n] in float32.
// With two planes x is also its rounding residual quantized the same way (quantize_rows):
// twice the int8 products, about 14 bits of x instead of 8.
// Two paths over one packed layout: AMX-INT8 tiles (TDPBSSD; the "amx" variant) and
// AVX-512 VNNI (VPDPBUSD, u8 x s8: x is offset by 128 to u8 and 128 * column sum taken off;
// any AVX-512 variant on a CPU with avx512_vnni, chosen at run time). rt_q8a8_path says which
// one is best here (0: none in this library: callers keep the weight-only kernel).
//
// Packed layout (rt_pack_q8a8, from rt_pack_q8's panels): P = ceil(N/32) panels of 32 columns,
// K padded with zeros to KP = ceil(K/64) * 64. Panel p, k block b (64 k's) is 2 B tiles of 16
// rows x 64 bytes, one per 16 columns: row r of half h holds, for each of its 16 columns c,
// the 4 values W[p*32 + h*16 + c, b*64 + 4r + e], e < 4 (what TDPBSSD and VPDPBUSD multiply),
// so element (p, b, h, r, c, e) is at ((((p*KB + b)*2 + h)*16 + r)*16 + c)*4 + e; 2 KiB per
// block. After all panels: P*32 int32 column sums of the int8 weights (VNNI's offset).
#define _GNU_SOURCE
#include <stdint.h>
#include <string.h>

#include "amx_tiles.h"
#include "rt_cpu.h"
#include "simd.h"

#define QNR 32  // columns per panel, as gemm.c's NR

int64_t rt_q8a8_packed_size(int64_t n, int64_t k) {
  const int64_t panels = (n + QNR - 1) / QNR;
  return panels * ((k + 63) / 64) * 2048 + panels * QNR * 4;
}

void rt_pack_q8a8(const int8_t* q8, int64_t n, int64_t k, int8_t* wp) {
  const int64_t kb = (k + 63) / 64, panels = (n + QNR - 1) / QNR;
  int32_t* sums = (int32_t*)(wp + panels * kb * 2048);
#pragma omp parallel for schedule(static)
  for (int64_t p = 0; p < panels; ++p) {
    const int8_t* src = q8 + p * k * QNR;  // rt_pack_q8's panel: (k, 32)
    for (int j = 0; j < QNR; ++j) sums[p * QNR + j] = 0;
    for (int64_t b = 0; b < kb; ++b)
      for (int h = 0; h < 2; ++h)
        for (int r = 0; r < 16; ++r)
          for (int c = 0; c < 16; ++c)
            for (int e = 0; e < 4; ++e) {
              const int64_t kk = b * 64 + 4 * r + e;
              const int8_t v = kk < k ? src[kk * QNR + h * 16 + c] : 0;
              wp[((((p * kb + b) * 2 + h) * 16 + r) * 16 + c) * 4 + e] = v;
              sums[p * QNR + h * 16 + c] += v;
            }
  }
}

#if defined(RT_SIMD) && VW == 16
// Quantized row blocks of x (m, k): for row block rb (16 rows) and plane q < planes, block
// rb * planes + q holds 16 rows of kp int8 values (rows past m, columns past k zero) in xq
// and their 16 scales in xs. Plane 0 is x rounded to xs0 = max |x| / 127; plane 1 (planes
// 2) is the rounding residual x - xs0 * q0 rounded the same way, so that the two planes
// together carry about 14 bits of each value.
static void quantize_rows(const float* x, int64_t ldx, int64_t m, int64_t k, int8_t* xq,
                          float* xs, int64_t mp, int64_t kp, int planes) {
#pragma omp parallel for schedule(static) if (m * k > 65536)
  for (int64_t i = 0; i < mp; ++i) {
    const float* row = x + i * ldx;
    const int64_t live = i < m ? k : 0;
    const int64_t out0 = ((i / 16) * planes) * 16 + i % 16;  // plane q: out0 + 16 q
    vf amax = vzero();
    for (int64_t j = 0; j < live; j += 16)
      amax = vmax(amax, _mm512_abs_ps(vload_mask(vmask_first(k - j), row + j)));
    const float a = live ? vhmax(amax) : 0.0f;
    const float s0 = a / 127.0f;
    const vf inv = vset1(a > 0.0f ? 127.0f / a : 0.0f), vs0 = vset1(s0);
    vf rmax = vzero();
    for (int64_t j = 0; j < kp; j += 16) {
      const vf v = vload_mask(vmask_first(live - j), row + j);
      const vf q = vround(vmul(v, inv));  // |q| <= 127
      _mm_storeu_si128((__m128i*)(xq + out0 * kp + j), _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(q)));
      if (planes == 2) rmax = vmax(rmax, _mm512_abs_ps(vfnma(q, vs0, v)));
    }
    xs[out0] = s0;
    if (planes == 2) {
      const float ra = vhmax(rmax);
      const vf rinv = vset1(ra > 0.0f ? 127.0f / ra : 0.0f);
      for (int64_t j = 0; j < kp; j += 16) {
        const vf v = vload_mask(vmask_first(live - j), row + j);
        const vf res = vfnma(vround(vmul(v, inv)), vs0, v);
        const __m512i q = _mm512_cvtps_epi32(vround(vmul(res, rinv)));
        _mm_storeu_si128((__m128i*)(xq + (out0 + 16) * kp + j), _mm512_cvtsepi32_epi8(q));
      }
      xs[out0 + 16] = ra / 127.0f;
    }
  }
}

// y rows [r0, r0 + 16) (those < m) of columns [col, col + 32): blk (16 x 32 int32) times its
// rows' scales xs0, plus blk2 times xs1 when blk2 (the residual plane), times ws, plus bias.
static void write_rows(const int32_t* blk, const float* xs0, const int32_t* blk2,
                       const float* xs1, const float* ws, float* y, int64_t ldy, int64_t r0,
                       int64_t m, int64_t col, int64_t n, const float* bias) {
  const vmask lo = vmask_first(n - col), hi = vmask_first(n - col - 16);
  const vf s0 = vload_mask(lo, ws + col), s1 = vload_mask(hi, ws + col + 16);
  const vf b0 = bias ? vload_mask(lo, bias + col) : vzero();
  const vf b1 = bias ? vload_mask(hi, bias + col + 16) : vzero();
  for (int64_t i = 0; i < 16 && r0 + i < m; ++i) {
    const vf rs = vset1(xs0[i]);
    vf a0 = vmul(_mm512_cvtepi32_ps(_mm512_loadu_si512(blk + i * 32)), rs);
    vf a1 = vmul(_mm512_cvtepi32_ps(_mm512_loadu_si512(blk + i * 32 + 16)), rs);
    if (blk2) {
      const vf rs2 = vset1(xs1[i]);
      a0 = vfma(_mm512_cvtepi32_ps(_mm512_loadu_si512(blk2 + i * 32)), rs2, a0);
      a1 = vfma(_mm512_cvtepi32_ps(_mm512_loadu_si512(blk2 + i * 32 + 16)), rs2, a1);
    }
    vstore_mask(y + (r0 + i) * ldy + col, lo, vfma(a0, s0, b0));
    vstore_mask(y + (r0 + i) * ldy + col + 16, hi, vfma(a1, s1, b1));
  }
}

// VNNI: R rows (a constant, <= 8: 2R + 3 vector registers) of xq x one panel over all k
// blocks, into blk (16 x 32 int32).
#define VNNI __attribute__((target("avx512f,avx512bw,avx512vnni")))
static inline VNNI __attribute__((always_inline)) void vnni_rows(
    const int8_t* xq, int64_t kp, int64_t kb, const int8_t* pw, const int32_t* sums,
    const int R, int32_t* blk) {
  __m512i acc[8][2];
  const __m512i off = _mm512_set1_epi8((char)0x80);  // xq + 128 as u8: flip the sign bit
  const __m512i c0 = _mm512_mullo_epi32(_mm512_loadu_si512(sums), _mm512_set1_epi32(-128));
  const __m512i c1 = _mm512_mullo_epi32(_mm512_loadu_si512(sums + 16), _mm512_set1_epi32(-128));
  for (int i = 0; i < R; ++i) acc[i][0] = c0, acc[i][1] = c1;  // from -128 * column sum
  for (int64_t b = 0; b < kb; ++b) {
    const int8_t* wb = pw + b * 2048;
    for (int r = 0; r < 16; ++r) {
      const __m512i w0 = _mm512_loadu_si512(wb + r * 64);
      const __m512i w1 = _mm512_loadu_si512(wb + 1024 + r * 64);
      for (int i = 0; i < R; ++i) {
        int32_t four;
        memcpy(&four, xq + i * kp + b * 64 + 4 * r, 4);
        const __m512i xv = _mm512_xor_si512(_mm512_set1_epi32(four), off);
        acc[i][0] = _mm512_dpbusd_epi32(acc[i][0], xv, w0);
        acc[i][1] = _mm512_dpbusd_epi32(acc[i][1], xv, w1);
      }
    }
  }
  for (int i = 0; i < R; ++i) {
    _mm512_storeu_si512(blk + i * 32, acc[i][0]);
    _mm512_storeu_si512(blk + i * 32 + 16, acc[i][1]);
  }
}

// `rows` (<= 16) rows of xq x one panel, in groups of at most 8.
static VNNI void vnni_block(const int8_t* xq, int64_t kp, int64_t kb, const int8_t* pw,
                            const int32_t* sums, int rows, int32_t* blk) {
  for (int i0 = 0; i0 < rows; i0 += 8) {
    const int8_t* x0 = xq + i0 * kp;
    int32_t* b0 = blk + i0 * 32;
    switch (rows - i0 < 8 ? rows - i0 : 8) {
#define CASE(R) \
  case R:       \
    vnni_rows(x0, kp, kb, pw, sums, R, b0); \
    break;
      CASE(1) CASE(2) CASE(3) CASE(4) CASE(5) CASE(6) CASE(7) CASE(8)
#undef CASE
    }
  }
}

static int has_vnni(void) { return __builtin_cpu_supports("avx512vnni"); }
#endif

#if defined(RT_AMX) && defined(__AMX_INT8__)
// Tiles (amx_tiles.h) 0-3: C (16 x 16 int32); 4, 5: A (16 rows x 64 int8); 6, 7: B (16 x 64
// bytes).

// Rows [r, r + 16 * (1 + two)) x one panel on the tiles, into blk (and blk2 for the second).
static void amx_blocks(const int8_t* a0, int64_t kp, int64_t kb, const int8_t* pw, int two,
                       int32_t* blk, int32_t* blk2) {
  _tile_zero(0);
  _tile_zero(1);
  if (two) {
    _tile_zero(2);
    _tile_zero(3);
  }
  for (int64_t b = 0; b < kb; ++b) {
    _tile_loadd(6, pw + b * 2048, 64);
    _tile_loadd(7, pw + b * 2048 + 1024, 64);
    _tile_loadd(4, a0 + b * 64, kp);
    _tile_dpbssd(0, 4, 6);
    _tile_dpbssd(1, 4, 7);
    if (two) {
      _tile_loadd(5, a0 + 16 * kp + b * 64, kp);
      _tile_dpbssd(2, 5, 6);
      _tile_dpbssd(3, 5, 7);
    }
  }
  _tile_stored(0, blk, 128);
  _tile_stored(1, blk + 16, 128);
  if (two) {
    _tile_stored(2, blk2, 128);
    _tile_stored(3, blk2 + 16, 128);
  }
}
#define HAVE_AMX_Q8 1
#endif

// The best path this library runs here: 2 AMX tiles, 1 VNNI, 0 neither (rt_linear_q8a8 takes
// the path to use, so a caller may run VNNI on an AMX CPU).
int rt_q8a8_path(void) {
#if defined(HAVE_AMX_Q8)
  return 2;
#elif defined(RT_SIMD) && VW == 16
  return has_vnni() ? 1 : 0;
#else
  return 0;
#endif
}

#if defined(RT_SIMD) && VW == 16
// Whether this library runs `path` on this CPU.
static int path_ok(int64_t path) {
#if defined(HAVE_AMX_Q8)
  if (path == 2) return 1;
#endif
  return path == 1 && has_vnni();
}
#endif

#define Q8_CHUNK 8  // 16-row blocks per work item, as gemm_amx.c's chunks

int rt_linear_q8a8(const float* x, int64_t ldx, int64_t m, int64_t k, const int8_t* wp,
                   const float* ws, int64_t n, const float* bias, float* y, int64_t ldy,
                   int64_t path, int64_t planes) {
#if defined(RT_SIMD) && VW == 16
  if (!path_ok(path) || planes < 1 || planes > 2) return -1;
  if (m <= 0 || n <= 0) return 0;
  const int64_t kb = (k + 63) / 64, kp = kb * 64, panels = (n + QNR - 1) / QNR;
  const int64_t mp = (m + 15) / 16 * 16, blocks = planes * mp / 16;  // quantized row blocks
  // Blocks per chunk even: a row block's two planes stay together.
  const int64_t per = rt_even_chunk(blocks, Q8_CHUNK, 2), chunks = (blocks + per - 1) / per;
  const int32_t* sums = (const int32_t*)(wp + panels * kb * 2048);
  float* xs = (float*)rt_row_scratch((size_t)(planes * mp * (kp + 4)));
  if (!xs) return -2;
  int8_t* xq = (int8_t*)(xs + planes * mp);  // 64-byte aligned (mp % 16 == 0)
  quantize_rows(x, ldx, m, k, xq, xs, mp, kp, (int)planes);
#pragma omp parallel if (chunks * panels > 1 && m * n * k > 32768)
  {
#if defined(HAVE_AMX_Q8)
    if (path == 2) rt_configure_tiles();
#endif
    int32_t blk[16 * 32] __attribute__((aligned(64))), blk2[16 * 32] __attribute__((aligned(64)));
#pragma omp for schedule(static)
    for (int64_t t = 0; t < chunks * panels; ++t) {
      const int64_t p = t % panels, c = t / panels;  // chunk-major: a chunk's rows stay in L2
      const int8_t* pw = wp + p * kb * 2048;
      const int64_t r_end = (c + 1) * per < blocks ? (c + 1) * per : blocks;
      for (int64_t r = c * per; r < r_end; r += 2) {
        const int two = r + 1 < r_end;  // always, with two planes (blocks is even)
#if defined(HAVE_AMX_Q8)
        if (path == 2) {
          amx_blocks(xq + r * 16 * kp, kp, kb, pw, two, blk, blk2);
        } else
#endif
        {
          const int64_t live = m - (r / planes) * 16, live2 = m - ((r + 1) / planes) * 16;
          vnni_block(xq + r * 16 * kp, kp, kb, pw, sums + p * QNR, live < 16 ? (int)live : 16,
                     blk);
          if (two)
            vnni_block(xq + (r + 1) * 16 * kp, kp, kb, pw, sums + p * QNR,
                       live2 < 16 ? (int)live2 : 16, blk2);
        }
        const int64_t col = p * QNR;
        if (planes == 2) {  // blocks r, r + 1: the two planes of row block r / 2
          write_rows(blk, xs + r * 16, blk2, xs + (r + 1) * 16, ws, y, ldy, r / 2 * 16, m, col,
                     n, bias);
          continue;
        }
        write_rows(blk, xs + r * 16, 0, 0, ws, y, ldy, r * 16, m, col, n, bias);
        if (two)
          write_rows(blk2, xs + (r + 1) * 16, 0, 0, ws, y, ldy, (r + 1) * 16, m, col, n, bias);
      }
    }
#if defined(HAVE_AMX_Q8)
    if (path == 2) _tile_release();
#endif
  }
  return 0;
#else
  (void)x, (void)ldx, (void)m, (void)k, (void)wp, (void)ws, (void)n, (void)bias, (void)y;
  (void)ldy, (void)path, (void)planes;
  return -1;
#endif
}
