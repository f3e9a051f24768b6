// Sweep files: parsing with located errors, expansion into points, the manifest, run
// directory states, validation and running one point (see sweep.hpp). The parallel
// runner is in sweep_runner.cpp.
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
#include "ablate/tensor.hpp"

namespace ablate {
namespace fs = std::filesystem;

namespace {

constexpr int64_t kMaxSeeds = 100000;

std::string where_of(const std::string& file, const YAML::Node& n) {
  return yaml_location(file, n.Mark());
}

// Text that apply_override parses back to the same YAML value (quoted where needed).
std::string override_value(const YAML::Node& n) {
  YAML::Emitter e;
  e << YAML::Flow << n;
  return e.c_str();
}

// Short text for ids, tables and plots: the scalar itself, else its flow form.
std::string display_value(const YAML::Node& n) {
  return n.IsScalar() ? n.Scalar() : override_value(n);
}

bool safe_name(const std::string& s) {
  if (s.empty() || s == "." || s == "..") return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.'))
      return false;
  return true;
}

// Characters outside [A-Za-z0-9._=+-] become '_', runs of '_' collapse, ends trimmed.
std::string id_part(const std::string& s) {
  std::string o;
  for (char c : s) {
    bool ok = std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '=' ||
              c == '+' || c == '-';
    char w = ok ? c : '_';
    if (w == '_' && !o.empty() && o.back() == '_') continue;
    o += w;
  }
  while (!o.empty() && o.front() == '_') o.erase(o.begin());
  while (!o.empty() && o.back() == '_') o.pop_back();
  return o.empty() ? "x" : o;
}

void check_key_path(const Options& parent, const std::string& key) {
  if (key.empty() || key.front() == '.' || key.back() == '.' || key.find("..") != std::string::npos)
    parent.fail(key, "key path '" + key + "' has an empty component; write it like model.ffn.type");
  for (char c : key)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.'))
      parent.fail(key, "key path '" + key + "' contains '" + std::string(1, c) +
                           "'; key paths are names joined by dots (model.d_model)");
  if (key == "seed")
    parent.fail(
        key,
        "the seed is set by sweep.seeds (a count or a list) and sweep.seed, not by an override");
}

// The inline `base:` map as a YAML document whose nodes keep the line and column they
// have in the sweep file (blank lines before it, the text left of it blanked), so that
// errors inside it point into the sweep file. Empty when the text cannot be cut out.
std::string inline_base_text(const std::string& text, const YAML::Node& base) {
  std::vector<std::string> lines;
  std::stringstream ss(text);
  for (std::string l; std::getline(ss, l);) lines.push_back(l);
  const YAML::Mark m = base.Mark();
  if (m.is_null() || m.line < 0 || m.line >= static_cast<int>(lines.size())) return "";
  const size_t L = static_cast<size_t>(m.line), C = static_cast<size_t>(m.column);
  std::string out(L, '\n');
  std::string first = lines[L];
  if (first.size() < C) return "";
  first.replace(0, C, std::string(C, ' '));
  if (base.Style() == YAML::EmitterStyle::Flow) {
    // Up to the bracket that closes the one at (L, C).
    int depth = 0;
    char quote = 0;
    for (size_t i = L; i < lines.size(); ++i) {
      std::string l = i == L ? first : lines[i];
      for (size_t j = i == L ? C : 0; j < l.size(); ++j) {
        char c = l[j];
        if (quote) {
          if (c == quote) quote = 0;
        } else if (c == '\'' || c == '"') {
          quote = c;
        } else if (c == '{' || c == '[') {
          ++depth;
        } else if (c == '}' || c == ']') {
          if (--depth == 0) return out + l.substr(0, j + 1) + "\n";
        }
      }
      out += l + "\n";
    }
    return "";
  }
  out += first + "\n";
  for (size_t i = L + 1; i < lines.size(); ++i) {
    const std::string& l = lines[i];
    size_t ind = l.find_first_not_of(' ');
    if (ind == std::string::npos || l[ind] == '#') {  // blank or comment-only
      out += "\n";
      continue;
    }
    if (ind < C || l.compare(0, 3, "---") == 0 || l.compare(0, 3, "...") == 0) break;
    out += l + "\n";
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> flat_or_empty(const std::string& yaml) {
  try {
    return flatten(YAML::Load(yaml));
  } catch (const YAML::Exception&) {
    return {};
  }
}

// Seeds derived from the sweep seed: a splitmix64 stream cut to 31 bits (so that every
// consumer of `seed` accepts them), duplicates skipped.
std::vector<int64_t> derive_seeds(int64_t sweep_seed, int64_t n) {
  Rng rng(static_cast<uint64_t>(sweep_seed) ^ 0x5EED5EED5EED5EEDull);
  std::vector<int64_t> out;
  std::set<int64_t> seen;
  while (static_cast<int64_t>(out.size()) < n) {
    int64_t s = static_cast<int64_t>(rng.next_u64() >> 33);
    if (seen.insert(s).second) out.push_back(s);
  }
  return out;
}

struct Dim {  // one grid key, or the zip block
  std::vector<std::string> keys;
  std::vector<std::vector<YAML::Node>> values;  // [position][key]
};

}  // namespace

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

// yaml-cpp keeps both of two equal keys and a lookup sees the first: refuse them, naming
// both lines (`baseline:` twice would otherwise silently compare against the first).
static void reject_duplicate_keys(const YAML::Node& n, const std::string& file,
                                  const std::string& path, size_t& nodes, int depth = 0) {
  if (depth > 64 || ++nodes > 100000)
    return;  // alias bombs: refused by the experiment checks, not walked here
  if (n.IsMap()) {
    std::map<std::string, YAML::Mark> seen;
    for (auto it = n.begin(); it != n.end(); ++it) {
      if (!it->first.IsScalar()) continue;
      const std::string key = path.empty() ? it->first.Scalar() : path + "." + it->first.Scalar();
      auto [first, fresh] = seen.emplace(it->first.Scalar(), it->first.Mark());
      if (!fresh) {
        const YAML::Mark a = first->second, b = it->first.Mark();
        const std::string both = a.line == b.line
                                     ? "on line " + std::to_string(a.line + 1) + ", columns " +
                                           std::to_string(a.column + 1) + " and " +
                                           std::to_string(b.column + 1)
                                     : "on line " + std::to_string(a.line + 1) + " and on line " +
                                           std::to_string(b.line + 1);
        throw ConfigError(where_of(file, it->first) + ": " + key + ": given twice, " + both +
                          "; keep one of them");
      }
      reject_duplicate_keys(it->second, file, key, nodes, depth + 1);
    }
  } else if (n.IsSequence()) {
    for (const auto& e : n) reject_duplicate_keys(e, file, path, nodes, depth + 1);
  }
}

Sweep load_sweep(const std::string& path, const std::string& dir_override) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw Error(path + ": cannot open sweep file (" +
                (fs::exists(path) ? "permission denied" : "no such file") + ")");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_sweep(ss.str(), path, fs::absolute(path).parent_path().string(), dir_override);
}

Sweep parse_sweep(const std::string& text, const std::string& file, const std::string& file_dir,
                  const std::string& dir_override) {
  YAML::Node doc;
  try {
    doc = YAML::Load(text);
  } catch (const YAML::ParserException& ex) {
    throw ConfigError(yaml_location(file, ex.mark) + ": YAML syntax error: " + ex.msg);
  }
  if (!doc.IsMap())
    throw ConfigError(
        file + ":1:1: a sweep must be a YAML map with base: and sweep: (see docs/SWEEPS.md)");
  size_t nodes = 0;
  reject_duplicate_keys(doc, file, "", nodes);
  auto src = std::make_shared<ConfigSource>();
  src->file = file;
  Options root(doc, src, "");

  Sweep s;
  s.file = file;
  s.name = root.get<std::string>("name", fs::path(file).stem().string(), "sweep name");
  if (!safe_name(s.name))
    root.fail("name", "'" + s.name +
                          "' is not a safe directory name; use letters, digits, '_', '-' and '.'");

  // The base experiment: a file next to the sweep file, or an inline map.
  root.mark_used("base");
  const YAML::Node base = doc["base"];
  if (!base.IsDefined() || base.IsNull())
    root.fail("base",
              "missing; expected the base experiment: a path (relative to this file) or an inline "
              "experiment map");
  if (base.IsScalar()) {
    fs::path p(base.Scalar());
    fs::path resolved = p.is_absolute() ? p : fs::path(file_dir) / p;
    std::ifstream in(resolved, std::ios::binary);
    if (!in)
      root.fail("base", "cannot open '" + base.Scalar() + "' (resolved to " +
                            resolved.lexically_normal().string() +
                            "): " + (fs::exists(resolved) ? "permission denied" : "no such file"));
    std::stringstream bs;
    bs << in.rdbuf();
    s.base_text = bs.str();
    s.base_label = p.is_absolute() ? p.string()
                                   : (fs::path(file).parent_path() / p).lexically_normal().string();
    s.base_dir = fs::absolute(resolved).parent_path().lexically_normal().string();
    s.base = s.base_label;
  } else if (base.IsMap()) {
    s.base_text = inline_base_text(text, base);
    s.base_label = file;
    if (s.base_text.empty() || flat_or_empty(s.base_text) != flatten(base)) {
      // Unusual layout: fall back to the re-emitted map (locations then approximate).
      s.base_text = override_value(base);
      s.base_label = file + " (inline base)";
    }
    s.base_dir = file_dir;
    s.base = "(inline)";
  } else {
    root.fail("base",
              "expected a path to an experiment YAML file or an inline experiment map, got a list");
  }

  s.dir = root.get<std::string>("dir", "sweeps/" + s.name,
                                "result directory (relative to the working directory)");
  if (!dir_override.empty()) s.dir = dir_override;

  // overrides: applied to every point, before the sweep's own values.
  std::vector<SweepOverride> common;
  root.mark_used("overrides");
  const YAML::Node ov = doc["overrides"];
  if (ov.IsDefined() && !ov.IsNull()) {
    if (!ov.IsMap())
      root.fail("overrides", "expected a map of key.path: value (e.g. train.steps: 500)");
    Options o(ov, src, "overrides");
    for (auto it = ov.begin(); it != ov.end(); ++it) {
      std::string k = it->first.as<std::string>();
      check_key_path(o, k);
      common.push_back({k, override_value(it->second), where_of(file, it->second)});
    }
  }

  const YAML::Node swn = doc["sweep"];
  Options sw = root.child("sweep");
  if (swn.IsDefined() && !swn.IsNull() && !swn.IsMap())
    root.fail("sweep", "expected a map with grid:, zip:, variants:, seeds:");

  // variants: name -> map of key.path: value.
  std::vector<std::vector<SweepOverride>> variant_ovs;
  std::set<std::string> variant_keys;
  sw.mark_used("variants");
  const YAML::Node vn = swn.IsMap() ? swn["variants"] : YAML::Node();
  if (vn.IsDefined() && !vn.IsNull()) {
    if (!vn.IsMap() || vn.size() == 0)
      sw.fail("variants",
              "expected a map of variant name -> {key.path: value, ...} (e.g. relu: {model.ffn: "
              "relu})");
    Options vo(vn, src, "sweep.variants");
    for (auto it = vn.begin(); it != vn.end(); ++it) {
      std::string name = it->first.as<std::string>();
      if (!safe_name(name))
        vo.fail(name, "variant name '" + name +
                          "' is not filesystem-safe; use letters, digits, '_', '-' and '.'");
      const YAML::Node body = it->second;
      if (!body.IsNull() && !body.IsMap())
        vo.fail(name,
                "expected a map of key.path: value (e.g. {model.ffn: swiglu}); {} for the base as "
                "it is");
      std::vector<SweepOverride> ovs;
      Options bo(body, src, "sweep.variants." + name);
      if (body.IsMap())
        for (auto jt = body.begin(); jt != body.end(); ++jt) {
          std::string k = jt->first.as<std::string>();
          check_key_path(bo, k);
          ovs.push_back({k, override_value(jt->second), where_of(file, jt->second)});
          variant_keys.insert(k);
        }
      s.variants.push_back(name);
      variant_ovs.push_back(ovs);
    }
  }
  if (sw.has("baseline") && s.variants.empty())
    sw.fail("baseline", "names a variant, but the sweep has no variants");
  s.baseline = s.variants.empty() ? ""
                                  : sw.get<std::string>("baseline", s.variants.front(),
                                                        "the variant others are compared to");
  if (!s.variants.empty() &&
      std::find(s.variants.begin(), s.variants.end(), s.baseline) == s.variants.end()) {
    std::string dym = did_you_mean(s.baseline, s.variants);
    sw.fail("baseline", "'" + s.baseline + "' is not a variant; variants: " + join(s.variants) +
                            (dym.empty() ? "" : ". Did you mean '" + dym + "'?"));
  }

  // grid: key -> list (Cartesian product); zip: key -> lists advanced together.
  std::vector<Dim> dims;
  std::map<std::string, std::string> dim_of;  // key -> "grid" / "zip"
  auto read_lists = [&](const char* section, bool zipped) {
    sw.mark_used(section);
    const YAML::Node n = swn.IsMap() ? swn[section] : YAML::Node();
    if (!n.IsDefined() || n.IsNull()) return;
    if (!n.IsMap())
      sw.fail(
          section,
          std::string("expected a map of key.path: [value, ...] (e.g. model.d_model: [64, 96])"));
    Options o(n, src, std::string("sweep.") + section);
    Dim zip;
    std::string first_key;
    for (auto it = n.begin(); it != n.end(); ++it) {
      std::string k = it->first.as<std::string>();
      check_key_path(o, k);
      const YAML::Node list = it->second;
      if (!list.IsSequence() || list.size() == 0)
        o.fail(k, std::string("expected a non-empty list of values, e.g. [64, 96]") +
                      (list.IsScalar() ? "; got the single value '" + list.Scalar() + "' (write [" +
                                             list.Scalar() + "])"
                                       : ""));
      if (dim_of.count(k))
        o.fail(k, "'" + k + "' is swept twice (also in sweep." + dim_of[k] + ")");
      if (variant_keys.count(k))
        o.fail(k, "'" + k + "' is also set by a variant; sweep it in one place only");
      dim_of[k] = section;
      if (zipped) {
        if (zip.keys.empty()) {
          first_key = k;
          zip.values.resize(list.size());
        } else if (list.size() != zip.values.size()) {
          o.fail(k, "has " + std::to_string(list.size()) + " values but " + first_key + " has " +
                        std::to_string(zip.values.size()) +
                        "; zipped lists advance together and must have equal length");
        }
        zip.keys.push_back(k);
        for (size_t i = 0; i < list.size(); ++i) zip.values[i].push_back(list[i]);
        s.zip_keys.push_back(k);
      } else {
        Dim d;
        d.keys.push_back(k);
        for (size_t i = 0; i < list.size(); ++i) d.values.push_back({list[i]});
        dims.push_back(d);
        s.grid_keys.push_back(k);
      }
    }
    if (zipped && !zip.keys.empty()) dims.push_back(zip);
  };
  read_lists("grid", false);
  read_lists("zip", true);

  // seeds: N (derived from sweep.seed) or an explicit list.
  sw.mark_used("seeds");
  const YAML::Node sn = swn.IsMap() ? swn["seeds"] : YAML::Node();
  bool derived = true;
  if (sn.IsDefined() && sn.IsSequence()) {
    derived = false;
    if (sw.has("seed"))
      sw.fail("seed", "derives seeds for `seeds: N`; with an explicit list of seeds leave it out");
    if (sn.size() == 0) sw.fail("seeds", "expected at least one seed");
    std::set<int64_t> seen;
    for (size_t i = 0; i < sn.size(); ++i) {
      int64_t v = -1;
      try {
        v = sn[i].as<int64_t>();
      } catch (const YAML::Exception&) {
      }
      if (!sn[i].IsScalar() || v < 0 || v > (int64_t{1} << 62))
        throw ConfigError(where_of(file, sn[i]) + ": sweep.seeds: '" + display_value(sn[i]) +
                          "' is not a seed; seeds are integers in [0, 2^62]");
      if (!seen.insert(v).second)
        throw ConfigError(where_of(file, sn[i]) + ": sweep.seeds: seed " + std::to_string(v) +
                          " is listed twice");
      s.seeds.push_back(v);
    }
  } else {
    int64_t n =
        sw.get_in<int64_t>("seeds", 1, 1, kMaxSeeds, "number of seeds (or a list of seeds)");
    int64_t sweep_seed =
        sw.get_in<int64_t>("seed", 0, 0, int64_t{1} << 62, "seeds: N derive N seeds from this");
    s.seeds = derive_seeds(sweep_seed, n);
  }
  if (swn.IsMap()) sw.check_unused();
  root.check_unused();

  // Expansion: index = ((variant * G + grid) * Z + zip) * S + seed, last grid key fastest.
  std::vector<std::string> all_keys = s.grid_keys;
  all_keys.insert(all_keys.end(), s.zip_keys.begin(), s.zip_keys.end());
  auto short_key = [&](const std::string& k) {
    std::string last = k.substr(k.rfind('.') == std::string::npos ? 0 : k.rfind('.') + 1);
    int same = 0;
    for (const auto& o : all_keys) {
      std::string ol = o.substr(o.rfind('.') == std::string::npos ? 0 : o.rfind('.') + 1);
      same += ol == last;
    }
    return same > 1 ? k : last;
  };
  const size_t V = std::max<size_t>(1, s.variants.size());
  size_t combos = 1;
  for (const auto& d : dims) combos *= d.values.size();
  if (V * combos * s.seeds.size() > 1000000)
    root.fail("sweep", "expands to more than a million points");
  std::map<std::string, int64_t> ids;
  for (size_t v = 0; v < V; ++v)
    for (size_t c = 0; c < combos; ++c)
      for (size_t si = 0; si < s.seeds.size(); ++si) {
        SweepPoint p;
        p.index = static_cast<int64_t>(s.points.size());
        p.overrides = common;
        std::vector<std::string> parts;
        if (!s.variants.empty()) {
          p.variant = s.variants[v];
          parts.push_back(p.variant);
          p.overrides.insert(p.overrides.end(), variant_ovs[v].begin(), variant_ovs[v].end());
        }
        // Mixed-radix digits of c, the last dimension fastest.
        std::vector<size_t> digit(dims.size());
        size_t rest = c;
        for (size_t d = dims.size(); d-- > 0;) {
          digit[d] = rest % dims[d].values.size();
          rest /= dims[d].values.size();
        }
        for (size_t d = 0; d < dims.size(); ++d)
          for (size_t k = 0; k < dims[d].keys.size(); ++k) {
            const YAML::Node& val = dims[d].values[digit[d]][k];
            const std::string& key = dims[d].keys[k];
            p.values.emplace_back(key, display_value(val));
            p.overrides.push_back({key, override_value(val), where_of(file, val)});
            parts.push_back(id_part(short_key(key)) + "=" + id_part(display_value(val)));
          }
        p.seed_index = static_cast<int64_t>(si);
        p.seed = s.seeds[si];
        p.overrides.push_back(
            {"seed", std::to_string(p.seed), where_of(file, sn.IsDefined() ? sn : doc)});
        parts.push_back("seed" + std::to_string(derived ? p.seed_index : p.seed));
        p.id = join(parts, "-");
        if (ids.count(p.id))
          root.fail(
              "sweep",
              "points " + std::to_string(ids[p.id]) + " and " + std::to_string(p.index) +
                  " both get the id '" + p.id +
                  "' (values that differ only in punctuation); make the values distinguishable");
        ids[p.id] = p.index;
        p.run_dir = (fs::path(s.dir) / "runs" / p.id).string();
        s.points.push_back(std::move(p));
      }
  return s;
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
