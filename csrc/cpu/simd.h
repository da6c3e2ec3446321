// One vector vocabulary for the CPU kernels (internal header): the kernels are written once
// against `vf` (VW float32 lanes) and the operations below, and each library variant is built
// with its ISA's flags (radixrt/model/cpu/build.py):
//   AVX-512F (+DQ/BW/VL): VW = 16, masks are __mmask16 (the "amx" variant is this one plus
//                         AMX-BF16 tiles for bfloat16 linear layers, gemm_amx.c; the
//                         "avx512bf16" one plus VDPBF16PS for them, gemm_bf16dot.c);
//   AVX2 + FMA:           VW = 8, masks are __m256 lanes of all ones or zeros;
//   neither (GCC/Clang):  VW = 4 generic vectors with the arithmetic only (RT_VEC, not
//                         RT_SIMD): the decode attention uses them, other kernels their C loops.
// exp is a degree-6 polynomial (about 2 ulp) on x = n ln2 + r, |r| <= ln2/2, scaled by 2^n;
// inputs are clamped to [-87.33, 88.3] so 2^n stays a normal float on every variant.
#pragma once

#include <math.h>
#include <stdint.h>
#include <string.h>

// bfloat16 <-> float32 bits, scalar (the weights' packing, the portable tiles, K/V stores):
// widening is exact; rounding is to nearest even, a NaN stays a (quiet) NaN.
static inline float rt_bf16_to_f32(uint16_t h) {
  const uint32_t bits = (uint32_t)h << 16;
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}
static inline uint16_t rt_round_bf16(float v) {
  uint32_t bits;
  memcpy(&bits, &v, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((bits >> 16) | 0x40u);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return (uint16_t)(bits >> 16);
}

#if defined(__AVX512F__)
#include <immintrin.h>
#define RT_SIMD 1
#if defined(__AMX_BF16__) && defined(__AMX_TILE__) && defined(__AVX512BF16__)
#define RT_AMX 1  // the "amx" variant: AVX-512 plus AMX tiles for bfloat16 weights (gemm_amx.c)
#define RT_ISA "amx"
#elif defined(__AVX512BF16__)
#define RT_BF16_DOT 1  // "avx512bf16": AVX-512 plus VDPBF16PS for bfloat16 weights (gemm_bf16dot.c)
#define RT_ISA "avx512bf16"
#else
#define RT_ISA "avx512"
#endif
#if defined(RT_AMX) || defined(RT_BF16_DOT)
#define RT_BF16_PAIRS 1  // bfloat16 weights packed as k pairs (gemm_amx.c's layout)
#endif
#define VW 16
typedef __m512 vf;
typedef __mmask16 vmask;

static inline vf vzero(void) { return _mm512_setzero_ps(); }
static inline vf vset1(float x) { return _mm512_set1_ps(x); }
static inline vf vload(const float* p) { return _mm512_loadu_ps(p); }
static inline void vstore(float* p, vf v) { _mm512_storeu_ps(p, v); }
static inline vf vadd(vf a, vf b) { return _mm512_add_ps(a, b); }
static inline vf vsub(vf a, vf b) { return _mm512_sub_ps(a, b); }
static inline vf vmul(vf a, vf b) { return _mm512_mul_ps(a, b); }
static inline vf vdiv(vf a, vf b) { return _mm512_div_ps(a, b); }
static inline vf vmax(vf a, vf b) { return _mm512_max_ps(a, b); }
static inline vf vmin(vf a, vf b) { return _mm512_min_ps(a, b); }
static inline vf vfma(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }  // a*b + c
static inline vf vfnma(vf a, vf b, vf c) { return _mm512_fnmadd_ps(a, b, c); }  // c - a*b
static inline float vhsum(vf v) { return _mm512_reduce_add_ps(v); }
static inline float vhmax(vf v) { return _mm512_reduce_max_ps(v); }
static inline vf vround(vf x) {
  return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
static inline vf vscale2(vf p, vf n) { return _mm512_scalef_ps(p, n); }  // p * 2^n
static inline vf vlanes(void) {  // lane i holds i
  return _mm512_set_ps(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
}
// The first n lanes (n may be <= 0 or >= VW).
static inline vmask vmask_first(int64_t n) {
  return n >= 16 ? (vmask)0xFFFF : n <= 0 ? (vmask)0 : (vmask)((1u << n) - 1);
}
static inline vf vload_mask(vmask m, const float* p) { return _mm512_maskz_loadu_ps(m, p); }
// VW int8 values at p, as float32 lanes.
static inline vf vload_i8(const int8_t* p) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i*)p)));
}
// VW bfloat16 values at p (raw bits), as float32 lanes: each widened exactly (bits << 16).
static inline vf vload_bf16(const uint16_t* p) {
  const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}
static inline void vstore_mask(float* p, vmask m, vf v) { _mm512_mask_storeu_ps(p, m, v); }
static inline vmask vcmp_ge(vf a, vf b) { return _mm512_cmp_ps_mask(a, b, _CMP_GE_OQ); }
static inline vmask vcmp_neq(vf a, vf b) { return _mm512_cmp_ps_mask(a, b, _CMP_NEQ_OQ); }
static inline vf vselect(vmask m, vf yes, vf no) { return _mm512_mask_mov_ps(no, m, yes); }

// Lane i of the result = the sum of the lanes of a[i], for VW vectors at once.
static inline vf vsum_lanes(vf a[16]) {
  __m512 t[8], u[4];
  for (int p = 0; p < 8; ++p)  // per 128-bit lane: [x0+x2, y0+y2, x1+x3, y1+y3]
    t[p] = _mm512_add_ps(_mm512_unpacklo_ps(a[2 * p], a[2 * p + 1]),
                         _mm512_unpackhi_ps(a[2 * p], a[2 * p + 1]));
  for (int p = 0; p < 4; ++p) {  // per 128-bit lane: partial sums of a[4p .. 4p+3]
    const __m512d x = _mm512_castps_pd(t[2 * p]), y = _mm512_castps_pd(t[2 * p + 1]);
    u[p] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(x, y)),
                         _mm512_castpd_ps(_mm512_unpackhi_pd(x, y)));
  }
  const __m512 w01 = _mm512_add_ps(_mm512_shuffle_f32x4(u[0], u[1], 0x88),
                                   _mm512_shuffle_f32x4(u[0], u[1], 0xDD));
  const __m512 w23 = _mm512_add_ps(_mm512_shuffle_f32x4(u[2], u[3], 0x88),
                                   _mm512_shuffle_f32x4(u[2], u[3], 0xDD));
  return _mm512_add_ps(_mm512_shuffle_f32x4(w01, w23, 0x88),
                       _mm512_shuffle_f32x4(w01, w23, 0xDD));
}

#elif defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define RT_SIMD 1
#define RT_ISA "avx2"
#define VW 8
typedef __m256 vf;
typedef __m256 vmask;  // each lane all ones (selected) or all zeros

static inline vf vzero(void) { return _mm256_setzero_ps(); }
static inline vf vset1(float x) { return _mm256_set1_ps(x); }
static inline vf vload(const float* p) { return _mm256_loadu_ps(p); }
static inline void vstore(float* p, vf v) { _mm256_storeu_ps(p, v); }
static inline vf vadd(vf a, vf b) { return _mm256_add_ps(a, b); }
static inline vf vsub(vf a, vf b) { return _mm256_sub_ps(a, b); }
static inline vf vmul(vf a, vf b) { return _mm256_mul_ps(a, b); }
static inline vf vdiv(vf a, vf b) { return _mm256_div_ps(a, b); }
static inline vf vmax(vf a, vf b) { return _mm256_max_ps(a, b); }
static inline vf vmin(vf a, vf b) { return _mm256_min_ps(a, b); }
static inline vf vfma(vf a, vf b, vf c) { return _mm256_fmadd_ps(a, b, c); }
static inline vf vfnma(vf a, vf b, vf c) { return _mm256_fnmadd_ps(a, b, c); }
static inline float vhsum(vf v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}
static inline float vhmax(vf v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_max_ss(s, _mm_movehdup_ps(s)));
}
static inline vf vround(vf x) {
  return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
// p * 2^n for integral n in [-126, 127]: the exponent field built directly.
static inline vf vscale2(vf p, vf n) {
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}
static inline vf vlanes(void) { return _mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7); }
static inline vmask vmask_first(int64_t n) {
  const int c = n <= 0 ? 0 : n >= 8 ? 8 : (int)n;
  return _mm256_castsi256_ps(
      _mm256_cmpgt_epi32(_mm256_set1_epi32(c), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)));
}
static inline vf vload_i8(const int8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i*)p)));
}
static inline vf vload_bf16(const uint16_t* p) {
  const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}
// Masked-off lanes are neither read nor written (no fault past the end of a buffer).
static inline vf vload_mask(vmask m, const float* p) {
  return _mm256_maskload_ps(p, _mm256_castps_si256(m));
}
static inline void vstore_mask(float* p, vmask m, vf v) {
  _mm256_maskstore_ps(p, _mm256_castps_si256(m), v);
}
static inline vmask vcmp_ge(vf a, vf b) { return _mm256_cmp_ps(a, b, _CMP_GE_OQ); }
static inline vmask vcmp_neq(vf a, vf b) { return _mm256_cmp_ps(a, b, _CMP_NEQ_OQ); }
static inline vf vselect(vmask m, vf yes, vf no) { return _mm256_blendv_ps(no, yes, m); }

static inline vf vsum_lanes(vf a[8]) {
  const __m256 t0 = _mm256_hadd_ps(a[0], a[1]), t1 = _mm256_hadd_ps(a[2], a[3]);
  const __m256 t2 = _mm256_hadd_ps(a[4], a[5]), t3 = _mm256_hadd_ps(a[6], a[7]);
  // per 128-bit half: [a0, a1, a2, a3] and [a4 .. a7], each a sum of that half's lanes
  const __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}
#elif defined(__GNUC__)
// Portable: the compiler's generic vectors (GCC/Clang vector extensions), 4 lanes of 128
// bits: SSE2 on any x86-64, NEON on AArch64, scalar code where the target has neither. Only
// the arithmetic below (RT_VEC) is defined; the kernels' RT_SIMD paths (masks, int8 loads,
// prefetches) keep their portable C loops.
#define RT_ISA "portable"
#define VW 4
typedef float vf __attribute__((vector_size(16)));
typedef int32_t vi __attribute__((vector_size(16)));
typedef uint32_t vu __attribute__((vector_size(16)));

static inline vf vzero(void) { return (vf){0.0f, 0.0f, 0.0f, 0.0f}; }
static inline vf vset1(float x) { return (vf){x, x, x, x}; }
static inline vf vload(const float* p) {
  vf v;
  memcpy(&v, p, sizeof v);
  return v;
}
static inline void vstore(float* p, vf v) { memcpy(p, &v, sizeof v); }
static inline vf vadd(vf a, vf b) { return a + b; }
static inline vf vsub(vf a, vf b) { return a - b; }
static inline vf vmul(vf a, vf b) { return a * b; }
static inline vf vdiv(vf a, vf b) { return a / b; }
static inline vf vpick(vi m, vf yes, vf no) { return (vf)(((vi)yes & m) | ((vi)no & ~m)); }
static inline vf vmax(vf a, vf b) { return vpick(a > b, a, b); }
static inline vf vmin(vf a, vf b) { return vpick(a < b, a, b); }
static inline vf vfma(vf a, vf b, vf c) { return a * b + c; }
static inline vf vfnma(vf a, vf b, vf c) { return c - a * b; }
static inline float vhsum(vf v) { return (v[0] + v[2]) + (v[1] + v[3]); }
static inline float vhmax(vf v) {
  const float a = v[0] > v[1] ? v[0] : v[1], b = v[2] > v[3] ? v[2] : v[3];
  return a > b ? a : b;
}
// Nearest integer (ties to even) for |x| < 2^22: adding 1.5 * 2^23 drops the fraction.
static inline vf vround(vf x) { return (x + vset1(12582912.0f)) - vset1(12582912.0f); }
static inline vf vscale2(vf p, vf n) {  // p * 2^n for integral n in [-126, 127]
  const vi e = (__builtin_convertvector(n, vi) + 127) << 23;
  return p * (vf)e;
}
static inline vf vsum_lanes(vf a[4]) {
  return (vf){vhsum(a[0]), vhsum(a[1]), vhsum(a[2]), vhsum(a[3])};
}
static inline vf vload_bf16(const uint16_t* p) {  // widened exactly (bits << 16)
  const vu w = {p[0], p[1], p[2], p[3]};
  return (vf)(w << 16);
}
#define RT_VEC 1
#else
#define RT_ISA "portable"  // no vectors at all: the kernels' scalar C loops
#endif
#if defined(RT_SIMD)
#define RT_VEC 1  // the ISAs above define every operation RT_VEC names, and more
#endif

#if defined(RT_VEC)
static inline vf vexp(vf x) {
  x = vmin(vmax(x, vset1(-87.33f)), vset1(88.3f));
  const vf n = vround(vmul(x, vset1(1.44269504f)));
  vf r = vfnma(n, vset1(0.693359375f), x);
  r = vfnma(n, vset1(-2.12194440e-4f), r);
  vf p = vset1(1.9875691500e-4f);
  p = vfma(p, r, vset1(1.3981999507e-3f));
  p = vfma(p, r, vset1(8.3334519073e-3f));
  p = vfma(p, r, vset1(4.1665795894e-2f));
  p = vfma(p, r, vset1(1.6666665459e-1f));
  p = vfma(p, r, vset1(5.0000001201e-1f));
  p = vfma(vmul(p, r), r, vadd(r, vset1(1.0f)));
  return vscale2(p, n);
}
#endif
