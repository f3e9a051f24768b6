// Evaluation during a run (see evaluate.hpp).
#include "evaluate.hpp"

#include <algorithm>

namespace ablate {

Slice batch_slice(int64_t B, const Communicator& c) {
  return {B * c.rank() / c.size(), B * (c.rank() + 1) / c.size()};
}

// Targets that count in the loss (not padding) among n.
int64_t counted_targets(const int32_t* y, int64_t n) {
  int64_t c = 0;
  for (int64_t i = 0; i < n; ++i) c += y[i] >= 0;
  return c;
}

std::vector<std::pair<std::string, double>> evaluate(Model& m, const Objective& obj, Graph& g,
                                                     const TextData& data, bool train,
                                                     const TrainConfig& t, int64_t T, uint64_t seed,
                                                     std::vector<int32_t>& x,
                                                     std::vector<int32_t>& y, Communicator& comm,
                                                     const std::vector<int32_t>& token_bytes,
                                                     bool full) {
  Rng rng(seed * 0x9E3779B97F4A7C15ull + 0xE7A1), mask_rng(seed * 0x9E3779B97F4A7C15ull + 0x0B1E);
  const int64_t batches =
      full ? (consecutive_windows(data, train, T) + t.batch - 1) / t.batch : t.eval_batches;
  double counted = 0;  // the scored targets of the whole batches (every rank sees them all)
  NoGrad ng(g);
  bool was = g.training;
  g.training = false;
  const Slice sl = comm.size() == 1 ? Slice{0, t.batch} : batch_slice(t.batch, comm);
  std::vector<std::string> names{"loss"};
  for (const auto& kv : obj.metrics(Tensor{}, nullptr, 0)) names.push_back(kv.first);
  // This rank's sums over its scored targets, a value per name: the loss's summed, the
  // metrics' (means over the slice's scored targets) times their count.
  std::vector<double> parts(names.size(), 0.0);
  ByteLoss bytes;  // this rank's slices, every batch
  for (int64_t b = 0; b < batches; ++b) {
    if (full) consecutive_batch(data, train, b * t.batch, t.batch, T, x.data(), y.data());
    else sample_batch(data, train, t.batch, T, rng, x.data(), y.data());
    obj.prepare(x.data(), y.data(), t.batch, T, m.dims().vocab_size - obj.extra_tokens(), mask_rng);
    counted += static_cast<double>(counted_targets(y.data(), t.batch * T));
    const int64_t n_mine = counted_targets(y.data() + sl.lo * T, (sl.hi - sl.lo) * T);
    // The batch's first `rows` sequences of this rank: their loss's sum, the objective's
    // metrics and the bytes' loss, read from the tape.
    auto pass = [&](int64_t rows, int64_t scored,
                    std::vector<std::pair<std::string, double>>& metrics, ByteLoss& b) {
      g.reset();
      const int32_t* targets = y.data() + sl.lo * T;
      std::vector<int32_t> prefix;
      scored_prefix(targets, rows, T, prefix);
      Batch fa{x.data() + sl.lo * T, rows, T};
      fa.prefix = prefix.data();
      Var logits = m.forward(g, fa);
      const LossSum loss = obj.loss(g, logits, targets, rows * T);
      check_loss_count(loss, scored, rows * T, "an evaluation batch");
      const double sum = g.value(loss.sum).data[0];
      metrics = obj.metrics(g.value(logits), targets, rows * T);
      b = byte_loss(g.value(logits), targets, rows * T,
                    scored > 0 ? sum / static_cast<double>(scored) : 0.0, token_bytes);
      return sum;
    };
    if (n_mine > 0) {
      std::vector<std::pair<std::string, double>> metrics;
      ByteLoss b;
      // One sequence first plans the values' lifetimes of the batches (graph.hpp).
      if (!g.planned()) pass(1, counted_targets(y.data() + sl.lo * T, T), metrics, b);
      parts[0] += pass(sl.hi - sl.lo, n_mine, metrics, b);
      for (size_t k = 1; k < names.size() && k - 1 < metrics.size(); ++k)
        parts[k] += metrics[k - 1].second * static_cast<double>(n_mine);
      bytes.nats += b.nats;
      bytes.bytes += b.bytes;
    }
  }
  parts.push_back(bytes.nats);
  parts.push_back(bytes.bytes);
  comm.allreduce_sum(parts.data(), parts.size());
  // Means over every scored target of the batches, as one batch of them all would give.
  std::vector<std::pair<std::string, double>> means;
  for (size_t k = 0; k < names.size(); ++k)
    means.emplace_back(names[k], parts[k] / std::max(1.0, counted));
  means.emplace_back("bpb", ByteLoss{parts[parts.size() - 2], parts.back()}.bpb());
  g.training = was;
  return means;
}

}  // namespace ablate
