// SVG charts, sweep comparisons on synthetic runs with hand-computed statistics, and the
// HTML report rendered by headless Chromium (skipped with a message when absent).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <regex>

#include "ablate/compare.hpp"
#include "ablate/metric_spec.hpp"
#include "ablate/report.hpp"
#include "ablate/runfile.hpp"
#include "ablate/svg.hpp"
#include "ablate/sweep.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using ablate::test::TempDir;

namespace {

using ablate::test::count;

// A finished (or failed) run directory without training: eval rows at steps 100, 200,
// 300 ending in `final`, train rows every 50 steps.
void fake_run(const std::string& dir, double final, double n_params,
              const std::string& status = "done",
              const std::string& config = "model: {d_model: 8}\n", bool breakdowns = false) {
  fs::create_directories(dir);
  auto rf = ablate::RunFile::create(ablate::run_file_path(dir));
  rf.set_attr("status", status);
  rf.set_attr("error", status == "failed" ? "step 150: loss is not finite" : "");
  rf.set_attr("config", config);
  rf.set_attr("n_params", n_params);
  rf.set_attr("flops_per_token", 6 * n_params);
  rf.set_attr("threads", int64_t{1});
  rf.set_attr("train_seconds", 12.5);
  rf.set_attr("cpu_seconds", 90.0);
  for (int s = 50; s <= (status == "failed" ? 150 : 300); s += 50)
    rf.append("train", {{"step", s},
                        {"loss", final + 3.0 * std::exp(-s / 40.0)},
                        {"lr", 1e-3},
                        {"grad_norm", 1},
                        {"tokens_per_s", 5000}});
  if (status != "failed")
    for (int s = 100; s <= 300; s += 100) {
      double v = final + 0.3 * (300 - s) / 200.0;
      rf.append("eval",
                {{"step", s}, {"train_loss", v - 0.05}, {"val_loss", v}, {"val_ppl", std::exp(v)}});
      const double em = 0.1 * s / 300.0 + (final < 1.73 ? 0.05 : 0.0);
      if (breakdowns)  // as the arithmetic evaluator writes them: a count, breakdowns, the headline
        rf.append(
            "eval/arithmetic",
            {{"step", s}, {"problems", 1000}, {"em_add_carries_1", em / 2}, {"exact_match", em}});
      else rf.append("eval/arithmetic", {{"step", s}, {"exact_match", em}});
    }
  rf.write_text("samples/final", "ROMEO: <b>hi</b>");
  rf.close();
}

// relu, swiglu: 3 seeds each; gelu: one finished, one failed, one never run.
// A sweep `name` of `sweep_yaml` (its sweep: section's body) in d/<name>, manifest written.
ablate::Sweep manifest_of(const TempDir& d, const std::string& name,
                          const std::string& sweep_yaml) {
  ablate::Sweep s =
      ablate::parse_sweep("name: " + name + "\nbase: {name: x}\nsweep:\n" + sweep_yaml,
                          name + ".yaml", d.path.string(), d / name);
  ablate::write_manifest(s);
  return s;
}

std::string synthetic_sweep(const TempDir& d) {
  ablate::Sweep s = ablate::parse_sweep(
      "name: syn\nbase: {name: x}\nsweep:\n  variants: {relu: {model.ffn: relu}, swiglu: "
      "{model.ffn: swiglu}, gelu: {model.ffn: gelu}}\n"
      "  seeds: [1, 2, 3]\n",
      "syn.yaml", d.path.string(), d / "syn");
  ablate::write_manifest(s);
  const double relu[] = {1.76, 1.75, 1.77}, swiglu[] = {1.71, 1.72, 1.70};
  for (int i = 0; i < 3; ++i) {
    fake_run(s.points[static_cast<size_t>(i)].run_dir, relu[i], 1000, "done",
             "model: {d_model: 8}\n", true);
    fake_run(s.points[static_cast<size_t>(3 + i)].run_dir, swiglu[i], 990, "done",
             "model: {d_model: 8}\n", true);
  }
  fake_run(s.points[6].run_dir, 1.74, 1000, "done", "model: {d_model: 8}\n", true);
  fake_run(s.points[7].run_dir, 9.9, 1000, "failed");
  return d / "syn";
}

}  // namespace

TEST_CASE("report/svg line plot: lines, bands, axes, legend, escaping, gaps") {
  ablate::svg::LinePlot p;
  p.id = "t1";
  p.title = "Loss <train & val>";
  p.x.label = "step";
  p.y.label = "loss";
  ablate::svg::Series a;
  a.label = "relu";
  a.x = {0, 10, 20, 30};
  a.y = {4, 3, NAN, 2};  // the NaN breaks the line in two
  a.lo = {3.9, 2.9, NAN, 1.9};
  a.hi = {4.1, 3.1, NAN, 2.1};
  ablate::svg::Series b;
  b.label = "swi<glu>";
  b.x = {0, 10, 20, 30};
  b.y = {4, 2.5, 2.2, 1.8};
  b.dashed = true;
  p.series = {a, b};
  const std::string svg = ablate::svg::line_plot(p);
  CHECK(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0) == 0);
  CHECK(count(svg, "<path class=\"line\"") == 2);
  CHECK(count(svg, "<path class=\"band\"") == 1);
  std::smatch m;
  REQUIRE(std::regex_search(svg, m, std::regex("class=\"line\" d=\"([^\"]*)\"")));
  CHECK(count(m[1], "M") == 2);  // two segments around the NaN
  CHECK(count(m[1], "L") == 1);
  REQUIRE(std::regex_search(svg, m, std::regex("class=\"band\" d=\"([^\"]*)\"")));
  CHECK(count(m[1], "Z") == 2);
  CHECK(svg.find("Loss &lt;train &amp; val&gt;") != std::string::npos);
  CHECK(svg.find("swi&lt;glu&gt;") != std::string::npos);
  CHECK(svg.find("<glu>") == std::string::npos);
  CHECK(svg.find("stroke-dasharray") != std::string::npos);
  CHECK(svg.find("clip-path=\"url(#t1-clip)\"") != std::string::npos);
  CHECK(svg.find(">step</text>") != std::string::npos);
  // Tick labels: 0..30 on x; y ticks inside [~1.7, ~4.2].
  CHECK(svg.find(">30</text>") != std::string::npos);
  CHECK(svg.find(">3</text>") != std::string::npos);
  // Every coordinate inside the canvas.
  const std::regex coord(" ([xy][12]?)=\"(-?[0-9.]+)\"");
  for (std::sregex_iterator it(svg.begin(), svg.end(), coord), end; it != end; ++it) {
    double v = std::stod((*it)[2]);
    CHECK(v >= 0);
    CHECK(v <= ((*it)[1].str()[0] == 'x' ? p.width : p.height));
  }
  // No data at all: axes and a note, no lines.
  ablate::svg::LinePlot empty;
  empty.series = {ablate::svg::Series{}};
  const std::string e = ablate::svg::line_plot(empty);
  CHECK(e.find("no data") != std::string::npos);
  CHECK(count(e, "class=\"line\"") == 0);
  // A log axis drops values <= 0 and labels decades.
  ablate::svg::LinePlot lg;
  lg.y.log = true;
  lg.series = {ablate::svg::Series{"s", {1, 2, 3, 4}, {0.001, 0.1, 10, -1}, {}, {}, "", false}};
  const std::string l = ablate::svg::line_plot(lg);
  CHECK(l.find(">0.1</text>") != std::string::npos);
  CHECK(l.find(">10</text>") != std::string::npos);
  // A title or y label longer than the figure is set smaller, whole, not cut off at the edges.
  ablate::svg::LinePlot wide;
  wide.width = 560;
  wide.title =
      "Difference from match_params=- ffn=relu schedule_steps=600 steps=600 over "
      "training: val_loss";
  wide.y.label = "val_loss - match_params=- ffn=relu schedule_steps=600 steps=600's (paired)";
  wide.series = {ablate::svg::Series{"s", {1, 2}, {1, 2}, {}, {}, "", false}};
  const std::string w = ablate::svg::line_plot(wide);
  std::smatch wm;
  REQUIRE(std::regex_search(w, wm,
                            std::regex("<text x=\"([0-9.]+)\" y=\"22\" text-anchor=\"middle\" "
                                       "font-size=\"([0-9.]+)\" font-weight=\"bold\">Difference")));
  CHECK(std::stod(wm[1]) == doctest::Approx(280));  // centred on the figure
  const double title_fs = std::stod(wm[2]);
  CHECK(title_fs < 14);
  CHECK(title_fs >= 8);
  CHECK(0.65 * title_fs * static_cast<double>(wide.title.size()) <= 560 - 8 + 1e-6);
  REQUIRE(std::regex_search(
      w, wm,
      std::regex(
          "rotate\\(-90\\)\" text-anchor=\"middle\" font-size=\"([0-9.]+)\">val_loss - match")));
  CHECK(std::stod(wm[1]) < 12);
  // A short title keeps its size, over the plot.
  CHECK(l.find("font-size=\"14\"") == std::string::npos);  // lg has no title
  wide.title = "Validation loss";
  wide.y.label = "val_loss";
  const std::string n = ablate::svg::line_plot(wide);
  CHECK(n.find("font-size=\"14\" font-weight=\"bold\">Validation loss</text>") !=
        std::string::npos);
  CHECK(n.find("rotate(-90)\" text-anchor=\"middle\">val_loss</text>") != std::string::npos);
}

TEST_CASE("report/svg ticks, numbers, colours and heat maps") {
  using ablate::svg::nice_ticks;
  CHECK(nice_ticks(0, 10, 5) == std::vector<double>{0, 2, 4, 6, 8, 10});
  CHECK(nice_ticks(1.71, 1.79, 4) == std::vector<double>{1.72, 1.74, 1.76, 1.78});
  auto t = nice_ticks(0, 1000, 4);
  CHECK(t == std::vector<double>{0, 250, 500, 750, 1000});
  CHECK(nice_ticks(3, 3).size() == 1);
  CHECK(ablate::svg::format_number(1.75812) == "1.758");
  CHECK(ablate::svg::format_number(0.25) == "0.25");
  CHECK(ablate::svg::format_number(12000) == "12000");
  CHECK(ablate::svg::format_number(2.5e-5) == "2.5e-5");
  CHECK(ablate::svg::format_number(3.2e7, 3) == "3.2e7");
  CHECK(ablate::svg::format_number(NAN) == "n/a");
  CHECK(ablate::svg::viridis(0) == "#440154");
  CHECK(ablate::svg::viridis(1) == "#fde725");
  CHECK(ablate::svg::escape("a<b>&\"'") == "a&lt;b&gt;&amp;&quot;&#39;");
  CHECK(std::string(ablate::svg::palette(0)) != ablate::svg::palette(1));

  ablate::svg::HeatMap h;
  h.title = "val_loss";
  h.row_labels = {"pre", "post"};
  h.col_labels = {"layernorm", "rmsnorm"};
  h.values = {{1.70, 1.72}, {1.80, NAN}};
  h.low_is_bright = true;
  const std::string svg = ablate::svg::heat_map(h);
  CHECK(count(svg, "<rect class=\"cell\"") == 4);
  CHECK(svg.find("fill=\"#dddddd\"") != std::string::npos);  // the missing cell
  CHECK(svg.find("fill=\"" + ablate::svg::viridis(1) + "\"") !=
        std::string::npos);  // best (lowest) is brightest
  CHECK(svg.find(">1.7</text>") != std::string::npos);
  CHECK(svg.find(">n/a</text>") != std::string::npos);
  CHECK(svg.find("linearGradient") != std::string::npos);
  // A row axis' label longer than the grid is high lies inside the picture: the grid moves down.
  h.y_label = "model.attention.qk_transform.match_params";
  const std::string labelled = ablate::svg::heat_map(h);
  const size_t at = labelled.find("<text transform=\"translate(14 ");
  REQUIRE(at != std::string::npos);
  const double centre = std::stod(labelled.substr(at + 30));
  const double half = 3.6 * static_cast<double>(h.y_label.size());
  CHECK(centre - half >= 0);
  const size_t height_at = labelled.find("height=\"");
  REQUIRE(height_at != std::string::npos);
  CHECK(centre + half <= std::stod(labelled.substr(height_at + 8)));
}

TEST_CASE("report/a metric's direction from its name: whole words for 'em', unknown names say so") {
  CHECK(ablate::metric_higher_is_better("val_loss") == 0);
  CHECK(ablate::metric_higher_is_better("val_ppl") == 0);
  CHECK(ablate::metric_higher_is_better("exact_match") == 1);
  CHECK(ablate::metric_higher_is_better("char_acc_div") == 1);
  CHECK(ablate::metric_higher_is_better("em_add") == 1);
  CHECK(ablate::metric_higher_is_better("em_div_int_dec") == 1);
  CHECK(ablate::metric_higher_is_better("val_EM") == 1);
  CHECK(ablate::metric_higher_is_better("temperature") ==
        -1);  // "em" inside a word is not exact match
  CHECK(ablate::metric_higher_is_better("grad_norm") == -1);
  CHECK(ablate::metric_higher_is_better("lr") == -1);
}

TEST_CASE(
    "report/compare cuts a proportion's t intervals to [0, 1] and its differences' to [-1, 1]") {
  TempDir d;
  const ablate::Sweep s =
      manifest_of(d, "bi", "  variants: {a: {}, b: {model.ffn: gelu}}\n  seeds: [1, 2, 3]\n");
  const double em[2][3] = {{0.50, 0.19, 0.51},
                           {0.05, 0.95, 0.10}};  // bimodal over seeds, as exact match often is
  for (size_t i = 0; i < 6; ++i) {
    fs::create_directories(s.points[i].run_dir);
    auto rf = ablate::RunFile::create(ablate::run_file_path(s.points[i].run_dir));
    rf.set_attr("status", std::string("done"));
    rf.set_attr("config", std::string("model: {d_model: 8}\n"));
    rf.append(
        "eval/arithmetic",
        {{"step", 100}, {"exact_match", em[i / 3][i % 3]}, {"problems", 1000 * em[i / 3][i % 3]}});
    rf.close();
  }
  ablate::SweepResults r = ablate::load_sweep_results(d / "bi");
  ablate::CompareOptions o;
  o.metric = "exact_match";
  ablate::Comparison c = ablate::compare_sweep(r, o);
  // a: mean 0.4000, sd 0.1819: the t interval [-0.052, 0.852] is cut at 0.
  CHECK(c.groups[0].summary.ci_low == 0.0);
  CHECK(c.groups[0].summary.ci_high ==
        doctest::Approx(0.4 + 4.302652729749464 *
                                  std::sqrt(((0.1 * 0.1) + (0.21 * 0.21) + (0.11 * 0.11)) / 2) /
                                  std::sqrt(3.0)));
  // b - a: -0.45, +0.76, -0.41: mean -0.0333, its interval cut to [-1, 1].
  REQUIRE(c.groups[1].has_test);
  CHECK(c.groups[1].test.ci_low == -1.0);
  CHECK(c.groups[1].test.ci_high == 1.0);
  const std::string text = ablate::format_comparison(c, "table");
  CAPTURE(text);
  CHECK(text.find("'exact_match' is a proportion (every value in [0, 1]): intervals are cut") !=
        std::string::npos);
  CHECK(c.intervals_cut);
  o.metric = "problems";
  o.higher_is_better = 1;
  const std::string both = ablate::format_comparisons({c, ablate::compare_sweep(r, o)}, "table");
  CAPTURE(both);
  CHECK(both.find("Proportions (exact_match): differences' intervals cut to [-1, 1].") !=
        std::string::npos);
  CHECK(both.find("-0.0333 [-1.0000, +1.0000]") != std::string::npos);
  // Not a proportion by name (a count): the t interval stays as it is.
  c = ablate::compare_sweep(r, o);
  CHECK(c.groups[0].summary.ci_low < 0);
}

TEST_CASE(
    "report/compare gives no p for differences that are the same in every pair, and says why") {
  TempDir d;
  ablate::Sweep s = ablate::parse_sweep(
      "name: flat\nbase: {name: x}\nsweep:\n  variants: {a: {}, b: {model.ffn: gelu}}\n  seeds: "
      "[1, 2, 3]\n",
      "flat.yaml", d.path.string(), d / "flat");
  ablate::write_manifest(s);
  // b gets one problem of 2,500 more right than a on every seed: the t-test's spread is 0.
  const double em[2][3] = {{0.2000, 0.3000, 0.2500}, {0.2004, 0.3004, 0.2504}};
  for (size_t i = 0; i < 6; ++i) {
    fs::create_directories(s.points[i].run_dir);
    auto rf = ablate::RunFile::create(ablate::run_file_path(s.points[i].run_dir));
    rf.set_attr("status", std::string("done"));
    rf.set_attr("config", std::string("model: {d_model: 8}\n"));
    rf.append("eval/arithmetic",
              {{"step", 100}, {"exact_match", em[i / 3][i % 3]}, {"em_add", 0.5}});
    rf.close();
  }
  ablate::SweepResults r = ablate::load_sweep_results(d / "flat");
  ablate::CompareOptions o;
  o.metric = "exact_match";
  ablate::Comparison c = ablate::compare_sweep(r, o);
  REQUIRE(c.groups[1].has_test);
  CHECK(c.groups[1].test.mean_diff == doctest::Approx(0.0004));
  CHECK(std::isnan(c.groups[1].test.p));  // not "p = 0, significant"
  const std::string text = ablate::format_comparison(c, "table");
  CAPTURE(text);
  CHECK(text.find("Every pair differs by the same amount in b (3 pairs: sign test p = 0.25)") !=
        std::string::npos);
  o.metric = "em_add";
  const std::string both = ablate::format_comparisons({c, ablate::compare_sweep(r, o)}, "markdown");
  CAPTURE(both);
  // No interval of zero width, no "*"; em_add does not differ at all.
  CHECK(both.find("| b | 3 | +0.0004 in all 3 pairs | +0.0000 in all 3 pairs |") !=
        std::string::npos);
  // The report's tables say the same, with no interval of zero width either.
  ablate::ReportOptions ro;
  ro.compare.metric = "exact_match";
  ro.compare.table = "eval/arithmetic";
  const std::string html = ablate::render_report(r, ro);
  CHECK(html.find(">+0.0004 in all 3 pairs</td><td class=\"n\">n/a</td>") != std::string::npos);
  CHECK(html.find(">+0.0000 in all 3 pairs</td>") !=
        std::string::npos);  // em_add, in the evaluator's table
  CHECK(html.find("[+0.0004, +0.0004]") == std::string::npos);
  CHECK(html.find("[+0.0000, +0.0000]") == std::string::npos);
}

TEST_CASE(
    "report/compare says when the runs were made on more than one kind of CPU or kernel path") {
  TempDir d;
  ablate::Sweep s = ablate::parse_sweep(
      "name: m\nbase: {name: x}\nsweep:\n  variants: {a: {}, b: {model.ffn: gelu}}\n  seeds: [1, "
      "2]\n",
      "m.yaml", d.path.string(), d / "m");
  ablate::write_manifest(s);
  auto write = [&](const char* cpu_of_b_seed2) {
    for (size_t i = 0; i < 4; ++i) {
      fs::create_directories(s.points[i].run_dir);
      auto rf = ablate::RunFile::create(ablate::run_file_path(s.points[i].run_dir));
      rf.set_attr("status", std::string("done"));
      rf.set_attr("config", std::string("model: {d_model: 8}\n"));
      rf.set_attr("cpu", std::string(i == 3 ? cpu_of_b_seed2 : "Intel Xeon (family 6 model 167)"));
      rf.set_attr("kernel_path", std::string("avx512"));
      rf.append("eval", {{"step", 100}, {"val_loss", 1.0 + 0.1 * static_cast<double>(i)}});
      rf.append("eval/arithmetic",
                {{"step", 100}, {"exact_match", 0.1 * static_cast<double>(i)}, {"em_add", 0.5}});
      rf.close();
    }
  };
  write("Intel Xeon (family 6 model 167)");
  ablate::Comparison c = ablate::compare_sweep(ablate::load_sweep_results(d / "m"), {});
  CHECK(c.machines.empty());
  CHECK(ablate::format_comparison(c, "table").find("kinds of machine") == std::string::npos);
  write("AMD EPYC (family 25 model 17)");
  ablate::SweepResults r = ablate::load_sweep_results(d / "m");
  c = ablate::compare_sweep(r, {});
  CAPTURE(c.machines);
  CHECK(c.machines ==
        "The runs were made on 2 kinds of machine: Intel Xeon (family 6 model 167), kernel path "
        "avx512: 3 runs "
        "(a-seed1, a-seed2, b-seed1); AMD EPYC (family 25 model 17), kernel path avx512: 1 run "
        "(b-seed2). Their "
        "kernels round differently, so runs paired by seed are not the same computation on both.");
  CHECK(count(ablate::format_comparison(c, "markdown"), "2 kinds of machine") == 1);
  CHECK(count(ablate::format_comparisons({c, c}, "table"), "2 kinds of machine") == 1);
  // A group with values but none paired with the baseline (its seeds not run there yet) shows its
  // mean.
  fs::remove_all(s.points[0].run_dir);
  fs::remove_all(s.points[1].run_dir);
  const ablate::SweepResults unpaired = ablate::load_sweep_results(d / "m");
  ablate::CompareOptions em;
  em.metric = "exact_match";
  const std::string md = ablate::format_comparisons(
      {ablate::compare_sweep(unpaired, {}), ablate::compare_sweep(unpaired, em)}, "markdown");
  CAPTURE(md);
  CHECK(md.find("| b | 2 | mean 1.2500, no pairs | mean 0.2500, no pairs |") != std::string::npos);
  // b's exact-match interval is cut at 0, but that table shows no interval: no note about cuts.
  CHECK(ablate::compare_sweep(unpaired, em).intervals_cut);
  CHECK(md.find("intervals cut") == std::string::npos);
  // The report says it once, under its first table, not under each evaluator metric's.
  const std::string html = ablate::render_report(r);
  CHECK(count(html, "<h3 id=") >= 3);
  CHECK(count(html, "2 kinds of machine") == 1);
}

TEST_CASE("report/a metric's direction and bounds as the runs declare them, before its name") {
  using ablate::Better;
  const ablate::MetricSpecs specs{
      {"eval", {{"val_loss", Better::lower, 0}, {"widgets", Better::higher, 0, 1}}},
      {"eval/arithmetic", {{"em_*", Better::higher, 0, 1}, {"problems", Better::neither, 0}}}};
  const ablate::MetricSpecs back = ablate::parse_metric_specs(ablate::metric_specs_yaml(specs));
  REQUIRE(back.size() == 2);
  const ablate::MetricSpec* em = ablate::find_metric_spec(back.at("eval/arithmetic"), "em_add");
  REQUIRE(em != nullptr);
  CHECK(em->better == Better::higher);
  CHECK(em->lo == 0);
  CHECK(em->hi == 1);
  CHECK(ablate::find_metric_spec(back.at("eval/arithmetic"), "exact_match") == nullptr);
  CHECK(std::isinf(back.at("eval")[0].hi));
  CHECK_THROWS_WITH_AS(ablate::parse_metric_specs("{eval: [{column: x, better: up}]}"),
                       doctest::Contains("eval[0]: better 'up'"), ablate::Error);

  // Runs that log "widgets" (a name that tells nothing) and declare it better higher: compare
  // counts wins by it; without the declaration it cannot.
  TempDir d;
  const ablate::Sweep s = manifest_of(
      d, "w", "  variants: {a: {model.ffn: relu}, b: {model.ffn: gelu}}\n  seeds: [1, 2]\n");
  const double widgets[] = {0.2, 0.3, 0.5, 0.45};
  for (size_t i = 0; i < 4; ++i) {
    fake_run(s.points[i].run_dir, 1.7, 1000);
    auto rf = ablate::RunFile::open_append(ablate::run_file_path(s.points[i].run_dir));
    rf.append("eval/count", {{"step", 300}, {"widgets", widgets[i]}});
    rf.set_attr("metric_specs",
                ablate::metric_specs_yaml({{"eval/count", {{"widgets", Better::higher, 0, 1}}}}));
    rf.close();
  }
  ablate::SweepResults r = ablate::load_sweep_results(d / "w");
  ablate::CompareOptions o;
  o.metric = "widgets";
  ablate::Comparison c = ablate::compare_sweep(r, o);
  CHECK(c.direction_known);
  CHECK(c.higher_is_better);
  CHECK(c.direction_source == "declared by the runs");
  CHECK(c.groups[1].wins == 2);
  CHECK(ablate::format_comparison(c, "table").find("higher is better (declared by the runs)") !=
        std::string::npos);
  // As given beats declared; a loss-named column declared higher follows the declaration.
  o.higher_is_better = 0;
  c = ablate::compare_sweep(r, o);
  CHECK_FALSE(c.higher_is_better);
  CHECK(c.direction_source == "as given");
  // The same runs without the attribute: the name does not tell.
  for (size_t i = 0; i < 4; ++i) {
    auto rf = ablate::RunFile::open_append(ablate::run_file_path(s.points[i].run_dir));
    rf.set_attr("metric_specs", "{}");
    rf.close();
  }
  ablate::SweepResults r2 = ablate::load_sweep_results(d / "w");
  o.higher_is_better = -1;
  c = ablate::compare_sweep(r2, o);
  CHECK_FALSE(c.direction_known);
}

TEST_CASE("report/compare on synthetic runs matches hand-computed statistics") {
  TempDir d;
  ablate::SweepResults r = ablate::load_sweep_results(synthetic_sweep(d));
  ablate::Comparison c = ablate::compare_sweep(r, {});
  CHECK(c.by == "variant");
  CHECK(c.baseline == "relu");
  CHECK(c.table == "eval");
  CHECK_FALSE(c.higher_is_better);
  REQUIRE(c.groups.size() == 3);
  const auto& relu = c.groups[0];
  const auto& swiglu = c.groups[1];
  const auto& gelu = c.groups[2];
  CHECK(relu.is_baseline);
  CHECK(relu.summary.mean == doctest::Approx(1.76));
  CHECK(relu.summary.std == doctest::Approx(0.01));
  CHECK(relu.summary.ci_high - relu.summary.mean ==
        doctest::Approx(4.302652729749464 * 0.01 / std::sqrt(3.0)));
  // Differences -0.05, -0.03, -0.07: mean -0.05, sd 0.02, t = -0.05 / (0.02 / sqrt 3) with
  // 2 degrees of freedom, whose two-sided p is 1 - |t| / sqrt(2 + t^2).
  REQUIRE(swiglu.has_test);
  const double tt = -0.05 / (0.02 / std::sqrt(3.0));
  CHECK(swiglu.test.n == 3);
  CHECK(swiglu.test.mean_diff == doctest::Approx(-0.05));
  CHECK(swiglu.test.t == doctest::Approx(tt));
  CHECK(swiglu.test.p == doctest::Approx(1 - std::fabs(tt) / std::sqrt(2 + tt * tt)));
  CHECK(swiglu.test.p == doctest::Approx(0.0494).epsilon(1e-3));
  CHECK(swiglu.wins == 3);
  CHECK(swiglu.params_min == 990);
  // gelu: one value, one failed run, one missing run; all reported.
  CHECK(gelu.summary.n == 1);
  CHECK(gelu.runs.size() == 3);
  CHECK(gelu.test.n == 1);
  CHECK(std::isnan(gelu.test.p));
  CHECK(gelu.wins == 1);
  REQUIRE(gelu.problems.size() == 2);
  CHECK(gelu.problems[0] == "gelu-seed2: failed: step 150: loss is not finite");
  CHECK(gelu.problems[1] == "gelu-seed3: missing (not run yet)");

  // At a step, best, another table, higher-is-better by name, another baseline.
  ablate::CompareOptions o;
  o.at = "step=200";
  c = ablate::compare_sweep(r, o);
  CHECK(c.groups[0].summary.mean == doctest::Approx(1.76 + 0.15));
  o.at = "best";
  CHECK(ablate::compare_sweep(r, o).groups[1].summary.mean == doctest::Approx(1.71));
  o = {};
  o.metric = "exact_match";
  c = ablate::compare_sweep(r, o);
  CHECK(c.table == "eval/arithmetic");
  CHECK(c.higher_is_better);
  CHECK(c.groups[1].wins == 3);
  CHECK(c.groups[1].test.mean_diff == doctest::Approx(0.05));
  // A name that tells nothing: no direction is guessed, so no wins and no best value.
  o = {};
  o.metric = "grad_norm";
  o.table = "train";
  c = ablate::compare_sweep(r, o);
  CHECK_FALSE(c.direction_known);
  const std::string unknown = ablate::format_comparison(c, "table");
  CAPTURE(unknown);
  CHECK(unknown.find("direction not known") != std::string::npos);
  CHECK(unknown.find("no wins are counted; add --higher-is-better or --lower-is-better") !=
        std::string::npos);
  CHECK(unknown.find("3/3") == std::string::npos);
  o.at = "best";
  CHECK_THROWS_WITH_AS(ablate::compare_sweep(r, o),
                       doctest::Contains("Fix: add --higher-is-better or --lower-is-better"),
                       ablate::Error);
  o.higher_is_better = 0;
  c = ablate::compare_sweep(r, o);
  CHECK(c.direction_known);
  CHECK_FALSE(c.higher_is_better);
  o = {};
  o.baseline = "swiglu";
  c = ablate::compare_sweep(r, o);
  CHECK(c.groups[0].test.mean_diff == doctest::Approx(0.05));
  CHECK(c.groups[0].wins == 0);
  o.by = "point";
  o.baseline = "";
  CHECK(ablate::compare_sweep(r, o).baseline == "relu");
  o = {};
  o.at = "step=7";
  c = ablate::compare_sweep(r, o);
  CHECK(c.groups[0].summary.n == 0);
  CHECK(c.groups[0].problems[0].find("no eval row at step 7 (its steps: 100 to 300)") !=
        std::string::npos);
  o.at = "last";
  CHECK_THROWS_WITH_AS(ablate::compare_sweep(r, o),
                       doctest::Contains("expected final, best or step=N"), ablate::Error);
  o = {};
  o.baseline = "swigl";
  CHECK_THROWS_WITH_AS(ablate::compare_sweep(r, o), doctest::Contains("Did you mean 'swiglu'?"),
                       ablate::Error);

  // Several metrics in one table: the baseline's mean ± std, the others' paired differences.
  {
    ablate::CompareOptions a, b;
    b.metric = "exact_match";
    const std::vector<ablate::Comparison> both{ablate::compare_sweep(r, a),
                                               ablate::compare_sweep(r, b)};
    const std::string m2 = ablate::format_comparisons(both, "markdown");
    CAPTURE(m2);
    CHECK(m2.find("| variant | n | eval/val_loss | eval/arithmetic/exact_match |") !=
          std::string::npos);
    CHECK(m2.find("| relu | 3 | 1.7600 ± 0.0100 | 0.1000 ± ") !=
          std::string::npos);  // std ~1e-17: equal values
    CHECK(m2.find("| swiglu | 3 | -0.0500 [-0.0997, -0.0003] * | +0.0500 in all 3 pairs |") !=
          std::string::npos);
    CHECK(m2.find("| gelu | 1/3 | -0.0200 (1 pair) | +0.0000 (1 pair) |") != std::string::npos);
    CHECK(m2.find("val_loss: lower is better; exact_match: higher is better") != std::string::npos);
    CHECK(count(m2, "gelu-seed3: missing (not run yet)") == 1);
    const std::string csv2 = ablate::format_comparisons(both, "csv");
    CHECK(count(csv2, "group,n,runs,mean") == 1);
    CHECK(count(csv2, "\n") == 1 + 3 + 3);
    CHECK_THROWS_WITH_AS(ablate::format_comparisons(both, "tabel"),
                         doctest::Contains("Did you mean 'table'?"), ablate::Error);
  }

  // Text formats.
  const std::string md = ablate::format_comparison(ablate::compare_sweep(r, {}), "markdown");
  CAPTURE(md);
  CHECK(md.find("| swiglu | 3 | 1.7100 ± 0.0100 | [1.6852, 1.7348] | -0.0500 [-0.0997, -0.0003] | "
                "0.0494 | 3/3 | 990 |") != std::string::npos);
  CHECK(md.find("| gelu | 1/3 | 1.7400 | n/a | -0.0200 | n/a | 1/1 | 1000 |") != std::string::npos);
  CHECK(md.find("- Not included (2):") != std::string::npos);
}

TEST_CASE("report/each variant's paired difference from the baseline over the steps, with its CI") {
  TempDir d;
  ablate::SweepResults r = ablate::load_sweep_results(synthetic_sweep(d));
  const ablate::ReportOptions o;
  const ablate::Comparison c = ablate::compare_sweep(r, o.compare);
  const std::vector<ablate::svg::Series> diffs = ablate::difference_series(r, c, o);
  // The synthetic curves keep each run's final offset at every evaluation (steps 100-300):
  // swiglu - relu is -0.05, -0.03, -0.07 at each step; gelu has one pair (1.74 - 1.76).
  REQUIRE(diffs.size() == 2);
  CHECK(diffs[0].label == "swiglu");
  CHECK(diffs[0].x == std::vector<double>{100, 200, 300});
  const double half = 4.302652729749464 * 0.02 / std::sqrt(3.0);
  for (size_t i = 0; i < 3; ++i) {
    CHECK(diffs[0].y[i] == doctest::Approx(-0.05));
    CHECK(diffs[0].lo[i] == doctest::Approx(-0.05 - half));
    CHECK(diffs[0].hi[i] == doctest::Approx(-0.05 + half));
  }
  CHECK(diffs[1].label == "gelu");
  REQUIRE(diffs[1].y.size() == 3);
  CHECK(diffs[1].y[2] == doctest::Approx(-0.02));
  CHECK(diffs[1].lo[2] == diffs[1].y[2]);  // one pair: no interval
  const std::string html = ablate::render_report(r, o);
  CHECK(html.find("Difference from relu over training: val_loss") != std::string::npos);
  CHECK(html.find("Auxiliary term") == std::string::npos);  // no run logs one
  CHECK(html.find("Below the dashed line is better.") != std::string::npos);
  // At another metric the differences follow it.
  ablate::ReportOptions tl;
  tl.compare.metric = "train_loss";
  const auto tdiffs = ablate::difference_series(r, ablate::compare_sweep(r, tl.compare), tl);
  REQUIRE(tdiffs.size() == 2);
  CHECK(tdiffs[0].y[0] == doctest::Approx(-0.05));
}

TEST_CASE("report/the HTML page renders in headless Chromium with its plots drawn") {
  TempDir d;
  const std::string dir = synthetic_sweep(d);
  auto rep = ablate::test::run_command(ablate::test::ablate_binary() + " report " + dir + " -o " +
                                       (d / "report.html"));
  CAPTURE(rep.output);
  REQUIRE(rep.status == 0);
  const std::string html = ablate::test::read_file(d / "report.html");
  CHECK(html.rfind("<!DOCTYPE html>", 0) == 0);
  CHECK(html.find("<script") == std::string::npos);
  CHECK(html.find("ROMEO: &lt;b&gt;hi&lt;/b&gt;") != std::string::npos);  // escaped sample
  CHECK(html.find("gelu-seed2: failed: step 150") != std::string::npos);
  // Runs left out are listed once, under the first table; later tables count them.
  CHECK(count(html, "<li>gelu-seed3: missing (not run yet)</li>") == 1);
  CHECK(html.find("Not included (2): 2 runs listed under the first table") != std::string::npos);
  CHECK(html.find("<th>p (paired t-test)</th>") != std::string::npos);
  // An evaluator table's metrics: indexed, the headline first, then breakdowns, then counts.
  CHECK(html.find("eval/arithmetic: <a href=\"#cmp-eval/arithmetic-exact_match\">exact_match</a> "
                  "<a href=") != std::string::npos);
  const size_t em = html.find("<h3 id=\"cmp-eval/arithmetic-exact_match\">"),
               carries = html.find("<h3 id=\"cmp-eval/arithmetic-em_add_carries_1\">"),
               problems = html.find("<h3 id=\"cmp-eval/arithmetic-problems\">");
  CHECK(em < carries);
  CHECK(carries < problems);
  CHECK(problems != std::string::npos);
  // --columns: only the chosen evaluator metrics get a table and a plot.
  auto some = ablate::test::run_command(ablate::test::ablate_binary() + " report " + dir + " -o " +
                                        (d / "some.html") + " --columns 'exact*,em_*'");
  CAPTURE(some.output);
  REQUIRE(some.status == 0);
  const std::string chosen = ablate::test::read_file(d / "some.html");
  CHECK(chosen.find("<h3 id=\"cmp-eval/arithmetic-em_add_carries_1\">") != std::string::npos);
  CHECK(chosen.find("<h3 id=\"cmp-eval/arithmetic-problems\">") == std::string::npos);
  CHECK(chosen.find("\">problems</a>") == std::string::npos);  // nor in the index
  CHECK(html.find("\">problems</a>") != std::string::npos);
  CHECK(count(chosen, "<svg") == count(html, "<svg") - 1);  // the problems plot is gone
  // The main comparison's metric is not repeated among the evaluator's tables.
  auto main_em = ablate::test::run_command(ablate::test::ablate_binary() + " report " + dir +
                                           " -o " + (d / "em.html") + " -m exact_match");
  REQUIRE(main_em.status == 0);
  const std::string em_page = ablate::test::read_file(d / "em.html");
  CHECK(count(em_page, "<h3 id=\"cmp-eval/arithmetic-exact_match\">") == 1);
  CHECK(count(html, "<h3 id=\"cmp-eval/arithmetic-exact_match\">") == 1);
  auto none = ablate::test::run_command(ablate::test::ablate_binary() + " report " + dir + " -o " +
                                        (d / "none.html") + " --columns exact_mach");
  CHECK(none.status == 1);
  CHECK(none.output.find("--columns 'exact_mach': no evaluator metric matches it; the runs have "
                         "em_add_carries_1, exact_match, problems. "
                         "Did you mean 'exact_match'?") != std::string::npos);
  CHECK(html.find("exact_match") != std::string::npos);
  CHECK(html.find("<th>CPU time (mean)</th>") != std::string::npos);
  CHECK(html.find("<td class=\"n\">1.5 min</td>") != std::string::npos);  // 90 CPU-seconds
  CHECK(count(html, "<details>") == 9 + 3);  // 9 configs, one sample per variant with runs
  CHECK(count(html, "<svg") >= 4);

  if (ablate::test::run_command("command -v chromium").status != 0) {
    MESSAGE(
        "chromium is not installed: skipping the rendering check (tools/bootstrap.sh installs it)");
    return;
  }
  // The DOM after rendering holds the plots' paths...
  auto dom = ablate::test::run_command(ablate::test::chromium_flags(d) + "--dump-dom file://" +
                                       (d / "report.html") + " 2>/dev/null");
  REQUIRE(dom.status == 0);
  CHECK(count(dom.output, "<path class=\"line\"") >= 6);
  CHECK(count(dom.output, "<path class=\"band\"") >= 4);
  // ...and the screenshot shows them: many non-white pixels, and pixels in the colours
  // of the first two series.
  auto shot = ablate::test::run_command(ablate::test::chromium_flags(d) +
                                        "--screenshot=" + (d / "report.png") +
                                        " --window-size=1000,1500 file://" + (d / "report.html"));
  CAPTURE(shot.output);
  REQUIRE(fs::exists(d / "report.png"));
  d.write("png_stats.py", ablate::test::kPngStats);
  auto st = ablate::test::run_command("/usr/bin/python3 " + (d / "png_stats.py") + " " +
                                      (d / "report.png"));
  CAPTURE(st.output);
  REQUIRE(st.status == 0);
  std::istringstream in(st.output);
  long w = 0, h = 0, nonwhite = 0, blue = 0, orange = 0;
  in >> w >> h >> nonwhite >> blue >> orange;
  CHECK(w == 1000);
  CHECK(h == 1500);
  CHECK(nonwhite > w * h / 50);
  CHECK(blue > 300);
  CHECK(orange > 300);
}

TEST_CASE("report/a two-dimensional grid gets a heat map") {
  TempDir d;
  ablate::Sweep s = ablate::parse_sweep(
      "name: norms\nbase: {name: x}\nsweep:\n  grid: {model.block: [prenorm, postnorm], "
      "model.norm.type: [layernorm, rmsnorm]}\n"
      "  seeds: [1, 2]\n",
      "n.yaml", d.path.string(), d / "norms");
  ablate::write_manifest(s);
  for (const auto& p : s.points)
    fake_run(p.run_dir, 1.7 + 0.01 * static_cast<double>(p.index / 2), 1000);
  ablate::SweepResults r = ablate::load_sweep_results(d / "norms");
  ablate::Comparison c = ablate::compare_sweep(r, {});
  CHECK(c.by == "point");
  CHECK(c.groups.size() == 4);
  CHECK(c.groups[3].label == "block=postnorm norm=rmsnorm");
  const std::string html = ablate::render_report(r);
  CHECK(count(html, "class=\"ablate-heatmap\"") == 1);
  CHECK(count(html, "<rect class=\"cell\"") == 4);
  CHECK(html.find("model.block") != std::string::npos);

  // Zipped keys move together: they are one dimension of the heat map.
  ablate::Sweep z = ablate::parse_sweep(
      "name: zipped\nbase: {name: x}\nsweep:\n  grid: {model.norm.type: [layernorm, rmsnorm]}\n"
      "  zip: {model.block: [prenorm, postnorm], model.norm.final: [true, false]}\n  seeds: [1]\n",
      "z.yaml", d.path.string(), d / "zipped");
  ablate::write_manifest(z);
  for (const auto& p : z.points)
    fake_run(p.run_dir, 1.7 + 0.01 * static_cast<double>(p.index), 1000);
  const std::string zh = ablate::render_report(ablate::load_sweep_results(d / "zipped"));
  CHECK(count(zh, "<rect class=\"cell\"") == 4);
  CHECK(zh.find("model.block + model.norm.final") != std::string::npos);
  CHECK(zh.find(">block=postnorm final=false</text>") != std::string::npos);
}

TEST_CASE("report/compare any runs: directories, globs, run.h5 files, grouping by what differs") {
  TempDir d;
  // lr 1e-3 vs 3e-3, seeds 1 and 2 each: the same numbers as relu and swiglu above.
  const double a[] = {1.76, 1.75}, b[] = {1.71, 1.72};
  for (int i = 0; i < 2; ++i) {
    const std::string seed = std::to_string(i + 1);
    fake_run(d / ("runs/lr1-s" + seed), a[i], 1000, "done",
             "seed: " + seed + "\nname: x" + seed +
                 "\noptimizer: {lr: 0.001}\ntrain: {log_every: 10}\n");
    // Options that only say how a run is logged or kept (ablate::bookkeeping_option) are no
    // dimension.
    fake_run(d / ("runs/lr3-s" + seed), b[i], 1000, "done",
             "seed: " + seed + "\nname: y" + seed +
                 "\noptimizer: {lr: 0.003}\ntrain: {log_every: " + std::to_string(5 * i + 20) +
                 ", keep_checkpoints: [500]}\n");
  }
  ablate::SweepResults r =
      ablate::load_run_results({d / "runs/lr1-s*", d / "runs/lr3-s1/run.h5", d / "runs/lr3-s2/"});
  REQUIRE(r.runs.size() == 4);
  CHECK(r.any_runs);
  CHECK(r.sweep.points[0].id == "lr1-s1");
  CHECK(r.sweep.points[2].id == "lr3-s1");
  CHECK(r.sweep.grid_keys == std::vector<std::string>{"optimizer.lr"});  // seed and name aside
  ablate::Comparison c = ablate::compare_sweep(r, {});
  CHECK(c.by == "optimizer.lr");
  REQUIRE(c.groups.size() == 2);
  CHECK(c.groups[0].label == "0.001");
  CHECK(c.groups[0].summary.mean == doctest::Approx(1.755));
  REQUIRE(c.groups[1].has_test);
  CHECK(c.groups[1].test.n == 2);  // paired by seed
  CHECK(c.groups[1].test.mean_diff == doctest::Approx(-0.04));
  CHECK(c.groups[1].wins == 2);
  ablate::CompareOptions o;
  o.by = "run";
  c = ablate::compare_sweep(r, o);
  CHECK(c.groups.size() == 4);
  CHECK(c.groups[3].label == "lr3-s2");
  CHECK_FALSE(
      c.groups[1]
          .has_test);  // runs pair by seed: lr1-s2 (seed 2) has no partner in the baseline lr1-s1
  CHECK(c.groups[2].test.n == 1);
  o.by = "optimizer.l";
  CHECK_THROWS_WITH_AS(ablate::compare_sweep(r, o),
                       doctest::Contains("Did you mean 'optimizer.lr'?"), ablate::Error);
  // The same path twice counts once; the same seed only: one group per run by default.
  CHECK(ablate::load_run_results({d / "runs/lr1-s1", d / "runs/lr1-s1/"}).runs.size() == 1);
  const ablate::Comparison two_seeds =
      ablate::compare_sweep(ablate::load_run_results({d / "runs/lr1-s1", d / "runs/lr1-s2"}), {});
  CHECK(two_seeds.by == "run");
  // Two runs of different seeds never pair: a note says why there is no difference, and what
  // compares them.
  auto says_unpaired = [](const ablate::Comparison& x) {
    return std::any_of(x.notes.begin(), x.notes.end(), [](const std::string& n) {
      return n.find("No group has a run paired") == 0;
    });
  };
  CHECK(says_unpaired(two_seeds));
  CHECK(ablate::format_comparison(two_seeds, "table")
            .find("--by point gives their mean and CI over the seeds") != std::string::npos);
  {  // and what the note says does: one group of both seeds (runs given one by one have no
     // variants)
    ablate::CompareOptions pooled;
    pooled.by = "point";
    const ablate::Comparison one = ablate::compare_sweep(
        ablate::load_run_results({d / "runs/lr1-s1", d / "runs/lr1-s2"}), pooled);
    REQUIRE(one.groups.size() == 1);
    CHECK(one.groups[0].summary.n == 2);
    CHECK(one.groups[0].summary.mean == doctest::Approx(1.755));
  }
  CHECK_FALSE(says_unpaired(c));  // by run over the lr grid: lr3-s1 pairs with lr1-s1
  // A run directory without a run file yet (config.yaml written, nothing else) is listed, not
  // dropped.
  fs::create_directories(d / "runs/lr9-s1");
  d.write("runs/lr9-s1/config.yaml", "name: x\n");
  c = ablate::compare_sweep(ablate::load_run_results({d / "runs/lr*"}), {});
  REQUIRE(c.groups.size() == 3);
  CHECK(c.groups[2].label == "-");  // no options known
  CHECK(c.groups[2].problems == std::vector<std::string>{"lr9-s1: missing (not run yet)"});
  fs::remove_all(d / "runs/lr9-s1");
  // Point labels: a variant choice by its family (model.ffn.type -> ffn), keys that would
  // read alike by more of their path (model.norm.eps, optimizer.eps).
  fake_run(d / "runs/v-a", 1.7, 1000, "done",
           "seed: 1\nmodel: {ffn: {type: relu}, norm: {eps: 1.0e-5}}\noptimizer: {eps: 1.0e-8, lr: "
           "0.01}\n");
  fake_run(d / "runs/v-b", 1.6, 1000, "done",
           "seed: 2\nmodel: {ffn: {type: swiglu}, norm: {eps: 1.0e-6}}\noptimizer: {eps: 1.0e-7, "
           "lr: 0.02}\n");
  ablate::CompareOptions po;
  po.by = "point";
  c = ablate::compare_sweep(ablate::load_run_results({d / "runs/v-*"}), po);
  REQUIRE(c.groups.size() == 2);
  CHECK(c.groups[1].label == "ffn=swiglu norm.eps=1.0e-6 optimizer.eps=1.0e-7 lr=0.02");
  fs::remove_all(d / "runs/v-a");
  fs::remove_all(d / "runs/v-b");
  // A variant's own options (swiglu's match_params), absent or defaulted otherwise where another
  // variant is chosen, are no dimension; between runs of the same variant they are.
  auto ffn_runs = [&](const std::vector<std::string>& ffns) {
    for (size_t i = 0; i < ffns.size(); ++i)
      fake_run(d / ("runs/f-" + std::to_string(i)), 1.7 - 0.1 * static_cast<double>(i), 1000,
               "done", "seed: 1\nmodel: {ffn: " + ffns[i] + ", norm: {type: layernorm}}\n");
    const ablate::SweepResults fr = ablate::load_run_results({d / "runs/f-*"});
    for (size_t i = 0; i < ffns.size(); ++i) fs::remove_all(d / ("runs/f-" + std::to_string(i)));
    return fr.sweep.grid_keys;
  };
  CHECK(ffn_runs({"{type: swiglu, match_params: true}", "{type: relu}"}) ==
        std::vector<std::string>{"model.ffn.type"});
  CHECK(ffn_runs({"{type: swiglu, match_params: true}", "{type: relu}",
                  "{type: swiglu, match_params: false}"}) ==
        std::vector<std::string>{"model.ffn.match_params", "model.ffn.type"});
  CHECK(ffn_runs({"{type: swiglu, match_params: true}", "{type: swiglu, match_params: false}"}) ==
        std::vector<std::string>{"model.ffn.match_params"});
  // Paths that are no runs.
  CHECK_THROWS_WITH_AS(ablate::load_run_results({d / "runs/nope*"}),
                       doctest::Contains("matches no file or directory"), ablate::Error);
  CHECK_THROWS_WITH_AS(ablate::load_run_results({d / "runs"}),
                       doctest::Contains("not a run (no run.h5 in it) nor a sweep"), ablate::Error);
  CHECK_THROWS_WITH_AS(ablate::load_run_results({d / "runs/lr9"}),
                       doctest::Contains("no such file or directory"), ablate::Error);

  // The command line: runs, a quoted pattern and a sweep directory's runs.
  const std::string bin = ablate::test::ablate_binary();
  auto out = ablate::test::run_command(bin + " compare " + (d / "runs/lr1-s1") + " " +
                                       (d / "runs/lr1-s2") + " '" + (d / "runs/lr3-*") + "'");
  CAPTURE(out.output);
  REQUIRE(out.status == 0);
  CHECK(out.output.find(
            "val_loss (eval, final value; lower is better) by optimizer.lr, baseline 0.001") !=
        std::string::npos);
  CHECK(out.output.find("-0.0400") != std::string::npos);
  auto sw = ablate::test::run_command(bin + " compare " + synthetic_sweep(d) + " " +
                                      (d / "runs/lr1-s1") + " --by run -f csv");
  CAPTURE(sw.output);
  REQUIRE(sw.status == 0);
  CHECK(count(sw.output, "\n") == 1 + 9 + 1);  // header, 9 sweep points, one run
  CHECK(sw.output.find("gelu-seed2") != std::string::npos);
  auto bad = ablate::test::run_command(bin + " compare " + (d / "runs/nothing"));
  CHECK(bad.status != 0);
  CHECK(bad.output.find("no such file or directory") != std::string::npos);
}

TEST_CASE("report/export writes a run's per-step metrics as CSV") {
  TempDir d;
  fake_run(d / "run", 1.7, 1000);
  {
    auto rf = ablate::RunFile::open_append(ablate::run_file_path(d / "run"));
    rf.append("segments",
              {{"segment", 0}, {"start_step", 0}});  // no step column: left out of the join
    rf.close();
  }
  const ablate::RunData rd = ablate::read_run_file(ablate::run_file_path(d / "run"));
  const std::string all = ablate::metrics_csv(rd, "", "run");
  CAPTURE(all);
  std::istringstream in(all);
  std::string header, line;
  std::getline(in, header);
  CHECK(header ==
        "step,train/grad_norm,train/loss,train/lr,train/tokens_per_s,eval/train_loss,eval/"
        "val_loss,eval/val_ppl,"
        "eval/arithmetic/exact_match");
  std::vector<std::string> lines;
  while (std::getline(in, line)) lines.push_back(line);
  REQUIRE(lines.size() == 6);                                    // steps 50 ... 300
  CHECK(lines[0].rfind("50,1,", 0) == 0);                        // step, then train/grad_norm
  CHECK(lines[0].size() - lines[0].find_last_not_of(',') == 5);  // no eval rows at step 50
  // Step 100 has both: train loss 1.7 + 3 e^-2.5, eval val_loss 1.7 + 0.3.
  CHECK(lines[1].rfind("100,1,", 0) == 0);
  double loss = 0, val = 0;
  {
    std::vector<std::string> f;
    std::stringstream ss(lines[1]);
    for (std::string x; std::getline(ss, x, ',');) f.push_back(x);
    REQUIRE(f.size() == 9);
    loss = std::stod(f[2]);
    val = std::stod(f[6]);
  }
  CHECK(loss == 1.7 + 3.0 * std::exp(-100 / 40.0));  // shortest round-trip form: exact
  CHECK(val == 1.7 + 0.3 * 200 / 200.0);
  // One table; errors name the tables.
  CHECK(ablate::metrics_csv(rd, "segments", "run") == "segment,start_step\n0,0\n");
  const std::string ev = ablate::metrics_csv(rd, "eval", "run");
  CHECK(ev.rfind("step,train_loss,val_loss,val_ppl\n100,", 0) == 0);
  CHECK(count(ev, "\n") == 4);
  CHECK_THROWS_WITH_AS(
      ablate::metrics_csv(rd, "evl", "run"),
      doctest::Contains("Tables: train, eval, eval/arithmetic, segments. Did you mean 'eval'?"),
      ablate::Error);
  // The command: to stdout and to a file.
  const std::string bin = ablate::test::ablate_binary();
  auto out = ablate::test::run_command(bin + " export " + (d / "run") + " --csv 2>/dev/null");
  CHECK(out.status == 0);
  CHECK(out.output == all);
  auto f = ablate::test::run_command(bin + " export " + (d / "run") + " --csv --table train -o " +
                                     (d / "train.csv"));
  CAPTURE(f.output);
  CHECK(f.status == 0);
  CHECK(ablate::test::read_file(d / "train.csv")
            .rfind("step,grad_norm,loss,lr,tokens_per_s\n50,1,", 0) == 0);
  auto missing = ablate::test::run_command(bin + " export " + (d / "nope"));
  CHECK(missing.status != 0);
  CHECK(missing.output.find("no run file") != std::string::npos);
}

TEST_CASE(
    "report/curves per point, what a grouping pools, seed lines, lr and grad-norm panels, x axes, "
    "step 0") {
  TempDir d;
  ablate::Sweep s = ablate::parse_sweep(
      "name: vg\nbase: {name: x}\nsweep:\n  variants: {relu: {model.ffn: relu}, gelu: {model.ffn: "
      "gelu}}\n"
      "  grid: {model.d_model: [8, 16]}\n  seeds: [1, 2]\n",
      "vg.yaml", d.path.string(), d / "vg");
  ablate::write_manifest(s);
  for (const auto& p : s.points) {
    // 64 tokens a step at 6400 tokens/s: step 100 is 1 s of training. Eval at step 0 too.
    fs::create_directories(p.run_dir);
    auto rf = ablate::RunFile::create(ablate::run_file_path(p.run_dir));
    rf.set_attr("status", "done");
    rf.set_attr("config_resolved",
                "train: {batch_size: 4, grad_accum: 2}\nmodel: {context: 8, d_model: " +
                    p.value_of("model.d_model") + "}\n");
    const double off = 0.01 * static_cast<double>(p.index);
    for (int st = 50; st <= 300; st += 50)
      rf.append("train", {{"step", st},
                          {"loss", 2 + off},
                          {"lr", 1e-3 * st / 300},
                          {"grad_norm", 1 + off},
                          {"tokens_per_s", 6400}});
    for (int st = 0; st <= 300; st += 100)
      rf.append("eval",
                {{"step", st}, {"train_loss", 2 + off}, {"val_loss", 2.1 + off}, {"val_ppl", 8}});
    rf.close();
  }
  ablate::SweepResults r = ablate::load_sweep_results(d / "vg");
  // x values of one run.
  const auto& rd = r.runs[0].data;
  CHECK(ablate::curve_x(rd, {0, 100}, "tokens") == std::vector<double>{0, 6400});
  CHECK(ablate::curve_x(rd, {0, 50, 75, 100, 300}, "seconds") ==
        std::vector<double>{0, 0.5, 0.75, 1.0, 3.0});
  CHECK(std::isnan(ablate::curve_x(rd, {400}, "seconds")[0]));  // past the last train row
  CHECK(std::isnan(ablate::curve_x(ablate::RunData{}, {100}, "tokens")[0]));

  // --by variant pools the grid: the table's notes say so, the lines stay per point and the
  // captions say what is pooled.
  const ablate::Comparison byv = ablate::compare_sweep(r, {});
  CHECK(byv.pooled == std::vector<std::string>{"model.d_model"});
  CHECK(ablate::format_comparison(byv, "table")
            .find("Each group pools runs with different model.d_model (besides the seed)") !=
        std::string::npos);
  ablate::CompareOptions bp;
  bp.by = "point";
  CHECK(ablate::compare_sweep(r, bp).pooled.empty());
  bp.by = "model.d_model";
  CHECK(ablate::compare_sweep(r, bp).pooled == std::vector<std::string>{"variant"});
  ablate::ReportOptions o;
  std::string html = ablate::render_report(r, o);
  CHECK(count(html, "Lines are per point, not per variant: that grouping pools model.d_model") >=
        5);
  CHECK(html.find("Shaded: min to max over the seeds of each line.") != std::string::npos);
  CHECK(html.find(">relu d_model=16</text>") != std::string::npos);
  CHECK(html.find(">Learning rate</text>") != std::string::npos);
  CHECK(html.find(">Gradient norm (before clipping)</text>") != std::string::npos);
  CHECK(html.find("The first point is step 0, before training.") != std::string::npos);
  CHECK(html.find("(no data)") == std::string::npos);
  CHECK(count(html, "<path class=\"thin\"") == 0);
  // Grouped by point, nothing is pooled; seed lines on demand: one per run and panel (5 panels).
  o.compare.by = "point";
  o.seed_lines = true;
  html = ablate::render_report(r, o);
  CHECK(html.find("pools") == std::string::npos);
  CHECK(count(html, "<path class=\"thin\"") == 8 * 5);
  CHECK(html.find("Faint lines: each run.") != std::string::npos);
  // Axes.
  o.x = "tokens";
  o.log_x = o.log_y = true;
  html = ablate::render_report(r, o);
  CHECK(html.find(">tokens (steps x batch_size x grad_accum x context) (log)</text>") !=
        std::string::npos);
  CHECK(html.find("Step 0 (before training) is not drawn on a log x axis.") != std::string::npos);
  o.x = "seconds";
  CHECK(ablate::render_report(r, o).find("training seconds (estimated)") != std::string::npos);
  o.x = "tokes";
  CHECK_THROWS_WITH_AS(
      ablate::render_report(r, o),
      doctest::Contains("expected step, tokens or seconds. Did you mean 'tokens'?"), ablate::Error);
  o.x = "step";
  o.plot_width = 100;
  CHECK_THROWS_WITH_AS(ablate::render_report(r, o), doctest::Contains("--plot-width 100"),
                       ablate::Error);

  // The command line, and Chromium draws the faint lines.
  auto rep =
      ablate::test::run_command(ablate::test::ablate_binary() + " report " + (d / "vg") + " -o " +
                                (d / "r.html") + " --seeds --x tokens --log-y --plot-width 720");
  CAPTURE(rep.output);
  REQUIRE(rep.status == 0);
  CHECK(count(ablate::test::read_file(d / "r.html"),
              "class=\"ablate-plot\" width=\"720\" height=\"446\"") == 5 + 1);  // + differences
  if (ablate::test::run_command("command -v chromium").status != 0) return;
  auto dom = ablate::test::run_command(ablate::test::chromium_flags(d) + "--dump-dom file://" +
                                       (d / "r.html") + " 2>/dev/null");
  REQUIRE(dom.status == 0);
  CHECK(count(dom.output, "<path class=\"thin\"") == 8 * 5);
  CHECK(count(dom.output, "<path class=\"band\"") >= 5 * 4);
}
