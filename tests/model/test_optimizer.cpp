// Conformance of every "optimizer" variant (a quadratic's loss decreases, determinism,
// state names, eval/train points, bitwise resume from the state buffers, options), plus
// single steps of AdamW, Adam, SGD and Lion against values computed by hand, Muon's
// orthogonalised update and its routing by role, and schedule-free AdamW's recursion.
#include <doctest/doctest.h>

#include <Eigen/Core>
#include <Eigen/SVD>
#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "ablate/checkpoint.hpp"
#include "ablate/optimizer.hpp"
#include "ablate/runfile.hpp"
#include "ablate/trainer.hpp"
#include "plugin_test_util.hpp"
#include "test_util.hpp"

using ablate::Optimizer;

namespace {

ptest::Built<Optimizer> make(const std::string& yaml) {
  return ptest::build<Optimizer>(yaml, ptest::dims(), 7, "train.optimizer");
}

// One scalar parameter p = 1 (decayed or not), stepped with the given gradients.
std::pair<float, std::vector<float>> steps(const std::string& yaml, bool decay,
                                           std::vector<float> grads, float lr = 0.1f) {
  ablate::ParamStore s(1);
  ablate::Parameter& p = s.add("p", 1, 1, decay ? ablate::Role::kHidden : ablate::Role::kGain);
  p.value.data[0] = 1.0f;
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

TEST_CASE(
    "optimizer/conformance: every variant minimises a quadratic and resumes bitwise from its "
    "state") {
  ptest::check_conformance("optimizer");
}

TEST_CASE(
    "optimizer/SlotState: zero buffers named slot by slot, other parameters at a step fail, "
    "named") {
  ablate::ParamStore s(1);
  ablate::Parameter& a = s.add("a", 2, 3, ablate::Role::kHidden);
  ablate::Parameter& b = s.add("b", 1, 4, ablate::Role::kBias);
  ablate::SlotState st("mine", {"m", "v"});
  st.init({&a, &b});
  std::vector<std::string> names;
  std::vector<size_t> sizes;
  for (const ablate::StateBuffer& buf : st.state()) {
    names.push_back(buf.name);
    sizes.push_back(buf.data->size());
    CHECK(std::all_of(buf.data->begin(), buf.data->end(), [](float x) { return x == 0.0f; }));
  }
  CHECK(names == std::vector<std::string>{"m.a", "m.b", "v.a", "v.b"});
  CHECK(sizes == std::vector<size_t>{6, 4, 6, 4});
  st.at(1, 0)[5] = 2.0f;  // slot v of parameter a, its last element
  CHECK((*st.state()[2].data)[5] == 2.0f);
  CHECK_NOTHROW(st.check({&a, &b}, 1));
  CHECK_THROWS_WITH_AS(st.check({&a, &b}, 0), doctest::Contains("mine: step counts from 1, got 0"),
                       ablate::Error);
  CHECK_THROWS_WITH_AS(st.check({&a}, 1),
                       doctest::Contains("mine: got 1 parameters but init() got 2"), ablate::Error);
  CHECK_THROWS_WITH_AS(st.check({&b, &a}, 1),
                       doctest::Contains("parameter 0 is 'b' but init() got 'a'"), ablate::Error);
  ablate::ParamStore s2(1);
  ablate::Parameter& a5 = s2.add("a", 1, 5, ablate::Role::kHidden);
  CHECK_THROWS_WITH_AS(st.check({&a5, &b}, 1),
                       doctest::Contains("'a' has 5 values but had 6 at init()"), ablate::Error);
  // No slots (sgd without momentum): no buffers, the same checks.
  ablate::SlotState none("plain", {});
  none.init({&a});
  CHECK(none.state().empty());
  CHECK_THROWS_AS(none.check({}, 1), ablate::Error);
}

TEST_CASE("optimizer/adamw: two steps by hand (lr 0.1, betas 0.9/0.999, wd 0.1, decoupled)") {
  const std::string y = "{type: adamw, weight_decay: 0.1}";
  // Step 1: p = 1 * (1 - 0.01) = 0.99; m = 0.05, v = 0.00025; m^ = 0.5, v^ = 0.25; p -= 0.1 * 0.5 /
  // 0.5.
  auto [p1, s1] = steps(y, true, {0.5f});
  CHECK(p1 == doctest::Approx(0.89).epsilon(1e-6));
  REQUIRE(s1.size() == 2);
  CHECK(s1[0] == doctest::Approx(0.05));
  CHECK(s1[1] == doctest::Approx(0.00025));
  CHECK(steps(y, false, {0.5f}).first ==
        doctest::Approx(0.90).epsilon(1e-6));  // no decay on this one
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
  CHECK(steps("{type: adam, weight_decay: 0.1}", true, {0.5f}).first ==
        doctest::Approx(0.9).epsilon(1e-6));
  // Step 2 with g = -0.25 on p = 0.9: g' = -0.16; m = 0.9*0.06 - 0.016 = 0.038; v = 0.999*0.00036 +
  // 0.001*0.0256.
  const double m = 0.038, v = 0.999 * 0.00036 + 0.001 * 0.0256;
  const double p = 0.9 - 0.1 * (m / 0.19) / (std::sqrt(v / (1 - 0.999 * 0.999)) + 1e-8);
  CHECK(steps("{type: adam, weight_decay: 0.1}", true, {0.5f, -0.25f}).first ==
        doctest::Approx(p).epsilon(1e-5));
}

TEST_CASE("optimizer/sgd: plain, momentum and Nesterov steps by hand") {
  CHECK(steps("{type: sgd}", true, {0.5f}).first == doctest::Approx(0.95));
  CHECK(steps("{type: sgd}", true, {0.5f}).second.empty());  // no state without momentum
  // buf = 0.5, p = 0.95; buf = 0.9*0.5 + 0.5 = 0.95, p = 0.95 - 0.095.
  auto [p, s] = steps("{type: sgd, momentum: 0.9}", true, {0.5f, 0.5f});
  CHECK(p == doctest::Approx(0.855));
  CHECK(s.at(0) == doctest::Approx(0.95));
  // Nesterov: p -= lr * (g + mu * buf) = 0.1 * (0.5 + 0.45).
  CHECK(steps("{type: sgd, momentum: 0.9, nesterov: true}", true, {0.5f}).first ==
        doctest::Approx(0.905));
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
  // Step 2, g = -0.25: c = 0.0045 - 0.025 < 0: p = 0.89 * 0.99 + 0.1 = 0.9811; m = 0.00495 -
  // 0.0025.
  auto [p2, s2] = steps(y, true, {0.5f, -0.25f});
  CHECK(p2 == doctest::Approx(0.9811).epsilon(1e-6));
  CHECK(s2.at(0) == doctest::Approx(0.00245));
  CHECK(steps(y, false, {0.5f}).first == doctest::Approx(0.9).epsilon(1e-6));
  CHECK(make("{type: lion}")->base_lr() == doctest::Approx(1e-4));
}

namespace {

// One step of `yaml` on a parameter of this role and shape with gradient g; returns the
// change of the parameter.
std::vector<double> one_step(const std::string& yaml, ablate::Role role, int64_t rows, int64_t cols,
                             const std::vector<float>& g, float lr) {
  ablate::ParamStore s(1);
  ablate::Parameter& p =
      s.add("blocks.0.ffn.up.weight", rows, cols, role);  // a name that says nothing true
  std::copy(g.begin(), g.end(), p.grad.data);
  auto o = make(yaml);
  o->init({&p});
  o->step({&p}, lr, 1);
  return std::vector<double>(p.value.data, p.value.data + p.value.numel());
}

}  // namespace

TEST_CASE(
    "optimizer/muon: hidden matrices get an orthogonalised update, other roles AdamW, whatever "
    "their names") {
  for (const auto& shape : {std::pair<int64_t, int64_t>{6, 10}, {10, 6}}) {
    const int64_t rows = shape.first, cols = shape.second;
    CAPTURE(rows);
    const std::vector<float> g = ptest::randn(static_cast<size_t>(rows * cols), 3);
    // Muon with lr 1 from zero momentum, no Nesterov: the update is -scale * NS(g).
    const auto u = one_step("{type: muon, nesterov: false, momentum: 0.5}", ablate::Role::kHidden,
                            rows, cols, g, 1.0f);
    const double scale = std::sqrt(std::max(1.0, double(cols) / double(rows)));
    Eigen::MatrixXd U(rows, cols), G(rows, cols);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c)
        U(r, c) = -u[size_t(r * cols + c)] / scale, G(r, c) = g[size_t(r * cols + c)];
    // NS(g) approximates the polar factor of g: singular values near 1 (the quintic's
    // fixed band is about 0.7-1.2), the same singular vectors.
    Eigen::JacobiSVD<Eigen::MatrixXd> svd(U);
    CHECK(svd.singularValues().minCoeff() > 0.6);
    CHECK(svd.singularValues().maxCoeff() < 1.25);
    Eigen::JacobiSVD<Eigen::MatrixXd> gs(G, Eigen::ComputeThinU | Eigen::ComputeThinV);
    const Eigen::MatrixXd polar = gs.matrixU() * gs.matrixV().transpose();
    CHECK((U.cwiseProduct(polar)).sum() / (U.norm() * polar.norm()) > 0.97);
  }
  // Any other role: AdamW, whose first step moves each value by adam_lr (times the scheduler's
  // factor).
  for (ablate::Role role :
       {ablate::Role::kEmbedding, ablate::Role::kHead, ablate::Role::kGain, ablate::Role::kBias}) {
    CAPTURE(ablate::role_name(role));
    const auto u =
        one_step("{type: muon, lr: 0.02, adam_lr: 0.001}", role, 4, 5, ptest::randn(20, 4), 0.01f);
    for (double x : u) CHECK(std::fabs(x) == doctest::Approx(0.0005).epsilon(1e-4));
  }
}

TEST_CASE(
    "optimizer/muon with Polar Express: the paper's per-step coefficients, a tighter polar "
    "factor") {
  const double coef[5][3] = {{8.156554524902461, -22.48329292557795, 15.878769915207462},
                             {4.042929935166739, -2.808917465908714, 0.5000178451051316},
                             {3.8916678022926607, -2.772484153217685, 0.5060648178503393},
                             {3.285753657755655, -2.3681294933425376, 0.46449024233003106},
                             {2.3465413258596377, -1.7097828382687081, 0.42323551169305323}};
  for (const auto& shape : {std::pair<int64_t, int64_t>{6, 10}, {10, 6}}) {
    const int64_t rows = shape.first, cols = shape.second;
    CAPTURE(rows);
    const std::vector<float> g = ptest::randn(static_cast<size_t>(rows * cols), 3);
    const auto u =
        one_step("{type: muon, nesterov: false, momentum: 0.5, iteration: polar_express}",
                 ablate::Role::kHidden, rows, cols, g, 1.0f);
    const auto ns = one_step("{type: muon, nesterov: false, momentum: 0.5}", ablate::Role::kHidden,
                             rows, cols, g, 1.0f);
    const double scale = std::sqrt(std::max(1.0, double(cols) / double(rows)));
    Eigen::MatrixXd U(rows, cols), N(rows, cols), X(rows, cols);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        U(r, c) = -u[size_t(r * cols + c)] / scale;
        N(r, c) = -ns[size_t(r * cols + c)] / scale;
        X(r, c) = 0.5 * g[size_t(r * cols + c)];  // the momentum buffer after one step
      }
    // The reference in double: X / (1.02 |X|_F), then X <- a X + (b A + c A^2) X, A = X X^T.
    X /= 1.02 * X.norm() + 1e-7;
    for (const auto& k : coef) {
      const Eigen::MatrixXd A = X * X.transpose();
      X = k[0] * X + (k[1] * A + k[2] * A * A) * X;
    }
    CHECK((U - X).cwiseAbs().maxCoeff() < 1e-4);
    // Closer to the polar factor than Muon's fixed quintic: singular values nearer 1.
    Eigen::JacobiSVD<Eigen::MatrixXd> su(U), sn(N);
    auto spread = [](const Eigen::VectorXd& sv) {
      return std::max(sv.maxCoeff() - 1.0, 1.0 - sv.minCoeff());
    };
    INFO("singular values: polar express " << su.singularValues().transpose() << "; newton-schulz "
                                           << sn.singularValues().transpose());
    CHECK(spread(su.singularValues()) < spread(sn.singularValues()));
  }
  CHECK_THROWS_WITH_AS(make("{type: muon, iteration: polar_express, ns_steps: 6}"),
                       doctest::Contains("at most 5 iterations"), ablate::ConfigError);
}

TEST_CASE(
    "optimizer/schedule_free: two steps against the paper's recursion, eval point is the average "
    "x") {
  // p = 1 (decayed role), lr 0.1, betas 0.9 / 0.999, wd 0.1; gradients 0.5 then -0.25.
  const double b1 = 0.9, b2 = 0.999, lr = 0.1, wd = 0.1, eps = 1e-8;
  double z = 1, x = 1, y = 1, v = 0, lr_max = 0, wsum = 0;
  const double grads[] = {0.5, -0.25};
  for (int t = 1; t <= 2; ++t) {
    const double g = grads[t - 1], gamma = lr * std::sqrt(1 - std::pow(b2, t));
    v = b2 * v + (1 - b2) * g * g;
    z -= gamma * (g / (std::sqrt(v) + eps) + wd * y);
    lr_max = std::max(lr_max, gamma);
    wsum += lr_max * lr_max;
    const double c = lr_max * lr_max / wsum;
    x = (1 - c) * x + c * z;
    y = (1 - b1) * z + b1 * x;
  }
  ablate::ParamStore s(1);
  ablate::Parameter& p = s.add("p", 1, 1, ablate::Role::kHidden);
  p.value.data[0] = 1.0f;
  auto o = make("{type: schedule_free, lr: 0.1, weight_decay: 0.1}");
  o->init({&p});
  for (int t = 1; t <= 2; ++t) {
    p.grad.data[0] = static_cast<float>(grads[t - 1]);
    o->step({&p}, 0.1f, t);
  }
  CHECK(p.value.data[0] == doctest::Approx(y).epsilon(1e-5));
  o->eval_point({&p});
  CHECK(p.value.data[0] == doctest::Approx(x).epsilon(1e-5));
  CHECK(x != doctest::Approx(y).epsilon(1e-3));  // the two points differ
  o->train_point({&p});
  CHECK(p.value.data[0] == doctest::Approx(y).epsilon(1e-5));
}

TEST_CASE(
    "optimizer/muon and schedule_free: a run killed and resumed ends bitwise like the "
    "uninterrupted one") {
  ablate::test::TempDir dir;
  int k = 0;
  for (const char* opt : {"{type: muon, lr: 0.02, adam_lr: 3.0e-3}",
                          "{type: schedule_free, lr: 3.0e-3, weight_decay: 0.1}"}) {
    CAPTURE(opt);
    const std::string full = "full" + std::to_string(k),
                      cut = "cut" + std::to_string(k++);  // a run directory is never reused
    std::string cfg = ablate::test::kTinyBase;
    cfg.replace(cfg.find("{type: adamw, lr: 1.0e-2}"), 25, opt);
    cfg.replace(cfg.find("steps: 60"), 9, "steps: 30");
    cfg.replace(cfg.find("checkpoint_every: 20"), 20, "checkpoint_every: 10");
    const std::string yaml = dir.write("run.yaml", cfg);
    const std::string run = "ABLATE_DATA_PATH=" ABLATE_TEST_DATA_DIR " " +
                            ablate::test::ablate_binary() + " run " + yaml + " -q -o ";
    REQUIRE(ablate::test::run_command(run + dir / full).status == 0);
    CHECK(ablate::test::run_command("ABLATE_FAULT=step:17 " + run + dir / cut).status !=
          0);  // killed after the checkpoint at 10
    const auto resumed = ablate::test::run_command(run + dir / cut + " --resume");
    REQUIRE_MESSAGE(resumed.status == 0, resumed.output);
    const auto a = ablate::read_run_file(ablate::run_file_path(dir / full)),
               b = ablate::read_run_file(ablate::run_file_path(dir / cut));
    CHECK(a.tables.at("eval").at("val_loss") == b.tables.at("eval").at("val_loss"));
    CHECK(a.tables.at("train").at("loss") == b.tables.at("train").at("loss"));
    CHECK(a.texts.at("samples/final") == b.texts.at("samples/final"));
    const auto ca = ablate::read_checkpoint(ablate::checkpoint_path(dir / full));
    const auto cb = ablate::read_checkpoint(ablate::checkpoint_path(dir / cut));
    CHECK(ca.tensors == cb.tensors);
  }
}
