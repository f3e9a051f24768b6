// Family "evaluator": task-specific evaluations run beside the loss at every evaluation
// step and at the end of training (e.g. exact match on arithmetic problems). Chosen in
// the experiment's `eval:` list; each result row goes to the run file's table
// "eval/<variant name>" together with the step. An evaluator sees the model, the tokenizer
// (its vocabulary), the experiment's directory and the run's data split (EvalContext).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "ablate/metric_spec.hpp"
#include "ablate/model.hpp"
#include "ablate/tokenizer.hpp"

namespace ablate {

struct TextData;  // ablate/data.hpp (train layer, which evaluator plugins link)

struct EvalContext {
  Model& model;
  const Tokenizer& tokenizer;
  int64_t step = 0;      // optimizer steps done
  bool final = false;    // the evaluation at the end of training
  uint64_t seed = 0;     // the run's seed
  std::string yaml_dir;  // where relative data paths in the options resolve
  // Each id's bytes of raw text (token_byte_counts, 0 for ids the objective adds), computed
  // once per run; null where the caller has none (compute it from the tokenizer then).
  const std::vector<int32_t>* token_bytes = nullptr;
  // The run's data as training reads it (ablate/data.hpp): the training and validation text
  // and their token ids split as data.train_fraction says, or the token shards of each split;
  // null where there is none (`ablate eval`, which scores --data files). Read-only.
  const TextData* data = nullptr;
};

// The two sums of bits per byte (docs/RESULTS.md "Bits per byte"): bpb = nats / ln 2 / bytes
// over the scored targets that stand for text. Targets with 0 bytes (end-of-text, padding)
// are in neither sum: they are no bytes of the raw text, and their loss is no cost of it.
struct ByteLoss {
  double nats = 0, bytes = 0;
  double bpb() const { return bytes > 0 ? nats / std::log(2.0) / bytes : std::nan(""); }
};

// The ByteLoss of n scored positions: logits (n, V), targets y (-1: not scored), whose mean
// cross-entropy over the scored targets is `mean_loss`, and each id's bytes (ids past the
// table count 0). The cross-entropy of the 0-byte targets is computed here from their logits
// (in double) and taken off mean_loss x scored; the others' is the loss as computed.
inline ByteLoss byte_loss(const Tensor& logits, const int32_t* y, int64_t n, double mean_loss,
                          const std::vector<int32_t>& token_bytes) {
  ByteLoss r;
  int64_t scored = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (y[i] < 0) continue;
    ++scored;
    const int32_t b =
        static_cast<size_t>(y[i]) < token_bytes.size() ? token_bytes[static_cast<size_t>(y[i])] : 0;
    r.bytes += b;
    if (b > 0) continue;
    const float* row = logits.row(i);
    const double top = *std::max_element(row, row + logits.cols);
    double sum = 0;
    for (int64_t v = 0; v < logits.cols; ++v) sum += std::exp(static_cast<double>(row[v]) - top);
    r.nats -= top + std::log(sum) - row[y[i]];
  }
  r.nats += mean_loss * static_cast<double>(scored);
  return r;
}

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
  // What its columns mean for comparisons (metric_spec.hpp): which way is better and their
  // range, by name or pattern ("em_*"). A column left out is judged by its name.
  virtual std::vector<MetricSpec> metric_specs() const { return {}; }
  // Details of the last evaluate() that `ablate eval` prints after the summary line
  // (breakdowns, wrong answers), several lines; "" when there is nothing beyond the metrics.
  virtual std::string report() const { return ""; }
};

}  // namespace ablate
