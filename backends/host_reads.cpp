// The process-wide count of host reads and the handler that set_sync_debug_mode installs.
#include "backends/host_reads.h"

#include <atomic>
#include <mutex>
#include <utility>

namespace demi::backend {
namespace {
std::atomic<int64_t> g_reads{0};
std::mutex g_handler_mutex;
std::function<void(const char*)> g_handler;
std::atomic<bool> g_has_handler{false};  // the common case (no handler) takes no lock
}  // namespace

void note_host_read(const char* what) {
  g_reads.fetch_add(1, std::memory_order_relaxed);
  if (!g_has_handler.load(std::memory_order_acquire)) return;
  std::function<void(const char*)> handler;
  {
    std::lock_guard<std::mutex> lock(g_handler_mutex);
    handler = g_handler;
  }
  if (handler) handler(what);
}

int64_t host_read_count() { return g_reads.load(std::memory_order_relaxed); }

void set_host_read_handler(std::function<void(const char* what)> handler) {
  std::lock_guard<std::mutex> lock(g_handler_mutex);
  g_has_handler.store(static_cast<bool>(handler), std::memory_order_release);
  g_handler = std::move(handler);
}

}  // namespace demi::backend
