// The inspection page (see inspect.hpp): inline SVG from svg.hpp and the sweep report's
// stylesheet; no script. Every figure carries data-plot="<kind>" so that tests and
// readers can find it.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <numeric>
#include <sstream>

#include "ablate/inspect.hpp"
#include "ablate/report.hpp"
#include "ablate/svg.hpp"

namespace ablate {
namespace {

using svg::escape;

std::string figure(const std::string& kind, const std::string& svg_text,
                   const std::string& caption) {
  return "<figure data-plot=\"" + escape(kind) + "\">" + svg_text +
         (caption.empty() ? "" : "<figcaption>" + caption + "</figcaption>") + "</figure>\n";
}

// Heat-map cell size: about 380 px for the whole matrix (two maps side by side), 7 to 28 px a cell.
int cell_size(int64_t n) {
  return static_cast<int>(std::clamp<int64_t>(380 / std::max<int64_t>(1, n), 7, 28));
}

// Point colours by the kind of the token's first character.
std::string token_color(const std::string& label) {
  if (label.empty()) return svg::palette(6);
  const unsigned char c = static_cast<unsigned char>(label[0]);
  if (label.rfind("\\", 0) == 0 || label.rfind("\xE2\x90\xA3", 0) == 0)
    return svg::palette(2);  // whitespace, control
  if (std::isdigit(c)) return svg::palette(4);
  if (std::isupper(c)) return svg::palette(1);
  if (std::islower(c)) return svg::palette(0);
  return svg::palette(6);
}

const char* kColorKey =
    "Colours: <span style=\"color:#4e79a7\">lower case</span>, <span style=\"color:#f28e2b\">upper "
    "case</span>, "
    "<span style=\"color:#59a14f\">digits</span>, <span style=\"color:#e15759\">whitespace and "
    "control (\\n, &#9251;)</span>, "
    "<span style=\"color:#b07aa1\">other</span>.";

std::string token_maps(const TokenMap& m, const std::vector<std::string>& labels,
                       const std::string& kind, double perplexity, uint64_t seed) {
  std::string out;
  svg::ScatterPlot pca;
  pca.title = m.name + ": PCA";
  pca.x.label = "PC 1 (" + svg::format_number(100 * m.pca.explained[0], 3) + "% of variance)";
  pca.y.label = "PC 2 (" + svg::format_number(100 * m.pca.explained[1], 3) + "% of variance)";
  for (int32_t id : m.shown) {
    pca.xs.push_back(m.pca.points(id, 0));
    pca.ys.push_back(m.pca.points(id, 1));
    pca.labels.push_back(labels[static_cast<size_t>(id)]);
    pca.colors.push_back(token_color(labels[static_cast<size_t>(id)]));
  }
  out += figure(kind + "-pca", svg::scatter_plot(pca),
                "The " + escape(m.name) + " matrix (" + std::to_string(m.matrix.rows()) + " x " +
                    std::to_string(m.matrix.cols()) +
                    ") projected on its first two principal components. " + kColorKey);
  if (m.tsne.points.rows() > 0) {
    svg::ScatterPlot ts = pca;
    ts.title = m.name + ": t-SNE";
    ts.x.label = ts.y.label = "";
    ts.xs.clear();
    ts.ys.clear();
    for (Eigen::Index i = 0; i < m.tsne.points.rows(); ++i) {
      ts.xs.push_back(m.tsne.points(i, 0));
      ts.ys.push_back(m.tsne.points(i, 1));
    }
    out += figure(
        kind + "-tsne", svg::scatter_plot(ts),
        "Exact t-SNE of the same rows: perplexity " + svg::format_number(perplexity) + ", seed " +
            std::to_string(seed) + ", final KL " + svg::format_number(m.tsne.kl, 3) +
            ". Distances between clusters and the axes carry no meaning; neighbourhoods do.");
  }
  return out;
}

void header_html(std::ostringstream& o, const Inspection& in, const std::string& title,
                 const std::string& h5_name) {
  o << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>"
    << escape(title) << "</title>\n<style>" << report_css() << "</style>\n</head>\n<body>\n<h1>"
    << escape(title) << "</h1>\n<div class=\"meta\">run <code>" << escape(in.run_dir) << "</code>, "
    << in.n_layers << " layers, " << in.n_heads << " heads, d_model " << in.d_model << ", context "
    << in.context << ", vocabulary " << in.vocab << ", positional encoding <code>"
    << escape(in.positional_type.empty() ? "?" : in.positional_type) << "</code>"
    << (in.tied ? ", LM head tied to the embedding" : "") << ", computed in <code>"
    << escape(in.precision.empty() ? "float32" : in.precision) << "</code><br>text (" << in.time
    << " tokens):</div>\n<pre class=\"text\">" << escape(in.text) << "</pre>\n";
  if (!h5_name.empty())
    o << "<p class=\"notes\">Every number on this page is also in <code>" << escape(h5_name)
      << "</code> (HDF5; layout in docs/INSPECT.md).</p>\n";
}

// The most likely next tokens after the text, as bars.
void next_token_html(std::ostringstream& o, const Inspection& in,
                     const std::vector<std::string>& pos_labels) {
  std::vector<size_t> order(static_cast<size_t>(in.vocab));
  std::iota(order.begin(), order.end(), size_t{0});
  const size_t top =
      std::min<size_t>(order.size(), static_cast<size_t>(std::max<int64_t>(1, in.top)));
  std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(top), order.end(),
                    [&](size_t a, size_t b) { return in.next_probs[a] > in.next_probs[b]; });
  svg::BarChart bars;
  bars.title =
      "Next token after '" + (pos_labels.empty() ? std::string() : pos_labels.back()) + "'";
  bars.value_label = "probability";
  double covered = 0;
  for (size_t k = 0; k < top; ++k) {
    bars.labels.push_back(in.vocab_labels[order[k]]);
    bars.values.push_back(in.next_probs[order[k]]);
    covered += in.next_probs[order[k]];
  }
  o << "<h2 id=\"next-token\">Next-token probabilities</h2>\n<div class=\"plots\">"
    << figure("next-token", svg::bar_chart(bars),
              "The " + std::to_string(top) +
                  " most likely tokens after the last position (together " +
                  svg::format_number(100 * covered, 3) + "% of the probability).")
    << "</div>\n";
}

// One heat map per layer and head, query by key.
void attention_html(std::ostringstream& o, const Inspection& in,
                    const std::vector<std::string>& pos_labels) {
  const int64_t T = in.time;
  o << "<h2 id=\"attention\">Attention weights</h2>\n<p class=\"notes\">Rows: query positions, "
       "columns: key positions, both labelled "
       "with the input tokens (newline shown as \\n, space as &#9251;). Brightest: the largest "
       "weight of the head. Blank: weight exactly "
       "0, a masked key (future positions under a causal mask). Hover a cell for its value.</p>\n";
  for (int64_t l = 0; l < in.n_layers; ++l) {
    o << "<h3>Layer " << l << "</h3>\n<div class=\"plots\">\n";
    for (int64_t h = 0; h < in.n_heads; ++h) {
      svg::HeatMap m;
      m.title = "layer " + std::to_string(l) + ", head " + std::to_string(h);
      m.row_labels = m.col_labels = pos_labels;
      m.x_label = "key";
      m.y_label = "query";
      m.values.assign(static_cast<size_t>(T), std::vector<double>(static_cast<size_t>(T)));
      for (int64_t i = 0; i < T; ++i)
        for (int64_t j = 0; j < T; ++j)
          m.values[static_cast<size_t>(i)][static_cast<size_t>(j)] = in.weight(l, h, i, j);
      m.cell_width = m.cell_height = cell_size(T);
      m.show_values = false;
      m.zero_is_blank = true;
      m.min = 0;
      m.digits = 3;
      o << figure("attention-l" + std::to_string(l) + "-h" + std::to_string(h), svg::heat_map(m),
                  "");
    }
    o << "</div>\n";
  }
}

void embeddings_html(std::ostringstream& o, const Inspection& in) {
  o << "<h2 id=\"embeddings\">Token embedding and LM head</h2>\n<div class=\"plots\">\n";
  const double perplexity = in.perplexity;
  o << token_maps(in.embedding, in.vocab_labels, "embedding", perplexity, in.seed);
  o << "</div>\n";
  if (in.tied) {
    o << "<p class=\"notes\">The LM head is tied to the token embedding: its maps are the ones "
         "above.</p>\n";
  } else {
    o << "<div class=\"plots\">\n"
      << token_maps(in.head, in.vocab_labels, "lm-head", perplexity, in.seed) << "</div>\n";
  }
}

// The run's positional views, then the references under a heading of their own.
void positional_html(std::ostringstream& o, const Inspection& in) {
  o << "<h2 id=\"positional\">Positional encoding</h2>\n";
  bool reference_heading = false;
  o << "<div class=\"plots\">\n";
  for (const auto& v : in.positional) {
    if (v.reference && !reference_heading) {
      o << "</div>\n<h3>For comparison: the parameter-free positional encodings at this model's "
           "sizes</h3>\n<div class=\"plots\">\n";
      reference_heading = true;
    }
    svg::HeatMap m;
    m.title = v.title;
    m.row_labels = v.row_labels;
    m.col_labels = v.col_labels;
    m.x_label = v.key == "bias" ? "distance i - j" : "position j";
    m.y_label = v.key == "bias" ? "" : "position i";
    for (Eigen::Index i = 0; i < v.values.rows(); ++i) {
      std::vector<double> row;
      for (Eigen::Index j = 0; j < v.values.cols(); ++j) row.push_back(v.values(i, j));
      m.values.push_back(std::move(row));
    }
    m.cell_width = cell_size(v.values.cols());
    m.cell_height = v.key == "bias" ? 18 : m.cell_width;
    m.show_values = false;
    m.digits = 3;
    if (v.key != "bias") m.min = -1, m.max = 1;
    o << figure("positional-" + (v.variant.empty() ? std::string("run") : v.variant) + "-" + v.key,
                svg::heat_map(m), escape(v.caption));
  }
  o << "</div>\n";
}

}  // namespace

std::string render_inspection(const Inspection& in, const std::string& h5_name) {
  std::vector<std::string> pos_labels;
  for (int32_t id : in.ids) pos_labels.push_back(in.vocab_labels[static_cast<size_t>(id)]);
  const std::string title = "Inspect " + (in.run_name.empty() ? in.run_dir : in.run_name) +
                            " (step " + std::to_string(in.step) + ")";
  std::ostringstream o;
  header_html(o, in, title, h5_name);
  next_token_html(o, in, pos_labels);
  attention_html(o, in, pos_labels);
  embeddings_html(o, in);
  positional_html(o, in);
  if (!in.notes.empty()) {
    o << "<h2>Notes</h2>\n<ul class=\"notes\">\n";
    for (const auto& n : in.notes) o << "<li>" << escape(n) << "</li>\n";
    o << "</ul>\n";
  }
  o << "</body>\n</html>\n";
  return o.str();
}

}  // namespace ablate
