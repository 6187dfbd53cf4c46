// Finding the host reads that stall a GPU: host_reads() counts every read of device memory by the
// host (item(), to_vector(), to(Device::cpu()) of a device tensor, a kernel's check reading a flag
// back), and set_sync_debug_mode makes each one warn or throw, as torch.cuda.set_sync_debug_mode
// does for synchronising CUDA calls. Unlike PyTorch's, both also see reads of CPU-device tensors
// through item() / to_vector(): nothing waits there, but the same code on a GPU would, so a step
// can be checked for reads on any machine.
#pragma once

#include <cstdint>

namespace demi {

enum class SyncDebugMode {
  Default,  // count only
  Warn,     // warn (demi::warn) at every read
  Error,    // throw demi::Error at every read
};

void set_sync_debug_mode(SyncDebugMode mode);
SyncDebugMode get_sync_debug_mode();
// Host reads of device memory since the process started.
int64_t host_reads();

}  // namespace demi
