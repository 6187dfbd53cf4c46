// report.html's SVG pieces: hand-written markup (no scripts, no external files), so the page opens
// anywhere, offline.
#include "train/report_svg.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iomanip>
#include <sstream>

namespace demi::train::svg {

std::string escape(const std::string& s) {
  std::string out;
  for (char ch : s) {
    if (ch == '<') out += "&lt;";
    else if (ch == '>') out += "&gt;";
    else if (ch == '&') out += "&amp;";
    else if (ch == '\'') out += "&#39;";
    else if (ch == '"') out += "&quot;";
    else out += ch;
  }
  return out;
}

std::string format_number(double v, int digits) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (v == 0) return "0";
  // Whole numbers with more digits than asked (a loss scale of 65536) stay whole, not 6.55e+04.
  if (std::fabs(v) >= std::pow(10.0, digits) && std::fabs(v) < 1e9) return std::to_string(std::llround(v));
  std::ostringstream out;
  out << std::setprecision(digits) << v;
  return out.str();
}

std::string format_percent(double fraction) { return format_number(100.0 * fraction, 3) + "%"; }

double Axis::position(double v) const {
  if (!log) return (v - lo) / (hi - lo);
  return (std::log2(std::max(v, 1e-300)) - std::log2(lo)) / (std::log2(hi) - std::log2(lo));
}

Axis linear_axis(double lo, double hi, bool integer) {
  if (!(hi > lo)) {  // one value: a window around it
    const double pad = integer ? 0.5 : lo == 0 ? 1.0 : std::fabs(lo) * 0.1;
    lo -= integer ? 0.0 : pad;
    hi += integer ? 1.0 : pad;
  }
  const double raw = (hi - lo) / 5, magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  const double norm = raw / magnitude;
  double step = (norm < 1.5 ? 1 : norm < 3 ? 2 : norm < 7 ? 5 : 10) * magnitude;
  if (integer) step = std::max(step, 1.0);
  Axis a;
  a.lo = std::floor(lo / step + 1e-9) * step;
  a.hi = std::ceil(hi / step - 1e-9) * step;
  const int64_t n = std::llround((a.hi - a.lo) / step);
  for (int64_t i = 0; i <= n; ++i) {
    const double t = a.lo + static_cast<double>(i) * step;
    a.ticks.push_back(std::fabs(t) < step * 1e-9 ? 0.0 : t);  // no 1e-17 for zero
  }
  return a;
}

Axis log2_axis(double lo, double hi) {
  if (!(lo > 0)) lo = hi > 0 ? hi : 1.0;
  if (!(hi >= lo)) hi = lo;
  int e0 = static_cast<int>(std::floor(std::log2(lo) + 1e-9)), e1 = static_cast<int>(std::ceil(std::log2(hi) - 1e-9));
  if (e1 <= e0) {  // one value: an octave either side
    --e0;
    ++e1;
  }
  const int step = std::max(1, (e1 - e0 + 5) / 6);  // at most about 7 ticks
  e1 = e0 + step * ((e1 - e0 + step - 1) / step);
  Axis a;
  a.log = true;
  a.lo = std::ldexp(1.0, e0);
  a.hi = std::ldexp(1.0, e1);
  for (int e = e0; e <= e1; e += step) a.ticks.push_back(std::ldexp(1.0, e));
  return a;
}

namespace {

constexpr double kWidth = 600, kHeight = 260, kLeft = 78, kRight = 16, kTop = 28, kBottom = 50;
constexpr double kPlotWidth = kWidth - kLeft - kRight, kPlotHeight = kHeight - kTop - kBottom;

struct Frame {
  Axis x, y;
  double inset = 0;  // keeps dots at the ends off the frame
  double px(double v) const { return kLeft + inset + x.position(v) * (kPlotWidth - 2 * inset); }
  double py(double v) const { return kTop + inset + (1 - y.position(v)) * (kPlotHeight - 2 * inset); }
};

constexpr size_t kMostDots = 40;

// Significant digits that tell neighbouring ticks apart (1.4 and 1.6, 0.0002 and 0.0003).
int tick_digits(const Axis& a) {
  if (a.log || a.ticks.size() < 2) return 3;
  const double step = a.ticks[1] - a.ticks[0], top = std::max(std::fabs(a.lo), std::fabs(a.hi));
  return std::clamp(static_cast<int>(std::floor(std::log10(top)) - std::floor(std::log10(step))) + 1, 1, 10);
}

// Grid lines, tick labels, the frame and both axis titles.
void draw_axes(std::ostringstream& out, const Frame& f, const ChartText& text) {
  const int x_digits = tick_digits(f.x), y_digits = tick_digits(f.y);
  for (double t : f.y.ticks) {
    out << "<line x1='" << kLeft - 4 << "' x2='" << kLeft + kPlotWidth << "' y1='" << f.py(t) << "' y2='" << f.py(t)
        << "' stroke='#e3e3e3'/><text x='" << kLeft - 7 << "' y='" << f.py(t) + 4
        << "' text-anchor='end' font-size='11'>" << format_number(t, y_digits) << "</text>";
  }
  for (double t : f.x.ticks) {
    out << "<line x1='" << f.px(t) << "' x2='" << f.px(t) << "' y1='" << kTop << "' y2='" << kTop + kPlotHeight + 4
        << "' stroke='#e3e3e3'/><text x='" << f.px(t) << "' y='" << kTop + kPlotHeight + 17
        << "' text-anchor='middle' font-size='11'>" << format_number(t, x_digits) << "</text>";
  }
  out << "<rect x='" << kLeft << "' y='" << kTop << "' width='" << kPlotWidth << "' height='" << kPlotHeight
      << "' fill='none' stroke='#888'/><text x='" << kLeft + kPlotWidth / 2 << "' y='" << kHeight - 10
      << "' text-anchor='middle' font-size='12'>" << escape(text.x_title) << "</text><text transform='translate(16,"
      << kTop + kPlotHeight / 2 << ") rotate(-90)' text-anchor='middle' font-size='12'>" << escape(text.y_title)
      << "</text>";
}

// The curve (dotted when it has few points), the marks and their legend entry.
void draw_data(std::ostringstream& out, const Frame& f, const Series& s, const ChartText& text,
               const std::vector<size_t>& drawable) {
  out << "<polyline fill='none' stroke='#1f77b4' stroke-width='1.5' points='";
  for (size_t i : drawable) out << f.px(s.x[i]) << "," << f.py(s.y[i]) << " ";
  out << "'/>";
  if (drawable.size() <= kMostDots) {
    for (size_t i : drawable) {
      out << "<circle cx='" << f.px(s.x[i]) << "' cy='" << f.py(s.y[i]) << "' r='3' fill='#1f77b4'><title>"
          << format_number(s.x[i], 6) << ": " << format_number(s.y[i], 4) << "</title></circle>";
    }
  }
  for (double m : s.marks) {
    out << "<line x1='" << f.px(m) << "' x2='" << f.px(m) << "' y1='" << kTop << "' y2='" << kTop + kPlotHeight
        << "' stroke='#d62728' stroke-dasharray='3,2'/>";
  }
  if (!s.marks.empty() && !text.marks_label.empty()) {
    const double x = kLeft + kPlotWidth - 150;
    out << "<line x1='" << x << "' x2='" << x + 18 << "' y1='14' y2='14' stroke='#d62728' stroke-dasharray='3,2'/>"
        << "<text x='" << x + 24 << "' y='18' font-size='11'>" << escape(text.marks_label) << "</text>";
  }
}

}  // namespace

std::string line_chart(const ChartText& text, const Series& s, bool integer_x, bool log_y) {
  std::ostringstream out;
  out << "<figure><figcaption>" << escape(text.title) << "</figcaption><svg width='" << kWidth << "' height='"
      << kHeight << "' xmlns='http://www.w3.org/2000/svg' role='img'>";
  std::vector<size_t> drawable;  // finite points (and positive ones on a log axis)
  for (size_t i = 0; i < std::min(s.x.size(), s.y.size()); ++i) {
    if (std::isfinite(s.x[i]) && std::isfinite(s.y[i]) && (!log_y || s.y[i] > 0)) drawable.push_back(i);
  }
  if (drawable.empty()) {
    out << "<text x='" << kLeft << "' y='100' font-size='12'>no data</text></svg></figure>";
    return out.str();
  }
  double x0 = s.x[drawable[0]], x1 = x0, y0 = s.y[drawable[0]], y1 = y0;
  for (size_t i : drawable) {
    x0 = std::min(x0, s.x[i]);
    x1 = std::max(x1, s.x[i]);
    y0 = std::min(y0, s.y[i]);
    y1 = std::max(y1, s.y[i]);
  }
  const Frame f{linear_axis(x0, x1, integer_x), log_y ? log2_axis(y0, y1) : linear_axis(y0, y1, false),
                drawable.size() <= kMostDots ? 8.0 : 0.0};
  draw_axes(out, f, text);
  draw_data(out, f, s, text, drawable);
  return out.str() + "</svg></figure>";
}

}  // namespace demi::train::svg
