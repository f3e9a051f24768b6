// Reading a sweep file (see sweep.hpp, docs/SWEEPS.md): the checked YAML document, its
// sections in order (name, base, dir, overrides, sweep.variants, baseline, grid, zip,
// seeds), each error naming file:line:col, and the expansion into points.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "ablate/sweep.hpp"
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

// The id part of a swept key: its last component, or the whole path when two swept keys
// share that last component.
std::string short_key(const std::string& k, const std::vector<std::string>& all_keys) {
  std::string last = k.substr(k.rfind('.') == std::string::npos ? 0 : k.rfind('.') + 1);
  int same = 0;
  for (const auto& o : all_keys) {
    std::string ol = o.substr(o.rfind('.') == std::string::npos ? 0 : o.rfind('.') + 1);
    same += ol == last;
  }
  return same > 1 ? k : last;
}

// The sweep file as a checked YAML map.
YAML::Node sweep_document(const std::string& text, const std::string& file) {
  YAML::Node doc = load_yaml(text, file);
  if (!doc.IsMap())
    throw ConfigError(
        file + ":1:1: a sweep must be a YAML map with base: and sweep: (see docs/SWEEPS.md)");
  return doc;
}

// Reads the sections of one sweep document in file order into a Sweep, then expands it.
class SweepReader {
 public:
  SweepReader(const std::string& text, const std::string& file, const std::string& file_dir)
      : text_(text),
        file_(file),
        file_dir_(file_dir),
        doc_(sweep_document(text, file)),
        swn_(doc_["sweep"]),
        seeds_node_(section("seeds")),
        src_(std::make_shared<ConfigSource>()),
        root_(doc_, src_, "") {
    src_->file = file;
  }

  Sweep read(const std::string& dir_override) {
    s_.file = file_;
    read_name();
    read_base();
    s_.dir = root_.get<std::string>("dir", "sweeps/" + s_.name,
                                    "result directory (relative to the working directory)");
    if (!dir_override.empty()) s_.dir = dir_override;
    read_overrides();
    const Options sw = root_.child("sweep");
    if (swn_.IsDefined() && !swn_.IsNull() && !swn_.IsMap())
      root_.fail("sweep", "expected a map with grid:, zip:, variants:, seeds:");
    read_variants(sw);
    read_baseline(sw);
    read_lists(sw, "grid", false);
    read_lists(sw, "zip", true);
    read_seeds(sw);
    if (swn_.IsMap()) sw.check_unused();
    root_.check_unused();
    expand();
    return std::move(s_);
  }

 private:
  const std::string& text_;
  const std::string& file_;
  const std::string& file_dir_;
  YAML::Node doc_;
  const YAML::Node swn_;         // the sweep: section
  const YAML::Node seeds_node_;  // sweep.seeds as written
  std::shared_ptr<ConfigSource> src_;
  Options root_;
  Sweep s_;
  std::vector<SweepOverride> common_;                    // overrides: (every point)
  std::vector<std::vector<SweepOverride>> variant_ovs_;  // [variant]
  std::set<std::string> variant_keys_;                   // every key a variant sets
  std::vector<Dim> dims_;                                // grid keys, then the zip block
  std::map<std::string, std::string> dim_of_;            // swept key -> "grid" / "zip"
  bool seeds_derived_ = true;                            // seeds: N rather than a list

  YAML::Node section(const char* key) const { return swn_.IsMap() ? swn_[key] : YAML::Node(); }

  void read_name() {
    s_.name = root_.get<std::string>("name", fs::path(file_).stem().string(), "sweep name");
    if (!safe_name(s_.name))
      root_.fail("name", "'" + s_.name +
                             "' is not a safe directory name; use letters, digits, '_', '-' and "
                             "'.'");
  }

  // The base experiment: a file next to the sweep file, or an inline map.
  void read_base() {
    root_.mark_used("base");
    const YAML::Node base = doc_["base"];
    if (!base.IsDefined() || base.IsNull())
      root_.fail("base",
                 "missing; expected the base experiment: a path (relative to this file) or an "
                 "inline experiment map");
    if (base.IsScalar()) read_base_file(base.Scalar());
    else if (base.IsMap()) read_inline_base(base);
    else
      root_.fail(
          "base",
          "expected a path to an experiment YAML file or an inline experiment map, got a list");
  }

  void read_base_file(const std::string& given) {
    fs::path p(given);
    fs::path resolved = p.is_absolute() ? p : fs::path(file_dir_) / p;
    std::ifstream in(resolved, std::ios::binary);
    if (!in)
      root_.fail("base", "cannot open '" + given + "' (resolved to " +
                             resolved.lexically_normal().string() +
                             "): " + (fs::exists(resolved) ? "permission denied" : "no such file"));
    std::stringstream bs;
    bs << in.rdbuf();
    s_.base_text = bs.str();
    s_.base_label = p.is_absolute()
                        ? p.string()
                        : (fs::path(file_).parent_path() / p).lexically_normal().string();
    s_.base_dir = fs::absolute(resolved).parent_path().lexically_normal().string();
    s_.base = s_.base_label;
  }

  void read_inline_base(const YAML::Node& base) {
    s_.base_text = inline_base_text(text_, base);
    s_.base_label = file_;
    if (s_.base_text.empty() || flat_or_empty(s_.base_text) != flatten(base)) {
      // Unusual layout: fall back to the re-emitted map (locations then approximate).
      s_.base_text = override_value(base);
      s_.base_label = file_ + " (inline base)";
    }
    s_.base_dir = file_dir_;
    s_.base = "(inline)";
  }

  // The key.path: value entries of a map, each checked and located in the sweep file.
  std::vector<SweepOverride> read_assignments(const YAML::Node& map, const Options& at) {
    std::vector<SweepOverride> ovs;
    for (auto it = map.begin(); it != map.end(); ++it) {
      std::string k = it->first.as<std::string>();
      check_key_path(at, k);
      ovs.push_back({k, override_value(it->second), where_of(file_, it->second)});
    }
    return ovs;
  }

  // overrides: applied to every point, before the sweep's own values.
  void read_overrides() {
    root_.mark_used("overrides");
    const YAML::Node ov = doc_["overrides"];
    if (!ov.IsDefined() || ov.IsNull()) return;
    if (!ov.IsMap())
      root_.fail("overrides", "expected a map of key.path: value (e.g. train.steps: 500)");
    common_ = read_assignments(ov, Options(ov, src_, "overrides"));
  }

  // variants: name -> map of key.path: value.
  void read_variants(const Options& sw) {
    sw.mark_used("variants");
    const YAML::Node vn = section("variants");
    if (!vn.IsDefined() || vn.IsNull()) return;
    if (!vn.IsMap() || vn.size() == 0)
      sw.fail("variants",
              "expected a map of variant name -> {key.path: value, ...} (e.g. relu: {model.ffn: "
              "relu})");
    Options vo(vn, src_, "sweep.variants");
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
      if (body.IsMap()) ovs = read_assignments(body, Options(body, src_, "sweep.variants." + name));
      for (const auto& o : ovs) variant_keys_.insert(o.key);
      s_.variants.push_back(name);
      variant_ovs_.push_back(ovs);
    }
  }

  void read_baseline(const Options& sw) {
    if (sw.has("baseline") && s_.variants.empty())
      sw.fail("baseline", "names a variant, but the sweep has no variants");
    s_.baseline = s_.variants.empty() ? ""
                                      : sw.get<std::string>("baseline", s_.variants.front(),
                                                            "the variant others are compared to");
    if (!s_.variants.empty() &&
        std::find(s_.variants.begin(), s_.variants.end(), s_.baseline) == s_.variants.end()) {
      std::string dym = did_you_mean(s_.baseline, s_.variants);
      sw.fail("baseline", "'" + s_.baseline + "' is not a variant; variants: " + join(s_.variants) +
                              (dym.empty() ? "" : ". Did you mean '" + dym + "'?"));
    }
  }

  // grid: key -> list (Cartesian product); zip: key -> lists advanced together.
  void read_lists(const Options& sw, const char* name, bool zipped) {
    sw.mark_used(name);
    const YAML::Node n = section(name);
    if (!n.IsDefined() || n.IsNull()) return;
    if (!n.IsMap())
      sw.fail(name, std::string(
                        "expected a map of key.path: [value, ...] (e.g. model.d_model: [64, 96])"));
    Options o(n, src_, std::string("sweep.") + name);
    Dim zip;
    std::string first_key;
    for (auto it = n.begin(); it != n.end(); ++it) {
      std::string k = it->first.as<std::string>();
      const YAML::Node list = it->second;
      check_swept_list(o, name, k, list);
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
        s_.zip_keys.push_back(k);
      } else {
        Dim d;
        d.keys.push_back(k);
        for (size_t i = 0; i < list.size(); ++i) d.values.push_back({list[i]});
        dims_.push_back(d);
        s_.grid_keys.push_back(k);
      }
    }
    if (zipped && !zip.keys.empty()) dims_.push_back(zip);
  }

  // A swept key with its values: a valid path, a non-empty list, swept in one place only.
  void check_swept_list(const Options& o, const char* section, const std::string& k,
                        const YAML::Node& list) {
    check_key_path(o, k);
    if (!list.IsSequence() || list.size() == 0)
      o.fail(k, std::string("expected a non-empty list of values, e.g. [64, 96]") +
                    (list.IsScalar() ? "; got the single value '" + list.Scalar() + "' (write [" +
                                           list.Scalar() + "])"
                                     : ""));
    if (dim_of_.count(k))
      o.fail(k, "'" + k + "' is swept twice (also in sweep." + dim_of_[k] + ")");
    if (variant_keys_.count(k))
      o.fail(k, "'" + k + "' is also set by a variant; sweep it in one place only");
    dim_of_[k] = section;
  }

  // seeds: N (derived from sweep.seed) or an explicit list.
  void read_seeds(const Options& sw) {
    sw.mark_used("seeds");
    if (seeds_node_.IsDefined() && seeds_node_.IsSequence()) {
      seeds_derived_ = false;
      read_seed_list(sw);
    } else {
      int64_t n =
          sw.get_in<int64_t>("seeds", 1, 1, kMaxSeeds, "number of seeds (or a list of seeds)");
      int64_t sweep_seed =
          sw.get_in<int64_t>("seed", 0, 0, int64_t{1} << 62, "seeds: N derive N seeds from this");
      s_.seeds = derive_seeds(sweep_seed, n);
    }
  }

  void read_seed_list(const Options& sw) {
    const YAML::Node& sn = seeds_node_;
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
        throw ConfigError(where_of(file_, sn[i]) + ": sweep.seeds: '" + display_value(sn[i]) +
                          "' is not a seed; seeds are integers in [0, 2^62]");
      if (!seen.insert(v).second)
        throw ConfigError(where_of(file_, sn[i]) + ": sweep.seeds: seed " + std::to_string(v) +
                          " is listed twice");
      s_.seeds.push_back(v);
    }
  }

  // Expansion: index = ((variant * G + grid) * Z + zip) * S + seed, last grid key fastest.
  void expand() {
    const size_t V = std::max<size_t>(1, s_.variants.size());
    size_t combos = 1;
    for (const auto& d : dims_) combos *= d.values.size();
    if (V * combos * s_.seeds.size() > 1000000)
      root_.fail("sweep", "expands to more than a million points");
    std::vector<std::string> all_keys = s_.grid_keys;
    all_keys.insert(all_keys.end(), s_.zip_keys.begin(), s_.zip_keys.end());
    std::map<std::string, int64_t> ids;
    for (size_t v = 0; v < V; ++v)
      for (size_t c = 0; c < combos; ++c)
        for (size_t si = 0; si < s_.seeds.size(); ++si) {
          SweepPoint p = make_point(v, c, si, all_keys);
          if (ids.count(p.id))
            root_.fail(
                "sweep",
                "points " + std::to_string(ids[p.id]) + " and " + std::to_string(p.index) +
                    " both get the id '" + p.id +
                    "' (values that differ only in punctuation); make the values distinguishable");
          ids[p.id] = p.index;
          s_.points.push_back(std::move(p));
        }
  }

  // Point (variant v, combination c of the swept lists, seed si): its overrides in order
  // (overrides:, variant, grid, zip, seed), values, id and run directory.
  SweepPoint make_point(size_t v, size_t c, size_t si, const std::vector<std::string>& all_keys) {
    SweepPoint p;
    p.index = static_cast<int64_t>(s_.points.size());
    p.overrides = common_;
    std::vector<std::string> parts;
    if (!s_.variants.empty()) {
      p.variant = s_.variants[v];
      parts.push_back(p.variant);
      p.overrides.insert(p.overrides.end(), variant_ovs_[v].begin(), variant_ovs_[v].end());
    }
    // Mixed-radix digits of c, the last dimension fastest.
    std::vector<size_t> digit(dims_.size());
    size_t rest = c;
    for (size_t d = dims_.size(); d-- > 0;) {
      digit[d] = rest % dims_[d].values.size();
      rest /= dims_[d].values.size();
    }
    for (size_t d = 0; d < dims_.size(); ++d)
      for (size_t k = 0; k < dims_[d].keys.size(); ++k) {
        const YAML::Node& val = dims_[d].values[digit[d]][k];
        const std::string& key = dims_[d].keys[k];
        p.values.emplace_back(key, display_value(val));
        p.overrides.push_back({key, override_value(val), where_of(file_, val)});
        parts.push_back(id_part(short_key(key, all_keys)) + "=" + id_part(display_value(val)));
      }
    p.seed_index = static_cast<int64_t>(si);
    p.seed = s_.seeds[si];
    p.overrides.push_back({"seed", std::to_string(p.seed),
                           where_of(file_, seeds_node_.IsDefined() ? seeds_node_ : doc_)});
    parts.push_back("seed" + std::to_string(seeds_derived_ ? p.seed_index : p.seed));
    p.id = join(parts, "-");
    p.run_dir = (fs::path(s_.dir) / "runs" / p.id).string();
    return p;
  }
};

}  // namespace

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
  return SweepReader(text, file, file_dir).read(dir_override);
}

}  // namespace ablate
