// Values' lifetimes (ablate/graph.hpp): a step follows the plan an earlier step of the same
// tape made, giving values back after their last read and keeping bf16 products' inputs as
// bits, with the results of a step that keeps every value.
#include <doctest/doctest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "ablate/error.hpp"
#include "ablate/graph.hpp"
#include "ablate/ops.hpp"
#include "ablate/tensor.hpp"
#include "ops/kernels.hpp"

using namespace ablate;

namespace {

std::vector<float> randn(size_t n, uint64_t seed, float scale = 1.0f) {
  Rng r(seed);
  std::vector<float> v(n);
  for (float& x : v) x = scale * r.normal();
  return v;
}

// A two-layer pre-norm block and a head: the ops a transformer's values go through.
struct Net {
  static constexpr int64_t N = 64, C = 32, V = 24;
  ParamStore store{3};
  Parameter *g1, *w1, *w2, *g2, *head;
  std::vector<float> x = randn(static_cast<size_t>(N * C), 7);
  std::vector<int32_t> targets;
  Net() {
    auto add = [&](const char* name, int64_t r, int64_t c, float scale, uint64_t seed) {
      Parameter& p = store.add(name, r, c, Role::kCustom);
      const std::vector<float> v = randn(static_cast<size_t>(r * c), seed, scale);
      std::copy(v.begin(), v.end(), p.value.data);
      return &p;
    };
    g1 = add("g1", 1, C, 0.1f, 1);
    w1 = add("w1", C, 4 * C, 0.2f, 2);
    w2 = add("w2", 4 * C, C, 0.1f, 3);
    g2 = add("g2", 1, C, 0.1f, 4);
    head = add("head", C, V, 0.2f, 5);
    for (int64_t i = 0; i < N; ++i) targets.push_back(static_cast<int32_t>((i * 7) % V));
  }
  // The loss; `mid` gets the FFN's hidden activation (gelu's output).
  Var forward(Graph& g, Var* mid = nullptr) {
    Var h = g.constant(x.data(), N, C);
    for (int layer = 0; layer < 2; ++layer) {
      Var a = gelu(g, linear(g, layernorm(g, h, g.param(*g1), Var{}), g.param(*w1)));
      if (mid) *mid = a;
      h = add(g, h, linear(g, a, g.param(*w2)));
    }
    return cross_entropy(g, linear(g, layernorm(g, h, g.param(*g2), Var{}), g.param(*head)),
                         targets.data(), N);
  }
  std::vector<float> grads() {
    std::vector<float> all;
    for (Parameter* p : store.all())
      all.insert(all.end(), p->grad.data, p->grad.data + p->grad.numel());
    store.zero_grad();
    return all;
  }
  // One step on g: the loss, the parameters' gradients and the arena's floats it used.
  struct Step {
    float loss;
    std::vector<float> grads;
    size_t bytes;
  };
  Step step(Graph& g, Var* mid = nullptr) {
    g.reset();
    Var loss = forward(g, mid);
    const float l = g.value(loss).data[0];
    g.backward(loss);
    return {l, grads(), g.step_bytes()};
  }
};

}  // namespace

TEST_CASE(
    "graph/lifetimes: a planned step gives values back and keeps bf16 products' inputs as bits, "
    "with the results of the step that planned it bitwise") {
  for (Precision p : {Precision::float32, Precision::bf16}) {
    CAPTURE(precision_name(p));
    Net net;
    Graph g;
    g.precision = p;
    CHECK_FALSE(g.planned());
    const Net::Step first = net.step(g);  // keeps every value, and plans the next
    g.reset();
    CHECK(g.planned());
    for (int again = 0; again < 2; ++again) {
      const Net::Step s = net.step(g);
      CHECK(s.loss == first.loss);
      CHECK(s.grads == first.grads);
      // Each layer gives back its second linear's output (add's backward reads no value),
      // 4 N C floats with the gelu's output as bits in bf16.
      const size_t one = sizeof(float) * Net::N * Net::C;
      CHECK(s.bytes + (p == Precision::bf16 ? 4 : 1) * one <= first.bytes);
    }
  }
  // Under NoGrad no backward reads anything: each value goes after its last reader.
  Net net;
  Graph g;
  NoGrad ng(g);
  g.reset();
  const float l0 = g.value(net.forward(g)).data[0];
  const size_t kept = g.step_bytes();
  g.reset();
  CHECK(g.planned());
  CHECK(g.value(net.forward(g)).data[0] == l0);
  CHECK(g.step_bytes() * 3 < kept * 2);
}

TEST_CASE(
    "graph/lifetimes: reading a value the plan gave back is an error naming it, and bits read "
    "through value() come back as their bf16 rounding") {
  {
    Net net;
    Graph g;
    g.precision = Precision::bf16;
    Var mid;
    net.step(g, &mid);
    // (Graph::node reads without telling the plan.)
    const Tensor& first = g.node(mid).value;
    std::vector<float> rounded(first.data, first.data + first.numel());
    kernels::round_to_bf16_parallel(rounded.data(), static_cast<int64_t>(rounded.size()),
                                    rounded.data());
    g.reset();
    g.value(net.forward(g, &mid));
    // The last layer's gelu output waits as bits for its product's backward.
    CHECK(g.node(mid).value.data == nullptr);
    const Tensor& m = g.value(mid);
    CHECK(std::vector<float>(m.data, m.data + m.numel()) == rounded);
  }
  // float32: y is read by sum, whose backward reads no value, and given back after it.
  const std::vector<float> xv = randn(64, 1);
  Graph g;
  Var y;
  auto forward = [&] {
    g.reset();
    y = gelu(g, g.constant(xv.data(), 8, 8));
    return scale(g, sum(g, y), 0.5f);
  };
  g.value(forward());
  g.value(forward());
  CHECK_THROWS_WITH(g.value(y), doctest::Contains("(gelu) is read through Graph::value() after "
                                                  "this step's plan gave it back"));
  g.value(forward());
  CHECK_THROWS_WITH(scale(g, y, 2.0f), doctest::Contains("value of node 1 (gelu) is read"));
}

TEST_CASE(
    "graph/lifetimes: a step whose tape departs from its plan stops following it, and "
    "tape_depends_on_data() keeps the values from there on") {
  const std::vector<float> xv = randn(8 * 16, 3);
  // x, then `branches` scalings of it added up: x's last reader depends on the data, and no
  // backward reads x (scale's and add's read no value).
  auto forward = [&](Graph& g, int branches, bool declared) {
    Var x = gelu(g, g.constant(xv.data(), 8, 16));
    Var y = scale(g, x, 0.5f);
    if (declared) g.tape_depends_on_data();
    for (int b = 0; b < branches; ++b) y = add(g, y, scale(g, x, static_cast<float>(b + 1)));
    return sum(g, mul(g, y, y));
  };
  auto run = [&](Graph& g, int branches, bool declared) {
    g.reset();
    return g.value(forward(g, branches, declared)).data[0];
  };
  auto fresh = [&](int branches) {
    Graph g;
    return run(g, branches, false);
  };
  {
    Graph g;
    run(g, 3, false);
    CHECK(run(g, 1, false) == fresh(1));  // departs at the second branch: keeps from there
    CHECK(run(g, 1, false) == fresh(1));  // planned by the step of one branch
    CHECK(run(g, 3, true) == fresh(3));
    CHECK(run(g, 1, true) == fresh(1));
    CHECK(run(g, 3, true) == fresh(3));  // its plan keeps x from the declaration on
  }
  {
    // Undeclared, the tape of one branch plans x given back before a second branch reads it.
    Graph g;
    run(g, 1, false);
    CHECK_THROWS_WITH(run(g, 2, false), doctest::Contains("value of node 1 (gelu) is read"));
  }
}

TEST_CASE(
    "graph/lifetimes: attention's fused q, k, v wait as bf16 bits in a bf16 step and backward "
    "reads them back to the first step's gradients") {
  // y = attention(qkv(x)) on heads of 8 (the lanes kernels) and of 72 (wider); loss = sum(y * y)
  // / 2. The first step keeps qkv's float32 value; planned steps keep its bf16 bits, which the
  // kernels read as they are (the dot product's path) or widened.
  const int64_t B = 2, T = 40, NH = 2;
  for (const int64_t HS : {8, 72}) {
    CAPTURE(HS);
    const int64_t C = NH * HS, N = B * T;
    const std::vector<float> xv = randn(static_cast<size_t>(N * C), 21);
    ParamStore store(1);
    Parameter& w = store.add("w", C, 3 * C, Role::kCustom);
    const std::vector<float> wv = randn(static_cast<size_t>(3 * C * C), 22, 0.2f);
    std::copy(wv.begin(), wv.end(), w.value.data);
    AttentionSpec spec;
    spec.batch = B, spec.time = T, spec.n_heads = spec.n_kv_heads = NH, spec.head_size = HS;
    spec.q_col = 0, spec.k_col = C, spec.v_col = 2 * C;
    Graph g;
    g.precision = Precision::bf16;
    std::vector<std::vector<float>> grads;
    for (int step = 0; step < 3; ++step) {
      g.reset();
      const Var qkv = linear(g, g.constant(xv.data(), N, C), g.param(w));
      const Var y = attention(g, qkv, qkv, qkv, spec);
      const Var loss = scale(g, sum(g, mul(g, y, y)), 0.5f);
      if (step > 0) CHECK(kernels::rounded_reader(g, qkv.id).bits != nullptr);
      g.backward(loss);
      grads.emplace_back(w.grad.data, w.grad.data + w.grad.numel());
      store.zero_grad();
    }
    CHECK(grads[1] == grads[0]);
    CHECK(grads[2] == grads[0]);
  }
}

TEST_CASE("graph/lifetimes: ABLATE_KEEP_ACTIVATIONS=1 keeps every value") {
  Net net;
  ::setenv("ABLATE_KEEP_ACTIVATIONS", "1", 1);
  Graph keep;
  ::unsetenv("ABLATE_KEEP_ACTIVATIONS");
  const Net::Step a = net.step(keep), b = net.step(keep);
  CHECK_FALSE(keep.planned());
  CHECK(a.bytes == b.bytes);
  CHECK(a.grads == b.grads);
}

TEST_CASE(
    "graph/lifetimes: what backward reads of norms, activations and products waits as bf16 "
    "bits in a bf16 step, as float32 in a float32 one, read back without rounding them again, "
    "and ReLU keeps its output, not its input") {
  const int64_t N = 16, C = 24;
  const std::vector<float> xv = randn(static_cast<size_t>(N * C), 11);
  ParamStore store(1);
  Parameter& w = store.add("w", C, C, Role::kCustom);
  const std::vector<float> wv = randn(static_cast<size_t>(C * C), 12, 0.3f);
  std::copy(wv.begin(), wv.end(), w.value.data);
  // h = x w; loss = sum(relu(gelu(layernorm(h) w) w)); v[]: h, layernorm's output, gelu's
  // input, gelu's output (relu's input) and relu's output.
  auto forward = [&](Graph& g, Var* v) {
    v[0] = linear(g, g.constant(xv.data(), N, C), g.param(w));
    v[1] = layernorm(g, v[0], Var{}, Var{});
    v[2] = linear(g, v[1], g.param(w));
    v[3] = gelu(g, v[2]);
    v[4] = relu(g, linear(g, v[3], g.param(w)));
    return scale(g, sum(g, v[4]), 0.5f);
  };
  for (Precision p : {Precision::float32, Precision::bf16}) {
    CAPTURE(precision_name(p));
    Graph g;
    g.precision = p;
    Var v[5];
    std::vector<std::vector<float>> first(5);
    g.reset();
    Var loss = forward(g, v);
    for (int k = 0; k < 5; ++k) {
      const Tensor& t = g.node(v[k]).value;
      first[k].assign(t.data, t.data + t.numel());
      if (p == Precision::bf16)
        kernels::round_to_bf16_parallel(first[k].data(), t.numel(), first[k].data());
      // A float32 value: a bf16 graph's ops read a rounded copy of it.
      CHECK((kernels::rounded_reader(g, v[k].id).round != nullptr) == (p == Precision::bf16));
    }
    if (p == Precision::bf16) {
      const float* r = kernels::bf16_rounded(g, kernels::Bf16Buffer::x, v[1].id);
      CHECK(r != g.node(v[1]).value.data);
      CHECK(std::vector<float>(r, r + g.node(v[1]).value.numel()) == first[1]);
    }
    g.backward(loss);
    const std::vector<float> grad(w.grad.data, w.grad.data + w.grad.numel());
    store.zero_grad();
    g.reset();
    REQUIRE(g.planned());
    loss = forward(g, v);
    const bool bits = p == Precision::bf16;
    // Read by backward: h (layernorm's), gelu's input and relu's output; the products' inputs
    // (layernorm's and gelu's outputs) too. Their backward passes read the bits as they wait
    // (the gradients below are the first step's, which read rounded float32 copies).
    for (int k : {0, 1, 2, 3, 4}) {
      CAPTURE(k);
      if (k == 3 && !bits) continue;  // gelu's output: the product's float32 input
      CHECK((g.node(v[k]).value.data == nullptr) == bits);
      if (bits) CHECK(kernels::rounded_reader(g, v[k].id).bits != nullptr);
    }
    g.backward(loss);
    CHECK(std::vector<float>(w.grad.data, w.grad.data + w.grad.numel()) == grad);
    store.zero_grad();
    // Read through value(), bits come back as the bf16 rounding of the first step's values.
    g.reset();
    loss = forward(g, v);
    for (int k = 0; k < 5; ++k) {
      CAPTURE(k);
      const Tensor& t = g.value(v[k]);
      CHECK(std::vector<float>(t.data, t.data + t.numel()) == first[k]);
      // Widened from bits, the floats are bf16 values: ops read them in place, unrounded.
      const kernels::RoundedReader r = kernels::rounded_reader(g, v[k].id);
      CHECK((!r.round && !r.bits && r.x == t.data));
      if (bits) CHECK(kernels::bf16_rounded(g, kernels::Bf16Buffer::x, v[k].id) == t.data);
    }
  }
  // relu's input: no backward reads it (ReLU reads its output), so it goes after relu reads it.
  store.zero_grad();
  Graph g;
  Var x;
  auto forward_relu = [&] {
    g.reset();
    x = linear(g, g.constant(xv.data(), N, C), g.param(w));
    Var y = relu(g, x);
    Var loss = sum(g, mul(g, y, y));
    g.backward(loss);
    return g.value(loss).data[0];
  };
  forward_relu();
  forward_relu();
  CHECK_THROWS_WITH(g.value(x), doctest::Contains("(linear) is read through Graph::value() after"));
}

TEST_CASE(
    "graph/profile: a planned bf16 step's conversions of kept values to bits have their own "
    "entry, one call each but for the products' inputs, and a float32 step has none") {
  for (Precision p : {Precision::float32, Precision::bf16}) {
    CAPTURE(precision_name(p));
    Net net;
    Graph g;
    g.precision = p;
    const Net::Step first = net.step(g);  // plans the next
    OpProfile prof;
    g.profile = &prof;
    g.reset();
    const Var loss = net.forward(g);
    // The values this step's plan turned into bits after their last forward read.
    int64_t bits = 0;
    for (int id = 0; id < static_cast<int>(g.num_nodes()); ++id)
      bits += kernels::rounded_reader(g, id).bits != nullptr ? 1 : 0;
    g.backward(loss);
    CHECK(net.grads() == first.grads);
    if (p == Precision::float32) {
      CHECK(bits == 0);
      CHECK(prof.ops.count(kBf16BitsOp) == 0);
      continue;
    }
    // Per layer layernorm's input, gelu's and the two products' inputs; the head's input.
    CHECK(bits == 9);
    REQUIRE(prof.ops.count(kBf16BitsOp) == 1);
    // The five products round their inputs into the bits those wait in (Graph::bits_now);
    // the rest are converted as their floats go back.
    CHECK(prof.ops.at(kBf16BitsOp).calls == bits - 5);
    CHECK(prof.ops.at(kBf16BitsOp).forward_s > 0);
    // The ops' own entries count their nodes, as in float32.
    CHECK(prof.ops.at("add").calls == 2);
    CHECK(prof.ops.at("linear").calls == 5);
  }
}

TEST_CASE(
    "graph/lifetimes: a gated product's inputs wait as bf16 bits and mul's backward reads them "
    "as they wait (nothing widened), to the first step's gradients, with a broadcast row too") {
  const int64_t N = 48, C = 40;
  const std::vector<float> xv = randn(static_cast<size_t>(N * C), 31);
  ParamStore store(1);
  auto add = [&](const char* name, int64_t r, int64_t c, uint64_t seed) {
    Parameter& p = store.add(name, r, c, Role::kCustom);
    const std::vector<float> v = randn(static_cast<size_t>(r * c), seed, 0.3f);
    std::copy(v.begin(), v.end(), p.value.data);
    return &p;
  };
  Parameter *wg = add("wg", C, C, 32), *wu = add("wu", C, C, 33), *wo = add("wo", C, C, 34),
            *gain = add("gain", 1, C, 35);
  // SwiGLU's shape: linear(gelu(x wg) * (x wu)) wo, then (broadcast) times a gain row.
  for (const bool broadcast : {false, true}) {
    CAPTURE(broadcast);
    Var gate, up;
    auto forward = [&](Graph& g) {
      const Var x = g.constant(xv.data(), N, C);
      gate = gelu(g, linear(g, x, g.param(*wg)));
      up = linear(g, x, g.param(*wu));
      Var y = linear(g, mul(g, gate, up), g.param(*wo));
      if (broadcast) y = mul(g, y, g.param(*gain));
      return sum(g, mul(g, y, y));
    };
    for (Precision p : {Precision::float32, Precision::bf16}) {
      CAPTURE(precision_name(p));
      Graph g;
      g.precision = p;
      std::vector<std::vector<float>> grads;
      for (int step = 0; step < 3; ++step) {
        OpProfile prof;
        if (step == 2) g.profile = &prof;
        g.reset();
        const Var loss = forward(g);
        if (step > 0 && p == Precision::bf16) {
          CHECK(kernels::rounded_reader(g, gate.id).bits != nullptr);
          CHECK(kernels::rounded_reader(g, up.id).bits != nullptr);
        }
        g.backward(loss);
        for (Parameter* q : store.all())
          grads.emplace_back(q->grad.data, q->grad.data + q->grad.numel());
        store.zero_grad();
        // The planned bf16 step widens nothing for the unbroadcast products (the output
        // times a gain row reads its input widened).
        if (step == 2 && p == Precision::bf16) {
          REQUIRE(prof.ops.count(kBf16BitsOp) == 1);
          if (broadcast) CHECK(prof.ops.at(kBf16BitsOp).backward_s > 0);
          else CHECK(prof.ops.at(kBf16BitsOp).backward_s == 0);
        }
      }
      const size_t k = store.all().size();
      for (size_t i = 0; i < k; ++i) {
        CAPTURE(i);
        CHECK(grads[k + i] == grads[i]);
        CHECK(grads[2 * k + i] == grads[i]);
      }
    }
  }
}
