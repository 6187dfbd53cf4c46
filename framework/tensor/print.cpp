// operator<< for Tensor: values like PyTorch's repr (summarised with ... past 1000 elements),
// then shape, dtype and device.
#include <iomanip>
#include <sstream>

#include "framework/autograd/grad_mode.h"
#include "framework/tensor/tensor.h"

namespace demi {
namespace {

constexpr int64_t kSummariseAbove = 1000;
constexpr int64_t kEdgeItems = 3;

void print_values(std::ostream& out, const std::vector<double>& values, const Shape& shape, size_t dim,
                  int64_t offset, bool summarise, bool integral) {
  if (dim == shape.size()) {
    const double v = values[static_cast<size_t>(offset)];
    if (integral) out << static_cast<int64_t>(v);
    else out << v;
    return;
  }
  int64_t stride = 1;
  for (size_t d = dim + 1; d < shape.size(); ++d) stride *= shape[d];
  const int64_t n = shape[dim];
  out << "[";
  for (int64_t i = 0; i < n; ++i) {
    const char* separator = dim + 1 == shape.size() ? ", " : ",\n ";
    if (summarise && n > 2 * kEdgeItems && i == kEdgeItems) {
      out << separator << "...";  // the next element brings its own separator
      i = n - kEdgeItems - 1;
      continue;
    }
    if (i) out << separator;
    print_values(out, values, shape, dim + 1, offset + i * stride, summarise, integral);
  }
  out << "]";
}

}  // namespace

std::ostream& operator<<(std::ostream& out, const Tensor& t) {
  if (!t.defined()) return out << "Tensor(undefined)";
  NoGradGuard no_grad;
  const std::vector<double> values = t.to_vector<double>();
  std::ostringstream body;
  body << std::setprecision(5);
  print_values(body, values, t.shape(), 0, 0, t.numel() > kSummariseAbove, !is_floating(t.dtype()));
  out << "tensor(" << body.str() << ", shape=" << t.shape() << ", dtype=" << t.dtype()
      << ", device=" << t.device();
  if (t.requires_grad()) out << ", requires_grad";
  return out << ")";
}

}  // namespace demi
