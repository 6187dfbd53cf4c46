// Pins the fp16 / bf16 facts that mixed precision rests on, through demi-fp's inspector: where
// fp16 underflows and overflows, its subnormals, bf16's coarse mantissa, and loss scaling.
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "train/fp_inspect.h"

namespace demi::fp {
namespace {

TEST(FpInspect, TinyGradientUnderflowsInFp16ButNotBf16) {
  const FormatView h = inspect(1e-8, Format::F16);
  EXPECT_EQ(h.verdict, Verdict::Underflow);
  EXPECT_EQ(h.kind, Kind::Zero);
  EXPECT_EQ(h.stored, 0.0);
  EXPECT_EQ(h.rel_error, 1.0);
  EXPECT_EQ(verdict_text(h), "underflows to 0");

  const FormatView b = inspect(1e-8, Format::BF16);
  EXPECT_EQ(b.kind, Kind::Normal);
  EXPECT_EQ(b.verdict, Verdict::Rounded);
  EXPECT_NEAR(b.stored, 1e-8, 1e-8 * 0x1p-8);  // within half a bf16 ulp
  EXPECT_EQ(verdict_text(b), "normal, rounded");
}

TEST(FpInspect, Fp16MaxIsExactAndBeyondOverflows) {
  const FormatView max = inspect(65504, Format::F16);
  EXPECT_EQ(max.verdict, Verdict::Exact);
  EXPECT_EQ(max.kind, Kind::Normal);
  EXPECT_EQ(max.bits, 0x7bffu);
  EXPECT_EQ(verdict_text(max), "normal, exact");

  // 65520 is halfway between 65504 and the would-be 65536: ties to even go up, to inf.
  for (double x : {65520.0, 131072.0}) {
    const FormatView v = inspect(x, Format::F16);
    EXPECT_EQ(v.verdict, Verdict::Overflow) << x;
    EXPECT_EQ(v.kind, Kind::Inf) << x;
    EXPECT_EQ(v.bits, 0x7c00u) << x;
    EXPECT_TRUE(std::isinf(v.rel_error)) << x;
    EXPECT_EQ(verdict_text(v), "overflows to inf") << x;
  }
  EXPECT_EQ(inspect(65519, Format::F16).stored, 65504.0);  // just below the tie: rounds down
  EXPECT_EQ(inspect(131072, Format::BF16).verdict, Verdict::Exact);
}

TEST(FpInspect, Fp16SubnormalAndNormalBoundaries) {
  const FormatView smallest = inspect(0x1p-24, Format::F16);
  EXPECT_EQ(smallest.kind, Kind::Subnormal);
  EXPECT_EQ(smallest.verdict, Verdict::Exact);
  EXPECT_EQ(smallest.bits, 0x0001u);
  EXPECT_EQ(verdict_text(smallest), "subnormal, exact");
  EXPECT_EQ(inspect(0x1p-25, Format::F16).verdict, Verdict::Underflow);  // a tie, to even: 0

  const FormatView normal = inspect(6.103515625e-5, Format::F16);
  EXPECT_EQ(normal.kind, Kind::Normal);
  EXPECT_EQ(normal.verdict, Verdict::Exact);
  EXPECT_EQ(normal.bits, 0x0400u);
  EXPECT_EQ(inspect(6.103515625e-5 - 0x1p-24, Format::F16).kind, Kind::Subnormal);
}

TEST(FpInspect, Bf16HasSevenMantissaBitsFp16Ten) {
  const double x = 1.0 + 0x1p-9;
  const FormatView b = inspect(x, Format::BF16);
  EXPECT_EQ(b.stored, 1.0);
  EXPECT_EQ(b.verdict, Verdict::Rounded);
  EXPECT_EQ(inspect(x, Format::F16).verdict, Verdict::Exact);
  EXPECT_EQ(inspect(x, Format::F32).verdict, Verdict::Exact);
}

TEST(FpInspect, LossScalingMovesGradientsIntoAndOutOfFp16Range) {
  const FormatView rescued = inspect(1e-8, Format::F16, 65536);
  EXPECT_DOUBLE_EQ(rescued.input, 6.5536e-4);
  EXPECT_EQ(rescued.kind, Kind::Normal);
  EXPECT_EQ(rescued.verdict, Verdict::Rounded);
  EXPECT_LT(rescued.rel_error, 0x1p-11);  // half an fp16 ulp: full precision again

  const FormatView broken = inspect(2.0, Format::F16, 65536);
  EXPECT_EQ(broken.verdict, Verdict::Overflow);
  EXPECT_EQ(broken.kind, Kind::Inf);
  EXPECT_EQ(inspect(2.0, Format::BF16, 65536).verdict, Verdict::Exact);  // bf16 has fp32's range
}

TEST(FpInspect, InfAndNanPassThrough) {
  for (Format f : {Format::F32, Format::F16, Format::BF16}) {
    const FormatView nan = inspect(NAN, f);
    EXPECT_EQ(nan.kind, Kind::NaN) << format_name(f);
    EXPECT_EQ(nan.verdict, Verdict::PassThrough) << format_name(f);
    EXPECT_TRUE(std::isnan(nan.stored)) << format_name(f);
    EXPECT_TRUE(std::isnan(nan.rel_error)) << format_name(f);
    for (double inf : {HUGE_VAL, -HUGE_VAL}) {
      const FormatView v = inspect(inf, f, 65536);
      EXPECT_EQ(v.kind, Kind::Inf) << format_name(f);
      EXPECT_EQ(v.verdict, Verdict::PassThrough) << format_name(f);
      EXPECT_EQ(v.stored, inf) << format_name(f);
      EXPECT_EQ(v.rel_error, 0.0) << format_name(f);
      EXPECT_EQ(verdict_text(v), "inf, passes through") << format_name(f);
    }
  }
}

TEST(FpInspect, Fp32ItselfOverflowsAndUnderflows) {
  EXPECT_EQ(inspect(1e39, Format::F32).verdict, Verdict::Overflow);
  EXPECT_EQ(inspect(-1e39, Format::F32).stored, -HUGE_VAL);
  EXPECT_EQ(inspect(3.4028234663852886e38, Format::F32).verdict, Verdict::Exact);  // FLT_MAX
  EXPECT_EQ(inspect(1e-46, Format::F32).verdict, Verdict::Underflow);
  EXPECT_EQ(inspect(1e-40, Format::F32).kind, Kind::Subnormal);
}

TEST(FpInspect, BitStringsOfOne) {
  EXPECT_EQ(bit_string(inspect(1.0, Format::F32)), "0 01111111 00000000000000000000000");
  EXPECT_EQ(bit_string(inspect(1.0, Format::F16)), "0 01111 0000000000");
  EXPECT_EQ(bit_string(inspect(1.0, Format::BF16)), "0 01111111 0000000");
  EXPECT_EQ(bit_string(inspect(-2.0, Format::F16)), "1 10000 0000000000");
  const FormatView negative_zero = inspect(-0.0, Format::F16);
  EXPECT_EQ(bit_string(negative_zero), "1 00000 0000000000");
  EXPECT_EQ(verdict_text(negative_zero), "zero, exact");
}

TEST(FpInspect, ParsesDecimalHexInfAndNan) {
  EXPECT_EQ(parse_value("1e-8"), 1e-8);
  EXPECT_EQ(parse_value("65504"), 65504.0);
  EXPECT_EQ(parse_value("0x1p-24"), 0x1p-24);
  EXPECT_EQ(parse_value("-0x1.8p1"), -3.0);
  EXPECT_EQ(parse_value("inf"), HUGE_VAL);
  EXPECT_EQ(parse_value("-inf"), -HUGE_VAL);
  EXPECT_EQ(parse_value("Infinity"), HUGE_VAL);
  ASSERT_TRUE(parse_value("nan").has_value());
  EXPECT_TRUE(std::isnan(*parse_value("nan")));
}

TEST(FpInspect, RejectsWhatIsNotANumberNamingIt) {
  for (const char* bad : {"abc", "", "1e-8x", " 1", "1,5", "0x", "--"}) {
    EXPECT_FALSE(parse_value(bad).has_value()) << "'" << bad << "'";
  }
  EXPECT_EQ(bad_value_message("abc"),
            "demi-fp: 'abc' is not a number; give values like 1e-8, 65504, 0x1p-24, inf");
  for (const char* huge : {"1e400", "-1e400", "1e-400"}) {
    EXPECT_FALSE(parse_value(huge).has_value()) << huge;
    EXPECT_NE(bad_value_message(huge).find("outside the range of a double"), std::string::npos) << huge;
  }
}

// The command line minus CLI11: what `demi-fp 1e-8 abc` prints and returns.
TEST(FpInspect, BadValueIsOneLineNamingItAndExitCodeTwo) {
  std::ostringstream out, err;
  EXPECT_EQ(run_demi_fp({"1e-8", "abc", "2"}, "1", out, err), 2);
  EXPECT_EQ(err.str(), "demi-fp: 'abc' is not a number; give values like 1e-8, 65504, 0x1p-24, inf\n");
  EXPECT_EQ(out.str(), "");  // nothing half-printed before the error

  std::ostringstream out2, err2;
  EXPECT_EQ(run_demi_fp({"1"}, "-65536", out2, err2), 2);
  EXPECT_EQ(err2.str(), "demi-fp: --scale '-65536' must be a positive finite number, like 65536 or 0x1p16\n");

  std::ostringstream out3, err3;
  EXPECT_EQ(run_demi_fp({}, "1", out3, err3), 2);
  EXPECT_NE(err3.str().find("no values given"), std::string::npos);

  std::ostringstream out4, err4;
  EXPECT_EQ(run_demi_fp({"-inf", "0x1p-24"}, "0x1p16", out4, err4), 0);
  EXPECT_EQ(err4.str(), "");
  EXPECT_NE(out4.str().find("0x1p-24 * 65536"), std::string::npos) << out4.str();
}

// CLI11 alone would take "-inf" and "-.5" for short options; they must arrive as values, in order.
TEST(FpInspect, NegativeValuesAreValuesNotOptions) {
  const CommandLine line =
      split_command_line({"-inf", "1e-8", "--scale", "65536", "-.5", "-s4", "--bogus", "--", "--scale"});
  EXPECT_EQ(line.values, (std::vector<std::string>{"-inf", "1e-8", "-.5", "--scale"}));
  EXPECT_EQ(line.options, (std::vector<std::string>{"--scale", "65536", "-s4", "--bogus"}));
  // The scale's argument stays with it even when negative, so that the scale check can name it.
  EXPECT_EQ(split_command_line({"1", "-s", "-2"}).options, (std::vector<std::string>{"-s", "-2"}));
}

// Each line's cells start where the header's do: the table stays aligned whatever the values.
TEST(FpInspect, TableIsAlignedAndShowsScaledRows) {
  const std::string table = render_table({{"1e-8", 1e-8}, {"2", 2.0}, {"nan", NAN}}, 65536);
  std::istringstream in(table);
  std::string header;
  std::getline(in, header);
  const size_t format_col = header.find("format");
  const size_t stored_col = header.find("stored");
  const size_t verdict_col = header.find("verdict");
  ASSERT_NE(verdict_col, std::string::npos);
  int rows = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    ++rows;
    const std::string format = line.substr(format_col, 4);
    EXPECT_TRUE(format == "fp32" || format == "fp16" || format == "bf16") << line;
    EXPECT_EQ(line[format_col - 1], ' ') << line;
    EXPECT_NE(line[stored_col], ' ') << line;
    EXPECT_EQ(line[stored_col - 1], ' ') << line;
    EXPECT_NE(line[verdict_col], ' ') << line;
    EXPECT_EQ(line[verdict_col - 1], ' ') << line;
  }
  EXPECT_EQ(rows, 3 * 3 * 2);  // three formats, three values, unscaled and scaled
  EXPECT_NE(table.find("1e-8 * 65536"), std::string::npos) << table;
  EXPECT_NE(table.find("underflows to 0"), std::string::npos) << table;
  EXPECT_NE(table.find("overflows to inf"), std::string::npos) << table;
  EXPECT_NE(table.find("0 10000    0000000000"), std::string::npos) << table;  // 2.0 in fp16, padded
}

}  // namespace
}  // namespace demi::fp
