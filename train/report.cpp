// write_report: metrics.jsonl -> report.html with hand-written SVG (a polyline per curve, a grid
// of rects for the heat map), so the page opens anywhere without scripts or a network.
#include "train/report.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "framework/core/error.h"
#include "framework/serialize/safetensors.h"

namespace demi::train {
namespace {

using json = nlohmann::json;

struct Series {
  std::vector<double> x, y;
  std::vector<double> marks;  // x positions to mark (skipped steps)
};

std::string escape(const std::string& s) {
  std::string out;
  for (char ch : s) {
    if (ch == '<') out += "&lt;";
    else if (ch == '>') out += "&gt;";
    else if (ch == '&') out += "&amp;";
    else out += ch;
  }
  return out;
}

// A 560x200 line chart; log_y for quantities spanning decades (the loss scale).
std::string chart(const std::string& title, const Series& s, bool log_y) {
  const double w = 560, h = 200, left = 60, bottom = 30, top = 24;
  std::ostringstream out;
  out << "<figure><figcaption>" << escape(title) << "</figcaption><svg width='" << w << "' height='" << h
      << "' xmlns='http://www.w3.org/2000/svg'><rect x='" << left << "' y='" << top << "' width='" << w - left - 10
      << "' height='" << h - top - bottom << "' fill='none' stroke='#ccc'/>";
  if (s.x.empty()) return out.str() + "<text x='70' y='100'>no data</text></svg></figure>";
  auto fy = [&](double v) { return log_y ? std::log10(std::max(v, 1e-30)) : v; };
  double x0 = s.x.front(), x1 = s.x.back(), y0 = fy(s.y[0]), y1 = y0;
  for (double v : s.y) {
    y0 = std::min(y0, fy(v));
    y1 = std::max(y1, fy(v));
  }
  if (x1 == x0) x1 = x0 + 1;
  if (y1 == y0) y1 = y0 + 1;
  auto px = [&](double x) { return left + (x - x0) / (x1 - x0) * (w - left - 10); };
  auto py = [&](double y) { return top + (1 - (fy(y) - y0) / (y1 - y0)) * (h - top - bottom); };
  out << "<polyline fill='none' stroke='#1f77b4' stroke-width='1.5' points='";
  for (size_t i = 0; i < s.x.size(); ++i) out << px(s.x[i]) << "," << py(s.y[i]) << " ";
  out << "'/>";
  for (double m : s.marks) {
    out << "<line x1='" << px(m) << "' x2='" << px(m) << "' y1='" << top << "' y2='" << h - bottom
        << "' stroke='#d62728' stroke-dasharray='3,2'/>";
  }
  auto label = [&](double v) {
    std::ostringstream l;
    l << std::setprecision(3) << (log_y ? std::pow(10.0, v) : v);
    return l.str();
  };
  out << "<text x='4' y='" << top + 10 << "' font-size='11'>" << label(y1) << "</text><text x='4' y='" << h - bottom
      << "' font-size='11'>" << label(y0) << "</text><text x='" << left << "' y='" << h - 8 << "' font-size='11'>"
      << x0 << "</text><text x='" << w - 60 << "' y='" << h - 8 << "' font-size='11'>" << x1 << "</text>";
  return out.str() + "</svg></figure>";
}

// Layers (rows) x epochs (columns), colour = fraction of exactly-zero gradient elements.
std::string heat_map(const std::vector<json>& epochs) {
  std::vector<std::string> layers;
  for (const json& e : epochs) {
    if (!e.contains("grad_underflow")) continue;
    for (const auto& [name, v] : e["grad_underflow"].items()) {
      if (std::find(layers.begin(), layers.end(), name) == layers.end()) layers.push_back(name);
    }
  }
  std::ostringstream out;
  out << "<figure><figcaption>Fraction of gradient elements exactly zero in the half format (layer x "
         "epoch; white 0, red 1)</figcaption>";
  if (layers.empty()) return out.str() + "<p>no gradient diagnostics recorded</p></figure>";
  const int cell = 18, label_width = 180;
  out << "<svg width='" << label_width + cell * epochs.size() + 10 << "' height='" << cell * layers.size() + 24
      << "' xmlns='http://www.w3.org/2000/svg'>";
  for (size_t r = 0; r < layers.size(); ++r) {
    out << "<text x='0' y='" << cell * r + 13 << "' font-size='11'>" << escape(layers[r]) << "</text>";
    for (size_t c = 0; c < epochs.size(); ++c) {
      const json& u = epochs[c].value("grad_underflow", json::object());
      const double z = u.contains(layers[r]) ? u[layers[r]].value("zero", 0.0) : 0.0;
      const int g = static_cast<int>(255 * (1 - std::clamp(z, 0.0, 1.0)));
      out << "<rect x='" << label_width + cell * c << "' y='" << cell * r << "' width='" << cell - 1 << "' height='"
          << cell - 1 << "' fill='rgb(255," << g << "," << g << ")'><title>" << escape(layers[r]) << ", epoch "
          << c + 1 << ": " << z << "</title></rect>";
    }
  }
  return out.str() + "</svg></figure>";
}

}  // namespace

void write_report(const std::string& dir) {
  const std::string path = dir + "/metrics.jsonl";
  std::ifstream in(path);
  DEMI_CHECK(in.good(), "report: cannot read '", path, "'; run train_cifar with --out ", dir, " first");
  Series loss, lr, scale, accuracy;
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
          "body{font-family:sans-serif;margin:24px}figure{display:inline-block;margin:8px}"
          "figcaption{font-weight:bold;margin-bottom:4px}</style></head><body><h1>Training report</h1><p>"
       << escape(dir) << "</p>"
       << chart("Train loss (per logged step)", loss, false) << chart("Test accuracy % (per epoch)", accuracy, false)
       << chart("Learning rate", lr, false)
       << chart("Loss scale (log; red: steps after which a skip was counted)", scale, true) << heat_map(epochs)
       << "</body></html>\n";
  write_file_atomically(dir + "/report.html", html.str());
}

}  // namespace demi::train
