// The list of plugin families (see family.hpp).
#include "ablate/family.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>

namespace ablate {

namespace {
std::vector<std::unique_ptr<FamilyDescriptor>>& all() {
  static std::vector<std::unique_ptr<FamilyDescriptor>> v;
  return v;
}
}  // namespace

bool register_family(const FamilyDescriptor& d) {
  if (d.name.empty() || d.key.empty() || find_family(d.name)) {
    std::fprintf(stderr, "ablate: plugin family '%s' registered twice or without a name or key\n",
                 d.name.c_str());
    std::abort();
  }
  all().push_back(std::make_unique<FamilyDescriptor>(d));
  return true;
}

std::vector<const FamilyDescriptor*> families() {
  std::vector<const FamilyDescriptor*> v;
  for (const auto& d : all()) v.push_back(d.get());
  std::sort(v.begin(), v.end(), [](auto* a, auto* b) { return a->name < b->name; });
  return v;
}

std::vector<std::string> family_names() {
  std::vector<std::string> v;
  for (const FamilyDescriptor* d : families()) v.push_back(d->name);
  return v;
}

const FamilyDescriptor* find_family(const std::string& name) {
  for (const auto& d : all())
    if (d->name == name) return d.get();
  return nullptr;
}

const FamilyDescriptor& family(const std::string& name) {
  if (const FamilyDescriptor* d = find_family(name)) return *d;
  const std::vector<std::string> names = family_names();
  const std::string dym = did_you_mean(name, names);
  throw Error("unknown plugin family '" + name + "'. Families: " + join(names) +
              (dym.empty() ? "" : ". Did you mean '" + dym + "'?"));
}

Options family_options(const Options& parent, const std::string& name) {
  const FamilyDescriptor& d = family(name);
  const std::string child =
      d.key.substr(d.key.rfind('.') == std::string::npos ? 0 : d.key.rfind('.') + 1);
  Options c = parent.child(child);
  if (!c.has("type") && !d.default_variant.empty()) {
    YAML::Node n = c.node();
    n["type"] = d.default_variant;
  }
  return c;
}

std::string selection_override(const FamilyDescriptor& d, const std::string& name) {
  return d.list ? "'" + d.key + "=[{type: " + name + "}]'" : d.key + "=" + name;
}

}  // namespace ablate
