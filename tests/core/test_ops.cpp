// Tests of the primitive ops (framework/core/src/ops): every op with a backward passes a
// finite-difference gradient check; forwards match scalar references; attention matches
// a naive implementation and its KV-cache path; results do not depend on thread count.
#include <doctest/doctest.h>
#include <tbb/task_arena.h>

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "node.hpp"  // private to the core layer (include path set in CMakeLists.txt)
#include "ops/kernels.hpp"
#include "ablate/custom_op.hpp"
#include "ablate/error.hpp"
#include "ablate/conformance.hpp"
#include "ablate/graph.hpp"
#include "ablate/ops.hpp"
#include "ablate/tensor.hpp"
#include "core/fd_check.hpp"

namespace {
using namespace ablate;
using namespace ablate::test;
using conformance::add_input;

// ---- fake ops for testing the checker itself -------------------------------------------

// y = 2x with a backward that is off by `factor` (1 = right).
float g_fake_factor = 1.0f;
bool g_fake_assign = false;
void fake_backward(Graph& g, int id) {
  Node& n = node(g, id);
  Tensor& dx = g.grad(n.in[0]);
  for (int64_t i = 0; i < dx.numel(); ++i) {
    const float d = 2.0f * g_fake_factor * n.grad.data[i];
    dx.data[i] = g_fake_assign ? d : dx.data[i] + d;
  }
}
Var fake_double(Graph& g, Var x) {
  const Tensor X = g.value(x);
  Var out = g.make(X.rows, X.cols, &fake_backward, {x});
  for (int64_t i = 0; i < X.numel(); ++i) g.value(out).data[i] = 2.0f * X.data[i];
  return out;
}

// ---- helpers ---------------------------------------------------------------------------

std::vector<float> random_vec(size_t n, uint64_t seed, float scale = 1.0f) {
  Rng r(seed);
  std::vector<float> v(n);
  for (float& x : v) x = scale * (2.0f * r.uniform() - 1.0f);
  return v;
}

std::vector<float> to_vec(const Tensor& t) {
  return std::vector<float>(t.data, t.data + t.numel());
}

// Naive attention in double: q (B*T, NH*HS), k v (B*Tk, NKV*HS) with query i at absolute
// position offset+i; returns (B*T, NH*HS) and optionally weights (B,NH,T,Tk).
std::vector<float> naive_attention(const std::vector<float>& q, const std::vector<float>& k,
                                   const std::vector<float>& v, int64_t B, int64_t T, int64_t Tk,
                                   int64_t NH, int64_t NKV, int64_t HS, bool causal,
                                   const float* slopes, const uint8_t* key_mask, int64_t offset = 0,
                                   std::vector<float>* weights = nullptr,
                                   const int32_t* prefix = nullptr) {
  std::vector<float> out(static_cast<size_t>(B * T * NH * HS), 0.0f);
  if (weights) weights->assign(static_cast<size_t>(B * NH * T * Tk), 0.0f);
  const double scale = 1.0 / std::sqrt(static_cast<double>(HS));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < NH; ++h) {
      const int64_t kh = h / (NH / NKV);
      for (int64_t i = 0; i < T; ++i) {
        const int64_t pos = offset + i;
        std::vector<double> s(static_cast<size_t>(Tk), -INFINITY);
        double mx = -INFINITY;
        for (int64_t j = 0; j < Tk; ++j) {
          if (causal && j > pos && !(prefix && j < prefix[b])) continue;
          if (key_mask && !key_mask[b * Tk + j]) continue;
          double d = 0.0;
          for (int64_t c = 0; c < HS; ++c)
            d += static_cast<double>(q[static_cast<size_t>((b * T + i) * NH * HS + h * HS + c)]) *
                 k[static_cast<size_t>((b * Tk + j) * NKV * HS + kh * HS + c)];
          d *= scale;
          if (slopes) d -= static_cast<double>(slopes[h]) * std::fabs(static_cast<double>(pos - j));
          s[static_cast<size_t>(j)] = d;
          mx = std::max(mx, d);
        }
        if (mx == -INFINITY) continue;
        double z = 0.0;
        for (double& x : s) z += (x = std::exp(x - mx));
        for (int64_t j = 0; j < Tk; ++j) {
          const double p = s[static_cast<size_t>(j)] / z;
          if (weights)
            (*weights)[static_cast<size_t>(((b * NH + h) * T + i) * Tk + j)] =
                static_cast<float>(p);
          for (int64_t c = 0; c < HS; ++c)
            out[static_cast<size_t>((b * T + i) * NH * HS + h * HS + c)] += static_cast<float>(
                p * v[static_cast<size_t>((b * Tk + j) * NKV * HS + kh * HS + c)]);
        }
      }
    }
  return out;
}

void check_close(const std::vector<float>& a, const std::vector<float>& b, double tol) {
  REQUIRE(a.size() == b.size());
  double worst = 0.0;
  size_t at = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double e =
        std::fabs(static_cast<double>(a[i]) - b[i]) / (1.0 + std::fabs(static_cast<double>(b[i])));
    if (e > worst) {
      worst = e;
      at = i;
    }
  }
  INFO("worst at " << at << ": " << (a.empty() ? 0.f : a[at]) << " vs "
                   << (b.empty() ? 0.f : b[at]));
  CHECK(worst <= tol);
}

AttentionSpec spec_of(int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS, bool causal) {
  AttentionSpec s;
  s.batch = B;
  s.time = T;
  s.n_heads = NH;
  s.n_kv_heads = NKV;
  s.head_size = HS;
  s.causal = causal;
  return s;
}

}  // namespace

// ---- the checker ---------------------------------------------------------------------------

TEST_CASE(
    "ops/gradcheck: passes a right backward, fails a wrong factor or a non-accumulating one") {
  const BuildFn f = [](Graph& g, const std::vector<Var>& in) { return fake_double(g, in[0]); };
  g_fake_factor = 1.0f;
  g_fake_assign = false;
  CHECK(check_gradients(f, {{4, 5}}).ok);
  g_fake_factor = 1.05f;
  CHECK_FALSE(check_gradients(f, {{4, 5}}).ok);
  g_fake_factor = 1.0f;
  g_fake_assign = true;
  CHECK_FALSE(check_gradients(f, {{4, 5}}).ok);
  g_fake_assign = false;
}

// ---- gradients of every op -------------------------------------------------------------------

TEST_CASE("ops/grad: embedding (repeated ids)") {
  const std::vector<int32_t> ids = {3, 0, 3, 9, 1, 3, 7};
  CHECK_GRAD(
      [&](Graph& g, const std::vector<Var>& in) {
        return embedding(g, in[0], ids.data(), static_cast<int64_t>(ids.size()));
      },
      {{10, 6}});
}

TEST_CASE("ops/grad: matmul, plain and with b transposed") {
  CHECK_GRAD([](Graph& g, const std::vector<Var>& in) { return matmul(g, in[0], in[1]); },
             {{5, 4}, {4, 3}});
  CHECK_GRAD([](Graph& g, const std::vector<Var>& in) { return matmul(g, in[0], in[1], true); },
             {{5, 4}, {3, 4}}, 2);
  // a a^T: the same node as both operands
  CHECK_GRAD([](Graph& g, const std::vector<Var>& in) { return matmul(g, in[0], in[0], true); },
             {{4, 3}}, 3);
}

TEST_CASE("ops/grad: linear with and without bias, both weight layouts") {
  CHECK_GRAD([](Graph& g, const std::vector<Var>& in) { return linear(g, in[0], in[1], in[2]); },
             {{6, 4}, {4, 5}, {1, 5}});
  CHECK_GRAD([](Graph& g, const std::vector<Var>& in) { return linear(g, in[0], in[1]); },
             {{6, 4}, {4, 5}}, 2);
  CHECK_GRAD(
      [](Graph& g, const std::vector<Var>& in) { return linear(g, in[0], in[1], in[2], true); },
      {{6, 4}, {5, 4}, {1, 5}}, 3);
}

TEST_CASE("ops/grad: add and mul, same shape and row broadcast") {
  CHECK_GRAD([](Graph& g, const std::vector<Var>& in) { return add(g, in[0], in[1]); },
             {{3, 5}, {3, 5}});
  CHECK_GRAD([](Graph& g, const std::vector<Var>& in) { return add(g, in[0], in[1]); },
             {{3, 5}, {1, 5}}, 2);
  CHECK_GRAD([](Graph& g, const std::vector<Var>& in) { return mul(g, in[0], in[1]); },
             {{3, 5}, {3, 5}}, 3);
  CHECK_GRAD([](Graph& g, const std::vector<Var>& in) { return mul(g, in[0], in[1]); },
             {{3, 5}, {1, 5}}, 4);
  // x * x
  CHECK_GRAD([](Graph& g, const std::vector<Var>& in) { return mul(g, in[0], in[0]); }, {{2, 3}},
             5);
}

TEST_CASE("ops/grad: scale, sum, slice_cols") {
  CHECK_GRAD([](Graph& g, const std::vector<Var>& in) { return scale(g, in[0], -1.7f); }, {{3, 4}});
  CHECK_GRAD([](Graph& g, const std::vector<Var>& in) { return sum(g, in[0]); }, {{3, 4}}, 2);
  CHECK_GRAD([](Graph& g, const std::vector<Var>& in) { return slice_cols(g, in[0], 2, 3); },
             {{4, 7}}, 3);
}

TEST_CASE("ops/grad: activations") {
  CHECK_GRAD([](Graph& g, const std::vector<Var>& in) { return relu(g, in[0]); },
             {{4, 6, -2.0f, 2.0f, 0.05f}});
  CHECK_GRAD([](Graph& g, const std::vector<Var>& in) { return gelu(g, in[0]); },
             {{4, 6, -3.0f, 3.0f}}, 2);
  CHECK_GRAD([](Graph& g, const std::vector<Var>& in) { return gelu_exact(g, in[0]); },
             {{4, 6, -3.0f, 3.0f}}, 3);
  CHECK_GRAD([](Graph& g, const std::vector<Var>& in) { return silu(g, in[0]); },
             {{4, 6, -4.0f, 4.0f}}, 4);
  // Long enough for Eigen's vectorised exp/tanh/erf paths and several spans.
  CHECK_GRAD([](Graph& g, const std::vector<Var>& in) { return gelu(g, in[0]); },
             {{3, 300, -3.0f, 3.0f}}, 5);
  CHECK_GRAD([](Graph& g, const std::vector<Var>& in) { return gelu_exact(g, in[0]); },
             {{3, 300, -3.0f, 3.0f}}, 6);
  CHECK_GRAD([](Graph& g, const std::vector<Var>& in) { return silu(g, in[0]); },
             {{3, 300, -4.0f, 4.0f}}, 7);
}

TEST_CASE("ops/grad: tanh, and add and mul with a (1,1) scalar broadcast over every element") {
  CHECK_GRAD([](Graph& g, const std::vector<Var>& in) { return ablate::tanh(g, in[0]); },
             {{4, 6, -3.0f, 3.0f}});
  CHECK_GRAD([](Graph& g, const std::vector<Var>& in) { return ablate::tanh(g, in[0]); },
             {{3, 300, -3.0f, 3.0f}}, 2);
  CHECK_GRAD([](Graph& g, const std::vector<Var>& in) { return add(g, in[0], in[1]); },
             {{3, 5}, {1, 1}}, 3);
  CHECK_GRAD([](Graph& g, const std::vector<Var>& in) { return mul(g, in[0], in[1]); },
             {{3, 5}, {1, 1}}, 4);
  // Several fixed chunks of the scalar's gradient sum (4096 elements each).
  CHECK_GRAD([](Graph& g, const std::vector<Var>& in) { return mul(g, in[0], in[1]); },
             {{3, 3000}, {1, 1}}, 5);
  // x * s with s computed from x (both gradients reach x).
  CHECK_GRAD([](Graph& g, const std::vector<Var>& in) { return mul(g, in[0], sum(g, in[0])); },
             {{2, 3}}, 6);
}

// y = a x^3 (a an attribute) as a custom op (ablate/custom_op.hpp), with `factor` planted
// into its backward: the finite-difference check must catch a wrong one.
float g_cube_factor = 1.0f;
struct Cube {
  static constexpr const char* kName = "test_cube";
  static void forward(ablate::OpContext& op) {
    const Tensor& x = op.in(0);
    float* sq = op.save(0, static_cast<size_t>(x.numel()));
    for (int64_t i = 0; i < x.numel(); ++i) {
      sq[i] = x.data[i] * x.data[i];
      op.out().data[i] = op.attr(0) * sq[i] * x.data[i];
    }
  }
  static void backward(ablate::OpContext& op) {
    if (!op.needs_grad(0)) return;
    const float* sq = op.saved(0);
    const float* dy = op.grad_out().data;
    float* dx = op.grad_in(0).data;
    for (int64_t i = 0; i < op.in(0).numel(); ++i)
      dx[i] += g_cube_factor * 3.0f * op.attr(0) * sq[i] * dy[i];
  }
};

TEST_CASE(
    "ops/custom_op: forward, backward, saved buffers and attributes, and a wrong backward is "
    "caught") {
  const BuildFn f = [](Graph& g, const std::vector<Var>& in) {
    const Tensor& x = g.value(in[0]);
    return ablate::custom_op<Cube>(g, {in[0]}, x.rows, x.cols, {1.5f});
  };
  g_cube_factor = 1.0f;
  CHECK_GRAD(f, {{3, 4}});
  g_cube_factor = 2.0f;
  CHECK_FALSE(check_gradients(f, {{3, 4}}).ok);
  g_cube_factor = 1.0f;
  CHECK(ablate::is_custom_op("test_cube"));
  Graph g;
  const float v = 2.0f;
  Var x = g.constant(&v, 1, 1);
  CHECK(g.value(ablate::custom_op<Cube>(g, {x}, 1, 1, {0.5f})).data[0] == doctest::Approx(4.0f));
  CHECK_THROWS_AS(ablate::custom_op<Cube>(g, {Var{}}, 1, 1), ablate::Error);
  CHECK_THROWS_AS(ablate::custom_op<Cube>(g, {x}, 0, 1), ablate::Error);
}

// y = x * (sum of x's row), with what backward needs in a typed struct (OpContext::save<T>):
// the row sums' buffer, the shape and the scale.
struct RowScaleState {
  float* row_sums;
  int64_t rows, cols;
  float scale;
};
struct RowScale {
  static constexpr const char* kName = "test_row_scale";
  static void forward(ablate::OpContext& op) {
    const Tensor& x = op.in(0);
    RowScaleState& st =
        op.save<RowScaleState>(op.save(0, static_cast<size_t>(x.rows)), x.rows, x.cols, op.attr(0));
    for (int64_t r = 0; r < st.rows; ++r) {
      float s = 0;
      for (int64_t c = 0; c < st.cols; ++c) s += x.data[r * st.cols + c];
      st.row_sums[r] = s;
      for (int64_t c = 0; c < st.cols; ++c)
        op.out().data[r * st.cols + c] = st.scale * s * x.data[r * st.cols + c];
    }
  }
  static void backward(ablate::OpContext& op) {
    if (!op.needs_grad(0)) return;
    const RowScaleState& st = op.saved<RowScaleState>();
    const float* x = op.in(0).data;
    const float* dy = op.grad_out().data;
    float* dx = op.grad_in(0).data;
    for (int64_t r = 0; r < st.rows; ++r) {
      float dot = 0;  // sum_c dy x
      for (int64_t c = 0; c < st.cols; ++c) dot += dy[r * st.cols + c] * x[r * st.cols + c];
      for (int64_t c = 0; c < st.cols; ++c)
        dx[r * st.cols + c] += st.scale * (st.row_sums[r] * dy[r * st.cols + c] + dot);
    }
  }
};
// Reads back a state of another type than the one saved.
struct WrongState {
  static constexpr const char* kName = "test_wrong_state";
  static void forward(ablate::OpContext& op) {
    op.out().data[0] = op.in(0).data[0];
    op.save<int32_t>(7);
    (void)op.saved<double>();
  }
  static void backward(ablate::OpContext&) {}
};
// Reads a state that forward never saved.
struct NoState {
  static constexpr const char* kName = "test_no_state";
  static void forward(ablate::OpContext& op) {
    op.out().data[0] = op.in(0).data[0];
    (void)op.saved<RowScaleState>();
  }
  static void backward(ablate::OpContext&) {}
};

TEST_CASE("ops/custom_op: typed saved state, read back in backward, wrong reads are errors") {
  const BuildFn f = [](Graph& g, const std::vector<Var>& in) {
    const Tensor& x = g.value(in[0]);
    return ablate::custom_op<RowScale>(g, {in[0]}, x.rows, x.cols, {0.7f});
  };
  CHECK_GRAD(f, {{3, 4}});
  Graph g;
  const float v[2] = {1.0f, 3.0f};
  Var x = g.constant(v, 1, 2);
  CHECK(g.value(ablate::custom_op<RowScale>(g, {x}, 1, 2, {0.5f})).data[1] ==
        doctest::Approx(6.0f));  // 0.5 * 4 * 3
  CHECK_THROWS_WITH(ablate::custom_op<WrongState>(g, {x}, 1, 1),
                    doctest::Contains("test_wrong_state: saved<T>() asks for 8 bytes but "
                                      "forward saved 4"));
  CHECK_THROWS_WITH(ablate::custom_op<NoState>(g, {x}, 1, 1),
                    doctest::Contains("test_no_state: saved<T>() finds no saved state"));
}

TEST_CASE("ops/graph: node() reads an op's name, value and parameter, and refuses other ids") {
  ParamStore store(1);
  Parameter& w = store.add("w", 2, 3, Role::kCustom);
  Graph g;
  Var p = g.param(w);
  Var y = scale(g, p, 2.0f);
  CHECK(std::string(g.node(p).op) == "input");
  CHECK(g.node(p).param == &w);
  CHECK(std::string(g.node(y).op) == std::string(node(g, y).op));
  CHECK(&g.node(y).value == &g.value(y));
  CHECK(g.node(y).param == nullptr);
  CHECK_THROWS_WITH(g.node(2), doctest::Contains("Graph::node: 2 is not a node of this tape"));
  CHECK_THROWS_AS(g.node(-1), ablate::Error);
}

TEST_CASE("ops/graph: parameter values, gradients and graph values start on 64-byte boundaries") {
  // Sums vectorised over unaligned data round according to the address: every tensor is
  // aligned so that results do not depend on where the heap put it.
  auto aligned = [](const float* p) {
    return reinterpret_cast<uintptr_t>(p) % kTensorAlignment == 0;
  };
  ParamStore store(1);
  Graph g;
  for (int64_t n = 1; n <= 33; n += 4) {
    Parameter& p = store.add("p" + std::to_string(n), n, 3, Role::kCustom);
    CHECK(aligned(p.value.data));
    CHECK(aligned(p.grad.data));
    CHECK(aligned(g.value(scale(g, g.param(p), 2.0f)).data));
  }
  AlignedFloats v(7);
  v.resize(4099);
  CHECK(aligned(v.data()));
}

TEST_CASE(
    "ops/graph: backward gives each gradient back once its node's inputs have it: a deep chain "
    "holds a few layers' gradients, with the same parameter gradients bitwise") {
  constexpr int64_t N = 48, C = 32, L = 12;
  ParamStore store(5);
  std::vector<Parameter*> ws;
  for (int64_t l = 0; l < L; ++l) {
    Parameter& w = store.add("w" + std::to_string(l), C, C, Role::kCustom);
    const std::vector<float> v = random_vec(static_cast<size_t>(C * C), 10 + l);
    for (int64_t i = 0; i < C * C; ++i) w.value.data[i] = 0.3f * v[static_cast<size_t>(i)];
    ws.push_back(&w);
  }
  const std::vector<float> xv = random_vec(static_cast<size_t>(N * C), 4);
  auto forward = [&](Graph& g, std::vector<Var>& hs) {
    Var h = g.constant(xv.data(), N, C);
    for (Parameter* w : ws) {
      h = gelu(g, linear(g, h, g.param(*w)));
      hs.push_back(h);
    }
    return sum(g, mul(g, h, h));
  };
  auto grads = [&] {
    std::vector<float> all;
    for (Parameter* w : ws) all.insert(all.end(), w->grad.data, w->grad.data + w->grad.numel());
    store.zero_grad();
    return all;
  };
  // Every gradient kept: the checker's walk of the tape, which releases nothing.
  Graph kept;
  std::vector<Var> hk;
  backward_with_seed(kept, forward(kept, hk), {1.0f});
  const std::vector<float> expected = grads();

  Graph g;
  std::vector<Var> hs;
  Var loss = forward(g, hs);
  const size_t after_forward = g.step_bytes();
  g.backward(loss);
  CHECK(grads() == expected);
  // Two activation gradients per layer (linear's and gelu's) would be 2 L of them; released
  // and reused, the walk holds a few at a time.
  const size_t one = sizeof(float) * N * C;
  CHECK(g.step_bytes() - after_forward <= 4 * one);
  CHECK(kept.step_bytes() - after_forward >= 2 * L * one);
  CHECK_THROWS_WITH(g.grad(hs[5]), doctest::Contains("(gelu) is gone: backward() releases"));
  CHECK_THROWS_WITH(g.backward(loss), doctest::Contains("is gone"));
  // A new tape starts with every gradient; the same step holds the same memory.
  g.reset();
  hs.clear();
  const size_t first = g.arena_bytes();
  g.backward(forward(g, hs));
  CHECK(grads() == expected);
  CHECK(g.arena_bytes() == first);
}

TEST_CASE(
    "ops/graph: references to nodes and values taken before make() stay valid as the tape grows") {
  Graph g;
  const std::vector<float> xv = random_vec(6, 3);
  Var x = g.constant(xv.data(), 2, 3);
  Node& first = node(g, x);
  const Tensor& value = g.value(x);
  for (int k = 0; k < 5000; ++k) scale(g, x, 1.0f);  // many chunks of nodes
  CHECK(&first == &node(g, x));
  CHECK(&value == &g.value(x));
  CHECK(value.data[5] == xv[5]);
  g.reset();
  Var y = g.constant(xv.data(), 2, 3);
  CHECK(&node(g, y) == &first);  // chunks are reused after reset
}

TEST_CASE("ops/grad: layernorm with and without gain and bias, rmsnorm, softmax") {
  CHECK_GRAD([](Graph& g, const std::vector<Var>& in) { return layernorm(g, in[0], in[1], in[2]); },
             {{4, 8}, {1, 8}, {1, 8}});
  CHECK_GRAD([](Graph& g, const std::vector<Var>& in) { return layernorm(g, in[0], Var{}, Var{}); },
             {{4, 8}}, 2);
  CHECK_GRAD([](Graph& g, const std::vector<Var>& in) { return layernorm(g, in[0], in[1], Var{}); },
             {{4, 8}, {1, 8}}, 3);
  CHECK_GRAD([](Graph& g, const std::vector<Var>& in) { return rmsnorm(g, in[0], in[1]); },
             {{4, 8}, {1, 8}}, 4);
  CHECK_GRAD([](Graph& g, const std::vector<Var>& in) { return rmsnorm(g, in[0], Var{}); },
             {{4, 8}}, 5);
  CHECK_GRAD([](Graph& g, const std::vector<Var>& in) { return softmax(g, in[0]); },
             {{4, 7, -2.0f, 2.0f}}, 6);
}

TEST_CASE("ops/grad: attention variants") {
  struct Case {
    const char* name;
    int64_t B, T, NH, NKV, HS;
    bool causal, slopes, mask, prefix = false;
  };
  const Case cases[] = {
      {"prefix LM (prompts of 3 and 1)", 2, 5, 2, 2, 4, true, false, false, true},
      {"prefix LM, gqa, slopes, key_mask", 2, 5, 4, 2, 3, true, true, true, true},
      {"prefix LM, head size 65", 2, 5, 1, 1, 65, true, true, false, true},
      {"causal", 2, 5, 2, 2, 4, true, false, false},
      {"bidirectional", 2, 5, 2, 2, 4, false, false, false},
      {"gqa 2 of 4", 1, 6, 4, 2, 3, true, false, false},
      {"gqa 1 of 4 (multi-query)", 2, 4, 4, 1, 3, true, false, false},
      {"slopes", 1, 6, 2, 1, 4, true, true, false},
      {"slopes bidirectional", 1, 5, 2, 2, 4, false, true, false},
      {"key_mask causal (a row with every key masked)", 2, 5, 2, 2, 3, true, false, true},
      {"key_mask bidirectional", 2, 5, 2, 1, 3, false, true, true},
      {"head size 17, 20 steps (padding paths)", 1, 20, 2, 2, 17, true, true, false},
      {"head size 65 (the GEMM-per-block kernels)", 1, 7, 1, 1, 65, true, true, false},
      {"head size 65 with a masked key", 2, 5, 1, 1, 65, false, false, true},
  };
  const float slopes[4] = {0.5f, 0.25f, 0.125f, 0.0625f};
  // batch 0: key 0 padded (so query 0 sees no key when causal); batch 1: keys 2, 4 padded
  const uint8_t mask[10] = {0, 1, 1, 1, 1, 1, 1, 0, 1, 0};
  const int32_t prompts[2] = {3, 1};
  int seed = 1;
  for (const Case& c : cases) {
    SUBCASE(c.name) {
      AttentionSpec s = spec_of(c.B, c.T, c.NH, c.NKV, c.HS, c.causal);
      if (c.slopes) s.slopes = slopes;
      if (c.mask) s.key_mask = mask;
      if (c.prefix) s.prefix = prompts;
      CHECK_GRAD([&](Graph& g,
                     const std::vector<Var>& in) { return attention(g, in[0], in[1], in[2], s); },
                 {{c.B * c.T, c.NH * c.HS}, {c.B * c.T, c.NKV * c.HS}, {c.B * c.T, c.NKV * c.HS}},
                 static_cast<uint64_t>(seed));
    }
    ++seed;
  }
}

TEST_CASE(
    "ops/grad: lanes attention over several query blocks, probabilities saved or recomputed") {
  // T = 40: two blocks of 32 queries, the second seeing 40 keys; head sizes up to 64 take
  // the lanes kernels, which keep P for backward unless it exceeds the limit.
  for (const int64_t HS : {8, 40}) {
    CAPTURE(HS);
    const int64_t B = 2, T = 40, NH = 2, NKV = 1;
    const float slopes[2] = {0.25f, 0.125f};
    int64_t& limit = kernels::attention_saved_probs_limit();
    const int64_t saved_limit = limit;
    std::vector<std::vector<float>> grads;
    const int32_t prompts[2] = {35, 2};  // a prefix LM's prompts: one spans both blocks
    for (int64_t lim : {saved_limit, int64_t{0}, saved_limit, int64_t{0}}) {
      const bool prefix = grads.size() >= 2;
      CAPTURE(lim);
      CAPTURE(prefix);
      limit = lim;
      AttentionSpec s = spec_of(B, T, NH, NKV, HS, true);
      s.slopes = slopes;
      if (prefix) s.prefix = prompts;
      CHECK_GRAD([&](Graph& g,
                     const std::vector<Var>& in) { return attention(g, in[0], in[1], in[2], s); },
                 {{B * T, NH * HS}, {B * T, NKV * HS}, {B * T, NKV * HS}}, 31);
      // The two paths' gradients agree to float rounding.
      ParamStore store(1);
      Parameter& q = add_input(store, "q", B * T, NH * HS, 1.0f);
      Parameter& k = add_input(store, "k", B * T, NKV * HS, 1.0f);
      Parameter& v = add_input(store, "v", B * T, NKV * HS, 1.0f);
      Graph g;
      Var y = attention(g, g.param(q), g.param(k), g.param(v), s);
      backward_with_seed(g, y, random_vec(B * T * NH * HS, 32));
      std::vector<float> all = to_vec(q.grad), gk = to_vec(k.grad), gv = to_vec(v.grad);
      all.insert(all.end(), gk.begin(), gk.end());
      all.insert(all.end(), gv.begin(), gv.end());
      grads.push_back(all);
    }
    limit = saved_limit;
    check_close(grads[0], grads[1], 1e-5);
    check_close(grads[2], grads[3], 1e-5);
  }
}

TEST_CASE("ops/grad: attention on column ranges of one fused node, and bitwise as on copies") {
  // q | k | v in one (B*T, 2 + NH*HS + 2*NKV*HS) node from column 2, GQA 2 of 4.
  const int64_t B = 2, T = 6, NH = 4, NKV = 2, HS = 3, W = 2 + NH * HS + 2 * NKV * HS;
  AttentionSpec s = spec_of(B, T, NH, NKV, HS, true);
  s.q_col = 2;
  s.k_col = 2 + NH * HS;
  s.v_col = 2 + NH * HS + NKV * HS;
  CHECK_GRAD(
      [&](Graph& g, const std::vector<Var>& in) { return attention(g, in[0], in[0], in[0], s); },
      {{B * T, W}}, 21);
  // The same numbers, to the bit, as attention on slice_cols copies.
  ParamStore store(1);
  Parameter& x = add_input(store, "x", B * T, W, 1.0f);
  const std::vector<float> dy = random_vec(B * T * NH * HS, 22);
  auto run = [&](bool fused) {
    store.zero_grad();
    Graph g;
    Var qkv = g.param(x), y;
    if (fused) {
      y = attention(g, qkv, qkv, qkv, s);
    } else {
      y = attention(g, slice_cols(g, qkv, s.q_col, NH * HS), slice_cols(g, qkv, s.k_col, NKV * HS),
                    slice_cols(g, qkv, s.v_col, NKV * HS), spec_of(B, T, NH, NKV, HS, true));
    }
    std::vector<float> out = to_vec(g.value(y));
    backward_with_seed(g, y, dy);
    const std::vector<float> gx = to_vec(x.grad);
    out.insert(out.end(), gx.begin(), gx.end());
    return out;
  };
  const std::vector<float> fused = run(true), copies = run(false);
  REQUIRE(fused.size() == copies.size());
  for (size_t i = 0; i < fused.size(); ++i) {
    CAPTURE(i);
    CHECK(fused[i] == copies[i]);
  }
}

TEST_CASE("ops/grad: rope") {
  CHECK_GRAD(
      [](Graph& g, const std::vector<Var>& in) { return rope(g, in[0], 2, 3, 2, 4, 5, 100.0f); },
      {{6, 8}});
}

TEST_CASE("ops/grad: cross_entropy with an ignored target") {
  const std::vector<int32_t> t = {2, -1, 0, 4};
  CHECK_GRAD(
      [&](Graph& g, const std::vector<Var>& in) { return cross_entropy(g, in[0], t.data(), 4); },
      {{4, 5, -2.0f, 2.0f}});
  const std::vector<int32_t> t2 = {1, 7, 7, 0};
  CHECK_GRAD([&](Graph& g,
                 const std::vector<Var>& in) { return cross_entropy(g, in[0], t2.data(), 4, 7); },
             {{4, 5, -2.0f, 2.0f}}, 2);
}

TEST_CASE(
    "ops/cross_entropy_sum: the mean times the count, scored rows counted, and scaled by 1 / "
    "count the mean's gradient bit for bit") {
  const std::vector<int32_t> t = {2, -1, 0, 4, 1, -1, 3};
  CHECK_GRAD(
      [&](Graph& g, const std::vector<Var>& in) {
        return cross_entropy_sum(g, in[0], t.data(), 7).sum;
      },
      {{7, 5, -2.0f, 2.0f}});
  ParamStore store(4);
  Parameter& w = store.add("logits", 7, 5, Role::kCustom);
  fill_normal(w.value, store.rng(), 1.5f);
  Graph gm;
  const Var mean = cross_entropy(gm, gm.param(w), t.data(), 7);
  gm.backward(mean);
  const std::vector<float> grad_mean(w.grad.data, w.grad.data + w.grad.numel());
  store.zero_grad();
  Graph gs;
  const LossSum s = cross_entropy_sum(gs, gs.param(w), t.data(), 7);
  CHECK(s.count == 5);
  CHECK(gs.value(s.sum).data[0] == doctest::Approx(5.0 * gm.value(mean).data[0]).epsilon(1e-6));
  gs.backward(scale(gs, s.sum, 1.0f / 5.0f));
  for (int64_t i = 0; i < w.grad.numel(); ++i) {
    CAPTURE(i);
    CHECK(w.grad.data[i] == grad_mean[static_cast<size_t>(i)]);  // the same factor, once
  }
  // Every row ignored: nothing counted, a sum of 0 and no gradient.
  store.zero_grad();
  const std::vector<int32_t> none(7, -1);
  Graph gn;
  const LossSum n = cross_entropy_sum(gn, gn.param(w), none.data(), 7);
  CHECK(n.count == 0);
  CHECK(gn.value(n.sum).data[0] == 0.0f);
  gn.backward(n.sum);
  for (int64_t i = 0; i < w.grad.numel(); ++i) CHECK(w.grad.data[i] == 0.0f);
  // Its errors name it.
  const std::vector<int32_t> bad = {9, 0, 0, 0, 0, 0, 0};
  Graph gb;
  CHECK_THROWS_WITH(cross_entropy_sum(gb, gb.param(w), bad.data(), 7),
                    doctest::Contains("cross_entropy_sum: target 9 at row 0"));
}

TEST_CASE("ops/grad: dropout in training mode") {
  FdOptions o;
  o.training = true;
  CHECK_GRAD([](Graph& g, const std::vector<Var>& in) { return dropout(g, in[0], 0.3f); }, {{5, 9}},
             1, o);
}

// ---- dropout ----------------------------------------------------------------------------------

TEST_CASE("ops/dropout: identity unless training, mask consistent, scaled, reproducible") {
  ParamStore store(1);
  Parameter& p = store.add("x", 64, 50, Role::kCustom);
  for (int64_t i = 0; i < p.value.numel(); ++i) {
    p.value.data[i] = 2.0f * store.rng().uniform() - 1.0f;
    p.value.data[i] += p.value.data[i] >= 0 ? 0.1f : -0.1f;
  }
  Graph g;
  g.seed = 7;
  g.step = 11;
  {
    Var x = g.param(p);
    CHECK(dropout(g, x, 0.5f).id == x.id);  // eval mode: identity
  }
  g.training = true;
  const float pr = 0.25f;
  auto run = [&](uint64_t step, std::vector<float>* grad) {
    g.reset();
    g.step = step;
    store.zero_grad();
    Var x = g.param(p);
    Var y = dropout(g, x, pr);
    std::vector<float> out = to_vec(g.value(y));
    g.backward(sum(g, y));
    if (grad) *grad = to_vec(p.grad);
    return out;
  };
  std::vector<float> grad;
  const std::vector<float> y1 = run(11, &grad);
  int64_t dropped = 0;
  for (size_t i = 0; i < y1.size(); ++i) {
    if (y1[i] == 0.0f) {
      ++dropped;
      CHECK(grad[i] == 0.0f);
    } else {
      CHECK(grad[i] == doctest::Approx(1.0f / (1.0f - pr)));
      CHECK(y1[i] == doctest::Approx(p.value.data[i] / (1.0f - pr)));
    }
  }
  const double frac = static_cast<double>(dropped) / static_cast<double>(y1.size());
  CHECK(frac > 0.2);
  CHECK(frac < 0.3);
  CHECK(run(11, nullptr) == y1);        // same seed and step: same mask
  CHECK_FALSE(run(12, nullptr) == y1);  // next step: a new mask
  CHECK_THROWS_AS(dropout(g, g.param(p), 1.0f), Error);
}

TEST_CASE("ops/dropout: the inlined mask hash equals hash_uniform bitwise") {
  Rng r(5);
  for (int i = 0; i < 10000; ++i) {
    const uint64_t s = r.next_u64(), a = r.below(1000), b = r.next_u64() >> (i % 64);
    CHECK(kernels::hash_uniform_inline(s, a, b) == hash_uniform(s, a, b));
  }
}

// ---- forward values against scalar references ----------------------------------------------

TEST_CASE("ops/forward: elementwise, norms, softmax, cross_entropy match scalar formulas") {
  const int64_t N = 3, C = 37;
  const std::vector<float> xv = random_vec(N * C, 5, 3.0f);
  const std::vector<float> bv = random_vec(C, 6);
  Graph g;
  Var x = g.constant(xv.data(), N, C);
  Var b = g.constant(bv.data(), 1, C);
  const std::vector<float> ge = to_vec(g.value(gelu(g, x)));
  const std::vector<float> gx = to_vec(g.value(gelu_exact(g, x)));
  const std::vector<float> si = to_vec(g.value(silu(g, x)));
  const std::vector<float> re = to_vec(g.value(relu(g, x)));
  const std::vector<float> ad = to_vec(g.value(add(g, x, b)));
  const std::vector<float> mu = to_vec(g.value(mul(g, x, b)));
  const std::vector<float> ln = to_vec(g.value(layernorm(g, x, b, b)));
  const std::vector<float> rn = to_vec(g.value(rmsnorm(g, x, b)));
  const std::vector<float> sm = to_vec(g.value(softmax(g, x)));
  std::vector<float> ge_r, gx_r, si_r, re_r, ad_r, mu_r, ln_r, rn_r, sm_r;
  for (int64_t r = 0; r < N; ++r) {
    double mean = 0, ms = 0, mx = -1e30, z = 0;
    for (int64_t c = 0; c < C; ++c) {
      const double v = xv[static_cast<size_t>(r * C + c)];
      mean += v / C;
      ms += v * v / C;
      mx = std::max(mx, v);
    }
    double var = 0;
    for (int64_t c = 0; c < C; ++c)
      var += std::pow(xv[static_cast<size_t>(r * C + c)] - mean, 2) / C;
    for (int64_t c = 0; c < C; ++c) z += std::exp(xv[static_cast<size_t>(r * C + c)] - mx);
    for (int64_t c = 0; c < C; ++c) {
      const double v = xv[static_cast<size_t>(r * C + c)], bb = bv[static_cast<size_t>(c)];
      ge_r.push_back(static_cast<float>(
          0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)))));
      gx_r.push_back(static_cast<float>(0.5 * v * (1 + std::erf(v / std::sqrt(2.0)))));
      si_r.push_back(static_cast<float>(v / (1 + std::exp(-v))));
      re_r.push_back(static_cast<float>(v > 0 ? v : 0));
      ad_r.push_back(static_cast<float>(v + bb));
      mu_r.push_back(static_cast<float>(v * bb));
      ln_r.push_back(static_cast<float>((v - mean) / std::sqrt(var + 1e-5) * bb + bb));
      rn_r.push_back(static_cast<float>(v / std::sqrt(ms + 1e-5) * bb));
      sm_r.push_back(static_cast<float>(std::exp(v - mx) / z));
    }
  }
  check_close(ge, ge_r, 1e-5);
  check_close(gx, gx_r, 1e-5);
  check_close(si, si_r, 1e-5);
  check_close(re, re_r, 0.0);
  check_close(ad, ad_r, 0.0);
  check_close(mu, mu_r, 0.0);
  check_close(ln, ln_r, 1e-5);
  check_close(rn, rn_r, 1e-5);
  check_close(sm, sm_r, 1e-6);

  // cross-entropy with an ignored row, and with every row ignored
  const int32_t t[3] = {4, -1, 36};
  Var l = cross_entropy(g, x, t, 3);
  double ref = 0;
  for (int r : {0, 2}) {
    double mx = -1e30, z = 0;
    for (int64_t c = 0; c < C; ++c)
      mx = std::max(mx, static_cast<double>(xv[static_cast<size_t>(r * C + c)]));
    for (int64_t c = 0; c < C; ++c) z += std::exp(xv[static_cast<size_t>(r * C + c)] - mx);
    ref += (mx + std::log(z) - xv[static_cast<size_t>(r * C + t[r])]) / 2;
  }
  CHECK(g.value(l).data[0] == doctest::Approx(ref).epsilon(1e-5));
  const int32_t none[3] = {-1, -1, -1};
  CHECK(g.value(cross_entropy(g, x, none, 3)).data[0] == 0.0f);
  // huge logits stay finite
  const float big[4] = {1000.0f, -1000.0f, 999.0f, 0.0f};
  const int32_t t0 = 0;
  Var lb = cross_entropy(g, g.constant(big, 1, 4), &t0, 1);
  CHECK(g.value(lb).data[0] == doctest::Approx(std::log1p(std::exp(-1.0))).epsilon(1e-4));
}

TEST_CASE("ops/forward: matmul and linear match a naive product at parallel sizes, every layout") {
  // Big enough that the GEMMs split into blocks: tall shapes split rows, wide ones columns.
  struct Shape {
    int64_t N, K, M;
  };
  // Also decoding shapes (1 and 3 rows): matrix-vector products split over the inner
  // dimension (an odd split for K = 200) or the output columns (w transposed). Products
  // with x or dy row-major (partial 32-column panels, row tails, two reduction blocks for
  // K = 400 and N = 500; the bias written with the product, by row and column blocks) take
  // gemm_avx512 when built for AVX-512, as do the weight gradients (A^T packed for K > 128).
  // The kernel path's gemv (gemv.inc) on widths with every tail: 21 and 300 columns (whole
  // stripes, single vectors and scalar columns), 37-wide dot products (lanes and scalars).
  // Products at most one vector wide (7, 5, 3 columns) take gemm_vec's 12-row tiles on the
  // avx2 and portable paths, with row tails (303 and 37 rows) and A^T packed (dW, 140 rows).
  for (const Shape sh :
       {Shape{600, 70, 130}, Shape{64, 80, 1000}, Shape{1, 96, 384}, Shape{3, 200, 100},
        Shape{300, 50, 40}, Shape{500, 400, 20}, Shape{1, 37, 21}, Shape{2, 130, 300},
        Shape{303, 40, 7}, Shape{150, 140, 5}, Shape{37, 20, 3}}) {
    for (bool tw : {false, true}) {
      const int64_t N = sh.N, K = sh.K, M = sh.M;
      CAPTURE(N);
      CAPTURE(M);
      CAPTURE(tw);
      const std::vector<float> xv = random_vec(N * K, 1), wv = random_vec(K * M, 2),
                               bv = random_vec(M, 3);
      const std::vector<float> dyv = random_vec(N * M, 4);
      ParamStore store(1);
      Parameter& x = store.add("x", N, K, Role::kCustom);
      Parameter& w = tw ? store.add("w", M, K, Role::kCustom) : store.add("w", K, M, Role::kCustom);
      Parameter& b = store.add("b", 1, M, Role::kCustom);
      std::memcpy(x.value.data, xv.data(), sizeof(float) * xv.size());
      std::memcpy(b.value.data, bv.data(), sizeof(float) * bv.size());
      auto W = [&](int64_t kk, int64_t mm) -> float& {
        return tw ? w.value.data[mm * K + kk] : w.value.data[kk * M + mm];
      };
      for (int64_t kk = 0; kk < K; ++kk)
        for (int64_t mm = 0; mm < M; ++mm) W(kk, mm) = wv[static_cast<size_t>(kk * M + mm)];
      Graph g;
      Var y = linear(g, g.param(x), g.param(w), g.param(b), tw);
      std::vector<float> yr(static_cast<size_t>(N * M)), dxr(static_cast<size_t>(N * K), 0.0f),
          dwr(static_cast<size_t>(K * M), 0.0f), dbr(static_cast<size_t>(M), 0.0f);
      for (int64_t n = 0; n < N; ++n)
        for (int64_t mm = 0; mm < M; ++mm) {
          double s = bv[static_cast<size_t>(mm)];
          for (int64_t kk = 0; kk < K; ++kk)
            s += static_cast<double>(xv[static_cast<size_t>(n * K + kk)]) * W(kk, mm);
          yr[static_cast<size_t>(n * M + mm)] = static_cast<float>(s);
          const double d = dyv[static_cast<size_t>(n * M + mm)];
          dbr[static_cast<size_t>(mm)] += static_cast<float>(d);
          for (int64_t kk = 0; kk < K; ++kk) {
            dxr[static_cast<size_t>(n * K + kk)] += static_cast<float>(d * W(kk, mm));
            dwr[static_cast<size_t>(kk * M + mm)] +=
                static_cast<float>(d * xv[static_cast<size_t>(n * K + kk)]);
          }
        }
      check_close(to_vec(g.value(y)), yr, 1e-5);
      backward_with_seed(g, y, dyv);
      check_close(to_vec(x.grad), dxr, 1e-4);
      std::vector<float> dw(static_cast<size_t>(K * M));
      for (int64_t kk = 0; kk < K; ++kk)
        for (int64_t mm = 0; mm < M; ++mm)
          dw[static_cast<size_t>(kk * M + mm)] =
              tw ? w.grad.data[mm * K + kk] : w.grad.data[kk * M + mm];
      check_close(dw, dwr, 1e-4);
      check_close(to_vec(b.grad), dbr, 1e-4);
    }
  }
}

// ---- attention -------------------------------------------------------------------------------

TEST_CASE("ops/attention: forward matches a naive implementation") {
  const float slopes[4] = {0.3f, 0.1f, 0.05f, 0.0f};
  std::vector<uint8_t> mask(3 * 19, 1);
  mask[3] = mask[19 + 0] = mask[19 + 18] = mask[38 + 7] = 0;
  const int32_t prompts[3] = {6, 1, 19};  // prefix LM: prompts of 6, 1 and every position
  struct Case {
    int64_t NKV;
    bool causal, slopes, mask, prefix = false;
  };
  for (const Case& c :
       {Case{4, true, false, false}, Case{2, false, false, false}, Case{1, true, true, false},
        Case{2, true, true, true}, Case{4, false, false, true}, Case{2, true, false, false, true},
        Case{1, true, true, true, true}}) {
    CAPTURE(c.NKV);
    CAPTURE(c.causal);
    CAPTURE(c.slopes);
    CAPTURE(c.mask);
    CAPTURE(c.prefix);
    const int64_t B = 3, T = 19, NH = 4, HS = 12;
    const std::vector<float> q = random_vec(B * T * NH * HS, 1, 2.0f);
    const std::vector<float> k = random_vec(B * T * c.NKV * HS, 2, 2.0f);
    const std::vector<float> v = random_vec(B * T * c.NKV * HS, 3);
    AttentionSpec s = spec_of(B, T, NH, c.NKV, HS, c.causal);
    if (c.slopes) s.slopes = slopes;
    if (c.mask) s.key_mask = mask.data();
    if (c.prefix) s.prefix = prompts;
    std::vector<float> w(static_cast<size_t>(B * NH * T * T));
    s.weights_out = w.data();
    Graph g;
    Var y =
        attention(g, g.constant(q.data(), B * T, NH * HS), g.constant(k.data(), B * T, c.NKV * HS),
                  g.constant(v.data(), B * T, c.NKV * HS), s);
    std::vector<float> wr;
    const std::vector<float> ref = naive_attention(q, k, v, B, T, T, NH, c.NKV, HS, c.causal,
                                                   s.slopes, s.key_mask, 0, &wr, s.prefix);
    check_close(to_vec(g.value(y)), ref, 1e-5);
    check_close(w, wr, 1e-5);
    // Without weights_out: the lanes kernels (head sizes up to 64), the same numbers.
    Graph g2;
    s.weights_out = nullptr;
    Var y2 = attention(g2, g2.constant(q.data(), B * T, NH * HS),
                       g2.constant(k.data(), B * T, c.NKV * HS),
                       g2.constant(v.data(), B * T, c.NKV * HS), s);
    check_close(to_vec(g2.value(y2)), ref, 1e-5);
  }
  // Lanes kernels over two query blocks at head size 40, against the naive reference.
  const int64_t B = 2, T = 45, NH = 2, HS = 40;
  const std::vector<float> q = random_vec(B * T * NH * HS, 7, 2.0f),
                           k = random_vec(B * T * NH * HS, 8, 2.0f),
                           v = random_vec(B * T * NH * HS, 9);
  const int32_t long_prompts[2] = {40, 3};  // the first spans both query blocks
  for (const int mode : {0, 1, 2}) {        // causal, bidirectional, prefix LM
    const bool causal = mode != 1;
    CAPTURE(mode);
    AttentionSpec s = spec_of(B, T, NH, NH, HS, causal);
    s.slopes = slopes;
    if (mode == 2) s.prefix = long_prompts;
    Graph g;
    Var y = attention(g, g.constant(q.data(), B * T, NH * HS), g.constant(k.data(), B * T, NH * HS),
                      g.constant(v.data(), B * T, NH * HS), s);
    check_close(to_vec(g.value(y)),
                naive_attention(q, k, v, B, T, T, NH, NH, HS, causal, slopes, nullptr, 0, nullptr,
                                s.prefix),
                1e-5);
  }
}

TEST_CASE("ops/attention: weights rows sum to 1 and are 0 above the diagonal when causal") {
  const int64_t B = 2, T = 33, NH = 3, HS = 8;
  const std::vector<float> q = random_vec(B * T * NH * HS, 4, 3.0f),
                           k = random_vec(B * T * NH * HS, 5, 3.0f),
                           v = random_vec(B * T * NH * HS, 6);
  AttentionSpec s = spec_of(B, T, NH, NH, HS, true);
  std::vector<float> w(static_cast<size_t>(B * NH * T * T), -1.0f);
  s.weights_out = w.data();
  Graph g;
  attention(g, g.constant(q.data(), B * T, NH * HS), g.constant(k.data(), B * T, NH * HS),
            g.constant(v.data(), B * T, NH * HS), s);
  for (int64_t row = 0; row < B * NH * T; ++row) {
    const int64_t i = row % T;
    double total = 0;
    for (int64_t j = 0; j < T; ++j) {
      const float p = w[static_cast<size_t>(row * T + j)];
      if (j > i) CHECK(p == 0.0f);
      else CHECK(p >= 0.0f);
      total += p;
    }
    CHECK(total == doctest::Approx(1.0).epsilon(1e-5));
  }
}

TEST_CASE(
    "ops/attention: a NaN in a query reaches its output row and no other, and a key far below the "
    "others gets weight 0, on every kernel and precision") {
  // Softmax's exp: a NaN score stays NaN (a diverging run shows it), a score 1e4 below the
  // row's maximum underflows to exactly 0 (no NaN from it), in the lanes kernels (heads up to
  // 64 wide, over two query blocks) and the wider ones, in float32 and bf16 graphs.
  const int64_t B = 1, T = 40, NH = 2;
  for (const int64_t HS : {8, 40, 80}) {
    for (const Precision prec : {Precision::float32, Precision::bf16}) {
      CAPTURE(HS);
      CAPTURE(static_cast<int>(prec));
      const int64_t C = NH * HS;
      std::vector<float> q = random_vec(B * T * C, 11), k = random_vec(B * T * C, 12),
                         v = random_vec(B * T * C, 13);
      q[static_cast<size_t>(5 * C)] = std::nanf("");  // query 5, head 0
      // Key 0 of head 1 scores about -1e4 against query 33 (every other score is O(1)).
      for (int64_t d = 0; d < HS; ++d) {
        q[static_cast<size_t>(33 * C + HS + d)] = 100.0f;
        k[static_cast<size_t>(HS + d)] = -100.0f / static_cast<float>(HS);
      }
      Graph g;
      g.precision = prec;
      const AttentionSpec s = spec_of(B, T, NH, NH, HS, true);
      const Tensor y =
          g.value(attention(g, g.constant(q.data(), B * T, C), g.constant(k.data(), B * T, C),
                            g.constant(v.data(), B * T, C), s));
      for (int64_t i = 0; i < T; ++i)
        for (int64_t c = 0; c < C; ++c) {
          const float x = y.data[i * C + c];
          if (i == 5 && c < HS) CHECK(std::isnan(x));
          else CHECK(std::isfinite(x));
        }
      // Query 33 of head 1 without key 0: the same output as with key 0's value changed.
      std::vector<float> v2 = v;
      for (int64_t d = 0; d < HS; ++d) v2[static_cast<size_t>(HS + d)] = 1e3f;
      Graph g2;
      g2.precision = prec;
      const Tensor y2 =
          g2.value(attention(g2, g2.constant(q.data(), B * T, C), g2.constant(k.data(), B * T, C),
                             g2.constant(v2.data(), B * T, C), s));
      for (int64_t d = 0; d < HS; ++d) CHECK(y2.data[33 * C + HS + d] == y.data[33 * C + HS + d]);
    }
  }
}

TEST_CASE("ops/attention: a KV cache fed token by token equals full causal attention") {
  const int64_t B = 2, T = 45, NH = 4, NKV = 2;
  const float slopes[4] = {0.5f, 0.2f, 0.1f, 0.05f};
  // Head sizes of one and of two 16-float vectors in the decoding kernel; prefills (more
  // than its 4 queries) take the lanes kernel, reading the cache's transposed keys: 5
  // queries, then 36 more at offset 5 (two blocks of 32 lanes), and at head size 40 two
  // 16 x 16 transposes of q and out per block.
  for (const auto& shape :
       {std::pair<int64_t, bool>{12, false}, {12, true}, {20, true}, {40, false}}) {
    const int64_t HS = shape.first;
    const bool use_slopes = shape.second;
    CAPTURE(HS);
    CAPTURE(use_slopes);
    const std::vector<float> q = random_vec(B * T * NH * HS, 7),
                             k = random_vec(B * T * NKV * HS, 8),
                             v = random_vec(B * T * NKV * HS, 9);
    Graph g;
    AttentionSpec full = spec_of(B, T, NH, NKV, HS, true);
    if (use_slopes) full.slopes = slopes;
    const std::vector<float> ref = to_vec(g.value(
        attention(g, g.constant(q.data(), B * T, NH * HS), g.constant(k.data(), B * T, NKV * HS),
                  g.constant(v.data(), B * T, NKV * HS), full)));
    // One token per call, or prefills of the given sizes and then one token per call.
    for (const std::vector<int64_t>& prefills : {std::vector<int64_t>{}, {5}, {5, 36}}) {
      CAPTURE(prefills.size());
      KVCache cache;
      cache.init(B, T, NKV * HS);
      std::vector<float> got(ref.size());
      int64_t t0 = 0;
      for (size_t call = 0; t0 < T; ++call) {
        const int64_t n = call < prefills.size() ? prefills[call] : 1;
        std::vector<float> qc, kc, vc;
        for (int64_t b = 0; b < B; ++b)
          for (int64_t t = t0; t < t0 + n; ++t) {
            qc.insert(qc.end(), q.begin() + (b * T + t) * NH * HS,
                      q.begin() + (b * T + t + 1) * NH * HS);
            kc.insert(kc.end(), k.begin() + (b * T + t) * NKV * HS,
                      k.begin() + (b * T + t + 1) * NKV * HS);
            vc.insert(vc.end(), v.begin() + (b * T + t) * NKV * HS,
                      v.begin() + (b * T + t + 1) * NKV * HS);
          }
        AttentionSpec s = spec_of(B, n, NH, NKV, HS, true);
        if (use_slopes) s.slopes = slopes;
        s.cache = &cache;
        g.reset();
        NoGrad ng(g);
        Var y = attention(g, g.constant(qc.data(), B * n, NH * HS),
                          g.constant(kc.data(), B * n, NKV * HS),
                          g.constant(vc.data(), B * n, NKV * HS), s);
        CHECK_FALSE(g.requires_grad(y));
        for (int64_t b = 0; b < B; ++b)
          std::memcpy(got.data() + (b * T + t0) * NH * HS, g.value(y).row(b * n),
                      sizeof(float) * static_cast<size_t>(n * NH * HS));
        t0 += n;
        CHECK(cache.length == t0);
      }
      check_close(got, ref, 1e-6);
      // The cache is full now.
      AttentionSpec s = spec_of(B, 1, NH, NKV, HS, true);
      s.cache = &cache;
      g.reset();
      CHECK_THROWS_AS(
          attention(g, g.constant(q.data(), B, NH * HS), g.constant(k.data(), B, NKV * HS),
                    g.constant(v.data(), B, NKV * HS), s),
          Error);
    }
  }
}

// ---- rope ------------------------------------------------------------------------------------

TEST_CASE("ops/rope: preserves every head's norm, pos0 continues a longer sequence") {
  const int64_t B = 2, T = 9, NH = 3, HS = 8;
  const std::vector<float> xv = random_vec(B * T * NH * HS, 11);
  Graph g;
  Var x = g.constant(xv.data(), B * T, NH * HS);
  const Tensor y = g.value(rope(g, x, B, T, NH, HS, 0, 10000.0f));
  for (int64_t r = 0; r < B * T; ++r)
    for (int64_t h = 0; h < NH; ++h) {
      double n0 = 0, n1 = 0;
      for (int64_t d = 0; d < HS; ++d) {
        n0 += std::pow(xv[static_cast<size_t>(r * NH * HS + h * HS + d)], 2);
        n1 += std::pow(y.row(r)[h * HS + d], 2);
      }
      CHECK(n1 == doctest::Approx(n0).epsilon(1e-5));
    }
  // Position 0 is the identity; rows t >= 4 equal a call on the tail with pos0 = 4.
  for (int64_t c = 0; c < NH * HS; ++c) CHECK(y.row(0)[c] == xv[static_cast<size_t>(c)]);
  std::vector<float> tail;
  for (int64_t b = 0; b < B; ++b)
    tail.insert(tail.end(), xv.begin() + (b * T + 4) * NH * HS, xv.begin() + (b * T + T) * NH * HS);
  const Tensor yt = g.value(
      rope(g, g.constant(tail.data(), B * (T - 4), NH * HS), B, T - 4, NH, HS, 4, 10000.0f));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 4; t < T; ++t)
      for (int64_t c = 0; c < NH * HS; ++c)
        CHECK(yt.row(b * (T - 4) + t - 4)[c] == doctest::Approx(y.row(b * T + t)[c]).epsilon(1e-6));
  CHECK_THROWS_AS(rope(g, x, B, T, NH * HS / 3, 3, 0, 10000.0f), Error);  // odd head size
}

// ---- determinism across thread counts ----------------------------------------------------------

namespace {
// Forward and backward of linear + attention; returns every value and gradient.
std::vector<float> run_linear_attention() {
  const int64_t B = 4, T = 64, NH = 4, NKV = 2, HS = 16, C = NH * HS;
  ParamStore store(3);
  Parameter& x = add_input(store, "x", B * T, C, 1.0f);
  Parameter& wq = add_input(store, "wq", C, C, 0.2f);
  Parameter& wkv = add_input(store, "wkv", C, 2 * NKV * HS, 0.2f);
  Parameter& bkv = add_input(store, "bkv", 1, 2 * NKV * HS, 0.2f);
  Parameter& wo = add_input(store, "wo", 384, C, 0.2f);
  Graph g;
  Var xv = g.param(x);
  Var q = linear(g, xv, g.param(wq));
  Var kv = linear(g, xv, g.param(wkv), g.param(bkv));
  Var k = slice_cols(g, kv, 0, NKV * HS);
  Var v = slice_cols(g, kv, NKV * HS, NKV * HS);
  Var a = attention(g, q, k, v, spec_of(B, T, NH, NKV, HS, true));
  Var y = linear(g, a, g.param(wo), Var{}, true);  // (B*T, 384)
  Var big = linear(g, g.param(x), g.param(wo), Var{}, true);
  Var loss = sum(g, mul(g, add(g, y, big), y));
  g.backward(loss);
  std::vector<float> all = to_vec(g.value(y));
  for (Parameter* p : store.all()) {
    const std::vector<float> gv = to_vec(p->grad);
    all.insert(all.end(), gv.begin(), gv.end());
  }
  return all;
}
}  // namespace

TEST_CASE("ops/determinism: linear and attention are bitwise identical with 1 and 2 threads") {
  std::vector<float> one, two;
  tbb::task_arena(1).execute([&] { one = run_linear_attention(); });
  tbb::task_arena(2).execute([&] { two = run_linear_attention(); });
  REQUIRE(one.size() == two.size());
  CHECK(std::memcmp(one.data(), two.data(), sizeof(float) * one.size()) == 0);
  // And the big GEMM alone at the benchmark shape.
  const int64_t N = 2048, K = 96, M = 384;
  const std::vector<float> xv = random_vec(N * K, 1), wv = random_vec(K * M, 2);
  auto gemm = [&] {
    ParamStore store(1);
    Parameter& x = store.add("x", N, K, Role::kCustom);
    Parameter& w = store.add("w", K, M, Role::kCustom);
    std::memcpy(x.value.data, xv.data(), sizeof(float) * xv.size());
    std::memcpy(w.value.data, wv.data(), sizeof(float) * wv.size());
    Graph g;
    Var y = linear(g, g.param(x), g.param(w));
    g.backward(sum(g, mul(g, y, y)));
    std::vector<float> r = to_vec(g.value(y)), gx = to_vec(x.grad), gw = to_vec(w.grad);
    r.insert(r.end(), gx.begin(), gx.end());
    r.insert(r.end(), gw.begin(), gw.end());
    return r;
  };
  tbb::task_arena(1).execute([&] { one = gemm(); });
  tbb::task_arena(2).execute([&] { two = gemm(); });
  CHECK(std::memcmp(one.data(), two.data(), sizeof(float) * one.size()) == 0);
  // Decoding shapes: matrix-vector products split over output columns, w plain and transposed.
  for (int64_t rows : {1, 3}) {
    for (bool tw : {false, true}) {
      CAPTURE(rows);
      CAPTURE(tw);
      auto gemv = [&] {
        Graph g;
        Var w = tw ? g.constant(wv.data(), M, K) : g.constant(wv.data(), K, M);
        return to_vec(g.value(linear(g, g.constant(xv.data(), rows, K), w, Var{}, tw)));
      };
      tbb::task_arena(1).execute([&] { one = gemv(); });
      tbb::task_arena(2).execute([&] { two = gemv(); });
      CHECK(std::memcmp(one.data(), two.data(), sizeof(float) * one.size()) == 0);
    }
  }
}

TEST_CASE("ops/scratch: two threads asking for different sizes stay near the largest request") {
  // Each thread syncs to the largest size any thread holds (workers after every job, the
  // caller here as Graph::reset does). Syncing once doubled as well, and two threads
  // with different demands then ratcheted each other up until allocation failed.
  std::atomic<size_t> largest{0};
  tbb::task_arena(2).execute([&] {
    for (int i = 0; i < 200; ++i) {
      kernels::parallel_chunks(2, 1, [&](int64_t c0, int64_t) {
        kernels::thread_scratch(kernels::kSlotMisc,
                                static_cast<size_t>(c0 == 0 ? 1000 + i : 1500 + i));
        size_t seen = largest.load();
        const size_t mine = kernels::thread_scratch_size(kernels::kSlotMisc);
        while (mine > seen && !largest.compare_exchange_weak(seen, mine)) {
        }
      });
      kernels::sync_scratch();
    }
  });
  CHECK(largest.load() >= 1699);
  CHECK(largest.load() <= 2 * 1700 + 16);
}

TEST_CASE("ops/parallel_chunks: every chunk once, fixed threads for few chunks, nesting, errors") {
  std::thread::id caller = std::this_thread::get_id();
  tbb::task_arena(2).execute([&] {
    for (int64_t n : {1, 2, 7, 64, 1000}) {
      for (int64_t chunk : {1, 3, 500}) {
        CAPTURE(n);
        CAPTURE(chunk);
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        kernels::parallel_chunks(n, chunk, [&](int64_t b, int64_t e) {
          CHECK(e - b <= chunk);
          CHECK(b % chunk == 0);
          for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
        });
        for (auto& h : hits) CHECK(h.load() == 1);
      }
    }
    // Two chunks on two threads: chunk 0 on the caller, chunk 1 always on the same other
    // thread (so that its data stays in that core's cache), and a loop nested in a
    // chunk runs on that chunk's thread.
    std::thread::id first;
    for (int rep = 0; rep < 50; ++rep) {
      std::thread::id ids[2], nested[2];
      kernels::parallel_chunks(2, 1, [&](int64_t b, int64_t) {
        ids[b] = std::this_thread::get_id();
        CHECK(kernels::in_parallel_region());
        kernels::parallel_chunks(4, 1,
                                 [&](int64_t, int64_t) { nested[b] = std::this_thread::get_id(); });
      });
      CHECK(ids[0] == caller);
      CHECK(ids[1] != caller);
      if (rep == 0) first = ids[1];
      CHECK(ids[1] == first);
      CHECK(nested[0] == ids[0]);
      CHECK(nested[1] == ids[1]);
    }
    CHECK_FALSE(kernels::in_parallel_region());
    // An exception in any chunk reaches the caller, and the threads stay usable.
    for (int64_t bad : {0, 1, 5}) {
      CHECK_THROWS_WITH(kernels::parallel_chunks(8, 1,
                                                 [&](int64_t b, int64_t) {
                                                   if (b == bad) throw Error("chunk failed");
                                                 }),
                        "chunk failed");
    }
    std::atomic<int64_t> total{0};
    kernels::parallel_chunks(100, 10, [&](int64_t b, int64_t e) { total += e - b; });
    CHECK(total.load() == 100);
    // A forked child (which has none of the parent's threads) runs parallel loops too.
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      std::atomic<int64_t> t{0};
      kernels::parallel_chunks(2, 1, [&](int64_t b, int64_t e) { t += e - b; });
      kernels::parallel_chunks(100, 10, [&](int64_t b, int64_t e) { t += e - b; });
      _exit(t.load() == 102 ? 0 : 1);
    }
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  });
}

// ---- errors ------------------------------------------------------------------------------------

TEST_CASE("ops/errors: shape mismatches and bad ids name the shapes and values") {
  Graph g;
  Var a = g.input(4, 3), b = g.input(5, 2);
  try {
    matmul(g, a, b);
    FAIL("no error");
  } catch (const Error& e) {
    const std::string m = e.what();
    CHECK(m.find("matmul") != std::string::npos);
    CHECK(m.find("(4, 3)") != std::string::npos);
    CHECK(m.find("(5, 2)") != std::string::npos);
  }
  CHECK_THROWS_AS(add(g, a, b), Error);
  CHECK_THROWS_AS(mul(g, a, g.input(1, 4)), Error);
  CHECK_THROWS_AS(linear(g, a, g.input(3, 2), g.input(1, 3)), Error);
  CHECK_THROWS_AS(layernorm(g, a, g.input(1, 4), Var{}), Error);
  CHECK_THROWS_AS(slice_cols(g, a, 2, 2), Error);
  CHECK_THROWS_AS(attention(g, a, a, a, spec_of(1, 4, 2, 2, 2, true)), Error);  // 3 != NH*HS
  CHECK_THROWS_AS(
      attention(g, g.input(4, 6), g.input(4, 6), g.input(4, 6), spec_of(1, 4, 3, 2, 2, true)),
      Error);  // NKV does not divide NH
  const int32_t ids[2] = {1, 4};
  try {
    embedding(g, a, ids, 2);
    FAIL("no error");
  } catch (const Error& e) {
    const std::string m = e.what();
    CHECK(m.find("id 4") != std::string::npos);
    CHECK(m.find("4 rows") != std::string::npos);
  }
  const int32_t bad[4] = {0, 1, 3, -1};
  CHECK_THROWS_AS(cross_entropy(g, a, bad, 4), Error);  // 3 >= V = 3
  CHECK_THROWS_AS(cross_entropy(g, a, bad, 3), Error);  // wrong count
  CHECK_THROWS_AS(matmul(g, a, Var{}), Error);
}
