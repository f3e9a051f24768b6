// The machinery of the conformance checks (see ablate/conformance.hpp), shared by the
// families' suites in this directory: each check is a named section that passes unless an
// expectation fails or the plugin throws; a suite is a list of such checks, one property each.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "ablate/conformance.hpp"
#include "ablate/error.hpp"
#include "ablate/family.hpp"
#include "ablate/init.hpp"
#include "ablate/metric_spec.hpp"
#include "ablate/ops.hpp"
#include "ablate/registry.hpp"

namespace ablate::conformance {

// ---- check machinery --------------------------------------------------------------------

struct Failure {
  std::string message;
};

inline void expect(bool ok, const std::string& message) {
  if (!ok) throw Failure{message};
}

inline bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

inline std::string num(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

inline bool close(double a, double b, double eps) {
  return std::fabs(a - b) <= eps * (1.0 + std::max(std::fabs(a), std::fabs(b)));
}

class Checker {
 public:
  Checker(Report& r, const Settings& s) : report_(r), settings_(s) {}
  // Runs one named check: it passes unless `fn` fails an expectation or throws. `fn` may
  // leave a note (shown in parentheses after PASS).
  void run(const std::string& name, const std::function<void(std::string& note)>& fn) {
    CheckResult c{name, true, ""};
    if (settings_.on_start) settings_.on_start(name);
    try {
      fn(c.detail);
    } catch (const Failure& f) {
      c.passed = false;
      c.detail = f.message;
    } catch (const std::exception& e) {
      c.passed = false;
      c.detail = std::string("threw: ") + e.what();
    } catch (...) {
      c.passed = false;
      c.detail = "threw an exception that is not a std::exception";
    }
    if (settings_.on_result) settings_.on_result(c);
    report_.checks.push_back(std::move(c));
  }

 private:
  Report& report_;
  const Settings& settings_;
};

// One property a family's variants must have: its name in the report and the function that
// checks it on the suite's fixture `Case` (built once per suite, shared by its checks). The
// function may leave a note, shown in parentheses after PASS.
template <class Case>
struct Property {
  std::string name;
  void (*check)(Case& c, std::string& note);
};

// Runs `properties` in order as named checks on `c`; `suffix` follows each name.
template <class Case>
void run_properties(Checker& ck, Case& c, const std::vector<Property<Case>>& properties,
                    const std::string& suffix = "") {
  for (const Property<Case>& p : properties)
    ck.run(p.name + suffix, [&](std::string& note) { p.check(c, note); });
}

// What a family's checks get: the variant's name and its options as a YAML map.
struct Subject {
  std::string family, name;
  YAML::Node options;  // {type: name, ...extra options}
  const Settings& settings;
  YAML::Node with(const std::string& key, const YAML::Node& value) const {
    YAML::Node n = YAML::Clone(options);
    n[key] = value;
    return n;
  }
};

template <class Base>
struct Built {
  std::unique_ptr<ParamStore> store;  // declared first: destroyed after the plugin
  std::unique_ptr<Base> obj;
  Base* operator->() const { return obj.get(); }
};

template <class Base>
Built<Base> build(const YAML::Node& node, const std::string& path, const ModelDims& d,
                  uint64_t seed = 7) {
  Built<Base> b;
  b.store = std::make_unique<ParamStore>(seed);
  Options o(YAML::Clone(node), std::make_shared<ConfigSource>(), path);
  const std::vector<std::string> vocab = small_vocab(d.vocab_size);
  b.obj = PluginRegistry::instance().create<Base>(
      o, BuildContext{d, ParamScope(*b.store, "p."), seed, nullptr, &vocab});
  initialise_default(*b.store, d);  // the values a model's default init gives
  return b;
}

inline std::vector<float> values(Graph& g, Var v) {
  const Tensor& t = g.value(v);
  return std::vector<float>(t.data, t.data + t.numel());
}

inline void expect_shape(Graph& g, Var v, int64_t rows, int64_t cols, const std::string& what) {
  const Tensor& t = g.value(v);
  expect(t.rows == rows && t.cols == cols,
         what + " is (" + std::to_string(t.rows) + ", " + std::to_string(t.cols) + "), expected (" +
             std::to_string(rows) + ", " + std::to_string(cols) + ")");
}

inline void expect_finite(const std::vector<float>& v, const std::string& what) {
  for (size_t i = 0; i < v.size(); ++i)
    expect(std::isfinite(v[i]),
           what + " has a non-finite value " + num(v[i]) + " at element " + std::to_string(i));
}

inline void expect_gradients(const ForwardFn& f, const std::vector<Parameter*>& wrt,
                             std::string& note) {
  GradCheckResult r = check_gradients(f, wrt);
  if (!r.aux_terms.empty()) {
    // The auxiliary terms on their own as well: their gradients are usually small beside the
    // outputs', where a wrong sign would pass.
    GradCheckResult a = check_gradients(f, wrt, 8, 1e-3, 3e-2, 2e-3, GradLoss::kAuxOnly);
    expect(a.failed == 0, std::to_string(a.failed) + " of " + std::to_string(a.checked) +
                              " elements of the gradient of the auxiliary terms " +
                              join(a.aux_terms) + " alone disagree with finite differences:\n" +
                              a.report);
    expect(a.checked > 0, "no element of the auxiliary terms' gradient could be checked (" +
                              std::to_string(a.skipped) + " on kinks)");
  }
  std::string lines = r.report;
  size_t cut = 0;
  for (int k = 0; k < 6 && cut != std::string::npos; ++k) cut = lines.find('\n', cut ? cut + 1 : 0);
  if (cut != std::string::npos) lines = lines.substr(0, cut) + "\n...";
  expect(
      r.failed == 0,
      std::to_string(r.failed) + " of " + std::to_string(r.checked) +
          " elements disagree with finite differences (name[index]: analytic vs numeric)" +
          (r.custom_ops.empty() ? ""
                                : "; check the backward of the custom ops " + join(r.custom_ops)) +
          ":\n" + lines);
  expect(r.checked > 0, "no element could be checked (" + std::to_string(r.skipped) + " on kinks)");
  expect(r.skipped <= r.checked, "too many elements on kinks: " + std::to_string(r.skipped) +
                                     " skipped, " + std::to_string(r.checked) + " checked");
  note = std::to_string(r.checked) + " elements checked" +
         (r.skipped ? ", " + std::to_string(r.skipped) + " on kinks skipped" : "");
  if (!r.custom_ops.empty()) note += "; custom ops: " + join(r.custom_ops);
  if (!r.aux_terms.empty())
    note += "; auxiliary terms " + join(r.aux_terms) + " also checked alone";
}

// An evaluator's declared columns (metric_specs) fit what it returns: every spec matches a
// column, its bounds are ordered, and the finite values of its columns lie inside them.
inline void expect_specs_fit(const std::vector<MetricSpec>& specs,
                             const std::vector<std::pair<std::string, double>>& row) {
  for (const MetricSpec& spec : specs) {
    expect(spec.lo <= spec.hi, "metric_specs: '" + spec.column + "' has lo " + num(spec.lo) +
                                   " above hi " + num(spec.hi));
    bool matched = false;
    for (const auto& [name, v] : row) {
      if (find_metric_spec({spec}, name) == nullptr) continue;
      matched = true;
      expect(!std::isfinite(v) || (v >= spec.lo && v <= spec.hi),
             "metric '" + name + "' = " + num(v) + " lies outside [" + num(spec.lo) + ", " +
                 num(spec.hi) + "], the range metric_specs declares for '" + spec.column + "'");
    }
    expect(matched, "metric_specs declares '" + spec.column +
                        "', which matches none of the columns evaluate() returns");
  }
}

// The key path a family's options live at in an experiment (for messages).
inline std::string path_of(const std::string& family) {
  const FamilyDescriptor& d = ablate::family(family);
  return d.list ? d.key + ".0" : d.key;
}

// An unknown key is a ConfigError naming it; every numeric option rejects an absurd value
// (at least one of a huge negative and a huge positive one) with an error naming the key.
template <class Base>
void check_options(Checker& ck, const Subject& s, const ModelDims& d) {
  const std::string path = path_of(s.family);
  ck.run("rejects an unknown option", [&](std::string&) {
    try {
      build<Base>(s.with("no_such_option", YAML::Node(1)), path, d);
    } catch (const ConfigError& e) {
      expect(contains(e.what(), "no_such_option"),
             std::string("the error does not name the key: ") + e.what());
      return;
    }
    expect(
        false,
        "{no_such_option: 1} was accepted; read options with Options::get and create the variant "
        "through PluginRegistry::create, which rejects keys nobody read");
  });
  ck.run("rejects absurd values of numeric options", [&](std::string& note) {
    int n_numeric = 0;
    for (const OptionDoc& doc : describe(s.family, s.name, d, path)) {
      std::vector<std::string> absurd;
      if (doc.type == "a number") absurd = {"-1e30", "1e30"};
      else if (doc.type == "an integer") absurd = {"-4611686018427387904", "4611686018427387904"};
      else if (doc.type == "a list of numbers") absurd = {"[-1e30, -1e30]", "[1e30, 1e30]"};
      else if (doc.type == "a list of integers")
        absurd = {"[-4611686018427387904]", "[4611686018427387904]"};
      else continue;
      ++n_numeric;
      int rejected = 0;
      for (const std::string& v : absurd) {
        try {
          build<Base>(s.with(doc.key, YAML::Load(v)), path, d);
        } catch (const ConfigError& e) {
          expect(contains(e.what(), path + "." + doc.key),
                 "option '" + doc.key + "' = " + v + " is rejected, but the error does not name " +
                     path + "." + doc.key + ": " + e.what());
          ++rejected;
        }
      }
      expect(rejected > 0, "numeric option '" + doc.key + "' accepts both " + absurd[0] + " and " +
                               absurd[1] + "; give it a range (Options::get_in)");
    }
    note = n_numeric ? std::to_string(n_numeric) + " numeric option" + (n_numeric > 1 ? "s" : "")
                     : "no numeric options";
  });
}

}  // namespace ablate::conformance
