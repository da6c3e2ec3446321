// The KV pool's element type as the attention kernels read it (internal header): float32, or
// with RT_KV_BF16 defined bfloat16 (raw bits), widened to float32 in registers on every read
// (exact: the bits shifted up) and rounded to nearest even when a new K/V row is stored. The
// attention sources are compiled once per element type (the *_kvbf16.c files define
// RT_KV_BF16 and include them); KV_NAME gives the bfloat16 build's exported names a suffix.
#pragma once

#include <stdint.h>
#include <string.h>

#include "simd.h"

#if defined(RT_KV_BF16)
typedef uint16_t kv_t;
#define KV_NAME(f) f##_kvbf16
static inline float kv_get(const kv_t* p, int64_t j) { return rt_bf16_to_f32(p[j]); }
static inline void kv_store_row(kv_t* dst, const float* src, int64_t n) {
  for (int64_t j = 0; j < n; ++j) dst[j] = rt_round_bf16(src[j]);
}
// A row of n elements as float32: widened into buf (n floats), which is returned.
static inline const float* kv_row_f32(const kv_t* row, int64_t n, float* buf) {
  int64_t j = 0;
#if defined(RT_VEC)
  for (; j + VW <= n; j += VW) vstore(buf + j, vload_bf16(row + j));
#endif
  for (; j < n; ++j) buf[j] = rt_bf16_to_f32(row[j]);
  return buf;
}
#if defined(RT_VEC)
static inline vf vload_kv(const kv_t* p) { return vload_bf16(p); }
#endif
#else
typedef float kv_t;
#define KV_NAME(f) f
static inline float kv_get(const kv_t* p, int64_t j) { return p[j]; }
static inline void kv_store_row(kv_t* dst, const float* src, int64_t n) {
  memcpy(dst, src, sizeof(float) * (size_t)n);
}
static inline const float* kv_row_f32(const kv_t* row, int64_t n, float* buf) {
  (void)n, (void)buf;
  return row;  // float32 already: read in place
}
#if defined(RT_VEC)
static inline vf vload_kv(const kv_t* p) { return vload(p); }
#endif
#endif
