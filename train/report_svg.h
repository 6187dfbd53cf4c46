// The pieces of report.html's hand-written SVG: text escaping, number labels, axes with ticks at
// round values (linear, or powers of two for a log axis) and a labelled line chart.
#pragma once

#include <string>
#include <vector>

namespace demi::train::svg {

// Text and attribute values made safe for HTML/SVG (&, <, >, both quotes).
std::string escape(const std::string& s);

// A number as a tick or hover label: 65536, 0.0004, 1.5e-07 (at most `digits` significant digits).
std::string format_number(double v, int digits = 3);

// A fraction as a percentage for people: 0%, 0.0123%, 12.3%, 100%.
std::string format_percent(double fraction);

// An axis's domain [lo, hi] and its tick values; log: ticks and positions in log2 of the values.
struct Axis {
  double lo = 0, hi = 1;
  bool log = false;
  std::vector<double> ticks;
  double position(double v) const;  // 0 at lo, 1 at hi
};

// Ticks at 1, 2 or 5 times a power of ten covering [lo, hi]; integer: no step below 1.
Axis linear_axis(double lo, double hi, bool integer);
// Ticks at powers of two covering [lo, hi] (values <= 0 are not drawable and are ignored).
Axis log2_axis(double lo, double hi);

struct Series {
  std::vector<double> x, y;
  std::vector<double> marks;  // x positions to mark with a dashed red line (skipped steps)
};

struct ChartText {
  std::string title, x_title, y_title;
  std::string marks_label;  // legend entry for the marks, when there are any
};

// A 600x260 line chart with both axes titled and ticked; log_y for quantities that move by
// factors of two (the loss scale). Points are dotted when few enough to tell apart.
std::string line_chart(const ChartText& text, const Series& s, bool integer_x, bool log_y);

}  // namespace demi::train::svg
