// The curves of the HTML report (see report.hpp): per point or group the mean over seeds
// with its min-max band against steps, tokens or training seconds, and the paired
// difference from the baseline over training.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include "ablate/error.hpp"
#include "report_curves.hpp"

namespace ablate {

using svg::escape;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

}  // namespace

std::vector<double> curve_x(const RunData& d, const std::vector<double>& steps,
                            const std::string& x) {
  if (x == "step") return steps;
  std::vector<double> out(steps.size(), kNaN);
  const double tps = run_tokens_per_step(d);
  if (!std::isfinite(tps)) return out;
  if (x == "tokens") {
    for (size_t i = 0; i < steps.size(); ++i) out[i] = steps[i] * tps;
    return out;
  }
  auto [ts, rate] = metric_series(d, "train", "tokens_per_s");
  std::vector<double> at{0}, secs{0};  // seconds at train rows, from step 0
  for (size_t i = 0; i < ts.size(); ++i)
    if (rate[i] > 0 && ts[i] > at.back())
      at.push_back(ts[i]), secs.push_back(ts[i] * tps / rate[i]);
  for (size_t i = 0; i < steps.size(); ++i) {
    auto hi = std::lower_bound(at.begin(), at.end(), steps[i]);
    if (hi == at.end()) continue;
    const size_t k = static_cast<size_t>(hi - at.begin());
    out[i] =
        k == 0 || *hi == steps[i]
            ? secs[k]
            : secs[k - 1] + (secs[k] - secs[k - 1]) * (steps[i] - at[k - 1]) / (at[k] - at[k - 1]);
  }
  return out;
}

namespace {

// Mean and min-max over the runs of a group at every step any of them has (x: the mean of
// the runs' x values at that step); `seeds` gets one faint line per run.
svg::Series group_series(const std::string& label, const std::vector<const SweepRun*>& runs,
                         const std::string& table, const std::string& metric, const std::string& x,
                         std::vector<svg::Series>* seeds) {
  std::map<double, std::vector<double>> at, xs;
  for (const SweepRun* r : runs) {
    auto [steps, vals] = metric_series(r->data, table, metric);
    const std::vector<double> rx = curve_x(r->data, steps, x);
    svg::Series one;
    one.label = label + " (" + r->point->id + ")";
    one.thin = true;
    for (size_t i = 0; i < steps.size(); ++i) {
      if (!std::isfinite(vals[i]) || std::isnan(rx[i])) continue;
      at[steps[i]].push_back(vals[i]);
      xs[steps[i]].push_back(rx[i]);
      one.x.push_back(rx[i]);
      one.y.push_back(vals[i]);
    }
    if (seeds && !one.x.empty()) seeds->push_back(std::move(one));
  }
  svg::Series s;
  s.label = label;
  bool band = false;
  for (const auto& [step, v] : at) {
    double sum = 0, xsum = 0;
    for (double y : v) sum += y;
    for (double xv : xs[step]) xsum += xv;
    s.x.push_back(xsum / static_cast<double>(xs[step].size()));
    s.y.push_back(sum / static_cast<double>(v.size()));
    s.lo.push_back(*std::min_element(v.begin(), v.end()));
    s.hi.push_back(*std::max_element(v.begin(), v.end()));
    band |= v.size() > 1;
  }
  if (!band) s.lo.clear(), s.hi.clear();
  return s;
}

// The runs a group's curves are drawn from: its finished runs, else whatever it has.
std::vector<const SweepRun*> curve_runs(const GroupResult& g) {
  std::vector<const SweepRun*> done, any;
  for (const SweepRun* r : g.runs) {
    if (!r->readable) continue;
    any.push_back(r);
    if (r->state.status == RunStatus::done) done.push_back(r);
  }
  return done.empty() ? any : done;
}

// A loss-like curve starts far above where it ends: cut the y axis at the largest value
// after the first 5% of steps so that the differences that matter stay visible.
void robust_top(svg::LinePlot& p, bool& cut) {
  double x0 = INFINITY, x1 = -INFINITY;
  size_t points = 0;
  for (const auto& s : p.series) {
    if (s.thin) continue;
    for (double x : s.x) x0 = std::min(x0, x), x1 = std::max(x1, x);
    points = std::max(points, s.x.size());
  }
  if (!(x1 > x0) || points < 20) return;  // a short curve shows its start
  double top = -INFINITY, all = -INFINITY, lo_all = INFINITY;
  for (const auto& s : p.series)
    for (size_t i = 0; i < s.x.size(); ++i) {
      const double v = s.hi.empty() ? s.y[i] : s.hi[i];
      all = std::max(all, v);
      lo_all = std::min(lo_all, s.lo.empty() ? s.y[i] : s.lo[i]);
      if (s.x[i] >= x0 + 0.05 * (x1 - x0)) top = std::max(top, v);
    }
  // Only when the start dominates the range (more than half of it).
  if (std::isfinite(top) && all - lo_all > 2.0 * (top - lo_all)) {
    p.y.max = top + 0.04 * (top - lo_all);
    cut = true;
  }
}

// How the curves are grouped: the comparison's groups when each holds a single point
// (its seeds), else every point (variant and swept values) with `pooled` naming what the
// comparison's groups pool.
struct CurveGroups {
  std::vector<GroupResult> groups;
  std::string by, pooled, main_by;
};

CurveGroups curve_groups(const SweepResults& r, const Comparison& main, const CompareOptions& co) {
  if (main.pooled.empty()) return {main.groups, main.by, "", main.by};
  CompareOptions po = co;
  po.by = "point";
  po.baseline = "";
  return {compare_sweep(r, po).groups, "point", join(main.pooled), main.by};
}

struct CurveSpec {
  std::string table, metric, title, y_label;
  bool loss_like = false;
};

std::string curve_figure(const CurveGroups& cg, const CurveSpec& spec, const ReportOptions& opt) {
  svg::LinePlot p;
  p.width = opt.plot_width;
  p.height = static_cast<int>(0.62 * opt.plot_width);
  p.title = spec.title;
  p.x.label = opt.x == "step"
                  ? "step"
                  : (opt.x == "tokens" ? "tokens (steps x batch_size x grad_accum x context)"
                                       : "training seconds (estimated)");
  p.x.log = opt.log_x;
  p.y.log = opt.log_y;
  p.y.label = spec.y_label;
  size_t drawn = 0, banded = 0;
  bool step0 = false;
  std::vector<svg::Series> mains, thin;
  for (size_t gi = 0; gi < cg.groups.size(); ++gi) {
    std::vector<svg::Series> seeds;
    svg::Series s = group_series(cg.groups[gi].label, curve_runs(cg.groups[gi]), spec.table,
                                 spec.metric, opt.x, &seeds);
    s.color = svg::palette(gi);
    if (!s.x.empty()) ++drawn, step0 |= s.x.front() == 0;
    else s.label += " (no data)";
    banded += !s.lo.empty();
    for (auto& t : seeds) t.color = s.color;
    if (opt.seed_lines) thin.insert(thin.end(), seeds.begin(), seeds.end());
    mains.push_back(std::move(s));
  }
  if (drawn == 0) return "";
  p.series = std::move(thin);  // faint lines under the means
  p.series.insert(p.series.end(), mains.begin(), mains.end());
  bool cut = false;
  if (spec.loss_like && !opt.log_y) robust_top(p, cut);
  std::string cap =
      "Mean over seeds per " +
      (cg.by == "point" ? std::string("point (variant and swept values)") : cg.by) + "." +
      (banded ? " Shaded: min to max over the seeds of each line." : "") +
      (opt.seed_lines ? " Faint lines: each run." : "") +
      (cg.pooled.empty()
           ? ""
           : " Lines are per point, not per " + cg.main_by + ": that grouping pools " + cg.pooled +
                 " (its table above pools them too).") +
      " Table " + spec.table + ", column " + spec.metric + "." +
      (step0 ? (opt.log_x ? " Step 0 (before training) is not drawn on a log x axis."
                          : " The first point is step 0, before training.")
             : "") +
      (cut ? " The y axis is cut above the values after the first 5% of steps." : "") +
      (opt.x == "seconds" ? " Seconds: steps x tokens per step / the run's mean tokens_per_s; "
                            "evaluations excluded."
                          : "");
  return "<figure>" + svg::line_plot(p) +
         "<figcaption style=\"max-width: " + std::to_string(p.width) + "px\">" + escape(cap) +
         "</figcaption></figure>\n";
}

// The figure of difference_series, with the baseline as a dashed line at 0.
std::string difference_figure(const SweepResults& r, const Comparison& main,
                              const ReportOptions& opt) {
  std::vector<svg::Series> diffs = difference_series(r, main, opt);
  if (diffs.empty()) return "";
  svg::LinePlot p;
  p.width = opt.plot_width;
  p.height = static_cast<int>(0.62 * opt.plot_width);
  p.title = "Difference from " + main.baseline + " over training: " + main.metric;
  p.x.label = "step";
  p.y.label = main.metric + " - " + main.baseline + "'s (paired)";
  double x0 = INFINITY, x1 = -INFINITY;
  for (const auto& d : diffs) x0 = std::min(x0, d.x.front()), x1 = std::max(x1, d.x.back());
  svg::Series zero;
  zero.label = main.baseline;
  zero.x = {x0, x1};
  zero.y = {0, 0};
  zero.dashed = true;
  for (size_t gi = 0; gi < main.groups.size(); ++gi) {  // the colours of the other curves
    if (main.groups[gi].is_baseline) zero.color = svg::palette(gi);
    for (auto& d : diffs)
      if (d.label == main.groups[gi].label) d.color = svg::palette(gi);
  }
  p.series.push_back(zero);
  p.series.insert(p.series.end(), diffs.begin(), diffs.end());
  const std::string lvl = svg::format_number(100 * main.level, 3) + "%";
  const std::string cap =
      "Mean over pairs of (group - " + main.baseline + ") in " + main.table + "/" + main.metric +
      " at each step the baseline evaluated, runs paired as in the table above. Shaded: the " +
      lvl + " t confidence interval of the mean difference (none with one pair). " +
      (main.direction_known
           ? std::string(main.higher_is_better ? "Above" : "Below") + " the dashed line is better."
           : "") +
      " A band that leaves 0 and stays away is a gap that opens and holds; one that returns to 0 "
      "is a gap that closes.";
  return "<figure>" + svg::line_plot(p) +
         "<figcaption style=\"max-width: " + std::to_string(p.width) + "px\">" + escape(cap) +
         "</figcaption></figure>\n";
}

}  // namespace

namespace report {

// Curves of the losses, learning rate, gradient norm and evaluator metrics.
void curves_html(std::ostringstream& o, const SweepResults& r, const Comparison& main,
                 const ReportOptions& opt, const EvaluatorColumns& extra_tables) {
  const CurveGroups cg = curve_groups(r, main, opt.compare);
  std::vector<CurveSpec> specs = {
      {"eval", "val_loss", "Validation loss", "val_loss", false},
      {"eval", "val_bpb", "Validation bits per byte", "val_bpb", false},
      {"train", "loss", "Training loss", "loss (mean since the last row)", true},
      {"eval", "train_loss", "Training loss (evaluation batches)", "train_loss", false},
      {"train", "lr", "Learning rate", "lr", false},
      {"train", "grad_norm", "Gradient norm (before clipping)", "grad_norm", true}};
  // Auxiliary terms of model plugins (Graph::add_aux): aux_<name> in the train table.
  std::set<std::string> aux;
  for (const SweepRun& run : r.runs) {
    auto t = run.data.tables.find("train");
    if (t == run.data.tables.end()) continue;
    for (const auto& [col, values] : t->second)
      if (col.compare(0, 4, "aux_") == 0) aux.insert(col);
  }
  for (const std::string& col : aux)
    specs.push_back({"train", col, "Auxiliary term " + col.substr(4), col, false});
  for (const auto& [t, cols] : extra_tables)
    for (const auto& col : cols) specs.push_back({t, col, t + ": " + col, col, false});
  o << "<h2>Curves</h2>\n<div class=\"plots\">\n";
  o << difference_figure(r, main, opt);
  for (const auto& spec : specs) o << curve_figure(cg, spec, opt);
  o << "</div>\n";
}

}  // namespace report

std::vector<svg::Series> difference_series(const SweepResults& r, const Comparison& main,
                                           const ReportOptions& opt) {
  const GroupResult* base = nullptr;
  for (const GroupResult& g : main.groups)
    if (g.is_baseline) base = &g;
  if (!base) return {};
  std::set<double> steps;
  for (const SweepRun* run : curve_runs(*base))
    for (double st : metric_series(run->data, main.table, main.metric).first) steps.insert(st);
  if (steps.size() < 2) return {};
  std::map<std::string, svg::Series> by_group;
  CompareOptions co = opt.compare;
  co.metric = main.metric;
  co.table = main.table;
  co.baseline = main.baseline;
  for (double st : steps) {
    co.at = "step=" + std::to_string(static_cast<int64_t>(st));
    Comparison c;
    try {
      c = compare_sweep(r, co);
    } catch (const Error&) {
      continue;  // a step not every group logged
    }
    for (const GroupResult& g : c.groups) {
      if (!g.has_test || g.test.n < 1) continue;
      svg::Series& s = by_group[g.label];
      s.x.push_back(st);
      s.y.push_back(g.test.mean_diff);
      const bool ci = std::isfinite(g.test.ci_low) && std::isfinite(g.test.ci_high);
      s.lo.push_back(ci ? g.test.ci_low : g.test.mean_diff);
      s.hi.push_back(ci ? g.test.ci_high : g.test.mean_diff);
    }
  }
  std::vector<svg::Series> out;
  for (const GroupResult& g : main.groups) {
    auto it = by_group.find(g.label);
    if (it == by_group.end()) continue;
    it->second.label = g.label;
    out.push_back(std::move(it->second));
  }
  return out;
}

}  // namespace ablate
