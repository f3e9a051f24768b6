// Family "task": a task with data of its own and a way to score a model on it (arithmetic,
// modular addition, ...). `ablate data TASK` writes its data sets, an experiment's
// `eval: [{type: TASK, ...}]` scores the model during training, and `ablate eval RUN --task
// TASK` scores a trained run. docs/PLUGINS.md, "A task", is a tutorial.
#pragma once
#include <memory>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "ablate/evaluator.hpp"
#include "ablate/options.hpp"
#include "ablate/plugin.hpp"

namespace ablate {

class Task {
 public:
  static constexpr const char* kFamily = "task";
  virtual ~Task() = default;
  // `ablate data TASK --train FILE --test FILE [--key value ...]`: writes the data sets and
  // prints what it wrote to `out`. The command line's flags arrive as options (--train-count
  // 5 is train_count: 5); read each with Options::get (flags nobody reads are refused).
  // Every task accepts train, test, train_count, test_count and seed; test problems are
  // distinct and none is in the training file.
  virtual void write_data(const Options& o, std::ostream& out) = 0;
  // The evaluator of this task, from its options: an experiment's eval entry, or the flags
  // of `ablate eval` (every task accepts `data`, the file to score on). The evaluator's
  // summary() is its console line, report() the details `ablate eval` prints.
  virtual std::unique_ptr<Evaluator> evaluator(const Options& o, const BuildContext& ctx) = 0;
};

// The evaluator an experiment's eval entry names: a task's evaluator, or else a variant of
// the evaluator family. Unknown names are ConfigErrors listing both.
std::unique_ptr<Evaluator> make_evaluator(const Options& entry, const BuildContext& ctx);

}  // namespace ablate
