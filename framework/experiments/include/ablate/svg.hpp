// Self-contained SVG charts for HTML reports (sweep reports, run inspection): line plots
// with optional bands (mean line, min-max or +-std band), axes with "nice" ticks, a
// legend and labels; heat maps with a colour bar; horizontal bar charts; labelled scatter
// plots. Output is a standalone <svg> element: no script, no external fonts or styles.
#pragma once
#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace ablate::svg {

// One line of a plot. NaN values in y break the line; lo/hi (same length as x, or empty)
// draw a translucent band around it.
struct Series {
  std::string label;
  std::vector<double> x, y;
  std::vector<double> lo, hi;
  std::string color;  // "" = palette(index in the plot)
  bool dashed = false;
  bool thin = false;  // a faint 1-px line without a legend entry (e.g. one seed's run)
};

struct Axis {
  std::string label;
  bool log = false;                                       // log10 scale (values <= 0 are dropped)
  double min = std::numeric_limits<double>::quiet_NaN();  // NaN = from the data
  double max = std::numeric_limits<double>::quiet_NaN();
};

struct LinePlot {
  std::string id;  // unique within the page (clip-path ids); "" = generated
  std::string title;
  Axis x, y;
  std::vector<Series> series;
  int width = 640, height = 380;
  bool legend = true;
};
std::string line_plot(const LinePlot& plot);

// A matrix of values as coloured cells (viridis), values printed in the cells. Every
// cell is a <rect class="cell" data-row data-col data-value> (data-value "nan" or the
// value with 6 significant digits), so that tests and scripts can read the numbers back.
struct HeatMap {
  std::string id, title, x_label, y_label;
  std::vector<std::string> row_labels, col_labels;
  std::vector<std::vector<double>> values;  // [row][col]; NaN = no value (grey cell)
  bool low_is_bright = false;               // e.g. losses: the best (lowest) cell brightest
  int cell_width = 96, cell_height = 44;
  int digits = 4;              // significant digits of the printed values
  bool show_values = true;     // false: colour only (large matrices)
  bool zero_is_blank = false;  // exact zeros drawn white (masked attention)
  double min = std::numeric_limits<double>::quiet_NaN();  // colour range; NaN = from the data
  double max = std::numeric_limits<double>::quiet_NaN();
};
std::string heat_map(const HeatMap& map);

// Horizontal bars, one row per label (top to bottom), values from 0 (or a negative min).
// Each bar is a <rect class="bar" data-label data-value>.
struct BarChart {
  std::string id, title, value_label;
  std::vector<std::string> labels;
  std::vector<double> values;
  std::string color;  // "" = palette(0)
  int width = 520, bar_height = 18;
  int digits = 3;
};
std::string bar_chart(const BarChart& chart);

// Points with a text label next to each (e.g. tokens in a 2-D embedding map). Each point
// is a <circle class="point" data-label>.
struct ScatterPlot {
  std::string id, title;
  Axis x, y;
  std::vector<double> xs, ys;
  std::vector<std::string> labels;  // one per point, or empty
  std::vector<std::string> colors;  // one per point, or empty (palette(0))
  int width = 560, height = 480;
};
std::string scatter_plot(const ScatterPlot& plot);

// Helpers, exposed for tests and for other pages.
std::string escape(const std::string& text);  // XML/HTML text and attribute escaping
const char* palette(size_t i);                // Tableau-10 colours, cycling
// About `target` round tick values (1, 2, 2.5 or 5 x 10^k steps) covering [lo, hi].
std::vector<double> nice_ticks(double lo, double hi, int target = 6);
std::string format_number(double v,
                          int digits = 4);  // shortest of fixed/exponent, no trailing zeros
// Viridis colour for t in [0, 1] as "#rrggbb".
std::string viridis(double t);

}  // namespace ablate::svg
