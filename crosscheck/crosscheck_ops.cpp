// crosscheck_ops: runs the ops of demi's functional API, and nn::MultiheadAttention and
// nn::TransformerEncoderLayer (module_cases.cpp), on seeded inputs (fp32, bf16, fp16, and fp32
// under bf16 / fp16 autocast), forward and backward, and writes the inputs, the upstream gradient,
// the outputs and the input gradients to one safetensors file (and, in mode "optim", the
// trajectories of SGD and AdamW, with and without OneCycle, and global-norm clipping; in the modes
// models_*, a training step of each net of models/) whose metadata lists the cases.
// crosscheck/compare.py runs the same cases in PyTorch (in the same dtype, and in float64 as the
// reference) and reports where demi computes something else, or less accurately.
// scripts/crosscheck-pytorch builds and runs both.
//
// Usage: crosscheck_ops [--device cpu|cuda] OUT.safetensors
// On cuda the inputs are drawn on the CPU (the same bits) and moved; compare.py's PyTorch runs on
// the CPU either way, so a CUDA run holds demi's CUDA kernels against PyTorch's CPU ones.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backends/kernels.h"
#include "crosscheck/cases.h"
#include "framework/demi/demi.h"
#include "models/models.h"

namespace demi {
namespace {

using namespace crosscheck;  // the case types and their constructors (cases.h)

Device g_device = Device::cpu();  // where the ops run (--device)

// Values on which vectorised math, masks and rounding go wrong: signed zeros, infinities, NaN,
// fp32 and half subnormals, the edges of exp's range, the limits of fp16 and of fp32.
const std::vector<float> kSpecials = {
    0.0f, -0.0f,   INFINITY, -INFINITY, NAN,    1e-40f, -1e-40f, 1e-45f, 6e-8f, -6e-8f, 1e-5f,  1e30f,  -1e30f,
    88.8f, -88.8f, -104.0f,  65504.0f,  7e4f,   -7e4f,  0.5f,    -0.5f,  1.0f,  -1.0f,  3e38f,  2.0f,   -3.0f,
    1e-3f, -1e-3f, 11.1f,    -11.1f,    100.0f, -100.0f};

Tensor draw_on_cpu(const Input& in, DType dtype, Generator& gen) {
  const DType t = in.fp32 ? DType::F32 : dtype;
  const int64_t n = shape_numel(in.shape);
  switch (in.draw) {
    case Draw::Normal: return (in.scale == 1.0 ? randn(in.shape, gen) : randn(in.shape, gen) * in.scale).to(t);
    case Draw::Positive: return exp(randn(in.shape, gen) * 0.5).to(t);
    case Draw::AwayFromZero: {
      std::vector<float> v = randn(in.shape, gen).to_vector<float>();
      for (float& e : v) e = e >= 0 ? e + 0.5f : e - 0.5f;
      return tensor(v, in.shape, t);
    }
    case Draw::Special:
    case Draw::SpecialShifted: {  // the specials over and over: vector bodies and scalar tails
      const size_t shift = in.draw == Draw::SpecialShifted ? 7 : 0;
      std::vector<float> v(static_cast<size_t>(n));
      for (size_t i = 0; i < v.size(); ++i) v[i] = kSpecials[(i + shift + i / kSpecials.size()) % kSpecials.size()];
      return tensor(v, in.shape, t);
    }
    case Draw::Ties: {  // 0, 1 or 2: equal values in every window and row
      std::vector<float> v = rand(in.shape, gen).to_vector<float>();
      for (float& e : v) e = std::floor(e * 3.0f);
      return tensor(v, in.shape, t);
    }
    case Draw::Labels: {
      const std::vector<float> u = rand(in.shape, gen).to_vector<float>();
      std::vector<int64_t> v(u.size());
      for (size_t i = 0; i < u.size(); ++i) v[i] = std::min<int64_t>(in.classes - 1, static_cast<int64_t>(u[i] * in.classes));
      return tensor(v, in.shape);
    }
    case Draw::DropoutKeep: {
      Generator keep(kDropoutSeed);
      return (dropout(ones(in.shape), kDropoutP, true, keep) != 0.0).to(t);
    }
    case Draw::Mask: {
      const std::vector<float> u = rand(in.shape, gen).to_vector<float>();
      const size_t row = static_cast<size_t>(in.shape.back());
      std::vector<float> v(u.size());
      for (size_t i = 0; i < u.size(); ++i) v[i] = i % row != 0 && u[i] >= 0.5f ? 1.0f : 0.0f;
      return tensor(v, in.shape, DType::U8);
    }
    case Draw::LargeMean:  // N(1e4, 1), or N(100, 1) in half types: their spacing at 1e4 is 8 or 64
      return (randn(in.shape, gen) + (is_half(t) ? 100.0 : 1e4)).to(t);
  }
  return Tensor();
}

Tensor draw(const Input& in, DType dtype, Generator& gen) { return draw_on_cpu(in, dtype, gen).to(g_device); }

// Optimizers and schedules (fp32 only): a parameter stepped kSteps times on given gradients; the
// outputs are the parameter after each step. Inputs: the parameter, then one gradient per step.
constexpr int kSteps = 6;

std::vector<Tensor> trajectory(const std::vector<Tensor>& in, const std::function<std::unique_ptr<optim::Optimizer>(Tensor&)>& make,
                               bool one_cycle = false) {
  Tensor p = in[0].clone().requires_grad_();
  std::unique_ptr<optim::Optimizer> opt = make(p);
  std::unique_ptr<optim::OneCycle> schedule = one_cycle ? std::make_unique<optim::OneCycle>(*opt, kSteps) : nullptr;
  std::vector<Tensor> out;
  for (int s = 0; s < kSteps; ++s) {
    p.set_grad(in[1 + s].clone());
    opt->step();
    if (schedule) schedule->step();
    out.push_back(p.detach().clone());
  }
  return out;
}

std::vector<Case> optim_cases() {
  std::vector<Case> c;
  std::vector<Input> in = {no_grad(normal({37}))};
  for (int s = 0; s < kSteps; ++s) in.push_back(no_grad(normal({37})));
  struct Sgd {
    std::string name;
    double momentum, dampening, weight_decay;
    bool nesterov, one_cycle;
  };
  for (const Sgd& v : std::vector<Sgd>{{"sgd_plain", 0, 0, 0, false, false},
                                       {"sgd_momentum", 0.9, 0, 0, false, false},
                                       {"sgd_momentum_dampening_decay", 0.9, 0.1, 5e-4, false, false},
                                       {"sgd_nesterov_decay", 0.9, 0, 5e-4, true, false},
                                       {"sgd_nesterov_one_cycle", 0.9, 0, 5e-4, true, true}}) {
    const json params = {{"lr", 0.1}, {"momentum", v.momentum}, {"dampening", v.dampening},
                         {"weight_decay", v.weight_decay}, {"nesterov", v.nesterov}, {"one_cycle", v.one_cycle}};
    c.push_back({v.name, "sgd", params, in, [v](const std::vector<Tensor>& t) {
                   return trajectory(t, [v](Tensor& p) {
                     optim::SGD::Options o;
                     o.lr = 0.1, o.momentum = v.momentum, o.dampening = v.dampening, o.weight_decay = v.weight_decay;
                     o.nesterov = v.nesterov;
                     return std::make_unique<optim::SGD>(std::vector<Tensor>{p}, o);
                   }, v.one_cycle);
                 }, false});
  }
  for (const double decay : {0.0, 1e-2}) {
    const json params = {{"lr", 1e-2}, {"weight_decay", decay}, {"one_cycle", false}};
    c.push_back({decay == 0.0 ? "adamw_no_decay" : "adamw", "adamw", params, in, [decay](const std::vector<Tensor>& t) {
                   return trajectory(t, [decay](Tensor& p) {
                     optim::AdamW::Options o;
                     o.lr = 1e-2, o.weight_decay = decay;
                     return std::make_unique<optim::AdamW>(std::vector<Tensor>{p}, o);
                   });
                 }, false});
  }
  c.push_back({"adamw_one_cycle", "adamw", {{"lr", 1e-2}, {"weight_decay", 1e-2}, {"one_cycle", true}}, in,
               [](const std::vector<Tensor>& t) {
                 return trajectory(t, [](Tensor& p) { return std::make_unique<optim::AdamW>(std::vector<Tensor>{p}, 1e-2); }, true);
               }, false});
  // Muon on a matrix (torch.optim.Muon's defaults, Nesterov, decoupled decay): 2-D, wide and tall.
  for (const Shape& shape : {Shape{12, 20}, Shape{20, 12}}) {
    std::vector<Input> mat = {no_grad(normal(shape))};
    for (int s = 0; s < kSteps; ++s) mat.push_back(no_grad(normal(shape)));
    c.push_back({"muon_" + std::to_string(shape[0]) + "x" + std::to_string(shape[1]), "muon", {{"lr", 2e-2}, {"one_cycle", false}},
                 mat, [](const std::vector<Tensor>& t) {
                   return trajectory(t, [](Tensor& p) {
                     optim::Muon::Options o;
                     o.lr = 2e-2;
                     return std::make_unique<optim::Muon>(std::vector<Tensor>{p}, o);
                   });
                 }, false});
  }
  // Clipping by the global norm over two gradients: the norm, then the clipped gradients; the last
  // with inf and NaN among them (an intended difference: demi leaves them, docs/pytorch.md).
  struct Clip {
    std::string name;
    double max_norm;
    Input first;
  };
  for (const Clip& v : std::vector<Clip>{{"clip_grad_norm", 1.0, no_grad(normal({37}))},
                                         {"clip_grad_norm_no_clip", 100.0, no_grad(normal({37}))},
                                         {"clip_grad_norm_non_finite", 1.0, no_grad(special({37}))}}) {
    const double max_norm = v.max_norm;
    c.push_back({v.name, "clip_grad_norm", {{"max_norm", max_norm}},
                 {v.first, no_grad(normal({5, 7}))}, [max_norm](const std::vector<Tensor>& t) {
                   Tensor a = zeros_like(t[0]).requires_grad_(), b = zeros_like(t[1]).requires_grad_();
                   a.set_grad(t[0].clone()), b.set_grad(t[1].clone());
                   const Tensor norm = nn::clip_grad_norm_({a, b}, max_norm);
                   return std::vector<Tensor>{norm, a.grad(), b.grad()};
                 }, false});
  }
  // GradScaler over eight fp16 steps: loss = sum(w16 * x16) * m_k in fp32; m_k = 1 and 2 make
  // the scaled gradient overflow fp16, so those steps are skipped and the scale backs off; three
  // clean steps in a row grow it again. Outputs: w after each step, then the scale after each.
  const std::vector<double> mults = {1e-3, 1.0, 1e-3, 1e-3, 1e-3, 2.0, 1e-3, 1e-3};
  std::vector<Input> amp_in = {no_grad(normal({5}))};
  for (size_t s = 0; s < mults.size(); ++s) amp_in.push_back(no_grad(normal({5})));
  c.push_back({"grad_scaler_fp16", "grad_scaler", {{"mults", mults}, {"growth_interval", 3}, {"lr", 0.1}}, amp_in,
               [mults](const std::vector<Tensor>& t) {
                 Tensor w = t[0].clone().requires_grad_();
                 optim::SGD opt({w}, 0.1);
                 amp::GradScaler::Options so;
                 so.growth_interval = 3;
                 amp::GradScaler scaler(so);
                 std::vector<Tensor> ws, scales;
                 for (size_t s = 0; s < mults.size(); ++s) {
                   opt.zero_grad();
                   const Tensor loss = sum(w.to(DType::F16) * t[1 + s].to(DType::F16)).to(DType::F32) * mults[s];
                   scaler.scale(loss).backward();
                   scaler.step(opt);
                   scaler.update();
                   ws.push_back(w.detach().clone());
                   scales.push_back(full({}, scaler.get_scale()));
                 }
                 ws.insert(ws.end(), scales.begin(), scales.end());
                 return ws;
               }, false});
  return c;
}

// The cases run on fp32 inputs under autocast: the output's dtype follows demi's policy, to be held
// against torch.autocast("cpu", dtype=...).
std::vector<Case> autocast_cases() {
  std::vector<Case> all = dtype_cases(), keep;
  const std::vector<std::string> ops = {"add", "mul", "exp", "log", "sqrt", "pow", "relu", "gelu", "sum", "mean",
                                        "matmul", "linear", "conv2d", "max_pool2d", "avg_pool2d", "global_avg_pool2d",
                                        "batch_norm", "softmax", "log_softmax", "cross_entropy",
                                        "scaled_dot_product_attention", "layer_norm", "multihead_attention",
                                        "transformer_encoder_layer"};
  for (Case& c : all) {
    if (c.name.find("specials") != std::string::npos) continue;
    if (std::find(ops.begin(), ops.end(), c.op) != ops.end()) keep.push_back(std::move(c));
  }
  return keep;
}

// A case's seed: FNV-1a of its name, so that adding a case changes no other case's inputs, and
// every mode draws the same values (rounded to its dtype).
uint64_t seed_of(const std::string& name) {
  uint64_t h = 14695981039346656037ull;
  for (const char ch : name) h = (h ^ static_cast<unsigned char>(ch)) * 1099511628211ull;
  return h;
}

// One training step's forward and backward of a whole net of models/, to be held against its
// PyTorch twin (crosscheck/torch_nets.py) with the same weights: the inputs are the images, the
// labels and the model's state_dict (parameters, then buffers, in its order); the outputs the
// loss, the logits, the buffers after the step's forward (running statistics) and the logits in
// eval mode; the gradients those of the images and every parameter.
// Modes: models_fp32, models_autocast_bf16, models_autocast_fp16, and models_bf16, models_fp16:
// half parameters (Module::to, BatchNorm's kept fp32) and half images, no autocast.
void run_model_case(const std::string& net, const std::string& mode, std::optional<DType> autocast, DType params_dtype,
                    StateDict& out, json& manifest, int& failures) {
  const std::string key = mode + "/" + net;
  Generator gen(seed_of(net));
  std::shared_ptr<nn::Module> model = models::make_model(net, gen);
  model->to(params_dtype).to(g_device);
  Tensor x = draw(normal({8, 3, 32, 32}), params_dtype, gen);
  const Tensor targets = draw(labels({8}, 10), DType::F32, gen);
  std::vector<std::string> params;
  for (const auto& [name, t] : model->named_parameters()) params.push_back(name);
  const StateDict state = model->state_dict();
  json names = json::array(), inputs = json::array({{{"grad", true}}, {{"grad", false}}});
  std::vector<std::pair<std::string, Tensor>> buffers;
  out.emplace(key + "/in0", x.clone());
  out.emplace(key + "/in1", targets.clone());
  int i = 2;
  for (const auto& [name, t] : state) {
    const bool param = std::find(params.begin(), params.end(), name) != params.end();
    if (!param) buffers.emplace_back(name, t);
    names.push_back(name);
    inputs.push_back({{"grad", param}});
    out.emplace(key + "/in" + std::to_string(i++), t.detach().clone());
  }
  json entry = {{"key", key}, {"op", "model"}, {"mode", mode}, {"inputs", inputs},
                {"params", {{"model", net}, {"names", names}}}};
  try {
    x.requires_grad_();
    Tensor loss, logits;
    {
      std::optional<amp::AutocastGuard> guard;
      if (autocast) guard.emplace(g_device.kind(), *autocast);
      logits = (*model)(x);
      loss = cross_entropy(logits, targets);
    }
    std::vector<Tensor> y = {loss.detach().clone(), logits.detach().clone()};
    for (const auto& [name, t] : buffers) y.push_back(t.detach().clone());
    // Scaled by 1024, as a GradScaler scales the loss, so that fp16's gradients do not flush to zero.
    const Tensor gy = (randn(loss.shape(), gen) * 1024.0).to(loss.dtype()).to(g_device);
    out.emplace(key + "/gy", gy);
    loss.backward(gy);
    model->eval();
    {
      NoGradGuard no_grad;
      std::optional<amp::AutocastGuard> guard;
      if (autocast) guard.emplace(g_device.kind(), *autocast);
      y.push_back((*model)(x.detach()));
    }
    for (size_t k = 0; k < y.size(); ++k) out.emplace(key + "/out" + std::to_string(k), y[k]);
    entry["outputs"] = y.size();
    out.emplace(key + "/grad0", x.grad());
    i = 2;
    for (const auto& [name, t] : state) {
      if (inputs[i]["grad"] && t.grad().defined()) out.emplace(key + "/grad" + std::to_string(i), t.grad());
      ++i;
    }
  } catch (const std::exception& e) {
    entry["error"] = e.what();
    ++failures;
  }
  manifest.push_back(entry);
}

int run(const std::string& path) {
  StateDict out;
  json manifest = json::array();
  int failures = 0;
  struct Mode {
    std::string name;  // fp32, bf16, fp16, autocast_bf16, autocast_fp16, ..._half_inputs
    DType inputs;
    bool autocast;
    DType autocast_dtype;
  };
  const std::vector<Mode> modes = {{"optim", DType::F32, false, DType::F32},
                                   {"fp32", DType::F32, false, DType::F32},
                                   {"bf16", DType::BF16, false, DType::F32},
                                   {"fp16", DType::F16, false, DType::F32},
                                   {"autocast_bf16", DType::F32, true, DType::BF16},
                                   {"autocast_fp16", DType::F32, true, DType::F16},
                                   // half inputs inside an autocast region (a half activation
                                   // reaching softmax or a sum): demi's policy is PyTorch's CUDA one
                                   {"autocast_bf16_half_inputs", DType::BF16, true, DType::BF16},
                                   {"autocast_fp16_half_inputs", DType::F16, true, DType::F16}};
  for (const Mode& mode : modes) {
    const std::vector<Case> cases = mode.name == "optim" ? optim_cases() : mode.autocast ? autocast_cases() : dtype_cases();
    for (const Case& c : cases) {
      const std::string key = mode.name + "/" + c.name;
      Generator gen(seed_of(c.name));
      std::vector<Tensor> in;
      json entry = {{"key", key}, {"op", c.op}, {"params", c.params}, {"mode", mode.name}};
      json inputs = json::array();
      for (size_t i = 0; i < c.inputs.size(); ++i) {
        Tensor t = draw(c.inputs[i], mode.inputs, gen);
        out.emplace(key + "/in" + std::to_string(i), t.clone());
        const bool grad = c.backward && c.inputs[i].grad;
        if (grad) t.requires_grad_();
        in.push_back(t);
        inputs.push_back({{"grad", grad}});
      }
      entry["inputs"] = inputs;
      try {
        std::vector<Tensor> y;
        {
          std::optional<amp::AutocastGuard> guard;
          if (mode.autocast) guard.emplace(g_device.kind(), mode.autocast_dtype);
          y = c.fn(in);
        }
        for (size_t i = 0; i < y.size(); ++i) out.emplace(key + "/out" + std::to_string(i), y[i].detach().clone());
        entry["outputs"] = y.size();
        if (c.backward) {
          const Tensor gy = randn(y[0].shape(), gen).to(y[0].dtype()).to(g_device);
          out.emplace(key + "/gy", gy);
          y[0].backward(gy);
          for (size_t i = 0; i < in.size(); ++i) {
            if (!inputs[i]["grad"]) continue;
            const Tensor g = in[i].grad();
            if (g.defined()) out.emplace(key + "/grad" + std::to_string(i), g);
            else inputs[i]["grad_missing"] = true;
          }
          entry["inputs"] = inputs;
        }
      } catch (const std::exception& e) {  // an error is a result too: compare.py reports it
        entry["error"] = e.what();
        ++failures;
      }
      manifest.push_back(entry);
    }
  }
  struct ModelMode {
    std::string name;
    std::optional<DType> autocast;
    DType params;
  };
  const std::vector<ModelMode> model_modes = {{"models_fp32", std::nullopt, DType::F32},
                                              {"models_autocast_bf16", DType::BF16, DType::F32},
                                              {"models_autocast_fp16", DType::F16, DType::F32},
                                              {"models_bf16", std::nullopt, DType::BF16},
                                              {"models_fp16", std::nullopt, DType::F16}};
  for (const ModelMode& m : model_modes) {
    for (const std::string net : {"SmallCNN", "AirNet", "cct4", "cct7"}) {
      run_model_case(net, m.name, m.autocast, m.params, out, manifest, failures);
    }
  }
  save_safetensors(path, out, {{"cases", manifest.dump()}});
  const std::string where =
      g_device.is_cpu()
          ? std::string("the CPU (") + backend::cpu_isa() + " kernels, bf16 route " + backend::cpu_bf16_route() + ")"
          : "CUDA";
  std::printf("crosscheck_ops: %zu cases on %s (%d raised an error) -> %s\n", manifest.size(), where.c_str(), failures,
              path.c_str());
  return 0;
}

}  // namespace
}  // namespace demi

int main(int argc, char** argv) {
  const std::string device = argc == 4 && std::string(argv[1]) == "--device" ? argv[2] : "cpu";
  if (!(argc == 2 || (argc == 4 && std::string(argv[1]) == "--device" && (device == "cpu" || device == "cuda")))) {
    std::fprintf(stderr, "usage: crosscheck_ops [--device cpu|cuda] OUT.safetensors\n");
    return 2;
  }
  try {
    if (device == "cuda") demi::g_device = demi::Device::cuda();
    return demi::run(argv[argc - 1]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "crosscheck_ops: %s\n", e.what());
    return 1;
  }
}
