// The number-format inspector behind `demi-fp`: what fp32, fp16 and bf16 store for a value, with
// and without loss scaling. A library apart from main() so that tests can pin the format facts.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

namespace demi::fp {

enum class Format { F32, F16, BF16 };

// What the stored bits are, by their exponent field.
enum class Kind { Zero, Subnormal, Normal, Inf, NaN };

// What storing the value did to it, compared with the (scaled) input.
enum class Verdict {
  Exact,        // stored == input
  Rounded,      // a neighbouring representable value
  Underflow,    // nonzero input stored as (signed) zero
  Overflow,     // finite input stored as inf
  PassThrough,  // input was inf or NaN and stays so
};

struct FormatView {
  Format format = Format::F32;
  double input = 0;      // the value asked about, times the scale
  double stored = 0;     // what the format holds, widened exactly to double
  uint32_t bits = 0;     // the raw bits; F16 and BF16 use the low 16
  Kind kind = Kind::Zero;
  Verdict verdict = Verdict::Exact;
  double rel_error = 0;  // |stored - input| / |input|; 0 when exact, NaN for a NaN input
};

// Stores value * scale in `format`. fp16 and bf16 are reached through fp32 with demi::Half and
// demi::BFloat16, as autocast casts an fp32 tensor, so the bits match what demi computes with.
FormatView inspect(double value, Format format, double scale = 1.0);

// "fp32", "fp16" or "bf16".
const char* format_name(Format format);

// Sign, exponent and mantissa bits separated by spaces: "0 01111 0000000000" for 1.0 in fp16.
std::string bit_string(const FormatView& view);

// One phrase for the table: "normal, exact", "subnormal, rounded", "underflows to 0", ...
std::string verdict_text(const FormatView& view);

// Parses a decimal or hex float, inf, -inf or nan, the whole string; nullopt when it is not one
// or lies outside the range of a double.
std::optional<double> parse_value(const std::string& text);

// The one-line complaint about an argument that parse_value() rejected.
std::string bad_value_message(const std::string& text);

// One value as the user wrote it and as parsed.
struct Value {
  std::string text;
  double value = 0;
};

// The aligned table: three rows (fp32, fp16, bf16) per value, and when scale != 1 three more for
// value * scale.
std::string render_table(const std::vector<Value>& values, double scale = 1.0);

// demi-fp's command line, all but the CLI11 part (which parses only --scale and --help).
struct CommandLine {
  std::vector<std::string> options;  // for CLI11, in the order given
  std::vector<std::string> values;   // in the order given
};

// Sorts argv[1..] into options and values. CLI11 would read "-inf" or "-.5" as short options
// (it lets only "-<digit>..." through as a positional), so values are picked out first: any
// token other than the scale's argument that does not start with '-' or is a number, and all
// tokens after "--".
CommandLine split_command_line(const std::vector<std::string>& args);

// Checks the scale and the values; prints the table to `out` and returns 0, or prints one line
// naming the bad argument to `err` and returns 2.
int run_demi_fp(const std::vector<std::string>& values, const std::string& scale_text,
                std::ostream& out, std::ostream& err);

}  // namespace demi::fp
