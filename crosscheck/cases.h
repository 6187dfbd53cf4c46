// The case types crosscheck_ops writes and compare.py reads back: how an input is drawn, what a
// case runs, and the short constructors the case lists use.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "framework/demi/demi.h"

namespace demi::crosscheck {

using json = nlohmann::json;
using Fn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

// How an input's values are drawn: in fp32, then rounded to the case's dtype, so that both
// frameworks see the same values.
// Draw::Mask: a uint8 attention mask, 1 (blocked) or 0 at random, but 0 at the first entry of every
// row of the last dim, so that no query is left without a key however the masks combine.
enum class Draw { Normal, Positive, AwayFromZero, Special, SpecialShifted, Ties, Labels, DropoutKeep, LargeMean, Mask };

// Dropout's training rows: demi's mask for p = kDropoutP under Generator(kDropoutSeed), 1 where kept,
// is an input too (Draw::DropoutKeep), which PyTorch applies: its own RNG would draw another mask.
constexpr double kDropoutP = 0.3;
constexpr uint64_t kDropoutSeed = 11;

struct Input {
  Shape shape;
  Draw draw = Draw::Normal;
  bool grad = true;     // its gradient is compared
  bool fp32 = false;    // fp32 whatever the case's dtype (batch norm's parameters and statistics)
  int64_t classes = 0;  // Draw::Labels: values in [0, classes)
  double scale = 1.0;   // Draw::Normal: the values times scale (before the rounding to the dtype)
};

struct Case {
  std::string name;  // unique within a dtype
  std::string op;    // compare.py's key
  json params;       // the op's arguments, for compare.py
  std::vector<Input> inputs;
  Fn fn;  // outputs: the first is differentiated, the others (running statistics) only compared
  bool backward = true;
};


// Appends cases to a list: add(name, op, params, inputs, fn[, backward]).
struct CaseList {
  std::vector<Case>& cases;
  void operator()(std::string name, std::string op, json params, std::vector<Input> in, Fn fn,
                  bool backward = true) const {
    cases.push_back({std::move(name), std::move(op), std::move(params), std::move(in), std::move(fn), backward});
  }
};

inline Input normal(Shape s) { return {std::move(s)}; }
inline Input positive(Shape s) { return {std::move(s), Draw::Positive}; }
inline Input away(Shape s) { return {std::move(s), Draw::AwayFromZero}; }
inline Input special(Shape s, Draw d = Draw::Special) { return {std::move(s), d}; }
inline Input ties(Shape s) { return {std::move(s), Draw::Ties}; }
inline Input labels(Shape s, int64_t classes) { return {std::move(s), Draw::Labels, false, false, classes}; }
inline Input scaled(Shape s, double scale) {
  Input in{std::move(s)};
  in.scale = scale;
  return in;
}
inline Input mask(Shape s) { return {std::move(s), Draw::Mask, false}; }
inline Input fp32_param(Shape s) { return {std::move(s), Draw::Normal, true, true}; }
inline Input fp32_state(Shape s, Draw d) { return {std::move(s), d, false, true}; }
inline Input no_grad(Input in) {
  in.grad = false;
  return in;
}

inline Fn one(std::function<Tensor(const std::vector<Tensor>&)> f) {
  return [f](const std::vector<Tensor>& in) { return std::vector<Tensor>{f(in)}; };
}


// The cases run with inputs in fp32, bf16 and fp16 (dtype_cases.cpp).
std::vector<Case> dtype_cases();
// Among them, nn::MultiheadAttention and nn::TransformerEncoderLayer with torch's masks (module_cases.cpp).
void module_cases(const CaseList& add);

}  // namespace demi::crosscheck
