// nn::Embedding: a lookup table weight [num_embeddings, embedding_dim] indexed by int64 tensors of
// any shape, as torch.nn.Embedding (state_dict name `weight`, N(0, 1) initialisation).
#pragma once

#include <optional>

#include "framework/nn/module.h"
#include "framework/tensor/generator.h"

namespace demi::nn {

class Embedding : public Module {
 public:
  struct Options {
    int64_t num_embeddings = 0;
    int64_t embedding_dim = 0;
    // A row (negative counts from the end) that starts at zero and never gets a gradient, for the
    // padding token; options() gives it in [0, num_embeddings).
    std::optional<int64_t> padding_idx;
  };
  explicit Embedding(const Options& options, Generator& gen = default_generator());
  // libtorch's short form: Embedding(num_embeddings, embedding_dim), no padding row.
  explicit Embedding(int64_t num_embeddings, int64_t embedding_dim, Generator& gen = default_generator())
      : Embedding(Options{num_embeddings, embedding_dim, std::nullopt}, gen) {}
  // indices (int64, any shape) -> indices.shape + [embedding_dim].
  Tensor forward(const Tensor& indices) override;

  const Options& options() const { return options_; }
  Tensor& weight;

 private:
  Options options_;
};

}  // namespace demi::nn
