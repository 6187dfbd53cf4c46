// nn::Embedding: the weight, initialised as PyTorch does, plus a call to demi::embedding.
#include "framework/nn/embedding.h"

#include "framework/ops/ops.h"
#include "framework/tensor/factories.h"

namespace demi::nn {
namespace {

// The checked options, padding_idx counted from the front.
Embedding::Options checked(Embedding::Options o) {
  DEMI_CHECK(o.num_embeddings > 0 && o.embedding_dim > 0, "nn::Embedding: num_embeddings and embedding_dim must be "
             "positive, got ", o.num_embeddings, " and ", o.embedding_dim);
  if (o.padding_idx) {
    const int64_t p = *o.padding_idx, n = o.num_embeddings;
    DEMI_CHECK(p >= -n && p < n, "nn::Embedding: padding_idx ", p, " is out of range for ", n,
               " embeddings; it must be in [-", n, ", ", n, ")");
    if (p < 0) o.padding_idx = p + n;
  }
  return o;
}

// N(0, 1), the padding row zero: torch.nn.Embedding's reset_parameters.
Tensor initial_weight(const Embedding::Options& o, Generator& gen) {
  Tensor w = randn({o.num_embeddings, o.embedding_dim}, gen);
  if (o.padding_idx) w.select(0, *o.padding_idx).zero_();
  return w;
}

}  // namespace

Embedding::Embedding(const Options& o, Generator& gen)
    : weight(register_parameter("weight", initial_weight(checked(o), gen))), options_(checked(o)) {}

Tensor Embedding::forward(const Tensor& indices) { return embedding(weight, indices, options_.padding_idx); }

}  // namespace demi::nn
