// Host entry points of radixrt's CUDA kernels. Torch-free: raw pointers, sizes and a stream;
// bindings.cpp checks tensors and calls these. Each returns the launch's cudaError_t.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace radixrt {

enum class DType : int { kFloat32 = 0, kFloat16 = 1, kBFloat16 = 2 };

// k_cache[loc[t]] = k[t] and v_cache[loc[t]] = v[t] for t < num_tokens; a row is `row_bytes`
// bytes (num_kv_heads * head_dim * elem). Strides are in bytes between consecutive rows.
cudaError_t launch_store_kv(const void* k, const void* v, void* k_cache, void* v_cache,
                            const int64_t* loc, int64_t num_tokens, int64_t row_bytes,
                            int64_t k_stride, int64_t v_stride, int64_t k_cache_stride,
                            int64_t v_cache_stride, cudaStream_t stream);

// In place, per row: residual += x; x = rmsnorm(residual) * weight. x, residual (num_rows,
// hidden) with row strides in elements; weight (hidden,) of the same dtype.
cudaError_t launch_fused_add_rmsnorm(void* x, void* residual, const void* weight,
                                     int64_t num_rows, int64_t hidden, int64_t x_stride,
                                     int64_t residual_stride, float eps, DType dtype,
                                     cudaStream_t stream);

// In place rotate-half (neox) rotary on q (T, num_q_heads, head_dim) and k (T, num_k_heads,
// head_dim), rows `q_stride` / `k_stride` elements apart, heads contiguous. cos/sin caches
// (max_pos, head_dim) float32 with row stride `cache_stride`; positions (T,) int64.
cudaError_t launch_rotary(void* q, void* k, const float* cos_cache, const float* sin_cache,
                          const int64_t* positions, int64_t num_tokens, int64_t num_q_heads,
                          int64_t num_k_heads, int64_t head_dim, int64_t q_stride,
                          int64_t k_stride, int64_t cache_stride, DType dtype,
                          cudaStream_t stream);

// out[kv_indptr[b] + j] = req_to_token[req_pool_indices[b] * r2t_stride + j], j < seq_lens[b].
cudaError_t launch_build_kv_indices(const int32_t* req_to_token, int64_t r2t_stride,
                                    const int64_t* req_pool_indices, const int64_t* seq_lens,
                                    const int32_t* kv_indptr, int32_t page_size, int32_t* out,
                                    int64_t batch_size, cudaStream_t stream);

}  // namespace radixrt
