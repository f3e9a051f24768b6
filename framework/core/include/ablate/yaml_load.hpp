// Reading YAML that a person wrote (an experiment, a sweep, a command-line override): one
// parse that turns yaml-cpp's syntax errors into "file:line:col: YAML syntax error: ...",
// and one walk that refuses what yaml-cpp accepts but a configuration must not contain:
// the same key twice in a map (yaml-cpp keeps both and a lookup silently sees the first),
// keys that are not plain names, and documents that aliases make cyclic or huge (every
// later walk would loop or explode).
#pragma once
#include <yaml-cpp/yaml.h>

#include <string>

namespace ablate {

// Where in a YAML file: file:line:column (1-based), or the file alone for a null mark.
std::string yaml_location(const std::string& file, const YAML::Mark& m);

// Parses `text` (`file` is the name messages show) and checks it as check_yaml does.
// A syntax error is a ConfigError "file:line:col: YAML syntax error: <yaml-cpp's message>".
YAML::Node load_yaml(const std::string& text, const std::string& file);

// Refuses duplicate keys at any depth ("path: given twice, on line 2 and on line 7; keep one
// of them"), keys that are not plain
// scalars, nesting deeper than 64 levels and more than 100000 nodes, each as a ConfigError
// that names file:line:col and the key path.
void check_yaml(const YAML::Node& doc, const std::string& file);

}  // namespace ablate
