// demi::host_reads() counts each read of tensor memory by the host (item(), to_vector()), on the CPU
// device too; set_sync_debug_mode makes each read warn or throw, naming it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "framework/demi/demi.h"
#include "support/error_of.h"

namespace demi {
namespace {

using ::testing::HasSubstr;
using test::error_of;

TEST(HostReads, ItemAndToVectorCountOneReadEachAndTensorMathNone) {
  const Tensor x = tensor({1.0f, 2.0f, 3.0f}, {3});
  const int64_t before = host_reads();
  const Tensor y = (x * 2.0).sum();  // stays a tensor: no read
  EXPECT_EQ(host_reads(), before);
  EXPECT_EQ(y.item<float>(), 12.0f);
  EXPECT_EQ(host_reads(), before + 1);
  EXPECT_EQ(x.to_vector<float>().size(), 3u);
  EXPECT_EQ(host_reads(), before + 2);
}

TEST(HostReads, SyncDebugModeErrorThrowsAndWarnWarnsAtEachRead) {
  const Tensor x = full({}, 3.0);
  set_sync_debug_mode(SyncDebugMode::Error);
  EXPECT_EQ(get_sync_debug_mode(), SyncDebugMode::Error);
  const std::string e = error_of([&] { x.item(); });
  set_sync_debug_mode(SyncDebugMode::Default);
  EXPECT_THAT(e, HasSubstr("a host read of device memory (item() / to_vector())"));
  EXPECT_THAT(e, HasSubstr("read it only at logging steps"));

  std::vector<std::string> warnings;
  const WarningHandler previous = set_warning_handler([&](const std::string& m) { warnings.push_back(m); });
  set_sync_debug_mode(SyncDebugMode::Warn);
  EXPECT_EQ(x.item(), 3.0);
  EXPECT_EQ(x.item(), 3.0);
  set_sync_debug_mode(SyncDebugMode::Default);
  EXPECT_EQ(x.item(), 3.0);  // counted, not reported
  set_warning_handler(previous);
  EXPECT_EQ(warnings.size(), 2u);
}

}  // namespace
}  // namespace demi
