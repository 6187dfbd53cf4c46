// report.html: one self-contained page (inline SVG, no network) drawn from metrics.jsonl: train
// loss, test accuracy, learning rate, loss scale with skipped steps marked, and a per-layer heat
// map of the fraction of gradient elements that were exactly zero in the half format.
#pragma once

#include <string>

namespace demi::train {

// Reads dir/metrics.jsonl and writes dir/report.html (atomically); throws demi::Error naming the
// file when the log is missing or a line is not JSON.
void write_report(const std::string& dir);

}  // namespace demi::train
