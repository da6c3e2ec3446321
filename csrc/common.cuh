// Shared device helpers for radixrt's CUDA kernels: dtype casts, 16-byte packs, block reduce.
// Torch-free: includes only the CUDA runtime headers, so nvcc compiles it in about a second.
// Casts go through the explicit intrinsics because torch builds with
// __CUDA_NO_HALF_CONVERSIONS__ / __CUDA_NO_BFLOAT16_CONVERSIONS__.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <initializer_list>

namespace radixrt {

template <typename T>
__device__ __forceinline__ float to_float(T x);
template <>
__device__ __forceinline__ float to_float<float>(float x) { return x; }
template <>
__device__ __forceinline__ float to_float<__half>(__half x) { return __half2float(x); }
template <>
__device__ __forceinline__ float to_float<__nv_bfloat16>(__nv_bfloat16 x) {
  return __bfloat162float(x);
}

template <typename T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) { return x; }
template <>
__device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

// N elements of T loaded and stored as one aligned access (16 bytes when N * sizeof(T) == 16).
template <typename T, int N>
struct alignas(sizeof(T) * N) Pack {
  T v[N];
};

// Largest power of two <= 16 that divides every value (byte offsets, strides, pointers).
inline int common_alignment(std::initializer_list<uint64_t> values) {
  int align = 16;
  for (uint64_t x : values) {
    while (align > 1 && (x % static_cast<uint64_t>(align)) != 0) align /= 2;
  }
  return align;
}

// Sum of `v` over the whole block; every thread gets the result. blockDim.x <= 1024.
__device__ __forceinline__ float block_reduce_sum(float v) {
  __shared__ float warp_sums[32];
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  const int num_warps = (blockDim.x + 31) / 32;
  v = (threadIdx.x < num_warps) ? warp_sums[threadIdx.x] : 0.0f;
  if (warp == 0) {
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
    if (lane == 0) warp_sums[0] = v;
  }
  __syncthreads();
  return warp_sums[0];
}

// Threads per block for `n` units of work: a multiple of 32, at least 32, at most `cap`.
inline int threads_for(int64_t n, int cap) {
  int64_t t = ((n + 31) / 32) * 32;
  if (t < 32) t = 32;
  return static_cast<int>(t > cap ? cap : t);
}

}  // namespace radixrt
