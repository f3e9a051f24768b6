// Family "evaluator": task-specific evaluations run beside the loss at every evaluation
// step and at the end of training (e.g. exact match on arithmetic problems). Chosen in
// the experiment's `eval:` list; each result row goes to the run file's table
// "eval/<variant name>" together with the step.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "ablate/model.hpp"
#include "ablate/tokenizer.hpp"

namespace ablate {

struct EvalContext {
  Model& model;
  const Tokenizer& tokenizer;
  int64_t step = 0;          // optimizer steps done
  bool final = false;        // the evaluation at the end of training
  uint64_t seed = 0;         // the run's seed
  std::string yaml_dir;      // where relative data paths in the options resolve
};

class Evaluator {
 public:
  static constexpr const char* kFamily = "evaluator";
  virtual ~Evaluator() = default;
  // Named scalar metrics, e.g. {"exact_match", 0.93}. Columns must be the same at
  // every call. Long evaluations may be run only when ctx.final (say so in options).
  virtual std::vector<std::pair<std::string, double>> evaluate(EvalContext& ctx) = 0;
  // One readable console line for a row evaluate() returned (the trainer prints it at each
  // evaluation; run.h5 keeps every column). Default: the first six metrics.
  virtual std::string summary(const std::vector<std::pair<std::string, double>>& row) const {
    std::string s;
    for (size_t k = 0; k < row.size() && k < 6; ++k) {
      char v[32];
      std::snprintf(v, sizeof v, "%.4g", row[k].second);
      s += (k ? ", " : "") + row[k].first + " " + v;
    }
    if (row.size() > 6) s += " (+" + std::to_string(row.size() - 6) + " more columns in run.h5)";
    return s;
  }
  // Details of the last evaluate() for `ablate eval` (breakdowns, wrong answers), several
  // lines; "" when there is nothing beyond the metrics.
  virtual std::string report() const { return ""; }
};

}  // namespace ablate
