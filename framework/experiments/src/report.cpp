// The HTML report of a sweep (see report.hpp). Plots come from svg.hpp; numbers from
// compare.hpp, so the page and `ablate compare` always agree. The curves are in
// report_curves.cpp.
#include "ablate/report.hpp"

#include <fnmatch.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <map>
#include <set>
#include <sstream>

#include <yaml-cpp/yaml.h>

#include "ablate/error.hpp"
#include "ablate/experiment.hpp"
#include "ablate/run_dir.hpp"
#include "ablate/svg.hpp"
#include "report_curves.hpp"

namespace ablate {

using report::EvaluatorColumns;

namespace {

using svg::escape;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::string num(double v, int digits = 4) { return svg::format_number(v, digits); }

std::string fixed(double v, const char* f = "%.4f") {
  if (!std::isfinite(v)) return std::isnan(v) ? "n/a" : (v > 0 ? "inf" : "-inf");
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

std::string p_text(double p) {
  if (std::isnan(p)) return "n/a";
  char b[32];
  std::snprintf(b, sizeof b, p < 1e-4 ? "%.1e" : "%.4f", p);
  return b;
}

const char* kStyle = R"(
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 24px auto; max-width: 1320px; color: #222; padding: 0 16px; }
h1 { font-size: 24px; margin-bottom: 4px; } h2 { font-size: 19px; margin-top: 32px; border-bottom: 1px solid #ddd; padding-bottom: 4px; }
h3 { font-size: 15px; margin: 18px 0 6px; }
.meta { color: #555; font-size: 13px; line-height: 1.6; }
table { border-collapse: collapse; font-size: 13px; margin: 8px 0; }
th, td { border: 1px solid #d8d8d8; padding: 4px 9px; text-align: left; vertical-align: top; }
th { background: #f3f4f6; } td.n { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
tr.baseline td { background: #f7fbff; }
.better { color: #1a7f37; font-weight: 600; } .worse { color: #b42318; font-weight: 600; }
.status-done { color: #1a7f37; } .status-failed { color: #b42318; font-weight: 600; } .status-missing, .status-running { color: #9a6700; }
.plots { display: flex; flex-wrap: wrap; gap: 16px; } .plots figure { margin: 0; }
figcaption { font-size: 12px; color: #555; max-width: 640px; }
.notes { font-size: 12px; color: #555; } .problems { font-size: 12px; color: #b42318; }
details { margin: 3px 0; } summary { cursor: pointer; font-size: 13px; }
pre { background: #f6f8fa; padding: 8px 10px; font-size: 12px; overflow-x: auto; border-radius: 4px; }
code { font-size: 12px; } td.id { white-space: nowrap; }
)";

// The id of a comparison's heading: "cmp-eval/arithmetic-em_add" (HTML5 ids may hold any
// character but spaces).
std::string anchor(const std::string& table, const std::string& metric) {
  std::string a = "cmp-" + table + "-" + metric;
  std::replace(a.begin(), a.end(), ' ', '_');
  return a;
}

std::vector<std::string> all_problems(const Comparison& c) {
  std::vector<std::string> out;
  for (const auto& g : c.groups) out.insert(out.end(), g.problems.begin(), g.problems.end());
  return out;
}

// `first`: the page's first table, whose problems (runs left out) and machines note this one
// counts or leaves out instead of repeating.
std::string comparison_html(const Comparison& c, const Comparison* first = nullptr) {
  const std::vector<std::string> listed = first ? all_problems(*first) : std::vector<std::string>{};
  std::ostringstream o;
  char lvl[40];
  std::snprintf(lvl, sizeof lvl, "%g%%", c.level * 100);
  const std::string at =
      c.at == "final" ? "final value" : (c.at == "best" ? "best value" : "value at " + c.at);
  o << "<h3 id=\"" << escape(anchor(c.table, c.metric)) << "\">" << escape(c.metric)
    << " <span class=\"notes\">(" << escape(c.table) << ", " << escape(at) << "; "
    << direction_text(c) << "; by " << escape(c.by) << ", baseline " << escape(c.baseline)
    << ")</span></h3>\n<table class=\"comparison\">\n<tr><th>" << escape(c.by)
    << "</th><th>n</th><th>mean ± std</th><th>" << lvl << " CI</th><th>Δ vs " << escape(c.baseline)
    << " [" << lvl << " CI]</th><th>p (paired t-test)</th><th>wins</th><th>params</th></tr>\n";
  for (const auto& g : c.groups) {
    o << "<tr" << (g.is_baseline ? " class=\"baseline\"" : "") << "><td>" << escape(g.label)
      << "</td><td class=\"n\">" << g.summary.n;
    if (g.summary.n != static_cast<int64_t>(g.runs.size())) o << "/" << g.runs.size();
    o << "</td><td class=\"n\">" << (g.summary.n ? fixed(g.summary.mean) : "n/a")
      << (g.summary.n > 1 ? " ± " + fixed(g.summary.std) : "") << "</td><td class=\"n\">"
      << (g.summary.n > 1 ? "[" + fixed(g.summary.ci_low) + ", " + fixed(g.summary.ci_high) + "]"
                          : "n/a")
      << "</td>";
    if (g.is_baseline) {
      o << "<td>baseline</td><td></td><td></td>";
    } else if (!g.has_test) {
      o << "<td>no pairs</td><td class=\"n\">n/a</td><td class=\"n\">n/a</td>";
    } else {
      const bool better = c.higher_is_better ? g.test.mean_diff > 0 : g.test.mean_diff < 0;
      const bool sig = c.direction_known &&
                       g.test.p < 0.05;  // coloured better/worse only when the direction is known
      o << "<td class=\"n" << (sig ? (better ? " better" : " worse") : "") << "\">"
        << fixed(g.test.mean_diff, "%+.4f");
      // The same difference in every pair: no spread, so no interval (as compare's tables).
      if (g.test.same_in_every_pair()) o << " in all " << g.test.n << " pairs";
      else if (g.test.n > 1)
        o << " [" << fixed(g.test.ci_low, "%+.4f") << ", " << fixed(g.test.ci_high, "%+.4f") << "]";
      o << "</td><td class=\"n\">" << p_text(g.test.p) << "</td><td class=\"n\">"
        << (c.direction_known ? std::to_string(g.wins) + "/" + std::to_string(g.test.n)
                              : std::string("n/a"))
        << "</td>";
    }
    o << "<td class=\"n\">";
    if (std::isnan(g.params_min)) o << "n/a";
    else if (g.params_min == g.params_max) o << fixed(g.params_min, "%.0f");
    else o << fixed(g.params_min, "%.0f") << "-" << fixed(g.params_max, "%.0f");
    o << "</td></tr>\n";
  }
  o << "</table>\n<div class=\"notes\">";
  for (const auto& n : c.notes)
    if (!(first && n == first->machines)) o << escape(n) << "<br>";
  o << "</div>\n";
  std::vector<std::string> problems, repeated;
  for (const auto& p : all_problems(c))
    (std::find(listed.begin(), listed.end(), p) != listed.end() ? repeated : problems).push_back(p);
  if (!problems.empty() || !repeated.empty()) {
    o << "<div class=\"problems\">Not included (" << problems.size() + repeated.size() << ")";
    if (!repeated.empty())
      o << ": " << repeated.size() << (repeated.size() == 1 ? " run" : " runs")
        << " listed under the first table";
    o << (problems.empty() ? "" : ":") << "<ul>";
    for (const auto& p : problems) o << "<li>" << escape(p) << "</li>";
    o << "</ul></div>\n";
  }
  return o.str();
}

// Groups that vary along exactly two dimensions (variant and/or swept keys) -> heat map.
std::string heat_map_html(const SweepResults& r, const Comparison& c) {
  const Sweep& s = r.sweep;
  // Dimensions: the variant, each grid key, and the zipped keys as one (they move together).
  const std::string zip_dim = join(s.zip_keys, " + ");
  std::vector<std::string> dims;
  if (s.variants.size() > 1) dims.push_back("variant");
  for (const auto& k : s.grid_keys) dims.push_back(k);
  if (!s.zip_keys.empty()) dims.push_back(zip_dim);
  auto value = [&](const SweepPoint& p, const std::string& d) {
    if (d == "variant") return p.variant;
    if (d != zip_dim) return p.value_of(d);
    std::vector<std::string> parts;
    for (const auto& k : s.zip_keys)
      parts.push_back((s.zip_keys.size() > 1 ? k.substr(k.rfind('.') + 1) + "=" : "") +
                      p.value_of(k));
    return join(parts, " ");
  };
  std::vector<std::string> varying;
  for (const auto& d : dims) {
    std::set<std::string> vals;
    for (const auto& p : s.points) vals.insert(value(p, d));
    if (vals.size() > 1) varying.push_back(d);
  }
  if (varying.size() != 2) return "";
  std::vector<std::string> rows, cols;
  for (const auto& p : s.points) {
    std::string a = value(p, varying[0]), b = value(p, varying[1]);
    if (std::find(rows.begin(), rows.end(), a) == rows.end()) rows.push_back(a);
    if (std::find(cols.begin(), cols.end(), b) == cols.end()) cols.push_back(b);
  }
  // Mean of the comparison's metric over the valued runs of each cell.
  std::map<std::pair<std::string, std::string>, std::vector<double>> cell;
  for (const auto& g : c.groups)
    for (size_t i = 0; i < g.valued.size(); ++i)
      cell[{value(*g.valued[i]->point, varying[0]), value(*g.valued[i]->point, varying[1])}]
          .push_back(g.values[i]);
  svg::HeatMap h;
  h.title = c.metric + " (" + (c.at == "final" ? "final" : c.at) + ", mean over seeds)";
  h.y_label = varying[0];
  h.x_label = varying[1];
  h.row_labels = rows;
  h.col_labels = cols;
  h.low_is_bright = !c.higher_is_better;
  for (const auto& a : rows) {
    std::vector<double> row;
    for (const auto& b : cols) {
      auto it = cell.find({a, b});
      double m = kNaN;
      if (it != cell.end() && !it->second.empty()) {
        m = 0;
        for (double v : it->second) m += v;
        m /= static_cast<double>(it->second.size());
      }
      row.push_back(m);
    }
    h.values.push_back(row);
  }
  return "<h2>Heat map</h2>\n<figure>" + svg::heat_map(h) +
         "<figcaption>Brightest: best. Grey: no finished run.</figcaption></figure>\n";
}

// The columns (step aside) any run has in a table.
// A table's columns, the coarse ones first: metrics whose direction the name tells before
// the others (counts such as problems), then fewer '_'-separated words first (exact_match,
// em_add before em_add_carries_3), then by name.
std::vector<std::string> table_columns(const SweepResults& r, const std::string& t) {
  std::set<std::string> cols;
  for (const auto& run : r.runs) {
    auto it = run.data.tables.find(t);
    if (it != run.data.tables.end())
      for (const auto& [col, v] : it->second)
        if (col != "step") cols.insert(col);
  }
  std::vector<std::string> out(cols.begin(), cols.end());
  auto key = [](const std::string& c) {
    return std::make_pair(metric_higher_is_better(c) < 0, std::count(c.begin(), c.end(), '_'));
  };
  std::stable_sort(out.begin(), out.end(),
                   [&](const std::string& a, const std::string& b) { return key(a) < key(b); });
  return out;
}

// Every eval/<name> table's columns, those matching one of `patterns` (fnmatch: "em_*") if
// any are given. Error: a pattern that matches nothing, with the columns there are.
EvaluatorColumns evaluator_columns(const SweepResults& r,
                                   const std::vector<std::string>& patterns) {
  std::set<std::string> tables;
  for (const auto& run : r.runs)
    for (const auto& [t, cols] : run.data.tables)
      if (t.rfind("eval/", 0) == 0) tables.insert(t);
  EvaluatorColumns out;
  std::set<std::string> used, all;
  for (const auto& t : tables)
    for (const auto& col : table_columns(r, t)) {
      all.insert(col);
      bool keep = patterns.empty();
      for (const auto& p : patterns)
        if (fnmatch(p.c_str(), col.c_str(), 0) == 0) {
          keep = true;
          used.insert(p);
        }
      if (keep) out[t].push_back(col);
    }
  for (const auto& p : patterns)
    if (!used.count(p)) {
      const std::string dym = did_you_mean(p, std::vector<std::string>(all.begin(), all.end()));
      throw Error("--columns '" + p + "': no evaluator metric matches it" +
                  (all.empty() ? " (the runs have no eval/ tables)"
                               : "; the runs have " +
                                     join(std::vector<std::string>(all.begin(), all.end()))) +
                  (dym.empty() ? "" : ". Did you mean '" + dym + "'?"));
    }
  return out;
}

std::string attr(const SweepRun& r, const char* k) {
  auto it = r.data.str_attrs.find(k);
  return it == r.data.str_attrs.end() ? "" : it->second;
}
double num_attr(const SweepRun& r, const char* k) {
  auto it = r.data.num_attrs.find(k);
  return it == r.data.num_attrs.end() ? kNaN : it->second;
}

// The page's head, title and what the results are.
void header_html(std::ostringstream& o, const SweepResults& r, const std::string& title) {
  const Sweep& s = r.sweep;
  const std::map<std::string, size_t> counts = runs_by_state(r);
  std::string version, commit;
  for (const auto& run : r.runs)
    if (run.readable && version.empty())
      version = attr(run, "ablate_version"), commit = attr(run, "git_commit");
  std::time_t now = std::time(nullptr);
  char when[32];
  std::strftime(when, sizeof when, "%Y-%m-%d %H:%M UTC", std::gmtime(&now));

  o << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>"
    << escape(title) << "</title>\n<style>" << kStyle << "</style>\n</head>\n<body>\n<h1>"
    << escape(title) << "</h1>\n<div class=\"meta\">";
  if (r.any_runs) {
    o << "runs";
    for (const auto& p : s.points) o << " <code>" << escape(p.run_dir) << "</code>";
    o << "<br>" << s.points.size() << " runs, differing in "
      << (s.grid_keys.empty() ? "nothing but the seed" : escape(join(s.grid_keys)));
  } else {
    o << "sweep file <code>" << escape(s.file) << "</code>, base <code>" << escape(s.base)
      << "</code>, results <code>" << escape(s.dir) << "</code><br>" << s.points.size()
      << " points";
    if (!s.variants.empty())
      o << ", variants " << escape(join(s.variants)) << " (baseline " << escape(s.baseline) << ")";
    if (!s.grid_keys.empty()) o << ", grid " << escape(join(s.grid_keys));
    if (!s.zip_keys.empty()) o << ", zipped " << escape(join(s.zip_keys));
  }
  o << ", " << s.seeds.size() << " seed" << (s.seeds.size() == 1 ? "" : "s") << "<br>status:";
  for (const auto& [st, n] : counts)
    o << " <span class=\"status-" << escape(st) << "\">" << n << " " << escape(st) << "</span>";
  o << "<br>generated " << when
    << (version.empty() ? "" : " from runs of ablate " + escape(version))
    << (commit.empty() ? "" : " (" + escape(commit) + ")")
    << (r.any_runs ? ""
                   : "; reproduce: <code>ablate sweep " + escape(s.file) +
                         " --jobs N</code>, <code>ablate compare " + escape(s.dir) + "</code>")
    << "</div>\n";
}

// The main comparison, then every metric of every evaluator table, and the heat map.
void comparisons_html(std::ostringstream& o, const SweepResults& r, const Comparison& main,
                      const ReportOptions& opt, const EvaluatorColumns& extra_tables) {
  // Comparisons: the main one, then every metric of every evaluator table.
  o << "<h2>Comparison</h2>\n" << comparison_html(main);
  for (const auto& [t, cols] : extra_tables) {
    // An index of the table's metrics (an evaluator may write dozens).
    o << "<p class=\"notes\">" << escape(t) << ":";
    for (const auto& col : cols)
      o << " <a href=\"#" << escape(anchor(t, col)) << "\">" << escape(col) << "</a>";
    o << "</p>\n";
    for (const auto& col : cols) {
      if (t == main.table && col == main.metric)
        continue;  // the main table above (its heading has the anchor)
      CompareOptions co = opt.compare;
      co.table = t;
      co.metric = col;
      co.higher_is_better = -1;
      try {
        o << comparison_html(compare_sweep(r, co), &main);
      } catch (const Error& e) {
        o << "<p class=\"problems\">" << escape(t + "/" + col + ": " + e.what()) << "</p>\n";
      }
    }
  }
  o << heat_map_html(r, main);
}

// Sizes and speed per group.
void speed_html(std::ostringstream& o, const Comparison& main) {
  o << "<h2>Parameters and speed</h2>\n<table>\n<tr><th>" << escape(main.by)
    << "</th><th>params</th><th>FLOPs/token</th><th>tokens/s (mean)</th><th>train time "
       "(mean)</th><th>CPU time (mean)</th><th>threads</th></tr>\n";
  for (const auto& g : main.groups) {
    double np = kNaN, fpt = kNaN, tps = 0, secs = 0, cpu = 0, threads = kNaN;
    int n = 0, ncpu = 0;
    for (const SweepRun* run : g.runs) {
      if (!run->readable) continue;
      np = num_attr(*run, "n_params");
      fpt = num_attr(*run, "flops_per_token");
      threads = num_attr(*run, "threads");
      auto [steps, v] = metric_series(run->data, "train", "tokens_per_s");
      double ts = num_attr(*run, "train_seconds");
      if (!v.empty() && std::isfinite(ts)) tps += v.back(), secs += ts, ++n;
      const double c = num_attr(*run, "cpu_seconds");  // absent in older runs
      if (std::isfinite(c)) cpu += c, ++ncpu;
    }
    o << "<tr><td>" << escape(g.label) << "</td><td class=\"n\">" << fixed(np, "%.0f")
      << "</td><td class=\"n\">" << num(fpt, 4) << "</td><td class=\"n\">"
      << (n ? fixed(tps / n, "%.0f") : "n/a") << "</td><td class=\"n\">"
      << (n ? fixed(secs / n, "%.1f") + " s" : "n/a") << "</td><td class=\"n\">"
      << (ncpu ? fixed(cpu / ncpu / 60.0, "%.1f") + " min" : "n/a") << "</td><td class=\"n\">"
      << fixed(threads, "%.0f") << "</td></tr>\n";
  }
  o << "</table>\n";
}

// Every run: status, steps, final loss, error.
void runs_html(std::ostringstream& o, const SweepResults& r, const Comparison& main) {
  o << "<h2>Runs</h2>\n<table>\n<tr><th>#</th><th>id</th><th>" << escape(main.by)
    << "</th><th>seed</th><th>status</th><th>steps</th><th>final "
       "val_loss</th><th>params</th><th>error</th></tr>\n";
  for (const auto& run : r.runs) {
    const SweepPoint& p = *run.point;
    std::string group;
    for (const auto& g : main.groups)
      for (const SweepRun* x : g.runs)
        if (x == &run) group = g.label;
    auto [steps, vals] = metric_series(run.data, "train", "loss");
    auto [es, ev] = metric_series(run.data, "eval", "val_loss");
    o << "<tr><td class=\"n\">" << p.index << "</td><td class=\"id\">" << escape(p.id)
      << "</td><td>" << escape(group) << "</td><td class=\"n\">" << p.seed
      << "</td><td class=\"status-" << escape(status_name(run.state.status)) << "\">"
      << escape(status_name(run.state.status)) << "</td><td class=\"n\">"
      << (steps.empty() ? "-" : fixed(steps.back(), "%.0f")) << "</td><td class=\"n\">"
      << (ev.empty() ? "-" : fixed(ev.back())) << "</td><td class=\"n\">"
      << (run.readable ? fixed(num_attr(run, "n_params"), "%.0f") : "-") << "</td><td>"
      << escape(run.state.error.substr(0, 300)) << "</td></tr>\n";
  }
  o << "</table>\n";
}

// What differs between the runs' resolved configs (every option with the value it had,
// defaults included), seeds and output paths aside.
void differs_html(std::ostringstream& o, const SweepResults& r) {
  std::vector<std::map<std::string, std::string>> flat;
  std::vector<const SweepRun*> with;
  std::set<std::string> keys;
  for (const auto& run : r.runs) {
    const std::string res = attr(run, "config_resolved");
    if (res.empty()) continue;
    std::map<std::string, std::string> m;
    try {
      for (auto& [k, v] : flatten(YAML::Load(res))) m[k] = v;
    } catch (const YAML::Exception&) {
      continue;
    }
    for (const auto& kv : m) keys.insert(kv.first);
    flat.push_back(std::move(m));
    with.push_back(&run);
  }
  std::vector<std::string> differ;
  for (const auto& k : keys) {
    if (k == "seed" || bookkeeping_option(k)) continue;
    auto value = [&](const std::map<std::string, std::string>& m) {
      auto it = m.find(k);
      return it == m.end() ? std::string("-") : it->second;
    };
    for (const auto& m : flat)
      if (value(m) != value(flat.front())) {
        differ.push_back(k);
        break;
      }
  }
  if (!differ.empty()) {
    o << "<h2>What differs</h2>\n<p>Options whose value differs between runs, defaults included "
         "(from each run's resolved config; seeds aside).</p>\n<table><tr><th>run</th>";
    for (const auto& k : differ) o << "<th><code>" << escape(k) << "</code></th>";
    o << "</tr>\n";
    for (size_t i = 0; i < flat.size(); ++i) {
      o << "<tr><td class=\"id\">" << escape(with[i]->point->id) << "</td>";
      for (const auto& k : differ) {
        auto it = flat[i].find(k);
        o << "<td>" << escape(it == flat[i].end() ? "-" : it->second) << "</td>";
      }
      o << "</tr>\n";
    }
    o << "</table>\n";
  }
}

// Configs and samples, collapsed.
void configs_html(std::ostringstream& o, const SweepResults& r, const Comparison& main) {
  o << "<h2>Configs</h2>\n";
  for (const auto& run : r.runs) {
    const SweepPoint& p = *run.point;
    std::string cfg = attr(run, "config");
    o << "<details><summary><b>" << escape(p.id) << "</b> &mdash; <code>"
      << escape(join(p.override_texts(), "  ")) << "</code></summary>\n<pre>"
      << escape(cfg.empty() ? "(no run file yet)" : cfg) << "</pre></details>\n";
  }
  bool any_sample = false;
  for (const auto& g : main.groups)
    for (const SweepRun* run : g.runs)
      if (run->data.texts.count("samples/final")) {
        if (!any_sample) o << "<h2>Samples</h2>\n";
        any_sample = true;
        o << "<details><summary>" << escape(g.label) << " (" << escape(run->point->id)
          << ")</summary>\n<pre>" << escape(run->data.texts.at("samples/final"))
          << "</pre></details>\n";
        break;
      }
}

}  // namespace

const char* report_css() { return kStyle; }

std::string render_report(const SweepResults& r, const ReportOptions& opt) {
  const Sweep& s = r.sweep;
  if (opt.x != "step" && opt.x != "tokens" && opt.x != "seconds") {
    const std::string dym = did_you_mean(opt.x, {"step", "tokens", "seconds"});
    throw Error("--x '" + opt.x + "': expected step, tokens or seconds" +
                (dym.empty() ? "" : ". Did you mean '" + dym + "'?"));
  }
  if (opt.plot_width < 240 || opt.plot_width > 4000)
    throw Error("--plot-width " + std::to_string(opt.plot_width) +
                ": expected 240 to 4000 pixels (default 640)");
  const Comparison main = compare_sweep(r, opt.compare);
  std::vector<std::string> ids;
  for (const auto& p : s.points) ids.push_back(p.id);
  const std::string title =
      !opt.title.empty() ? opt.title : (r.any_runs ? "Runs " + join(ids) : "Sweep " + s.name);
  const EvaluatorColumns extra_tables = evaluator_columns(r, opt.columns);

  std::ostringstream o;
  header_html(o, r, title);
  comparisons_html(o, r, main, opt, extra_tables);
  report::curves_html(o, r, main, opt, extra_tables);
  speed_html(o, main);
  runs_html(o, r, main);
  differs_html(o, r);
  configs_html(o, r, main);
  o << "</body>\n</html>\n";
  return o.str();
}

}  // namespace ablate
