// Family "positional": its descriptor (see ablate/family.hpp) and conformance checks (the
// skeleton of `ablate plugin new positional NAME` is tools/plugin_skeletons/positional.cpp).
#include "ablate/positional.hpp"
#include "kit.hpp"

namespace ablate::conformance {
namespace {

// ---- positional ----------------------------------------------------------------------------

void check_positional(Checker& ck, const Subject& s) {
  constexpr int64_t C = 8, NH = 2, HS = 4, NKV = 1, B = 2, T = 5;
  const ModelDims d = small_dims(C, NH, 16);
  const std::string path = path_of(s.family);
  auto embed = [&](PositionalEncoding& p, const std::vector<float>& x, int64_t b, int64_t t,
                   int64_t pos0) {
    Graph g;
    Var y = p.embed(g, g.constant(x.data(), b * t, C), PosContext{b, t, pos0});
    expect_shape(g, y, b * t, C, "embed's output");
    return values(g, y);
  };
  auto rotate = [&](PositionalEncoding& p, const std::vector<float>& q, const std::vector<float>& k,
                    int64_t b, int64_t t, int64_t pos0) {
    Graph g;
    Var vq = g.constant(q.data(), b * t, NH * HS), vk = g.constant(k.data(), b * t, NKV * HS);
    p.rotate(g, vq, vk, PosContext{b, t, pos0}, NH, NKV, HS);
    expect_shape(g, vq, b * t, NH * HS, "rotated q");
    expect_shape(g, vk, b * t, NKV * HS, "rotated k");
    std::vector<float> out = values(g, vq), kv = values(g, vk);
    out.insert(out.end(), kv.begin(), kv.end());
    return out;
  };
  auto rows = [](const std::vector<float>& v, int64_t from, int64_t n, int64_t width) {
    return std::vector<float>(v.begin() + from * width, v.begin() + (from + n) * width);
  };
  const auto x = randn(static_cast<size_t>(B * T * C), 3);
  const auto q = randn(static_cast<size_t>(B * T * NH * HS), 4),
             k = randn(static_cast<size_t>(B * T * NKV * HS), 5);

  ck.run("embed: output (B*T, C), finite, deterministic, same seed same result",
         [&](std::string& note) {
           auto a = build<PositionalEncoding>(s.options, path, d),
                b = build<PositionalEncoding>(s.options, path, d);
           const auto ya = embed(*a.obj, x, B, T, 0);
           expect_finite(ya, "embed's output");
           expect(ya == embed(*a.obj, x, B, T, 0), "two calls on the same input differ");
           expect(ya == embed(*b.obj, x, B, T, 0), "two instances built with the same seed differ");
           note = std::to_string(a.store->count()) + " parameters";
         });
  ck.run(
      "embed: position-absolute (a window starting at pos0 = the same rows of a longer sequence)",
      [&](std::string&) {
        auto a = build<PositionalEncoding>(s.options, path, d);
        const auto x1 = rows(x, 0, T, C);
        const auto full = embed(*a.obj, x1, 1, T, 0);
        const auto tail = embed(*a.obj, rows(x1, 2, T - 2, C), 1, T - 2, 2);
        const auto ref = rows(full, 2, T - 2, C);
        for (size_t i = 0; i < tail.size(); ++i)
          expect(close(tail[i], ref[i], 1e-5), "element " + std::to_string(i) + " at pos0 = 2: " +
                                                   num(tail[i]) + " vs " + num(ref[i]));
      });
  // Token ids (small_vocab: 0-2 and 6-8 digits, 3 a point, 4 '+', 5 '=', 9 'x', 10 newline)
  // for plugins that read them: row 0 "12.7+80=9", row 1 "9.81+2=17", prompts 8 and 7 long.
  const std::vector<int32_t> ids = {1, 2, 3, 6, 4, 7, 0, 5, 8, 8, 3, 7, 1, 4, 2, 5, 1, 6};
  constexpr int64_t IT = 9;
  const std::vector<int32_t> prompts = {8, 7};
  ck.run(
      "embed with token ids: no position reads an id after it, except inside the prompt "
      "(PosContext::prefix)",
      [&](std::string& note) {
        auto a = build<PositionalEncoding>(s.options, path, d);
        randomize(*a.store, 8);
        const auto xi = randn(static_cast<size_t>(B * IT * C), 9);
        auto run = [&](const std::vector<int32_t>& id, const int32_t* prefix) {
          Graph g;
          PosContext pc{B, IT, 0, id.data(), prefix};
          return values(g, a->embed(g, g.constant(xi.data(), B * IT, C), pc));
        };
        for (const int32_t* prefix : {prompts.data(), static_cast<const int32_t*>(nullptr)}) {
          const auto base = run(ids, prefix);
          expect_finite(base, "embed's output with token ids");
          for (int64_t b = 0; b < B; ++b)
            for (int64_t j = prefix ? prefix[b] : 0; j < IT; ++j)
              for (int32_t other = 0; other < static_cast<int32_t>(d.vocab_size);
                   ++other) {  // every other token there
                std::vector<int32_t> changed = ids;
                int32_t& id = changed[static_cast<size_t>(b * IT + j)];
                if (id == other) continue;
                id = other;
                const auto y = run(changed, prefix);
                for (int64_t i = 0; i < B * IT * C; ++i)
                  if ((i / C) / IT != b || (i / C) % IT < j)
                    expect(y[static_cast<size_t>(i)] == base[static_cast<size_t>(i)],
                           "row " + std::to_string(b) + ", position " +
                               std::to_string((i / C) % IT) + " changed when the id at position " +
                               std::to_string(j) +
                               (prefix ? " (past the prompt of " + std::to_string(prefix[b]) + ")"
                                       : " (no prompt)") +
                               " did: a position may read later ids only inside the prompt");
              }
        }
        note = run(ids, prompts.data()) ==
                       embed(*a.obj, std::vector<float>(xi.begin(), xi.end()), B, IT, 0)
                   ? "ignores the ids"
                   : "reads the ids";
      });
  ck.run(
      "rotate: q (B*T, NH*HS) and k (B*T, NKV*HS) with NKV < NH; deterministic; position-absolute",
      [&](std::string&) {
        auto a = build<PositionalEncoding>(s.options, path, d),
             b = build<PositionalEncoding>(s.options, path, d);
        const auto r = rotate(*a.obj, q, k, B, T, 0);
        expect_finite(r, "rotated q and k");
        expect(r == rotate(*b.obj, q, k, B, T, 0), "two instances built with the same seed differ");
        const auto r1 = rotate(*a.obj, rows(q, 0, T, NH * HS), rows(k, 0, T, NKV * HS), 1, T, 0);
        const auto r2 = rotate(*a.obj, rows(q, 3, 2, NH * HS), rows(k, 3, 2, NKV * HS), 1, 2, 3);
        for (int64_t i = 0; i < 2 * NH * HS; ++i)
          expect(
              close(r2[static_cast<size_t>(i)], r1[static_cast<size_t>(3 * NH * HS + i)], 1e-5),
              "q rotated at pos0 = 3 differs from the same rows of a longer sequence at element " +
                  std::to_string(i));
      });
  ck.run("rotates(): false only if rotate() leaves q and k as they are (attention then skips it)",
         [&](std::string& note) {
           auto a = build<PositionalEncoding>(s.options, path, d);
           Graph g;
           const Var q0 = g.constant(q.data(), B * T, NH * HS),
                     k0 = g.constant(k.data(), B * T, NKV * HS);
           Var vq = q0, vk = k0;
           a->rotate(g, vq, vk, PosContext{B, T, 0}, NH, NKV, HS);
           const bool unchanged =
               vq.id == q0.id && vk.id == k0.id && values(g, q0) == q && values(g, k0) == k;
           note = a->rotates() ? "rotates" : "does not rotate";
           if (!a->rotates())
             expect(unchanged,
                    "rotates() is false but rotate() changed q or k: return true from rotates()");
         });
  ck.run("attention slopes: finite and non-negative, one per head", [&](std::string& note) {
    auto a = build<PositionalEncoding>(s.options, path, d);
    const float* sl = a->attention_slopes();
    if (!sl) {
      note = "none";
      return;
    }
    for (int64_t h = 0; h < NH; ++h)
      expect(std::isfinite(sl[h]) && sl[h] >= 0.0f,
             "slope of head " + std::to_string(h) + " is " + num(sl[h]));
  });
  ck.run("max_positions: covers the context; positions beyond it are an ablate::Error",
         [&](std::string& note) {
           auto a = build<PositionalEncoding>(s.options, path, d);
           const int64_t m = a->max_positions();
           if (m < 0) {
             note = "unlimited";
             return;
           }
           expect(m >= d.context, "max_positions " + std::to_string(m) +
                                      " is shorter than the context " + std::to_string(d.context));
           embed(*a.obj, std::vector<float>(static_cast<size_t>(m * C), 0.5f), 1, m, 0);
           bool threw = false;
           try {
             embed(*a.obj, std::vector<float>(2 * C, 0.5f), 1, 2, m - 1);
           } catch (const Error&) {
             threw = true;
           }
           expect(threw, "embedding positions " + std::to_string(m - 1) + ".." + std::to_string(m) +
                             " did not throw");
         });
  ck.run("gradients by finite differences (embed and rotate; parameters and inputs)",
         [&](std::string& note) {
           auto a = build<PositionalEncoding>(s.options, path, d);
           randomize(*a.store, 6);
           ParamStore inputs(12);
           Parameter& xp = add_input(inputs, "x", B * T, C);
           Parameter& qp = add_input(inputs, "q", B * T, NH * HS);
           Parameter& kp = add_input(inputs, "k", B * T, NKV * HS);
           std::vector<Parameter*> wrt = a.store->all();
           for (Parameter* p : {&xp, &qp, &kp}) wrt.push_back(p);
           // With the ids and prompts above (the first T of each row; prompts 1 + 3 and 1 + 4
           // positions long at pos0 = 1), so that the parts that read ids are checked too.
           std::vector<int32_t> ids_bt;
           for (int64_t b = 0; b < B; ++b)
             ids_bt.insert(ids_bt.end(), ids.begin() + b * IT, ids.begin() + b * IT + T);
           const std::vector<int32_t> prefix_bt = {4, 5};
           const PosContext pc{B, T, 1, ids_bt.data(), prefix_bt.data()};
           expect_gradients(
               [&](Graph& g) {
                 Var vq = g.param(qp), vk = g.param(kp);
                 a->rotate(g, vq, vk, pc, NH, NKV, HS);
                 return Outputs{a->embed(g, g.param(xp), pc), vq, vk};
               },
               wrt, note);
         });
  check_options<PositionalEncoding>(ck, s, d);
}

[[maybe_unused]] const bool registered = register_family([] {
  FamilyDescriptor d;
  d.name = PositionalEncoding::kFamily;
  d.key = "model.positional";
  d.list = false;
  d.default_variant = "learned";
  d.summary = "positions: added to the embeddings, rotating q and k, or attention biases";
  d.checks = &check_positional;
  return d;
}());

}  // namespace
}  // namespace ablate::conformance
