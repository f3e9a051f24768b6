// SVG line plots, heat maps, bar charts and scatter plots (see svg.hpp). Coordinates are written
// with one decimal, which is below a pixel at any zoom a report is read at.
#include "ablate/svg.hpp"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <sstream>

namespace ablate::svg {
namespace {

std::string gen_id(const std::string& id, const char* prefix) {
  static std::atomic<int> counter{0};
  return id.empty() ? std::string(prefix) + std::to_string(++counter) : id;
}

std::string px(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f", v);
  return b;
}

std::string strip_zeros(std::string s) {
  auto e = s.find_first_of("eE");
  std::string mant = e == std::string::npos ? s : s.substr(0, e),
              exp = e == std::string::npos ? "" : s.substr(e);
  if (mant.find('.') != std::string::npos) {
    while (!mant.empty() && mant.back() == '0') mant.pop_back();
    if (!mant.empty() && mant.back() == '.') mant.pop_back();
  }
  if (!exp.empty()) {  // "e-05" -> "e-5", "e+04" -> "e4"
    std::string sign = (exp.size() > 1 && exp[1] == '-') ? "-" : "";
    size_t i = (exp.size() > 1 && (exp[1] == '-' || exp[1] == '+')) ? 2 : 1;
    while (i + 1 < exp.size() && exp[i] == '0') ++i;
    exp = "e" + sign + exp.substr(i);
  }
  return mant + exp;
}

// Tick labels: as many decimals as the tick step needs, so 1.750/1.775 stay distinct.
std::string tick_label(double v, double step) {
  if (std::fabs(v) < step * 1e-9) v = 0;
  const double mag = std::max(std::fabs(v), step);
  if (mag >= 1e6 || step < 1e-4) return format_number(v, 3);
  int dec = std::max(0, static_cast<int>(std::ceil(-std::log10(step) - 1e-9)));
  if (std::fabs(step * std::pow(10.0, dec) - std::round(step * std::pow(10.0, dec))) > 1e-6)
    ++dec;  // 2.5 steps
  char b[48];
  std::snprintf(b, sizeof b, "%.*f", dec, v);
  return strip_zeros(b);
}

struct Range {
  double lo = std::numeric_limits<double>::infinity(),
         hi = -std::numeric_limits<double>::infinity();
  void add(double v) {
    if (!std::isfinite(v)) return;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  bool empty() const { return !(lo <= hi); }
};

// Maps data values to axis space (log10 when the axis is logarithmic).
double to_axis(double v, bool log) {
  if (!log) return v;
  return v > 0 ? std::log10(v) : std::numeric_limits<double>::quiet_NaN();
}

struct Scale {
  double d0, d1, p0, p1;  // axis-space domain -> pixels
  double operator()(double v) const { return p0 + (v - d0) / (d1 - d0) * (p1 - p0); }
};

void finish_range(Range& r, const Axis& a, bool pad) {
  if (std::isfinite(a.min)) r.lo = to_axis(a.min, a.log);
  if (std::isfinite(a.max)) r.hi = to_axis(a.max, a.log);
  if (r.empty()) r.lo = 0, r.hi = 1;
  if (r.hi - r.lo < 1e-12 * std::max(1.0, std::fabs(r.hi))) {
    double d = r.hi == 0 ? 0.5 : std::fabs(r.hi) * 0.05;
    r.lo -= d;
    r.hi += d;
  } else if (pad) {
    double d = (r.hi - r.lo) * 0.04;
    if (!std::isfinite(a.min)) r.lo -= d;
    if (!std::isfinite(a.max)) r.hi += d;
  }
}

// Tick positions (in axis space) and their labels.
std::vector<std::pair<double, std::string>> axis_ticks(const Range& r, bool log, int target) {
  std::vector<std::pair<double, std::string>> out;
  if (log && r.hi - r.lo >= 1.0) {
    double step = std::max(1.0, std::ceil((r.hi - r.lo) / target));
    for (double k = std::ceil(r.lo / step) * step; k <= r.hi + 1e-9; k += step)
      out.emplace_back(k, format_number(std::pow(10.0, k), 3));
    return out;
  }
  if (log) {
    double lo = std::pow(10.0, r.lo), hi = std::pow(10.0, r.hi);
    auto t = nice_ticks(lo, hi, target);
    double step = t.size() > 1 ? t[1] - t[0] : hi - lo;
    for (double v : t)
      if (v > 0) out.emplace_back(std::log10(v), tick_label(v, step));
    return out;
  }
  auto t = nice_ticks(r.lo, r.hi, target);
  double step = t.size() > 1 ? t[1] - t[0] : r.hi - r.lo;
  for (double v : t) out.emplace_back(v, tick_label(v, step));
  return out;
}

// "M x y L x y ..." segments over the finite points.
std::string polyline(const std::vector<double>& xs, const std::vector<double>& ys, const Scale& sx,
                     const Scale& sy) {
  std::string d;
  bool pen = false;
  for (size_t i = 0; i < xs.size() && i < ys.size(); ++i) {
    if (!std::isfinite(xs[i]) || !std::isfinite(ys[i])) {
      pen = false;
      continue;
    }
    d += (pen ? " L" : (d.empty() ? "M" : " M")) + px(sx(xs[i])) + " " + px(sy(ys[i]));
    pen = true;
  }
  return d;
}

// Closed band polygons between lo and hi, one per run of finite points.
std::string band(const std::vector<double>& xs, const std::vector<double>& lo,
                 const std::vector<double>& hi, const Scale& sx, const Scale& sy) {
  std::string d;
  size_t n = std::min({xs.size(), lo.size(), hi.size()});
  size_t i = 0;
  while (i < n) {
    while (i < n && !(std::isfinite(xs[i]) && std::isfinite(lo[i]) && std::isfinite(hi[i]))) ++i;
    size_t j = i;
    while (j < n && std::isfinite(xs[j]) && std::isfinite(lo[j]) && std::isfinite(hi[j])) ++j;
    if (j > i) {
      for (size_t k = i; k < j; ++k)
        d += (k == i ? (d.empty() ? "M" : " M") : " L") + px(sx(xs[k])) + " " + px(sy(hi[k]));
      for (size_t k = j; k-- > i;) d += " L" + px(sx(xs[k])) + " " + px(sy(lo[k]));
      d += " Z";
    }
    i = j;
  }
  return d;
}

// Where the plot area sits in the picture: left and top offsets, width, height, and the
// height of the margin below it.
struct Frame {
  double L, T, pw, ph, B, W;  // W: the figure's width
};

// The width of `text` at font size `size`, and the font size (px) at which it fits `room`
// px, `size` at most and 8 at least (a character of sans-serif is about 0.6 of the size
// wide; bold 0.65): a long title or axis label (a baseline named by several swept values) is
// set smaller instead of cut off.
double text_width(const std::string& text, double size, double width = 0.6) {
  return width * size * static_cast<double>(text.size());
}
double fitting_font(const std::string& text, double room, double size, double width = 0.6) {
  return text_width(text, size, width) <= room
             ? size
             : std::max(8.0, room / (width * static_cast<double>(text.size())));
}

// A font size as the attribute says it: whole sizes without a decimal.
std::string font_size(double size) {
  return size == std::floor(size) ? std::to_string(static_cast<int>(size)) : px(size);
}

// Everything of an x-y plot but its marks: title, grid, tick labels, border, axis labels
// (log axes say so) and "no data" when there is nothing to draw.
void draw_frame(std::ostringstream& o, const std::string& title, const Axis& x, const Axis& y,
                const Range& xr, const Range& yr, const Scale& sx, const Scale& sy, const Frame& f,
                bool no_data) {
  const double L = f.L, T = f.T, pw = f.pw, ph = f.ph, B = f.B;
  if (!title.empty()) {  // centred on the figure when it is wider than the plot
    const double fs = fitting_font(title, f.W - 8, 14, 0.65);
    const bool wide = 0.65 * fs * static_cast<double>(title.size()) > pw;
    o << "<text x=\"" << px(wide ? f.W / 2 : L + pw / 2)
      << "\" y=\"22\" text-anchor=\"middle\" font-size=\"" << font_size(fs)
      << "\" font-weight=\"bold\">" << escape(title) << "</text>\n";
  }
  // Grid and ticks.
  const int xt = std::max(2, static_cast<int>(pw / 90)),
            yt = std::max(2, static_cast<int>(ph / 50));
  o << "<g class=\"grid\" stroke=\"#e6e6e6\" stroke-width=\"1\">\n";
  auto xticks = axis_ticks(xr, x.log, xt), yticks = axis_ticks(yr, y.log, yt);
  for (const auto& [v, label] : xticks)
    o << "<line x1=\"" << px(sx(v)) << "\" y1=\"" << px(T) << "\" x2=\"" << px(sx(v)) << "\" y2=\""
      << px(T + ph) << "\"/>\n";
  for (const auto& [v, label] : yticks)
    o << "<line x1=\"" << px(L) << "\" y1=\"" << px(sy(v)) << "\" x2=\"" << px(L + pw) << "\" y2=\""
      << px(sy(v)) << "\"/>\n";
  o << "</g>\n<g class=\"ticks\" fill=\"#444444\">\n";
  for (const auto& [v, label] : xticks)
    o << "<text x=\"" << px(sx(v)) << "\" y=\"" << px(T + ph + 16) << "\" text-anchor=\"middle\">"
      << escape(label) << "</text>\n";
  for (const auto& [v, label] : yticks)
    o << "<text x=\"" << px(L - 6) << "\" y=\"" << px(sy(v) + 4) << "\" text-anchor=\"end\">"
      << escape(label) << "</text>\n";
  o << "</g>\n";
  o << "<rect x=\"" << px(L) << "\" y=\"" << px(T) << "\" width=\"" << px(pw) << "\" height=\""
    << px(ph) << "\" fill=\"none\" stroke=\"#888888\"/>\n";
  if (!x.label.empty())
    o << "<text x=\"" << px(L + pw / 2) << "\" y=\"" << px(T + ph + B - 10)
      << "\" text-anchor=\"middle\">" << escape(x.label) << (x.log ? " (log)" : "") << "</text>\n";
  if (!y.label.empty()) {
    const std::string shown = y.label + (y.log ? " (log)" : "");
    const double fs = fitting_font(shown, ph + 2 * T, 12);
    o << "<text transform=\"translate(16 " << px(T + ph / 2)
      << ") rotate(-90)\" text-anchor=\"middle\""
      << (fs < 12 ? " font-size=\"" + font_size(fs) + "\"" : std::string()) << ">" << escape(shown)
      << "</text>\n";
  }
  if (no_data)
    o << "<text x=\"" << px(L + pw / 2) << "\" y=\"" << px(T + ph / 2)
      << "\" text-anchor=\"middle\" fill=\"#888888\">no data</text>\n";
}

}  // namespace

std::string escape(const std::string& t) {
  std::string o;
  o.reserve(t.size());
  for (char c : t) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      case '\'': o += "&#39;"; break;
      default: o += c;
    }
  }
  return o;
}

const char* palette(size_t i) {
  static const char* kColors[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                                  "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};
  return kColors[i % 10];
}

std::vector<double> nice_ticks(double lo, double hi, int target) {
  std::vector<double> t;
  if (!std::isfinite(lo) || !std::isfinite(hi) || hi < lo) return t;
  if (hi == lo) return {lo};
  const double raw = (hi - lo) / std::max(1, target);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = 10 * mag;
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0})
    if (m * mag >= raw * (1 - 1e-9)) {
      step = m * mag;
      break;
    }
  for (double k = std::ceil(lo / step - 1e-9); k * step <= hi + step * 1e-9; k += 1)
    t.push_back(k * step);
  return t;
}

std::string format_number(double v, int digits) {
  if (std::isnan(v)) return "n/a";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (v == 0) return "0";
  char b[48];
  const double a = std::fabs(v);
  if (a >= 1e6 || a < 1e-3) {
    std::snprintf(b, sizeof b, "%.*e", std::max(0, digits - 1), v);
    return strip_zeros(b);
  }
  int dec = std::max(0, digits - 1 - static_cast<int>(std::floor(std::log10(a))));
  std::snprintf(b, sizeof b, "%.*f", dec, v);
  return strip_zeros(b);
}

std::string viridis(double t) {
  static const double kStops[9][3] = {{68, 1, 84},    {71, 45, 123},  {59, 82, 139},
                                      {44, 114, 142}, {33, 145, 140}, {39, 173, 129},
                                      {94, 201, 98},  {170, 220, 50}, {253, 231, 37}};
  if (!std::isfinite(t)) t = 0;
  t = std::clamp(t, 0.0, 1.0) * 8.0;
  int i = std::min(7, static_cast<int>(t));
  double f = t - i;
  char b[8];
  int c[3];
  for (int k = 0; k < 3; ++k)
    c[k] = static_cast<int>(std::lround(kStops[i][k] * (1 - f) + kStops[i + 1][k] * f));
  std::snprintf(b, sizeof b, "#%02x%02x%02x", c[0], c[1], c[2]);
  return b;
}

namespace {

// Where a line plot's parts go: the plot area (a Frame), and the legend, right of the
// plot for short labels, else below it in rows so that the plot keeps its width.
struct LineLayout {
  Frame f;                     // B: the margin below the plot without the legend rows
  std::vector<size_t> listed;  // the series with a legend entry
  bool legend = false, legend_right = false;
  std::vector<std::pair<double, double>> below;  // legend entries below: x, y under the label
};

LineLayout line_layout(const LinePlot& p) {
  LineLayout l;
  const double W = p.width, H = p.height;
  size_t longest = 0;
  for (size_t i = 0; i < p.series.size(); ++i)
    if (!p.series[i].thin)
      longest = std::max(longest, p.series[i].label.size()), l.listed.push_back(i);
  l.legend = p.legend && !l.listed.empty() && longest > 0;
  l.legend_right = l.legend && longest <= 18;
  const double legend_w = l.legend_right ? 36.0 + 7.0 * static_cast<double>(longest) : 0;
  const double L = 64, R = 16 + legend_w, T = p.title.empty() ? 14 : 36,
               B0 = p.x.label.empty() ? 30 : 48;
  const double pw = std::max(20.0, W - L - R);
  double legend_h = 0;
  if (l.legend && !l.legend_right) {
    double x = 0, row = 0;
    for (size_t i : l.listed) {
      const double w = 40.0 + 7.0 * static_cast<double>(p.series[i].label.size());
      if (x > 0 && x + w > pw) x = 0, row += 1;
      l.below.emplace_back(x, row * 18.0);
      x += w;
    }
    legend_h = (row + 1) * 18.0 + 6;
  }
  const double ph = std::max(20.0, H - T - (B0 + legend_h));
  l.f = {L, T, pw, ph, B0, W};
  return l;
}

// The axis-space ranges of the finite points (and their bands) of every series.
std::pair<Range, Range> data_ranges(const LinePlot& p) {
  Range xr, yr;
  for (const auto& s : p.series) {
    for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
      double x = to_axis(s.x[i], p.x.log), y = to_axis(s.y[i], p.y.log);
      if (!std::isfinite(x)) continue;
      bool any = std::isfinite(y);
      if (any) yr.add(y);
      if (i < s.lo.size() && i < s.hi.size()) {
        double lo = to_axis(s.lo[i], p.y.log), hi = to_axis(s.hi[i], p.y.log);
        if (std::isfinite(lo) && std::isfinite(hi)) yr.add(lo), yr.add(hi), any = true;
      }
      if (any) xr.add(x);
    }
  }
  return {xr, yr};
}

std::vector<double> axis_values(const std::vector<double>& v, bool log) {
  std::vector<double> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = to_axis(v[i], log);
  return r;
}

// Bands under all lines, then the lines, clipped to the plot area.
void draw_series(std::ostringstream& o, const LinePlot& p, const std::string& id, const Scale& sx,
                 const Scale& sy) {
  o << "<g clip-path=\"url(#" << escape(id) << "-clip)\">\n";
  for (size_t i = 0; i < p.series.size(); ++i) {
    const Series& s = p.series[i];
    if (s.lo.empty() || s.hi.empty()) continue;
    std::string d = band(axis_values(s.x, p.x.log), axis_values(s.lo, p.y.log),
                         axis_values(s.hi, p.y.log), sx, sy);
    if (!d.empty())
      o << "<path class=\"band\" d=\"" << d << "\" fill=\""
        << (s.color.empty() ? palette(i) : s.color)
        << "\" fill-opacity=\"0.2\" stroke=\"none\"/>\n";
  }
  for (size_t i = 0; i < p.series.size(); ++i) {
    const Series& s = p.series[i];
    std::string d = polyline(axis_values(s.x, p.x.log), axis_values(s.y, p.y.log), sx, sy);
    if (d.empty()) continue;
    o << "<path class=\"" << (s.thin ? "thin" : "line") << "\" d=\"" << d
      << "\" fill=\"none\" stroke=\"" << (s.color.empty() ? palette(i) : s.color)
      << (s.thin ? "\" stroke-width=\"1\" stroke-opacity=\"0.45" : "\" stroke-width=\"1.8")
      << "\" stroke-linejoin=\"round\"" << (s.dashed ? " stroke-dasharray=\"6 4\"" : "")
      << "><title>" << escape(s.label) << "</title></path>\n";
  }
  o << "</g>\n";
}

void draw_legend(std::ostringstream& o, const LinePlot& p, const LineLayout& l) {
  const Frame& f = l.f;
  o << "<g class=\"legend\">\n";
  for (size_t k = 0; k < l.listed.size(); ++k) {
    const size_t i = l.listed[k];
    const Series& s = p.series[i];
    const std::string c = s.color.empty() ? palette(i) : s.color;
    const double lx = l.legend_right ? f.L + f.pw + 14 : f.L + l.below[k].first;
    const double ly = l.legend_right ? f.T + 8 + 20.0 * static_cast<double>(k)
                                     : f.T + f.ph + f.B + 4 + l.below[k].second;
    if (!s.lo.empty())
      o << "<rect x=\"" << px(lx) << "\" y=\"" << px(ly - 6)
        << "\" width=\"24\" height=\"12\" fill=\"" << c << "\" fill-opacity=\"0.2\"/>\n";
    o << "<line x1=\"" << px(lx) << "\" y1=\"" << px(ly) << "\" x2=\"" << px(lx + 24) << "\" y2=\""
      << px(ly) << "\" stroke=\"" << c << "\" stroke-width=\"2\""
      << (s.dashed ? " stroke-dasharray=\"6 4\"" : "") << "/>\n";
    o << "<text x=\"" << px(lx + 30) << "\" y=\"" << px(ly + 4) << "\">" << escape(s.label)
      << "</text>\n";
  }
  o << "</g>\n";
}

}  // namespace

std::string line_plot(const LinePlot& p) {
  const std::string id = gen_id(p.id, "plot");
  const LineLayout l = line_layout(p);
  const Frame& f = l.f;
  auto [xr, yr] = data_ranges(p);
  const bool no_data = xr.empty();
  finish_range(xr, p.x, false);
  finish_range(yr, p.y, true);
  Scale sx{xr.lo, xr.hi, f.L, f.L + f.pw}, sy{yr.lo, yr.hi, f.T + f.ph, f.T};

  std::ostringstream o;
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"ablate-plot\" width=\"" << p.width
    << "\" height=\"" << p.height << "\" viewBox=\"0 0 " << p.width << " " << p.height
    << "\" font-family=\"sans-serif\" font-size=\"12\" role=\"img\">\n";
  o << "<title>" << escape(p.title.empty() ? "plot" : p.title) << "</title>\n";
  o << "<defs><clipPath id=\"" << escape(id) << "-clip\"><rect x=\"" << px(f.L) << "\" y=\""
    << px(f.T) << "\" width=\"" << px(f.pw) << "\" height=\"" << px(f.ph)
    << "\"/></clipPath></defs>\n";
  o << "<rect x=\"0\" y=\"0\" width=\"" << p.width << "\" height=\"" << p.height
    << "\" fill=\"#ffffff\"/>\n";
  draw_frame(o, p.title, p.x, p.y, xr, yr, sx, sy, f, no_data);
  draw_series(o, p, id, sx, sy);
  if (l.legend) draw_legend(o, p, l);
  o << "</svg>\n";
  return o.str();
}

namespace {

// Where a heat map's parts go, and its colour range.
struct HeatLayout {
  double fs, gap;       // label font size; gap between cells
  bool vertical;        // column labels written vertically (wider than their cell)
  double col_label_h;   // height of the column labels
  double L, T, gw, gh;  // grid: left, top, width, height
  double bar_x, bar_h;  // colour bar
  double W, H;          // the picture
  Range r;              // values -> colours
  std::string hi_label, lo_label;
};

HeatLayout heat_layout(const HeatMap& h) {
  HeatLayout l;
  const size_t rows = h.row_labels.size(), cols = h.col_labels.size();
  const double cw = h.cell_width, ch = h.cell_height;
  // Small cells get small labels; a 1-px gap keeps them apart, 2 px for the large ones.
  l.fs = std::clamp(std::min(cw, ch) * 0.75, 7.0, 12.0);
  l.gap = std::min(cw, ch) >= 20 ? 2.0 : (std::min(cw, ch) >= 8 ? 1.0 : 0.0);
  size_t row_chars = 0, col_chars = 0;
  for (const auto& r : h.row_labels) row_chars = std::max(row_chars, r.size());
  for (const auto& c : h.col_labels) col_chars = std::max(col_chars, c.size());
  l.vertical = static_cast<double>(col_chars) * l.fs * 0.62 + 3 > cw;
  l.col_label_h = l.vertical ? 8 + static_cast<double>(col_chars) * l.fs * 0.6 : l.fs + 6;
  l.L = 20 + (h.y_label.empty() ? 0 : 20) + l.fs * 0.6 * static_cast<double>(row_chars);
  l.gw = cw * static_cast<double>(cols);
  l.gh = ch * static_cast<double>(rows);
  // The row axis' label is written up the grid's middle (12 px bold): a grid lower than it
  // moves down so that it starts inside the picture.
  const double y_label_half = 0.5 * text_width(h.y_label, 12, 0.65);
  l.T = std::max(h.title.empty() ? 12.0 : 36.0, y_label_half + 4 - l.gh / 2);
  l.bar_h = std::max(l.gh - l.gap, 40.0);
  for (const auto& row : h.values)
    for (double v : row) l.r.add(v);
  if (std::isfinite(h.min)) l.r.lo = h.min;
  if (std::isfinite(h.max)) l.r.hi = h.max;
  l.hi_label = l.r.empty() ? "" : format_number(l.r.hi, h.digits);
  l.lo_label = l.r.empty() ? "" : format_number(l.r.lo, h.digits);
  const double bar_labels_w =
      7.0 * static_cast<double>(std::max(l.hi_label.size(), l.lo_label.size())) + 8;
  l.bar_x = l.L + l.gw + 24;
  l.W = std::max(l.bar_x + 18 + bar_labels_w, l.L + 20 + 8.0 * static_cast<double>(h.title.size()));
  l.H = std::max(l.T + std::max(l.gh, l.bar_h) + l.col_label_h + 8 + (h.x_label.empty() ? 4 : 22),
                 l.T + l.gh / 2 + y_label_half + 4);
  return l;
}

// One row of cells with its label; a cell's title and text give its value.
void draw_heat_row(std::ostringstream& o, const HeatMap& h, const HeatLayout& l, size_t i) {
  const double cw = h.cell_width, ch = h.cell_height, fs = l.fs, gap = l.gap;
  auto t_of = [&](double v) {
    double t = l.r.hi > l.r.lo ? std::clamp((v - l.r.lo) / (l.r.hi - l.r.lo), 0.0, 1.0) : 0.5;
    return h.low_is_bright ? 1.0 - t : t;
  };
  const double y = l.T + ch * static_cast<double>(i);
  o << "<text x=\"" << px(l.L - 6) << "\" y=\"" << px(y + ch / 2 + fs * 0.35)
    << "\" text-anchor=\"end\" font-size=\"" << px(fs) << "\">" << escape(h.row_labels[i])
    << "</text>\n";
  for (size_t j = 0; j < h.col_labels.size(); ++j) {
    const double x = l.L + cw * static_cast<double>(j);
    double v = (i < h.values.size() && j < h.values[i].size())
                   ? h.values[i][j]
                   : std::numeric_limits<double>::quiet_NaN();
    const bool ok = std::isfinite(v), blank = ok && h.zero_is_blank && v == 0.0;
    const double t = ok ? t_of(v) : 0;
    const std::string fill = blank ? "#ffffff" : ok ? viridis(t) : "#dddddd";
    o << "<rect class=\"cell\" data-row=\"" << i << "\" data-col=\"" << j << "\" data-value=\""
      << (ok ? format_number(v, 6) : std::string("nan")) << "\" x=\"" << px(x) << "\" y=\"" << px(y)
      << "\" width=\"" << px(cw - gap) << "\" height=\"" << px(ch - gap) << "\" fill=\"" << fill
      << "\"";
    // Blank cells are most of a causal attention map: no tooltip, to keep pages small.
    if (blank) o << "/>\n";
    else
      o << "><title>" << escape(h.row_labels[i]) << ", " << escape(h.col_labels[j]) << ": "
        << format_number(v, h.digits) << "</title></rect>\n";
    if (h.show_values && !blank)
      o << "<text x=\"" << px(x + cw / 2 - gap / 2) << "\" y=\"" << px(y + ch / 2 + 3)
        << "\" text-anchor=\"middle\" fill=\"" << (ok && t < 0.6 ? "#ffffff" : "#111111") << "\">"
        << escape(ok ? format_number(v, h.digits) : "n/a") << "</text>\n";
  }
}

// The column labels under the grid and the axis labels.
void draw_heat_labels(std::ostringstream& o, const HeatMap& h, const HeatLayout& l) {
  const double cw = h.cell_width, fs = l.fs, T = l.T, gh = l.gh;
  for (size_t j = 0; j < h.col_labels.size(); ++j) {
    const double cx = l.L + cw * static_cast<double>(j) + cw / 2 - l.gap / 2;
    if (l.vertical)
      o << "<text transform=\"translate(" << px(cx + fs * 0.35) << " " << px(T + gh + 6)
        << ") rotate(-90)\" text-anchor=\"end\" font-size=\"" << px(fs) << "\">"
        << escape(h.col_labels[j]) << "</text>\n";
    else
      o << "<text x=\"" << px(cx) << "\" y=\"" << px(T + gh + fs + 2)
        << "\" text-anchor=\"middle\" font-size=\"" << px(fs) << "\">" << escape(h.col_labels[j])
        << "</text>\n";
  }
  if (!h.x_label.empty())
    o << "<text x=\"" << px(l.L + l.gw / 2) << "\" y=\"" << px(T + gh + l.col_label_h + 16)
      << "\" text-anchor=\"middle\" font-weight=\"bold\">" << escape(h.x_label) << "</text>\n";
  if (!h.y_label.empty())
    o << "<text transform=\"translate(14 " << px(T + gh / 2)
      << ") rotate(-90)\" text-anchor=\"middle\" font-weight=\"bold\">" << escape(h.y_label)
      << "</text>\n";
}

}  // namespace

std::string heat_map(const HeatMap& h) {
  const std::string id = gen_id(h.id, "heat");
  const HeatLayout l = heat_layout(h);
  std::ostringstream o;
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"ablate-heatmap\" width=\"" << px(l.W)
    << "\" height=\"" << px(l.H) << "\" viewBox=\"0 0 " << px(l.W) << " " << px(l.H)
    << "\" font-family=\"sans-serif\" font-size=\"12\" role=\"img\">\n";
  o << "<title>" << escape(h.title.empty() ? "heat map" : h.title) << "</title>\n";
  o << "<defs><linearGradient id=\"" << escape(id) << "-bar\" x1=\"0\" y1=\"1\" x2=\"0\" y2=\"0\">";
  for (int k = 0; k <= 10; ++k) {
    double t = k / 10.0;
    o << "<stop offset=\"" << t << "\" stop-color=\"" << viridis(h.low_is_bright ? 1.0 - t : t)
      << "\"/>";
  }
  o << "</linearGradient></defs>\n";
  o << "<rect x=\"0\" y=\"0\" width=\"" << px(l.W) << "\" height=\"" << px(l.H)
    << "\" fill=\"#ffffff\"/>\n";
  if (!h.title.empty())  // over the grid, or further right when it is wider than the grid and its
                         // labels
    o << "<text x=\"" << px(std::max(l.L + l.gw / 2, 8 + 4.0 * static_cast<double>(h.title.size())))
      << "\" y=\"22\" text-anchor=\"middle\" font-size=\"14\" font-weight=\"bold\">"
      << escape(h.title) << "</text>\n";
  for (size_t i = 0; i < h.row_labels.size(); ++i) draw_heat_row(o, h, l, i);
  draw_heat_labels(o, h, l);
  if (!l.r.empty()) {
    o << "<rect x=\"" << px(l.bar_x) << "\" y=\"" << px(l.T) << "\" width=\"14\" height=\""
      << px(l.bar_h) << "\" fill=\"url(#" << escape(id) << "-bar)\"/>\n";
    o << "<text x=\"" << px(l.bar_x + 18) << "\" y=\"" << px(l.T + 10) << "\">" << l.hi_label
      << "</text>\n";
    o << "<text x=\"" << px(l.bar_x + 18) << "\" y=\"" << px(l.T + l.bar_h - 2) << "\">"
      << l.lo_label << "</text>\n";
  }
  o << "</svg>\n";
  return o.str();
}

std::string bar_chart(const BarChart& b) {
  const size_t n = std::min(b.labels.size(), b.values.size());
  size_t label_chars = 0;
  for (size_t i = 0; i < n; ++i) label_chars = std::max(label_chars, b.labels[i].size());
  const double L = 16 + 7.5 * static_cast<double>(label_chars), R = 64,
               T = b.title.empty() ? 12 : 36;
  const double bh = b.bar_height, W = b.width, pw = std::max(40.0, W - L - R);
  const double H = T + bh * static_cast<double>(n) + (b.value_label.empty() ? 28 : 46);
  Range r;
  r.add(0);
  for (size_t i = 0; i < n; ++i) r.add(b.values[i]);
  if (r.hi <= r.lo) r.hi = r.lo + 1;
  const Scale sx{r.lo, r.hi, L, L + pw};
  const std::string color = b.color.empty() ? palette(0) : b.color;

  std::ostringstream o;
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"ablate-bars\" width=\"" << px(W)
    << "\" height=\"" << px(H) << "\" viewBox=\"0 0 " << px(W) << " " << px(H)
    << "\" font-family=\"sans-serif\" font-size=\"12\" role=\"img\">\n";
  o << "<title>" << escape(b.title.empty() ? "bar chart" : b.title) << "</title>\n";
  o << "<rect x=\"0\" y=\"0\" width=\"" << px(W) << "\" height=\"" << px(H)
    << "\" fill=\"#ffffff\"/>\n";
  if (!b.title.empty())
    o << "<text x=\"" << px(L + pw / 2)
      << "\" y=\"22\" text-anchor=\"middle\" font-size=\"14\" font-weight=\"bold\">"
      << escape(b.title) << "</text>\n";
  const double bottom = T + bh * static_cast<double>(n);
  auto ticks = axis_ticks(r, false, std::max(2, static_cast<int>(pw / 90)));
  o << "<g class=\"grid\" stroke=\"#e6e6e6\">\n";
  for (const auto& [v, label] : ticks)
    o << "<line x1=\"" << px(sx(v)) << "\" y1=\"" << px(T) << "\" x2=\"" << px(sx(v)) << "\" y2=\""
      << px(bottom) << "\"/>\n";
  o << "</g>\n<g class=\"ticks\" fill=\"#444444\">\n";
  for (const auto& [v, label] : ticks)
    o << "<text x=\"" << px(sx(v)) << "\" y=\"" << px(bottom + 15) << "\" text-anchor=\"middle\">"
      << escape(label) << "</text>\n";
  o << "</g>\n";
  for (size_t i = 0; i < n; ++i) {
    const double y = T + bh * static_cast<double>(i), v = b.values[i];
    const double x0 = sx(std::isfinite(v) ? std::min(0.0, v) : 0),
                 x1 = sx(std::isfinite(v) ? std::max(0.0, v) : 0);
    o << "<text x=\"" << px(L - 6) << "\" y=\"" << px(y + bh / 2 + 4) << "\" text-anchor=\"end\">"
      << escape(b.labels[i]) << "</text>\n";
    o << "<rect class=\"bar\" data-label=\"" << escape(b.labels[i]) << "\" data-value=\""
      << format_number(v, 6) << "\" x=\"" << px(x0) << "\" y=\"" << px(y + 2) << "\" width=\""
      << px(std::max(0.0, x1 - x0)) << "\" height=\"" << px(bh - 4) << "\" fill=\"" << color
      << "\"><title>" << escape(b.labels[i]) << ": " << format_number(v, b.digits)
      << "</title></rect>\n";
    o << "<text x=\"" << px(x1 + 4) << "\" y=\"" << px(y + bh / 2 + 4) << "\" fill=\"#444444\">"
      << format_number(v, b.digits) << "</text>\n";
  }
  o << "<line x1=\"" << px(sx(0)) << "\" y1=\"" << px(T) << "\" x2=\"" << px(sx(0)) << "\" y2=\""
    << px(bottom) << "\" stroke=\"#888888\"/>\n";
  if (!b.value_label.empty())
    o << "<text x=\"" << px(L + pw / 2) << "\" y=\"" << px(bottom + 36)
      << "\" text-anchor=\"middle\">" << escape(b.value_label) << "</text>\n";
  o << "</svg>\n";
  return o.str();
}

std::string scatter_plot(const ScatterPlot& p) {
  const double W = p.width, H = p.height;
  const double L = 56, R = 16, T = p.title.empty() ? 14 : 36, B = p.x.label.empty() ? 30 : 48;
  const double pw = std::max(20.0, W - L - R), ph = std::max(20.0, H - T - B);
  const size_t n = std::min(p.xs.size(), p.ys.size());
  Range xr, yr;
  for (size_t i = 0; i < n; ++i)
    if (std::isfinite(p.xs[i]) && std::isfinite(p.ys[i])) xr.add(p.xs[i]), yr.add(p.ys[i]);
  const bool no_data = xr.empty();
  finish_range(xr, p.x, true);
  finish_range(yr, p.y, true);
  const Scale sx{xr.lo, xr.hi, L, L + pw}, sy{yr.lo, yr.hi, T + ph, T};

  std::ostringstream o;
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"ablate-scatter\" width=\"" << p.width
    << "\" height=\"" << p.height << "\" viewBox=\"0 0 " << p.width << " " << p.height
    << "\" font-family=\"sans-serif\" font-size=\"12\" role=\"img\">\n";
  o << "<title>" << escape(p.title.empty() ? "scatter plot" : p.title) << "</title>\n";
  o << "<rect x=\"0\" y=\"0\" width=\"" << p.width << "\" height=\"" << p.height
    << "\" fill=\"#ffffff\"/>\n";
  draw_frame(o, p.title, p.x, p.y, xr, yr, sx, sy, {L, T, pw, ph, B, W}, no_data);
  o << "<g class=\"points\">\n";
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(p.xs[i]) || !std::isfinite(p.ys[i])) continue;
    const std::string label = i < p.labels.size() ? p.labels[i] : "";
    const std::string c = i < p.colors.size() && !p.colors[i].empty() ? p.colors[i] : palette(0);
    const double x = sx(p.xs[i]), y = sy(p.ys[i]);
    o << "<circle class=\"point\" data-label=\"" << escape(label) << "\" cx=\"" << px(x)
      << "\" cy=\"" << px(y) << "\" r=\"2.5\" fill=\"" << c << "\" fill-opacity=\"0.7\"><title>"
      << escape(label) << " (" << format_number(p.xs[i], 4) << ", " << format_number(p.ys[i], 4)
      << ")</title></circle>\n";
    if (!label.empty())
      o << "<text x=\"" << px(x + 3.5) << "\" y=\"" << px(y - 3)
        << "\" font-size=\"11\" fill=\"#222222\">" << escape(label) << "</text>\n";
  }
  o << "</g>\n</svg>\n";
  return o.str();
}

}  // namespace ablate::svg
