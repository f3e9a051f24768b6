// Auxiliary losses and metrics of model plugins (Graph::add_aux): what a term may be, that
// `plugin check` finds a wrong gradient of a small term, and that training adds, logs, resumes
// and stops on them (tests/train/test_resume.cpp has the bitwise resume).
#include <doctest/doctest.h>

#include <cmath>

#include "ablate/metric_spec.hpp"
#include "ablate/run_dir.hpp"
#include "ablate/runfile.hpp"
#include "plugin_test_util.hpp"
#include "test_util.hpp"

TEST_CASE("aux/a term is a named (1, 1) node with a weight >= 0, forgotten at reset") {
  ablate::Graph g;
  const float one = 1, row[3] = {1, 2, 3};
  ablate::Var s = g.constant(&one, 1, 1), r = g.constant(row, 1, 3);
  g.add_aux("moe_balance", s, 0.01f, 2);
  REQUIRE(g.aux().size() == 1);
  CHECK(g.aux()[0].layer == 2);
  using ablate::test::contains;
  using ablate::test::error_of;
  CHECK(contains(error_of([&] { g.add_aux("moe_rows", r, 1); }), "is (1, 3), expected a (1, 1)"));
  CHECK(contains(error_of([&] { g.add_aux("Moe-Balance", s, 1); }), "lowercase letters"));
  CHECK(contains(error_of([&] { g.add_aux("moe_balance", s, -1, 3); }),
                 "auxiliary term 'moe_balance' (layer 3): weight -1"));
  CHECK(contains(error_of([&] { g.add_aux("moe_balance", ablate::Var{}, 1); }), "not a node"));
  g.reset();
  CHECK(g.aux().empty());
}

TEST_CASE("aux/plugin check fails a wrong gradient of an auxiliary term weighted 0.001") {
  const std::string detail =
      ptest::failure_of(ptest::check_fixture("ffn", "bad_aux"), "gradients by finite differences");
  CHECK(ablate::test::contains(detail, "auxiliary terms bad_aux_square alone disagree"));
  // A right term passes: the mixture of experts' balancing loss.
  CHECK(ablate::conformance::check_variant("ffn", "moe").passed());
}

TEST_CASE("aux/training logs each term, trains on it, and stops at a non-finite one naming it") {
  ablate::test::TempDir d;
  const std::string exp = d.write("tiny.yaml", ablate::test::kTinyBase);
  auto run = [&](const std::string& out, const std::string& args) {
    return ablate::test::run_command("ABLATE_DATA_PATH=" ABLATE_TEST_DATA_DIR " " +
                                     ablate::test::ablate_binary() + " run " + exp + " -q -o " +
                                     (d / out) + " sample.tokens=0 " + args);
  };
  // Switch routing (top-1, the chosen probability as the weight), the balancing loss trained
  // at 0.1 against logged only, the same seed and batches.
  for (const char* w : {"0", "0.1"}) {
    auto r = run(std::string("moe") + w,
                 std::string("train.steps=150 train.checkpoint_every=150 ") +
                     "'model.ffn={type: moe, experts: 4, top_k: 1, balance_weight: " + w + "}'");
    REQUIRE_MESSAGE(r.status == 0, r.output);
  }
  auto off = ablate::read_run_file(ablate::run_file_path(d / "moe0"));
  auto on = ablate::read_run_file(ablate::run_file_path(d / "moe0.1"));
  // The mean of the last five rows (steps 110-150).
  auto late = [](const ablate::RunData& rd, const std::string& col) {
    const std::vector<double>& v = rd.tables.at("train").at(col);
    REQUIRE(v.size() == 15);
    double s = 0;
    for (size_t i = v.size() - 5; i < v.size(); ++i) s += v[i];
    return s / 5;
  };
  for (const ablate::RunData* rd : {&off, &on}) {
    const auto& t = rd->tables.at("train");
    REQUIRE(t.count("aux_moe_balance"));
    REQUIRE(t.count("aux_moe_max_load"));
    for (double v : t.at("aux_moe_balance")) CHECK((std::isfinite(v) && v > 0));
  }
  INFO("late aux_moe_balance: weight 0 " << late(off, "aux_moe_balance") << ", weight 0.1 "
                                         << late(on, "aux_moe_balance"));
  INFO("late aux_moe_max_load: weight 0 " << late(off, "aux_moe_max_load") << ", weight 0.1 "
                                          << late(on, "aux_moe_max_load"));
  CHECK(late(on, "aux_moe_balance") < late(off, "aux_moe_balance"));
  CHECK(late(on, "aux_moe_max_load") < late(off, "aux_moe_max_load") - 0.2);
  // The progress line (run.log keeps it) shows the terms after the loss.
  CHECK_MESSAGE(
      ablate::test::contains(ablate::test::read_file(d / "moe0.1/run.log"), " | moe_balance "),
      ablate::test::read_file(d / "moe0.1/run.log"));
  // run.h5 says what each column is: the terms neither better higher nor lower, the losses lower.
  const ablate::MetricSpecs specs = ablate::parse_metric_specs(on.str_attrs.at("metric_specs"));
  const ablate::MetricSpec* aux = ablate::find_metric_spec(specs.at("train"), "aux_moe_balance");
  REQUIRE(aux != nullptr);
  CHECK(aux->better == ablate::Better::neither);
  const ablate::MetricSpec* val = ablate::find_metric_spec(specs.at("eval"), "val_loss");
  REQUIRE(val != nullptr);
  CHECK(val->better == ablate::Better::lower);
  // The report draws each term beside the losses.
  auto rep = ablate::test::run_command(ablate::test::ablate_binary() + " report " + (d / "moe0") +
                                       " " + (d / "moe0.1") + " -o " + (d / "r.html"));
  REQUIRE_MESSAGE(rep.status == 0, rep.output);
  const std::string html = ablate::test::read_file(d / "r.html");
  CHECK(ablate::test::contains(html, "Auxiliary term moe_balance"));
  CHECK(ablate::test::contains(html, "Auxiliary term moe_max_load"));
  // A term that turns NaN stops the step with its name and layer.
  auto r = run("nan", std::string("--plugin-dir ") + ABLATE_TEST_PLUGIN_DIR +
                          "/bad_aux 'model.ffn={type: bad_aux, nan_at_step: 3}'");
  CHECK(r.status != 0);
  CHECK_MESSAGE(
      ablate::test::contains(r.output, "step 3: auxiliary term 'bad_aux_square' of layer "),
      r.output);
  CHECK(ablate::test::contains(r.output, "is nan"));
}
