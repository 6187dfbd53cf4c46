// bench_train_step: images/s of one training step of the nets of models/ (SmallCNN, AirNet, cct7,
// cct4) per precision, device and batch, timed by crosscheck/torch_train_step.py's rule so the two
// compare side by side, with peak memory by category and the saved-activation peak (the fp16/bf16
// <= 0.55x fp32 target); --checkpoint-activations off,on also times each row with every top-level
// block checkpointed and prints what that saves and costs; --memory-format contiguous,channels_last
// times each row in both memory formats.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <utility>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "backends/kernels.h"
#include "framework/demi/demi.h"
#include "models/models.h"
#include "train/components.h"

namespace {

using namespace demi;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

struct Config {
  int steps = 12;  // torch_train_step.py's default
  int warmup = 3;
  std::vector<int64_t> batches{128, 256};
  std::vector<std::string> nets{"SmallCNN", "AirNet"};
  std::vector<std::string> precisions{"fp32", "bf16", "fp16"};
  std::vector<std::string> devices{"cpu", "cuda"};
  std::vector<std::string> checkpoint{"off"};  // "on": each top-level block checkpointed
  std::vector<std::string> memory_formats{"contiguous"};  // "channels_last": weights and images NHWC
  int threads = 2;
  std::string json_path;
  bool profile = false;
  bool cuda_graph = false;  // CUDA rows: the step captured once and replayed (TrainStep's cuda_graph)
};

struct Row {
  std::string net, device, precision;
  int64_t batch = 0;
  bool checkpointed = false;
  bool channels_last = false;
  bool graphed = false;
  double median_s = 0, min_s = 0, max_s = 0;
  int64_t saved_peak = 0;  // autograd's saved tensors, each storage once
  MemoryReport memory;     // peaks by category over the timed steps
  std::vector<profiler::Entry> profile;
  double profile_step_ms = 0;
};

DType dtype_of(const std::string& precision) {
  if (precision == "bf16") return DType::BF16;
  if (precision == "fp16") return DType::F16;
  return DType::F32;
}

// statistics.median: the mean of the two middle values for an even count, as torch_train_step.py.
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double mb(int64_t bytes) { return static_cast<double>(bytes) / 1e6; }

// Why `kind` cannot be benchmarked here, or "" when it can.
std::string unusable_reason(const std::string& kind) {
  if (kind == "cpu") return "";
  if (backend::cuda_device_count() > 0) return "";
  try {
    backend::kernels_for(Device::cuda(0));
  } catch (const Error& e) {
    return e.what();
  }
  return "no CUDA device was found";
}

// One (net, device, precision, batch): warm-up steps, then `steps` timed ones.
Row run_row(const Config& c, const std::string& net, const Device& device, const std::string& precision,
            int64_t batch, bool checkpointed, bool channels_last) {
  Row row;
  row.net = net;
  row.checkpointed = checkpointed;
  row.channels_last = channels_last;
  row.graphed = c.cuda_graph && device.is_cuda();
  row.device = device.str();
  row.precision = precision;
  row.batch = batch;
  // tf32: fp32 with TF32 tensor cores for the CUDA GEMMs and convolutions (PyTorch's default for
  // cuDNN convolutions, torch.backends.cudnn.allow_tf32 = True); restored when the row ends.
  struct Tf32Switch {
    bool previous = backend::allow_tf32();
    explicit Tf32Switch(bool on) { backend::set_allow_tf32(on); }
    ~Tf32Switch() { backend::set_allow_tf32(previous); }
  } tf32(precision == "tf32");
  empty_cache(device);  // so "reserved" is this row's, not what earlier rows left cached
  Generator gen(0);
  std::shared_ptr<nn::Module> model = models::make_model(net, gen);
  model->to(device);
  model->train();
  if (checkpointed) train::checkpoint_top_level_blocks(*model, train::from_name<train::ModelKind>(net));
  const MemoryFormat format = channels_last ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous;
  model->to(format);
  optim::SGD::Options o;
  o.lr = 0.01;
  o.momentum = 0.9;
  o.nesterov = true;
  o.weight_decay = 5e-4;
  optim::SGD opt(model->parameters(), o);
  amp::GradScaler::Options so;
  so.enabled = precision == "fp16";  // bf16 has fp32's range and needs no scaling
  amp::GradScaler scaler(so);
  training::TrainStep::Options to;
  to.device = device.kind();
  to.dtype = dtype_of(precision);
  to.cuda_graph = row.graphed;
  to.graph_warmup_steps = 2;  // captured at the third step: within the default 3 warm-up steps
  training::TrainStep train_step(opt, scaler, to);

  const Tensor x = randn({batch, 3, 32, 32}, gen, DType::F32, device).contiguous(format);
  std::mt19937_64 rng(0);
  std::uniform_int_distribution<int64_t> label(0, 9);
  std::vector<int64_t> labels(static_cast<size_t>(batch));
  for (int64_t& l : labels) l = label(rng);
  const Tensor y = tensor(labels, {batch}, DType::I64, device);

  backend::Kernels& device_kernels = backend::kernels_for(device);
  // One step, waited for: on CUDA the host would otherwise return before the kernels finish.
  auto step = [&] {
    const auto start = Clock::now();
    train_step.run({x, y}, [&](int, const std::vector<Tensor>& b) { return cross_entropy((*model)(b[0]), b[1]); });
    device_kernels.synchronize();
    return std::chrono::duration<double>(Clock::now() - start).count();
  };

  for (int i = 0; i < c.warmup; ++i) step();
  reset_peak_memory_stats(device);
  autograd::reset_saved_tensor_peak();
  std::vector<double> times;
  for (int i = 0; i < c.steps; ++i) times.push_back(step());
  row.median_s = median(times);
  row.min_s = *std::min_element(times.begin(), times.end());
  row.max_s = *std::max_element(times.begin(), times.end());
  row.saved_peak = autograd::saved_tensor_stats().peak_bytes;
  row.memory = memory_report(device);

  if (c.profile && !row.graphed) {  // one more step, not among the timed ones: profiling adds its own cost
    profiler::ProfileScope scope;
    row.profile_step_ms = 1000.0 * step();
    row.profile = profiler::entries();
  }
  return row;
}

constexpr MemoryCategory kColumns[] = {MemoryCategory::Parameters, MemoryCategory::Gradients,
                                       MemoryCategory::OptimizerState, MemoryCategory::MasterWeights,
                                       MemoryCategory::Other};

void print_header() {
  std::cout << std::left << std::setw(12) << "net" << std::setw(7) << "device" << std::setw(6) << "prec" << std::right
            << std::setw(6) << "batch" << std::setw(10) << "img/s" << std::setw(10) << "ms/step" << std::setw(9)
            << "min" << std::setw(9) << "max" << " |" << std::setw(9) << "saved" << std::setw(7) << "x fp32"
            << " |" << std::setw(8) << "params" << std::setw(8) << "grads" << std::setw(8) << "optim" << std::setw(8)
            << "master" << std::setw(9) << "other" << std::setw(9) << "alloc" << std::setw(9) << "reserved" << "\n";
  std::cout << std::setw(75) << "" << "   peak MB; saved: autograd's saved tensors (x fp32: over the fp32 row"
            << " above); alloc, reserved: the allocator's; +ckpt: activations checkpointed; +cl: channels_last;"
            << " +graph: CUDA graph\n";
}

// `fp32_saved`: the saved-activation peak of the fp32 row with the same net, device and batch (0: none).
void print_row(const Row& r, int64_t fp32_saved) {
  std::ostringstream ratio;
  if (fp32_saved > 0) ratio << std::fixed << std::setprecision(2) << static_cast<double>(r.saved_peak) / fp32_saved;
  const std::string name =
      r.net + (r.checkpointed ? "+ckpt" : "") + (r.channels_last ? "+cl" : "") + (r.graphed ? "+graph" : "");
  std::cout << std::left << std::setw(12) << name << std::setw(7) << r.device << std::setw(6) << r.precision
            << std::right << std::setw(6) << r.batch << std::fixed << std::setprecision(1) << std::setw(10)
            << static_cast<double>(r.batch) / r.median_s << std::setw(10) << 1e3 * r.median_s << std::setw(9)
            << 1e3 * r.min_s << std::setw(9) << 1e3 * r.max_s << " |" << std::setw(9) << mb(r.saved_peak)
            << std::setw(7) << ratio.str() << " |";
  for (MemoryCategory cat : kColumns) std::cout << std::setw(cat == MemoryCategory::Other ? 9 : 8) << mb(r.memory[cat].peak);
  std::cout << std::setw(9) << mb(r.memory.allocator.peak_allocated_bytes) << std::setw(9)
            << mb(r.memory.allocator.reserved_bytes) << std::endl;
  if (!r.profile.empty()) {
    std::cout << "  profile of one step (" << std::setprecision(1) << r.profile_step_ms << " ms):\n";
    std::istringstream table(profiler::format_table(r.profile, r.profile_step_ms));
    for (std::string line; std::getline(table, line);) std::cout << "    " << line << "\n";
    std::cout << std::endl;
  }
}

// The checkpointed row against the plain one: what checkpointing saves and what it costs.
void print_checkpoint_ratios(const Row& plain, const Row& checkpointed) {
  std::cout << std::fixed << std::setprecision(2) << "  checkpointed / plain: saved activations "
            << static_cast<double>(checkpointed.saved_peak) / static_cast<double>(plain.saved_peak) << "x, step time "
            << checkpointed.median_s / plain.median_s << "x" << std::endl;
}

json row_json(const Row& r) {
  json memory = json::object();
  for (int i = 0; i < kNumMemoryCategories; ++i) {
    memory[memory_category_name(static_cast<MemoryCategory>(i))] = r.memory.by_category[i].peak;
  }
  json j = {{"net", r.net},
            {"device", r.device},
            {"precision", r.precision},
            {"batch", r.batch},
            {"checkpoint_activations", r.checkpointed},
            {"channels_last", r.channels_last},
            {"cuda_graph", r.graphed},
            {"median_s", r.median_s},
            {"min_s", r.min_s},
            {"max_s", r.max_s},
            {"img_s", static_cast<double>(r.batch) / r.median_s},
            {"ms_step", 1e3 * r.median_s},
            {"saved_activation_peak_bytes", r.saved_peak},
            {"peak_memory_bytes", memory},
            {"allocator_peak_bytes", r.memory.allocator.peak_allocated_bytes},
            {"allocator_reserved_bytes", r.memory.allocator.reserved_bytes}};
  if (!r.profile.empty()) {
    json rows = json::array();
    for (const profiler::Entry& e : r.profile) {
      rows.push_back({{"name", e.name}, {"pass", profiler::pass_name(e.pass)}, {"calls", e.calls},
                      {"total_ms", e.total_ms}});
    }
    j["profile"] = {{"step_ms", r.profile_step_ms}, {"entries", rows}};
  }
  return j;
}

// The rows of one (net, device, precision, batch, format): one per --checkpoint-activations mode,
// printed and added to `out` as they finish; returns how many failed.
int run_rows(const Config& c, const std::string& net, const Device& device, const std::string& precision, int64_t batch,
             bool channels_last, std::map<std::pair<bool, bool>, int64_t>& fp32_saved, json& out) {
  int failures = 0;
  std::map<bool, Row> rows;
  for (const std::string& mode : c.checkpoint) {
    const bool checkpointed = mode == "on";
    int64_t& fp32 = fp32_saved[{checkpointed, channels_last}];
    try {
      const Row& r = rows[checkpointed] = run_row(c, net, device, precision, batch, checkpointed, channels_last);
      if (precision == "fp32") fp32 = r.saved_peak;
      print_row(r, precision == "fp32" ? 0 : fp32);
      out["rows"].push_back(row_json(r));
    } catch (const Error& e) {  // e.g. an op the CUDA backend lacks: say so, go on
      std::cout << net << " " << device << " " << precision << " batch " << batch << ": failed: " << e.what()
                << std::endl;
      out["rows"].push_back({{"net", net}, {"device", device.str()}, {"precision", precision}, {"batch", batch},
                             {"checkpoint_activations", checkpointed}, {"channels_last", channels_last},
                             {"error", e.what()}});
      ++failures;
    }
  }
  if (rows.size() == 2) print_checkpoint_ratios(rows[false], rows[true]);
  return failures;
}

int run(const Config& c) {
  set_num_threads(c.threads);
  std::cout << "bench_train_step: " << c.warmup << " warm-up steps, median of " << c.steps << " timed steps; "
            << get_num_threads() << " CPU threads, CPU kernels " << backend::cpu_isa() << " (bf16 route "
            << backend::cpu_bf16_route() << "; " << backend::cpu_tuning() << ")\n";
  json out = {{"framework", "demi"}, {"threads", c.threads}, {"cpu_isa", backend::cpu_isa()},
              {"cpu_bf16_route", backend::cpu_bf16_route()}, {"steps", c.steps},
              {"warmup", c.warmup},
              {"rows", json::array()}, {"skipped", json::array()}, {"params", json::object()}};
  for (const std::string& net : c.nets) {
    int64_t params = 0;
    for (const Tensor& p : models::make_model(net)->parameters()) params += p.numel();
    out["params"][net] = params;
    std::cout << net << ": " << params << " parameters\n";
  }
  std::vector<Device> devices;
  for (const std::string& kind : c.devices) {
    const std::string reason = unusable_reason(kind);
    if (reason.empty()) {
      devices.push_back(kind == "cpu" ? Device::cpu() : Device::cuda(0));
    } else {
      std::cout << kind << ": skipped: " << reason << "\n";
      out["skipped"].push_back({{"device", kind}, {"reason", reason}});
    }
  }
  std::cout << "\n";
  if (!devices.empty()) print_header();
  int failures = 0;
  for (const Device& device : devices) {
    for (const std::string& net : c.nets) {
      for (int64_t batch : c.batches) {
        // fp32's saved-activation peak, by checkpointing and format, for the half rows' ratio
        std::map<std::pair<bool, bool>, int64_t> fp32_saved;
        for (const std::string& precision : c.precisions) {
          for (const std::string& format : c.memory_formats) {
            failures += run_rows(c, net, device, precision, batch, format == "channels_last", fp32_saved, out);
          }
        }
      }
    }
  }
  if (!c.json_path.empty()) {
    std::ofstream f(c.json_path);
    f << out.dump(1) << "\n";
    if (!f.good()) {
      std::cerr << "bench_train_step: cannot write " << c.json_path << "\n";
      return 1;
    }
  }
  return failures ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  Config c;
  CLI::App app{"bench_train_step: images/s of one training step (zero_grad, forward, cross-entropy, backward, "
               "Nesterov SGD) per net, precision, device and batch"};
  app.get_formatter()->column_width(30);
  app.add_option("--steps", c.steps, "timed steps (the median is reported)")->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--warmup", c.warmup, "untimed steps first")->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--batches", c.batches, "batch sizes, comma-separated")->delimiter(',')
      ->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--nets", c.nets, "SmallCNN, AirNet, cct7, cct4 (models/README.md)")->delimiter(',')
      ->check(CLI::IsMember({"SmallCNN", "AirNet", "cct7", "cct4"}))->capture_default_str();
  app.add_option("--precisions", c.precisions,
                 "fp32, bf16 (autocast), fp16 (autocast + dynamic GradScaler), tf32 (fp32 with TF32 on CUDA)")
      ->delimiter(',')->check(CLI::IsMember({"fp32", "bf16", "fp16", "tf32"}))->capture_default_str();
  app.add_option("--devices", c.devices, "cpu, cuda (a device that is absent is skipped with the reason)")
      ->delimiter(',')->check(CLI::IsMember({"cpu", "cuda"}))->capture_default_str();
  app.add_option("--threads", c.threads, "CPU threads")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--json", c.json_path, "also write the results to this JSON file");
  app.add_option("--checkpoint-activations", c.checkpoint, "off, on (each top-level block checkpointed, as "
                 "train_cifar --checkpoint-activations); off,on times both and prints their ratios")
      ->delimiter(',')->check(CLI::IsMember({"off", "on"}))->capture_default_str();
  app.add_option("--memory-format", c.memory_formats, "contiguous, channels_last (weights and images NHWC, as "
                 "train_cifar --channels-last); contiguous,channels_last times both")
      ->delimiter(',')->check(CLI::IsMember({"contiguous", "channels_last"}))->capture_default_str();
  app.add_flag("--profile", c.profile, "after each row, profile one more step: time per op and backward node");
  app.add_flag("--cuda-graph", c.cuda_graph, "CUDA rows: capture the step as a CUDA graph at the third warm-up step "
               "and time its replays (train_cifar --cuda-graph; not profiled: a replay is one launch)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    std::cerr << "bench_train_step: " << e.what() << " (see --help)\n";
    return 2;
  }
  try {
    return run(c);
  } catch (const Error& e) {
    std::cerr << "bench_train_step: " << e.what() << "\n";
    return 1;
  }
}
