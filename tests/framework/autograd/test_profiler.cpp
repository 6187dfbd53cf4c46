// demi::profiler: forward ops and backward nodes are recorded by name while a ProfileScope lives,
// nested ops count in their outermost span, and nothing is recorded when it is off.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "framework/demi/demi.h"

namespace demi {
namespace {

using profiler::Pass;
using testing::HasSubstr;

// Calls of (name, pass) in `entries`; 0 when absent.
int64_t calls_of(const std::vector<profiler::Entry>& entries, const std::string& name, Pass pass) {
  for (const profiler::Entry& e : entries) {
    if (e.name == name && e.pass == pass) return e.calls;
  }
  return 0;
}

// sum(exp(x) * x): x reaches the loss twice, so the engine adds two gradients for it.
void forward_and_backward() {
  Tensor x = tensor({0.5f, 1.0f, 2.0f}, {3}).requires_grad_();
  sum(exp(x) * x).backward();
}

TEST(Profiler, RecordsForwardOpsAndBackwardNodesByName) {
  {
    profiler::ProfileScope scope;
    EXPECT_TRUE(profiler::is_enabled());
    forward_and_backward();
  }
  EXPECT_FALSE(profiler::is_enabled());
  const std::vector<profiler::Entry> entries = profiler::entries();
  for (const char* op : {"exp", "mul", "sum"}) {
    EXPECT_EQ(calls_of(entries, op, Pass::Forward), 1) << op << " forward";
    EXPECT_EQ(calls_of(entries, op, Pass::Backward), 1) << op << " backward";
  }
  EXPECT_EQ(calls_of(entries, "AccumulateGrad", Pass::Backward), 1);
  // The engine's own op between nodes: summing x's two gradients.
  EXPECT_EQ(calls_of(entries, "add", Pass::Backward), 1);
  // Backward formulas are built from ops (exp's is a mul); those are in the node's time, not rows.
  EXPECT_EQ(calls_of(entries, "mul", Pass::Backward), 1);
  for (size_t i = 1; i < entries.size(); ++i) EXPECT_GE(entries[i - 1].total_ms, entries[i].total_ms);
  for (const profiler::Entry& e : entries) EXPECT_GE(e.total_ms, 0.0) << e.name;
}

TEST(Profiler, RecordsNothingWhenDisabled) {
  profiler::reset();
  forward_and_backward();
  EXPECT_TRUE(profiler::entries().empty());
  { profiler::ProfileScope scope; }
  forward_and_backward();  // after the scope ended
  EXPECT_TRUE(profiler::entries().empty());
}

TEST(Profiler, OpsInsideARegionCountInTheRegion) {
  profiler::ProfileScope scope;
  const Tensor x = ones({4});
  {
    profiler::Region region("my region");
    (void)exp(x * 2.0);
  }
  (void)exp(x);
  const std::vector<profiler::Entry> entries = profiler::entries();
  EXPECT_EQ(calls_of(entries, "my region", Pass::Region), 1);
  EXPECT_EQ(calls_of(entries, "exp", Pass::Forward), 1);  // only the one outside the region
}

TEST(Profiler, TableListsRowsAndTheUncoveredRest) {
  {
    profiler::ProfileScope scope;
    forward_and_backward();
  }
  const std::string table = profiler::format_table(profiler::entries(), 1000.0);
  EXPECT_THAT(table, HasSubstr("exp"));
  EXPECT_THAT(table, HasSubstr("AccumulateGrad"));
  EXPECT_THAT(table, HasSubstr("backward"));
  EXPECT_THAT(table, HasSubstr("% step"));
  EXPECT_THAT(table, HasSubstr("(outside ops and nodes)"));
}

}  // namespace
}  // namespace demi
