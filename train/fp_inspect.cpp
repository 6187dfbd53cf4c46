// demi-fp's logic: rounding a value into fp32 / fp16 / bf16 with the framework's own conversions,
// naming what happened, and laying it out as a table.
#include "train/fp_inspect.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ostream>
#include <sstream>

#include "framework/core/half.h"

namespace demi::fp {
namespace {

struct Layout {
  int exponent_bits;
  int mantissa_bits;
};

Layout layout_of(Format format) {
  switch (format) {
    case Format::F32: return {8, 23};
    case Format::F16: return {5, 10};
    case Format::BF16: return {8, 7};
  }
  return {8, 23};
}

// double -> fp32, round to nearest even. Spelled out at the top of the range because a C++ cast
// of a double beyond FLT_MAX is undefined rather than IEEE's inf.
float to_float(double x) {
  constexpr double kOverflow = 0x1.ffffffp127;  // halfway to 2^128: ties round (to even) to inf
  if (std::isfinite(x) && std::fabs(x) >= kOverflow) return x > 0 ? HUGE_VALF : -HUGE_VALF;
  return static_cast<float>(x);
}

Kind kind_of(uint32_t bits, Layout layout) {
  const uint32_t mantissa = bits & ((1u << layout.mantissa_bits) - 1u);
  const uint32_t exponent = (bits >> layout.mantissa_bits) & ((1u << layout.exponent_bits) - 1u);
  if (exponent == (1u << layout.exponent_bits) - 1u) return mantissa ? Kind::NaN : Kind::Inf;
  if (exponent == 0) return mantissa ? Kind::Subnormal : Kind::Zero;
  return Kind::Normal;
}

std::string bits_field(uint32_t bits, int shift, int count) {
  std::string out;
  for (int i = count - 1; i >= 0; --i) out += ((bits >> (shift + i)) & 1u) ? '1' : '0';
  return out;
}

// The shortest %g text that reads back as exactly x (at most 17 digits, which always does), so
// that 2^-24 prints as 5.9604644775390625e-08 and 65504 as 65504.
std::string shortest_text(double x) {
  if (std::isnan(x)) return std::signbit(x) ? "-nan" : "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  char buf[40];
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, x);
    if (std::strtod(buf, nullptr) == x) break;
  }
  return buf;
}

std::string rel_error_text(double e) {
  if (std::isnan(e)) return "n/a";
  if (std::isinf(e)) return "inf";
  if (e == 0) return "0";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2e", e);
  return buf;
}

std::string hex_text(const FormatView& view) {
  char buf[16];
  std::snprintf(buf, sizeof buf, view.format == Format::F32 ? "0x%08x" : "0x%04x", view.bits);
  return buf;
}

// "sign exponent mantissa", the exponent field padded on the right to `exponent_width` so that a
// table's mantissas line up (fp16's 5 exponent bits against fp32's and bf16's 8).
std::string bit_fields(const FormatView& view, int exponent_width) {
  const Layout l = layout_of(view.format);
  return bits_field(view.bits, l.exponent_bits + l.mantissa_bits, 1) + " " +
         bits_field(view.bits, l.mantissa_bits, l.exponent_bits) +
         std::string(std::max(0, exponent_width - l.exponent_bits), ' ') + " " +
         bits_field(view.bits, 0, l.mantissa_bits);
}

// The whole of `text` as a double (decimal, hex float, inf, nan). Beyond a double (1e400, 1e-400)
// strtod returns inf or 0, which the table would call exact; out_of_range flags those.
std::optional<double> read_double(const std::string& text, bool& out_of_range) {
  out_of_range = false;
  // strtod would skip leading blanks; a value with them came from a quoting mistake.
  if (text.empty() || std::isspace(static_cast<unsigned char>(text[0]))) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const double x = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size()) return std::nullopt;
  out_of_range = errno == ERANGE && (std::isinf(x) || x == 0);
  return x;
}

}  // namespace

FormatView inspect(double value, Format format, double scale) {
  FormatView view;
  view.format = format;
  view.input = value * scale;
  const float f = to_float(view.input);
  switch (format) {
    case Format::F32:
      view.bits = detail::float_bits(f);
      view.stored = f;
      break;
    case Format::F16: {
      const Half h(f);
      view.bits = h.bits;
      view.stored = static_cast<float>(h);
      break;
    }
    case Format::BF16: {
      const BFloat16 b(f);
      view.bits = b.bits;
      view.stored = static_cast<float>(b);
      break;
    }
  }
  view.kind = kind_of(view.bits, layout_of(format));

  const double x = view.input;
  if (!std::isfinite(x)) {
    view.verdict = Verdict::PassThrough;
    view.rel_error = std::isnan(x) ? NAN : 0.0;
  } else if (view.stored == x) {
    view.verdict = Verdict::Exact;
    view.rel_error = 0;
  } else {
    view.verdict = std::isinf(view.stored) ? Verdict::Overflow
                   : view.stored == 0      ? Verdict::Underflow
                                           : Verdict::Rounded;
    view.rel_error = std::isinf(view.stored) ? HUGE_VAL : std::fabs(view.stored - x) / std::fabs(x);
  }
  return view;
}

const char* format_name(Format format) {
  switch (format) {
    case Format::F32: return "fp32";
    case Format::F16: return "fp16";
    case Format::BF16: return "bf16";
  }
  return "?";
}

std::string bit_string(const FormatView& view) { return bit_fields(view, 0); }

std::string verdict_text(const FormatView& view) {
  const char* kind = view.kind == Kind::Normal ? "normal" : view.kind == Kind::Subnormal ? "subnormal" : "zero";
  switch (view.verdict) {
    case Verdict::Exact: return std::string(kind) + ", exact";
    case Verdict::Rounded: return std::string(kind) + ", rounded";
    case Verdict::Underflow: return "underflows to 0";
    case Verdict::Overflow: return "overflows to inf";
    case Verdict::PassThrough: return view.kind == Kind::NaN ? "nan, passes through" : "inf, passes through";
  }
  return "?";
}

std::optional<double> parse_value(const std::string& text) {
  bool out_of_range = false;
  const std::optional<double> x = read_double(text, out_of_range);
  if (out_of_range) return std::nullopt;
  return x;
}

std::string bad_value_message(const std::string& text) {
  bool out_of_range = false;
  read_double(text, out_of_range);
  if (out_of_range) {
    return "demi-fp: '" + text + "' is outside the range of a double (about 4.9e-324 to 1.8e308); "
           "give a value inside it, like 1e-300 or 1e300";
  }
  return "demi-fp: '" + text + "' is not a number; give values like 1e-8, 65504, 0x1p-24, inf";
}

std::string render_table(const std::vector<Value>& values, double scale) {
  struct Group {
    std::string label;
    double value;
    double scale;
  };
  std::vector<Group> groups;
  for (const Value& v : values) {
    groups.push_back({v.text, v.value, 1.0});
    if (scale != 1.0) groups.push_back({v.text + " * " + shortest_text(scale), v.value, scale});
  }

  using Row = std::vector<std::string>;
  const Row header = {"value", "format", "sign exponent mantissa", "hex", "stored", "rel. error", "verdict"};
  std::vector<Row> rows;  // an empty row separates groups
  for (const Group& g : groups) {
    if (!rows.empty()) rows.push_back({});
    for (Format f : {Format::F32, Format::F16, Format::BF16}) {
      const FormatView view = inspect(g.value, f, g.scale);
      rows.push_back({f == Format::F32 ? g.label : "", format_name(f), bit_fields(view, 8),
                      hex_text(view), shortest_text(view.stored), rel_error_text(view.rel_error),
                      verdict_text(view)});
    }
  }

  std::vector<size_t> width(header.size());
  for (size_t c = 0; c < header.size(); ++c) width[c] = header[c].size();
  for (const Row& row : rows)
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());

  std::ostringstream out;
  auto emit = [&](const Row& row) {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c) {
      line += row[c];
      if (c + 1 < row.size()) line += std::string(width[c] - row[c].size() + 2, ' ');
    }
    out << line << "\n";
  };
  emit(header);
  for (const Row& row : rows) {
    if (row.empty()) out << "\n";
    else emit(row);
  }
  return out.str();
}

CommandLine split_command_line(const std::vector<std::string>& args) {
  CommandLine split;
  bool after_separator = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    const bool scale_argument =
        !after_separator && i > 0 && (args[i - 1] == "-s" || args[i - 1] == "--scale");
    if (after_separator) {
      split.values.push_back(arg);
    } else if (arg == "--") {
      after_separator = true;
    } else if (!scale_argument && (arg.empty() || arg[0] != '-' || parse_value(arg))) {
      split.values.push_back(arg);
    } else {
      split.options.push_back(arg);
    }
  }
  return split;
}

int run_demi_fp(const std::vector<std::string>& values, const std::string& scale_text,
                std::ostream& out, std::ostream& err) {
  constexpr int kUsageError = 2;  // as for any command-line mistake
  const std::optional<double> scale = parse_value(scale_text);
  if (!scale || !std::isfinite(*scale) || *scale <= 0) {
    err << "demi-fp: --scale '" << scale_text
        << "' must be a positive finite number, like 65536 or 0x1p16\n";
    return kUsageError;
  }
  if (values.empty()) {
    err << "demi-fp: no values given; try demi-fp 1e-8 65504 --scale 65536, or see demi-fp --help\n";
    return kUsageError;
  }
  std::vector<Value> parsed;
  for (const std::string& text : values) {
    const std::optional<double> x = parse_value(text);
    if (!x) {
      err << bad_value_message(text) << "\n";
      return kUsageError;
    }
    parsed.push_back({text, *x});
  }
  out << render_table(parsed, *scale);
  return 0;
}

}  // namespace demi::fp
