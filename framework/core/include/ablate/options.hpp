// Options read where they are used (as Marian does), from a YAML map, with every
// error naming file:line:column, the key path, the bad value, what is allowed and a
// fix. Every key read is recorded, so that keys nobody read are reported as unknown
// (with a did-you-mean), and so that `ablate plugins` can list a plugin's options
// with their defaults by constructing it from an empty map.
#pragma once
#include <yaml-cpp/yaml.h>

#include <cmath>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "ablate/error.hpp"
#include "ablate/yaml_load.hpp"

namespace ablate {

// True if a dotted path component is a list position (eval.0.type): digits only, at most 9.
inline bool is_list_index(const std::string& part) {
  return !part.empty() && part.size() <= 9 &&
         part.find_first_not_of("0123456789") == std::string::npos;
}

// Where a configuration came from; shared by all Options views of one document.
struct ConfigSource {
  std::string file;                              // "experiments/quickstart.yaml"
  std::map<std::string, std::string> overrides;  // key path -> "key.path=value" from the CLI
  std::set<std::string> used;                    // key paths read so far
  // Every option read so far with the value it had, defaults included: the resolved
  // configuration a run records next to the one it was given.
  YAML::Node resolved = YAML::Node(YAML::NodeType::Map);
  void record(const std::string& path, const YAML::Node& value);
};

struct OptionDoc {
  std::string key, type, default_value, help;
};

namespace detail {
template <class T>
const char* type_name() {
  if constexpr (std::is_same_v<T, bool>) return "true or false";
  else if constexpr (std::is_integral_v<T>) return "an integer";
  else if constexpr (std::is_floating_point_v<T>) return "a number";
  else if constexpr (std::is_same_v<T, std::string>) return "a string";
  else if constexpr (std::is_same_v<T, std::vector<float>> ||
                     std::is_same_v<T, std::vector<double>>)
    return "a list of numbers";
  else if constexpr (std::is_same_v<T, std::vector<int>> || std::is_same_v<T, std::vector<int64_t>>)
    return "a list of integers";
  else if constexpr (std::is_same_v<T, std::vector<std::string>>) return "a list of strings";
  else return "a value";
}
template <class T>
std::string to_text(const T& v) {
  if constexpr (std::is_same_v<T, bool>) return v ? "true" : "false";
  else if constexpr (std::is_same_v<T, std::string>) return "'" + v + "'";
  else if constexpr (std::is_arithmetic_v<T>) {
    std::ostringstream s;
    s << v;
    return s.str();
  } else {
    std::ostringstream s;
    s << "[";
    for (size_t i = 0; i < v.size(); ++i) s << (i ? ", " : "") << v[i];
    s << "]";
    return s.str();
  }
}
// A value as a YAML node; numbers as their shortest text (0.9, not 0.899999976).
template <class T>
YAML::Node to_node(const T& v) {
  if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) {
    std::ostringstream s;
    s << v;
    return YAML::Node(s.str());
  } else if constexpr (std::is_same_v<T, bool> || std::is_same_v<T, std::string>) {
    return YAML::Node(v);
  } else {
    YAML::Node n(YAML::NodeType::Sequence);
    for (const auto& x : v) n.push_back(to_node(x));
    return n;
  }
}
}  // namespace detail

class Options {
 public:
  // A view of `node` (a map, a scalar shorthand for {type: scalar}, or null) at key path
  // `path` ("model.ffn") of the document described by `source`.
  Options(YAML::Node node, std::shared_ptr<ConfigSource> source, std::string path);
  // An empty map in "describe" mode: reads record their documentation.
  static Options describe(const std::string& path);

  bool has(const std::string& key) const;
  // The value at key, or def when absent. Wrong types and non-finite numbers are errors.
  template <class T>
  T get(const std::string& key, const T& def, const std::string& help = "") const;
  // The value at key; absent is an error.
  template <class T>
  T require(const std::string& key, const std::string& help = "") const;
  // A value that must lie in [lo, hi].
  template <class T>
  T get_in(const std::string& key, const T& def, T lo, T hi, const std::string& help = "") const;
  // A string that must be one of `choices`.
  std::string get_choice(const std::string& key, const std::string& def,
                         const std::vector<std::string>& choices,
                         const std::string& help = "") const;
  // The sub-map at key (absent: an empty map at that path).
  Options child(const std::string& key) const;

  // "file:line:col: path.key" (or the CLI override that set it).
  std::string where(const std::string& key = "") const;
  // Throws ConfigError "<where>: <path.key>: <message>".
  [[noreturn]] void fail(const std::string& key, const std::string& message) const;
  // Reports keys of this map (not sub-maps) that nobody read, with a did-you-mean.
  void check_unused(const std::vector<std::string>& also_allowed = {}) const;
  // Marks a key as read without reading it.
  void mark_used(const std::string& key) const;
  // Notes key = value in the source's resolved configuration.
  void record(const std::string& key, const YAML::Node& value) const {
    source_->record(key_path(key), value);
  }

  const std::string& path() const { return path_; }
  std::string key_path(const std::string& key) const {
    return path_.empty() ? key : path_ + "." + key;
  }
  const YAML::Node& node() const { return node_; }
  const std::shared_ptr<ConfigSource>& source() const { return source_; }
  bool describing() const { return docs_ != nullptr; }
  const std::vector<OptionDoc>& docs() const { return *docs_; }

 private:
  template <class T>
  T convert(const std::string& key, const YAML::Node& n) const;
  void document(const std::string& key, const char* type, const std::string& def,
                const std::string& help) const;
  YAML::Node node_;
  std::shared_ptr<ConfigSource> source_;
  std::string path_;
  std::shared_ptr<std::vector<OptionDoc>> docs_;
  YAML::Mark shorthand_mark_ = YAML::Mark::null_mark();  // where a `key: variant` shorthand stood
};

// ---- template implementations ---------------------------------------------------------

template <class T>
T Options::convert(const std::string& key, const YAML::Node& n) const {
  T v{};
  try {
    if constexpr (std::is_same_v<T, bool>) {
      const std::string s = n.Scalar();
      if (!n.IsScalar() || (s != "true" && s != "false")) throw YAML::BadConversion(n.Mark());
      v = (s == "true");
    } else {
      if constexpr (!std::is_same_v<T, std::string> && std::is_class_v<T>) {
        if (!n.IsSequence()) throw YAML::BadConversion(n.Mark());
      } else if (!n.IsScalar()) {
        throw YAML::BadConversion(n.Mark());
      }
      v = n.as<T>();
    }
  } catch (const YAML::Exception&) {
    std::string got = n.IsScalar()
                          ? "'" + n.Scalar() + "'"
                          : (n.IsSequence() ? "a list" : (n.IsMap() ? "a map" : "nothing"));
    fail(key, std::string("expected ") + detail::type_name<T>() + ", got " + got);
  }
  if constexpr (std::is_floating_point_v<T>) {
    if (!std::isfinite(v)) fail(key, "expected a finite number, got '" + n.Scalar() + "'");
  }
  return v;
}

template <class T>
T Options::get(const std::string& key, const T& def, const std::string& help) const {
  mark_used(key);
  if (describing()) document(key, detail::type_name<T>(), detail::to_text(def), help);
  if (!has(key)) {
    if (!describing()) {
      // Numbers as their shortest text (0.0003, not 0.000300000014), the rest as is.
      record(key, detail::to_node(def));
    }
    return def;
  }
  T v = convert<T>(key, node_[key]);
  if (!describing()) record(key, node_[key]);
  return v;
}

template <class T>
T Options::require(const std::string& key, const std::string& help) const {
  mark_used(key);
  if (describing()) {
    document(key, detail::type_name<T>(), "(required)", help);
    return T{};
  }
  if (!has(key))
    fail(key, std::string("missing; expected ") + detail::type_name<T>() +
                  (help.empty() ? "" : " (" + help + ")"));
  T v = convert<T>(key, node_[key]);
  record(key, node_[key]);
  return v;
}

template <class T>
T Options::get_in(const std::string& key, const T& def, T lo, T hi, const std::string& help) const {
  T v = get<T>(key, def,
               help + (help.empty() ? "" : "; ") + "in [" + detail::to_text(lo) + ", " +
                   detail::to_text(hi) + "]");
  if (v < lo || v > hi)
    fail(key, detail::to_text(v) + " is out of range; allowed: " + detail::to_text(lo) + " to " +
                  detail::to_text(hi));
  return v;
}

}  // namespace ablate
