// Torch bindings for radixrt's CUDA kernels: check tensors, then call the torch-free launchers.
// Built by radixrt/model/cuda/build.py with torch.utils.cpp_extension.load; see launchers.h.
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/extension.h>

#include "launchers.h"

namespace {

using radixrt::DType;

DType to_dtype(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kFloat: return DType::kFloat32;
    case at::kHalf: return DType::kFloat16;
    case at::kBFloat16: return DType::kBFloat16;
    default: TORCH_CHECK(false, "radixrt kernels support float32, float16, bfloat16; got ",
                         t.scalar_type());
  }
  return DType::kFloat32;
}

void check_cuda(const at::Tensor& t, const char* name) {
  TORCH_CHECK(t.is_cuda(), name, " must be a CUDA tensor");
}

void check_launch(cudaError_t err, const char* what) {
  TORCH_CHECK(err == cudaSuccess, what, " launch failed: ", cudaGetErrorString(err));
}

// Rows of `t` (first dim) must be contiguous inside: t.view(rows, -1) without a copy.
void check_rows(const at::Tensor& t, const char* name) {
  TORCH_CHECK(t.dim() >= 1, name, " needs at least one dimension");
  int64_t expected = 1;
  for (int64_t d = t.dim() - 1; d >= 1; --d) {
    TORCH_CHECK(t.size(d) == 1 || t.stride(d) == expected, name,
                " must be contiguous within each row");
    expected *= t.size(d);
  }
}

// Elements in one row t[i] (product of every size but the first); safe for zero rows.
int64_t row_numel(const at::Tensor& t) {
  int64_t n = 1;
  for (int64_t d = 1; d < t.dim(); ++d) n *= t.size(d);
  return n;
}

}  // namespace

void store_kv(at::Tensor k_cache, at::Tensor v_cache, at::Tensor loc, at::Tensor k,
              at::Tensor v) {
  for (auto* t : {&k_cache, &v_cache, &loc, &k, &v}) check_cuda(*t, "store_kv argument");
  TORCH_CHECK(loc.scalar_type() == at::kLong && loc.dim() == 1, "loc must be (T,) int64");
  TORCH_CHECK(k.scalar_type() == k_cache.scalar_type() && v.scalar_type() == v_cache.scalar_type(),
              "store_kv: k/v dtype must match the cache dtype");
  TORCH_CHECK(k.size(0) == loc.size(0) && v.size(0) == loc.size(0), "store_kv: T mismatch");
  for (auto* t : {&k_cache, &v_cache, &k, &v}) check_rows(*t, "store_kv tensor");
  const int64_t row_bytes = row_numel(k_cache) * k_cache.element_size();
  TORCH_CHECK(row_numel(k) * k.element_size() == row_bytes &&
                  row_numel(v) * v.element_size() == row_bytes &&
                  row_numel(v_cache) * v_cache.element_size() == row_bytes,
              "store_kv: row sizes differ");
  const c10::cuda::CUDAGuard guard(k_cache.device());
  const int64_t es = k_cache.element_size();
  check_launch(radixrt::launch_store_kv(
                   k.data_ptr(), v.data_ptr(), k_cache.data_ptr(), v_cache.data_ptr(),
                   loc.data_ptr<int64_t>(), loc.size(0), row_bytes, k.stride(0) * es,
                   v.stride(0) * es, k_cache.stride(0) * es, v_cache.stride(0) * es,
                   c10::cuda::getCurrentCUDAStream().stream()),
               "store_kv");
}

void fused_add_rmsnorm(at::Tensor x, at::Tensor residual, at::Tensor weight, double eps) {
  for (auto* t : {&x, &residual, &weight}) check_cuda(*t, "fused_add_rmsnorm argument");
  TORCH_CHECK(x.dim() == 2 && residual.dim() == 2, "x and residual must be (T, hidden)");
  TORCH_CHECK(x.sizes() == residual.sizes(), "x and residual shapes differ");
  TORCH_CHECK(weight.dim() == 1 && weight.size(0) == x.size(1), "weight must be (hidden,)");
  TORCH_CHECK(x.scalar_type() == residual.scalar_type() && x.scalar_type() == weight.scalar_type(),
              "x, residual and weight must share a dtype");
  TORCH_CHECK(x.stride(1) == 1 && residual.stride(1) == 1 && weight.stride(0) == 1,
              "fused_add_rmsnorm needs contiguous rows");
  const c10::cuda::CUDAGuard guard(x.device());
  check_launch(radixrt::launch_fused_add_rmsnorm(
                   x.data_ptr(), residual.data_ptr(), weight.data_ptr(), x.size(0), x.size(1),
                   x.stride(0), residual.stride(0), static_cast<float>(eps), to_dtype(x),
                   c10::cuda::getCurrentCUDAStream().stream()),
               "fused_add_rmsnorm");
}

void apply_rotary(at::Tensor q, at::Tensor k, at::Tensor cos_cache, at::Tensor sin_cache,
                  at::Tensor positions, int64_t head_dim) {
  for (auto* t : {&q, &k, &cos_cache, &sin_cache, &positions}) check_cuda(*t, "rotary argument");
  TORCH_CHECK(head_dim > 0 && head_dim % 2 == 0, "head_dim must be even");
  TORCH_CHECK(q.scalar_type() == k.scalar_type(), "q and k must share a dtype");
  TORCH_CHECK(cos_cache.scalar_type() == at::kFloat && sin_cache.scalar_type() == at::kFloat,
              "cos/sin caches must be float32");
  TORCH_CHECK(cos_cache.dim() == 2 && cos_cache.size(1) == head_dim && cos_cache.stride(1) == 1 &&
                  sin_cache.sizes() == cos_cache.sizes() &&
                  sin_cache.strides() == cos_cache.strides(),
              "cos/sin caches must be (max_pos, head_dim) with contiguous rows");
  TORCH_CHECK(positions.scalar_type() == at::kLong && positions.dim() == 1 &&
                  positions.size(0) == q.size(0) && positions.size(0) == k.size(0),
              "positions must be (T,) int64");
  check_rows(q, "q");
  check_rows(k, "k");
  TORCH_CHECK(row_numel(q) % head_dim == 0 && row_numel(k) % head_dim == 0,
              "q/k rows must hold whole heads");
  const c10::cuda::CUDAGuard guard(q.device());
  check_launch(radixrt::launch_rotary(
                   q.data_ptr(), k.data_ptr(), cos_cache.data_ptr<float>(),
                   sin_cache.data_ptr<float>(), positions.data_ptr<int64_t>(), q.size(0),
                   row_numel(q) / head_dim, row_numel(k) / head_dim, head_dim, q.stride(0),
                   k.stride(0), cos_cache.stride(0), to_dtype(q),
                   c10::cuda::getCurrentCUDAStream().stream()),
               "rotary");
}

void build_kv_indices(at::Tensor req_to_token, at::Tensor req_pool_indices, at::Tensor seq_lens,
                      at::Tensor kv_indptr, int64_t page_size, at::Tensor out) {
  for (auto* t : {&req_to_token, &req_pool_indices, &seq_lens, &kv_indptr, &out})
    check_cuda(*t, "build_kv_indices argument");
  TORCH_CHECK(req_to_token.scalar_type() == at::kInt && req_to_token.dim() == 2 &&
                  req_to_token.stride(1) == 1,
              "req_to_token must be (max_reqs, max_ctx) int32 with contiguous rows");
  TORCH_CHECK(req_pool_indices.scalar_type() == at::kLong && seq_lens.scalar_type() == at::kLong,
              "req_pool_indices and seq_lens must be int64");
  TORCH_CHECK(kv_indptr.scalar_type() == at::kInt && out.scalar_type() == at::kInt,
              "kv_indptr and out must be int32");
  const int64_t batch = req_pool_indices.numel();
  TORCH_CHECK(seq_lens.numel() == batch && kv_indptr.numel() == batch + 1,
              "seq_lens (B,) and kv_indptr (B+1,) must match req_pool_indices (B,)");
  TORCH_CHECK(req_pool_indices.is_contiguous() && seq_lens.is_contiguous() &&
                  kv_indptr.is_contiguous() && out.is_contiguous(),
              "build_kv_indices needs contiguous index tensors");
  TORCH_CHECK(page_size >= 1 && page_size <= INT32_MAX, "page_size must be a positive int32");
  const c10::cuda::CUDAGuard guard(out.device());
  check_launch(radixrt::launch_build_kv_indices(
                   req_to_token.data_ptr<int32_t>(), req_to_token.stride(0),
                   req_pool_indices.data_ptr<int64_t>(), seq_lens.data_ptr<int64_t>(),
                   kv_indptr.data_ptr<int32_t>(), static_cast<int32_t>(page_size),
                   out.data_ptr<int32_t>(), batch,
                   c10::cuda::getCurrentCUDAStream().stream()),
               "build_kv_indices");
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "radixrt CUDA kernels (store_kv, fused_add_rmsnorm, rotary, kv_indices)";
  m.def("store_kv", &store_kv, "scatter K/V rows into the KV pool at loc");
  m.def("fused_add_rmsnorm", &fused_add_rmsnorm, "residual += x; x = rmsnorm(residual) * w");
  m.def("apply_rotary", &apply_rotary, "in-place neox rotary on q and k");
  m.def("build_kv_indices", &build_kv_indices,
        "flatten req_to_token rows into kv_indices (slots, or page ids with page_size > 1)");
}
