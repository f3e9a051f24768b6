// Checked loading of user-written YAML (see yaml_load.hpp).
#include "ablate/yaml_load.hpp"

#include <map>

#include "ablate/error.hpp"

namespace ablate {

namespace {

constexpr int kMaxDepth = 64;
constexpr size_t kMaxNodes = 100000;

// "path: given twice, on line 2 and on line 7" (or "on line 1, columns 5 and 12").
std::string duplicate_key_message(const std::string& key, const YAML::Mark& first,
                                  const YAML::Mark& again) {
  const std::string line_a = std::to_string(first.line + 1);
  const std::string both =
      first.line == again.line
          ? "on line " + line_a + ", columns " + std::to_string(first.column + 1) + " and " +
                std::to_string(again.column + 1)
          : "on line " + line_a + " and on line " + std::to_string(again.line + 1);
  return key + ": given twice, " + both + "; keep one of them";
}

struct StructureCheck {
  const std::string& file;
  size_t count = 0;

  void walk(const YAML::Node& n, const std::string& path, int depth) {
    const std::string shown = path.empty() ? "the document" : path;
    if (++count > kMaxNodes)
      throw ConfigError(file + ": the document expands to more than " + std::to_string(kMaxNodes) +
                        " YAML nodes (through aliases?); write it out plainly");
    if (depth > kMaxDepth)
      throw ConfigError(yaml_location(file, n.Mark()) + ": " + shown + ": nested more than " +
                        std::to_string(kMaxDepth) + " levels deep (a recursive alias?)");
    if (n.IsMap()) {
      std::map<std::string, YAML::Mark> seen;
      for (auto it = n.begin(); it != n.end(); ++it) {
        if (!it->first.IsScalar())
          throw ConfigError(yaml_location(file, it->first.Mark()) + ": " + shown +
                            ": a key must be a plain name, not a " +
                            (it->first.IsMap()        ? "map"
                             : it->first.IsSequence() ? "list"
                                                      : "null"));
        const std::string& k = it->first.Scalar();
        const std::string child = path.empty() ? k : path + "." + k;
        auto [first, fresh] = seen.emplace(k, it->first.Mark());
        if (!fresh)
          throw ConfigError(yaml_location(file, it->first.Mark()) + ": " +
                            duplicate_key_message(child, first->second, it->first.Mark()));
        walk(it->second, child, depth + 1);
      }
    } else if (n.IsSequence()) {
      for (size_t i = 0; i < n.size(); ++i)
        walk(n[i], path + "[" + std::to_string(i) + "]", depth + 1);
    }
  }
};

}  // namespace

std::string yaml_location(const std::string& file, const YAML::Mark& m) {
  if (m.is_null() || m.line < 0) return file;
  return file + ":" + std::to_string(m.line + 1) + ":" + std::to_string(m.column + 1);
}

void check_yaml(const YAML::Node& doc, const std::string& file) {
  StructureCheck{file}.walk(doc, "", 0);
}

YAML::Node load_yaml(const std::string& text, const std::string& file) {
  YAML::Node doc;
  try {
    doc = YAML::Load(text);
  } catch (const YAML::ParserException& ex) {
    throw ConfigError(yaml_location(file, ex.mark) + ": YAML syntax error: " + ex.msg);
  }
  check_yaml(doc, file);
  return doc;
}

}  // namespace ablate
