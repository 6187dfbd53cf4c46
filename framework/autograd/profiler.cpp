// The profiler's records: a per-thread nesting depth (only outermost spans record) and one
// process-wide table, summed by (name, pass), behind a mutex that is taken only while enabled.
#include "framework/autograd/profiler.h"

#include <algorithm>
#include <iomanip>
#include <map>
#include <mutex>
#include <sstream>
#include <utility>

#include "framework/tensor/tensor.h"

namespace demi::profiler {

namespace detail {
std::atomic<bool> g_enabled{false};
}

namespace {

thread_local int t_depth = 0;
thread_local bool t_in_backward = false;

struct Records {
  std::mutex mutex;
  // Keyed by the name's address: names are op and node names (string literals), so this avoids
  // building a string per record; entries() merges equal names that sit at different addresses.
  std::map<std::pair<const char*, Pass>, Entry> rows;
};
Records& records() {
  static auto* r = new Records();  // never destroyed: ops may run during static destruction
  return *r;
}

}  // namespace

const char* pass_name(Pass pass) {
  switch (pass) {
    case Pass::Forward: return "forward";
    case Pass::Backward: return "backward";
    case Pass::Region: return "region";
  }
  return "?";
}

void enable() { detail::g_enabled.store(true, std::memory_order_relaxed); }
void disable() { detail::g_enabled.store(false, std::memory_order_relaxed); }

void reset() {
  Records& r = records();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.rows.clear();
}

std::vector<Entry> entries() {
  std::map<std::pair<std::string, Pass>, Entry> merged;
  {
    Records& r = records();
    std::lock_guard<std::mutex> lock(r.mutex);
    for (const auto& [key, row] : r.rows) {
      Entry& e = merged[{row.name, row.pass}];
      e.name = row.name;
      e.pass = row.pass;
      e.calls += row.calls;
      e.total_ms += row.total_ms;
    }
  }
  std::vector<Entry> out;
  out.reserve(merged.size());
  for (auto& [key, e] : merged) out.push_back(std::move(e));
  std::stable_sort(out.begin(), out.end(), [](const Entry& a, const Entry& b) { return a.total_ms > b.total_ms; });
  return out;
}

std::string format_table(const std::vector<Entry>& entries, double step_ms) {
  std::ostringstream out;
  out << std::left << std::setw(28) << "name" << std::setw(10) << "pass" << std::right << std::setw(8) << "calls"
      << std::setw(12) << "total ms" << (step_ms > 0 ? "    % step" : "") << "\n";
  out << std::fixed;
  double covered = 0.0;
  auto row = [&](const std::string& name, const char* pass, int64_t calls, double ms) {
    out << std::left << std::setw(28) << name << std::setw(10) << pass << std::right << std::setw(8)
        << (calls > 0 ? std::to_string(calls) : std::string()) << std::setw(12) << std::setprecision(3) << ms;
    if (step_ms > 0) out << std::setw(9) << std::setprecision(1) << 100.0 * ms / step_ms << "%";
    out << "\n";
  };
  for (const Entry& e : entries) {
    row(e.name, pass_name(e.pass), e.calls, e.total_ms);
    covered += e.total_ms;
  }
  // What no op, node or region covers: optimizer and scaler kernels, zero_grad, graph bookkeeping.
  if (step_ms > 0) row("(outside ops and nodes)", "", 0, std::max(0.0, step_ms - covered));
  return out.str();
}

ProfileScope::ProfileScope() {
  reset();
  enable();
}
ProfileScope::~ProfileScope() { disable(); }

namespace detail {

void Span::start(const char* name, Pass pass) {
  active_ = true;
  outermost_ = t_depth++ == 0;
  if (!outermost_) return;
  name_ = name;
  pass_ = pass == Pass::Forward && t_in_backward ? Pass::Backward : pass;
  start_ = std::chrono::steady_clock::now();
}

void Span::stop() {
  --t_depth;
  if (!outermost_) return;
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_).count();
  Records& r = records();
  std::lock_guard<std::mutex> lock(r.mutex);
  Entry& e = r.rows[{name_, pass_}];
  if (e.calls == 0) {
    e.name = name_;
    e.pass = pass_;
  }
  ++e.calls;
  e.total_ms += ms;
}

void Span::wait_for_device(const Tensor& t) const {
  if (outermost_ && t.defined() && t.device().is_cuda()) kernels(t).synchronize();
}

BackwardPassGuard::BackwardPassGuard() : previous_(t_in_backward) { t_in_backward = true; }
BackwardPassGuard::~BackwardPassGuard() { t_in_backward = previous_; }

}  // namespace detail

}  // namespace demi::profiler
