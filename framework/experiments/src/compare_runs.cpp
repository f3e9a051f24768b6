// Reading runs for comparison and reports: a sweep's runs from its manifest, or runs given
// one by one (directories, run.h5 files, sweep directories, glob patterns) with the options
// that differ between them as the dimensions (see compare.hpp).
#include <glob.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

#include <yaml-cpp/yaml.h>

#include "ablate/compare.hpp"
#include "ablate/error.hpp"
#include "ablate/experiment.hpp"
#include "ablate/trainer.hpp"

namespace ablate {
namespace fs = std::filesystem;

namespace {

// The run directories a command-line path stands for: a run directory, a run.h5 file, a
// sweep directory (its points' runs) or a glob pattern of those.
std::vector<std::string> run_dirs_of(const std::string& arg) {
  std::vector<std::string> paths;
  if (arg.find_first_of("*?[") != std::string::npos) {
    glob_t g{};
    const int rc = ::glob(arg.c_str(), 0, nullptr, &g);
    for (size_t i = 0; rc == 0 && i < g.gl_pathc; ++i) paths.emplace_back(g.gl_pathv[i]);
    globfree(&g);
    if (paths.empty())
      throw Error("'" + arg +
                  "' matches no file or directory; give run directories (runs/a runs/b) or a "
                  "pattern that matches some (runs/lr*)");
  } else {
    paths.push_back(arg);
  }
  std::vector<std::string> dirs;
  for (std::string p : paths) {
    while (p.size() > 1 && p.back() == '/') p.pop_back();
    if (fs::is_regular_file(p) && fs::path(p).filename() == "run.h5") {
      dirs.push_back(fs::path(p).has_parent_path() ? fs::path(p).parent_path().string() : ".");
    } else if (fs::is_directory(p) &&
               (fs::exists(run_file_path(p)) || fs::exists(RunDir(p).config()) ||
                fs::exists(RunDir(p).failure_marker()))) {
      // A run directory, also one whose run died before its run file existed: listed as
      // missing or failed, not dropped.
      dirs.push_back(p);
    } else if (fs::is_directory(p) && fs::exists(fs::path(p) / "manifest.yaml")) {
      for (const auto& pt : read_manifest(p).points) dirs.push_back(pt.run_dir);
    } else {
      throw Error("'" + p + "'" + (arg != p ? " (from '" + arg + "')" : "") + ": " +
                  (fs::exists(p) ? "not a run (no run.h5 in it) nor a sweep (no manifest.yaml)"
                                 : "no such file or directory") +
                  "; give run directories written by 'ablate run' (runs/<name>), their run.h5 "
                  "files, or sweep directories");
    }
  }
  return dirs;
}

// Shortest tails of the paths (whole components) that tell them apart: runs/a, runs/b -> a, b.
std::vector<std::string> short_names(const std::vector<std::string>& dirs) {
  std::vector<std::vector<std::string>> parts;
  for (const auto& d : dirs) {
    std::vector<std::string> c;
    for (const auto& e : fs::path(d).lexically_normal())
      if (!e.empty() && e != ".") c.push_back(e.string());
    if (c.empty()) c.push_back(d);
    parts.push_back(c);
  }
  std::vector<std::string> names(dirs.size());
  for (size_t depth = 1;; ++depth) {
    std::map<std::string, int> seen;
    bool longer = false;
    for (size_t i = 0; i < dirs.size(); ++i) {
      const auto& c = parts[i];
      const size_t k = std::min(depth, c.size());
      longer |= k < c.size();
      std::string n;
      for (size_t j = c.size() - k; j < c.size(); ++j) n += (n.empty() ? "" : "/") + c[j];
      names[i] = n;
      seen[n]++;
    }
    bool unique = true;
    for (const auto& [n, k] : seen) unique &= k == 1;
    if (unique || !longer) return names;
  }
}

// A run's options, flattened from its resolved config (else the config as given).
std::map<std::string, std::string> run_options(const RunData& d) {
  std::map<std::string, std::string> m;
  for (const char* attr : {"config_resolved", "config"}) {
    auto it = d.str_attrs.find(attr);
    if (it == d.str_attrs.end() || it->second.empty()) continue;
    try {
      for (auto& [k, v] : flatten(YAML::Load(it->second))) m[k] = v;
      return m;
    } catch (const YAML::Exception&) {
    }
  }
  return m;
}

}  // namespace

std::pair<std::vector<double>, std::vector<double>> metric_series(const RunData& d,
                                                                  const std::string& table,
                                                                  const std::string& metric) {
  auto t = d.tables.find(table);
  if (t == d.tables.end()) return {};
  auto s = t->second.find("step"), m = t->second.find(metric);
  if (s == t->second.end() || m == t->second.end()) return {};
  size_t n = std::min(s->second.size(), m->second.size());
  return {
      std::vector<double>(s->second.begin(), s->second.begin() + static_cast<std::ptrdiff_t>(n)),
      std::vector<double>(m->second.begin(), m->second.begin() + static_cast<std::ptrdiff_t>(n))};
}

SweepResults load_sweep_results(const std::string& sweep_dir) {
  SweepResults r;
  r.sweep = read_manifest(sweep_dir);
  r.runs.resize(r.sweep.points.size());
  for (size_t i = 0; i < r.sweep.points.size(); ++i) {
    SweepRun& run = r.runs[i];
    run.point = &r.sweep.points[i];
    run.state = run_state(run.point->run_dir);
    if (fs::exists(run_file_path(run.point->run_dir))) {
      try {
        run.data = read_run_file(run_file_path(run.point->run_dir));
        run.readable = true;
      } catch (const Error&) {
      }
    }
  }
  return r;
}

std::map<std::string, size_t> runs_by_state(const SweepResults& r) {
  std::map<std::string, size_t> counts;
  for (const SweepRun& run : r.runs) ++counts[status_name(run.state.status)];
  return counts;
}

SweepResults load_run_results(const std::vector<std::string>& paths) {
  std::vector<std::string> dirs;
  std::set<std::string> seen;
  for (const auto& a : paths)
    for (const auto& d : run_dirs_of(a)) {
      std::error_code ec;
      auto canon = fs::weakly_canonical(d, ec).string();
      if (seen.insert(ec ? d : canon).second) dirs.push_back(d);
    }
  if (dirs.empty())
    throw Error(
        "no runs given; give run directories (runs/a runs/b), a pattern (\"runs/lr*\") or a sweep "
        "directory");
  SweepResults r;
  r.any_runs = true;
  Sweep& s = r.sweep;
  s.name = "runs";
  s.dir = dirs.size() == 1 ? dirs[0] : "the " + std::to_string(dirs.size()) + " runs given";
  s.base = "(runs given one by one)";
  s.points.resize(dirs.size());
  r.runs.resize(dirs.size());
  const std::vector<std::string> ids = short_names(dirs);
  std::vector<std::map<std::string, std::string>> options(dirs.size());
  std::set<std::string> keys;
  for (size_t i = 0; i < dirs.size(); ++i) {
    SweepRun& run = r.runs[i];
    run.point = &s.points[i];
    run.state = run_state(dirs[i]);
    try {
      run.data = read_run_file(run_file_path(dirs[i]));
      run.readable = true;
    } catch (const Error&) {
    }
    options[i] = run_options(run.data);
    for (const auto& kv : options[i]) keys.insert(kv.first);
  }
  // The options that differ between the runs: the dimensions, as a sweep's grid keys. An
  // option of a plugin (model.ffn.match_params) is compared only between runs of the same
  // variant (model.ffn.type): one variant's options, present or defaulted differently where
  // another variant is chosen, follow from that choice and are no dimension of their own.
  auto value = [&](size_t i, const std::string& k) {
    auto it = options[i].find(k);
    return it == options[i].end() ? std::string("-") : it->second;
  };
  auto variant_key = [&](const std::string& k) {
    for (size_t dot = k.rfind('.'); dot != std::string::npos && dot > 0;
         dot = k.rfind('.', dot - 1)) {
      const std::string type = k.substr(0, dot) + ".type";
      if (type != k && keys.count(type)) return type;
    }
    return std::string();
  };
  for (const auto& k : keys) {
    if (k == "seed" || bookkeeping_option(k)) continue;
    const std::string type = variant_key(k);
    std::map<std::string, std::string> first;  // the first run's value, by variant
    for (size_t i = 0; i < dirs.size(); ++i) {
      const auto seen = first.emplace(type.empty() ? "" : value(i, type), value(i, k));
      if (!seen.second && seen.first->second != value(i, k)) {
        s.grid_keys.push_back(k);
        break;
      }
    }
  }
  std::set<int64_t> seeds;
  for (size_t i = 0; i < dirs.size(); ++i) {
    SweepPoint& p = s.points[i];
    p.index = static_cast<int64_t>(i);
    p.id = ids[i];
    p.run_dir = dirs[i];
    try {
      p.seed = std::stoll(value(i, "seed"));
    } catch (const std::exception&) {
      p.seed = 0;
    }
    seeds.insert(p.seed);
    for (const auto& k : s.grid_keys) {
      p.values.emplace_back(k, value(i, k));
      p.overrides.push_back({k, value(i, k), ""});
    }
  }
  s.seeds.assign(seeds.begin(), seeds.end());
  return r;
}

}  // namespace ablate
