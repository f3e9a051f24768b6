// train.precision (bf16 mixed precision) end to end: the option and its error, a model's
// loss and gradients against float32, decoding in bf16, a run that records its precision and
// continues in the other one, generation and the memory estimate.
#include <doctest/doctest.h>
#include <tbb/global_control.h>
#include <tbb/info.h>

#include <cmath>
#include <cstring>
#include <memory>

#include <yaml-cpp/yaml.h>

#include "ablate/conformance.hpp"
#include "ablate/experiment.hpp"
#include "ablate/model.hpp"
#include "ablate/ops.hpp"
#include "ablate/runfile.hpp"
#include "ablate/trainer.hpp"
#include "test_util.hpp"

namespace {

using ablate::test::contains;

std::unique_ptr<ablate::Model> make_model(const char* yaml, int64_t vocab) {
  YAML::Node n = YAML::Load(yaml);
  auto model = std::make_unique<ablate::Model>(
      ablate::Options(n, std::make_shared<ablate::ConfigSource>(), "model"), vocab, 5);
  ablate::conformance::randomize(model->params(), 7, 0.3f);
  return model;
}

// The mean loss of random tokens and every parameter's gradient, in `precision`.
struct LossAndGrads {
  double loss = 0;
  std::vector<std::vector<float>> grads;
};
LossAndGrads loss_and_grads(ablate::Model& model, ablate::Precision precision, int64_t B, int64_t T,
                            int64_t V) {
  std::vector<int32_t> x(static_cast<size_t>(B * T)), y(x.size());
  ablate::Rng rng(3);
  for (auto& t : x) t = static_cast<int32_t>(rng.below(static_cast<uint64_t>(V)));
  for (auto& t : y) t = static_cast<int32_t>(rng.below(static_cast<uint64_t>(V)));
  ablate::Graph g;
  g.training = true;
  g.precision = precision;
  model.params().zero_grad();
  ablate::Var loss =
      ablate::cross_entropy(g, model.forward(g, ablate::Batch{x.data(), B, T}), y.data(), B * T);
  g.backward(loss);
  LossAndGrads r;
  r.loss = g.value(loss).data[0];
  for (const ablate::Parameter* p : model.params().all())
    r.grads.emplace_back(p->grad.data, p->grad.data + p->grad.numel());
  return r;
}

double rel_norm_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0, n = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    d += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    n += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(d / std::max(n, 1e-300));
}

}  // namespace

TEST_CASE(
    "precision/train.precision other than float32 or bf16 is an error naming the file, line and "
    "choices") {
  ablate::test::registry();
  setenv("ABLATE_DATA_PATH", ABLATE_TEST_DATA_DIR, 1);
  ablate::test::TempDir dir;
  std::string yaml = ablate::test::kTinyBase;
  const std::string key = "train: {";
  yaml.replace(yaml.find(key), key.size(), "train: {precision: fp16, ");
  const std::string file = dir.write("tiny.yaml", yaml);
  const std::string msg =
      ablate::test::error_of([&] { ablate::describe_experiment(ablate::Experiment::load(file)); });
  INFO(msg);
  CHECK(contains(msg, "tiny.yaml:15"));
  CHECK(contains(msg, "train.precision"));
  CHECK(contains(msg, "'fp16' is not allowed; allowed: float32, bf16"));
  // --precision of the commands: the same choices.
  CHECK(contains(ablate::test::error_of([] { ablate::parse_precision("fp16", "--precision"); }),
                 "--precision: 'fp16' is not a precision; use float32 or bf16"));
}

TEST_CASE("precision/a model's bf16 loss and gradients are within bf16's tolerance of float32's") {
  // Every matrix product rounds its inputs to 8 significant bits (relative error up to 2^-9
  // each, about 0.3% for a sum of many products), and the errors of successive products add
  // up along the forward and the backward pass: over the 2 blocks and head here the loss
  // moves by well under 1%, and each parameter's gradient, as a norm, by up to about 1% (0.9%
  // the most of these models' parameters). 3% leaves room for other seeds.
  ablate::test::registry();
  const int64_t V = 23;
  for (const char* yaml : {"{d_model: 32, n_heads: 4, n_layers: 2, context: 16, bias: true, "
                           "positional: learned, ffn: gelu,"
                           " block: prenorm, norm: layernorm}",
                           "{d_model: 48, n_heads: 4, n_layers: 2, context: 16, positional: rope, "
                           "attention: {type: causal, "
                           "n_kv_heads: 2}, ffn: swiglu, norm: rmsnorm}"}) {
    CAPTURE(yaml);
    auto owned = make_model(yaml, V);
    ablate::Model& model = *owned;
    const LossAndGrads lo = loss_and_grads(model, ablate::Precision::bf16, 4, 16, V);
    const LossAndGrads hi = loss_and_grads(model, ablate::Precision::float32, 4, 16, V);
    CHECK(std::fabs(lo.loss - hi.loss) < 1e-2 * std::fabs(hi.loss));
    CHECK(lo.loss != hi.loss);
    const auto params = model.params().all();
    for (size_t i = 0; i < params.size(); ++i) {
      const double d = rel_norm_diff(lo.grads[i], hi.grads[i]);
      INFO(params[i]->name << ": relative difference " << d);
      CHECK(d < 3e-2);
    }
  }
}

TEST_CASE(
    "precision/bf16 decoding with KV caches: two threads give one thread's logits bitwise, close "
    "to the full pass") {
  ablate::test::registry();
  auto owned = make_model(
      "{d_model: 96, n_heads: 4, n_layers: 2, context: 12, positional: rope,"
      " attention: {type: causal, n_kv_heads: 2}, ffn: swiglu, norm: rmsnorm}",
      23);
  ablate::Model& model = *owned;
  std::vector<int32_t> ids = {3, 7, 1, 22, 9, 4, 4, 17, 0, 12};
  const int64_t n = static_cast<int64_t>(ids.size());
  auto decode = [&] {
    std::vector<float> logits;
    auto caches = model.make_caches(1, 12);
    ablate::Graph g;
    ablate::NoGrad ng(g);
    g.precision = ablate::Precision::bf16;
    g.param_epoch = ablate::new_param_epoch();
    for (int64_t t = 0; t < n; ++t) {
      g.reset();
      ablate::Batch a;
      a.ids = ids.data() + t;
      a.time = 1;
      a.pos0 = t;
      a.caches = &caches;
      const ablate::Tensor y = g.value(model.forward(g, a));
      logits.insert(logits.end(), y.data, y.data + y.numel());
    }
    return logits;
  };
  const std::vector<float> team = decode();
  std::vector<float> one;
  {
    tbb::global_control gc(tbb::global_control::max_allowed_parallelism, 1);
    one = decode();
  }
  REQUIRE(team.size() == one.size());
  if (tbb::info::default_concurrency() >= 2)
    CHECK(std::memcmp(team.data(), one.data(), sizeof(float) * team.size()) == 0);
  // The whole sequence in one pass (bf16 GEMMs instead of matrix-vector products on the
  // same bf16 values): equal up to float32's order of summation, tiny against bf16's steps.
  ablate::Graph g;
  ablate::NoGrad ng(g);
  g.precision = ablate::Precision::bf16;
  const ablate::Tensor full = g.value(model.forward(g, ablate::Batch{ids.data(), 1, n}));
  REQUIRE(static_cast<size_t>(full.numel()) == one.size());
  double worst = 0;
  for (size_t i = 0; i < one.size(); ++i)
    worst = std::max(worst, static_cast<double>(std::fabs(full.data[i] - one[i])));
  INFO("largest difference " << worst);
  CHECK(worst < 1e-3);
  // and not float32's logits
  ablate::Graph gf;
  ablate::NoGrad ngf(gf);
  gf.precision = ablate::Precision::float32;
  const ablate::Tensor f32 = gf.value(model.forward(gf, ablate::Batch{ids.data(), 1, n}));
  double apart = 0;
  for (size_t i = 0; i < one.size(); ++i)
    apart = std::max(apart, static_cast<double>(std::fabs(f32.data[i] - one[i])));
  CHECK(apart > 1e-4);
}

TEST_CASE(
    "precision/a bf16 run learns, records its precision, and continues in float32 and back on "
    "resume") {
  ablate::test::registry();
  setenv("ABLATE_DATA_PATH", ABLATE_TEST_DATA_DIR, 1);
  ablate::test::TempDir dir;
  const std::string file = dir.write("tiny.yaml", ablate::test::kTinyBase);
  ablate::RunOptions ro;
  ro.out_dir = dir / "run";
  ro.quiet = true;
  const auto sum = ablate::run_experiment(
      ablate::Experiment::load(file, {"train.precision=bf16", "train.threads=2"}), ro);
  auto data = ablate::read_run_file(ablate::run_file_path(sum.run_dir));
  CHECK(data.str_attrs.at("precision") == "bf16");
  CHECK(data.str_attrs.at("bf16_kernel") == ablate::bf16_kernel());
  const double V = data.num_attrs.at("vocab_size");
  CHECK(sum.val_loss < std::log(V) - 0.8);  // it learns (uniform guessing: ln V)
  // A float32 run of the same config: a few percent apart at most.
  ablate::RunOptions rf = ro;
  rf.out_dir = dir / "f32";
  const auto f32 = ablate::run_experiment(ablate::Experiment::load(file, {"train.threads=2"}), rf);
  CHECK(ablate::read_run_file(ablate::run_file_path(f32.run_dir)).str_attrs.at("precision") ==
        "float32");
  CHECK(std::fabs(sum.val_loss - f32.val_loss) < 0.05 * f32.val_loss);
  CHECK(sum.val_loss != f32.val_loss);
  // Resumed in float32 (an override; no --allow-config-change), then in bf16 again.
  ablate::RunOptions more = ro;
  more.resume = true;
  more.extend_to = 80;
  ablate::run_experiment(
      ablate::Experiment::load(file, {"train.precision=float32", "train.threads=2"}), more);
  data = ablate::read_run_file(ablate::run_file_path(sum.run_dir));
  CHECK(data.str_attrs.at("precision") == "float32");
  more.extend_to = 100;
  ablate::run_experiment(
      ablate::Experiment::load(file, {"train.precision=bf16", "train.threads=2"}), more);
  data = ablate::read_run_file(ablate::run_file_path(sum.run_dir));
  CHECK(data.str_attrs.at("precision") == "bf16");
  CHECK(data.tables.at("segments").at("start_step") == std::vector<double>{0, 60, 80});
  CHECK(data.tables.at("eval").at("step").back() == 100);
  // Another change on resume is still refused.
  more.extend_to = 120;
  CHECK(contains(ablate::test::error_of([&] {
                   ablate::run_experiment(ablate::Experiment::load(
                                              file, {"train.precision=bf16", "optimizer.lr=0.02"}),
                                          more);
                 }),
                 "optimizer.lr"));
}

TEST_CASE(
    "precision/ablate generate --precision bf16, the run's precision by default, and the dry run's "
    "estimate") {
  ablate::test::registry();
  setenv("ABLATE_DATA_PATH", ABLATE_TEST_DATA_DIR, 1);
  ablate::test::TempDir dir;
  const std::string file = dir.write("tiny.yaml", ablate::test::kTinyBase);
  const std::string bin = ablate::test::ablate_binary();
  auto run = ablate::test::run_command("ABLATE_DATA_PATH=" + std::string(ABLATE_TEST_DATA_DIR) +
                                       " " + bin + " run " + file + " --out " + (dir / "run") +
                                       " train.steps=20 train.precision=bf16 -j 1 --quiet");
  INFO(run.output);
  REQUIRE(run.status == 0);
  auto gen = [&](const std::string& flags) {
    auto r = ablate::test::run_command(bin + " generate " + (dir / "run") +
                                       " --prompt ROMEO: --tokens 40 --greedy " + flags);
    INFO(r.output);
    CHECK(r.status == 0);
    return r.output;
  };
  const std::string by_default = gen(""), bf16 = gen("--precision bf16"),
                    f32 = gen("--precision float32");
  CHECK(by_default == bf16);  // the run trained in bf16
  CHECK(contains(gen("--precision fp16 2>&1 || true"), "'fp16' is not a precision"));
  (void)f32;
  // The dry run's estimate counts the bf16 copies of activations (in the activations) and,
  // where the products run a bf16 GEMM, the weights' bf16 bits (the float32 GEMM rounds the
  // weights as it packs them: no copy).
  auto dry = [&](const std::string& prec) {
    auto r =
        ablate::test::run_command("ABLATE_DATA_PATH=" + std::string(ABLATE_TEST_DATA_DIR) + " " +
                                  bin + " run " + file + " --dry-run train.precision=" + prec);
    INFO(r.output);
    CHECK(r.status == 0);
    return r.output;
  };
  const std::string d32 = dry("float32"), d16 = dry("bf16");
  CHECK(!contains(d32, "bf16 weights"));
  const std::string gemm = ablate::bf16_kernel();
  CHECK(contains(d16, "bf16 weights") == (gemm == "avx512_bf16" || gemm == "onednn_bf16"));
}
