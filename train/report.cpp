// write_report: metrics.jsonl -> report.html with hand-written SVG (train/report_svg.h for the line
// charts, a grid of rects for the heat map), so the page opens anywhere without scripts or a network.
#include "train/report.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "framework/core/error.h"
#include "framework/serialize/safetensors.h"
#include "train/report_svg.h"

namespace demi::train {
namespace {

using json = nlohmann::json;
using svg::escape;

// Heat-map colours. Exactly 0 stays white; any nonzero fraction is coloured on a log scale from
// 1e-6 to 1, so that one element in 10^4 underflowing stands out from none (a linear white-to-red
// scale would draw it white).
struct ColourStop {
  double at;  // position on the scale, 0 (1e-6 and below) to 1 (all elements)
  int r, g, b;
};
constexpr ColourStop kRamp[] = {{0.0, 253, 212, 158}, {0.5, 239, 101, 72}, {1.0, 127, 0, 0}};
constexpr int kLowestDecade = -6;
constexpr const char* kZeroFill = "#ffffff";
constexpr const char* kUnrecordedFill = "#d0d0d0";
constexpr const char* kCellStroke = "#999999";

std::string rgb(const ColourStop& a, const ColourStop& b, double at) {
  const double w = b.at > a.at ? (at - a.at) / (b.at - a.at) : 0.0;
  auto mix = [&](int u, int v) { return std::to_string(static_cast<int>(std::lround(u + (v - u) * w))); };
  return "rgb(" + mix(a.r, b.r) + "," + mix(a.g, b.g) + "," + mix(a.b, b.b) + ")";
}

std::string underflow_fill(double zero_fraction) {
  if (!(zero_fraction > 0)) return kZeroFill;
  const double at = std::clamp((std::log10(zero_fraction) - kLowestDecade) / -kLowestDecade, 0.0, 1.0);
  size_t i = 0;
  while (i + 2 < std::size(kRamp) && at > kRamp[i + 1].at) ++i;
  return rgb(kRamp[i], kRamp[i + 1], at);
}

// One heat-map cell: an epoch's fractions for one layer, if that epoch recorded the layer.
struct Cell {
  bool recorded = false;
  double zero = 0, subnormal = 0;
};

struct HeatMap {
  std::vector<std::string> layers;
  std::vector<int64_t> epoch_numbers;  // column labels, from 1
  std::vector<std::vector<Cell>> cells;  // [layer][epoch]
  bool any_unrecorded = false;
};

// Layer names in the order a model lists them, features.3 before features.10 (the log's JSON keys
// come sorted as plain text): runs of digits compare as numbers.
bool natural_less(const std::string& a, const std::string& b) {
  auto digit = [](char ch) { return std::isdigit(static_cast<unsigned char>(ch)) != 0; };
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (digit(a[i]) && digit(b[j])) {
      size_t i_end = i, j_end = j;
      while (i_end < a.size() && digit(a[i_end])) ++i_end;
      while (j_end < b.size() && digit(b[j_end])) ++j_end;
      const std::string na = a.substr(i, i_end - i), nb = b.substr(j, j_end - j);
      if (na.size() != nb.size()) return na.size() < nb.size();
      if (na != nb) return na < nb;
      i = i_end;
      j = j_end;
    } else {
      if (a[i] != b[j]) return a[i] < b[j];
      ++i;
      ++j;
    }
  }
  return a.size() - i < b.size() - j;
}

HeatMap collect_underflow(const std::vector<json>& epochs) {
  HeatMap m;
  for (const json& e : epochs) {
    if (!e.contains("grad_underflow") || !e["grad_underflow"].is_object()) continue;
    for (const auto& [name, v] : e["grad_underflow"].items()) {
      if (std::find(m.layers.begin(), m.layers.end(), name) == m.layers.end()) m.layers.push_back(name);
    }
  }
  std::sort(m.layers.begin(), m.layers.end(), natural_less);
  for (size_t c = 0; c < epochs.size(); ++c) m.epoch_numbers.push_back(epochs[c].value("epoch", int64_t(c)) + 1);
  for (const std::string& layer : m.layers) {
    std::vector<Cell> row;
    for (const json& e : epochs) {
      Cell cell;
      const json u = e.value("grad_underflow", json::object());
      if (u.is_object() && u.contains(layer)) {
        cell = {true, u[layer].value("zero", 0.0), u[layer].value("subnormal", 0.0)};
      }
      m.any_unrecorded = m.any_unrecorded || !cell.recorded;
      row.push_back(cell);
    }
    m.cells.push_back(row);
  }
  return m;
}

constexpr int kCellHeight = 18, kMapTop = 30, kLegendBar = 144;

struct MapLayout {
  int label_width, cell_width, columns, rows;
  int grid_right() const { return label_width + cell_width * columns; }
  int grid_bottom() const { return kMapTop + kCellHeight * rows; }
};

// Row labels (layers), the cells with their hover text, column labels (epochs) and the axis title.
void draw_cells(std::ostringstream& out, const HeatMap& m, const MapLayout& g) {
  out << "<text x='" << g.label_width - 6 << "' y='" << kMapTop - 8
      << "' text-anchor='end' font-size='12'>layer</text>";
  for (size_t r = 0; r < m.layers.size(); ++r) {
    const int y = kMapTop + kCellHeight * static_cast<int>(r);
    out << "<text x='" << g.label_width - 6 << "' y='" << y + 13 << "' text-anchor='end' font-size='11'>"
        << escape(m.layers[r]) << "</text>";
    for (size_t c = 0; c < m.epoch_numbers.size(); ++c) {
      const Cell& cell = m.cells[r][c];
      out << "<rect class='cell' x='" << g.label_width + g.cell_width * static_cast<int>(c) << "' y='" << y
          << "' width='" << g.cell_width << "' height='" << kCellHeight << "' fill='"
          << (cell.recorded ? underflow_fill(cell.zero) : kUnrecordedFill) << "' stroke='" << kCellStroke
          << "' stroke-width='1'><title>" << escape(m.layers[r]) << ", epoch " << m.epoch_numbers[c] << ": ";
      if (cell.recorded) {
        out << svg::format_percent(cell.zero) << " of gradient elements exactly zero ("
            << svg::format_percent(cell.subnormal) << " subnormal)";
      } else {
        out << "not recorded";
      }
      out << "</title></rect>";
    }
  }
  const int every = std::max(1, (28 + g.cell_width - 1) / g.cell_width);  // labels at least 28 px apart
  for (size_t c = 0; c < m.epoch_numbers.size(); c += every) {
    out << "<text x='" << g.label_width + g.cell_width * static_cast<int>(c) + g.cell_width / 2 << "' y='"
        << g.grid_bottom() + 14 << "' text-anchor='middle' font-size='11'>" << m.epoch_numbers[c] << "</text>";
  }
  out << "<text x='" << (g.label_width + g.grid_right()) / 2 << "' y='" << g.grid_bottom() + 32
      << "' text-anchor='middle' font-size='12'>epoch</text>";
}

// A swatch with its label, below the colour bar.
void legend_swatch(std::ostringstream& out, int x, int y, const char* fill, const std::string& label) {
  out << "<rect x='" << x << "' y='" << y << "' width='14' height='14' fill='" << fill << "' stroke='"
      << kCellStroke << "'/><text x='" << x + 20 << "' y='" << y + 11 << "' font-size='11'>" << label << "</text>";
}

// The colour bar (log scale, a tick per decade), then the swatches for exactly 0 and unrecorded.
void draw_legend(std::ostringstream& out, int x, bool any_unrecorded) {
  out << "<defs><linearGradient id='underflow-scale' x1='0' y1='1' x2='0' y2='0'>";
  for (const ColourStop& s : kRamp) out << "<stop offset='" << s.at << "' stop-color='" << rgb(s, s, s.at) << "'/>";
  out << "</linearGradient></defs><g class='legend'><text x='" << x << "' y='" << kMapTop - 8
      << "' font-size='12'>share exactly zero (log scale)</text><rect x='" << x << "' y='" << kMapTop
      << "' width='14' height='" << kLegendBar << "' fill='url(#underflow-scale)' stroke='" << kCellStroke << "'/>";
  for (int d = 0; d >= kLowestDecade; --d) {
    const double y = kMapTop + kLegendBar * (static_cast<double>(-d) / -kLowestDecade);
    out << "<line x1='" << x + 14 << "' x2='" << x + 18 << "' y1='" << y << "' y2='" << y
        << "' stroke='#555'/><text x='" << x + 21 << "' y='" << y + 4 << "' font-size='11'>"
        << (d == kLowestDecade ? "&#8804; " : "") << svg::format_percent(std::pow(10.0, d)) << "</text>";
  }
  legend_swatch(out, x, kMapTop + kLegendBar + 12, kZeroFill, "0% (none)");
  if (any_unrecorded) legend_swatch(out, x, kMapTop + kLegendBar + 32, kUnrecordedFill, "not recorded");
  out << "</g>";
}

// Layers (rows) x epochs (columns), colour = fraction of exactly-zero gradient elements.
std::string heat_map(const std::vector<json>& epochs) {
  const HeatMap m = collect_underflow(epochs);
  std::ostringstream out;
  out << "<figure><figcaption>Gradient underflow: share of each layer's gradient elements that were exactly "
         "zero in the half format</figcaption>";
  if (m.layers.empty()) return out.str() + "<p>no gradient diagnostics recorded</p></figure>";
  size_t longest = 0;
  for (const std::string& name : m.layers) longest = std::max(longest, name.size());
  MapLayout g;
  g.label_width = std::max(60, static_cast<int>(longest) * 7 + 14);
  g.columns = static_cast<int>(epochs.size());
  g.rows = static_cast<int>(m.layers.size());
  g.cell_width = std::clamp(420 / std::max(1, g.columns), 10, 48);
  const int legend_x = g.grid_right() + 36;
  const int height = std::max(g.grid_bottom() + 42, kMapTop + kLegendBar + 56);
  out << "<svg width='" << legend_x + 170 << "' height='" << height << "' xmlns='http://www.w3.org/2000/svg'>";
  draw_cells(out, m, g);
  draw_legend(out, legend_x, m.any_unrecorded);
  out << "</svg><p class='note'>White: no element was zero. Any nonzero share is coloured, from pale orange "
         "(one element in a million or fewer) to dark red (all of them). Hover over a cell for its value.</p>";
  return out.str() + "</figure>";
}

}  // namespace

void write_report(const std::string& dir) {
  const std::string path = dir + "/metrics.jsonl";
  std::ifstream in(path);
  DEMI_CHECK(in.good(), "report: cannot read '", path, "'; run train_cifar with --out ", dir, " first");
  svg::Series loss, lr, scale, accuracy;
  std::vector<json> epochs;
  int64_t skipped_before = 0, line_number = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_number;
    if (line.empty()) continue;
    json r;
    try {
      r = json::parse(line);
    } catch (const std::exception& e) {
      DEMI_THROW("report: '", path, "' line ", line_number, " is not JSON (", e.what(), ")");
    }
    if (r.value("type", "") == "step") {
      const double step = r.value("step", 0.0);
      loss.x.push_back(step);
      loss.y.push_back(r.value("loss", 0.0));
      lr.x.push_back(step);
      lr.y.push_back(r.value("lr", 0.0));
      scale.x.push_back(step);
      scale.y.push_back(r.value("loss_scale", 1.0));
      const int64_t skipped = r.value("skipped_steps", int64_t{0});
      if (skipped > skipped_before) scale.marks.push_back(step);
      skipped_before = skipped;
    } else if (r.value("type", "") == "epoch") {
      accuracy.x.push_back(r.value("epoch", 0.0) + 1);
      accuracy.y.push_back(100.0 * r.value("test_accuracy", 0.0));
      epochs.push_back(r);
    }
  }
  std::ostringstream html;
  html << "<!doctype html><html><head><meta charset='utf-8'><title>demi training report</title><style>"
          "body{font-family:sans-serif;margin:24px}figure{display:inline-block;margin:8px;vertical-align:top}"
          "figcaption{font-weight:bold;margin-bottom:4px}.note{font-size:12px;color:#444;max-width:600px}"
          "</style></head><body><h1>Training report</h1><p>"
       << escape(dir) << "</p><p class='note'>Hover over a point or a cell to read its value.</p>"
       << svg::line_chart({"Train loss (per logged step)", "step", "train loss (cross-entropy)", ""}, loss, true, false)
       << svg::line_chart({"Test accuracy (per epoch)", "epoch", "test accuracy (%)", ""}, accuracy, true, false)
       << svg::line_chart({"Learning rate (per logged step)", "step", "learning rate", ""}, lr, true, false)
       << svg::line_chart({"Loss scale (per logged step; red dashes: a step was skipped since the previous point)",
                           "step", "loss scale (log scale)", "skipped step(s)"},
                          scale, true, true)
       << heat_map(epochs) << "</body></html>\n";
  write_file_atomically(dir + "/report.html", html.str());
}

}  // namespace demi::train
