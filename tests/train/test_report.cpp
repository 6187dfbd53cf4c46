// report.html from a hand-written metrics.jsonl: every chart has both axis titles, the heat map's
// cells are outlined and carry their value on hover, a zero and a small nonzero underflow share are
// drawn in different colours, the colour scale is there, text is escaped and nothing is fetched.
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

// The opening tag of the heat-map cell whose hover text starts with `title`.
std::string cell_tag(const std::string& html, const std::string& title) {
  const size_t t = html.find("<title>" + title);
  if (t == std::string::npos) return "(no cell titled " + title + ")";
  const size_t open = html.rfind("<rect", t);
  return html.substr(open, t - open);
}

std::string attribute(const std::string& tag, const std::string& name) {
  const size_t at = tag.find(" " + name + "='");
  if (at == std::string::npos) return "(no " + name + ")";
  const size_t begin = at + name.size() + 3;
  return tag.substr(begin, tag.find('\'', begin) - begin);
}

TEST(Report, EveryChartHasBothAxisTitles) {
  const std::string html = report_of(kMetrics);
  for (const char* title : {">step<", ">epoch<", ">train loss (cross-entropy)<", ">test accuracy (%)<",
                            ">learning rate<", ">loss scale (log scale)<", ">layer<", ">skipped step(s)<"}) {
    EXPECT_THAT(html, HasSubstr(title));
  }
  EXPECT_THAT(html, HasSubstr(">65536<")) << "the log axis labels powers of two in full";
  EXPECT_THAT(html, HasSubstr(">0.0004<")) << "learning-rate ticks at round values";
}

TEST(Report, HeatMapCellsAreOutlinedAndTellTheirValue) {
  const std::string html = report_of(kMetrics);
  const std::string none = cell_tag(html, "conv1.weight, epoch 1: 0% of gradient elements exactly zero");
  const std::string small = cell_tag(html, "fc&lt;1&gt;&amp;&#39;x&#39;, epoch 1: 0.01% of gradient elements");
  const std::string half = cell_tag(html, "conv1.weight, epoch 2: 50%");
  const std::string unrecorded = cell_tag(html, "fc&lt;1&gt;&amp;&#39;x&#39;, epoch 2: not recorded");
  for (const std::string& tag : {none, small, half, unrecorded}) {
    EXPECT_THAT(tag, HasSubstr("<rect class='cell'"));
    EXPECT_NE(attribute(tag, "stroke"), "none") << tag;
    EXPECT_THAT(attribute(tag, "stroke"), Not(HasSubstr("(no"))) << tag;
  }
  EXPECT_NE(attribute(none, "fill"), attribute(small, "fill")) << "one in 10^4 must not look like none";
  EXPECT_NE(attribute(small, "fill"), attribute(half, "fill"));
  EXPECT_NE(attribute(none, "fill"), attribute(unrecorded, "fill"));
  EXPECT_THAT(html, HasSubstr("(0.2% subnormal)"));
}

TEST(Report, HeatMapHasAColourScaleAndEpochLabels) {
  const std::string html = report_of(kMetrics);
  EXPECT_THAT(html, HasSubstr("<g class='legend'>"));
  EXPECT_THAT(html, HasSubstr("<linearGradient id='underflow-scale'"));
  EXPECT_THAT(html, HasSubstr("fill='url(#underflow-scale)'"));
  for (const char* tick : {">100%<", ">1%<", ">0.01%<", "&#8804; 0.0001%<", ">0% (none)<", ">not recorded<"}) {
    EXPECT_THAT(html, HasSubstr(tick));
  }
  EXPECT_THAT(html, HasSubstr("text-anchor='middle' font-size='11'>1</text>"));
  EXPECT_THAT(html, HasSubstr("text-anchor='middle' font-size='11'>2</text>"));
}

TEST(Report, LayersInTheOrderTheModelNumbersThem) {
  const std::string html = report_of(
      R"({"type":"epoch","epoch":0,"grad_underflow":{"features.10.weight":{"zero":0},"features.3.weight":{"zero":0}}})"
      "\n");
  EXPECT_LT(html.find(">features.3.weight<"), html.find(">features.10.weight<"));
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
