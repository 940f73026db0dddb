// ibtorch_ext: two small operators registered with the PyTorch dispatcher
// (TORCH_LIBRARY), with CPU kernels here and CUDA kernels in ops_cuda.cu
// (compiled only with WITH_CUDA).
//
//   ibtorch_ext::scaled_add(Tensor a, Tensor b, float alpha) -> Tensor
//       a + alpha * b, elementwise (same shape, float32)
//   ibtorch_ext::row_softmax(Tensor x) -> Tensor
//       softmax over the last dimension of a 2-D float32 tensor, computed
//       with the row maximum subtracted first
#include <torch/library.h>
#include <ATen/ATen.h>

#include <cmath>

namespace ibtorch_ext {

at::Tensor scaled_add_cpu(const at::Tensor& a, const at::Tensor& b, double alpha) {
  TORCH_CHECK(a.sizes() == b.sizes(), "scaled_add: shapes differ: ", a.sizes(), " and ", b.sizes());
  TORCH_CHECK(a.scalar_type() == at::kFloat && b.scalar_type() == at::kFloat,
              "scaled_add: float32 tensors only");
  TORCH_CHECK(a.device().is_cpu() && b.device().is_cpu(), "scaled_add: CPU tensors expected");
  at::Tensor ac = a.contiguous(), bc = b.contiguous();
  at::Tensor out = at::empty_like(ac);
  const float* pa = ac.data_ptr<float>();
  const float* pb = bc.data_ptr<float>();
  float* po = out.data_ptr<float>();
  const float al = static_cast<float>(alpha);
  for (int64_t i = 0, n = ac.numel(); i < n; i++)
    po[i] = pa[i] + al * pb[i];
  return out;
}

at::Tensor row_softmax_cpu(const at::Tensor& x) {
  TORCH_CHECK(x.dim() == 2, "row_softmax: a 2-D tensor expected, got ", x.dim(), " dimensions");
  TORCH_CHECK(x.scalar_type() == at::kFloat, "row_softmax: float32 tensors only");
  TORCH_CHECK(x.device().is_cpu(), "row_softmax: a CPU tensor expected");
  at::Tensor xc = x.contiguous();
  at::Tensor out = at::empty_like(xc);
  const int64_t rows = xc.size(0), cols = xc.size(1);
  const float* px = xc.data_ptr<float>();
  float* po = out.data_ptr<float>();
  for (int64_t r = 0; r < rows; r++) {
    const float* in = px + r * cols;
    float* o = po + r * cols;
    float m = -INFINITY;
    for (int64_t c = 0; c < cols; c++)
      m = std::max(m, in[c]);
    double sum = 0;
    for (int64_t c = 0; c < cols; c++) {
      o[c] = std::exp(in[c] - m);
      sum += o[c];
    }
    for (int64_t c = 0; c < cols; c++)
      o[c] = static_cast<float>(o[c] / sum);
  }
  return out;
}

}  // namespace ibtorch_ext

TORCH_LIBRARY(ibtorch_ext, m) {
  m.def("scaled_add(Tensor a, Tensor b, float alpha) -> Tensor");
  m.def("row_softmax(Tensor x) -> Tensor");
}

TORCH_LIBRARY_IMPL(ibtorch_ext, CPU, m) {
  m.impl("scaled_add", &ibtorch_ext::scaled_add_cpu);
  m.impl("row_softmax", &ibtorch_ext::row_softmax_cpu);
}
