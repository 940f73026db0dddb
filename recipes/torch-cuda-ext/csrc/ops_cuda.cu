// CUDA kernels of ibtorch_ext's operators (ops.cpp has the schemas and the
// CPU kernels).  Compiled only when the build has CUDA (WITH_CUDA=ON).
#include <torch/library.h>
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>

namespace ibtorch_ext {

__global__ void scaled_add_kernel(const float* a, const float* b, float alpha, float* out, int64_t n) {
  int64_t i = blockIdx.x * (int64_t) blockDim.x + threadIdx.x;
  if (i < n)
    out[i] = a[i] + alpha * b[i];
}

// One block per row: the row maximum, then the sum of exponentials, each
// reduced in shared memory (blockDim.x a power of two).
__global__ void row_softmax_kernel(const float* x, float* out, int64_t cols) {
  extern __shared__ float red[];
  const float* in = x + blockIdx.x * cols;
  float* o = out + blockIdx.x * cols;
  float m = -INFINITY;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
    m = fmaxf(m, in[c]);
  red[threadIdx.x] = m;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s)
      red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + s]);
    __syncthreads();
  }
  m = red[0];
  __syncthreads();
  float sum = 0.f;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    float e = expf(in[c] - m);
    o[c] = e;
    sum += e;
  }
  red[threadIdx.x] = sum;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s)
      red[threadIdx.x] += red[threadIdx.x + s];
    __syncthreads();
  }
  sum = red[0];
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
    o[c] /= sum;
}

at::Tensor scaled_add_cuda(const at::Tensor& a, const at::Tensor& b, double alpha) {
  TORCH_CHECK(a.sizes() == b.sizes(), "scaled_add: shapes differ: ", a.sizes(), " and ", b.sizes());
  TORCH_CHECK(a.scalar_type() == at::kFloat && b.scalar_type() == at::kFloat,
              "scaled_add: float32 tensors only");
  TORCH_CHECK(b.device() == a.device(), "scaled_add: tensors on different devices");
  const c10::cuda::CUDAGuard guard(a.device());
  at::Tensor ac = a.contiguous(), bc = b.contiguous();
  at::Tensor out = at::empty_like(ac);
  const int64_t n = ac.numel();
  if (n > 0) {
    const int threads = 256;
    const int64_t blocks = (n + threads - 1) / threads;
    scaled_add_kernel<<<static_cast<unsigned>(blocks), threads, 0, at::cuda::getCurrentCUDAStream()>>>(
        ac.data_ptr<float>(), bc.data_ptr<float>(), static_cast<float>(alpha), out.data_ptr<float>(), n);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  return out;
}

at::Tensor row_softmax_cuda(const at::Tensor& x) {
  TORCH_CHECK(x.dim() == 2, "row_softmax: a 2-D tensor expected, got ", x.dim(), " dimensions");
  TORCH_CHECK(x.scalar_type() == at::kFloat, "row_softmax: float32 tensors only");
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor xc = x.contiguous();
  at::Tensor out = at::empty_like(xc);
  if (xc.numel() > 0) {
    const int threads = 256;
    row_softmax_kernel<<<static_cast<unsigned>(xc.size(0)), threads, threads * sizeof(float), at::cuda::getCurrentCUDAStream()>>>(
        xc.data_ptr<float>(), out.data_ptr<float>(), xc.size(1));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  return out;
}

}  // namespace ibtorch_ext

TORCH_LIBRARY_IMPL(ibtorch_ext, CUDA, m) {
  m.impl("scaled_add", &ibtorch_ext::scaled_add_cuda);
  m.impl("row_softmax", &ibtorch_ext::row_softmax_cuda);
}
