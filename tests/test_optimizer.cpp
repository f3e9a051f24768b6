// Conformance of every "optimizer" variant (a quadratic's loss decreases, determinism,
// state names, bitwise resume from the state buffers, options), plus single steps of
// AdamW, Adam, SGD and Lion against values computed by hand.
#include <doctest/doctest.h>

#include <map>
#include <set>

#include "ablate/optimizer.hpp"
#include "plugin_test_util.hpp"

using ablate::Optimizer;

namespace {

ptest::Built<Optimizer> make(const std::string& yaml) { return ptest::build<Optimizer>(yaml, ptest::dims(), 7, "train.optimizer"); }

// One scalar parameter p = 1 (decayed or not), stepped with the given gradients.
std::pair<float, std::vector<float>> steps(const std::string& yaml, bool decay, std::vector<float> grads, float lr = 0.1f) {
  ablate::ParamStore s(1);
  ablate::Parameter& p = s.add("p", 1, 1, ablate::Init::kOnes, 0.0f, decay);
  auto o = make(yaml);
  o->init({&p});
  int64_t t = 1;
  for (float g : grads) {
    p.grad.data[0] = g;
    o->step({&p}, lr, t++);
  }
  std::vector<float> state;
  for (const auto& b : o->state()) state.push_back((*b.data)[0]);
  return {p.value.data[0], state};
}

}  // namespace

TEST_CASE("optimizer/conformance: every variant minimises a quadratic and resumes bitwise from its state") {
  ptest::check_conformance("optimizer");
}

TEST_CASE("optimizer/adamw: two steps by hand (lr 0.1, betas 0.9/0.999, wd 0.1, decoupled)") {
  const std::string y = "{type: adamw, weight_decay: 0.1}";
  // Step 1: p = 1 * (1 - 0.01) = 0.99; m = 0.05, v = 0.00025; m^ = 0.5, v^ = 0.25; p -= 0.1 * 0.5 / 0.5.
  auto [p1, s1] = steps(y, true, {0.5f});
  CHECK(p1 == doctest::Approx(0.89).epsilon(1e-6));
  REQUIRE(s1.size() == 2);
  CHECK(s1[0] == doctest::Approx(0.05));
  CHECK(s1[1] == doctest::Approx(0.00025));
  CHECK(steps(y, false, {0.5f}).first == doctest::Approx(0.90).epsilon(1e-6));  // no decay on this one
  // Step 2 with g = -0.25: m = 0.02, v = 0.00031225; bias corrections 0.19 and 0.001999.
  auto [p2, s2] = steps(y, true, {0.5f, -0.25f});
  CHECK(p2 == doctest::Approx(0.8544662987).epsilon(1e-6));
  CHECK(s2[0] == doctest::Approx(0.02));
  CHECK(s2[1] == doctest::Approx(0.00031225));
  CHECK(steps(y, false, {0.5f, -0.25f}).first == doctest::Approx(0.8733662987).epsilon(1e-6));
  CHECK(make("{type: adamw, betas: [0.9, 0.95], lr: 6e-4}")->base_lr() == doctest::Approx(6e-4));
  CHECK_THROWS_AS(make("{type: adamw, betas: [0.9]}"), ablate::ConfigError);
  CHECK_THROWS_AS(make("{type: adamw, betas: [0.9, 1.0]}"), ablate::ConfigError);
}

TEST_CASE("optimizer/adam: weight decay is an L2 term in the gradient") {
  // g' = 0.5 + 0.1 * 1 = 0.6; the first Adam step moves by lr: p = 0.9.
  CHECK(steps("{type: adam, weight_decay: 0.1}", true, {0.5f}).first == doctest::Approx(0.9).epsilon(1e-6));
  // Step 2 with g = -0.25 on p = 0.9: g' = -0.16; m = 0.9*0.06 - 0.016 = 0.038; v = 0.999*0.00036 + 0.001*0.0256.
  const double m = 0.038, v = 0.999 * 0.00036 + 0.001 * 0.0256;
  const double p = 0.9 - 0.1 * (m / 0.19) / (std::sqrt(v / (1 - 0.999 * 0.999)) + 1e-8);
  CHECK(steps("{type: adam, weight_decay: 0.1}", true, {0.5f, -0.25f}).first == doctest::Approx(p).epsilon(1e-5));
}

TEST_CASE("optimizer/sgd: plain, momentum and Nesterov steps by hand") {
  CHECK(steps("{type: sgd}", true, {0.5f}).first == doctest::Approx(0.95));
  CHECK(steps("{type: sgd}", true, {0.5f}).second.empty());  // no state without momentum
  // buf = 0.5, p = 0.95; buf = 0.9*0.5 + 0.5 = 0.95, p = 0.95 - 0.095.
  auto [p, s] = steps("{type: sgd, momentum: 0.9}", true, {0.5f, 0.5f});
  CHECK(p == doctest::Approx(0.855));
  CHECK(s.at(0) == doctest::Approx(0.95));
  // Nesterov: p -= lr * (g + mu * buf) = 0.1 * (0.5 + 0.45).
  CHECK(steps("{type: sgd, momentum: 0.9, nesterov: true}", true, {0.5f}).first == doctest::Approx(0.905));
  // L2: g' = 0.5 + 0.1 * 1.
  CHECK(steps("{type: sgd, weight_decay: 0.1}", true, {0.5f}).first == doctest::Approx(0.94));
  CHECK_THROWS_AS(make("{type: sgd, nesterov: true}"), ablate::ConfigError);
}

TEST_CASE("optimizer/lion: two steps by hand (lr 0.1, betas 0.9/0.99, wd 0.1)") {
  const std::string y = "{type: lion, weight_decay: 0.1}";
  // Step 1: c = 0.1 * 0.5 > 0: p = 1 * 0.99 - 0.1 = 0.89; m = 0.01 * 0.5 = 0.005.
  auto [p1, s1] = steps(y, true, {0.5f});
  CHECK(p1 == doctest::Approx(0.89).epsilon(1e-6));
  CHECK(s1.at(0) == doctest::Approx(0.005));
  // Step 2, g = -0.25: c = 0.0045 - 0.025 < 0: p = 0.89 * 0.99 + 0.1 = 0.9811; m = 0.00495 - 0.0025.
  auto [p2, s2] = steps(y, true, {0.5f, -0.25f});
  CHECK(p2 == doctest::Approx(0.9811).epsilon(1e-6));
  CHECK(s2.at(0) == doctest::Approx(0.00245));
  CHECK(steps(y, false, {0.5f}).first == doctest::Approx(0.9).epsilon(1e-6));
  CHECK(make("{type: lion}")->base_lr() == doctest::Approx(1e-4));
}
