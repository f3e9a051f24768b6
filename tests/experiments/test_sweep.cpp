// Sweeps: expansion into points (ids, order, seeds), located spec errors, validation
// naming the point, the manifest, and real sweeps through the `ablate` binary (parallel
// jobs, a failing point, resume, a killed point, compare and report).
#include <doctest/doctest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <future>
#include <regex>
#include <sstream>
#include <thread>

#include "ablate/compare.hpp"
#include "ablate/runfile.hpp"
#include "ablate/sweep.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using ablate::test::TempDir;

namespace {

std::string spec_error(const std::string& text, const TempDir& d) {
  try {
    ablate::parse_sweep(text, "s.yaml", d.path.string());
  } catch (const ablate::ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

std::string validation_error(const std::string& text, const TempDir& d) {
  ablate::test::registry();
  setenv("ABLATE_DATA_PATH", ABLATE_TEST_DATA_DIR, 1);
  try {
    ablate::validate_sweep(ablate::parse_sweep(text, "s.yaml", d.path.string(), d / "out"));
  } catch (const ablate::Error& e) {
    return e.what();
  }
  return "(no error)";
}

using ablate::test::kTinyBase;

std::string ablate_cmd(const TempDir& d, const std::string& args) {
  return "cd " + d.path.string() + " && ABLATE_DATA_PATH=" + ABLATE_TEST_DATA_DIR + " " +
         ablate::test::ablate_binary() + " " + args;
}

}  // namespace

TEST_CASE("sweep/points: variants x grid x zip x seeds, in a fixed order with stable ids") {
  TempDir d;
  const std::string text = R"(name: demo
base: {name: x}
overrides: {train.steps: 10}
sweep:
  variants:
    relu: {model.ffn: relu}
    swiglu: {model.ffn: {type: swiglu, match_params: true}}
  baseline: swiglu
  grid:
    model.d_model: [32, 48]
    model.n_layers: [1, 2]
  zip:
    optimizer.lr: [1.0e-3, 3.0e-3]
    optimizer.betas: [[0.9, 0.95], [0.9, 0.99]]
  seeds: 3
  seed: 11
)";
  ablate::Sweep s = ablate::parse_sweep(text, "s.yaml", d.path.string(), d / "out");
  REQUIRE(s.points.size() == 2 * 2 * 2 * 2 * 3);
  CHECK(s.variants == std::vector<std::string>{"relu", "swiglu"});
  CHECK(s.baseline == "swiglu");
  CHECK(s.grid_keys == std::vector<std::string>{"model.d_model", "model.n_layers"});
  CHECK(s.zip_keys == std::vector<std::string>{"optimizer.lr", "optimizer.betas"});
  REQUIRE(s.seeds.size() == 3);
  // index = ((variant * 4 + grid) * 2 + zip) * 3 + seed; the last grid key varies fastest.
  const ablate::SweepPoint& p0 = s.points[0];
  CHECK(p0.id == "relu-d_model=32-n_layers=1-lr=1.0e-3-betas=0.9_0.95-seed0");
  CHECK(p0.override_texts() == std::vector<std::string>{"train.steps=10", "model.ffn=relu",
                                                        "model.d_model=32", "model.n_layers=1",
                                                        "optimizer.lr=1.0e-3",
                                                        "optimizer.betas=[0.9, 0.95]",
                                                        "seed=" + std::to_string(s.seeds[0])});
  CHECK(s.points[1].id == "relu-d_model=32-n_layers=1-lr=1.0e-3-betas=0.9_0.95-seed1");
  CHECK(s.points[3].id == "relu-d_model=32-n_layers=1-lr=3.0e-3-betas=0.9_0.99-seed0");
  CHECK(s.points[6].id == "relu-d_model=32-n_layers=2-lr=1.0e-3-betas=0.9_0.95-seed0");
  CHECK(s.points[12].id == "relu-d_model=48-n_layers=1-lr=1.0e-3-betas=0.9_0.95-seed0");
  const ablate::SweepPoint& p = s.points[((1 * 4 + 3) * 2 + 1) * 3 + 2];
  CHECK(p.id == "swiglu-d_model=48-n_layers=2-lr=3.0e-3-betas=0.9_0.99-seed2");
  CHECK(p.variant == "swiglu");
  CHECK(p.value_of("model.ffn") == "{type: swiglu, match_params: true}");
  CHECK(p.value_of("model.d_model") == "48");
  CHECK(p.seed == s.seeds[2]);
  CHECK(p.run_dir == (fs::path(d / "out") / "runs" / p.id).string());
  for (const auto& q : s.points) {
    CHECK(q.index == &q - &s.points[0]);
    CHECK(std::regex_match(q.id, std::regex("[A-Za-z0-9._=+-]+")));
  }
  // Seeds pair across variants (same seed index, same seed) for paired comparisons.
  CHECK(s.points[0].seed == s.points[24].seed);

  // --points: indices, ranges and id globs, in point order without repeats.
  CHECK(ablate::select_points(s, "5, 0-2") == std::vector<int64_t>{0, 1, 2, 5});
  const std::vector<int64_t> last_seeds = ablate::select_points(s, "swiglu-*-seed2");
  REQUIRE(last_seeds.size() == 8);
  for (int64_t i : last_seeds)
    CHECK((s.points[static_cast<size_t>(i)].variant == "swiglu" &&
           s.points[static_cast<size_t>(i)].seed_index == 2));
  CHECK(ablate::select_points(s, "*-seed0,0").size() == 16);
  CHECK_THROWS_WITH_AS(
      ablate::select_points(s, "0,48"),
      doctest::Contains("'48' is not a range of this sweep's points; allowed: indices 0 to 47"),
      ablate::Error);
  CHECK_THROWS_WITH_AS(ablate::select_points(s, "3-1"), doctest::Contains("'3-1' is not a range"),
                       ablate::Error);
  CHECK_THROWS_WITH_AS(ablate::select_points(s, "99999999999999999999"),
                       doctest::Contains("matches no point id"), ablate::Error);
  CHECK_THROWS_WITH_AS(ablate::select_points(s, "0,,1"), doctest::Contains("an empty item"),
                       ablate::Error);
  CHECK_THROWS_WITH_AS(ablate::select_points(s, "relu-*-seed9"),
                       doctest::Contains("'relu-*-seed9' matches no point id"), ablate::Error);
  CHECK_THROWS_WITH_AS(
      ablate::select_points(s, "relu-d_model=32-n_layers=1-lr=1.0e-3-betas=0.9_0.95-sed0"),
      doctest::Contains(
          "Did you mean 'relu-d_model=32-n_layers=1-lr=1.0e-3-betas=0.9_0.95-seed0'?"),
      ablate::Error);

  // A pure function of the file: parsing again gives the same points; another sweep
  // seed gives other seeds but the same ids.
  ablate::Sweep again = ablate::parse_sweep(text, "s.yaml", d.path.string(), d / "out");
  CHECK(ablate::manifest_text(again) == ablate::manifest_text(s));
  ablate::Sweep other =
      ablate::parse_sweep(std::regex_replace(text, std::regex("seed: 11"), "seed: 12"), "s.yaml",
                          d.path.string(), d / "out");
  CHECK(other.seeds != s.seeds);
  CHECK(other.points[5].id == s.points[5].id);

  // An explicit list names the seeds in the ids; no variants, no grid: only seeds.
  ablate::Sweep listed = ablate::parse_sweep("base: {name: x}\nsweep: {seeds: [7, 3]}\n",
                                             "plain.yaml", d.path.string());
  REQUIRE(listed.points.size() == 2);
  CHECK(listed.points[0].id == "seed7");
  CHECK(listed.points[1].id == "seed3");
  CHECK(listed.points[1].override_texts() == std::vector<std::string>{"seed=3"});
  CHECK(listed.name == "plain");
  CHECK(listed.dir == "sweeps/plain");
  // Values that would break a path are made safe.
  ablate::Sweep odd = ablate::parse_sweep(
      "base: {name: x}\nsweep: {grid: {data.path: [a/b.txt, 'c d']}}\n", "o.yaml", d.path.string());
  CHECK(odd.points[0].id == "path=a_b.txt-seed0");
  CHECK(odd.points[1].id == "path=c_d-seed0");
}

TEST_CASE("sweep/spec errors name file:line:col, the key, what is allowed and a fix") {
  TempDir d;
  auto has = [](const std::string& msg, const std::string& part) {
    CAPTURE(msg);
    CHECK(msg.find(part) != std::string::npos);
  };
  std::string e = spec_error("base: {name: x}\nsweeps:\n  seeds: 2\n", d);
  has(e, "s.yaml:2:1: sweeps: unknown key");
  has(e, "Did you mean 'sweep'?");
  e = spec_error("base: {name: x}\nsweep:\n  grids: {model.d_model: [1]}\n", d);
  has(e, "s.yaml:3:3: sweep.grids: unknown key in sweep");
  has(e, "Did you mean 'grid'?");
  e = spec_error("base: {name: x}\nsweep:\n  grid:\n    model.d_model: 64\n", d);
  has(e, "s.yaml:4:20: sweep.grid.model.d_model: expected a non-empty list");
  has(e, "(write [64])");
  e = spec_error(
      "base: {name: x}\nsweep:\n  zip:\n    optimizer.lr: [1, 2, 3]\n    train.steps: [10, 20]\n",
      d);
  has(e, "s.yaml:5:18: sweep.zip.train.steps: has 2 values but optimizer.lr has 3");
  e = spec_error(
      "base: {name: x}\nsweep:\n  variants: {relu: {model.ffn: relu}, swiglu: {model.ffn: "
      "swiglu}}\n  baseline: swiglo\n",
      d);
  has(e,
      "s.yaml:4:13: sweep.baseline: 'swiglo' is not a variant; variants: relu, swiglu. Did you "
      "mean 'swiglu'?");
  e = spec_error(
      "base: {name: x}\nsweep:\n  variants: {relu: {model.ffn: relu}, swiglu: {model.ffn: "
      "swiglu}}\n  baseline: swiglu\n"
      "  seeds: 2\n  baseline: relu\n",
      d);
  has(e, "s.yaml:6:3: sweep.baseline: given twice, on line 4 and on line 6; keep one of them");
  e = spec_error("base: {name: x, model: {d_model: 8, d_model: 16}}\n", d);
  has(e, "s.yaml:1:37: base.model.d_model: given twice, on line 1, columns 25 and 37");
  e = spec_error("base: {name: x, eval: [{type: a, type: b}]}\n", d);
  has(e, "s.yaml:1:34: base.eval[0].type: given twice, on line 1, columns 25 and 34");
  e = spec_error("base: {name: x}\nsweep:\n  grid: {? [a]: [1, 2]}\n", d);
  has(e, "s.yaml:3:12: sweep.grid: a key must be a plain name, not a list");
  e = spec_error("base: {name: x}\nsweep: {seeds: 0}\n", d);
  has(e, "s.yaml:2:16: sweep.seeds: 0 is out of range");
  e = spec_error("base: {name: x}\nsweep: {seeds: [1, 2, 1]}\n", d);
  has(e, "s.yaml:2:23: sweep.seeds: seed 1 is listed twice");
  e = spec_error("base: {name: x}\nsweep: {seeds: [1, 2], seed: 4}\n", d);
  has(e, "sweep.seed: derives seeds for `seeds: N`");
  e = spec_error("name: x\nsweep: {seeds: 2}\n", d);
  has(e, "s.yaml:1:1: base: missing");
  e = spec_error("base: nowhere.yaml\n", d);
  has(e, "s.yaml:1:7: base: cannot open 'nowhere.yaml'");
  has(e, "no such file");
  e = spec_error(
      "base: {name: x}\nsweep:\n  variants: {a: {model.d_model: 32}}\n  grid: {model.d_model: [32, "
      "64]}\n",
      d);
  has(e, "sweep.grid.model.d_model: 'model.d_model' is also set by a variant");
  e = spec_error("base: {name: x}\nsweep:\n  grid: {seed: [1, 2]}\n", d);
  has(e, "s.yaml:3:16: sweep.grid.seed: the seed is set by sweep.seeds");
  e = spec_error("base: {name: x}\nsweep:\n  variants: {a/b: {model.d_model: 32}}\n", d);
  has(e, "variant name 'a/b' is not filesystem-safe");
  e = spec_error("base: {name: x}\nsweep:\n  grid: {model..d: [1]}\n", d);
  has(e, "key path 'model..d' has an empty component");
  e = spec_error("base: {name: x}\nsweep:\n  grid: {model.d_model: [1, 2}\n", d);
  has(e, "s.yaml:3:");
  has(e, "YAML syntax error");
  e = spec_error("name: 'a b'\nbase: {name: x}\n", d);
  has(e, "s.yaml:1:7: name: 'a b' is not a safe directory name");
}

TEST_CASE("sweep/validation builds every point and names the point and the sweep line") {
  TempDir d;
  const std::string head = R"(name: v
base:
  name: tiny
  data: {path: shakespeare_16k.txt}
  model: {d_model: 32, n_heads: 4, n_layers: 1, context: 16}
  train: {steps: 5, batch_size: 2, eval_batches: 1}
sweep:
  seeds: 2
)";
  // A misspelt plugin in one variant: its two points, located at the variant's value.
  std::string e = validation_error(
      head + "  variants:\n    good: {model.ffn: relu}\n    bad: {model.ffn: swigluu}\n", d);
  CAPTURE(e);
  CHECK(e.find("2 of 4 points are invalid") != std::string::npos);
  CHECK(e.find("points 2 (bad-seed0), 3 (bad-seed1): s.yaml:11:22: model.ffn") !=
        std::string::npos);
  CHECK(e.find("swigluu") != std::string::npos);
  CHECK(e.find("Did you mean 'swiglu'?") != std::string::npos);
  // A misspelt key in the grid: every point, located at the grid's values.
  e = validation_error(head + "  grid:\n    model.d_modle: [32]\n", d);
  CHECK(e.find("every point: s.yaml:10:21: model.d_modle: unknown key in model") !=
        std::string::npos);
  CHECK(e.find("Did you mean 'd_model'?") != std::string::npos);
  // An error inside the inline base points at its line in the sweep file.
  std::string bad_base = head;
  bad_base.replace(bad_base.find("n_heads: 4"), 10, "n_heads: 0");
  e = validation_error(bad_base, d);
  CHECK(e.find("every point: s.yaml:5:33: model.n_heads: 0 is out of range") != std::string::npos);
  // A valid sweep: sizes for every point.
  ablate::test::registry();
  ablate::Sweep s = ablate::parse_sweep(head + "  grid: {model.d_model: [32, 64]}\n", "s.yaml",
                                        d.path.string(), d / "out");
  std::vector<size_t> seen;  // the progress callback: once per point, in order, with the total
  auto checks = ablate::validate_sweep(s, [&](size_t k, size_t n) {
    seen.push_back(k);
    CHECK(n == 4);
  });
  CHECK(seen == std::vector<size_t>{1, 2, 3, 4});
  REQUIRE(checks.size() == 4);
  CHECK(checks[0].info.n_params < checks[2].info.n_params);
  CHECK(checks[0].info.flops_per_token > 0);
  CHECK(checks[0].info.tokens_per_step == 2 * 16);
  CHECK(checks[0].state.status == ablate::RunStatus::missing);
  CHECK(checks[0].config.find("d_model: 32") != std::string::npos);
  CHECK(!fs::exists(d / "out"));  // validation writes nothing
}

TEST_CASE("sweep/the manifest lists every point and reads back") {
  TempDir d;
  ablate::Sweep s = ablate::parse_sweep(
      "name: m\nbase: {name: x}\nsweep:\n  variants: {a: {model.ffn: relu}, b: {}}\n  grid: "
      "{model.d_model: [8, 16]}\n  seeds: [5, 6]\n",
      "m.yaml", d.path.string(), d / "m");
  ablate::write_manifest(s);
  const std::string text = ablate::test::read_file(d / "m/manifest.yaml");
  CHECK(text.find("id: b-d_model=16-seed6") != std::string::npos);
  CHECK(text.find("run_dir: runs/a-d_model=8-seed5") != std::string::npos);
  ablate::Sweep r = ablate::read_manifest(d / "m");
  REQUIRE(r.points.size() == s.points.size());
  CHECK(r.name == "m");
  CHECK(r.baseline == "a");
  CHECK(r.variants == s.variants);
  CHECK(r.grid_keys == s.grid_keys);
  CHECK(r.seeds == std::vector<int64_t>{5, 6});
  for (size_t i = 0; i < r.points.size(); ++i) {
    CHECK(r.points[i].id == s.points[i].id);
    CHECK(r.points[i].override_texts() == s.points[i].override_texts());
    CHECK(r.points[i].values == s.points[i].values);
    CHECK(r.points[i].run_dir == s.points[i].run_dir);
  }
  CHECK(r.swept_keys() == std::vector<std::string>{"model.d_model", "model.ffn"});
  CHECK_THROWS_WITH_AS(ablate::read_manifest(d / "nothing"),
                       doctest::Contains("no manifest.yaml here"), ablate::Error);
}

TEST_CASE("sweep/a real sweep: 2 jobs, a failing point, resume, compare and report") {
  TempDir d;
  d.write("tiny.yaml", kTinyBase);
  // Three variants x 2 seeds; `broken` diverges at run time (SGD at lr 100, no clipping),
  // which no validation can know.
  d.write("sweep.yaml", R"(name: tiny_sweep
base: tiny.yaml
sweep:
  variants:
    relu: {model.ffn: relu}
    swiglu: {model.ffn: {type: swiglu, match_params: true}}
    broken: {optimizer: {type: sgd, lr: 100}, train.grad_clip: 0}
  seeds: 2
  seed: 5
)");
  // --dry-run lists the points and runs nothing.
  auto dry = ablate::test::run_command(ablate_cmd(d, "sweep sweep.yaml --dry-run --dir out"));
  CAPTURE(dry.output);
  CHECK(dry.status == 0);
  CHECK(dry.output.find("swiglu-seed1") != std::string::npos);
  CHECK(dry.output.find("FLOPs/token") != std::string::npos);
  CHECK(dry.output.find("train FLOPs") != std::string::npos);
  CHECK(std::regex_search(dry.output, std::regex("relu-seed0 +[0-9]+ +[0-9.]+ k +512 +60 ")));
  CHECK(!fs::exists(d / "out"));

  auto t0 = std::chrono::steady_clock::now();
  auto run = ablate::test::run_command(
      ablate_cmd(d, "sweep sweep.yaml --jobs 2 --dir out --progress-every 0.5"));
  MESSAGE("sweep of 6 points with --jobs 2: "
          << std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() << " s");
  CAPTURE(run.output);
  CHECK(run.status == 1);  // a point failed
  CHECK(run.output.find("4 done, 0 already done, 2 failed") != std::string::npos);
  CHECK(run.output.find("failed: point 4 (broken-seed0): step ") != std::string::npos);
  CHECK(run.output.find("not finite") != std::string::npos);
  // Threads per job: max(1, cores / jobs).
  const unsigned threads = std::max(1u, std::thread::hardware_concurrency() / 2);
  CHECK(run.output.find("2 at a time with " + std::to_string(threads) + " thread") !=
        std::string::npos);
  CHECK(run.output.find("running") != std::string::npos);  // progress lines
  {
    // Seed by seed: every variant's seed0 starts before any seed1.
    std::vector<int> started;
    const std::string log = ablate::test::read_file(d / "out/sweep.log");
    std::smatch m;
    for (auto it = log.cbegin();
         std::regex_search(it, log.cend(), m, std::regex("start point ([0-9]+) "));
         it = m.suffix().first)
      started.push_back(std::stoi(m[1]));
    CHECK(started == std::vector<int>{0, 2, 4, 1, 3, 5});
  }
  for (const char* id : {"relu-seed0", "relu-seed1", "swiglu-seed0", "swiglu-seed1"}) {
    CAPTURE(id);
    auto data = ablate::read_run_file(d / ("out/runs/" + std::string(id) + "/run.h5"));
    CHECK(data.str_attrs.at("status") == "done");
    CHECK(data.num_attrs.at("threads") == threads);
    CHECK(data.tables.at("eval").at("step") ==
          std::vector<double>{0, 20, 40, 60});  // 0: before training
    CHECK(fs::exists(d / ("out/logs/" + std::string(id) + ".log")));
  }
  auto broken = ablate::run_state(d / "out/runs/broken-seed1");
  CHECK(broken.status == ablate::RunStatus::failed);
  CHECK(broken.error.find("not finite") != std::string::npos);
  CHECK(fs::exists(d / "out/manifest.yaml"));
  // Same seed index, same seed: the pairs of the comparison share data order and init.
  auto r0 = ablate::read_run_file(d / "out/runs/relu-seed0/run.h5");
  auto s0 = ablate::read_run_file(d / "out/runs/swiglu-seed0/run.h5");
  CHECK(r0.str_attrs.at("config").find(
            "seed: " + std::to_string(ablate::load_sweep(d / "sweep.yaml").seeds[0])) !=
        std::string::npos);
  CHECK(s0.str_attrs.at("config").find("type: swiglu") != std::string::npos);

  // compare, in the three formats.
  auto table = ablate::test::run_command(ablate_cmd(d, "compare out --metric val_loss"));
  CAPTURE(table.output);
  CHECK(table.status == 0);
  CHECK(table.output.find(
            "val_loss (eval, final value; lower is better) by variant, baseline relu") !=
        std::string::npos);
  CHECK(std::regex_search(
      table.output, std::regex("\nrelu +2 +[0-9.]+ ± [0-9.]+ +\\[[0-9.]+, [0-9.]+\\] +baseline")));
  CHECK(std::regex_search(table.output,
                          std::regex("\nswiglu +2 +[0-9.]+ ± [0-9.]+ .* [+-][0-9.]+ "
                                     "\\[[+-][0-9.]+, [+-][0-9.]+\\] +[0-9.e-]+ +[0-2]/2 ")));
  CHECK(std::regex_search(table.output, std::regex("\nbroken +0/2 ")));
  CHECK(table.output.find("paired t-test") != std::string::npos);
  CHECK(table.output.find("broken-seed0: failed: step ") != std::string::npos);
  auto md = ablate::test::run_command(ablate_cmd(d, "compare out --format markdown --at best"));
  CHECK(md.status == 0);
  CHECK(md.output.find("| variant | n | mean ± std |") != std::string::npos);
  CHECK(md.output.find("|---|---:|") != std::string::npos);
  auto csv = ablate::test::run_command(
      ablate_cmd(d, "compare out --format csv --at step=40 --metric train_loss"));
  CAPTURE(csv.output);
  CHECK(csv.status == 0);
  CHECK(csv.output.rfind("group,n,runs,mean,std,ci_low,ci_high,baseline,diff_mean", 0) == 0);
  {
    // Every row has the header's columns, the baseline's (no test) and a failed group's too.
    auto fields = [](const std::string& line) {
      size_t n = 1;
      bool quoted = false;
      for (char ch : line) {
        if (ch == '"') quoted = !quoted;
        n += ch == ',' && !quoted;
      }
      return n;
    };
    std::istringstream rows(csv.output);
    std::string header, row;
    std::getline(rows, header);
    int n_rows = 0;
    while (std::getline(rows, row)) {
      CAPTURE(row);
      CHECK(fields(row) == fields(header));
      ++n_rows;
    }
    CHECK(n_rows == 3);
  }
  CHECK(std::regex_search(csv.output,
                          std::regex("\nswiglu,2,2,[0-9.]+,[0-9.e-]+,[0-9.]+,[0-9.]+,relu,[-0-9.e]+"
                                     ",[-0-9.e]+,[-0-9.e]+,[0-9.e-]+,paired t-test,2,[0-2],")));
  // Mistakes are errors with a suggestion.
  auto bad = ablate::test::run_command(ablate_cmd(d, "compare out --metric val_los"));
  CHECK(bad.status == 1);
  CHECK(bad.output.find("Did you mean 'val_loss'?") != std::string::npos);
  bad = ablate::test::run_command(ablate_cmd(d, "compare out --by model.fnn"));
  CHECK(bad.output.find("Did you mean 'model.ffn'?") != std::string::npos);
  bad = ablate::test::run_command(ablate_cmd(d, "compare out --metric val_loss,,train_loss"));
  CHECK(bad.status == 2);
  CHECK(bad.output.find("an empty name between commas") != std::string::npos);
  bad = ablate::test::run_command(ablate_cmd(d, "compare out --metric val_loss,val_los"));
  CHECK(bad.output.find("Did you mean 'val_loss'?") != std::string::npos);
  // Several metrics: one table, a column each.
  auto several = ablate::test::run_command(
      ablate_cmd(d, "compare out --metric val_loss,train_loss --format markdown"));
  CAPTURE(several.output);
  CHECK(several.status == 0);
  CHECK(several.output.find("| variant | n | val_loss | train_loss |") != std::string::npos);
  CHECK(std::regex_search(several.output,
                          std::regex("\\| swiglu \\| 2 \\| [-+][0-9.]+ \\[[-+][0-9.]+, "
                                     "[-+][0-9.]+\\]( \\*)? \\| [-+][0-9.]+ ")));

  // report: one HTML file with the plots drawn (rendering is checked in report/ tests).
  auto rep = ablate::test::run_command(ablate_cmd(d, "report out -o report.html"));
  CAPTURE(rep.output);
  CHECK(rep.status == 0);
  // The runs counted by state, so that a report of a sweep half run says so.
  CHECK(std::regex_search(rep.output, std::regex("KB, [0-9]+ runs: [0-9]+ done")));
  const std::string html = ablate::test::read_file(d / "report.html");
  CHECK(html.find("<svg") != std::string::npos);
  CHECK(html.find("<path class=\"line\"") != std::string::npos);
  CHECK(html.find("<path class=\"band\"") != std::string::npos);
  CHECK(html.find("<details>") != std::string::npos);
  // What differs between the runs, from their resolved configs: the varied options (with
  // the defaults the other runs had), not the shared ones or the seeds.
  const size_t differs = html.find("<h2>What differs</h2>");
  REQUIRE(differs != std::string::npos);
  const std::string diff_table = html.substr(differs, html.find("</table>", differs) - differs);
  for (const char* key : {"<code>model.ffn.type</code>", "<code>optimizer.type</code>",
                          "<code>optimizer.lr</code>", "<code>train.grad_clip</code>",
                          "<td>swiglu</td>", "<td>relu</td>", "<td>sgd</td>", "<td>adamw</td>"})
    CHECK_MESSAGE(diff_table.find(key) != std::string::npos, key);
  for (const char* key :
       {"<code>seed</code>", "<code>model.d_model</code>", "<code>output.dir</code>"})
    CHECK_MESSAGE(diff_table.find(key) == std::string::npos, key);
  CHECK(html.find("<script") == std::string::npos);
  CHECK(html.find("http://") == html.find("http://www.w3.org/2000/svg"));  // no external resources

  // Running it again skips the finished points (untouched files) and retries the failed.
  const auto mtime = fs::last_write_time(d / "out/runs/relu-seed0/run.h5");
  auto again = ablate::test::run_command(ablate_cmd(d, "sweep sweep.yaml --jobs 2 --dir out"));
  CAPTURE(again.output);
  CHECK(again.status == 1);
  CHECK(again.output.find("0 done, 4 already done, 2 failed") != std::string::npos);
  CHECK(fs::last_write_time(d / "out/runs/relu-seed0/run.h5") == mtime);
  const std::string log = ablate::test::read_file(d / "out/sweep.log");
  CHECK(log.find("skip point 0 (relu-seed0): done") != std::string::npos);
  CHECK(log.find("skip point 3 (swiglu-seed1): done") != std::string::npos);

  // One point in this process, as a Slurm array task would run it.
  auto one = ablate::test::run_command(ablate_cmd(d, "sweep sweep.yaml --dir out --point 1"));
  CHECK(one.status == 0);
  CHECK(one.output.find("point 1 (relu-seed1): already done") != std::string::npos);
  auto range = ablate::test::run_command(ablate_cmd(d, "sweep sweep.yaml --dir out --point 6"));
  CHECK(range.status == 2);
  CHECK(range.output.find("--point 6 is out of range: the sweep has 6 points (0 to 5)") !=
        std::string::npos);

  // Options that only say how runs are logged or kept do not make a finished run another config.
  const std::string spec = ablate::test::read_file(d / "sweep.yaml");
  d.write("sweep.yaml", spec + "overrides: {train.log_every: 7, train.keep_checkpoints: [20]}\n");
  auto kept = ablate::test::run_command(ablate_cmd(d, "sweep sweep.yaml --dir out --dry-run"));
  CHECK_MESSAGE(kept.status == 0, kept.output);
  // Editing the sweep after runs finished is refused rather than mixing configs.
  d.write("sweep.yaml", spec + "overrides: {train.steps: 80}\n");
  auto changed = ablate::test::run_command(ablate_cmd(d, "sweep sweep.yaml --dir out --dry-run"));
  CHECK(changed.status == 1);
  CHECK(changed.output.find("train.steps: 60 -> 80") != std::string::npos);
}

// 100 ms a training step (fault.hpp): 120 steps take 12 s or more, so a signal sent once
// the point has its first checkpoint (step 20) lands mid-run however fast the machine. A run
// resumed without the fault has 100 steps left at most: seconds, also under the sanitizers.
const std::string kSlowSteps = "export ABLATE_FAULT=step:100ms; ";
const std::string kSlowSpec =
    "base: tiny.yaml\noverrides: {train.steps: 120, train.eval_every: 60}\nsweep: {seeds: [3]}\n";

// The pid of point 0 (seed3) of the sweep running in d/out (from its sweep log), once that
// point has written a checkpoint; 0 if it did not within a minute.
static pid_t point_with_checkpoint(const TempDir& d) {
  pid_t pid = 0;
  const auto t0 = std::chrono::steady_clock::now();
  std::smatch m;
  while (std::chrono::steady_clock::now() - t0 < std::chrono::seconds(60)) {
    std::string log = ablate::test::read_file(d / "out/sweep.log");
    if (std::regex_search(log, m, std::regex("start point 0 \\(seed3\\), pid ([0-9]+)")))
      pid = std::stoi(m[1]);
    if (pid > 0 && fs::exists(d / "out/runs/seed3/checkpoint.ckpt")) return pid;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return 0;
}

// The parent of a process (field 4 of /proc/PID/stat): a point's parent is its sweep.
static pid_t parent_of(pid_t pid) {
  std::istringstream stat(ablate::test::read_file("/proc/" + std::to_string(pid) + "/stat"));
  std::string field;
  pid_t parent = 0;
  for (int i = 0; i < 4 && stat >> field; ++i) parent = i == 3 ? std::stoi(field) : 0;
  return parent;
}

// A one-point sweep (seed 3, 120 slow steps) in d/out, stopped with Ctrl-C once its point has a
// checkpoint, as a terminal sends it: SIGINT to every process of the sweep's process group (the
// sweep leads its own, started by setsid); the sweep's result.
static ablate::test::CommandResult sweep_stopped_by_ctrl_c(const TempDir& d) {
  d.write("tiny.yaml", kTinyBase);
  d.write("stop.yaml", kSlowSpec);
  auto job = std::async(std::launch::async, [&] {
    return ablate::test::run_command(kSlowSteps + "cd " + d.path.string() +
                                     " && ABLATE_DATA_PATH=" + ABLATE_TEST_DATA_DIR + " setsid " +
                                     ablate::test::ablate_binary() + " sweep stop.yaml --dir out");
  });
  const pid_t pid = point_with_checkpoint(d);
  const pid_t sweep = pid > 0 ? parent_of(pid) : 0;
  if (sweep > 1) {
    REQUIRE(getpgid(sweep) == sweep);
    kill(-sweep, SIGINT);  // the terminal's Ctrl-C: the sweep's whole foreground group
  }
  auto res = job.get();
  CAPTURE(res.output);
  REQUIRE(sweep > 1);
  return res;
}

TEST_CASE("sweep/a killed point is recorded as failed and resumes from its checkpoint") {
  TempDir d;
  d.write("tiny.yaml", kTinyBase);
  d.write("kill.yaml", kSlowSpec);
  auto job = std::async(std::launch::async, [&] {
    return ablate::test::run_command(kSlowSteps + ablate_cmd(d, "sweep kill.yaml --dir out"));
  });
  pid_t pid = point_with_checkpoint(d);
  REQUIRE(pid > 0);
  kill(pid, SIGKILL);
  auto res = job.get();
  CAPTURE(res.output);
  REQUIRE(res.status == 1);
  auto st = ablate::run_state(d / "out/runs/seed3");
  CHECK(st.status == ablate::RunStatus::failed);
  CHECK(st.error.find("killed by SIGKILL") != std::string::npos);
  CHECK(st.checkpoint);
  // The comparison lists it rather than dropping it.
  auto cmp = ablate::test::run_command(ablate_cmd(d, "compare out"));
  CAPTURE(cmp.output);
  CHECK(cmp.output.find("seed3: failed: ablate killed by SIGKILL") != std::string::npos);

  auto again = ablate::test::run_command(ablate_cmd(d, "sweep kill.yaml --dir out"));
  CAPTURE(again.output);
  CHECK(again.status == 0);
  CHECK(again.output.find("start point 0 (seed3) resuming from its checkpoint") !=
        std::string::npos);
  auto data = ablate::read_run_file(d / "out/runs/seed3/run.h5");
  CHECK(data.str_attrs.at("status") == "done");
  const auto& steps = data.tables.at("train").at("step");
  REQUIRE(steps.size() == 12);  // one row per 10 steps, none lost or repeated
  for (size_t i = 0; i < steps.size(); ++i) CHECK(steps[i] == 10.0 * static_cast<double>(i + 1));
}

TEST_CASE(
    "sweep/Ctrl-C stops the running points with a checkpoint: stopped, not failed, the next run "
    "resumes them") {
  TempDir d;
  auto res = sweep_stopped_by_ctrl_c(d);
  CAPTURE(res.output);
  REQUIRE(res.status == 130);
  CHECK(res.output.find("0 failed, 1 stopped (interrupted)") != std::string::npos);
  CHECK(res.output.find(
            "stopped: point 0 (seed3): checkpointed, resumes when the sweep runs again") !=
        std::string::npos);
  CHECK(res.output.find("failed: point") == std::string::npos);
  auto st = ablate::run_state(d / "out/runs/seed3");
  CHECK(st.status == ablate::RunStatus::interrupted);
  CHECK(st.checkpoint);
  CHECK(ablate::test::read_file(d / "out/sweep.log").find("stopped point 0 (seed3)") !=
        std::string::npos);
  // The point took one signal, the sweep's SIGTERM: it finished its step and checkpointed.
  const std::string point_output = ablate::test::read_file(d / "out/logs/seed3.log");
  CAPTURE(point_output);
  CHECK(point_output.find("second interrupt") == std::string::npos);
  CHECK(point_output.find("interrupted by SIGTERM") != std::string::npos);
  auto status = ablate::test::run_command(ablate_cmd(d, "sweep stop.yaml --dir out --status"));
  CAPTURE(status.output);
  CHECK(std::regex_search(
      status.output,
      std::regex("seed3 +interrupted +- +at step [0-9]+/120; resumes from its checkpoint")));
  CHECK(status.output.find("1 points: 1 interrupted") != std::string::npos);

  auto again = ablate::test::run_command(ablate_cmd(d, "sweep stop.yaml --dir out"));
  CAPTURE(again.output);
  CHECK(again.status == 0);
  CHECK(again.output.find("start point 0 (seed3) resuming from its checkpoint") !=
        std::string::npos);
  CHECK(ablate::read_run_file(d / "out/runs/seed3/run.h5").str_attrs.at("status") == "done");
}

TEST_CASE(
    "sweep/an unfinished run whose checkpoint is gone starts afresh, its files kept aside, not "
    "deleted") {
  TempDir d;
  REQUIRE(sweep_stopped_by_ctrl_c(d).status == 130);
  const auto before = ablate::run_state(d / "out/runs/seed3");
  REQUIRE(before.status == ablate::RunStatus::interrupted);
  REQUIRE(before.last_step > 0);
  // The weights are gone (as in a copy of results/ without them: checkpoints are not committed).
  fs::remove(d / "out/runs/seed3/checkpoint.ckpt");
  const std::string suffix = ".stopped-at-" + std::to_string(before.last_step);
  CHECK(ablate::RunDir(d / "out/runs/seed3").plan_point(before, {}).aside_suffix == suffix);

  auto plan = ablate::test::run_command(ablate_cmd(d, "sweep stop.yaml --dir out --dry-run"));
  CAPTURE(plan.output);
  CHECK(plan.output.find("interrupted (no checkpoint: starts afresh, keeps its files aside)") !=
        std::string::npos);
  auto again = ablate::test::run_command(ablate_cmd(d, "sweep stop.yaml --dir out"));
  CAPTURE(again.output);
  CHECK(again.status == 0);
  CHECK(again.output.find(
            "start point 0 (seed3) from step 0: its earlier run (interrupted at step " +
            std::to_string(before.last_step) + ") has no checkpoint; its files are kept as *" +
            suffix) != std::string::npos);
  CHECK(ablate::test::read_file(d / "out/logs/seed3.log")
            .find("starting afresh, its files kept as run.h5" + suffix + ", run.log" + suffix) !=
        std::string::npos);
  // The earlier run is all there, beside the new one.
  auto kept = ablate::read_run_file(d / ("out/runs/seed3/run.h5" + suffix));
  CHECK(kept.str_attrs.at("status") == "interrupted");
  CHECK(kept.tables.at("train").at("step").back() == static_cast<double>(before.last_step));
  CHECK(ablate::test::read_file(d / ("out/runs/seed3/run.log" + suffix)).find("interrupted by") !=
        std::string::npos);
  auto now = ablate::read_run_file(d / "out/runs/seed3/run.h5");
  CHECK(now.str_attrs.at("status") == "done");
  CHECK(now.tables.at("train").at("step").front() == 10.0);  // from step 0, not resumed
  // A second start-over does not overwrite the first one kept.
  CHECK(ablate::RunDir(d / "out/runs/seed3").plan_point(before, {}).aside_suffix == suffix + "-2");
}

TEST_CASE("sweep/a point with a checkpoint runs first, then the others seed by seed") {
  TempDir d;
  d.write("tiny.yaml", kTinyBase);
  d.write("order.yaml",
          "base: tiny.yaml\noverrides: {train.steps: 30, train.checkpoint_every: 10, "
          "train.eval_every: 30}\n"
          "sweep: {variants: {a: {}, b: {model.ffn: gelu}}, seeds: 2}\n");
  // Point 3 (b-seed1) killed at step 15: a checkpoint at step 10, the run file says running.
  auto killed = ablate::test::run_command("export ABLATE_FAULT=step:15; " +
                                          ablate_cmd(d, "sweep order.yaml --dir out --point 3 -q"));
  CAPTURE(killed.output);
  REQUIRE(killed.status != 0);
  REQUIRE(ablate::run_state(d / "out/runs/b-seed1").checkpoint);
  auto run = ablate::test::run_command(ablate_cmd(d, "sweep order.yaml --dir out --jobs 1 -q"));
  CAPTURE(run.output);
  REQUIRE(run.status == 0);
  std::vector<int> started;
  const std::string log = ablate::test::read_file(d / "out/sweep.log");
  std::smatch m;
  for (auto it = log.cbegin();
       std::regex_search(it, log.cend(), m, std::regex("start point ([0-9]+) "));
       it = m.suffix().first)
    started.push_back(std::stoi(m[1]));
  CHECK(started == std::vector<int>{3, 0, 2, 1});
  CHECK(log.find("start point 3 (b-seed1) resuming from its checkpoint") != std::string::npos);
}

TEST_CASE("sweep/--points runs only the chosen points, the others stay as they are") {
  TempDir d;
  d.write("tiny.yaml", kTinyBase);
  d.write("pick.yaml",
          "base: tiny.yaml\noverrides: {train.steps: 20, train.eval_every: 20}\n"
          "sweep: {variants: {a: {}, b: {model.ffn: gelu}}, seeds: 2}\n");
  auto run = ablate::test::run_command(
      ablate_cmd(d, "sweep pick.yaml --dir out --jobs 2 --points 'b-*' -q"));
  CAPTURE(run.output);
  REQUIRE(run.status == 0);
  CHECK(ablate::run_state(d / "out/runs/b-seed0").status == ablate::RunStatus::done);
  CHECK(ablate::run_state(d / "out/runs/b-seed1").status == ablate::RunStatus::done);
  CHECK(ablate::run_state(d / "out/runs/a-seed0").status == ablate::RunStatus::missing);
  CHECK(ablate::run_state(d / "out/runs/a-seed1").status == ablate::RunStatus::missing);
  CHECK(run.output.find("2 done, 0 already done") != std::string::npos);
  CHECK(ablate::test::read_file(d / "out/sweep.log")
            .find("4 points (2 chosen with --points: 2-3), 0 already done, 2 to run") !=
        std::string::npos);
  // Bad lists and combinations: usage errors, nothing run.
  auto bad = ablate::test::run_command(ablate_cmd(d, "sweep pick.yaml --dir out --points 0,9"));
  CHECK(bad.status == 2);
  CHECK(bad.output.find("'9' is not a range of this sweep's points; allowed: indices 0 to 3") !=
        std::string::npos);
  auto status =
      ablate::test::run_command(ablate_cmd(d, "sweep pick.yaml --dir out --points 0 --status"));
  CHECK(status.status == 2);
  CHECK(status.output.find("--status and --dry-run show every point: drop --points") !=
        std::string::npos);
  auto both =
      ablate::test::run_command(ablate_cmd(d, "sweep pick.yaml --dir out --points 0 --point 0"));
  CHECK(both.status == 2);
  CHECK(ablate::run_state(d / "out/runs/a-seed0").status == ablate::RunStatus::missing);
  // The progress line counts the chosen points, not the sweep's (a point long enough for a line).
  d.write("slow.yaml",
          "base: tiny.yaml\noverrides: {train.steps: 300, train.eval_every: 300}\n"
          "sweep: {variants: {a: {}, b: {model.ffn: gelu}}, seeds: 2}\n");
  auto one = ablate::test::run_command(
      ablate_cmd(d, "sweep slow.yaml --dir slow --points 0 --progress-every 0.01"));
  CAPTURE(one.output);
  REQUIRE(one.status == 0);
  CHECK(one.output.find("0/1 done, 0 failed, 1 running") != std::string::npos);
  CHECK(one.output.find("/4 done") == std::string::npos);
}

TEST_CASE(
    "sweep/--status tells a point whose processes were killed (stopped) from a running one, and "
    "done points' CPU time") {
  TempDir d;
  d.write("tiny.yaml", kTinyBase);
  d.write("gone.yaml", kSlowSpec);
  auto job = std::async(std::launch::async, [&] {
    return ablate::test::run_command(kSlowSteps + ablate_cmd(d, "sweep gone.yaml --dir out"));
  });
  pid_t pid = point_with_checkpoint(d);
  REQUIRE(pid > 0);
  const pid_t sweep = parent_of(pid);
  REQUIRE(sweep > 1);
  auto running = ablate::test::run_command(ablate_cmd(d, "sweep gone.yaml --dir out --status"));
  // As a machine's crash: the sweep and its point die without a word.
  kill(sweep, SIGKILL);
  kill(pid, SIGKILL);
  job.get();
  REQUIRE(ablate::run_state(d / "out/runs/seed3").status != ablate::RunStatus::done);
  {
    CAPTURE(running.output);
    // "step N/120, MM:SS of training left": the steps the run trains to and the time left at its
    // logged rate
    std::smatch m;
    CHECK(std::regex_search(
        running.output, m,
        std::regex("seed3 +running +- +step ([0-9]+)/120, ([0-9]+):([0-9]{2}) of training left")));
    if (!m.empty()) {
      CHECK(std::stoi(m[1]) < 120);
      // 100 ms a step: seconds left, not minutes
      CHECK(std::stoi(m[2]) * 60 + std::stoi(m[3]) < 120);
    }
    // Until the last thread of the killed point has exited (and released the run's lock) it
    // is still running: a moment, longer on a loaded machine.
    ablate::test::CommandResult gone;
    for (auto t0 = std::chrono::steady_clock::now();
         std::chrono::steady_clock::now() - t0 < std::chrono::seconds(30);) {
      gone = ablate::test::run_command(ablate_cmd(d, "sweep gone.yaml --dir out --status"));
      if (gone.output.find(" stopped ") != std::string::npos) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    CAPTURE(gone.output);
    CHECK(std::regex_search(gone.output,
                            std::regex("seed3 +stopped +- +its process is gone \\(at step "
                                       "[0-9]+/120\\); resumes from its checkpoint")));
    CHECK(gone.output.find("1 points: 1 stopped") != std::string::npos);
  }

  auto again = ablate::test::run_command(ablate_cmd(d, "sweep gone.yaml --dir out"));
  // Why the point failed, if it did: the end of its log, shown first.
  std::string point_log = ablate::test::read_file(d / "out/logs/seed3.log");
  if (point_log.size() > 800) point_log = point_log.substr(point_log.size() - 800);
  CAPTURE(point_log);
  CAPTURE(again.output);
  REQUIRE(again.status == 0);
  CHECK(again.output.find("resuming from its checkpoint") != std::string::npos);
  auto done = ablate::test::run_command(ablate_cmd(d, "sweep gone.yaml --dir out --status"));
  CAPTURE(done.output);
  CHECK(std::regex_search(
      done.output,
      std::regex("seed3 +done +- +[0-9]+\\.[0-9] CPU-minutes \\([0-9]+\\.[0-9] evaluating\\)")));
}
