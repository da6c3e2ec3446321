// rotary: in-place rotate-half (neox) rotary embedding on q and k of a packed batch.
// out[j] = x[j] cos[j] - x[j+D/2] sin[j];  out[j+D/2] = x[j+D/2] cos[j+D/2] + x[j] sin[j+D/2],
// computed in float32 from (max_pos, D) float32 cos/sin caches, rounded once to the dtype.
#include "common.cuh"
#include "launchers.h"

namespace radixrt {

template <typename T>
__global__ void rotary_kernel(T* __restrict__ q, T* __restrict__ k,
                              const float* __restrict__ cos_cache,
                              const float* __restrict__ sin_cache,
                              const int64_t* __restrict__ positions, int64_t num_q_heads,
                              int64_t num_k_heads, int64_t head_dim, int64_t q_stride,
                              int64_t k_stride, int64_t cache_stride) {
  const int64_t t = blockIdx.x;
  const int64_t half = head_dim / 2;
  const float* c = cos_cache + positions[t] * cache_stride;
  const float* s = sin_cache + positions[t] * cache_stride;
  const int64_t num_q_pairs = num_q_heads * half;
  const int64_t num_pairs = num_q_pairs + num_k_heads * half;
  for (int64_t i = threadIdx.x; i < num_pairs; i += blockDim.x) {
    const bool is_q = i < num_q_pairs;
    const int64_t pair = is_q ? i : i - num_q_pairs;
    const int64_t head = pair / half;
    const int64_t j = pair % half;
    T* base = is_q ? q + t * q_stride + head * head_dim : k + t * k_stride + head * head_dim;
    const float x1 = to_float(base[j]);
    const float x2 = to_float(base[j + half]);
    base[j] = from_float<T>(x1 * c[j] - x2 * s[j]);
    base[j + half] = from_float<T>(x2 * c[j + half] + x1 * s[j + half]);
  }
}

template <typename T>
static cudaError_t launch_typed(void* q, void* k, const float* cos_cache,
                                const float* sin_cache, const int64_t* positions,
                                int64_t num_tokens, int64_t num_q_heads, int64_t num_k_heads,
                                int64_t head_dim, int64_t q_stride, int64_t k_stride,
                                int64_t cache_stride, cudaStream_t stream) {
  const int threads = threads_for((num_q_heads + num_k_heads) * (head_dim / 2), 512);
  rotary_kernel<T><<<static_cast<unsigned>(num_tokens), threads, 0, stream>>>(
      static_cast<T*>(q), static_cast<T*>(k), cos_cache, sin_cache, positions, num_q_heads,
      num_k_heads, head_dim, q_stride, k_stride, cache_stride);
  return cudaGetLastError();
}

cudaError_t launch_rotary(void* q, void* k, const float* cos_cache, const float* sin_cache,
                          const int64_t* positions, int64_t num_tokens, int64_t num_q_heads,
                          int64_t num_k_heads, int64_t head_dim, int64_t q_stride,
                          int64_t k_stride, int64_t cache_stride, DType dtype,
                          cudaStream_t stream) {
  if (num_tokens == 0) return cudaSuccess;
#define RADIXRT_ROTARY(T)                                                                     \
  return launch_typed<T>(q, k, cos_cache, sin_cache, positions, num_tokens, num_q_heads,     \
                         num_k_heads, head_dim, q_stride, k_stride, cache_stride, stream)
  switch (dtype) {
    case DType::kFloat32: RADIXRT_ROTARY(float);
    case DType::kFloat16: RADIXRT_ROTARY(__half);
    case DType::kBFloat16: RADIXRT_ROTARY(__nv_bfloat16);
  }
#undef RADIXRT_ROTARY
  return cudaErrorInvalidValue;
}

}  // namespace radixrt
