// Conformance checks of plugin variants, one set per family: shapes, determinism, gradients
// by finite differences, option validation, and the family's contract (round trips for
// tokenizers, KV-cache decoding for causal attention, resume for optimizers...). Used by
// `ablate plugin check <library.so>` and by the test suite's per-family conformance tests,
// so that an out-of-tree plugin meets exactly the bar of the built-in ones.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ablate/graph.hpp"
#include "ablate/options.hpp"
#include "ablate/plugin.hpp"

namespace ablate::conformance {

struct CheckResult {
  std::string name;  // "gradients by finite differences"
  bool passed = true;
  std::string detail;  // why it failed, or a note
};

struct Report {
  std::string family, variant, file;
  std::vector<CheckResult> checks;
  int failed() const;
  bool passed() const { return !checks.empty() && failed() == 0; }
  // One "PASS name" / "FAIL name: detail" line per check and a summary line.
  std::string text() const;
};

struct Settings {
  // Extra options for the variant under test, a YAML map (e.g. "{hidden: 32}"); its
  // `type` is set to the variant's name.
  std::string options_yaml;
  // Training text for tokenizers and evaluators; empty: a built-in excerpt of Shakespeare.
  std::string sample_text;
  // Called as each check starts and when it ends: for reports that stream, and for naming
  // the check a crashing plugin was in.
  std::function<void(const std::string& check)> on_start;
  std::function<void(const CheckResult&)> on_result;
};

// One report line: "  PASS  name (note)" or "  FAIL  name" and the reason, indented.
std::string format_check(const CheckResult& c);

// Families that have checks here.
std::vector<std::string> checked_families();
bool has_checks(const std::string& family);

// Runs every check of the family on a registered variant. Never throws for a plugin's
// misbehaviour (a plugin exception is a failed check); throws Error for an unknown
// family or variant.
Report check_variant(const std::string& family, const std::string& name,
                     const Settings& settings = {});

// ---- building blocks, shared with the test suite's known-value tests ---------------------

// Options for YAML text at key path `path` of an in-memory document.
Options options_from_yaml(const std::string& yaml, const std::string& path);

// Small model sizes for checks: vocab 11, 2 layers, layer 0.
ModelDims small_dims(int64_t C = 16, int64_t NH = 2, int64_t context = 16, bool bias = true);

// Token texts for checks (BuildContext::vocab), n of them: digits, a point, operators and
// letters, so that plugins reading tokens see numbers among other tokens.
std::vector<std::string> small_vocab(int64_t n);

std::vector<float> randn(size_t n, uint64_t seed, float std = 1.0f);
// Replaces every parameter by N(0, std): gradients are then checked away from the special
// values of the init (unit gains, zero biases, tiny weights).
void randomize(ParamStore& store, uint64_t seed, float std = 0.5f);
// An input tensor for a gradient check: a Role::kCustom parameter of N(0, std) values
// drawn from store.rng().
Parameter& add_input(ParamStore& store, const std::string& name, int64_t rows, int64_t cols,
                     float std = 1.0f);

// The options a variant reads (key, type, default, help), found by constructing it in
// describe mode.
std::vector<OptionDoc> describe(const std::string& family, const std::string& name,
                                const ModelDims& dims, const std::string& path = "model.plugin");

using Outputs = std::vector<Var>;
using ForwardFn = std::function<Outputs(Graph&)>;

struct GradCheckResult {
  int checked = 0, skipped = 0, failed = 0;
  std::string report;                   // the mismatches, one per line
  std::vector<std::string> custom_ops;  // custom ops (custom_op.hpp) the forward used, so checked
  std::vector<std::string> aux_terms;   // names of the auxiliary terms it added (Graph::add_aux)
  // Passed: no mismatch, something checked, and not mostly kinks.
  bool ok() const { return failed == 0 && checked > 0 && skipped <= checked; }
};

// What check_gradients differentiates: the outputs (and the auxiliary terms), or the
// auxiliary terms alone, where a wrong gradient of a small term cannot hide behind the outputs'.
enum class GradLoss { kOutputsAndAux, kAuxOnly };

// Checks d(loss)/d(p) for every p in `wrt` (the plugin's parameters, and inputs made
// Parameters so that they receive gradients), with loss = sum_k sum(out_k * R_k) for fixed
// random R_k, plus every auxiliary term the forward added (Graph::add_aux) at weight 1. At most
// `per_tensor` elements of each tensor are checked by central differences (the loss accumulated in
// double). Elements where the two one-sided differences disagree sit on a kink (relu, max) and are
// skipped.
GradCheckResult check_gradients(const ForwardFn& forward, const std::vector<Parameter*>& wrt,
                                int per_tensor = 8, double h = 1e-3, double rtol = 3e-2,
                                double atol = 2e-3, GradLoss what = GradLoss::kOutputsAndAux);

// The built-in sample text (about 3 KB of tiny Shakespeare).
const std::string& builtin_sample_text();

}  // namespace ablate::conformance
