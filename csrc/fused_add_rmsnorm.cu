// fused_add_rmsnorm: per row, residual += x, then x = rmsnorm(residual) * weight, in place.
// Rounds like the Hugging Face reference in the model dtype: the sum is rounded before it is
// squared, the normalised value is rounded before the weight multiplies it; sums in float32.
#include "common.cuh"
#include "launchers.h"

namespace radixrt {

template <typename T, int N>
__global__ void fused_add_rmsnorm_kernel(T* __restrict__ x, T* __restrict__ residual,
                                         const T* __restrict__ weight, int64_t hidden,
                                         int64_t x_stride, int64_t residual_stride, float eps) {
  using P = Pack<T, N>;
  P* xr = reinterpret_cast<P*>(x + blockIdx.x * x_stride);
  P* rr = reinterpret_cast<P*>(residual + blockIdx.x * residual_stride);
  const P* wr = reinterpret_cast<const P*>(weight);
  const int64_t num_packs = hidden / N;

  float sum_sq = 0.0f;
  for (int64_t i = threadIdx.x; i < num_packs; i += blockDim.x) {
    P a = xr[i];
    P b = rr[i];
    P s;
#pragma unroll
    for (int j = 0; j < N; ++j) {
      s.v[j] = from_float<T>(to_float(a.v[j]) + to_float(b.v[j]));
      const float f = to_float(s.v[j]);
      sum_sq += f * f;
    }
    rr[i] = s;  // read back below by this same thread only
  }
  __shared__ float inv_rms;
  const float total = block_reduce_sum(sum_sq);
  if (threadIdx.x == 0) inv_rms = rsqrtf(total / static_cast<float>(hidden) + eps);
  __syncthreads();

  const float inv = inv_rms;
  for (int64_t i = threadIdx.x; i < num_packs; i += blockDim.x) {
    P s = rr[i];
    P w = wr[i];
    P out;
#pragma unroll
    for (int j = 0; j < N; ++j) {
      const float normed = to_float(from_float<T>(to_float(s.v[j]) * inv));
      out.v[j] = from_float<T>(normed * to_float(w.v[j]));
    }
    xr[i] = out;
  }
}

template <typename T>
static cudaError_t launch_typed(void* x, void* residual, const void* weight, int64_t num_rows,
                                int64_t hidden, int64_t x_stride, int64_t residual_stride,
                                float eps, cudaStream_t stream) {
  constexpr int kVec = 16 / sizeof(T);
  const int align = common_alignment(
      {reinterpret_cast<uint64_t>(x), reinterpret_cast<uint64_t>(residual),
       reinterpret_cast<uint64_t>(weight), static_cast<uint64_t>(hidden * sizeof(T)),
       static_cast<uint64_t>(x_stride * sizeof(T)),
       static_cast<uint64_t>(residual_stride * sizeof(T))});
  T* xp = static_cast<T*>(x);
  T* rp = static_cast<T*>(residual);
  const T* wp = static_cast<const T*>(weight);
  const unsigned grid = static_cast<unsigned>(num_rows);
  if (align == 16) {
    const int threads = threads_for(hidden / kVec, 1024);
    fused_add_rmsnorm_kernel<T, kVec><<<grid, threads, 0, stream>>>(
        xp, rp, wp, hidden, x_stride, residual_stride, eps);
  } else {
    const int threads = threads_for(hidden, 1024);
    fused_add_rmsnorm_kernel<T, 1><<<grid, threads, 0, stream>>>(
        xp, rp, wp, hidden, x_stride, residual_stride, eps);
  }
  return cudaGetLastError();
}

cudaError_t launch_fused_add_rmsnorm(void* x, void* residual, const void* weight,
                                     int64_t num_rows, int64_t hidden, int64_t x_stride,
                                     int64_t residual_stride, float eps, DType dtype,
                                     cudaStream_t stream) {
  if (num_rows == 0) return cudaSuccess;
  switch (dtype) {
    case DType::kFloat32:
      return launch_typed<float>(x, residual, weight, num_rows, hidden, x_stride,
                                 residual_stride, eps, stream);
    case DType::kFloat16:
      return launch_typed<__half>(x, residual, weight, num_rows, hidden, x_stride,
                                  residual_stride, eps, stream);
    case DType::kBFloat16:
      return launch_typed<__nv_bfloat16>(x, residual, weight, num_rows, hidden, x_stride,
                                         residual_stride, eps, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace radixrt
