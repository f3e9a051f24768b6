// Sweep comparison: values per run, groups, seed-paired tests and their notes (see
// compare.hpp). Reading the runs is in compare_runs.cpp, the text forms in compare_format.cpp.
#include "ablate/compare.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "ablate/error.hpp"
#include "ablate/metric_spec.hpp"
#include "ablate/trainer.hpp"
#include "compare_text.hpp"

namespace ablate {
using namespace compare_text;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// A key as a point label shows it: its last component ("lr"), the family for a variant
// choice ("model.ffn.type" -> "ffn"), and more components while two keys would read alike
// ("model.norm.eps" and "optimizer.eps" -> "norm.eps", "optimizer.eps").
std::string short_key(const std::string& key, const std::vector<std::string>& keys) {
  auto tail = [](const std::string& k, int parts) {
    size_t at = k.size();
    for (int i = 0; i < parts; ++i) {
      const size_t dot = at == 0 ? std::string::npos : k.rfind('.', at - 1);
      if (dot == std::string::npos) return k;
      at = dot;
    }
    return k.substr(at + 1);
  };
  auto shown = [&](const std::string& k, int parts) {
    const std::string t = tail(k, parts);
    const size_t dot = t.rfind('.');
    return dot != std::string::npos && t.compare(dot + 1, std::string::npos, "type") == 0
               ? t.substr(0, dot)
               : t;
  };
  const bool is_type = key.size() > 5 && key.compare(key.size() - 5, 5, ".type") == 0;
  const int n = static_cast<int>(std::count(key.begin(), key.end(), '.')) + 1;
  for (int parts = is_type ? 2 : 1; parts < n; ++parts) {
    const std::string mine = shown(key, parts);
    bool clash = false;
    for (const std::string& other : keys) clash |= other != key && shown(other, parts) == mine;
    if (!clash) return mine;
  }
  return key;
}

std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

// Where a metric lives: the given table, else eval, then train, then the other tables.
std::string find_table(const SweepResults& r, const std::string& metric, const std::string& table) {
  std::set<std::string> tables;
  std::map<std::string, std::set<std::string>> columns;  // column -> tables
  for (const auto& run : r.runs)
    for (const auto& [t, cols] : run.data.tables) {
      tables.insert(t);
      for (const auto& [c, v] : cols)
        if (c != "step") columns[c].insert(t);
    }
  if (!table.empty()) {
    if (!tables.empty() && !tables.count(table)) {
      std::vector<std::string> all(tables.begin(), tables.end());
      std::string dym = did_you_mean(table, all);
      throw Error("no run of " + r.sweep.dir + " has a table '" + table +
                  "'. Tables: " + join(all) + (dym.empty() ? "" : ". Did you mean '" + dym + "'?"));
    }
    return table;
  }
  auto it = columns.find(metric);
  bool any_done = false;
  for (const auto& run : r.runs) any_done |= run.state.status == RunStatus::done;
  // Nothing finished yet: no table to learn the metric's from; report every run instead.
  if (it == columns.end() && !any_done) return "eval";
  if (it == columns.end()) {
    std::vector<std::string> all;
    for (const auto& [c, ts] : columns) all.push_back(c);
    if (all.empty()) throw Error(r.sweep.dir + ": no run has any metrics yet (nothing finished?)");
    std::string dym = did_you_mean(metric, all);
    throw Error("no table of " + r.sweep.dir + " has a metric '" + metric +
                "'. Metrics: " + join(all) + (dym.empty() ? "" : ". Did you mean '" + dym + "'?"));
  }
  for (const char* pref : {"eval", "train"})
    if (it->second.count(pref)) return pref;
  if (it->second.size() > 1)
    throw Error("metric '" + metric + "' is in several tables (" +
                join(std::vector<std::string>(it->second.begin(), it->second.end())) +
                "); choose one with --table");
  return *it->second.begin();
}

// The number one run gives to a comparison (its final, best or step-N value), or NaN with
// `why` saying why it gives none (missing, failed, unfinished, no such row, not finite).
double run_value(const SweepRun& run, const Comparison& c, int64_t at_step, std::string& why) {
  const std::string st = status_name(run.state.status);
  if (!run.readable) {
    why = st == "missing"
              ? "missing (not run yet)"
              : st + (run.state.error.empty() ? "" : ": " + first_line(run.state.error));
    return kNaN;
  }
  if (at_step < 0 && st != "done") {
    why = st == "failed" ? "failed: " + first_line(run.state.error) : st + " (unfinished)";
    return kNaN;
  }
  auto [steps, vals] = metric_series(run.data, c.table, c.metric);
  if (vals.empty()) {
    why = st == "failed" ? "failed: " + first_line(run.state.error)
                         : (st == "done" ? "no " : st + ": no ") + c.table + "/" + c.metric +
                               " values" + (st == "done" ? "" : " yet");
    return kNaN;
  }
  double v = kNaN;
  if (c.at == "final") {
    v = vals.back();
  } else if (c.at == "best") {
    for (double x : vals)
      if (std::isfinite(x) && (std::isnan(v) || (c.higher_is_better ? x > v : x < v))) v = x;
  } else {
    for (size_t i = 0; i < steps.size(); ++i)
      if (steps[i] == static_cast<double>(at_step)) v = vals[i];
    if (std::isnan(v)) {
      why = "no " + c.table + " row at step " + std::to_string(at_step) +
            " (its steps: " + fmt(steps.front(), "%.0f") + " to " + fmt(steps.back(), "%.0f") +
            ")" + (st == "failed" ? "; failed: " + first_line(run.state.error) : "");
      return kNaN;
    }
  }
  if (!std::isfinite(v)) why = c.metric + " is " + fmt(v);
  return v;
}

// --at: -1 for final and best, else the step of step=N.
int64_t parse_at(const std::string& at) {
  if (at.rfind("step=", 0) == 0) {
    try {
      size_t used = 0;
      const int64_t step = std::stoll(at.substr(5), &used);
      if (used != at.size() - 5 || step < 0) throw std::invalid_argument("");
      return step;
    } catch (const std::exception&) {
      throw Error("--at '" + at +
                  "': expected final, best or step=N with N a step number (e.g. step=2500)");
    }
  }
  if (at != "final" && at != "best") {
    std::string dym = did_you_mean(at, {"final", "best"});
    throw Error("--at '" + at + "': expected final, best or step=N" +
                (dym.empty() ? "" : ". Did you mean '" + dym + "'?"));
  }
  return -1;
}

// --by: variant, point, run, or a swept key (default: variant if any, else the one swept
// dimension, else point; runs given one by one with nothing differing: run).
std::string resolve_by(const SweepResults& r, const std::string& by,
                       const std::vector<std::string>& swept) {
  const Sweep& s = r.sweep;
  std::string chosen = by;
  if (chosen.empty()) {
    std::vector<std::string> dims = s.grid_keys;
    dims.insert(dims.end(), s.zip_keys.begin(), s.zip_keys.end());
    chosen = !s.variants.empty()
                 ? "variant"
                 : (dims.size() == 1 ? dims[0] : (r.any_runs && dims.empty() ? "run" : "point"));
  }
  if (chosen != "variant" && chosen != "point" && chosen != "run" &&
      std::find(swept.begin(), swept.end(), chosen) == swept.end()) {
    std::vector<std::string> allowed = {"variant", "point", "run"};
    allowed.insert(allowed.end(), swept.begin(), swept.end());
    if (s.variants.empty()) allowed.erase(allowed.begin());
    std::string dym = did_you_mean(chosen, allowed);
    throw Error("--by '" + chosen + "': not " +
                (r.any_runs ? "an option that differs between " : "a swept key of ") + s.dir +
                ". Allowed: " + join(allowed) +
                (dym.empty() ? "" : ". Did you mean '" + dym + "'?"));
  }
  if (chosen == "variant" && s.variants.empty())
    throw Error("--by variant: the sweep " + s.dir +
                " has no variants; use --by point or a swept key");
  return chosen;
}

// What a group pools besides the seed: the dimensions whose value varies inside one.
std::vector<std::string> pooled_dims(const SweepResults& r, const Comparison& c) {
  const Sweep& s = r.sweep;
  std::vector<std::string> dims, pooled;
  if (!s.variants.empty()) dims.push_back("variant");
  dims.insert(dims.end(), s.grid_keys.begin(), s.grid_keys.end());
  dims.insert(dims.end(), s.zip_keys.begin(), s.zip_keys.end());
  for (const auto& d : dims)
    for (const auto& g : c.groups) {
      std::set<std::string> vals;
      for (const SweepRun* run : g.runs)
        vals.insert(d == "variant" ? run->point->variant : run->point->value_of(d));
      if (vals.size() > 1) {
        pooled.push_back(d);
        break;
      }
    }
  return pooled;
}

// The baseline group (`baseline`, "" = the first group), each group's summary, and each
// other group's paired t-test against it over the pairs both have.
void test_against_baseline(Comparison& c,
                           const std::vector<std::map<std::string, double>>& pair_values,
                           const std::string& baseline, double level) {
  std::vector<std::string> labels;
  for (const auto& g : c.groups) labels.push_back(g.label);
  c.baseline = baseline.empty() ? labels.front() : baseline;
  auto bit = std::find(labels.begin(), labels.end(), c.baseline);
  if (bit == labels.end()) {
    std::string dym = did_you_mean(c.baseline, labels);
    throw Error("--baseline '" + c.baseline + "' is not a group of --by " + c.by +
                ". Groups: " + join(labels) + (dym.empty() ? "" : ". Did you mean '" + dym + "'?"));
  }
  const size_t base = static_cast<size_t>(bit - labels.begin());
  for (size_t gi = 0; gi < c.groups.size(); ++gi) {
    GroupResult& g = c.groups[gi];
    g.summary = stats::summarize(g.values, level);
    g.is_baseline = gi == base;
    if (g.is_baseline) continue;
    std::vector<double> a, b;
    for (const auto& [k, v] : pair_values[gi]) {
      auto m = pair_values[base].find(k);
      if (m == pair_values[base].end()) continue;
      a.push_back(v);
      b.push_back(m->second);
      g.wins += c.higher_is_better ? v > m->second : v < m->second;
    }
    g.has_test = !a.empty();
    if (g.has_test) g.test = stats::paired_t_test(a, b, level);
  }
}

std::string lowercase(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  return s;
}

// Whether `word` is one of the name's words (runs of letters and digits).
bool has_word(const std::string& name, const std::string& word) {
  std::string w;
  for (size_t i = 0; i <= name.size(); ++i) {
    if (i < name.size() && std::isalnum(static_cast<unsigned char>(name[i]))) {
      w += name[i];
      continue;
    }
    if (w == word) return true;
    w.clear();
  }
  return false;
}

// Accuracy-like names (any of these in the name, or "em" as a word: em_add, val_em): higher
// is better, and the values are proportions when they lie in [0, 1].
bool accuracy_like(const std::string& lower_name) {
  for (const char* k : {"acc", "exact", "match", "f1", "precision", "recall"})
    if (lower_name.find(k) != std::string::npos) return true;
  return has_word(lower_name, "em");
}

bool is_proportion_name(const std::string& metric) { return accuracy_like(lowercase(metric)); }

}  // namespace

int metric_higher_is_better(const std::string& metric) {
  const std::string m = lowercase(metric);
  for (const char* low : {"loss", "ppl", "perplexity", "error", "err", "bpc", "bpb", "bits"})
    if (m.find(low) != std::string::npos) return 0;
  if (accuracy_like(m)) return 1;
  for (const char* high : {"bleu", "score", "tokens_per_s"})
    if (m.find(high) != std::string::npos) return 1;
  return -1;
}

namespace {

// Runs made on different CPUs or kernel paths compute differently rounded floats, so a
// paired seed is not the same computation twice: say so when the valued runs differ.
std::string machines_note(const Comparison& c) {
  std::vector<std::pair<std::string, std::vector<std::string>>>
      kinds;  // "cpu, path" -> run ids, first-seen order
  for (const auto& g : c.groups)
    for (const SweepRun* run : g.valued) {
      auto attr = [&](const char* k) {
        auto it = run->data.str_attrs.find(k);
        return it == run->data.str_attrs.end() || it->second.empty() ? std::string("unknown")
                                                                     : it->second;
      };
      const std::string kind = attr("cpu") + ", kernel path " + attr("kernel_path");
      auto it =
          std::find_if(kinds.begin(), kinds.end(), [&](const auto& k) { return k.first == kind; });
      if (it == kinds.end()) kinds.push_back({kind, {}}), it = kinds.end() - 1;
      it->second.push_back(run->point->id);
    }
  if (kinds.size() < 2) return "";
  std::vector<std::string> parts;
  for (const auto& [kind, ids] : kinds) {
    std::vector<std::string> shown(
        ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(std::min<size_t>(ids.size(), 3)));
    parts.push_back(kind + ": " + std::to_string(ids.size()) +
                    (ids.size() == 1 ? " run (" : " runs (") + join(shown) +
                    (ids.size() > 3 ? ", ..." : "") + ")");
  }
  return "The runs were made on " + std::to_string(kinds.size()) +
         " kinds of machine: " + join(parts, "; ") +
         ". Their kernels round differently, so runs paired by seed are not the same computation "
         "on both.";
}

// The spec the valued runs' run files declare for table/metric (run.h5's metric_specs), the
// first run's that has one; none when no run declares it (older runs, undeclared columns).
std::optional<MetricSpec> declared_spec(const SweepResults& r, const std::string& table,
                                        const std::string& metric) {
  for (const SweepRun& run : r.runs) {
    if (!run.readable) continue;
    auto it = run.data.str_attrs.find("metric_specs");
    if (it == run.data.str_attrs.end()) continue;
    try {
      const MetricSpecs specs = parse_metric_specs(it->second);
      auto t = specs.find(table);
      if (t == specs.end()) continue;
      if (const MetricSpec* m = find_metric_spec(t->second, metric)) return *m;
    } catch (const Error&) {
      continue;  // a malformed attribute: judged by the name, as an older run
    }
  }
  return std::nullopt;
}

// The direction of the metric: as given, else as the runs declare it (metric_spec.hpp),
// else from the name. --at best needs one.
void resolve_direction(Comparison& c, const CompareOptions& o,
                       const std::optional<MetricSpec>& declared) {
  int direction = o.higher_is_better;
  c.direction_source = "as given";
  if (direction < 0 && declared) {
    direction = declared->better == Better::higher ? 1 : declared->better == Better::lower ? 0 : -1;
    c.direction_source = "declared by the runs";
  } else if (direction < 0) {
    direction = metric_higher_is_better(o.metric);
    c.direction_source = "from the metric name";
  }
  c.direction_known = direction >= 0;
  c.higher_is_better = direction > 0;
  if (!c.direction_known && o.at == "best")
    throw Error("--at best needs to know whether '" + o.metric + "' is better higher or lower, " +
                (declared ? "and its runs declare it neither"
                          : "and its name does not tell (known: loss, ppl, error, bpc, bpb, bits "
                            "are lower; acc, exact, match, em, f1, score are higher)") +
                ". Fix: add --higher-is-better or --lower-is-better");
}

// How --by puts runs into groups: a run's group label, and the key that pairs it with a
// run of the baseline group.
struct Grouping {
  const Sweep& s;
  std::string by;
  bool by_grid = false;         // by a grid or zip key
  bool by_variant_key = false;  // by a key whose value the variant decides

  Grouping(const SweepResults& r, const std::string& by_option) : s(r.sweep) {
    const std::vector<std::string> swept = s.swept_keys();
    std::set<std::string> variant_keys;  // keys whose value the variant decides
    for (const auto& p : s.points)
      for (const auto& ov : p.overrides)
        if (ov.key != "seed" && !swept_by_list(ov.key)) variant_keys.insert(ov.key);
    by = resolve_by(r, by_option, swept);
    by_grid = swept_by_list(by);
    by_variant_key = !by_grid && variant_keys.count(by);
  }

  bool swept_by_list(const std::string& key) const {
    return std::find(s.grid_keys.begin(), s.grid_keys.end(), key) != s.grid_keys.end() ||
           std::find(s.zip_keys.begin(), s.zip_keys.end(), key) != s.zip_keys.end();
  }

  std::string label_of(const SweepPoint& p) const {
    if (by == "variant") return p.variant;
    if (by == "run") return p.id;
    if (by == "point") {
      std::vector<std::string> parts;
      if (!p.variant.empty()) parts.push_back(p.variant);
      std::vector<std::string> keys;
      for (const auto& kv : p.values) keys.push_back(kv.first);
      for (const auto& [k, v] : p.values) parts.push_back(short_key(k, keys) + "=" + v);
      return parts.empty() ? "(all)" : join(parts, " ");
    }
    const std::string v = p.value_of(by);
    return v.empty() ? "(base value)" : v;
  }

  std::string pair_key_of(const SweepPoint& p) const {
    std::string key = "seed=" + std::to_string(p.seed);
    if (by == "point" || by == "run") return key;
    if (by != "variant" && !by_variant_key) key += "|variant=" + p.variant;
    for (const auto& [k, v] : p.values)
      if (k != by) key += "|" + k + "=" + v;
    return key;
  }

  // What runs pair by, for the notes.
  std::string pairing() const {
    const size_t swept_lists = s.grid_keys.size() + s.zip_keys.size();
    return by == "point" || by == "run"
               ? "the same seed"
               : "the same seed" + std::string(swept_lists == 0 || (swept_lists == 1 && by_grid)
                                                   ? ""
                                                   : " and the same other swept values");
  }
};

// The group of every run, in point order, with the value it gives (or the problem why it
// gives none) and its parameter count. Returns per group: pair key -> value.
std::vector<std::map<std::string, double>> group_runs(const SweepResults& r, const Grouping& by,
                                                      int64_t at_step, Comparison& c) {
  std::vector<std::map<std::string, double>> pair_values;
  for (const auto& run : r.runs) {
    const std::string label = by.label_of(*run.point);
    auto it = std::find_if(c.groups.begin(), c.groups.end(),
                           [&](const GroupResult& g) { return g.label == label; });
    if (it == c.groups.end()) {
      c.groups.emplace_back();
      c.groups.back().label = label;
      pair_values.emplace_back();
      it = c.groups.end() - 1;
    }
    GroupResult& g = *it;
    auto& pv = pair_values[static_cast<size_t>(it - c.groups.begin())];
    g.runs.push_back(&run);
    if (run.readable && run.data.num_attrs.count("n_params")) {
      double np = run.data.num_attrs.at("n_params");
      g.params_min = std::isnan(g.params_min) ? np : std::min(g.params_min, np);
      g.params_max = std::isnan(g.params_max) ? np : std::max(g.params_max, np);
    }
    std::string why;
    const double v = run_value(run, c, at_step, why);
    if (!why.empty()) {
      g.problems.push_back(run.point->id + ": " + why);
      continue;
    }
    g.valued.push_back(&run);
    g.values.push_back(v);
    pv[by.pair_key_of(*run.point)] = v;
  }
  return pair_values;
}

// A proportion (an accuracy or exact match, every value in [0, 1]): its mean lies in
// [0, 1] and a difference of two in [-1, 1], so the t intervals are cut there (a
// confidence set cut to the parameter's range keeps its coverage). Sets intervals_cut
// and differences_cut.
void cut_proportion_intervals(Comparison& c, const std::optional<MetricSpec>& declared) {
  bool proportion =
      declared ? declared->lo == 0 && declared->hi == 1 : is_proportion_name(c.metric);
  for (const auto& g : c.groups)
    for (double v : g.values) proportion = proportion && v >= 0 && v <= 1;
  bool cut = false;
  if (proportion)
    for (auto& g : c.groups) {
      auto clip = [&](double& x, double lo, double hi) {
        if (std::isnan(x)) return false;
        const double y = std::min(hi, std::max(lo, x));
        const bool changed = y != x;
        x = y;
        cut = cut || changed;
        return changed;
      };
      clip(g.summary.ci_low, 0, 1);
      clip(g.summary.ci_high, 0, 1);
      if (g.has_test) {
        const bool low = clip(g.test.ci_low, -1, 1), high = clip(g.test.ci_high, -1, 1);
        c.differences_cut = c.differences_cut || low || high;
      }
    }
  c.intervals_cut = cut;
}

// The notes on the direction, the cut intervals and the test.
void add_method_notes(Comparison& c, const std::string& pairing, double level) {
  char lvl[40];
  std::snprintf(lvl, sizeof lvl, "%g%%", level * 100);
  if (c.direction_known)
    c.notes.push_back(std::string(c.higher_is_better ? "higher" : "lower") + " is better (" +
                      c.direction_source + "); wins: pairs where the group beats " + c.baseline +
                      ".");
  else
    c.notes.push_back(
        "whether '" + c.metric +
        "' is better higher or lower: not known from its name, so no wins are counted; "
        "add --higher-is-better or --lower-is-better.");
  if (c.intervals_cut)
    c.notes.push_back(
        "'" + c.metric +
        "' is a proportion (every value in [0, 1]): intervals are cut to [0, 1] for a mean, "
        "[-1, 1] for a difference.");
  c.notes.push_back(
      "p: two-sided paired t-test (Student's t, n-1 degrees of freedom) on the per-pair "
      "differences (group - " +
      c.baseline + "), runs paired by " + pairing + ". " + lvl + " CIs from the t distribution.");
}

// The notes on groups whose pairs the t-test cannot judge, pooled dimensions, groups with
// no pairs at all, and machines.
void add_result_notes(Comparison& c, const Sweep& s, const std::string& pairing) {
  // Quantized metrics can differ by the same amount in every pair (one problem more right):
  // no spread, so no t-test; the sign test's p for n pairs all one way is 2^(1-n).
  std::vector<std::string> flat;
  for (const GroupResult& g : c.groups)
    if (g.has_test && g.test.same_in_every_pair() && g.test.mean_diff != 0)
      flat.push_back(g.label + " (" + std::to_string(g.test.n) + " pairs: sign test p = " +
                     fmt(std::ldexp(1.0, static_cast<int>(1 - g.test.n)), "%.3g") + ")");
  if (!flat.empty())
    c.notes.push_back("Every pair differs by the same amount in " + join(flat) +
                      ": the t-test has no spread to judge that by, so p is n/a and the CI has "
                      "zero width; the sign test "
                      "(which needs no spread) gives the p shown in brackets.");
  if (!c.pooled.empty())
    c.notes.push_back("Each group pools runs with different " + join(c.pooled) +
                      " (besides the seed): n, mean and CI are over all of them; "
                      "--by point keeps them apart.");
  // Groups with values of which none pairs with the baseline's (e.g. --by run, each run of
  // its own seed): say why every row reads "no pairs", and what compares them.
  const bool others = std::any_of(c.groups.begin(), c.groups.end(), [](const GroupResult& g) {
    return !g.is_baseline && g.summary.n > 0;
  });
  if (others && std::none_of(c.groups.begin(), c.groups.end(),
                             [](const GroupResult& g) { return g.has_test; }))
    c.notes.push_back(
        "No group has a run paired with one of " + c.baseline + "'s (runs pair by " + pairing +
        "), so there is no difference, p or wins: each row shows its own runs' mean" +
        (c.by == "run" || (c.by == "point" && !s.variants.empty())
             ? s.variants.empty() ? ". To pool runs of one config on different seeds, --by point "
                                    "gives their mean and CI over the seeds."
                                  : ". To pool runs of one variant on different seeds, --by "
                                    "variant gives their mean and CI over the seeds."
             : "; run the baseline on the same seeds to pair them."));
  c.machines = machines_note(c);
  if (!c.machines.empty()) c.notes.push_back(c.machines);
}

}  // namespace

Comparison compare_sweep(const SweepResults& r, const CompareOptions& o) {
  Comparison c;
  c.metric = o.metric;
  c.level = o.level;
  c.table = find_table(r, o.metric, o.table);
  const std::optional<MetricSpec> declared = declared_spec(r, c.table, o.metric);
  resolve_direction(c, o, declared);
  c.at = o.at;
  const int64_t at_step = parse_at(o.at);
  const Grouping grouping(r, o.by);
  c.by = grouping.by;
  const auto pair_values = group_runs(r, grouping, at_step, c);
  test_against_baseline(c, pair_values,
                        o.baseline.empty() && c.by == "variant" ? r.sweep.baseline : o.baseline,
                        o.level);
  c.pooled = pooled_dims(r, c);
  cut_proportion_intervals(c, declared);
  const std::string pairing = grouping.pairing();
  add_method_notes(c, pairing, o.level);
  add_result_notes(c, r.sweep, pairing);
  return c;
}

}  // namespace ablate
