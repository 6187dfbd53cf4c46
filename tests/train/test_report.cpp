// report.html from a hand-written metrics.jsonl: every chart has both axis titles and ticks at
// round values, text is escaped and nothing is fetched.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "support/error_of.h"
#include "support/temp_dir.h"
#include "train/report.h"
#include "train/report_svg.h"

namespace demi {
namespace {

using testing::HasSubstr;
using testing::Not;

// Two epochs of two steps; in epoch 1 conv1.weight has no zero gradient element and the
// escaped-name layer has one in 10^4; epoch 2 does not record that layer.
const char* const kMetrics =
    R"({"type":"step","step":1,"loss":2.3,"lr":0.0004,"loss_scale":65536,"skipped_steps":0})"
    "\n"
    R"({"type":"step","step":2,"loss":2.1,"lr":0.0008,"loss_scale":32768,"skipped_steps":1})"
    "\n"
    R"({"type":"epoch","epoch":0,"test_accuracy":0.31,"grad_underflow":{"conv1.weight":{"zero":0.0,"subnormal":0.0},)"
    R"("fc<1>&'x'":{"zero":0.0001,"subnormal":0.002}}})"
    "\n"
    R"({"type":"step","step":3,"loss":1.9,"lr":0.0006,"loss_scale":32768,"skipped_steps":1})"
    "\n"
    R"({"type":"step","step":4,"loss":1.8,"lr":0.0002,"loss_scale":32768,"skipped_steps":1})"
    "\n"
    R"({"type":"epoch","epoch":1,"test_accuracy":0.42,"grad_underflow":{"conv1.weight":{"zero":0.5,"subnormal":0.0}}})"
    "\n";

std::string report_of(const std::string& metrics) {
  const test::TempDir tmp("demi_report_");
  std::ofstream(tmp.path / "metrics.jsonl") << metrics;
  train::write_report(tmp.path.string());
  std::ifstream in(tmp.path / "report.html");
  std::stringstream html;
  html << in.rdbuf();
  return html.str();
}

TEST(Report, EveryChartHasBothAxisTitles) {
  const std::string html = report_of(kMetrics);
  for (const char* title : {">step<", ">epoch<", ">train loss (cross-entropy)<", ">test accuracy (%)<",
                            ">learning rate<", ">loss scale (log scale)<", ">skipped step(s)<"}) {
    EXPECT_THAT(html, HasSubstr(title));
  }
  EXPECT_THAT(html, HasSubstr(">65536<")) << "the log axis labels powers of two in full";
  EXPECT_THAT(html, HasSubstr(">0.0004<")) << "learning-rate ticks at round values";
}

TEST(Report, IsSelfContainedAndEscaped) {
  const std::string html = report_of(kMetrics);
  EXPECT_THAT(html, Not(HasSubstr("<script")));
  EXPECT_THAT(html, Not(HasSubstr(" src=")));
  EXPECT_THAT(html, Not(HasSubstr("href=")));
  EXPECT_THAT(html, Not(HasSubstr("fc<1>")));
}

TEST(Report, WithoutUnderflowRecordsSaysSo) {
  const std::string html = report_of(R"({"type":"epoch","epoch":0,"test_accuracy":0.5})"
                                     "\n");
  EXPECT_THAT(html, HasSubstr("no gradient diagnostics recorded"));
  EXPECT_THAT(html, HasSubstr("no data")) << "no step records: the step charts say so";
}

TEST(Report, AMissingLogIsNamed) {
  const test::TempDir tmp("demi_report_missing_");
  EXPECT_THAT(test::error_of([&] { train::write_report(tmp.path.string()); }), HasSubstr("metrics.jsonl"));
}

TEST(ReportSvg, AxesTickAtRoundValues) {
  const train::svg::Axis loss = train::svg::linear_axis(1.43, 2.31, false);
  EXPECT_DOUBLE_EQ(loss.lo, 1.4);
  EXPECT_DOUBLE_EQ(loss.hi, 2.4);
  EXPECT_EQ(loss.ticks.size(), 6u);
  const train::svg::Axis epochs = train::svg::linear_axis(1, 2, true);
  EXPECT_EQ(epochs.ticks, (std::vector<double>{1, 2})) << "no epoch 1.5";
  const train::svg::Axis scale = train::svg::log2_axis(65536, 65536);
  EXPECT_EQ(scale.ticks, (std::vector<double>{32768, 65536, 131072}));
  EXPECT_DOUBLE_EQ(scale.position(65536), 0.5);
}

TEST(ReportSvg, NumbersReadAsPeopleWriteThem) {
  EXPECT_EQ(train::svg::format_number(65536), "65536");
  EXPECT_EQ(train::svg::format_number(0.0004), "0.0004");
  EXPECT_EQ(train::svg::format_number(0.30000000000000004, 1), "0.3");
  EXPECT_EQ(train::svg::format_percent(0.000123), "0.0123%");
  EXPECT_EQ(train::svg::format_percent(1.0), "100%");
  EXPECT_EQ(train::svg::escape("a<b>&'\""), "a&lt;b&gt;&amp;&#39;&quot;");
}

}  // namespace
}  // namespace demi
