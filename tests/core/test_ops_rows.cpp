// Tests of the row ops of a sparse mixture of experts and of per-head norms
// (framework/core/src/ops/rows.cpp, norm.cpp): gather_rows, scatter_add_rows, scale_rows,
// reshape, top_k, rmsnorm_groups and layernorm_groups pass finite-difference gradient
// checks, match loops written out, compose into a top-2 router, give the same bits on 1
// and 2 threads and reject bad input with errors naming the op and the value; custom ops
// take integer arrays.
#include <doctest/doctest.h>
#include <tbb/task_arena.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "ablate/custom_op.hpp"
#include "ablate/error.hpp"
#include "ablate/graph.hpp"
#include "ablate/ops.hpp"
#include "ablate/tensor.hpp"
#include "core/fd_check.hpp"

namespace {
using namespace ablate;
using namespace ablate::test;

std::vector<float> random_values(size_t n, uint64_t seed) {
  Rng r(seed);
  std::vector<float> v(n);
  for (float& x : v) x = 2.0f * r.uniform() - 1.0f;
  return v;
}

std::vector<float> to_vec(const Tensor& t) {
  return std::vector<float>(t.data, t.data + t.numel());
}

// The message of the Error that f throws ("" if none).
template <class F>
std::string error_of(const F& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// A constant (rows, cols) whose rows hold the columns' ranks times `gap`, in an order that
// differs by row: added to small inputs, the order of each row is fixed under the
// finite-difference steps, so top_k chooses the same columns throughout a check.
Var spread(Graph& g, int64_t rows, int64_t cols, float gap) {
  std::vector<float> v(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      v[static_cast<size_t>(r * cols + c)] = gap * static_cast<float>((c * 7 + r) % cols);
  return g.constant(v.data(), rows, cols);
}

// A top-2 router over E experts (each a (D, D) matrix) on x (N, D): weights are the
// softmax of the two chosen logits (the renormalised probabilities), each expert sees its
// tokens gathered, its outputs are scaled by their weights and added back per token.
Var moe(Graph& g, Var x, Var router, const std::vector<Var>& experts, int64_t k) {
  const int64_t N = g.value(x).rows;
  const int64_t E = static_cast<int64_t>(experts.size());
  Var logits = add(g, matmul(g, x, router), spread(g, N, E, 3.0f));
  const TopK t = top_k(g, logits, k);
  Var w = reshape(g, softmax(g, t.values), N * k, 1);
  Var out;
  for (int64_t e = 0; e < E; ++e) {
    std::vector<int32_t> rows, slots;
    for (int64_t s = 0; s < N * k; ++s)
      if (t.indices[s] == e) {
        rows.push_back(static_cast<int32_t>(s / k));
        slots.push_back(static_cast<int32_t>(s));
      }
    if (rows.empty()) continue;
    const int64_t m = static_cast<int64_t>(rows.size());
    Var y = matmul(g, gather_rows(g, x, rows.data(), m), experts[static_cast<size_t>(e)]);
    Var part =
        scatter_add_rows(g, scale_rows(g, y, gather_rows(g, w, slots.data(), m)), rows.data(), N);
    out = out.valid() ? add(g, out, part) : part;
  }
  return out;
}

// Picks rows of in(0) by the integer array 0, as a custom op.
struct PickRows {
  static constexpr const char* kName = "pick_rows";
  static void forward(OpContext& op) {
    const Tensor& x = op.in(0);
    const IntArray idx = op.ints(0);
    for (int64_t r = 0; r < idx.size; ++r)
      std::memcpy(op.out().row(r), x.row(idx[r]), sizeof(float) * static_cast<size_t>(x.cols));
  }
  static void backward(OpContext& op) {
    if (!op.needs_grad(0)) return;
    const IntArray idx = op.ints(0);
    const Tensor& dy = op.grad_out();
    Tensor& dx = op.grad_in(0);
    for (int64_t r = 0; r < idx.size; ++r)
      for (int64_t c = 0; c < dy.cols; ++c) dx.row(idx[r])[c] += op.attr(0) * dy.row(r)[c];
  }
};

// Reads integer array 1, which its callers here do not give.
struct AskSecond {
  static constexpr const char* kName = "ask_second";
  static void forward(OpContext& op) {
    (void)op.ints(1);
    std::memset(op.out().data, 0, sizeof(float) * static_cast<size_t>(op.out().numel()));
  }
  static void backward(OpContext&) {}
};

}  // namespace

TEST_CASE("ops/grad: gather_rows and scatter_add_rows, any order, repeated and unused rows") {
  const std::vector<int32_t> idx = {3, 0, 3, 4, 1, 3};  // row 2 unused, row 3 three times
  CHECK_GRAD(
      [&](Graph& g, const std::vector<Var>& in) { return gather_rows(g, in[0], idx.data(), 6); },
      {{5, 4}});
  CHECK_GRAD([&](Graph& g,
                 const std::vector<Var>& in) { return scatter_add_rows(g, in[0], idx.data(), 5); },
             {{6, 4}});
  // Each other's gradient, chained, with a weight on the path.
  CHECK_GRAD(
      [&](Graph& g, const std::vector<Var>& in) {
        Var y = mul(g, gather_rows(g, in[0], idx.data(), 6), in[1]);
        return scatter_add_rows(g, y, idx.data(), 7);
      },
      {{5, 4}, {6, 4}});
}

TEST_CASE("ops/forward: gather_rows and scatter_add_rows match loops and are transposes") {
  const int64_t N = 5, D = 3, M = 6;
  const std::vector<int32_t> idx = {3, 0, 3, 4, 1, 3};
  const std::vector<float> xv = random_values(N * D, 1), yv = random_values(M * D, 2);
  Graph g;
  Var x = g.constant(xv.data(), N, D), y = g.constant(yv.data(), M, D);
  const std::vector<float> gx = to_vec(g.value(gather_rows(g, x, idx.data(), M)));
  const std::vector<float> sy = to_vec(g.value(scatter_add_rows(g, y, idx.data(), N)));
  REQUIRE(gx.size() == static_cast<size_t>(M * D));
  REQUIRE(sy.size() == static_cast<size_t>(N * D));
  std::vector<float> want(static_cast<size_t>(N * D), 0.0f);
  for (int64_t r = 0; r < M; ++r)
    for (int64_t c = 0; c < D; ++c) {
      CHECK(gx[static_cast<size_t>(r * D + c)] == xv[static_cast<size_t>(idx[r] * D + c)]);
      want[static_cast<size_t>(idx[r] * D + c)] += yv[static_cast<size_t>(r * D + c)];
    }
  for (size_t i = 0; i < want.size(); ++i) CHECK(sy[i] == want[i]);  // in row order: exact
  for (int64_t c = 0; c < D; ++c) CHECK(sy[static_cast<size_t>(2 * D + c)] == 0.0f);
  // <gather(x), y> = <x, scatter(y)>.
  double a = 0, b = 0;
  for (size_t i = 0; i < gx.size(); ++i) a += static_cast<double>(gx[i]) * yv[i];
  for (size_t i = 0; i < sy.size(); ++i) b += static_cast<double>(xv[i]) * sy[i];
  CHECK(a == doctest::Approx(b).epsilon(1e-6));
  // No rows (an expert nobody chose): an empty gather, a scatter of nothing is zeros, and
  // backward through both runs.
  ParamStore store(1);
  Parameter& p = store.add("x", N, D, Role::kCustom);
  std::memcpy(p.value.data, xv.data(), sizeof(float) * xv.size());
  Graph h;
  Var e = gather_rows(h, h.param(p), nullptr, 0);
  CHECK(h.value(e).rows == 0);
  CHECK(h.value(e).cols == D);
  Var z = scatter_add_rows(h, e, nullptr, N);
  for (float v : to_vec(h.value(z))) CHECK(v == 0.0f);
  h.backward(sum(h, z));
  for (int64_t i = 0; i < p.grad.numel(); ++i) CHECK(p.grad.data[i] == 0.0f);
}

TEST_CASE("ops/grad: scale_rows and reshape") {
  CHECK_GRAD([](Graph& g, const std::vector<Var>& in) { return scale_rows(g, in[0], in[1]); },
             {{5, 7}, {5, 1}});
  CHECK_GRAD([](Graph& g, const std::vector<Var>& in) { return reshape(g, in[0], 12, 1); },
             {{4, 3}});
  CHECK_GRAD(
      [](Graph& g, const std::vector<Var>& in) {
        return scale_rows(g, in[0], reshape(g, in[1], 6, 1));
      },
      {{6, 4}, {2, 3}});
  // Values: row r times s[r]; reshape keeps the row-major order.
  Graph g;
  const std::vector<float> xv = random_values(12, 3), sv = {2.0f, -0.5f, 0.0f};
  Var x = g.constant(xv.data(), 3, 4);
  const std::vector<float> y = to_vec(g.value(scale_rows(g, x, g.constant(sv.data(), 3, 1))));
  for (size_t i = 0; i < y.size(); ++i) CHECK(y[i] == sv[i / 4] * xv[i]);
  Var r = reshape(g, x, 2, 6);
  CHECK(g.value(r).rows == 2);
  CHECK(to_vec(g.value(r)) == xv);
}

TEST_CASE("ops/top_k: largest first, ties to the lower column, a gradient into the chosen ones") {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> xv = {1,     3,    3,   2,    3,  // ties: columns 1, 2 (then 4)
                                 0,     0,    0,   0,    0,  // all equal: 0, 1
                                 -0.0f, 0.0f, -1,  -2,   5,  // -0 == 0: the lower column
                                 -inf,  -3,   inf, -inf, 7};
  Graph g;
  Var x = g.constant(xv.data(), 4, 5);
  const TopK t = top_k(g, x, 2);
  CHECK(t.k == 2);
  const std::vector<int32_t> want_idx = {1, 2, 0, 1, 4, 0, 2, 4};
  const std::vector<float> want_val = {3, 3, 0, 0, 5, 0, inf, 7};
  const std::vector<float> v = to_vec(g.value(t.values));
  REQUIRE(v.size() == 8);
  for (size_t i = 0; i < 8; ++i) {
    CHECK(t.indices[i] == want_idx[i]);
    CHECK(v[i] == want_val[i]);
  }
  // k = E sorts each row, ties in column order.
  const TopK all = top_k(g, x, 5);
  const std::vector<int32_t> sorted0 = {1, 2, 4, 3, 0};
  for (size_t j = 0; j < 5; ++j) CHECK(all.indices[j] == sorted0[j]);
  const std::vector<int32_t> sorted3 = {2, 4, 1, 0, 3};
  for (size_t j = 0; j < 5; ++j) CHECK(all.indices[15 + j] == sorted3[j]);
  // The softmax of the chosen logits is the renormalised softmax of all of them.
  const std::vector<float> lv = random_values(6 * 5, 4);
  Var logits = g.constant(lv.data(), 6, 5);
  const TopK r = top_k(g, logits, 2);
  const std::vector<float> w = to_vec(g.value(softmax(g, r.values)));
  const std::vector<float> p = to_vec(g.value(softmax(g, logits)));
  for (int64_t row = 0; row < 6; ++row) {
    const float a = p[static_cast<size_t>(row * 5 + r.indices[row * 2])];
    const float b = p[static_cast<size_t>(row * 5 + r.indices[row * 2 + 1])];
    CHECK(a >= b);
    CHECK(w[static_cast<size_t>(row * 2)] == doctest::Approx(a / (a + b)).epsilon(1e-5));
    CHECK(w[static_cast<size_t>(row * 2 + 1)] == doctest::Approx(b / (a + b)).epsilon(1e-5));
  }
  // Gradients reach the chosen positions only (the spread keeps the choice fixed).
  CHECK_GRAD(
      [](Graph& h, const std::vector<Var>& in) {
        return top_k(h, add(h, in[0], spread(h, 5, 6, 3.0f)), 3).values;
      },
      {{5, 6}});
  CHECK_GRAD(
      [](Graph& h, const std::vector<Var>& in) {
        return softmax(h, top_k(h, add(h, in[0], spread(h, 4, 5, 3.0f)), 2).values);
      },
      {{4, 5}});
}

TEST_CASE("ops/grad: a top-2 router dispatching tokens to experts and combining them back") {
  const int64_t N = 7, D = 4, E = 3, k = 2;
  CHECK_GRAD(
      [&](Graph& g, const std::vector<Var>& in) {
        return moe(g, in[0], in[1], {in[2], in[3], in[4]}, k);
      },
      // x and the router small: logits within 1 of the spread's steps of 3, the choice fixed.
      {{N, D, -0.5f, 0.5f}, {D, E, -0.5f, 0.5f}, {D, D}, {D, D}, {D, D}});
  // Against the same mixture written out in double.
  const std::vector<float> xv = random_values(N * D, 5), rv = random_values(D * E, 6);
  std::vector<std::vector<float>> ev;
  for (int64_t e = 0; e < E; ++e) ev.push_back(random_values(D * D, 7 + static_cast<uint64_t>(e)));
  Graph g;
  std::vector<Var> experts;
  for (const auto& m : ev) experts.push_back(g.constant(m.data(), D, D));
  const std::vector<float> got =
      to_vec(g.value(moe(g, g.constant(xv.data(), N, D), g.constant(rv.data(), D, E), experts, k)));
  REQUIRE(got.size() == static_cast<size_t>(N * D));
  for (int64_t r = 0; r < N; ++r) {
    std::vector<double> logit(E);
    for (int64_t e = 0; e < E; ++e) {
      double s = 3.0 * static_cast<double>((e * 7 + r) % E);
      for (int64_t c = 0; c < D; ++c)
        s += static_cast<double>(xv[static_cast<size_t>(r * D + c)]) *
             rv[static_cast<size_t>(c * E + e)];
      logit[static_cast<size_t>(e)] = s;
    }
    // The two largest (no ties: the spread keeps them apart).
    int64_t a = 0;
    for (int64_t e = 1; e < E; ++e)
      if (logit[static_cast<size_t>(e)] > logit[static_cast<size_t>(a)]) a = e;
    int64_t b = a == 0 ? 1 : 0;
    for (int64_t e = 0; e < E; ++e)
      if (e != a && logit[static_cast<size_t>(e)] > logit[static_cast<size_t>(b)]) b = e;
    const double ea = 1.0,
                 eb = std::exp(logit[static_cast<size_t>(b)] - logit[static_cast<size_t>(a)]);
    for (int64_t c = 0; c < D; ++c) {
      double want = 0;
      for (auto [e, wgt] : {std::pair<int64_t, double>{a, ea / (ea + eb)}, {b, eb / (ea + eb)}}) {
        double y = 0;
        for (int64_t i = 0; i < D; ++i)
          y += static_cast<double>(xv[static_cast<size_t>(r * D + i)]) *
               ev[static_cast<size_t>(e)][static_cast<size_t>(i * D + c)];
        want += wgt * y;
      }
      CHECK(got[static_cast<size_t>(r * D + c)] == doctest::Approx(want).epsilon(1e-5));
    }
  }
}

TEST_CASE("ops/grad: rmsnorm_groups and layernorm_groups normalise each head as its own rows") {
  CHECK_GRAD(
      [](Graph& g, const std::vector<Var>& in) { return rmsnorm_groups(g, in[0], 4, in[1]); },
      {{3, 12}, {1, 4}});
  CHECK_GRAD(
      [](Graph& g, const std::vector<Var>& in) { return rmsnorm_groups(g, in[0], 3, Var{}); },
      {{4, 6}});
  CHECK_GRAD([](Graph& g,
                const std::vector<Var>& in) { return layernorm_groups(g, in[0], 4, in[1], in[2]); },
             {{3, 12}, {1, 4}, {1, 4}});
  CHECK_GRAD([](Graph& g,
                const std::vector<Var>& in) { return layernorm_groups(g, in[0], 5, Var{}, Var{}); },
             {{3, 10}});
  // Bitwise: a grouped norm of (N, H*G) is the plain norm of the (N*H, G) rows, and group
  // = x.cols is the plain norm; gradients too.
  const int64_t N = 5, H = 3, G = 8;
  const std::vector<float> xv = random_values(N * H * G, 8), gv = random_values(G, 9),
                           bv = random_values(G, 10);
  for (bool centred : {false, true}) {
    CAPTURE(centred);
    auto run = [&](bool grouped) {
      ParamStore store(1);
      Parameter& x = store.add("x", N, H * G, Role::kCustom);
      Parameter& gain = store.add("gain", 1, G, Role::kCustom);
      Parameter& bias = store.add("bias", 1, G, Role::kCustom);
      std::memcpy(x.value.data, xv.data(), sizeof(float) * xv.size());
      std::memcpy(gain.value.data, gv.data(), sizeof(float) * gv.size());
      std::memcpy(bias.value.data, bv.data(), sizeof(float) * bv.size());
      Graph g;
      Var xi = g.param(x), gi = g.param(gain), bi = g.param(bias), y;
      if (grouped) {
        y = centred ? layernorm_groups(g, xi, G, gi, bi) : rmsnorm_groups(g, xi, G, gi);
      } else {
        Var rows = reshape(g, xi, N * H, G);
        y = reshape(g, centred ? layernorm(g, rows, gi, bi) : rmsnorm(g, rows, gi), N, H * G);
      }
      g.backward(sum(g, mul(g, y, y)));
      std::vector<float> out = to_vec(g.value(y));
      for (const Parameter* p : {&x, &gain, &bias})
        out.insert(out.end(), p->grad.data, p->grad.data + p->grad.numel());
      return out;
    };
    const std::vector<float> a = run(true), b = run(false);
    REQUIRE(a.size() == b.size());
    CHECK(std::memcmp(a.data(), b.data(), sizeof(float) * a.size()) == 0);
    Graph g;
    Var x = g.constant(xv.data(), N, H * G), gain = g.constant(xv.data(), 1, H * G);
    const std::vector<float> whole = to_vec(g.value(
        centred ? layernorm_groups(g, x, H * G, gain, Var{}) : rmsnorm_groups(g, x, H * G, gain)));
    const std::vector<float> plain =
        to_vec(g.value(centred ? layernorm(g, x, gain, Var{}) : rmsnorm(g, x, gain)));
    CHECK(std::memcmp(whole.data(), plain.data(), sizeof(float) * whole.size()) == 0);
  }
}

TEST_CASE("ops/custom_op: integer arrays reach forward and backward as the graph's copies") {
  std::vector<int32_t> idx = {2, 0, 2, 1};
  CHECK_GRAD(
      [&](Graph& g, const std::vector<Var>& in) {
        idx.assign({2, 0, 2, 1});
        Var y = custom_op<PickRows>(g, {in[0]}, 4, 3, {1.0f}, {IntArray{idx.data(), 4}});
        // The caller's buffer changes before backward runs: the op reads its own copy.
        idx.assign({0, 0, 0, 0});
        return mul(g, y, y);
      },
      {{3, 3}});
  idx.assign({2, 0, 2, 1});
  // A planted error in backward (attr 2: twice the gradient) is caught.
  const FdResult bad = check_gradients(
      [&](Graph& g, const std::vector<Var>& in) {
        return custom_op<PickRows>(g, {in[0]}, 4, 3, {2.0f}, {IntArray{idx.data(), 4}});
      },
      {{3, 3}});
  CHECK_FALSE(bad.ok);
  Graph g;
  Var x = g.input(3, 3);
  const std::string m1 = error_of([&] {
    custom_op<AskSecond>(g, {x}, 1, 1, {}, {IntArray{idx.data(), 4}});
  });
  CHECK(has(m1, "ask_second"));
  CHECK(has(m1, "integer array 1 does not exist"));
  CHECK(has(m1, "given 1"));
  const std::string m2 = error_of([&] {
    custom_op<PickRows>(g, {x}, 4, 3, {1.0f}, {IntArray{nullptr, 4}});
  });
  CHECK(has(m2, "pick_rows"));
  CHECK(has(m2, "4 entries but no data"));
  // Ops without integer arrays have none.
  const std::string m3 = error_of([&] { custom_op<AskSecond>(g, {x}, 1, 1); });
  CHECK(has(m3, "given 0"));
}

TEST_CASE(
    "ops/determinism: the row ops and grouped norms are bitwise identical on 1 and 2 threads") {
  // Shapes that split every loop into several chunks (column blocks of 64 for the
  // scatter-adds, thousands of rows for top_k and the norms).
  const int64_t N = 4096, D = 256, E = 8, k = 2, G = 16;
  const std::vector<float> xv = random_values(N * D, 11), rv = random_values(D * E, 12);
  auto run = [&] {
    ParamStore store(1);
    Parameter& x = store.add("x", N, D, Role::kCustom);
    Parameter& router = store.add("router", D, E, Role::kCustom);
    Parameter& gain = store.add("gain", 1, G, Role::kCustom);
    std::memcpy(x.value.data, xv.data(), sizeof(float) * xv.size());
    std::memcpy(router.value.data, rv.data(), sizeof(float) * rv.size());
    fill(gain.value, 1.5f);
    Graph g;
    Var xi = g.param(x);
    const TopK t = top_k(g, matmul(g, xi, g.param(router)), k);
    Var w = reshape(g, softmax(g, t.values), N * k, 1);
    std::vector<int32_t> rows(static_cast<size_t>(N * k));
    for (int64_t s = 0; s < N * k; ++s) rows[static_cast<size_t>(s)] = static_cast<int32_t>(s / k);
    // Every token twice, in the order of the experts' choice: rows repeat.
    Var y = scale_rows(g, gather_rows(g, xi, rows.data(), N * k), w);
    Var z = scatter_add_rows(g, rmsnorm_groups(g, y, G, g.param(gain)), rows.data(), N);
    z = add(g, z, layernorm_groups(g, xi, G, Var{}, Var{}));
    g.backward(sum(g, mul(g, z, z)));
    std::map<std::string, std::vector<float>> out;
    out["z"] = to_vec(g.value(z));
    for (const Parameter* p : {&x, &router, &gain})
      out["d" + p->name] = std::vector<float>(p->grad.data, p->grad.data + p->grad.numel());
    out["top_k indices"] = std::vector<float>(t.indices, t.indices + N * k);
    return out;
  };
  std::map<std::string, std::vector<float>> one, two;
  tbb::task_arena(1).execute([&] { one = run(); });
  tbb::task_arena(2).execute([&] { two = run(); });
  for (const auto& entry : one) {
    const std::string& name = entry.first;
    const std::vector<float>& a = entry.second;
    const std::vector<float>& b = two.at(name);
    REQUIRE(a.size() == b.size());
    size_t first = a.size(), count = 0;
    for (size_t i = 0; i < a.size(); ++i)
      if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) {
        if (count++ == 0) first = i;
      }
    INFO(name, ": ", count, " of ", a.size(), " differ, the first at ", first, " (",
         first < a.size() ? a[first] : 0.0f, " on 1 thread, ", first < a.size() ? b[first] : 0.0f,
         " on 2)");
    CHECK(count == 0);
  }
}

TEST_CASE("ops/errors: row ops and grouped norms name the op, the bad value and what is allowed") {
  Graph g;
  Var x = g.input(4, 6);
  const int32_t neg[3] = {0, -1, 2}, big[2] = {1, 4};
  std::string m = error_of([&] { gather_rows(g, x, neg, 3); });
  CHECK(has(m, "gather_rows"));
  CHECK(has(m, "index -1 at position 1"));
  CHECK(has(m, "[0, 4)"));
  m = error_of([&] { gather_rows(g, x, big, 2); });
  CHECK(has(m, "index 4 at position 1"));
  m = error_of([&] { gather_rows(g, x, nullptr, 2); });
  CHECK(has(m, "gather_rows"));
  m = error_of([&] { gather_rows(g, x, big, -1); });
  CHECK(has(m, "-1 indices; give n >= 0"));
  Var y = g.input(2, 6);
  m = error_of([&] { scatter_add_rows(g, y, big, 3); });
  CHECK(has(m, "scatter_add_rows"));
  CHECK(has(m, "index 4 at position 1"));
  CHECK(has(m, "[0, 3)"));
  m = error_of([&] { scatter_add_rows(g, y, big, 0); });
  CHECK(has(m, "n_rows = 0"));
  m = error_of([&] { scale_rows(g, x, g.input(4, 2)); });
  CHECK(has(m, "scale_rows"));
  CHECK(has(m, "(4, 2)"));
  CHECK(has(m, "(x.rows, 1)"));
  CHECK(has(error_of([&] { scale_rows(g, x, g.input(3, 1)); }), "(3, 1)"));
  m = error_of([&] { reshape(g, x, 5, 5); });
  CHECK(has(m, "reshape"));
  CHECK(has(m, "(5, 5)"));
  CHECK(has(m, "rows * cols = 24"));
  CHECK(has(error_of([&] { reshape(g, x, -4, -6); }), "reshape"));
  m = error_of([&] { top_k(g, x, 7); });
  CHECK(has(m, "top_k"));
  CHECK(has(m, "k = 7"));
  CHECK(has(m, "[1, 6]"));
  CHECK(has(error_of([&] { top_k(g, x, 0); }), "k = 0"));
  Var nan = g.input(2, 3);
  g.value(nan).data[4] = std::numeric_limits<float>::quiet_NaN();
  m = error_of([&] { top_k(g, nan, 1); });
  CHECK(has(m, "NaN at row 1, column 1"));
  m = error_of([&] { rmsnorm_groups(g, x, 4, Var{}); });
  CHECK(has(m, "rmsnorm_groups"));
  CHECK(has(m, "group 4"));
  CHECK(has(m, "(4, 6)"));
  CHECK(has(error_of([&] { layernorm_groups(g, x, 0, Var{}, Var{}); }), "group 0"));
  m = error_of([&] { layernorm_groups(g, x, 3, g.input(1, 6), Var{}); });
  CHECK(has(m, "layernorm_groups"));
  CHECK(has(m, "gain must be (1, group), group = 3"));
  CHECK(has(m, "(1, 6)"));
  // The plain norms' messages are as before.
  CHECK(has(error_of([&] { rmsnorm(g, x, g.input(1, 3)); }), "gain must be (1, x.cols)"));
}
