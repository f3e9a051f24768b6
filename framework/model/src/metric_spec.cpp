// Metric specs: matching columns, and their YAML form in run.h5.
#include "ablate/metric_spec.hpp"

#include <fnmatch.h>

#include <cmath>

#include <yaml-cpp/yaml.h>

#include "ablate/error.hpp"

namespace ablate {

const char* better_name(Better b) {
  return b == Better::lower ? "lower" : b == Better::higher ? "higher" : "neither";
}

const MetricSpec* find_metric_spec(const std::vector<MetricSpec>& specs,
                                   const std::string& column) {
  for (const MetricSpec& s : specs)
    if (s.column == column || fnmatch(s.column.c_str(), column.c_str(), 0) == 0) return &s;
  return nullptr;
}

std::string metric_specs_yaml(const MetricSpecs& by_table) {
  YAML::Emitter e;
  e << YAML::BeginMap;
  for (const auto& [table, specs] : by_table) {
    e << YAML::Key << table << YAML::Value << YAML::BeginSeq;
    for (const MetricSpec& s : specs) {
      e << YAML::Flow << YAML::BeginMap << YAML::Key << "column" << YAML::Value << s.column
        << YAML::Key << "better" << YAML::Value << better_name(s.better);
      if (std::isfinite(s.lo)) e << YAML::Key << "lo" << YAML::Value << s.lo;
      if (std::isfinite(s.hi)) e << YAML::Key << "hi" << YAML::Value << s.hi;
      e << YAML::EndMap;
    }
    e << YAML::EndSeq;
  }
  e << YAML::EndMap;
  return e.c_str();
}

MetricSpecs parse_metric_specs(const std::string& yaml) {
  MetricSpecs out;
  YAML::Node root;
  try {
    root = YAML::Load(yaml);
  } catch (const YAML::Exception& e) {
    throw Error(std::string("metric_specs: not YAML: ") + e.what());
  }
  if (!root.IsMap()) throw Error("metric_specs: expected a map of tables");
  for (const auto& kv : root) {
    const std::string table = kv.first.as<std::string>();
    if (!kv.second.IsSequence())
      throw Error("metric_specs: table '" + table + "' is not a list of columns");
    for (size_t i = 0; i < kv.second.size(); ++i) {
      const YAML::Node n = kv.second[i];
      const std::string at = "metric_specs: " + table + "[" + std::to_string(i) + "]";
      if (!n.IsMap() || !n["column"] || !n["better"])
        throw Error(at + ": expected {column: NAME, better: lower|neither|higher}");
      MetricSpec s;
      s.column = n["column"].as<std::string>();
      const std::string b = n["better"].as<std::string>();
      if (b == "lower") s.better = Better::lower;
      else if (b == "higher") s.better = Better::higher;
      else if (b != "neither")
        throw Error(at + ": better '" + b + "', expected lower, neither or higher");
      try {
        if (n["lo"]) s.lo = n["lo"].as<double>();
        if (n["hi"]) s.hi = n["hi"].as<double>();
      } catch (const YAML::Exception&) {
        throw Error(at + ": lo and hi are numbers");
      }
      out[table].push_back(s);
    }
  }
  return out;
}

}  // namespace ablate
