// fp8 <-> float32 for the KV pool (internal header of kv.h): OCP e4m3 ("fn": exponent bias 7,
// no infinities, max finite 448, S.1111.111 NaN) and e5m2 (bias 15, the top byte of an IEEE
// half, max finite 57344). Stores round to nearest even and saturate at +-max finite, the bits
// torch's `.to(float8_*)` writes after a clamp (radixrt/cache/kv_layout.py). Reads are in
// "raw units": e5m2 exactly its value; e4m3 its value / 256, so that every ISA widens it as
// the half (S, 0, E, M) with one F16C/AVX-512 conversion (the x256 is folded into the row's
// scale by kv.h). A NaN byte only comes with a NaN scale, so its row reads NaN either way.
#pragma once

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "simd.h"

#define RT_E4M3_MAX 448.0f
#define RT_E5M2_MAX 57344.0f

static inline float rt_f32_of_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

// e4m3 byte -> its value / 256 (exact).
static inline float rt_e4m3_raw(uint8_t b) {
  const uint32_t e = (b >> 3) & 15u, m = b & 7u, s = (uint32_t)(b & 0x80u) << 24;
  if ((b & 0x7Fu) == 0x7Fu) return rt_f32_of_bits(s | 0x7FC00000u);
  if (e) return rt_f32_of_bits(s | ((e + 112u) << 23) | (m << 20));  // 2^(e-7-8) x 1.m
  return rt_f32_of_bits(s) + (s ? -1.0f : 1.0f) * (float)m * 0x1p-17f;  // m x 2^-9 / 256
}

// e5m2 byte -> its value (exact; infinities and NaN as a half's).
static inline float rt_e5m2_raw(uint8_t b) {
  const uint32_t e = (b >> 2) & 31u, m = b & 3u, s = (uint32_t)(b & 0x80u) << 24;
  if (e == 31u) return rt_f32_of_bits(s | 0x7F800000u | (m << 21));
  if (e) return rt_f32_of_bits(s | ((e + 112u) << 23) | (m << 21));
  return rt_f32_of_bits(s) + (s ? -1.0f : 1.0f) * (float)m * 0x1p-16f;
}

// x -> fp8 with `man` mantissa bits and exponent `bias`: nearest even, saturating at +-fmax.
static inline uint8_t rt_fp8_round(float x, int man, int bias, float fmax) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  const uint8_t s = (uint8_t)((u >> 24) & 0x80u);
  float a = fabsf(x);
  if (a != a) return (uint8_t)(s | 0x7Fu);  // NaN (either format)
  if (a > fmax) a = fmax;
  if (a < ldexpf(1.0f, 1 - bias)) {
    // Subnormal: adding c = 2^(24 - bias - man), whose float32 ulp is the format's subnormal
    // step, rounds a to a multiple of that step (nearest even); the bits above c count steps.
    const float c = ldexpf(1.0f, 24 - bias - man);
    volatile float f = a + c;  // volatile: (a + c) - c must not be folded
    uint32_t fu, cu;
    const float ff = f;
    memcpy(&fu, &ff, sizeof fu);
    memcpy(&cu, &c, sizeof cu);
    return (uint8_t)(s | (fu - cu));
  }
  memcpy(&u, &a, sizeof u);
  const int sh = 23 - man;
  u += (1u << (sh - 1)) - 1u + ((u >> sh) & 1u);  // nearest even at the format's last bit
  return (uint8_t)(s | ((u >> sh) - ((uint32_t)(127 - bias) << man)));
}

// e4m3 as the half (S, 0, E, M) in two operations: the byte sign-extended to 16 bits and
// shifted left by 7 puts E, M in bits 7-13 and copies of S in bits 14 and 15; bit 14 (the
// half's top exponent bit) is then cleared.
#define RT_E4M3_HALF_MASK 0xBF80
#if defined(RT_SIMD) && VW == 16
// 16 bytes -> 16 floats, each byte the high byte of a half (e5m2), or the half (S, 0, E, M).
static inline vf vload_e5m2(const uint8_t* p) {
  const __m256i w = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i*)p));
  return _mm512_cvtph_ps(_mm256_slli_epi16(w, 8));
}
static inline vf vload_e4m3(const uint8_t* p) {
  const __m256i w = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)p));
  const __m256i mask = _mm256_set1_epi16((short)RT_E4M3_HALF_MASK);
  return _mm512_cvtph_ps(_mm256_and_si256(_mm256_slli_epi16(w, 7), mask));
}
#elif defined(RT_SIMD)
static inline vf vload_e5m2(const uint8_t* p) {
  const __m128i w = _mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i*)p));
  return _mm256_cvtph_ps(_mm_slli_epi16(w, 8));
}
static inline vf vload_e4m3(const uint8_t* p) {
  const __m128i w = _mm_cvtepi8_epi16(_mm_loadl_epi64((const __m128i*)p));
  const __m128i mask = _mm_set1_epi16((short)RT_E4M3_HALF_MASK);
  return _mm256_cvtph_ps(_mm_and_si128(_mm_slli_epi16(w, 7), mask));
}
#elif defined(RT_VEC)
static inline vf vload_e5m2(const uint8_t* p) {
  return (vf){rt_e5m2_raw(p[0]), rt_e5m2_raw(p[1]), rt_e5m2_raw(p[2]), rt_e5m2_raw(p[3])};
}
static inline vf vload_e4m3(const uint8_t* p) {
  return (vf){rt_e4m3_raw(p[0]), rt_e4m3_raw(p[1]), rt_e4m3_raw(p[2]), rt_e4m3_raw(p[3])};
}
#endif
