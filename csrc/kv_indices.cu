// build_kv_indices: flatten each request's row of req_to_token into FlashInfer's kv_indices.
// With pages of P slots, request b's n_b = ceil(seq_lens[b] / P) pages land at
// out[kv_indptr[b] : kv_indptr[b] + n_b]: page j is req_to_token[row_b, j * P] / P (the pool
// keeps token t at offset t % P of its page). P == 1 copies slots. One block per request.
#include "common.cuh"
#include "launchers.h"

namespace radixrt {

__global__ void build_kv_indices_kernel(const int32_t* __restrict__ req_to_token,
                                        int64_t r2t_stride,
                                        const int64_t* __restrict__ req_pool_indices,
                                        const int64_t* __restrict__ seq_lens,
                                        const int32_t* __restrict__ kv_indptr,
                                        int32_t page_size, int32_t* __restrict__ out) {
  const int64_t b = blockIdx.x;
  const int32_t* src = req_to_token + req_pool_indices[b] * r2t_stride;
  int32_t* dst = out + kv_indptr[b];
  const int64_t pages = (seq_lens[b] + page_size - 1) / page_size;
  if (page_size == 1) {
    for (int64_t j = threadIdx.x; j < pages; j += blockDim.x) dst[j] = src[j];
  } else {
    for (int64_t j = threadIdx.x; j < pages; j += blockDim.x)
      dst[j] = src[j * page_size] / page_size;
  }
}

cudaError_t launch_build_kv_indices(const int32_t* req_to_token, int64_t r2t_stride,
                                    const int64_t* req_pool_indices, const int64_t* seq_lens,
                                    const int32_t* kv_indptr, int32_t page_size, int32_t* out,
                                    int64_t batch_size, cudaStream_t stream) {
  if (batch_size == 0) return cudaSuccess;
  build_kv_indices_kernel<<<static_cast<unsigned>(batch_size), 256, 0, stream>>>(
      req_to_token, r2t_stride, req_pool_indices, seq_lens, kv_indptr, page_size, out);
  return cudaGetLastError();
}

}  // namespace radixrt
