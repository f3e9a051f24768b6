// Sweep points, the manifest, run directory states, validation and running one point (see
// sweep.hpp). Reading a sweep file into points is in sweep_spec.cpp, the parallel runner in
// sweep_runner.cpp.
#include "ablate/sweep.hpp"

#include <fnmatch.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "ablate/data.hpp"
#include "ablate/runfile.hpp"

namespace ablate {
namespace fs = std::filesystem;

std::vector<std::string> SweepPoint::override_texts() const {
  std::vector<std::string> v;
  for (const auto& o : overrides) v.push_back(o.text());
  return v;
}

std::string SweepPoint::value_of(const std::string& key) const {
  std::string v;
  for (const auto& o : overrides)
    if (o.key == key) v = o.value;
  for (const auto& [k, val] : values)
    if (k == key) v = val;
  return v;
}

std::vector<std::string> Sweep::swept_keys() const {
  std::vector<std::string> keys = grid_keys;
  keys.insert(keys.end(), zip_keys.begin(), zip_keys.end());
  // Plus every key a variant sets to different values in different points.
  std::set<std::string> candidates;
  for (const auto& p : points)
    for (const auto& o : p.overrides) candidates.insert(o.key);
  for (const auto& k : candidates) {
    if (k == "seed" || std::find(keys.begin(), keys.end(), k) != keys.end()) continue;
    std::set<std::string> seen;
    for (const auto& p : points) seen.insert(p.value_of(k));
    if (seen.size() > 1) keys.push_back(k);
  }
  return keys;
}

Experiment Sweep::experiment(const SweepPoint& p) const {
  try {
    return Experiment::parse(base_text, base_label, base_dir, p.override_texts());
  } catch (const ConfigError& e) {
    throw ConfigError(located_error(p, e.what()));
  }
}

std::string located_error(const SweepPoint& p, const std::string& message) {
  std::string msg = message;
  if (msg.rfind("point ", 0) == 0) return msg;  // already located
  for (auto it = p.overrides.rbegin(); it != p.overrides.rend(); ++it) {
    if (it->where.empty()) continue;
    const std::string needle = "command-line override '" + it->text() + "'";
    for (size_t pos; (pos = msg.find(needle)) != std::string::npos;)
      msg.replace(pos, needle.size(), it->where);
  }
  return "point " + std::to_string(p.index) + " (" + p.id + "): " + msg;
}

// ---- manifest --------------------------------------------------------------------------

std::string manifest_text(const Sweep& s) {
  YAML::Emitter e;
  e << YAML::Comment(
      "ablate sweep manifest, written by `ablate sweep`. Point i runs as `ablate sweep "
      "<sweep_file> --point i`.");
  e << YAML::BeginMap;
  e << YAML::Key << "format" << YAML::Value << "ablate-sweep";
  e << YAML::Key << "format_version" << YAML::Value << 1;
  e << YAML::Key << "name" << YAML::Value << s.name;
  e << YAML::Key << "sweep_file" << YAML::Value << s.file;
  e << YAML::Key << "base" << YAML::Value << s.base;
  e << YAML::Key << "variants" << YAML::Value << YAML::Flow << s.variants;
  e << YAML::Key << "baseline" << YAML::Value << s.baseline;
  e << YAML::Key << "grid" << YAML::Value << YAML::Flow << s.grid_keys;
  e << YAML::Key << "zip" << YAML::Value << YAML::Flow << s.zip_keys;
  e << YAML::Key << "seeds" << YAML::Value << YAML::Flow << s.seeds;
  e << YAML::Key << "points" << YAML::Value << YAML::BeginSeq;
  for (const auto& p : s.points) {
    e << YAML::BeginMap;
    e << YAML::Key << "index" << YAML::Value << p.index;
    e << YAML::Key << "id" << YAML::Value << p.id;
    e << YAML::Key << "variant" << YAML::Value << p.variant;
    e << YAML::Key << "values" << YAML::Value << YAML::Flow << YAML::BeginMap;
    for (const auto& [k, v] : p.values) e << YAML::Key << k << YAML::Value << v;
    e << YAML::EndMap;
    e << YAML::Key << "seed_index" << YAML::Value << p.seed_index;
    e << YAML::Key << "seed" << YAML::Value << p.seed;
    e << YAML::Key << "overrides" << YAML::Value << YAML::Flow << p.override_texts();
    e << YAML::Key << "run_dir" << YAML::Value << (fs::path("runs") / p.id).string();
    e << YAML::EndMap;
  }
  e << YAML::EndSeq << YAML::EndMap;
  return std::string(e.c_str()) + "\n";
}

void write_manifest(const Sweep& s) {
  const fs::path path = fs::path(s.dir) / "manifest.yaml";
  const std::string text = manifest_text(s);
  {
    std::ifstream in(path, std::ios::binary);
    std::stringstream old;
    old << in.rdbuf();
    if (in && old.str() == text) return;
  }
  fs::create_directories(s.dir);
  // Unique temporary name per process, then an atomic rename.
  const fs::path tmp = path.string() + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary);
    out << text;
    if (!out) throw Error(tmp.string() + ": cannot write the sweep manifest");
  }
  fs::rename(tmp, path);
}

Sweep read_manifest(const std::string& sweep_dir) {
  const std::string path = (fs::path(sweep_dir) / "manifest.yaml").string();
  if (!fs::exists(path))
    throw Error(sweep_dir +
                ": no manifest.yaml here; give a sweep directory written by 'ablate sweep' (e.g. "
                "sweeps/<name>)");
  YAML::Node m;
  try {
    m = YAML::LoadFile(path);
  } catch (const YAML::Exception& e) {
    throw Error(path + ": not a readable sweep manifest (" + e.what() + ")");
  }
  auto bad = [&](const std::string& why) -> Error {
    return Error(path + ": not a sweep manifest written by ablate (" + why + ")");
  };
  if (!m.IsMap() || !m["format"] || m["format"].as<std::string>("") != "ablate-sweep")
    throw bad("no 'format: ablate-sweep'");
  if (m["format_version"].as<int64_t>(0) > 1)
    throw Error(path + ": manifest format_version " + m["format_version"].as<std::string>() +
                " is newer than this ablate reads; update ablate");
  Sweep s;
  try {
    s.file = m["sweep_file"].as<std::string>("");
    s.name = m["name"].as<std::string>("");
    s.dir = sweep_dir;
    s.base = m["base"].as<std::string>("");
    s.baseline = m["baseline"].as<std::string>("");
    if (m["variants"]) s.variants = m["variants"].as<std::vector<std::string>>();
    if (m["grid"]) s.grid_keys = m["grid"].as<std::vector<std::string>>();
    if (m["zip"]) s.zip_keys = m["zip"].as<std::vector<std::string>>();
    if (m["seeds"]) s.seeds = m["seeds"].as<std::vector<int64_t>>();
    if (!m["points"].IsSequence()) throw bad("no list of points");
    for (const auto& n : m["points"]) {
      SweepPoint p;
      p.index = n["index"].as<int64_t>();
      p.id = n["id"].as<std::string>();
      p.variant = n["variant"].as<std::string>("");
      if (n["values"].IsMap())
        for (auto it = n["values"].begin(); it != n["values"].end(); ++it)
          p.values.emplace_back(it->first.as<std::string>(), it->second.as<std::string>(""));
      p.seed_index = n["seed_index"].as<int64_t>(0);
      p.seed = n["seed"].as<int64_t>(0);
      if (n["overrides"].IsSequence())
        for (const auto& o : n["overrides"]) {
          std::string t = o.as<std::string>();
          auto eq = t.find('=');
          p.overrides.push_back(
              {t.substr(0, eq), eq == std::string::npos ? "" : t.substr(eq + 1), ""});
        }
      p.run_dir = (fs::path(sweep_dir) / n["run_dir"].as<std::string>("runs/" + p.id)).string();
      s.points.push_back(std::move(p));
    }
  } catch (const YAML::Exception& e) {
    throw bad(e.what());
  }
  return s;
}

// ---- run directories ---------------------------------------------------------------------

std::vector<int64_t> select_points(const Sweep& s, const std::string& list) {
  const int64_t n = static_cast<int64_t>(s.points.size());
  std::vector<std::string> ids;
  for (const auto& p : s.points) ids.push_back(p.id);
  auto help = [&] {
    std::vector<std::string> some(ids.begin(), ids.begin() + std::min<std::ptrdiff_t>(4, n));
    return "allowed: indices 0 to " + std::to_string(n - 1) +
           ", ranges like 0-2, or globs over the point ids (" + join(some) +
           (n > 4 ? ", ..." : "") + "; `ablate sweep " + s.file + " --dry-run` lists them)";
  };
  std::vector<bool> chosen(s.points.size(), false);
  static const std::regex range(R"((\d{1,9})(?:-(\d{1,9}))?)");
  std::stringstream ss(list);
  for (std::string item; std::getline(ss, item, ',');) {
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    if (item.empty()) throw Error("--points '" + list + "': an empty item; " + help());
    std::smatch m;
    if (std::regex_match(item, m, range)) {
      const int64_t a = std::stoll(m[1]), b = m[2].matched ? std::stoll(m[2]) : a;
      if (b < a || b >= n)
        throw Error("--points '" + list + "': '" + item +
                    "' is not a range of this sweep's points; " + help());
      for (int64_t i = a; i <= b; ++i) chosen[static_cast<size_t>(i)] = true;
      continue;
    }
    bool any = false;
    for (size_t i = 0; i < ids.size(); ++i)
      if (fnmatch(item.c_str(), ids[i].c_str(), 0) == 0) chosen[i] = any = true;
    if (!any) {
      const std::string near = did_you_mean(item, ids);
      throw Error("--points '" + list + "': '" + item + "' matches no point id; " + help() +
                  (near.empty() ? "" : ". Did you mean '" + near + "'?"));
    }
  }
  std::vector<int64_t> out;
  for (int64_t i = 0; i < n; ++i)
    if (chosen[static_cast<size_t>(i)]) out.push_back(i);
  return out;
}

std::vector<std::string> config_changes(const std::string& recorded_yaml, const Experiment& exp) {
  YAML::Node recorded;
  try {
    recorded = YAML::Load(recorded_yaml);
  } catch (const YAML::Exception&) {
    return {"(the recorded config is not readable YAML)"};
  }
  return config_changes(recorded, exp.node(), /*results_only=*/true);
}

std::vector<PointCheck> validate_sweep(const Sweep& s,
                                       const std::function<void(size_t, size_t)>& on_point) {
  DataMemo memo;  // points that share their data read and encode it once
  std::vector<PointCheck> checks(s.points.size());
  std::vector<std::pair<std::string, std::vector<const SweepPoint*>>>
      errors;  // message -> points, first-seen order
  std::vector<std::string> changed;
  size_t checked = 0;
  for (const auto& p : s.points) {
    PointCheck& c = checks[static_cast<size_t>(p.index)];
    try {
      Experiment exp = s.experiment(p);
      RunOptions ro;
      ro.out_dir = p.run_dir;
      c.info = describe_experiment(exp, ro);
      c.config = exp.yaml();
      c.state = run_state(p.run_dir);
      if (!c.state.config.empty()) c.changes = config_changes(c.state.config, exp);
      if (c.state.status == RunStatus::done && !c.changes.empty())
        changed.push_back(p.run_dir + ": " + join(c.changes, "; "));
    } catch (const Error& e) {
      std::string msg = located_error(p, e.what());
      msg = msg.substr(msg.find("): ") + 3);  // without the "point i (id): " prefix, to group
      auto it =
          std::find_if(errors.begin(), errors.end(), [&](const auto& x) { return x.first == msg; });
      if (it == errors.end()) errors.push_back({msg, {&p}});
      else it->second.push_back(&p);
    }
    if (on_point) on_point(++checked, s.points.size());
  }
  if (!errors.empty()) {
    size_t bad = 0;
    for (const auto& [m, ps] : errors) bad += ps.size();
    std::string out = s.file + ": " + std::to_string(bad) + " of " +
                      std::to_string(s.points.size()) + " points are invalid:";
    for (const auto& [m, ps] : errors) {
      std::string who;
      if (ps.size() == s.points.size() && ps.size() > 1) {
        who = "every point";
      } else {
        std::vector<std::string> names;
        for (size_t k = 0; k < ps.size() && k < 3; ++k)
          names.push_back(std::to_string(ps[k]->index) + " (" + ps[k]->id + ")");
        who = (ps.size() == 1 ? "point " : "points ") + join(names) +
              (ps.size() > 3 ? " and " + std::to_string(ps.size() - 3) + " more" : "");
      }
      out += "\n  " + who + ": " + m;
    }
    throw ConfigError(out);
  }
  if (!changed.empty())
    throw Error(s.dir +
                ": finished runs were made with a config that differs from the sweep's now:\n  " +
                join(changed, "\n  ") +
                "\nDelete those run directories to rerun them, or give the sweep another directory "
                "(dir: or --dir)");
  return checks;
}

bool run_point(const Sweep& s, const SweepPoint& p, RunOptions ro) {
  Experiment exp = s.experiment(p);
  ro.out_dir = p.run_dir;
  try {
    describe_experiment(exp, ro);  // validates and fills in defaults, as the run will
  } catch (const Error& e) {
    throw ConfigError(located_error(p, e.what()));
  }
  write_manifest(s);
  const RunDir dir(p.run_dir);
  const RunState st = dir.state();
  std::vector<std::string> changes =
      st.config.empty() ? std::vector<std::string>{} : config_changes(st.config, exp);
  StartPlan plan;
  try {
    plan = dir.plan_point(st, changes);
  } catch (const Error& e) {
    throw Error(located_error(p, e.what()));
  }
  if (plan.mode == StartMode::skip) return false;
  const std::vector<std::string> kept = dir.prepare_point(plan);
  if (!kept.empty())
    std::cerr << p.run_dir << ": the earlier run (" << status_name(st.status) << " at step "
              << std::max<int64_t>(st.last_step, 0) << ") cannot resume ("
              << (changes.empty() ? "no checkpoint" : "another config: " + join(changes, "; "))
              << "); starting afresh, its files kept as " << join(kept) << "\n";
  ro.resume = plan.mode == StartMode::resume;
  ro.overwrite = !ro.resume;
  dir.clear_failure();
  try {
    run_experiment(exp, ro);
  } catch (const ConfigError& e) {
    throw ConfigError(located_error(p, e.what()));
  }
  return true;
}

}  // namespace ablate
