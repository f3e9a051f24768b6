// The conformance suite of family "attention": the checks of an attention variant, with no
// positional encoding and with every registered one.
#include <set>
#include <string>

#include "ablate/attention.hpp"
#include "ablate/positional.hpp"
#include "kit.hpp"
#include "suites.hpp"

namespace ablate::conformance {
namespace {

constexpr int64_t C = 8, NH = 2, B = 2, T = 5;

// A positional encoding the attention is checked with: none (an empty name) or a registered one.
struct Pos {
  std::string name;
  Built<PositionalEncoding> p;
  std::string label() const {
    return name.empty() ? "no positional encoding" : "positional '" + name + "'";
  }
};

// What the attention checks share: the sizes, token ids, input and positional encodings.
struct AttentionCase {
  const Subject& s;
  const ModelDims d = small_dims(C, NH, 16);
  const std::string path;
  // Token ids of sequence b at position p, B x T of them, for the parts that read them (value
  // embeddings): a forward of sequences from b at positions from p reads ids + b * T + p.
  std::vector<int32_t> ids;
  // No positional encoding, then every registered one: each acts inside attention.
  std::vector<Pos> all;
  std::string unbuildable;  // the registered ones not buildable at these sizes
  const std::vector<float> x = randn(static_cast<size_t>(B * T * C), 3);
  std::vector<const Pos*> usable;  // those the variant accepts (found by the first check)

  explicit AttentionCase(const Subject& subject) : s(subject), path(path_of(s.family)) {
    ids.resize(static_cast<size_t>(B * T));
    for (int64_t i = 0; i < B * T; ++i)
      ids[static_cast<size_t>(i)] =
          static_cast<int32_t>((7 * (i / T) + 3 * (i % T) + 1) % d.vocab_size);
    all.push_back({"", {}});
    for (const PluginEntry* e : PluginRegistry::instance().variants(PositionalEncoding::kFamily)) {
      YAML::Node n;
      n["type"] = e->info->name;
      try {
        all.push_back({e->info->name, build<PositionalEncoding>(n, "model.positional", d)});
      } catch (const std::exception&) {
        unbuildable += std::string(unbuildable.empty() ? "" : ", ") + e->info->name;
      }
    }
  }

  Built<Attention> attention() const { return build<Attention>(s.options, path, d); }

  std::vector<float> run(Attention& a, PositionalEncoding* pos, const std::vector<float>& xs,
                         int64_t b, int64_t t, float* weights = nullptr,
                         const uint8_t* key_mask = nullptr) const {
    Graph g;
    std::vector<float*> w{weights};
    Batch in{ids.data(), b, t};
    in.positional = pos;
    in.layer = 0;
    if (weights) in.attention_weights = &w;
    in.key_mask = key_mask;
    Var y = a.forward(g, g.constant(xs.data(), b * t, C), in);
    expect_shape(g, y, b * t, C, "the output");
    return values(g, y);
  }
};

void builds_with_each_positional(AttentionCase& c, std::string& note) {
  auto a = c.attention();
  expect(a->n_heads() > 0 && a->kv_width() > 0,
         "n_heads() = " + std::to_string(a->n_heads()) +
             ", kv_width() = " + std::to_string(a->kv_width()) + "; both must be positive");
  std::string refused;
  for (const Pos& p : c.all) {
    try {
      expect_finite(c.run(*a.obj, p.p.obj.get(), c.x, B, T), "the output with " + p.label());
      c.usable.push_back(&p);
    } catch (const ConfigError&) {
      throw;
    } catch (const Error& e) {
      if (p.name.empty()) throw;
      refused += "\n" + p.name + ": " + e.what();
    }
  }
  note = std::to_string(a.store->count()) +
         " parameters; positional encodings: " + std::to_string(c.usable.size() - 1) + " used";
  if (!refused.empty()) note += "; refused with an ablate::Error (allowed):" + refused;
  if (!c.unbuildable.empty()) note += "; not buildable at these sizes: " + c.unbuildable;
}

void is_deterministic(AttentionCase& c, std::string&) {
  auto a = c.attention(), b = c.attention();
  for (const Pos* p : c.usable) {
    const auto ya = c.run(*a.obj, p->p.obj.get(), c.x, B, T);
    expect(ya == c.run(*a.obj, p->p.obj.get(), c.x, B, T), "two calls differ, with " + p->label());
    expect(ya == c.run(*b.obj, p->p.obj.get(), c.x, B, T),
           "two instances built with the same seed differ, with " + p->label());
  }
}

void weights_are_probabilities(AttentionCase& c, std::string&) {
  auto a = c.attention();
  const int64_t NHa = a->n_heads();
  for (const Pos* p : c.usable) {
    std::vector<float> w(static_cast<size_t>(B * NHa * T * T), -1.0f);
    c.run(*a.obj, p->p.obj.get(), c.x, B, T, w.data());
    for (int64_t r = 0; r < B * NHa * T; ++r) {
      double sum = 0;
      for (int64_t j = 0; j < T; ++j) {
        const float v = w[static_cast<size_t>(r * T + j)];
        expect(v >= 0.0f && v <= 1.0f,
               "weight " + num(v) + " in row " + std::to_string(r) + " with " + p->label() +
                   (v == -1.0f ? " (never written: fill Batch::weights_out())" : ""));
        sum += v;
      }
      expect(std::fabs(sum - 1.0) < 1e-5,
             "row " + std::to_string(r) + " sums to " + num(sum) + " with " + p->label());
    }
  }
}

// The outputs of the real tokens (mask 1) are the same in y1 and y2.
void expect_real_rows_equal(const std::vector<float>& y1, const std::vector<float>& y2,
                            const std::vector<uint8_t>& mask, const Pos& p) {
  for (int64_t r = 0; r < B * T; ++r) {
    if (!mask[static_cast<size_t>(r)]) continue;
    for (int64_t col = 0; col < C; ++col) {
      const size_t i = static_cast<size_t>(r * C + col);
      expect(close(y1[i], y2[i], 1e-5),
             "changing padding tokens changes the output of real token " + std::to_string(r % T) +
                 " of sequence " + std::to_string(r / T) + " (" + num(y1[i]) + " vs " + num(y2[i]) +
                 "), with " + p.label());
    }
  }
}

// No real query gives weight to a padded key; w is (B, NHa, T, T).
void expect_padded_keys_unweighted(const std::vector<float>& w, int64_t NHa,
                                   const std::vector<uint8_t>& mask, const Pos& p) {
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < NHa; ++h)
      for (int64_t i = 0; i < T; ++i) {
        if (!mask[static_cast<size_t>(b * T + i)]) continue;
        for (int64_t j = 0; j < T; ++j)
          if (!mask[static_cast<size_t>(b * T + j)])
            expect(w[static_cast<size_t>(((b * NHa + h) * T + i) * T + j)] == 0.0f,
                   "query " + std::to_string(i) + " of sequence " + std::to_string(b) +
                       " gives weight to padded key " + std::to_string(j) + ", with " + p.label());
      }
}

void padded_keys_are_ignored(AttentionCase& c, std::string&) {
  auto a = c.attention();
  const int64_t NHa = a->n_heads();
  // Sequence 0 padded at its end, sequence 1 at its start.
  std::vector<uint8_t> all_real(static_cast<size_t>(B * T), 1), mask = all_real;
  mask[3] = mask[4] = 0;
  mask[T + 0] = mask[T + 1] = 0;
  std::vector<float> x2 = c.x;
  const auto noise = randn(c.x.size(), 77, 3.0f);
  for (int64_t r = 0; r < B * T; ++r)
    if (!mask[static_cast<size_t>(r)])
      for (int64_t col = 0; col < C; ++col)
        x2[static_cast<size_t>(r * C + col)] = noise[static_cast<size_t>(r * C + col)];
  for (const Pos* p : c.usable) {
    PositionalEncoding* pp = p->p.obj.get();
    expect(c.run(*a.obj, pp, c.x, B, T, nullptr, all_real.data()) == c.run(*a.obj, pp, c.x, B, T),
           "a mask without padding changes the output, with " + p->label());
    std::vector<float> w(static_cast<size_t>(B * NHa * T * T), -1.0f);
    const auto y1 = c.run(*a.obj, pp, c.x, B, T, w.data(), mask.data());
    const auto y2 = c.run(*a.obj, pp, x2, B, T, nullptr, mask.data());
    expect_real_rows_equal(y1, y2, mask, *p);
    expect_padded_keys_unweighted(w, NHa, mask, *p);
  }
}

// Whether the outputs before the last position ignore the last token.
bool ignores_the_last_token(const AttentionCase& c, Attention& a) {
  std::vector<float> xl = c.x;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t col = 0; col < C; ++col)
      xl[static_cast<size_t>((b * T + T - 1) * C + col)] += 1.0f;
  const auto y0 = c.run(a, nullptr, c.x, B, T), y1 = c.run(a, nullptr, xl, B, T);
  bool causal = true;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < (T - 1) * C; ++i)
      causal = causal && close(y0[static_cast<size_t>(b * T * C + i)],
                               y1[static_cast<size_t>(b * T * C + i)], 1e-6);
  return causal;
}

void cached_decoding_matches_full_forward(AttentionCase& c, std::string& note) {
  auto a = c.attention();
  if (!ignores_the_last_token(c, *a.obj)) {
    note =
        "not causal: outputs depend on later tokens (an encoder), so incremental decoding "
        "is not checked";
    return;
  }
  for (const Pos* p : c.usable) {
    const auto ya = c.run(*a.obj, p->p.obj.get(), c.x, B, T);
    std::vector<KVCache> caches(1);
    KVCache& cache = caches[0];
    cache.init(1, T, a->kv_width());
    Graph g;
    NoGrad ng(g);
    for (int64_t t = 0; t < T; ++t) {
      g.reset();
      Batch in{c.ids.data() + t, 1, 1, t};
      in.positional = p->p.obj.get();
      in.caches = &caches;
      in.layer = 0;
      Var y = a->forward(g, g.constant(c.x.data() + t * C, 1, C), in);
      expect_shape(g, y, 1, C, "the output of one cached step");
      const auto yt = values(g, y);
      for (int64_t col = 0; col < C; ++col)
        expect(close(yt[static_cast<size_t>(col)], ya[static_cast<size_t>(t * C + col)], 1e-4),
               "step " + std::to_string(t) + " differs from the full forward (" +
                   num(yt[static_cast<size_t>(col)]) + " vs " +
                   num(ya[static_cast<size_t>(t * C + col)]) + "), with " + p->label());
    }
    expect(cache.length == T, "the cache holds " + std::to_string(cache.length) +
                                  " positions after " + std::to_string(T) + " steps");
  }
}

// Prompts of 3 and 1 positions (Batch::prefix: what a prefix mask reads whole).
constexpr int32_t kPrompts[B] = {3, 1};

std::vector<float> forward_with_prompts(const AttentionCase& c, Attention& a,
                                        const std::vector<float>& xs) {
  Graph g;
  Batch in{c.ids.data(), B, T};
  in.prefix = kPrompts;
  return values(g, a.forward(g, g.constant(xs.data(), B * T, C), in));
}

// Changing token P (a prompt's length) moves no position before it; y0 is the forward of c.x.
void expect_prompts_see_no_later_token(const AttentionCase& c, Attention& a,
                                       const std::vector<float>& y0) {
  for (int64_t b = 0; b < B; ++b) {
    const int64_t P = kPrompts[b];  // change token P: positions before it must not move
    std::vector<float> xl = c.x;
    for (int64_t col = 0; col < C; ++col) xl[static_cast<size_t>((b * T + P) * C + col)] += 1.0f;
    const auto y1 = forward_with_prompts(c, a, xl);
    for (int64_t i = 0; i < P * C; ++i)
      expect(close(y0[static_cast<size_t>(b * T * C + i)], y1[static_cast<size_t>(b * T * C + i)],
                   1e-6),
             "position " + std::to_string(i / C) + " of sequence " + std::to_string(b) +
                 " (prompt of " + std::to_string(P) + " positions) changes with token " +
                 std::to_string(P) +
                 ": it sees a token after it, which a scored position "
                 "must not (return false from causal())");
  }
}

// Each sequence's prompt prefilled into a cache, then decoded a token at a time, gives y0.
void expect_prefill_then_decode_matches(const AttentionCase& c, Attention& a,
                                        const std::vector<float>& y0) {
  for (int64_t b = 0; b < B; ++b) {
    const int64_t P = kPrompts[b];
    std::vector<KVCache> caches(1);
    caches[0].init(1, T, a.kv_width());
    Graph g;
    NoGrad ng(g);
    for (int64_t t = 0; t < T; t = t == 0 ? P : t + 1) {
      g.reset();
      const int64_t n = t == 0 ? P : 1;
      Batch in{c.ids.data() + b * T + t, 1, n, t};
      in.caches = &caches;
      in.layer = 0;
      const int32_t prompt = static_cast<int32_t>(P);
      in.prefix = &prompt;
      const auto yt = values(g, a.forward(g, g.constant(c.x.data() + (b * T + t) * C, n, C), in));
      for (int64_t i = 0; i < n * C; ++i)
        expect(
            close(yt[static_cast<size_t>(i)], y0[static_cast<size_t>((b * T + t) * C + i)], 1e-4),
            "sequence " + std::to_string(b) + ", position " + std::to_string(t + i / C) +
                ": decoding after a prefilled " + "prompt of " + std::to_string(P) +
                " positions differs from the full forward (" + num(yt[static_cast<size_t>(i)]) +
                " vs " + num(y0[static_cast<size_t>((b * T + t) * C + i)]) + ")");
    }
  }
}

void prompts_decode_as_full_forward(AttentionCase& c, std::string& note) {
  auto a = c.attention();
  if (!a->causal()) {
    note = "not causal: not checked";
    return;
  }
  const auto y0 = forward_with_prompts(c, *a.obj, c.x);
  expect_prompts_see_no_later_token(c, *a.obj, y0);
  expect_prefill_then_decode_matches(c, *a.obj, y0);
}

void gradients_match_finite_differences(AttentionCase& c, std::string& note) {
  auto a = c.attention();
  randomize(*a.store, 5, 0.3f);
  ParamStore inputs(11);
  Parameter& xp = add_input(inputs, "x", B * T, C);
  std::vector<Parameter*> wrt = a.store->all();
  wrt.push_back(&xp);
  std::vector<uint8_t> mask(static_cast<size_t>(B * T), 1);
  mask[static_cast<size_t>(T)] = 0;
  mask[static_cast<size_t>(T - 1)] = 0;
  int checked = 0;
  std::set<std::string> custom;
  for (const Pos* p : c.usable)
    for (int config = 0; config < 3; ++config) {
      const uint8_t* km = config == 1 ? mask.data() : nullptr;
      const int32_t* prefix = config == 2 ? kPrompts : nullptr;
      std::string n;
      try {
        expect_gradients(
            [&](Graph& g) {
              Batch in{c.ids.data(), B, T};
              in.positional = p->p.obj.get();
              in.key_mask = km;
              in.prefix = prefix;
              return Outputs{a->forward(g, g.param(xp), in)};
            },
            wrt, n);
      } catch (const Failure& f) {
        throw Failure{"with " + p->label() + (km ? " and a padding mask" : "") +
                      (prefix ? " and prompts of 3 and 1 positions" : "") + ": " + f.message};
      }
      ++checked;
      const size_t at = n.find("; custom ops: ");  // collected over the configurations
      if (at != std::string::npos) custom.insert(n.substr(at + 14));
    }
  note = std::to_string(checked) + " configurations";
  for (const std::string& cu : custom) note += "; custom ops: " + cu;
}

}  // namespace

void check_attention(Checker& ck, const Subject& s) {
  AttentionCase c(s);
  run_properties<AttentionCase>(
      ck, c,
      {{"builds; output (B*T, C), finite; with no positional encoding and with each registered "
        "one",
        &builds_with_each_positional}});
  if (c.usable.empty()) return;
  run_properties<AttentionCase>(
      ck, c,
      {{"deterministic: same input, same output; same seed, same parameters", &is_deterministic},
       {"attention weights (weights_out): (B, NH, T, T) probabilities, rows sum to 1",
        &weights_are_probabilities},
       {"key padding mask: all-real changes nothing; padded keys get weight 0 and do not affect "
        "real tokens",
        &padded_keys_are_ignored},
       {"causal variants: KV-cache decoding one token at a time reproduces the full forward",
        &cached_decoding_matches_full_forward},
       {"causal variants with prompts (Batch::prefix): nothing from a prompt's last "
        "position on sees a later token; the prompt prefilled, then decoded a token at a time, "
        "reproduces the full forward",
        &prompts_decode_as_full_forward},
       {"gradients by finite differences (parameters and input; without and with a padding mask, "
        "with prompts)",
        &gradients_match_finite_differences}});
  check_options<Attention>(ck, s, c.d);
}

}  // namespace ablate::conformance
