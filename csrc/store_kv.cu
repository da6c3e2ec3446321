// store_kv: scatter the new tokens' K and V rows into the token-slot KV pool at out_loc.
// A row is copied as raw bytes with the widest access (up to 16 bytes) that every pointer,
// stride and row size allows, so one kernel serves every dtype.
#include "common.cuh"
#include "launchers.h"

namespace radixrt {

template <typename V>
__global__ void store_kv_kernel(const char* __restrict__ k, const char* __restrict__ v,
                                char* __restrict__ k_cache, char* __restrict__ v_cache,
                                const int64_t* __restrict__ loc, int64_t row_bytes,
                                int64_t k_stride, int64_t v_stride, int64_t k_cache_stride,
                                int64_t v_cache_stride) {
  const int64_t t = blockIdx.x;
  const int64_t slot = loc[t];
  const V* ks = reinterpret_cast<const V*>(k + t * k_stride);
  const V* vs = reinterpret_cast<const V*>(v + t * v_stride);
  V* kd = reinterpret_cast<V*>(k_cache + slot * k_cache_stride);
  V* vd = reinterpret_cast<V*>(v_cache + slot * v_cache_stride);
  const int64_t n = row_bytes / static_cast<int64_t>(sizeof(V));
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    kd[i] = ks[i];
    vd[i] = vs[i];
  }
}

template <typename V>
static cudaError_t launch(const void* k, const void* v, void* k_cache, void* v_cache,
                          const int64_t* loc, int64_t num_tokens, int64_t row_bytes,
                          int64_t k_stride, int64_t v_stride, int64_t k_cache_stride,
                          int64_t v_cache_stride, cudaStream_t stream) {
  const int threads = threads_for(row_bytes / static_cast<int64_t>(sizeof(V)), 256);
  store_kv_kernel<V><<<static_cast<unsigned>(num_tokens), threads, 0, stream>>>(
      static_cast<const char*>(k), static_cast<const char*>(v), static_cast<char*>(k_cache),
      static_cast<char*>(v_cache), loc, row_bytes, k_stride, v_stride, k_cache_stride,
      v_cache_stride);
  return cudaGetLastError();
}

cudaError_t launch_store_kv(const void* k, const void* v, void* k_cache, void* v_cache,
                            const int64_t* loc, int64_t num_tokens, int64_t row_bytes,
                            int64_t k_stride, int64_t v_stride, int64_t k_cache_stride,
                            int64_t v_cache_stride, cudaStream_t stream) {
  if (num_tokens == 0 || row_bytes == 0) return cudaSuccess;
  const int align = common_alignment(
      {reinterpret_cast<uint64_t>(k), reinterpret_cast<uint64_t>(v),
       reinterpret_cast<uint64_t>(k_cache), reinterpret_cast<uint64_t>(v_cache),
       static_cast<uint64_t>(row_bytes), static_cast<uint64_t>(k_stride),
       static_cast<uint64_t>(v_stride), static_cast<uint64_t>(k_cache_stride),
       static_cast<uint64_t>(v_cache_stride)});
#define RADIXRT_STORE_KV(V)                                                                \
  return launch<V>(k, v, k_cache, v_cache, loc, num_tokens, row_bytes, k_stride, v_stride, \
                   k_cache_stride, v_cache_stride, stream)
  switch (align) {
    case 16: RADIXRT_STORE_KV(uint4);
    case 8: RADIXRT_STORE_KV(uint2);
    case 4: RADIXRT_STORE_KV(uint32_t);
    case 2: RADIXRT_STORE_KV(uint16_t);
    default: RADIXRT_STORE_KV(uint8_t);
  }
#undef RADIXRT_STORE_KV
}

}  // namespace radixrt
