// The conformance suite of family "qk_transform", with one key-value head per query head and
// with one for all. The test suite also runs the attention checks (KV-cache decoding
// included) with every variant (tests/model/test_attention.cpp).
#include "ablate/qk_transform.hpp"
#include "kit.hpp"
#include "suites.hpp"

namespace ablate::conformance {
namespace {

constexpr int64_t C = 8, NH = 2, HS = C / NH, B = 2, T = 3, rows = B * T;

struct Qkv {
  std::vector<float> q, k, v;
};

// What the checks share: the variant, the number of key-value heads, the input q (rows, NH*HS),
// k and v (rows, NKV*HS), and the rows' token ids, for transforms that read them (value
// embeddings).
struct QkCase {
  const Subject& s;
  const int64_t nkv;
  const ModelDims d = small_dims(C, NH, 16);
  const std::string path = path_of(s.family);
  std::vector<int32_t> ids;
  Batch batch;
  Qkv x;

  QkCase(const Subject& subject, int64_t n_kv_heads) : s(subject), nkv(n_kv_heads) {
    ids.resize(static_cast<size_t>(rows));
    for (int64_t i = 0; i < rows; ++i)
      ids[static_cast<size_t>(i)] = static_cast<int32_t>((3 * i + 1) % d.vocab_size);
    batch = Batch{ids.data(), B, T};
    x = Qkv{randn(static_cast<size_t>(rows * NH * HS), 3, 2.0f),
            randn(static_cast<size_t>(rows * nkv * HS), 4, 2.0f),
            randn(static_cast<size_t>(rows * nkv * HS), 5, 2.0f)};
  }
  QkCase(const QkCase&) = delete;  // batch points into ids

  Built<QkTransform> transform() const { return build<QkTransform>(s.options, path, d); }

  // q, k and v through the transform.
  Qkv run(QkTransform& t, const Qkv& in) const {
    Graph g;
    Var q = g.constant(in.q.data(), rows, NH * HS), k = g.constant(in.k.data(), rows, nkv * HS),
        v = g.constant(in.v.data(), rows, nkv * HS);
    t.apply(g, q, k, v, QkvHeads{NH, nkv, HS, batch});
    expect_shape(g, q, rows, NH * HS, "q");
    expect_shape(g, k, rows, nkv * HS, "k");
    expect_shape(g, v, rows, nkv * HS, "v");
    return Qkv{values(g, q), values(g, k), values(g, v)};
  }
};

void keeps_shapes(QkCase& c, std::string& note) {
  auto t = c.transform();
  const Qkv y = c.run(*t.obj, c.x);
  expect_finite(y.q, "q");
  expect_finite(y.k, "k");
  expect_finite(y.v, "v");
  if (!t->transforms())
    expect(y.q == c.x.q && y.k == c.x.k && y.v == c.x.v,
           "transforms() is false, yet apply() changes q, k or v; attention skips "
           "apply() then: return true");
  note = std::to_string(t.store->count()) + " parameters; transforms() " +
         (t->transforms() ? "true" : "false");
}

// q, k or v (0, 1, 2).
std::vector<float>& part(Qkv& m, int which) { return which == 0 ? m.q : which == 1 ? m.k : m.v; }
const std::vector<float>& part(const Qkv& m, int which) {
  return which == 0 ? m.q : which == 1 ? m.k : m.v;
}

// Changing the last head of row 3 of q, k or v changes nothing else in q, k and v.
void expect_heads_apart(const QkCase& c, QkTransform& t) {
  const Qkv y0 = c.run(t, c.x);
  const char* names[3] = {"q", "k", "v"};
  for (int which = 0; which < 3; ++which) {
    Qkv x1 = c.x;
    std::vector<float>& m = part(x1, which);
    const int64_t W = static_cast<int64_t>(m.size()) / rows;
    const int64_t r = 3, h = W / HS - 1;  // the last head of row 3
    for (int64_t j = 0; j < HS; ++j) m[static_cast<size_t>(r * W + h * HS + j)] += 1.5f;
    const Qkv y1 = c.run(t, x1);
    for (int other = 0; other < 3; ++other) {
      const std::vector<float>& a = part(y0, other);
      const std::vector<float>& b = part(y1, other);
      const int64_t Wo = static_cast<int64_t>(a.size()) / rows;
      for (int64_t i = 0; i < static_cast<int64_t>(a.size()); ++i) {
        const bool inside = other == which && i / Wo == r && (i % Wo) / HS == h;
        expect(inside || a[static_cast<size_t>(i)] == b[static_cast<size_t>(i)],
               std::string("changing head ") + std::to_string(h) + " of row " + std::to_string(r) +
                   " of " + names[which] + " changes " + names[other] + " at row " +
                   std::to_string(i / Wo) + ", column " + std::to_string(i % Wo) +
                   "; transform each head of each row on its own");
      }
    }
  }
}

void transforms_each_head_apart(QkCase& c, std::string&) {
  auto t = c.transform();
  randomize(*t.store, 5, 0.5f);
  expect_heads_apart(c, *t.obj);
  Qkv z = c.x;
  for (int64_t j = 0; j < HS; ++j) z.q[static_cast<size_t>(j)] = 0.0f;
  for (int64_t j = 0; j < HS; ++j) z.k[static_cast<size_t>(j)] = 0.0f;
  for (int64_t j = 0; j < HS; ++j) z.v[static_cast<size_t>(j)] = 0.0f;
  const Qkv yz = c.run(*t.obj, z);
  expect_finite(yz.q, "q with a head of zeros");
  expect_finite(yz.k, "k with a head of zeros");
  expect_finite(yz.v, "v with a head of zeros");
}

void is_deterministic(QkCase& c, std::string&) {
  auto a = c.transform();
  auto b = c.transform();
  const Qkv ya = c.run(*a.obj, c.x), ya2 = c.run(*a.obj, c.x), yb = c.run(*b.obj, c.x);
  expect(ya.q == ya2.q && ya.k == ya2.k && ya.v == ya2.v, "two calls on the same input differ");
  expect(ya.q == yb.q && ya.k == yb.k && ya.v == yb.v,
         "two instances built with the same seed differ");
}

void gradients_match_finite_differences(QkCase& c, std::string& note) {
  auto t = c.transform();
  randomize(*t.store, 5, 0.5f);
  ParamStore inputs(11);
  Parameter& qp = add_input(inputs, "q", rows, NH * HS, 2.0f);
  Parameter& kp = add_input(inputs, "k", rows, c.nkv * HS, 2.0f);
  Parameter& vp = add_input(inputs, "v", rows, c.nkv * HS, 2.0f);
  std::vector<Parameter*> wrt = t.store->all();
  wrt.insert(wrt.end(), {&qp, &kp, &vp});
  expect_gradients(
      [&](Graph& g) {
        Var q = g.param(qp), k = g.param(kp), v = g.param(vp);
        t->apply(g, q, k, v, QkvHeads{NH, c.nkv, HS, c.batch});
        return Outputs{q, k, v};
      },
      wrt, note);
}

}  // namespace

void check_qk_transform(Checker& ck, const Subject& s) {
  for (int64_t nkv : {NH, int64_t{1}}) {
    QkCase c(s, nkv);
    run_properties<QkCase>(
        ck, c,
        {{"builds; q, k and v keep their shapes, finite; transforms() false changes nothing",
          &keeps_shapes},
         {"each head of each row on its own (KV-cache decoding); a head of zeros stays finite",
          &transforms_each_head_apart},
         {"deterministic: same input, same output; same seed, same parameters", &is_deterministic},
         {"gradients by finite differences (parameters, q, k and v)",
          &gradients_match_finite_differences}},
        nkv == NH ? " [n_kv_heads = n_heads]" : " [n_kv_heads 1]");
  }
  check_options<QkTransform>(ck, s, small_dims(C, NH, 16));
}

}  // namespace ablate::conformance
