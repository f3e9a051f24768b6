// The objective family: conformance of every variant; masked_lm's 15% and 80/10/10 rule;
// the loss as a sum and a count, and a wrong count refused; the trainer refuses an attention
// the objective cannot use; a masked-LM run end to end.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <set>

#include "ablate/experiment.hpp"
#include "ablate/metric_spec.hpp"
#include "ablate/objective.hpp"
#include "ablate/runfile.hpp"
#include "ablate/trainer.hpp"
#include "plugin_test_util.hpp"
#include "test_util.hpp"

namespace {

std::unique_ptr<ablate::Objective> objective(const std::string& yaml) {
  ablate::test::registry();
  return ablate::PluginRegistry::instance().create<ablate::Objective>(
      ablate::conformance::options_from_yaml(yaml, "objective"), ablate::StandaloneContext(1));
}

// The tiny experiment of test_util.hpp with extra lines appended (later keys win).
std::string tiny(const ablate::test::TempDir& dir, const std::string& model_extra,
                 const std::string& extra) {
  std::string base = ablate::test::kTinyBase;
  const std::string at = "  attention: causal\n";
  base.replace(base.find(at), at.size(), model_extra);
  return dir.write("tiny.yaml", base + extra);
}

ablate::RunSummary run(const std::string& file, const std::string& out,
                       const std::vector<std::string>& overrides = {}) {
  ablate::RunOptions ro;
  ro.quiet = true;
  ro.out_dir = out;
  std::vector<std::string> ov = overrides;
  ov.push_back("data.path=" + std::string(ABLATE_TEST_DATA_DIR) + "/shakespeare_16k.txt");
  return ablate::run_experiment(ablate::Experiment::load(file, ov), ro);
}

}  // namespace

TEST_CASE(
    "objective/conformance: inputs and targets, determinism, loss gradients, metrics and options "
    "of every variant") {
  ablate::test::registry();
  ptest::check_conformance("objective");
}

TEST_CASE(
    "objective/masked_lm: 15% of real tokens chosen, of them 80% masked, 10% random, 10% kept, "
    "only they are scored") {
  auto o = objective("{type: masked_lm}");
  CHECK_FALSE(o->causal());
  CHECK(o->extra_tokens() == 1);
  const int64_t B = 64, T = 256, V = 50;
  std::vector<int32_t> x(static_cast<size_t>(B * T)), y(x.size());
  ablate::Rng data(3);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<int32_t>(data.below(V));
  for (size_t i = 0; i < x.size(); ++i)
    y[i] = i % T + 1 < T ? x[i + 1] : static_cast<int32_t>(data.below(V));
  const std::vector<int32_t> x0 = x;
  ablate::Rng rng(11);
  o->prepare(x.data(), y.data(), B, T, V, rng);
  int64_t chosen = 0, masked = 0, kept = 0, other = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (y[i] < 0) {
      CHECK(x[i] == x0[i]);  // not chosen: unchanged
      continue;
    }
    ++chosen;
    CHECK(y[i] == x0[i]);  // scored on the original token
    if (x[i] == V) ++masked;
    else if (x[i] == x0[i]) ++kept;
    else ++other;
  }
  const double n = static_cast<double>(B * T), c = static_cast<double>(chosen);
  CHECK(c / n == doctest::Approx(0.15).epsilon(0.05));
  CHECK(masked / c == doctest::Approx(0.8).epsilon(0.03));
  // A random token equals the original one time in V: kept ~ 0.1 + 0.1 / V.
  CHECK(kept / c == doctest::Approx(0.1 + 0.1 / V).epsilon(0.12));
  CHECK(other / c == doctest::Approx(0.1 - 0.1 / V).epsilon(0.12));
  CHECK_THROWS_AS(objective("{type: masked_lm, replace_mask: 0.9, replace_random: 0.2}"),
                  ablate::ConfigError);
  CHECK_THROWS_AS(objective("{type: masked_lm, mask_rate: 0}"), ablate::ConfigError);
}

TEST_CASE(
    "objective/next_token and masked_lm: the loss is the scored positions' summed cross-entropy "
    "and their count") {
  const int64_t B = 3, T = 16, V = 20;
  for (const char* yaml : {"{type: next_token}", "{type: masked_lm}"}) {
    CAPTURE(yaml);
    auto o = objective(yaml);
    std::vector<int32_t> x(static_cast<size_t>(B * T)), y(x.size());
    ablate::Rng data(5);
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<int32_t>(data.below(V));
    for (size_t i = 0; i < x.size(); ++i)
      y[i] = i % T + 1 < T ? x[i + 1] : static_cast<int32_t>(data.below(V));
    for (int64_t t = 5; t < T; ++t) y[static_cast<size_t>(2 * T + t)] = -1;  // padding
    ablate::Rng rng(2);
    o->prepare(x.data(), y.data(), B, T, V, rng);
    int64_t scored = 0;
    for (int32_t t : y) scored += t >= 0;
    REQUIRE(scored > 0);
    ablate::ParamStore store(1);
    ablate::Parameter& w = store.add("logits", B * T, V + o->extra_tokens(), ablate::Role::kCustom);
    ablate::fill_normal(w.value, store.rng(), 1.0f);
    ablate::Graph g;
    const ablate::LossSum l = o->loss(g, g.param(w), y.data(), B * T);
    CHECK(l.count == scored);
    const float mean = g.value(ablate::cross_entropy(g, g.param(w), y.data(), B * T)).data[0];
    CHECK(g.value(l.sum).data[0] / static_cast<double>(l.count) ==
          doctest::Approx(mean).epsilon(1e-6));
  }
}

TEST_CASE(
    "objective/a loss counting unscored positions fails plugin check and stops a run of padded "
    "windows, naming both counts") {
  const std::string detail = ptest::failure_of(ptest::check_fixture("objective", "bad_count"),
                                               "loss: a finite sum over the scored positions");
  CHECK(ablate::test::contains(detail, "the loss's count is 16, the targets score 10 positions"));
  ablate::test::TempDir d;
  std::string text;
  for (int i = 0; i < 100; ++i) text += "$" + std::string(1 + i % 5, 'a') + "$\n";
  d.write("lines.txt", text);
  const std::string exp = d.write("lines.yaml", R"(name: lines
data: {path: lines.txt, windows: lines, fill: pad}
model: {d_model: 16, n_heads: 2, n_layers: 1, context: 12}
train: {steps: 2, batch_size: 4}
sample: {tokens: 0}
objective: bad_count
)");
  const auto r = ablate::test::run_command(ablate::test::ablate_binary() + " run " + exp +
                                           " -q -o " + (d / "out") + " --plugin-dir " +
                                           ABLATE_TEST_PLUGIN_DIR + "/bad_count");
  CHECK(r.status != 0);
  CHECK_MESSAGE(
      ablate::test::contains(
          r.output,
          "the objective's loss counts 12 scored positions in a batch whose targets score "),
      r.output);
  CHECK(
      ablate::test::contains(r.output, "Objective::loss's count must be the positions it scores"));
}

TEST_CASE(
    "objective/the trainer refuses an attention the objective cannot use, naming the key and the "
    "fix") {
  ablate::test::TempDir dir;
  auto error = [&](const std::string& model_extra, const std::string& extra) {
    try {
      run(tiny(dir, model_extra, extra), dir / "out", {"train.steps=1"});
    } catch (const ablate::ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  // Next-token prediction through a bidirectional mask reads its answers.
  const std::string leak = error("  attention: bidirectional\n", "");
  CHECK(leak.find("tiny.yaml") != std::string::npos);
  CHECK(leak.find("model.attention") != std::string::npos);
  CHECK(leak.find("'next_token'") != std::string::npos);
  CHECK(leak.find("objective: masked_lm") != std::string::npos);
  const std::string blind = error("  attention: causal\n", "objective: masked_lm\n");
  CHECK(blind.find("model.attention") != std::string::npos);
  CHECK(blind.find("bidirectional attention") != std::string::npos);
  CHECK(blind.find("objective: next_token") != std::string::npos);
}

TEST_CASE(
    "objective/masked_lm trains end to end: loss and accuracy on masked positions, the mask token "
    "in the vocabulary") {
  ablate::test::TempDir dir;
  const std::string file = tiny(dir, "  attention: bidirectional\n", "objective: masked_lm\n");
  const ablate::RunSummary s = run(file, dir / "out", {"train.steps=60"});
  const ablate::RunData d = ablate::read_run_file(ablate::run_file_path(s.run_dir));
  const auto& eval = d.tables.at("eval");
  REQUIRE(eval.count("val_accuracy"));
  REQUIRE(eval.count("train_accuracy"));
  const auto& acc = eval.at("val_accuracy");
  const auto& loss = eval.at("val_loss");
  // The char tokenizer: the text's characters and the unknown symbol; then the mask token.
  const std::string text =
      ablate::test::read_file(std::string(ABLATE_TEST_DATA_DIR) + "/shakespeare_16k.txt");
  const double chars = static_cast<double>(std::set<char>(text.begin(), text.end()).size());
  CHECK(d.num_attrs.at("vocab_size") == chars + 2);
  CHECK(loss.back() < loss.front());
  CHECK(loss.back() < std::log(chars));  // below the uniform guess over the characters
  CHECK(acc.back() > 2.0 / chars);       // above a guess
  CHECK(acc.back() <= 1.0);
  CHECK_FALSE(d.texts.count("samples/final"));  // an encoder samples no text
  // The objective's accuracy is declared a proportion, better higher, for both splits.
  const auto specs = ablate::parse_metric_specs(d.str_attrs.at("metric_specs"));
  for (const char* col : {"train_accuracy", "val_accuracy"}) {
    const ablate::MetricSpec* m = ablate::find_metric_spec(specs.at("eval"), col);
    REQUIRE(m != nullptr);
    CHECK(m->better == ablate::Better::higher);
    CHECK(m->hi == 1);
  }
  // ... and ablate generate and ablate eval --task refuse it, naming the objective.
  const std::string bin = ablate::test::ablate_binary();
  const auto gen =
      ablate::test::run_command(bin + " generate " + s.run_dir + " --prompt 'To be' --tokens 5");
  CHECK(gen.status != 0);
  CHECK(gen.output.find(
            "objective 'masked_lm', which does not predict the next token, so generating text") !=
        std::string::npos);
  dir.write("modadd.txt", "$3+4=0$\n");
  const auto ev = ablate::test::run_command(bin + " eval " + s.run_dir + " --task modadd --data " +
                                            (dir / "modadd.txt"));
  CHECK(ev.status != 0);
  CHECK(ev.output.find("so decoding modadd answers from it would mean nothing") !=
        std::string::npos);
  // The same run again: bitwise the same metrics (masks come from the seed and the step).
  const ablate::RunSummary s2 = run(file, dir / "out2", {"train.steps=60"});
  CHECK(ablate::read_run_file(ablate::run_file_path(s2.run_dir))
            .tables.at("eval")
            .at("val_accuracy") == acc);
}

TEST_CASE(
    "objective/the shipped encoder_vs_decoder sweep validates: two variants differ only in "
    "attention and objective") {
  const ablate::test::TempDir dir;
  // Validation resolves the data file: the test excerpt stands in for tiny Shakespeare
  // (ABLATE_DATA_PATH is searched before the source tree's and ../shared's data), so that
  // the test needs neither ../shared nor the network.
  std::filesystem::create_directories(dir / "data");
  dir.write("data/tinyshakespeare.txt",
            ablate::test::read_file(std::string(ABLATE_TEST_DATA_DIR) + "/shakespeare_16k.txt"));
  const ablate::test::CommandResult r = ablate::test::run_command(
      "ABLATE_DATA_PATH=" + (dir / "data") + " " + ablate::test::ablate_binary() + " sweep " +
      std::string(ABLATE_SOURCE_DIR) +
      "/experiments/ablations/encoder_vs_decoder.yaml --dry-run --dir " + (dir / "s"));
  INFO(r.output);
  CHECK(r.status == 0);
  CHECK(r.output.find("model.attention=causal objective=next_token") != std::string::npos);
  CHECK(r.output.find("model.attention=bidirectional objective=masked_lm") != std::string::npos);
  CHECK(r.output.find("4 points (2 variants x 2 seeds)") != std::string::npos);
}
