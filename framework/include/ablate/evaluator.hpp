// Family "evaluator": task-specific evaluations run beside the loss at every evaluation
// step and at the end of training (e.g. exact match on arithmetic problems). Chosen in
// the experiment's `eval:` list; each result row goes to the run file's table
// "eval/<variant name>" together with the step.
#pragma once
#include <cstdint>
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
};

}  // namespace ablate
