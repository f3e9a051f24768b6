// The memory estimate of a run (see memory_estimate.hpp) and what to do when it does not fit.
#include "memory_estimate.hpp"

#include <algorithm>
#include <vector>

#include "ablate/machine.hpp"
#include "ablate/ops.hpp"

namespace ablate {

MemoryEstimate estimate_memory(Setup& s, int64_t rows) {
  MemoryEstimate m;
  Model& model = *s.model;
  auto params = model.params().all();
  for (const Parameter* p : params) m.params += 4.0 * static_cast<double>(p->value.numel());
  m.grads = m.params;
  for (auto& b : s.optimizer->state()) m.optimizer += 4.0 * static_cast<double>(b.data->size());
  const int64_t T = model.dims().context;
  std::vector<int32_t> x(static_cast<size_t>(2 * T)), y(static_cast<size_t>(2 * T));
  double bytes[2] = {0, 0};
  {
    Graph g;
    g.training = true;
    g.precision = s.train.precision;  // bf16: the products' bf16 roundings are in the arena
    g.seed = s.seed;
    // As in training (trainer.cpp), a forward pass of one sequence plans the values' lifetimes
    // (graph.hpp), keeping every value to its end; then a step of one and, for a micro-batch of
    // several, one of two sequences. A micro-batch of one is measured as it is: a step of two
    // would be the largest of its run (GPT-2 small at 1 x 1,024: a third above its steps).
    const std::vector<int64_t> batches =
        rows > 1 ? std::vector<int64_t>{1, 1, 2} : std::vector<int64_t>{1, 1};
    for (size_t i = 0; i < batches.size(); ++i) {
      const int64_t b = batches[i];
      g.reset();
      Rng rng(s.seed ^ 0x3E3A0ull);
      sample_batch(*s.data, true, b, T, rng, x.data(), y.data());
      s.objective->prepare(x.data(), y.data(), b, T, s.tokenizer->vocab_size(), rng);
      std::vector<int32_t> prefix;
      const Var loss = batch_loss(g, model, *s.objective, Batch{x.data(), b, T}, y.data(), prefix);
      if (i > 0) g.backward(loss);
      // bf16: with x and dy rounded
      const double used = static_cast<double>(g.step_bytes() + product_buffer_bytes(g));
      (i == 0 ? m.planning : bytes[b - 1]) = used;
      m.param_copies = std::max(m.param_copies, static_cast<double>(param_copy_bytes(g)));
    }
  }  // the graph's arena and bf16 copies go back: what stays resident is data and code
  model.params().zero_grad();
  m.activations_per_sequence = rows > 1 ? std::max(0.0, bytes[1] - bytes[0]) : bytes[0];
  m.activations =
      std::max(m.planning, bytes[0] + m.activations_per_sequence * static_cast<double>(rows - 1));
  // The parameters, their gradients and the optimizer's state are resident already (the
  // optimizer's zeroed at its init()): counted above, not again here.
  m.other = std::max(0.0, resident_bytes() - m.params - m.grads - m.optimizer);
  return m;
}

namespace {

std::string describe_memory(const MemoryEstimate& m, int64_t rows) {
  return human_bytes(m.total()) + " (parameters " + human_bytes(m.params) + ", gradients " +
         human_bytes(m.grads) + ", optimizer state " + human_bytes(m.optimizer) + ", activations " +
         human_bytes(m.activations) + " = " + std::to_string(rows) + " sequences x " +
         human_bytes(m.activations_per_sequence) + ", data and code " + human_bytes(m.other) +
         (m.param_copies > 0 ? ", bf16 weights " + human_bytes(m.param_copies) : std::string()) +
         ")";
}

// The options that bring a run's memory under `room` bytes.
std::string memory_fixes(const MemoryEstimate& m, int64_t batch, int64_t grad_accum, double room) {
  const double fixed = m.total() - m.activations + m.activations_per_sequence;  // with one sequence
  std::string out = "Lower train.batch_size (each sequence of the micro-batch holds " +
                    human_bytes(m.activations_per_sequence) + " of activations)";
  if (m.activations_per_sequence > 0 && room > fixed) {
    const int64_t fit = std::max<int64_t>(
        1, 1 + static_cast<int64_t>((room - fixed) / m.activations_per_sequence * 0.8));
    if (fit < batch) {
      const int64_t accum = (batch * grad_accum + fit - 1) / fit;
      out += ", e.g. train.batch_size=" + std::to_string(fit) +
             " train.grad_accum=" + std::to_string(accum) + " for about the same tokens per step";
    }
  }
  return out +
         "; or lower model.context (activations grow with it, attention's quadratically). "
         "If the estimate is wrong, --no-memory-check skips this check";
}

}  // namespace

std::string memory_shortfall(const MemoryEstimate& m, int64_t batch, int64_t grad_accum) {
  const MemoryRoom room = memory_room();
  const double held = m.other + m.params + m.grads + m.optimizer;  // allocated already
  const double needed = m.total() - held;
  if (room.bytes < 0 || needed <= room.bytes) return "";
  return "estimated peak memory " + describe_memory(m, batch) + " needs " + human_bytes(needed) +
         " more than this process holds, but only " + human_bytes(room.bytes) + " is available (" +
         room.limited_by + "). " + memory_fixes(m, batch, grad_accum, room.bytes + held);
}

}  // namespace ablate
