// Comparisons as text: aligned tables, Markdown and CSV (format_comparison,
// format_comparisons), and a run's per-step metrics as CSV (metrics_csv); see compare.hpp.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>

#include "ablate/compare.hpp"
#include "ablate/error.hpp"
#include "compare_text.hpp"

namespace ablate {

using namespace compare_text;

namespace {

// rows[0] is the header; `right`: the columns aligned right in the text form.
std::string render_rows(const std::string& title, const std::vector<std::vector<std::string>>& rows,
                        const std::vector<bool>& right, const std::vector<std::string>& notes,
                        const std::vector<std::string>& problems, bool markdown) {
  std::ostringstream out;
  if (markdown) {
    out << "**" << title << "**\n\n";
    for (size_t r = 0; r < rows.size(); ++r) {
      out << "|";
      for (const auto& cell : rows[r]) {
        std::string e;
        for (char ch : cell) e += ch == '|' ? std::string("\\|") : std::string(1, ch);
        out << " " << e << " |";
      }
      out << "\n";
      if (r == 0) {
        out << "|";
        for (size_t i = 0; i < rows[0].size(); ++i) out << (i == 0 ? "---" : "---:") << "|";
        out << "\n";
      }
    }
    out << "\n";
    for (const auto& n : notes) out << "- " << n << "\n";
    if (!problems.empty()) {
      out << "- Not included (" << problems.size() << "):\n";
      for (const auto& pr : problems) out << "  - " << pr << "\n";
    }
    return out.str();
  }
  // Aligned text; widths in characters (± and Δ are one column each).
  auto width = [](const std::string& s) {
    size_t w = 0;
    for (unsigned char ch : s) w += (ch & 0xC0) != 0x80;
    return w;
  };
  std::vector<size_t> w(rows[0].size(), 0);
  for (const auto& r : rows)
    for (size_t i = 0; i < r.size(); ++i) w[i] = std::max(w[i], width(r[i]));
  out << title << "\n\n";
  for (const auto& r : rows) {
    std::string line;
    for (size_t i = 0; i < r.size(); ++i) {
      const size_t padn = w[i] - width(r[i]);
      line +=
          (i ? "  " : "") + (right[i] ? std::string(padn, ' ') + r[i]
                                      : r[i] + (i + 1 < r.size() ? std::string(padn, ' ') : ""));
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out << line << "\n";
  }
  out << "\n";
  for (const auto& n : notes) out << n << "\n";
  if (!problems.empty()) {
    out << "not included (" << problems.size() << "):\n";
    for (const auto& pr : problems) out << "  " << pr << "\n";
  }
  return out.str();
}

void check_format(const std::string& format) {
  if (format != "table" && format != "markdown" && format != "csv") {
    std::string dym = did_you_mean(format, {"table", "markdown", "csv"});
    throw Error("--format '" + format + "': expected table, markdown or csv" +
                (dym.empty() ? "" : ". Did you mean '" + dym + "'?"));
  }
}

}  // namespace

std::string direction_text(const Comparison& c) {
  return !c.direction_known   ? "direction not known"
         : c.higher_is_better ? "higher is better"
                              : "lower is better";
}

std::string format_comparison(const Comparison& c, const std::string& format) {
  check_format(format);
  std::ostringstream out;
  char lvl[40];
  std::snprintf(lvl, sizeof lvl, "%g%% CI", c.level * 100);
  const std::string at =
      c.at == "final" ? "final value" : (c.at == "best" ? "best value" : "value at " + c.at);
  if (format == "csv") {
    out << "group,n,runs,mean,std,ci_low,ci_high,baseline,diff_mean,diff_ci_low,diff_ci_high,p_"
           "value,test,pairs,wins,n_params,"
           "metric,table,at,by,higher_is_better,problems\n";
    for (const auto& g : c.groups) {
      auto num = [](double v) {
        if (std::isnan(v)) return std::string();
        char b[40];
        std::snprintf(b, sizeof b, "%.10g", v);
        return std::string(b);
      };
      out << csv_field(g.label) << "," << g.summary.n << "," << g.runs.size() << ","
          << num(g.summary.mean) << "," << num(g.summary.std) << "," << num(g.summary.ci_low) << ","
          << num(g.summary.ci_high) << "," << csv_field(c.baseline) << ",";
      if (g.has_test)
        out << num(g.test.mean_diff) << "," << num(g.test.ci_low) << "," << num(g.test.ci_high)
            << "," << num(g.test.p) << ",paired t-test," << g.test.n << ","
            << (c.direction_known ? std::to_string(g.wins) : "");
      else out << ",,,,,,";
      out << "," << (std::isnan(g.params_min) ? "" : fmt_params(g)) << "," << csv_field(c.metric)
          << "," << csv_field(c.table) << "," << csv_field(c.at) << "," << csv_field(c.by) << ","
          << (c.direction_known ? (c.higher_is_better ? "true" : "false") : "") << ","
          << csv_field(join(g.problems, "; ")) << "\n";
    }
    return out.str();
  }

  std::vector<std::vector<std::string>> rows;
  rows.push_back({c.by, "n", "mean ± std", lvl, "Δ vs " + c.baseline + " [" + lvl + "]",
                  "p (paired t)", "wins", "params"});
  for (const auto& g : c.groups) {
    std::string n =
        std::to_string(g.summary.n) + (g.summary.n != static_cast<int64_t>(g.runs.size())
                                           ? "/" + std::to_string(g.runs.size())
                                           : "");
    std::string ms = fmt(g.summary.mean) + (g.summary.n > 1 ? " ± " + fmt(g.summary.std) : "");
    std::string ci =
        g.summary.n > 1 ? "[" + fmt(g.summary.ci_low) + ", " + fmt(g.summary.ci_high) + "]" : "n/a";
    std::string d = "baseline", p = "", w = "";
    if (!g.is_baseline) {
      if (g.has_test) {
        d = fmt(g.test.mean_diff, "%+.4f") +
            (g.test.n > 1
                 ? " [" + fmt(g.test.ci_low, "%+.4f") + ", " + fmt(g.test.ci_high, "%+.4f") + "]"
                 : "");
        p = fmt_p(g.test.p);
        w = c.direction_known ? std::to_string(g.wins) + "/" + std::to_string(g.test.n) : "n/a";
      } else {
        d = "no pairs";
        p = "n/a";
        w = "n/a";
      }
    }
    if (g.summary.n == 0) ms = "n/a";
    rows.push_back({g.label, n, ms, ci, d, p, w, fmt_params(g)});
  }
  const std::string title = c.metric + " (" + c.table + ", " + at + "; " + direction_text(c) +
                            ") by " + c.by + ", baseline " + c.baseline;
  std::vector<std::string> problems;
  for (const auto& g : c.groups)
    for (const auto& pr : g.problems) problems.push_back(pr);
  return render_rows(title, rows, {false, true, false, false, false, true, true, true}, c.notes,
                     problems, format == "markdown");
}

namespace {

// A group's cell in the table of several metrics: the baseline's mean ± std, else the
// mean paired difference with its interval; its n when it differs from the first metric's.
std::string metric_cell(const GroupResult& g, const GroupResult& g0) {
  std::string cell;
  if (g.is_baseline)
    cell = g.summary.n == 0
               ? "n/a"
               : fmt(g.summary.mean) + (g.summary.n > 1 ? " ± " + fmt(g.summary.std) : "");
  else if (!g.has_test)
    cell = g.summary.n == 0 ? "no pairs" : "mean " + fmt(g.summary.mean) + ", no pairs";
  else if (g.test.same_in_every_pair())  // no interval or test (see the single-metric notes)
    cell = fmt(g.test.mean_diff, "%+.4f") + " in all " + std::to_string(g.test.n) + " pairs";
  else
    cell = fmt(g.test.mean_diff, "%+.4f") +
           (g.test.n > 1 ? " [" + fmt(g.test.ci_low, "%+.4f") + ", " +
                               fmt(g.test.ci_high, "%+.4f") + "]" + (g.test.p < 0.05 ? " *" : "")
                         : " (1 pair)");
  if (g.summary.n != g0.summary.n) cell += " (n " + std::to_string(g.summary.n) + ")";
  return cell;
}

// The notes under the table of several metrics: what a cell holds, the directions, cut
// intervals and machines.
std::vector<std::string> metrics_notes(const std::vector<Comparison>& cs) {
  const Comparison& first = cs[0];
  char lvl[40];
  std::snprintf(lvl, sizeof lvl, "%g%% CI", first.level * 100);
  std::vector<std::string> directions;
  for (const auto& c : cs) directions.push_back(c.metric + ": " + direction_text(c));
  if (std::all_of(cs.begin(), cs.end(),
                  [&](const Comparison& c) { return direction_text(c) == direction_text(first); }))
    directions = {"every metric: " + direction_text(first)};
  std::vector<std::string> notes{
      "Cells: the mean paired difference (group - " + first.baseline + ") with its " + lvl +
          " from Student's t; * p < 0.05 "
          "(two-sided paired t-test on the per-pair differences, runs paired as in one metric's "
          "table); `ablate compare --metric M` gives each "
          "metric's full table (wins, p-values, params).",
      join(directions, "; ") + "."};
  std::vector<std::string> cut;
  for (const auto& c : cs)
    if (c.differences_cut)
      cut.push_back(c.metric);  // the table shows differences' intervals, not means'
  if (!cut.empty())
    notes.push_back("Proportions (" + join(cut) + "): differences' intervals cut to [-1, 1].");
  if (!first.machines.empty()) notes.push_back(first.machines);
  return notes;
}

}  // namespace

std::string format_comparisons(const std::vector<Comparison>& cs, const std::string& format) {
  if (cs.size() == 1) return format_comparison(cs[0], format);
  if (cs.empty()) throw Error("format_comparisons: no comparison");
  if (format == "csv") {  // one header, then each metric's rows (the csv has a metric column)
    std::string out;
    for (size_t i = 0; i < cs.size(); ++i) {
      std::string one = format_comparison(cs[i], format);
      out += i == 0 ? one : one.substr(one.find('\n') + 1);
    }
    return out;
  }
  check_format(format);
  const Comparison& first = cs[0];
  for (const auto& c : cs)
    if (c.groups.size() != first.groups.size() || c.by != first.by || c.baseline != first.baseline)
      throw Error("format_comparisons: '" + c.metric + "' was compared with other groups than '" +
                  first.metric + "'");
  std::set<std::string> tables;
  for (const auto& c : cs) tables.insert(c.table);
  std::vector<std::vector<std::string>> rows(1, std::vector<std::string>{first.by, "n"});
  for (const auto& c : cs)
    rows[0].push_back(tables.size() > 1 ? c.table + "/" + c.metric : c.metric);
  std::vector<std::string> problems;
  for (size_t gi = 0; gi < first.groups.size(); ++gi) {
    const GroupResult& g0 = first.groups[gi];
    std::vector<std::string> row{g0.label, std::to_string(g0.summary.n) +
                                               (g0.summary.n != static_cast<int64_t>(g0.runs.size())
                                                    ? "/" + std::to_string(g0.runs.size())
                                                    : "")};
    for (const auto& c : cs) {
      const GroupResult& g = c.groups[gi];  // the same groups, in the same order, for every metric
      row.push_back(metric_cell(g, g0));
      for (const auto& pr : g.problems)
        if (std::find(problems.begin(), problems.end(), pr) == problems.end())
          problems.push_back(pr);
    }
    rows.push_back(row);
  }
  const std::string at = first.at == "final"
                             ? "final value"
                             : (first.at == "best" ? "best value" : "value at " + first.at);
  const std::string title = "(" + join(std::vector<std::string>(tables.begin(), tables.end())) +
                            ", " + at + ") by " + first.by + ": the baseline " + first.baseline +
                            "'s mean ± std, each other group's difference from it";
  const std::vector<std::string> notes = metrics_notes(cs);
  std::vector<bool> right(rows[0].size(), true);
  right[0] = false;
  return render_rows(title, rows, right, notes, problems, format == "markdown");
}

namespace {

std::string csv_number(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char b[64];
  auto res = std::to_chars(b, b + sizeof b, v);
  return std::string(b, res.ptr);
}

// Table names in export order: train, eval, then the rest by name.
std::vector<std::string> table_order(const RunData& d) {
  std::vector<std::string> names;
  for (const char* first : {"train", "eval"})
    if (d.tables.count(first)) names.push_back(first);
  for (const auto& [t, cols] : d.tables)
    if (t != "train" && t != "eval") names.push_back(t);
  return names;
}

// A table's columns, step first, then by name.
std::vector<std::string> column_order(const std::map<std::string, std::vector<double>>& cols) {
  std::vector<std::string> names;
  if (cols.count("step")) names.push_back("step");
  for (const auto& [c, v] : cols)
    if (c != "step") names.push_back(c);
  return names;
}

size_t table_rows(const std::map<std::string, std::vector<double>>& cols) {
  size_t n = cols.empty() ? 0 : SIZE_MAX;
  for (const auto& [c, v] : cols) n = std::min(n, v.size());
  return n;
}

}  // namespace

std::string metrics_csv(const RunData& d, const std::string& table, const std::string& what) {
  const std::vector<std::string> tables = table_order(d);
  if (tables.empty()) throw Error(what + ": no metrics yet (no table in /metrics)");
  std::ostringstream out;
  if (!table.empty()) {
    auto it = d.tables.find(table);
    if (it == d.tables.end()) {
      std::string dym = did_you_mean(table, tables);
      throw Error(what + ": no table '" + table + "'. Tables: " + join(tables) +
                  (dym.empty() ? "" : ". Did you mean '" + dym + "'?"));
    }
    const auto cols = column_order(it->second);
    out << join(cols, ",") << "\n";
    for (size_t i = 0, n = table_rows(it->second); i < n; ++i) {
      for (size_t c = 0; c < cols.size(); ++c)
        out << (c ? "," : "") << csv_number(it->second.at(cols[c])[i]);
      out << "\n";
    }
    return out.str();
  }
  // Joined on step: for each table, step -> its rows at that step, in order.
  std::map<double, size_t> lines_at;  // step -> lines it needs (most rows any table has there)
  std::vector<std::map<double, std::vector<size_t>>> rows_at(tables.size());
  std::vector<std::vector<std::string>> cols(tables.size());
  out << "step";
  for (size_t t = 0; t < tables.size(); ++t) {
    const auto& tab = d.tables.at(tables[t]);
    auto s = tab.find("step");
    if (s == tab.end()) continue;  // not a per-step table (e.g. segments): --table shows it
    for (const auto& c : column_order(tab))
      if (c != "step") cols[t].push_back(c), out << "," << csv_field(tables[t] + "/" + c);
    for (size_t i = 0, n = table_rows(tab); i < n; ++i) rows_at[t][s->second[i]].push_back(i);
    for (const auto& [step, rows] : rows_at[t])
      lines_at[step] = std::max(lines_at[step], rows.size());
  }
  out << "\n";
  for (const auto& [step, lines] : lines_at)
    for (size_t k = 0; k < lines; ++k) {
      out << csv_number(step);
      for (size_t t = 0; t < tables.size(); ++t) {
        auto r = rows_at[t].find(step);
        const bool has = r != rows_at[t].end() && k < r->second.size();
        for (const auto& c : cols[t])
          out << "," << (has ? csv_number(d.tables.at(tables[t]).at(c)[r->second[k]]) : "");
      }
      out << "\n";
    }
  return out.str();
}

}  // namespace ablate
