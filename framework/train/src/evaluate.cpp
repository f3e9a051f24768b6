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
  double counted = 0;  // full: the targets of the whole batches (every rank sees them all)
  NoGrad ng(g);
  bool was = g.training;
  g.training = false;
  const Slice sl = comm.size() == 1 ? Slice{0, t.batch} : batch_slice(t.batch, comm);
  std::vector<std::string> names{"loss"};
  for (const auto& kv : obj.metrics(Tensor{}, nullptr, 0)) names.push_back(kv.first);
  std::vector<double> parts;  // this rank's share of each batch mean, batch-major, a value per name
  ByteLoss bytes;             // this rank's slices, every batch
  for (int64_t b = 0; b < batches; ++b) {
    if (full) consecutive_batch(data, train, b * t.batch, t.batch, T, x.data(), y.data());
    else sample_batch(data, train, t.batch, T, rng, x.data(), y.data());
    obj.prepare(x.data(), y.data(), t.batch, T, m.dims().vocab_size - obj.extra_tokens(), mask_rng);
    const int64_t n_all = counted_targets(y.data(), t.batch * T);
    const int64_t n_mine = counted_targets(y.data() + sl.lo * T, (sl.hi - sl.lo) * T);
    counted += static_cast<double>(n_all);
    std::vector<std::pair<std::string, double>> row{{"loss", 0.0}};
    if (n_mine > 0) {
      g.reset();
      const int32_t* targets = y.data() + sl.lo * T;
      std::vector<int32_t> prefix;
      scored_prefix(targets, sl.hi - sl.lo, T, prefix);
      Batch fa{x.data() + sl.lo * T, sl.hi - sl.lo, T};
      fa.prefix = prefix.data();
      Var logits = m.forward(g, fa);
      row[0].second = g.value(obj.loss(g, logits, targets, (sl.hi - sl.lo) * T)).data[0];
      for (const auto& kv : obj.metrics(g.value(logits), targets, (sl.hi - sl.lo) * T))
        row.push_back(kv);
      const ByteLoss b =
          byte_loss(g.value(logits), targets, (sl.hi - sl.lo) * T, row[0].second, token_bytes);
      bytes.nats += b.nats;
      bytes.bytes += b.bytes;
    }
    for (size_t k = 0; k < names.size(); ++k) {
      const double v = k < row.size() ? row[k].second : 0.0;
      if (full)
        parts.push_back(v * static_cast<double>(n_mine));  // the slice's sum over its targets
      else
        parts.push_back(
            comm.size() == 1 ? v : v * static_cast<double>(n_mine) / static_cast<double>(n_all));
    }
  }
  parts.push_back(bytes.nats);
  parts.push_back(bytes.bytes);
  comm.allreduce_sum(parts.data(), parts.size());
  std::vector<std::pair<std::string, double>> means;
  for (size_t k = 0; k < names.size(); ++k) {
    double total = 0;
    for (int64_t b = 0; b < batches; ++b) total += parts[static_cast<size_t>(b) * names.size() + k];
    means.emplace_back(names[k],
                       total / (full ? std::max(1.0, counted) : static_cast<double>(batches)));
  }
  means.emplace_back("bpb", ByteLoss{parts[parts.size() - 2], parts.back()}.bpb());
  g.training = was;
  return means;
}

}  // namespace ablate
