// Experiment loading (through the checked YAML loader), overrides, flattening.
#include "ablate/experiment.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace ablate {

Experiment Experiment::load(const std::string& path, const std::vector<std::string>& overrides) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw Error(path + ": cannot open experiment file (" +
                (std::filesystem::exists(path) ? "permission denied" : "no such file") + ")");
  std::stringstream ss;
  ss << in.rdbuf();
  std::string dir = std::filesystem::absolute(path).parent_path().string();
  return parse(ss.str(), path, dir, overrides);
}

Experiment Experiment::parse(const std::string& text, const std::string& file,
                             const std::string& dir, const std::vector<std::string>& overrides) {
  Experiment e;
  e.source_ = std::make_shared<ConfigSource>();
  e.source_->file = file;
  e.dir_ = dir;
  e.root_ = load_yaml(text, file);
  if (e.root_.IsNull()) e.root_ = YAML::Node(YAML::NodeType::Map);
  if (!e.root_.IsMap())
    throw ConfigError(file + ":1:1: an experiment must be a YAML map (name:, model:, train:, ...)");
  for (const auto& ov : overrides) {
    apply_override(e.root_, ov);
    e.source_->overrides[ov.substr(0, ov.find('='))] = ov;
  }
  return e;
}

std::string Experiment::yaml() const {
  YAML::Emitter out;
  out << root_;
  return out.c_str();
}

std::string Experiment::resolved_yaml() const {
  YAML::Emitter out;
  out << source_->resolved;
  return out.c_str();
}

void apply_override(YAML::Node& root, const std::string& a) {
  auto eq = a.find('=');
  if (eq == std::string::npos || eq == 0)
    throw ConfigError("command-line override '" + a +
                      "': expected key.path=value (e.g. train.steps=200)");
  std::string key = a.substr(0, eq), text = a.substr(eq + 1);
  YAML::Node value;
  try {
    value = YAML::Load(text);
  } catch (const YAML::Exception&) {
    value = YAML::Node(text);
  }
  if (text.empty()) value = YAML::Node("");
  check_yaml(value, "command-line override '" + a + "'");
  std::vector<std::string> parts;
  std::stringstream ks(key);
  for (std::string p; std::getline(ks, p, '.');) {
    if (p.empty())
      throw ConfigError("command-line override '" + a + "': empty component in key path '" + key +
                        "'");
    parts.push_back(p);
  }
  // Walk the path; a list is entered by position (eval.0.data=...).
  const std::string where = "command-line override '" + a + "': ";
  std::string at;  // the path walked so far
  auto index_of = [&](const YAML::Node& list, const std::string& part) -> size_t {
    if (!is_list_index(part))
      throw ConfigError(where + "'" + at + "' is a list; give the position of an entry (" + at +
                        ".0" + (parts.size() > 1 ? "." + parts.back() : "") +
                        ") or the whole list (" + at + "=[...])");
    const size_t k = std::stoul(part);
    if (k >= list.size())
      throw ConfigError(where + "index " + part + " is out of range: '" + at + "' has " +
                        std::to_string(list.size()) + " entr" + (list.size() == 1 ? "y" : "ies") +
                        (list.size() ? " (0 to " + std::to_string(list.size() - 1) + ")" : "") +
                        "; to add one, give the whole list (" + at + "=[...])");
    return k;
  };
  YAML::Node n;
  n.reset(root);
  for (size_t i = 0; i < parts.size(); ++i) {
    const bool list = n.IsSequence();
    const size_t k = list ? index_of(n, parts[i]) : 0;
    auto child = [&]() { return list ? n[k] : n[parts[i]]; };
    auto set_child = [&](const YAML::Node& v) {
      if (list) n[k] = v;
      else n[parts[i]] = v;
    };
    at += (at.empty() ? "" : ".") + parts[i];
    if (i + 1 == parts.size()) {
      set_child(value);
      return;
    }
    YAML::Node next = child();
    if (next.IsDefined() && next.IsScalar()) {
      // `ffn: relu` shorthand: turn it into {type: relu} so that ffn.x=... can extend it.
      YAML::Node m(YAML::NodeType::Map);
      m["type"] = next.Scalar();
      set_child(m);
      next.reset(child());
    } else if (next.IsDefined() && !next.IsMap() && !next.IsSequence() && !next.IsNull()) {
      throw ConfigError(where + "'" + parts[i] + "' is not a map");
    }
    if (!next.IsDefined() || next.IsNull()) {
      set_child(YAML::Node(YAML::NodeType::Map));
      next.reset(child());
    }
    n.reset(next);
  }
}

// A node loaded from block-style text keeps that style, and the emitter follows the node's
// style over YAML::Flow: so every sequence and map below a leaf is set to flow style, for
// `[0.9, 0.98]` and a block list of the same numbers to flatten to the same text.
static void set_flow(YAML::Node n) {
  if (!n.IsSequence() && !n.IsMap()) return;
  n.SetStyle(YAML::EmitterStyle::Flow);
  for (auto it = n.begin(); it != n.end(); ++it) set_flow(n.IsMap() ? it->second : *it);
}

static void flatten_into(const YAML::Node& n, const std::string& prefix,
                         std::vector<std::pair<std::string, std::string>>& out) {
  auto key = [&](const std::string& k) { return prefix.empty() ? k : prefix + "." + k; };
  // A list of maps (eval: [{type: ...}, ...]) is structure, entered by position as overrides
  // do (eval.0.data); a list of values ([0.9, 0.98]) is one value.
  bool list_of_maps = false;
  for (size_t i = 0; n.IsSequence() && i < n.size(); ++i) list_of_maps |= n[i].IsMap();
  if (n.IsMap()) {
    for (auto it = n.begin(); it != n.end(); ++it)
      flatten_into(it->second, key(it->first.as<std::string>()), out);
  } else if (list_of_maps) {
    for (size_t i = 0; i < n.size(); ++i) flatten_into(n[i], key(std::to_string(i)), out);
  } else {
    YAML::Node flow = YAML::Clone(n);
    set_flow(flow);
    YAML::Emitter e;
    e << YAML::Flow << flow;
    out.emplace_back(prefix, e.c_str());
  }
}

std::vector<std::pair<std::string, std::string>> flatten(const YAML::Node& node) {
  std::vector<std::pair<std::string, std::string>> out;
  flatten_into(node, "", out);
  std::sort(out.begin(), out.end());
  return out;
}

bool bookkeeping_option(const std::string& key) {
  return key == "name" || key.rfind("output.", 0) == 0 || key == "train.log_every" ||
         key == "train.checkpoint_every" || key == "train.keep_checkpoints";
}

std::vector<std::string> config_changes(const YAML::Node& old_cfg, const YAML::Node& new_cfg,
                                        bool results_only) {
  auto a = flatten(old_cfg), b = flatten(new_cfg);
  std::vector<std::string> changed;
  auto add = [&](const std::string& key, std::string change) {
    if (!(results_only && bookkeeping_option(key))) changed.push_back(std::move(change));
  };
  size_t i = 0, j = 0;
  while (i < a.size() || j < b.size()) {
    if (j >= b.size() || (i < a.size() && a[i].first < b[j].first)) {
      add(a[i].first, a[i].first + " (removed)");
      ++i;
    } else if (i >= a.size() || b[j].first < a[i].first) {
      add(b[j].first, b[j].first + " (added)");
      ++j;
    } else {
      if (a[i].second != b[j].second)
        add(a[i].first, a[i].first + ": " + a[i].second + " -> " + b[j].second);
      ++i, ++j;
    }
  }
  return changed;
}

}  // namespace ablate
