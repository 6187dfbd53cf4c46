// write_report: metrics.jsonl -> report.html with hand-written SVG (train/report_svg.h for the line
// charts, a grid of rects for the heat map), so the page opens anywhere without scripts or a network.
#include "train/report.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
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
