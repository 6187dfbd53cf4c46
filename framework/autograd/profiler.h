// demi::profiler: where the time of a training step goes. Records wall time per forward op (in
// apply<Op>) and per backward node (in the engine), aggregated by name. When off, each hook costs
// one relaxed atomic load.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace demi {
class Tensor;
}

namespace demi::profiler {

// forward: an op outside backward(); backward: a node's backward, or an op the engine runs between
// nodes (summing or casting gradients); region: a span named with profiler::Region.
enum class Pass { Forward, Backward, Region };
const char* pass_name(Pass pass);

// One row: every record of `name` in `pass`, summed.
struct Entry {
  std::string name;
  Pass pass = Pass::Forward;
  int64_t calls = 0;
  double total_ms = 0.0;
};

namespace detail {
extern std::atomic<bool> g_enabled;
}

// Whether records are being taken now.
inline bool is_enabled() { return detail::g_enabled.load(std::memory_order_relaxed); }
// Starts and stops recording; records taken so far are kept.
void enable();
void disable();
// Drops every record.
void reset();
// The records so far, largest total first.
std::vector<Entry> entries();
// A table of entries() (name, pass, calls, total ms, % of step_ms), plus a row for the part of
// step_ms no entry covers (optimizer kernels, framework overhead) when step_ms > 0.
std::string format_table(const std::vector<Entry>& entries, double step_ms = 0.0);

// Records for its lifetime: clears earlier records on construction, stops on destruction (the
// records stay readable through entries()). Not nestable.
class ProfileScope {
 public:
  ProfileScope();
  ~ProfileScope();
  ProfileScope(const ProfileScope&) = delete;
  ProfileScope& operator=(const ProfileScope&) = delete;
};

namespace detail {
// Times one span. Only the outermost span on a thread records: the ops a forward, a backward
// formula or a region runs inside itself are part of its time, so the rows add up to the step.
// An op's span is made with Pass::Forward and recorded as Backward while the engine runs.
class Span {
 public:
  Span(const char* name, Pass pass) {
    if (is_enabled()) start(name, pass);
  }
  ~Span() {
    if (active_) stop();
  }
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;
  // On CUDA the host returns before the kernels finish: wait for `t`'s device so the span holds
  // the kernels' time, not the launches'. Only while this span records; a no-op on the CPU.
  void wait_for(const Tensor& t) const {
    if (active_) wait_for_device(t);
  }

 private:
  void start(const char* name, Pass pass);
  void stop();
  void wait_for_device(const Tensor& t) const;
  bool active_ = false;
  bool outermost_ = false;
  const char* name_ = nullptr;
  Pass pass_ = Pass::Forward;
  std::chrono::steady_clock::time_point start_;
};

// The pass that ops recorded on this thread belong to; the engine sets Backward while it runs.
class BackwardPassGuard {
 public:
  BackwardPassGuard();
  ~BackwardPassGuard();
  BackwardPassGuard(const BackwardPassGuard&) = delete;
  BackwardPassGuard& operator=(const BackwardPassGuard&) = delete;

 private:
  bool previous_;
};
}  // namespace detail

// A named span of one's own (e.g. "optimizer step"): recorded as one row of pass Region, and the
// ops inside it are counted in it, not on their own. Keep `name` alive (a string literal).
class Region {
 public:
  explicit Region(const char* name) : span_(name, Pass::Region) {}

 private:
  detail::Span span_;
};

}  // namespace demi::profiler
