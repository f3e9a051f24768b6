// The conformance runner (see ablate/conformance.hpp): a variant's record, then its family's
// suite (suites.hpp), and the small inputs the suites share (sizes, vocabulary, random
// values). Each check is a named section: it passes unless an expectation fails or the
// plugin throws; the report says which and why. A variant built out of tree is held to the
// same bar as the built-in ones.
#include "ablate/conformance.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <sstream>

#include "ablate/error.hpp"
#include "ablate/family.hpp"
#include "ablate/ops.hpp"
#include "ablate/registry.hpp"
#include "kit.hpp"

namespace ablate::conformance {

int Report::failed() const {
  return static_cast<int>(
      std::count_if(checks.begin(), checks.end(), [](const CheckResult& c) { return !c.passed; }));
}

std::string format_check(const CheckResult& c) {
  std::string line = (c.passed ? "  PASS  " : "  FAIL  ") + c.name;
  if (!c.detail.empty()) {
    // Multi-line details are indented under their check.
    std::string d = c.detail;
    for (size_t p = d.find('\n'); p != std::string::npos; p = d.find('\n', p + 9))
      d.replace(p, 1, "\n        ");
    line += c.passed ? " (" + d + ")" : "\n        " + d;
  }
  return line + "\n";
}

std::string Report::text() const {
  std::string s;
  for (const CheckResult& c : checks) s += format_check(c);
  const int f = failed();
  return s + std::to_string(checks.size()) +
         " checks: " + std::to_string(checks.size() - static_cast<size_t>(f)) + " passed, " +
         std::to_string(f) + " failed\n";
}

Options options_from_yaml(const std::string& yaml, const std::string& path) {
  return Options(YAML::Load(yaml), std::make_shared<ConfigSource>(), path);
}

ModelDims small_dims(int64_t C, int64_t NH, int64_t context, bool bias) {
  ModelDims d;
  d.vocab_size = 11;
  d.d_model = C;
  d.n_heads = NH;
  d.n_layers = 2;
  d.context = context;
  d.bias = bias;
  d.layer = 0;
  return d;
}

std::vector<std::string> small_vocab(int64_t n) {
  static const char* const kTexts[] = {"0", "1", "2", ".", "+", "=", "7", "8", "9", "x", "\n"};
  std::vector<std::string> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(i < 11 ? kTexts[i] : "t" + std::to_string(i));
  return v;
}

std::vector<float> randn(size_t n, uint64_t seed, float std) {
  Rng r(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = std * r.normal();
  return v;
}

void randomize(ParamStore& s, uint64_t seed, float std) {
  Rng r(seed);
  for (Parameter* p : s.all())
    for (int64_t i = 0; i < p->value.numel(); ++i) p->value.data[i] = std * r.normal();
}

Parameter& add_input(ParamStore& store, const std::string& name, int64_t rows, int64_t cols,
                     float std) {
  Parameter& p = store.add(name, rows, cols, Role::kCustom);
  fill_normal(p.value, store.rng(), std);
  return p;
}

namespace {

// The plugin's own record: a YAML-friendly name and a summary for `ablate plugins`.
void check_info(Checker& ck, const PluginEntry& e) {
  ck.run("plugin info: lower-case name usable in YAML, non-empty summary", [&](std::string&) {
    const std::string name = e.info->name;
    expect(!name.empty() &&
               name.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_") == std::string::npos,
           "name '" + name +
               "' should be lower case letters, digits and underscores (it is written in YAML)");
    expect(e.info->summary && *e.info->summary, "the summary is empty; `ablate plugins` shows it");
  });
}

}  // namespace

std::vector<std::string> checked_families() {
  std::vector<std::string> f;
  for (const FamilyDescriptor* d : families())
    if (d->checks) f.push_back(d->name);
  return f;
}

bool has_checks(const std::string& family) {
  const auto f = checked_families();
  return std::find(f.begin(), f.end(), family) != f.end();
}

std::vector<OptionDoc> describe(const std::string& family, const std::string& name,
                                const ModelDims& dims, const std::string& path) {
  const PluginEntry* e = PluginRegistry::instance().find(family, name);
  if (!e) throw Error("no " + family + " variant named '" + name + "' is registered");
  Options o = Options::describe(path);
  ParamStore store(1);
  try {
    const std::vector<std::string> vocab = small_vocab(dims.vocab_size);
    e->info->destroy(
        e->info->create(o, BuildContext{dims, ParamScope(store, "p."), 1, nullptr, &vocab}));
  } catch (const std::exception&) {
    // Variants with required options may refuse an empty map; what was read is listed.
  }
  return o.docs();
}

Report check_variant(const std::string& family, const std::string& name, const Settings& settings) {
  const PluginEntry* e = PluginRegistry::instance().find(family, name);
  if (!e) throw Error("no " + family + " variant named '" + name + "' is registered");
  YAML::Node opts;
  try {
    opts = settings.options_yaml.empty() ? YAML::Node(YAML::NodeType::Map)
                                         : YAML::Load(settings.options_yaml);
  } catch (const YAML::Exception& ex) {
    throw Error("the options '" + settings.options_yaml + "' are not valid YAML: " + ex.what());
  }
  if (opts.IsNull()) opts = YAML::Node(YAML::NodeType::Map);
  if (!opts.IsMap())
    throw Error("the options must be a YAML map such as '{hidden: 32}', got '" +
                settings.options_yaml + "'");
  opts["type"] = name;
  Report r;
  r.family = family;
  r.variant = name;
  r.file = e->file;
  Checker ck(r, settings);
  const Subject s{family, name, opts, settings};
  const FamilyDescriptor* fd = find_family(family);
  if (!fd || !fd->checks)
    throw Error("no conformance checks for plugin family '" + family +
                "'. Families with checks: " + join(checked_families()));
  check_info(ck, *e);
  fd->checks(ck, s);
  return r;
}

}  // namespace ablate::conformance