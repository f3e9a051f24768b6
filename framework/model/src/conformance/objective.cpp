// The conformance suite of family "objective": windows -> inputs and targets, loss, metrics.
#include <algorithm>

#include "ablate/objective.hpp"
#include "kit.hpp"
#include "suites.hpp"

namespace ablate::conformance {
namespace {

// B windows of T tokens of a vocabulary of V, the last row padded after 3 tokens.
void objective_batch(std::vector<int32_t>& x, std::vector<int32_t>& y, int64_t B, int64_t T,
                     int64_t V) {
  Rng rng(17);
  std::vector<int32_t> stream(static_cast<size_t>(T + 1));
  x.assign(static_cast<size_t>(B * T), 0);
  y.assign(static_cast<size_t>(B * T), -1);
  for (int64_t b = 0; b < B; ++b) {
    for (auto& v : stream) v = static_cast<int32_t>(rng.below(static_cast<uint64_t>(V)));
    const int64_t real = b + 1 == B ? 3 : T + 1;  // tokens in the window
    for (int64_t t = 0; t < T && t < real; ++t) {
      x[static_cast<size_t>(b * T + t)] = stream[static_cast<size_t>(t)];
      if (t + 1 < real) y[static_cast<size_t>(b * T + t)] = stream[static_cast<size_t>(t + 1)];
    }
  }
}

// What the objective checks share: the variant.
struct ObjectiveCase {
  const Subject& s;
  const ModelDims d = small_dims(8, 2, 16);
  Built<Objective> objective() const { return build<Objective>(s.options, path_of(s.family), d); }
};

void prepares_valid_targets(ObjectiveCase& c, std::string& note) {
  constexpr int64_t B = 3, T = 16, V = 11;
  auto o = c.objective();
  expect(o->extra_tokens() >= 0 && o->extra_tokens() < 1000,
         "extra_tokens() = " + std::to_string(o->extra_tokens()));
  const int64_t Vm = V + o->extra_tokens();
  std::vector<int32_t> x, y, x2, y2;
  objective_batch(x, y, B, T, V);
  x2 = x, y2 = y;
  Rng r1(5), r2(5);
  o->prepare(x.data(), y.data(), B, T, V, r1);
  o->prepare(x2.data(), y2.data(), B, T, V, r2);
  expect(x == x2 && y == y2, "two calls with the same random stream prepare different batches");
  int64_t scored = 0;
  for (int64_t i = 0; i < B * T; ++i) {
    const int32_t xi = x[static_cast<size_t>(i)], yi = y[static_cast<size_t>(i)];
    expect(xi >= 0 && xi < Vm, "input " + std::to_string(xi) + " at " + std::to_string(i) +
                                   " is not an id below " + std::to_string(Vm));
    expect(yi >= -1 && yi < Vm, "target " + std::to_string(yi) + " at " + std::to_string(i) +
                                    " is neither -1 nor an id");
    // Row B-1 holds 3 tokens: positions 3.. are padding.
    if (i >= (B - 1) * T + 3)
      expect(yi == -1, "padding position " + std::to_string(i) + " is scored");
    scored += yi >= 0;
  }
  expect(scored > 0, "no position is scored");
  note = std::to_string(scored) + " of " + std::to_string(B * T) + " positions scored; " +
         (o->causal() ? "causal" : "bidirectional");
}

// metrics() names the same metrics with and without a batch, finite on one.
void expect_metrics_named_alike(const Objective& o, const Tensor& logits,
                                const std::vector<int32_t>& y) {
  const auto empty = o.metrics(Tensor{}, nullptr, 0),
             full = o.metrics(logits, y.data(), static_cast<int64_t>(y.size()));
  expect(empty.size() == full.size(), "metrics() names " + std::to_string(full.size()) +
                                          " metrics on a batch, " + std::to_string(empty.size()) +
                                          " on none; name the same ones always");
  for (size_t k = 0; k < full.size(); ++k) {
    expect(full[k].first == empty[k].first, "metric " + std::to_string(k) + " is '" +
                                                full[k].first + "', '" + empty[k].first +
                                                "' on no batch");
    expect(std::isfinite(full[k].second),
           "metric '" + full[k].first + "' = " + num(full[k].second));
  }
}

// loss(): a finite (1,1) sum over as many positions as the targets score, a sum that adds up
// over the rows of a batch (the trainer adds slices and micro-batches, then divides once), the
// gradients of sum / count (what the trainer trains on) by finite differences, and metrics.
void loss_and_metrics_are_sound(ObjectiveCase& c, std::string& note) {
  constexpr int64_t B = 2, T = 8, V = 11;
  auto o = c.objective();
  const int64_t Vm = V + o->extra_tokens();
  std::vector<int32_t> x, y;
  objective_batch(x, y, B, T, V);
  Rng r(9);
  o->prepare(x.data(), y.data(), B, T, V, r);
  int64_t scored[B] = {0, 0};
  for (int64_t i = 0; i < B * T; ++i) scored[i / T] += y[static_cast<size_t>(i)] >= 0;
  ParamStore store(3);
  Parameter& logits = add_input(store, "logits", B * T, Vm);
  std::string relation;
  {
    Graph g;
    const LossSum l = o->loss(g, g.param(logits), y.data(), B * T);
    expect_shape(g, l.sum, 1, 1, "the loss's sum");
    expect_finite(values(g, l.sum), "the loss's sum");
    expect(l.count == scored[0] + scored[1],
           "the loss's count is " + std::to_string(l.count) + ", the targets score " +
               std::to_string(scored[0] + scored[1]) +
               " positions (y >= 0); the trainer divides by the positions scored");
    // Row by row: the two windows' sums and counts add up to the batch's.
    double parts = 0;
    for (int64_t b = 0; b < B; ++b) {
      Parameter& half = add_input(store, "window" + std::to_string(b), T, Vm);
      std::copy(logits.value.row(b * T), logits.value.row(b * T) + T * Vm, half.value.data);
      Graph gh;
      const LossSum lh = o->loss(gh, gh.param(half), y.data() + b * T, T);
      expect(lh.count == scored[b], "window " + std::to_string(b) + " alone: count " +
                                        std::to_string(lh.count) + ", its targets score " +
                                        std::to_string(scored[b]));
      parts += gh.value(lh.sum).data[0];
    }
    const double whole = g.value(l.sum).data[0];
    expect(close(parts, whole, 1e-5),
           "the loss's sum over a batch of two windows is " + num(whole) +
               ", the sums of the windows alone add up to " + num(parts) +
               "; a sum must add up over rows (the trainer adds slices, then divides once)");
    const double mean = whole / static_cast<double>(std::max<int64_t>(1, l.count)),
                 ce = g.value(cross_entropy(g, g.param(logits), y.data(), B * T)).data[0];
    relation = close(mean, ce, 1e-5) ? "sum / count is the mean cross-entropy"
                                     : "sum / count " + num(mean) + ", the mean cross-entropy " +
                                           num(ce) + ": a loss of its own";
    expect_metrics_named_alike(*o.obj, g.value(g.param(logits)), y);
  }
  expect_gradients(
      [&](Graph& g) {
        const LossSum l = o->loss(g, g.param(logits), y.data(), B * T);
        return Outputs{scale(g, l.sum, 1.0f / static_cast<float>(std::max<int64_t>(1, l.count)))};
      },
      {&logits}, note);
  note = relation + "; " + note;
}

}  // namespace

void check_objective(Checker& ck, const Subject& s) {
  ObjectiveCase c{s};
  run_properties<ObjectiveCase>(
      ck, c,
      {{"prepare: inputs and targets are ids of the vocabulary (plus its extra tokens), padding "
        "never scored, at least one position scored, deterministic",
        &prepares_valid_targets},
       {"loss: a finite sum over the scored positions, adding up over rows; gradients of sum / "
        "count by finite differences (logits); metrics finite, named as with no batch",
        &loss_and_metrics_are_sound}});
  check_options<Objective>(ck, s, c.d);
}

}  // namespace ablate::conformance
