// Task plugins (family "task") and evaluators: conformance of every variant, and a second task
// besides arithmetic (modular addition) written, trained and scored end to end through the CLI.
#include <doctest/doctest.h>

#include "ablate/experiment.hpp"
#include "ablate/runfile.hpp"
#include "ablate/trainer.hpp"
#include "plugin_test_util.hpp"
#include "test_util.hpp"

TEST_CASE(
    "task/conformance: every task writes disjoint data, documents its flags and scores a model") {
  ptest::check_conformance("task");
}

TEST_CASE("evaluator/conformance: every evaluator gives stable named metrics") {
  ptest::check_conformance("evaluator");
}

TEST_CASE("evaluator/a declared range that a column breaks fails the conformance check") {
  const std::string detail = ptest::failure_of(ptest::check_fixture("evaluator", "context_probe"),
                                               "evaluate: named metrics");
  CHECK(ablate::test::contains(detail, "metric 'vocab' = "));
  CHECK(ablate::test::contains(detail, "lies outside [0, 1]"));
}

TEST_CASE(
    "task/modadd: ablate data, a training run scored by its evaluator, ablate eval on the run") {
  ablate::test::TempDir dir;
  const std::string bin = ablate::test::ablate_binary();
  // p = 7: 49 pairs, 40 train, 9 held out.
  auto gen = ablate::test::run_command(bin + " data modadd --p 7 --train-count 40 --train " +
                                       (dir / "train.txt") + " --test " + (dir / "test.txt") +
                                       " --seed 2");
  REQUIRE_MESSAGE(gen.status == 0, gen.output);
  CHECK(gen.output.find("40 problems") != std::string::npos);
  CHECK(ablate::test::count(ablate::test::read_file(dir / "test.txt"), "\n") == 9);
  dir.write("modadd.yaml", R"(name: modadd
seed: 2
data: {path: train.txt, train_fraction: 0.9, windows: lines, fill: pack}
tokenizer: char
model: {d_model: 32, n_heads: 2, n_layers: 2, context: 12}
train: {steps: 600, batch_size: 32, eval_every: 600, eval_batches: 1, checkpoint_every: 600, log_every: 100, threads: 2}
optimizer: {type: adamw, lr: 3.0e-3, weight_decay: 0.1}
scheduler: {type: cosine, warmup: 30, min_factor: 0.1}
eval: [{type: modadd, data: train.txt}, {type: modadd, data: test.txt, name: modadd_heldout}]
sample: {tokens: 0}
)");
  auto run =
      ablate::test::run_command(bin + " run " + (dir / "modadd.yaml") + " -o " + (dir / "run"));
  REQUIRE_MESSAGE(run.status == 0, run.output);
  CHECK(run.output.find("eval/modadd step 600: exact match") != std::string::npos);
  CHECK(run.output.find("eval/modadd_heldout step 600: exact match") != std::string::npos);
  auto data = ablate::read_run_file(ablate::run_file_path(dir / "run"));
  // Each entry its own table (the second named): rows at step 0 and at step 600.
  const auto& t = data.tables.at("eval/modadd");
  const auto& held = data.tables.at("eval/modadd_heldout");
  REQUIRE(t.at("step").size() == 2);
  REQUIRE(held.at("step").size() == 2);
  CHECK(t.at("step")[0] == 0);
  CHECK(t.at("step")[1] == 600);
  // Memorised: the 40 training sums (measured 1.0); the held-out ones are for grokking, which
  // takes far longer than a test.
  MESSAGE("modadd p=7: exact match train " << t.at("exact_match")[1] << ", held out "
                                           << held.at("exact_match")[1]);
  CHECK(t.at("exact_match")[0] < 0.5);  // the untrained model at step 0
  CHECK(t.at("exact_match")[1] >= 0.8);
  CHECK(t.at("problems")[1] == 40);
  CHECK(held.at("problems")[1] == 9);
  // ablate eval scores the checkpoint the same way.
  auto ev = ablate::test::run_command(bin + " eval " + (dir / "run") + " --task modadd --data " +
                                      (dir / "train.txt") + " --write");
  REQUIRE_MESSAGE(ev.status == 0, ev.output);
  CHECK(ev.output.find("exact match") != std::string::npos);
  auto after = ablate::read_run_file(ablate::run_file_path(dir / "run"));
  CHECK(after.tables.at("eval/modadd").at("exact_match").back() ==
        doctest::Approx(t.at("exact_match")[1]));
  // Bad flags: an unknown one with a did-you-mean, a task that does not exist.
  auto bad =
      ablate::test::run_command(bin + " data modadd --train-cont 5 --train " + (dir / "x.txt"));
  CHECK(bad.status == 2);
  CHECK(bad.output.find("Did you mean --train-count?") != std::string::npos);
  auto range = ablate::test::run_command(bin + " data modadd --p 1 --train " + (dir / "x.txt"));
  CHECK(range.status == 1);
  CHECK(range.output.find("--p 1") != std::string::npos);
  auto unknown = ablate::test::run_command(bin + " data modad");
  CHECK(unknown.status == 2);
  CHECK(unknown.output.find("Did you mean 'modadd'") != std::string::npos);
  auto help = ablate::test::run_command(bin + " data modadd --help");
  CHECK(help.output.find("--train-fraction") != std::string::npos);
}
