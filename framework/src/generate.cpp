// Sampling and KV-cache generation (see generate.hpp).
#include "ablate/generate.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "ablate/error.hpp"

namespace ablate {

int32_t sample_token(const float* logits, int64_t V, const Sampling& s, Rng& rng, float* scratch) {
  if (s.greedy || s.temperature <= 0.0f)
    return static_cast<int32_t>(std::max_element(logits, logits + V) - logits);
  float* p = scratch;
  int32_t* idx = reinterpret_cast<int32_t*>(scratch + V);
  float mx = *std::max_element(logits, logits + V);
  for (int64_t i = 0; i < V; ++i) p[i] = std::exp((logits[i] - mx) / s.temperature);
  std::iota(idx, idx + V, 0);
  int64_t keep = V;
  if ((s.top_k > 0 && s.top_k < V) || s.top_p < 1.0f) {
    std::stable_sort(idx, idx + V, [&](int32_t a, int32_t b) { return p[a] > p[b]; });
    if (s.top_k > 0 && s.top_k < V) keep = s.top_k;
    if (s.top_p < 1.0f) {
      double total = 0;
      for (int64_t i = 0; i < keep; ++i) total += p[idx[i]];
      double cum = 0;
      for (int64_t i = 0; i < keep; ++i) {
        cum += p[idx[i]];
        if (cum >= s.top_p * total) {
          keep = i + 1;
          break;
        }
      }
    }
  }
  double total = 0;
  for (int64_t i = 0; i < keep; ++i) total += p[idx[i]];
  double r = static_cast<double>(rng.uniform()) * total, cum = 0;
  for (int64_t i = 0; i < keep; ++i) {
    cum += p[idx[i]];
    if (r < cum) return idx[i];
  }
  return idx[keep - 1];
}

std::vector<int32_t> generate(Model& model, const std::vector<int32_t>& prompt, int64_t n, const Sampling& s,
                              Rng& rng, const std::function<void(int32_t)>& on_token) {
  if (prompt.empty()) throw Error("generate: the prompt encodes to no tokens; give a non-empty prompt");
  const int64_t ctx = model.dims().context, V = model.dims().vocab_size;
  std::vector<KVCache> caches = model.make_caches(1, ctx);
  Graph g;
  NoGrad ng(g);
  std::vector<float> scratch(static_cast<size_t>(2 * V));
  std::vector<int32_t> seq = prompt, out;
  // Encodes seq[start..end) into fresh caches and returns the last position's logits.
  auto prefill = [&](size_t start) {
    for (auto& c : caches) c.length = 0;
    g.reset();
    ForwardArgs a;
    a.ids = seq.data() + start;
    a.time = static_cast<int64_t>(seq.size() - start);
    a.caches = &caches;
    Var logits = model.forward(g, a);
    return g.value(logits).row(a.time - 1);
  };
  size_t window_start = seq.size() > static_cast<size_t>(ctx) ? seq.size() - static_cast<size_t>(ctx) : 0;
  const float* last = prefill(window_start);
  for (int64_t i = 0; i < n; ++i) {
    int32_t t = sample_token(last, V, s, rng, scratch.data());
    seq.push_back(t);
    out.push_back(t);
    if (on_token) on_token(t);
    if (i + 1 == n) break;
    if (caches[0].length >= ctx) {
      last = prefill(seq.size() - static_cast<size_t>(std::max<int64_t>(1, ctx / 2)));
      continue;
    }
    g.reset();
    ForwardArgs a;
    a.ids = &seq.back();
    a.pos0 = caches[0].length;
    a.caches = &caches;
    last = g.value(model.forward(g, a)).row(0);
  }
  return out;
}

}  // namespace ablate
