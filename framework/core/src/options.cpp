// Option views over YAML documents with located errors (see options.hpp).
#include "ablate/options.hpp"

#include <algorithm>

namespace ablate {

Options::Options(YAML::Node node, std::shared_ptr<ConfigSource> source, std::string path)
    : node_(std::move(node)), source_(std::move(source)), path_(std::move(path)) {
  if (!source_) source_ = std::make_shared<ConfigSource>();
  // Scalar shorthand: `ffn: relu` means `ffn: {type: relu}`.
  if (node_.IsDefined() && node_.IsScalar()) {
    shorthand_mark_ = node_.Mark();
    YAML::Node m(YAML::NodeType::Map);
    m["type"] = node_.Scalar();
    node_ = m;
  }
}

Options Options::describe(const std::string& path) {
  Options o(YAML::Node(YAML::NodeType::Map), std::make_shared<ConfigSource>(), path);
  o.docs_ = std::make_shared<std::vector<OptionDoc>>();
  return o;
}

bool Options::has(const std::string& key) const {
  return node_.IsMap() && node_[key].IsDefined() && !node_[key].IsNull();
}

void Options::mark_used(const std::string& key) const { source_->used.insert(key_path(key)); }

void ConfigSource::record(const std::string& path, const YAML::Node& value) {
  std::vector<std::string> parts;
  for (size_t start = 0;;) {
    const size_t dot = path.find('.', start);
    parts.push_back(path.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  // A numeric component is a list entry (eval.0.type): the resolved config keeps the list a
  // list, so that running it again reads it as the config it came from.
  YAML::Node cur = resolved;
  for (size_t i = 0; i < parts.size(); ++i) {
    const bool last = i + 1 == parts.size();
    const bool list_next = !last && is_list_index(parts[i + 1]);
    YAML::Node next;
    if (cur.IsSequence()) {
      const size_t k = std::stoul(parts[i]);
      while (cur.size() <= k) cur.push_back(YAML::Node(YAML::NodeType::Map));
      next.reset(cur[k]);
    } else {
      next.reset(cur[parts[i]]);
    }
    if (last) {
      next = YAML::Clone(value);
      return;
    }
    if (list_next ? !next.IsSequence() : !next.IsMap())
      next = YAML::Node(list_next ? YAML::NodeType::Sequence : YAML::NodeType::Map);
    cur.reset(next);
  }
}

void Options::document(const std::string& key, const char* type, const std::string& def,
                       const std::string& help) const {
  for (const auto& d : *docs_)
    if (d.key == key) return;
  docs_->push_back({key, type, def, help});
}

std::string Options::get_choice(const std::string& key, const std::string& def,
                                const std::vector<std::string>& choices,
                                const std::string& help) const {
  std::string v =
      get<std::string>(key, def, help + (help.empty() ? "" : "; ") + "one of " + join(choices));
  if (std::find(choices.begin(), choices.end(), v) == choices.end()) {
    std::string dym = did_you_mean(v, choices);
    fail(key, "'" + v + "' is not allowed; allowed: " + join(choices) +
                  (dym.empty() ? "" : ". Did you mean '" + dym + "'?"));
  }
  return v;
}

Options Options::child(const std::string& key) const {
  mark_used(key);
  YAML::Node n = has(key) ? node_[key] : YAML::Node(YAML::NodeType::Map);
  if (has(key) && !n.IsMap() && !n.IsScalar()) fail(key, "expected a map of options");
  Options o(n, source_, key_path(key));
  o.docs_ = docs_;
  if (o.shorthand_mark_.is_null() && !has(key)) o.shorthand_mark_ = node_.Mark();
  return o;
}

std::string Options::where(const std::string& key) const {
  std::string full = key.empty() ? path_ : key_path(key);
  // A key set (or whose parent was set) on the command line.
  for (std::string p = full;;) {
    auto it = source_->overrides.find(p);
    if (it != source_->overrides.end()) return "command-line override '" + it->second + "'";
    auto dot = p.rfind('.');
    if (dot == std::string::npos) break;
    p = p.substr(0, dot);
  }
  YAML::Mark m = YAML::Mark::null_mark();
  if (!key.empty() && has(key)) m = node_[key].Mark();
  if (m.is_null() && node_.IsDefined()) m = node_.Mark();
  if (m.is_null()) m = shorthand_mark_;
  std::string file = source_->file.empty() ? "<config>" : source_->file;
  return yaml_location(file, m);
}

void Options::fail(const std::string& key, const std::string& message) const {
  std::string full = key.empty() ? path_ : key_path(key);
  throw ConfigError(where(key) + ": " + (full.empty() ? "" : full + ": ") + message);
}

void Options::check_unused(const std::vector<std::string>& also_allowed) const {
  if (!node_.IsMap()) return;
  std::vector<std::string> known;
  for (const auto& k : also_allowed) known.push_back(k);
  const std::string prefix = path_.empty() ? "" : path_ + ".";
  for (const auto& u : source_->used)
    if (u.compare(0, prefix.size(), prefix) == 0 && u.find('.', prefix.size()) == std::string::npos)
      known.push_back(u.substr(prefix.size()));
  for (auto it = node_.begin(); it != node_.end(); ++it) {
    std::string k = it->first.as<std::string>();
    if (std::find(known.begin(), known.end(), k) != known.end()) continue;
    std::sort(known.begin(), known.end());
    known.erase(std::unique(known.begin(), known.end()), known.end());
    std::string dym = did_you_mean(k, known);
    std::string loc =
        source_->overrides.count(key_path(k))
            ? "command-line override '" + source_->overrides.at(key_path(k)) + "'"
            : yaml_location(source_->file.empty() ? "<config>" : source_->file, it->first.Mark());
    throw ConfigError(loc + ": " + key_path(k) + ": unknown key" +
                      (path_.empty() ? "" : " in " + path_) +
                      ". Allowed: " + (known.empty() ? "(none)" : join(known)) +
                      (dym.empty() ? "" : ". Did you mean '" + dym + "'?"));
  }
}

}  // namespace ablate
