// Family "attention": its descriptor (see ablate/family.hpp) and conformance checks (the
// skeleton of `ablate plugin new attention NAME` is tools/plugin_skeletons/attention.cpp).
#include <set>
#include <string>

#include "ablate/attention.hpp"
#include "ablate/positional.hpp"
#include "kit.hpp"

namespace ablate::conformance {
namespace {

// ---- attention -----------------------------------------------------------------------------

void check_attention(Checker& ck, const Subject& s) {
  constexpr int64_t C = 8, NH = 2, B = 2, T = 5;
  const ModelDims d = small_dims(C, NH, 16);
  const std::string path = path_of(s.family);
  // Token ids of sequence b at position p, B x T of them, for the parts that read them (value
  // embeddings): a forward of sequences from b at positions from p reads ids + b * T + p.
  std::vector<int32_t> ids(static_cast<size_t>(B * T));
  for (int64_t i = 0; i < B * T; ++i)
    ids[static_cast<size_t>(i)] =
        static_cast<int32_t>((7 * (i / T) + 3 * (i % T) + 1) % d.vocab_size);
  auto run = [&](Attention& a, PositionalEncoding* pos, const std::vector<float>& x, int64_t b,
                 int64_t t, float* weights = nullptr, const uint8_t* key_mask = nullptr) {
    Graph g;
    AttentionInput in;
    in.pos = {b, t, 0, ids.data()};
    in.positional = pos;
    in.weights_out = weights;
    in.key_mask = key_mask;
    Var y = a.forward(g, g.constant(x.data(), b * t, C), in);
    expect_shape(g, y, b * t, C, "the output");
    return values(g, y);
  };
  // No positional encoding, then every registered one: each acts inside attention.
  struct Pos {
    std::string name;
    Built<PositionalEncoding> p;
    std::string label() const {
      return name.empty() ? "no positional encoding" : "positional '" + name + "'";
    }
  };
  std::vector<Pos> all;
  all.push_back({"", {}});
  std::string unbuildable;
  for (const PluginEntry* e : PluginRegistry::instance().variants(PositionalEncoding::kFamily)) {
    YAML::Node n;
    n["type"] = e->info->name;
    try {
      all.push_back({e->info->name, build<PositionalEncoding>(n, "model.positional", d)});
    } catch (const std::exception&) {
      unbuildable += std::string(unbuildable.empty() ? "" : ", ") + e->info->name;
    }
  }
  const auto x = randn(static_cast<size_t>(B * T * C), 3);
  std::vector<const Pos*> usable;

  ck.run(
      "builds; output (B*T, C), finite; with no positional encoding and with each registered one",
      [&](std::string& note) {
        auto a = build<Attention>(s.options, path, d);
        expect(a->n_heads() > 0 && a->kv_width() > 0,
               "n_heads() = " + std::to_string(a->n_heads()) +
                   ", kv_width() = " + std::to_string(a->kv_width()) + "; both must be positive");
        std::string refused;
        for (const Pos& p : all) {
          try {
            expect_finite(run(*a.obj, p.p.obj.get(), x, B, T), "the output with " + p.label());
            usable.push_back(&p);
          } catch (const ConfigError&) {
            throw;
          } catch (const Error& e) {
            if (p.name.empty()) throw;
            refused += "\n" + p.name + ": " + e.what();
          }
        }
        note = std::to_string(a.store->count()) +
               " parameters; positional encodings: " + std::to_string(usable.size() - 1) + " used";
        if (!refused.empty()) note += "; refused with an ablate::Error (allowed):" + refused;
        if (!unbuildable.empty()) note += "; not buildable at these sizes: " + unbuildable;
      });
  if (usable.empty()) return;

  ck.run("deterministic: same input, same output; same seed, same parameters", [&](std::string&) {
    auto a = build<Attention>(s.options, path, d), b = build<Attention>(s.options, path, d);
    for (const Pos* p : usable) {
      const auto ya = run(*a.obj, p->p.obj.get(), x, B, T);
      expect(ya == run(*a.obj, p->p.obj.get(), x, B, T), "two calls differ, with " + p->label());
      expect(ya == run(*b.obj, p->p.obj.get(), x, B, T),
             "two instances built with the same seed differ, with " + p->label());
    }
  });
  ck.run("attention weights (weights_out): (B, NH, T, T) probabilities, rows sum to 1",
         [&](std::string&) {
           auto a = build<Attention>(s.options, path, d);
           const int64_t NHa = a->n_heads();
           for (const Pos* p : usable) {
             std::vector<float> w(static_cast<size_t>(B * NHa * T * T), -1.0f);
             run(*a.obj, p->p.obj.get(), x, B, T, w.data());
             for (int64_t r = 0; r < B * NHa * T; ++r) {
               double sum = 0;
               for (int64_t j = 0; j < T; ++j) {
                 const float v = w[static_cast<size_t>(r * T + j)];
                 expect(
                     v >= 0.0f && v <= 1.0f,
                     "weight " + num(v) + " in row " + std::to_string(r) + " with " + p->label() +
                         (v == -1.0f ? " (never written: fill AttentionInput::weights_out)" : ""));
                 sum += v;
               }
               expect(std::fabs(sum - 1.0) < 1e-5,
                      "row " + std::to_string(r) + " sums to " + num(sum) + " with " + p->label());
             }
           }
         });
  ck.run(
      "key padding mask: all-real changes nothing; padded keys get weight 0 and do not affect real "
      "tokens",
      [&](std::string&) {
        auto a = build<Attention>(s.options, path, d);
        const int64_t NHa = a->n_heads();
        // Sequence 0 padded at its end, sequence 1 at its start.
        std::vector<uint8_t> all_real(static_cast<size_t>(B * T), 1), mask = all_real;
        mask[3] = mask[4] = 0;
        mask[T + 0] = mask[T + 1] = 0;
        std::vector<float> x2 = x;
        const auto noise = randn(x.size(), 77, 3.0f);
        for (int64_t r = 0; r < B * T; ++r)
          if (!mask[static_cast<size_t>(r)])
            for (int64_t c = 0; c < C; ++c)
              x2[static_cast<size_t>(r * C + c)] = noise[static_cast<size_t>(r * C + c)];
        for (const Pos* p : usable) {
          PositionalEncoding* pp = p->p.obj.get();
          expect(run(*a.obj, pp, x, B, T, nullptr, all_real.data()) == run(*a.obj, pp, x, B, T),
                 "a mask without padding changes the output, with " + p->label());
          std::vector<float> w(static_cast<size_t>(B * NHa * T * T), -1.0f);
          const auto y1 = run(*a.obj, pp, x, B, T, w.data(), mask.data());
          const auto y2 = run(*a.obj, pp, x2, B, T, nullptr, mask.data());
          for (int64_t r = 0; r < B * T; ++r) {
            if (!mask[static_cast<size_t>(r)]) continue;
            for (int64_t c = 0; c < C; ++c) {
              const size_t i = static_cast<size_t>(r * C + c);
              expect(close(y1[i], y2[i], 1e-5),
                     "changing padding tokens changes the output of real token " +
                         std::to_string(r % T) + " of sequence " + std::to_string(r / T) + " (" +
                         num(y1[i]) + " vs " + num(y2[i]) + "), with " + p->label());
            }
          }
          for (int64_t b = 0; b < B; ++b)
            for (int64_t h = 0; h < NHa; ++h)
              for (int64_t i = 0; i < T; ++i) {
                if (!mask[static_cast<size_t>(b * T + i)]) continue;
                for (int64_t j = 0; j < T; ++j)
                  if (!mask[static_cast<size_t>(b * T + j)])
                    expect(w[static_cast<size_t>(((b * NHa + h) * T + i) * T + j)] == 0.0f,
                           "query " + std::to_string(i) + " of sequence " + std::to_string(b) +
                               " gives weight to padded key " + std::to_string(j) + ", with " +
                               p->label());
              }
        }
      });
  ck.run("causal variants: KV-cache decoding one token at a time reproduces the full forward",
         [&](std::string& note) {
           auto a = build<Attention>(s.options, path, d);
           // Causal if the outputs before the last position ignore the last token.
           std::vector<float> xl = x;
           for (int64_t b = 0; b < B; ++b)
             for (int64_t c = 0; c < C; ++c)
               xl[static_cast<size_t>((b * T + T - 1) * C + c)] += 1.0f;
           const auto y0 = run(*a.obj, nullptr, x, B, T), y1 = run(*a.obj, nullptr, xl, B, T);
           bool causal = true;
           for (int64_t b = 0; b < B; ++b)
             for (int64_t i = 0; i < (T - 1) * C; ++i)
               causal = causal && close(y0[static_cast<size_t>(b * T * C + i)],
                                        y1[static_cast<size_t>(b * T * C + i)], 1e-6);
           if (!causal) {
             note =
                 "not causal: outputs depend on later tokens (an encoder), so incremental decoding "
                 "is not checked";
             return;
           }
           for (const Pos* p : usable) {
             const auto ya = run(*a.obj, p->p.obj.get(), x, B, T);
             KVCache cache;
             cache.init(1, T, a->kv_width());
             Graph g;
             NoGrad ng(g);
             for (int64_t t = 0; t < T; ++t) {
               g.reset();
               AttentionInput in;
               in.pos = {1, 1, t, ids.data() + t};
               in.positional = p->p.obj.get();
               in.cache = &cache;
               Var y = a->forward(g, g.constant(x.data() + t * C, 1, C), in);
               expect_shape(g, y, 1, C, "the output of one cached step");
               const auto yt = values(g, y);
               for (int64_t c = 0; c < C; ++c)
                 expect(close(yt[static_cast<size_t>(c)], ya[static_cast<size_t>(t * C + c)], 1e-4),
                        "step " + std::to_string(t) + " differs from the full forward (" +
                            num(yt[static_cast<size_t>(c)]) + " vs " +
                            num(ya[static_cast<size_t>(t * C + c)]) + "), with " + p->label());
             }
             expect(cache.length == T, "the cache holds " + std::to_string(cache.length) +
                                           " positions after " + std::to_string(T) + " steps");
           }
         });
  ck.run(
      "causal variants with prompts (AttentionInput::prefix): nothing from a prompt's last "
      "position on sees a later "
      "token; the prompt prefilled, then decoded a token at a time, reproduces the full forward",
      [&](std::string& note) {
        auto a = build<Attention>(s.options, path, d);
        if (!a->causal()) {
          note = "not causal: not checked";
          return;
        }
        const int32_t prompts[B] = {3, 1};
        auto with_prompts = [&](const std::vector<float>& xs) {
          Graph g;
          AttentionInput in;
          in.pos = {B, T, 0, ids.data()};
          in.prefix = prompts;
          return values(g, a->forward(g, g.constant(xs.data(), B * T, C), in));
        };
        const auto y0 = with_prompts(x);
        for (int64_t b = 0; b < B; ++b) {
          const int64_t P = prompts[b];  // change token P: positions before it must not move
          std::vector<float> xl = x;
          for (int64_t c = 0; c < C; ++c) xl[static_cast<size_t>((b * T + P) * C + c)] += 1.0f;
          const auto y1 = with_prompts(xl);
          for (int64_t i = 0; i < P * C; ++i)
            expect(close(y0[static_cast<size_t>(b * T * C + i)],
                         y1[static_cast<size_t>(b * T * C + i)], 1e-6),
                   "position " + std::to_string(i / C) + " of sequence " + std::to_string(b) +
                       " (prompt of " + std::to_string(P) + " positions) changes with token " +
                       std::to_string(P) +
                       ": it sees a token after it, which a scored position "
                       "must not (return false from causal())");
        }
        for (int64_t b = 0; b < B; ++b) {
          const int64_t P = prompts[b];
          KVCache cache;
          cache.init(1, T, a->kv_width());
          Graph g;
          NoGrad ng(g);
          for (int64_t t = 0; t < T; t = t == 0 ? P : t + 1) {
            g.reset();
            AttentionInput in;
            const int64_t n = t == 0 ? P : 1;
            in.pos = {1, n, t, ids.data() + b * T + t};
            in.cache = &cache;
            const int32_t prompt = static_cast<int32_t>(P);
            in.prefix = &prompt;
            const auto yt =
                values(g, a->forward(g, g.constant(x.data() + (b * T + t) * C, n, C), in));
            for (int64_t i = 0; i < n * C; ++i)
              expect(close(yt[static_cast<size_t>(i)], y0[static_cast<size_t>((b * T + t) * C + i)],
                           1e-4),
                     "sequence " + std::to_string(b) + ", position " + std::to_string(t + i / C) +
                         ": decoding after a prefilled " + "prompt of " + std::to_string(P) +
                         " positions differs from the full forward (" +
                         num(yt[static_cast<size_t>(i)]) + " vs " +
                         num(y0[static_cast<size_t>((b * T + t) * C + i)]) + ")");
          }
        }
      });
  ck.run(
      "gradients by finite differences (parameters and input; without and with a padding mask, "
      "with prompts)",
      [&](std::string& note) {
        auto a = build<Attention>(s.options, path, d);
        randomize(*a.store, 5, 0.3f);
        ParamStore inputs(11);
        Parameter& xp = add_input(inputs, "x", B * T, C);
        std::vector<Parameter*> wrt = a.store->all();
        wrt.push_back(&xp);
        std::vector<uint8_t> mask(static_cast<size_t>(B * T), 1);
        mask[static_cast<size_t>(T)] = 0;
        mask[static_cast<size_t>(T - 1)] = 0;
        const int32_t prompts[B] = {3, 1};  // ForwardArgs::prefix: what a prefix mask reads whole
        int checked = 0;
        std::set<std::string> custom;
        for (const Pos* p : usable)
          for (int config = 0; config < 3; ++config) {
            const uint8_t* km = config == 1 ? mask.data() : nullptr;
            const int32_t* prefix = config == 2 ? prompts : nullptr;
            std::string n;
            try {
              expect_gradients(
                  [&](Graph& g) {
                    AttentionInput in;
                    in.pos = {B, T, 0, ids.data()};
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
        for (const std::string& c : custom) note += "; custom ops: " + c;
      });
  check_options<Attention>(ck, s, d);
}

[[maybe_unused]] const bool registered = register_family([] {
  FamilyDescriptor d;
  d.name = Attention::kFamily;
  d.key = "model.attention";
  d.list = false;
  d.default_variant = "causal";
  d.summary = "the attention sublayer of each block, with its mask and KV cache";
  d.checks = &check_attention;
  return d;
}());

}  // namespace
}  // namespace ablate::conformance
