// Family "qk_transform": its descriptor (see ablate/family.hpp) and conformance checks (the
// skeleton of `ablate plugin new qk_transform NAME` is tools/plugin_skeletons/qk_transform.cpp).
// The test suite also runs the attention checks (KV-cache decoding included) with every variant
// (tests/model/test_attention.cpp).
#include "ablate/qk_transform.hpp"
#include "kit.hpp"

namespace ablate::conformance {
namespace {

void check_qk_transform(Checker& ck, const Subject& s) {
  constexpr int64_t C = 8, NH = 2, HS = C / NH, B = 2, T = 3, rows = B * T;
  const ModelDims d = small_dims(C, NH, 16);
  const std::string path = path_of(s.family);
  struct Qkv {
    std::vector<float> q, k, v;
  };
  // The rows' token ids, for transforms that read them (value embeddings).
  std::vector<int32_t> ids(static_cast<size_t>(rows));
  for (int64_t i = 0; i < rows; ++i)
    ids[static_cast<size_t>(i)] = static_cast<int32_t>((3 * i + 1) % d.vocab_size);
  const PosContext pos{B, T, 0, ids.data()};
  // q (rows, NH*HS), k and v (rows, NKV*HS) through the transform.
  auto run = [&](QkTransform& t, const Qkv& in, int64_t nkv) {
    Graph g;
    Var q = g.constant(in.q.data(), rows, NH * HS), k = g.constant(in.k.data(), rows, nkv * HS),
        v = g.constant(in.v.data(), rows, nkv * HS);
    t.apply(g, q, k, v, QkvHeads{NH, nkv, HS, pos});
    expect_shape(g, q, rows, NH * HS, "q");
    expect_shape(g, k, rows, nkv * HS, "k");
    expect_shape(g, v, rows, nkv * HS, "v");
    return Qkv{values(g, q), values(g, k), values(g, v)};
  };
  auto input = [&](int64_t nkv) {
    return Qkv{randn(static_cast<size_t>(rows * NH * HS), 3, 2.0f),
               randn(static_cast<size_t>(rows * nkv * HS), 4, 2.0f),
               randn(static_cast<size_t>(rows * nkv * HS), 5, 2.0f)};
  };
  const std::vector<int64_t> kv_heads = {NH, 1};
  auto tag = [&](int64_t nkv) {
    return nkv == NH ? std::string(" [n_kv_heads = n_heads]") : std::string(" [n_kv_heads 1]");
  };

  for (int64_t nkv : kv_heads) {
    const Qkv x = input(nkv);
    ck.run("builds; q, k and v keep their shapes, finite; transforms() false changes nothing" +
               tag(nkv),
           [&](std::string& note) {
             auto t = build<QkTransform>(s.options, path, d);
             const Qkv y = run(*t.obj, x, nkv);
             expect_finite(y.q, "q");
             expect_finite(y.k, "k");
             expect_finite(y.v, "v");
             if (!t->transforms())
               expect(y.q == x.q && y.k == x.k && y.v == x.v,
                      "transforms() is false, yet apply() changes q, k or v; attention skips "
                      "apply() then: return true");
             note = std::to_string(t.store->count()) + " parameters; transforms() " +
                    (t->transforms() ? "true" : "false");
           });
    ck.run(
        "each head of each row on its own (KV-cache decoding, decoding teams); a head of "
        "zeros stays finite" +
            tag(nkv),
        [&](std::string&) {
          auto t = build<QkTransform>(s.options, path, d);
          randomize(*t.store, 5, 0.5f);
          const Qkv y0 = run(*t.obj, x, nkv);
          const char* names[3] = {"q", "k", "v"};
          for (int which = 0; which < 3; ++which) {
            Qkv x1 = x;
            std::vector<float>& m = which == 0 ? x1.q : which == 1 ? x1.k : x1.v;
            const int64_t W = static_cast<int64_t>(m.size()) / rows;
            const int64_t r = 3, h = W / HS - 1;  // the last head of row 3
            for (int64_t j = 0; j < HS; ++j) m[static_cast<size_t>(r * W + h * HS + j)] += 1.5f;
            const Qkv y1 = run(*t.obj, x1, nkv);
            for (int other = 0; other < 3; ++other) {
              const std::vector<float>& a = other == 0 ? y0.q : other == 1 ? y0.k : y0.v;
              const std::vector<float>& b = other == 0 ? y1.q : other == 1 ? y1.k : y1.v;
              const int64_t Wo = static_cast<int64_t>(a.size()) / rows;
              for (int64_t i = 0; i < static_cast<int64_t>(a.size()); ++i) {
                const bool inside = other == which && i / Wo == r && (i % Wo) / HS == h;
                expect(inside || a[static_cast<size_t>(i)] == b[static_cast<size_t>(i)],
                       std::string("changing head ") + std::to_string(h) + " of row " +
                           std::to_string(r) + " of " + names[which] + " changes " + names[other] +
                           " at row " + std::to_string(i / Wo) + ", column " +
                           std::to_string(i % Wo) + "; transform each head of each row on its own");
              }
            }
          }
          Qkv z = x;
          for (int64_t j = 0; j < HS; ++j) z.q[static_cast<size_t>(j)] = 0.0f;
          for (int64_t j = 0; j < HS; ++j) z.k[static_cast<size_t>(j)] = 0.0f;
          for (int64_t j = 0; j < HS; ++j) z.v[static_cast<size_t>(j)] = 0.0f;
          const Qkv yz = run(*t.obj, z, nkv);
          expect_finite(yz.q, "q with a head of zeros");
          expect_finite(yz.k, "k with a head of zeros");
          expect_finite(yz.v, "v with a head of zeros");
        });
    ck.run("deterministic: same input, same output; same seed, same parameters" + tag(nkv),
           [&](std::string&) {
             auto a = build<QkTransform>(s.options, path, d);
             auto b = build<QkTransform>(s.options, path, d);
             const Qkv ya = run(*a.obj, x, nkv), ya2 = run(*a.obj, x, nkv),
                       yb = run(*b.obj, x, nkv);
             expect(ya.q == ya2.q && ya.k == ya2.k && ya.v == ya2.v,
                    "two calls on the same input differ");
             expect(ya.q == yb.q && ya.k == yb.k && ya.v == yb.v,
                    "two instances built with the same seed differ");
           });
    ck.run("gradients by finite differences (parameters, q, k and v)" + tag(nkv),
           [&](std::string& note) {
             auto t = build<QkTransform>(s.options, path, d);
             randomize(*t.store, 5, 0.5f);
             ParamStore inputs(11);
             Parameter& qp = add_input(inputs, "q", rows, NH * HS, 2.0f);
             Parameter& kp = add_input(inputs, "k", rows, nkv * HS, 2.0f);
             Parameter& vp = add_input(inputs, "v", rows, nkv * HS, 2.0f);
             std::vector<Parameter*> wrt = t.store->all();
             wrt.insert(wrt.end(), {&qp, &kp, &vp});
             expect_gradients(
                 [&](Graph& g) {
                   Var q = g.param(qp), k = g.param(kp), v = g.param(vp);
                   t->apply(g, q, k, v, QkvHeads{NH, nkv, HS, pos});
                   return Outputs{q, k, v};
                 },
                 wrt, note);
           });
  }
  check_options<QkTransform>(ck, s, d);
}

[[maybe_unused]] const bool registered = register_family([] {
  FamilyDescriptor d;
  d.name = QkTransform::kFamily;
  d.key = "model.attention.qk_transform";
  d.list = false;
  d.default_variant = "none";
  d.summary = "q, k and v head by head, between attention's projection and the attention (QK-norm)";
  d.checks = &check_qk_transform;
  return d;
}());

}  // namespace
}  // namespace ablate::conformance
