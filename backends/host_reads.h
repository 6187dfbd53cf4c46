// Host reads of device memory: every time the host waits for a device's value (Tensor::item,
// to_vector, a copy to the CPU, a kernel's bad-index check reading its flag back). On a GPU each
// one is a synchronisation that stalls the launch queue, so a training step should make none
// outside its logging steps. Tensor reads on the CPU device count too, although nothing waits
// there, so that the same code can be checked for reads on a machine without a GPU.
#pragma once

#include <cstdint>
#include <functional>

namespace demi::backend {

// Counts one read; `what` names it for the handler (e.g. "item()", "max_pool2d's index check").
void note_host_read(const char* what);
// Reads counted so far in this process.
int64_t host_read_count();
// Called on every read after counting it (framework/tensor/host_reads.h installs one that warns or
// throws); an empty handler does nothing.
void set_host_read_handler(std::function<void(const char* what)> handler);

}  // namespace demi::backend
