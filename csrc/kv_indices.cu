// build_kv_indices: flatten each request's row of req_to_token into FlashInfer's kv_indices.
// Request b's slots land at out[kv_indptr[b] : kv_indptr[b] + seq_lens[b]]; one block each.
#include "common.cuh"
#include "launchers.h"

namespace radixrt {

__global__ void build_kv_indices_kernel(const int32_t* __restrict__ req_to_token,
                                        int64_t r2t_stride,
                                        const int64_t* __restrict__ req_pool_indices,
                                        const int64_t* __restrict__ seq_lens,
                                        const int32_t* __restrict__ kv_indptr,
                                        int32_t* __restrict__ out) {
  const int64_t b = blockIdx.x;
  const int32_t* src = req_to_token + req_pool_indices[b] * r2t_stride;
  int32_t* dst = out + kv_indptr[b];
  const int64_t len = seq_lens[b];
  for (int64_t j = threadIdx.x; j < len; j += blockDim.x) dst[j] = src[j];
}

cudaError_t launch_build_kv_indices(const int32_t* req_to_token, int64_t r2t_stride,
                                    const int64_t* req_pool_indices, const int64_t* seq_lens,
                                    const int32_t* kv_indptr, int32_t* out, int64_t batch_size,
                                    cudaStream_t stream) {
  if (batch_size == 0) return cudaSuccess;
  build_kv_indices_kernel<<<static_cast<unsigned>(batch_size), 256, 0, stream>>>(
      req_to_token, r2t_stride, req_pool_indices, seq_lens, kv_indptr, out);
  return cudaGetLastError();
}

}  // namespace radixrt
