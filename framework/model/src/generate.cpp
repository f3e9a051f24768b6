// Sampling and KV-cache generation (see generate.hpp).
#include "ablate/generate.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <string>

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

std::vector<int32_t> generate(Model& model, const std::vector<int32_t>& prompt, int64_t n,
                              const Sampling& s, Rng& rng,
                              const std::function<void(int32_t)>& on_token) {
  if (prompt.empty())
    throw Error("generate: the prompt encodes to no tokens; give a non-empty prompt");
  const int64_t ctx = model.dims().context, V = model.dims().vocab_size;
  std::vector<KVCache> caches = model.make_caches(1, ctx);
  Graph g;
  NoGrad ng(g);
  g.param_epoch = new_param_epoch();  // the weights stay as they are while it decodes
  std::vector<float> scratch(static_cast<size_t>(2 * V));
  std::vector<int32_t> seq = prompt, out;
  // Encodes seq[start..end) into fresh caches and returns the last position's logits.
  auto prefill = [&](size_t start) {
    for (auto& c : caches) c.length = 0;
    g.reset();
    Batch a;
    a.ids = seq.data() + start;
    a.time = static_cast<int64_t>(seq.size() - start);
    a.caches = &caches;
    // The prompt's part of the window is its prefix (prefix_lm reads it whole).
    const int32_t prefix = static_cast<int32_t>(prompt.size() > start ? prompt.size() - start : 0);
    a.prefix = &prefix;
    Var logits = model.forward(g, a);
    return g.value(logits).row(a.time - 1);
  };
  size_t window_start =
      seq.size() > static_cast<size_t>(ctx) ? seq.size() - static_cast<size_t>(ctx) : 0;
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
    Batch a;
    a.ids = &seq.back();
    a.pos0 = caches[0].length;
    a.caches = &caches;
    last = g.value(model.forward(g, a)).row(0);
  }
  return out;
}

namespace {

// Decodes groups of prompts of one length together: the graph, caches and scratch are
// shared by every group of a decode_prompts call.
struct PromptDecoder {
  Model& model;
  const Tokenizer& tok;
  const std::vector<std::string>& prompts;
  const std::vector<int64_t>& max_chars;
  const DecodeOptions& o;
  const std::string& stop;
  std::vector<std::string>& out;
  Graph g;
  std::vector<float> scratch;
  std::vector<KVCache> caches;

  // The prompts idx[0..n) decoding together: each one's random stream, whether its text is
  // done, and the token it feeds back next.
  struct Group {
    const size_t* idx;
    size_t n;
    std::vector<Rng> rngs;
    std::vector<uint8_t> done;
    std::vector<int32_t> next;
  };

  // Samples each row's next token from logits row b * row_stride + row_offset into next[b]
  // and appends it to the texts not yet done; returns how many are still open.
  size_t sample_step(Group& batch, Var logits, int64_t row_stride, int64_t row_offset) {
    const int64_t V = model.dims().vocab_size;
    const size_t* idx = batch.idx;
    std::vector<uint8_t>& done = batch.done;
    size_t open = 0;
    for (size_t b = 0; b < batch.n; ++b) {
      const float* row = g.value(logits).row(static_cast<int64_t>(b) * row_stride + row_offset);
      int32_t t = sample_token(row, V, o.sampling, batch.rngs[b], scratch.data());
      batch.next[b] = t;
      if (done[b]) continue;
      std::string& text = out[idx[b]];
      size_t from = text.size() >= stop.size() ? text.size() - stop.size() + 1 : 0;
      text += tok.decode({t});
      if (text.find(stop, from) != std::string::npos ||
          static_cast<int64_t>(text.size()) >= max_chars[idx[b]])
        done[b] = 1;
      else ++open;
    }
    return open;
  }

  // Decodes the n prompts idx[0..n) of P tokens each (ids) as one batch.
  void decode_batch(const std::vector<std::vector<int32_t>>& ids, int64_t P, const size_t* idx,
                    size_t n) {
    const int64_t ctx = model.dims().context;
    const int64_t B = static_cast<int64_t>(n);
    int64_t steps = 0;
    for (size_t b = 0; b < n; ++b) steps = std::max(steps, max_chars[idx[b]]);
    if (steps <= 0) return;
    if (P + steps - 1 > ctx)
      throw Error("decode_prompts: a prompt of " + std::to_string(P) +
                  " tokens plus an answer of up to " + std::to_string(steps - 1) +
                  " tokens does not fit the model's context of " + std::to_string(ctx) +
                  " tokens ('" + prompts[idx[0]] +
                  "'); train with a longer model.context or use shorter problems");
    // The last token drawn is never fed back, so the cache needs P + steps - 1 slots.
    if (caches.empty() || caches[0].batch != B || caches[0].capacity < P + steps - 1)
      caches = model.make_caches(B, P + steps - 1);
    for (auto& kv : caches) kv.length = 0;
    std::vector<int32_t> x(static_cast<size_t>(B * P));
    for (size_t b = 0; b < n; ++b)
      std::copy(ids[idx[b]].begin(), ids[idx[b]].end(), x.begin() + static_cast<int64_t>(b) * P);
    Group batch{idx, n, {}, std::vector<uint8_t>(n, 0), std::vector<int32_t>(n)};
    for (size_t b = 0; b < n; ++b)
      batch.rngs.emplace_back(o.seed * 0x9E3779B97F4A7C15ull + idx[b] * 0xBF58476D1CE4E5B9ull + 1);
    g.reset();
    Batch a;
    a.ids = x.data();
    a.batch = B;
    a.time = P;
    a.caches = &caches;
    // The prompts are the prefix (prefix_lm reads them whole).
    const std::vector<int32_t> prefix(n, static_cast<int32_t>(P));
    a.prefix = prefix.data();
    Var logits = model.forward(g, a);  // (B*P, V): the last position of each row predicts
    int64_t row_stride = P, row_offset = P - 1;
    for (int64_t s = 0; s < steps; ++s) {
      const size_t open = sample_step(batch, logits, row_stride, row_offset);
      if (open == 0 || s + 1 == steps) break;
      g.reset();
      Batch d;
      d.ids = batch.next.data();
      d.batch = B;
      d.time = 1;
      d.pos0 = P + s;
      d.caches = &caches;
      logits = model.forward(g, d);  // (B, V)
      row_stride = 1;
      row_offset = 0;
    }
  }
};

}  // namespace

std::vector<std::string> decode_prompts(Model& model, const Tokenizer& tok,
                                        const std::vector<std::string>& prompts,
                                        const std::vector<int64_t>& max_chars,
                                        const DecodeOptions& o, const std::string& stop) {
  if (prompts.size() != max_chars.size())
    throw Error("decode_prompts: prompts and max_chars differ in length");
  if (o.batch < 1)
    throw Error("decode_prompts: batch must be >= 1, got " + std::to_string(o.batch));
  std::vector<std::vector<int32_t>> ids(prompts.size());
  std::map<size_t, std::vector<size_t>> by_length;  // equal prompt lengths decode together
  for (size_t i = 0; i < prompts.size(); ++i) {
    ids[i] = tok.encode(prompts[i]);
    if (ids[i].empty())
      throw Error("decode_prompts: prompt '" + prompts[i] + "' encodes to no tokens");
    by_length[ids[i].size()].push_back(i);
  }
  std::vector<std::string> out(prompts.size());
  PromptDecoder d{model, tok, prompts, max_chars, o, stop, out, {}, {}, {}};
  NoGrad ng(d.g);
  d.g.param_epoch = new_param_epoch();  // the weights stay as they are while it decodes
  d.scratch.resize(static_cast<size_t>(2 * model.dims().vocab_size));
  for (const auto& [len, members] : by_length)
    for (size_t c0 = 0; c0 < members.size(); c0 += static_cast<size_t>(o.batch))
      d.decode_batch(ids, static_cast<int64_t>(len), members.data() + c0,
                     std::min(members.size() - c0, static_cast<size_t>(o.batch)));
  return out;
}

}  // namespace ablate
