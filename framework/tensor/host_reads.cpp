// set_sync_debug_mode: installs the backend's read handler that warns or throws.
#include "framework/tensor/host_reads.h"

#include <atomic>
#include <string>

#include "backends/host_reads.h"
#include "framework/core/error.h"
#include "framework/core/warning.h"

namespace demi {
namespace {
std::atomic<SyncDebugMode> g_mode{SyncDebugMode::Default};

std::string message(const char* what) {
  return std::string("a host read of device memory (") + what +
         ") while sync debug mode is on: on a GPU it waits for every kernel queued before it. Keep the "
         "value on the device (compute with it as a tensor), read it only at logging steps, or call "
         "set_sync_debug_mode(SyncDebugMode::Default) around reads that are meant";
}
}  // namespace

void set_sync_debug_mode(SyncDebugMode mode) {
  g_mode.store(mode);
  if (mode == SyncDebugMode::Default) {
    backend::set_host_read_handler(nullptr);
  } else if (mode == SyncDebugMode::Warn) {
    backend::set_host_read_handler([](const char* what) { warn(message(what)); });
  } else {
    backend::set_host_read_handler([](const char* what) { DEMI_THROW(message(what)); });
  }
}

SyncDebugMode get_sync_debug_mode() { return g_mode.load(); }

int64_t host_reads() { return backend::host_read_count(); }

}  // namespace demi
