// The KV pool's element type as the attention kernels read it (internal header): float32,
// bfloat16 (RT_KV_BF16, raw bits) or fp8 (RT_KV_E4M3 / RT_KV_E5M2, fp8.h), always widened to
// float32 in registers, arithmetic in float32. The attention sources are compiled once per
// element type (the *_kv*.c files define one of these and include them); KV_NAME gives each
// build's exported names its suffix (_kvbf16, _kve4m3, _kve5m2).
//
// A (slot, KV head) row is KV_ROW(d) elements: d values, and for fp8 then a float32 scale
// (4 bytes, unaligned-safe reads): value = raw x kv_scale(row). A row is stored from d floats
// with kv_store_row: bfloat16 rounded to nearest even; fp8 with scale amax / max finite (1 for
// an all-zero row), each x / scale rounded to nearest even and saturated (radixrt/cache/
// kv_layout.py writes the same bits). kv_get and vload_kv read raw values; the kernels
// multiply a dot product or a probability by the row's kv_scale (1.0f, folded away, for the
// unscaled types).
#pragma once

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "fp8.h"
#include "simd.h"

#if defined(RT_KV_E4M3) || defined(RT_KV_E5M2)
typedef uint8_t kv_t;
#define KV_SCALED 1
#define KV_ROW(d) ((d) + 4)
#if defined(RT_KV_E4M3)
#define KV_NAME(f) f##_kve4m3
#define KV_FMAX RT_E4M3_MAX
#define KV_RAW_UNIT 256.0f  // rt_e4m3_raw reads value / 256
static inline float kv_get(const kv_t* p, int64_t j) { return rt_e4m3_raw(p[j]); }
static inline uint8_t kv_round(float x) { return rt_fp8_round(x, 3, 7, RT_E4M3_MAX); }
#if defined(RT_VEC)
static inline vf vload_kv(const kv_t* p) { return vload_e4m3(p); }
#endif
#else
#define KV_NAME(f) f##_kve5m2
#define KV_FMAX RT_E5M2_MAX
#define KV_RAW_UNIT 1.0f
static inline float kv_get(const kv_t* p, int64_t j) { return rt_e5m2_raw(p[j]); }
static inline uint8_t kv_round(float x) { return rt_fp8_round(x, 2, 15, RT_E5M2_MAX); }
#if defined(RT_VEC)
static inline vf vload_kv(const kv_t* p) { return vload_e5m2(p); }
#endif
#endif
// The factor from a row's raw values to its values.
static inline float kv_scale(const kv_t* row, int64_t d) {
  float s;
  memcpy(&s, row + d, sizeof s);
  return s * KV_RAW_UNIT;
}
// hkv rows of d floats (src, contiguous) into hkv pool rows at dst.
static inline void kv_store_row(kv_t* dst, const float* src, int64_t hkv, int64_t d) {
  for (int64_t h = 0; h < hkv; ++h) {
    const float* x = src + h * d;
    kv_t* row = dst + h * KV_ROW(d);
    float amax = 0.0f;
    for (int64_t j = 0; j < d; ++j) {
      const float a = fabsf(x[j]);
      amax = a > amax || a != a ? a : amax;  // a NaN stays (and makes the scale NaN)
    }
    const float s = amax == 0.0f ? 1.0f : amax / KV_FMAX;
    for (int64_t j = 0; j < d; ++j) row[j] = kv_round(x[j] / s);
    memcpy(row + d, &s, sizeof s);
  }
}
#elif defined(RT_KV_BF16)
typedef uint16_t kv_t;
#define KV_SCALED 0
#define KV_ROW(d) (d)
#define KV_NAME(f) f##_kvbf16
static inline float kv_get(const kv_t* p, int64_t j) { return rt_bf16_to_f32(p[j]); }
static inline float kv_scale(const kv_t* row, int64_t d) { return (void)row, (void)d, 1.0f; }
static inline void kv_store_row(kv_t* dst, const float* src, int64_t hkv, int64_t d) {
  for (int64_t j = 0; j < hkv * d; ++j) dst[j] = rt_round_bf16(src[j]);
}
#if defined(RT_VEC)
static inline vf vload_kv(const kv_t* p) { return vload_bf16(p); }
#endif
#else
typedef float kv_t;
#define KV_SCALED 0
#define KV_ROW(d) (d)
#define KV_NAME(f) f
static inline float kv_get(const kv_t* p, int64_t j) { return p[j]; }
static inline float kv_scale(const kv_t* row, int64_t d) { return (void)row, (void)d, 1.0f; }
static inline void kv_store_row(kv_t* dst, const float* src, int64_t hkv, int64_t d) {
  memcpy(dst, src, sizeof(float) * (size_t)(hkv * d));
}
#if defined(RT_VEC)
static inline vf vload_kv(const kv_t* p) { return vload(p); }
#endif
#endif

// A row's d values as float32: float32 rows are read in place; others are widened (and
// scaled) into buf (d floats), which is returned.
static inline const float* kv_row_f32(const kv_t* row, int64_t d, float* buf) {
#if !defined(RT_KV_BF16) && !KV_SCALED
  (void)d, (void)buf;
  return row;
#else
  const float s = kv_scale(row, d);
  int64_t j = 0;
#if defined(RT_VEC)
  const vf sv = vset1(s);
  for (; j + VW <= d; j += VW) vstore(buf + j, vmul(sv, vload_kv(row + j)));
#endif
  for (; j < d; ++j) buf[j] = s * kv_get(row, j);
  return buf;
#endif
}
