// End to end: real plugins, a real text file, a real HDF5 file and checkpoint.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include <yaml-cpp/yaml.h>

#include "ablate/checkpoint.hpp"
#include "ablate/generate.hpp"
#include "ablate/run_dir.hpp"
#include "ablate/runfile.hpp"
#include "ablate/trainer.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;

namespace {

// The shared tiny model, trained longer, on 2 threads, with a longer sample.
const std::vector<std::string> kTinyLonger = {"train.steps=150", "train.eval_every=50",
                                              "train.checkpoint_every=50", "train.threads=2",
                                              "sample.tokens=40"};
std::vector<std::string> longer(const std::vector<std::string>& overrides) {
  std::vector<std::string> all = kTinyLonger;
  all.insert(all.end(), overrides.begin(), overrides.end());
  return all;
}

ablate::RunSummary train(const ablate::test::TempDir& dir, const std::string& out,
                         const std::vector<std::string>& overrides = {}) {
  ablate::test::registry();
  setenv("ABLATE_DATA_PATH", ABLATE_TEST_DATA_DIR, 1);
  std::string file = dir.write("tiny.yaml", ablate::test::kTinyBase);
  ablate::RunOptions ro;
  ro.out_dir = dir / out;
  ro.quiet = true;
  return ablate::run_experiment(ablate::Experiment::load(file, longer(overrides)), ro);
}

}  // namespace

TEST_CASE("trainer/a tiny run learns, writes HDF5, a checkpoint and a sample") {
  ablate::test::TempDir dir;
  auto sum = train(dir, "run");
  auto data = ablate::read_run_file(ablate::run_file_path(sum.run_dir));
  const double V = data.num_attrs.at("vocab_size");
  CHECK(V > 30);
  // Uniform guessing costs ln(V) ~ 4; the model must get far below.
  CHECK(sum.train_loss < std::log(V) - 1.3);
  CHECK(sum.val_loss < std::log(V) - 1.0);
  CHECK(data.str_attrs.at("status") == "done");
  CHECK(data.str_attrs.at("config").find("d_model: 32") != std::string::npos);
  CHECK(data.num_attrs.at("n_params") == doctest::Approx(double(sum.n_params)));
  CHECK(data.num_attrs.at("threads") == 2);
  // The commit of the build: HEAD's (the suite runs what was just built), "-dirty" with
  // uncommitted changes.
  const std::string commit = data.str_attrs.at("git_commit");
  const auto head =
      ablate::test::run_command("git -C '" ABLATE_SOURCE_DIR "' rev-parse HEAD 2>/dev/null");
  if (head.status == 0)
    CHECK_MESSAGE(head.output.rfind(commit.substr(0, commit.find('-')), 0) == 0,
                  "the build recorded commit ", commit, " but the checkout is at ", head.output,
                  "; a commit since the last build: build again (cmake --build) and rerun");
  else CHECK(commit == "unknown");
  CHECK(!data.str_attrs.at("compiler").empty());
  // The training file's SHA-256, as sha256sum computes it.
  auto sum256 = ablate::test::run_command("sha256sum '" + data.str_attrs.at("data_file") + "'");
  CHECK(sum256.status == 0);
  CHECK(sum256.output.substr(0, 64) == data.str_attrs.at("data_sha256"));
  CHECK(data.tables.at("train").at("step").size() == 15);
  CHECK(data.tables.at("eval").at("step") ==
        std::vector<double>{0, 50, 100, 150});  // 0: before training
  CHECK(data.tables.at("eval").at("val_loss").back() == doctest::Approx(sum.val_loss));
  CHECK(data.tables.at("train").at("loss").front() > data.tables.at("train").at("loss").back());
  CHECK(data.texts.at("samples/final").rfind("ROMEO:", 0) == 0);
  CHECK(std::filesystem::exists(ablate::checkpoint_path(sum.run_dir)));

  // h5py reads the same file (the layout documented in docs/RESULTS.md).
  auto py = ablate::test::run_command(
      "/usr/bin/python3 -c \"import h5py; f = h5py.File('" + ablate::run_file_path(sum.run_dir) +
      "', 'r'); print(f.attrs['status'], len(f['metrics/train/loss']), '%.6f' % "
      "f['metrics/eval/val_loss'][-1])\"");
  CHECK(py.status == 0);
  char expect[64];
  std::snprintf(expect, sizeof expect, "done 15 %.6f", sum.val_loss);
  CHECK_MESSAGE(py.output.find(expect) != std::string::npos, py.output);

  // The run loads back and generates with its own tokenizer.
  auto run = ablate::load_run(sum.run_dir);
  CHECK(run.step == 150);
  CHECK(run.model->n_params() == sum.n_params);
  ablate::Rng rng(3);
  ablate::Sampling greedy;
  greedy.greedy = true;
  auto a = ablate::generate(*run.model, run.tokenizer->encode("ROMEO:"), 50, greedy, rng);
  auto b = ablate::generate(*run.model, run.tokenizer->encode("ROMEO:"), 50, greedy, rng);
  CHECK(a.size() == 50);
  CHECK(a == b);
}

TEST_CASE("trainer/same config, seed and threads give identical metrics") {
  ablate::test::TempDir dir;
  train(dir, "a", {"train.steps=30", "model.dropout=0.1"});
  train(dir, "b", {"train.steps=30", "model.dropout=0.1"});
  auto a = ablate::read_run_file(ablate::run_file_path(dir / "a"));
  auto b = ablate::read_run_file(ablate::run_file_path(dir / "b"));
  CHECK(a.tables.at("train").at("loss") == b.tables.at("train").at("loss"));
  CHECK(a.tables.at("eval").at("val_loss") == b.tables.at("eval").at("val_loss"));
  // A different seed gives a different run.
  train(dir, "c", {"train.steps=30", "model.dropout=0.1", "seed=8"});
  auto c = ablate::read_run_file(ablate::run_file_path(dir / "c"));
  CHECK(a.tables.at("train").at("loss") != c.tables.at("train").at("loss"));
}

TEST_CASE(
    "trainer/gradient accumulation trains as one batch: micro-batches of padded line windows, "
    "each scoring other counts, give the one batch's loss and gradient norm") {
  ablate::test::TempDir dir;
  std::string text;
  for (int i = 0; i < 200; ++i)
    text += "$" + std::string(1 + i % 7, static_cast<char>('a' + i % 5)) + "$\n";
  dir.write("lines.txt", text);
  // Windows of whole lines, padded: each window, so each micro-batch, scores another number
  // of targets. The step's loss is the mean over all of them, not the micro-batches' mean.
  const std::string file = dir.write("lines.yaml", R"(name: lines
seed: 3
data: {path: lines.txt, windows: lines, fill: pad, train_fraction: 0.8}
model: {d_model: 16, n_heads: 2, n_layers: 1, context: 12}
train: {steps: 4, batch_size: 6, eval_every: 4, eval_batches: 1, checkpoint_every: 4, log_every: 1, threads: 1}
optimizer: {type: adamw, lr: 1.0e-3}
sample: {tokens: 0}
)");
  auto run = [&](const std::string& out, const std::vector<std::string>& overrides) {
    ablate::RunOptions ro;
    ro.out_dir = dir / out;
    ro.quiet = true;
    ablate::run_experiment(ablate::Experiment::load(file, overrides), ro);
    return ablate::read_run_file(ablate::run_file_path(dir / out)).tables.at("train");
  };
  ablate::test::registry();
  const auto one = run("one", {});
  for (const int accum : {2, 3}) {
    CAPTURE(accum);
    const auto acc =
        run("accum" + std::to_string(accum), {"train.batch_size=" + std::to_string(6 / accum),
                                              "train.grad_accum=" + std::to_string(accum)});
    for (const std::string col : {"loss", "grad_norm"}) {
      REQUIRE(acc.at(col).size() == 4);
      for (size_t i = 0; i < 4; ++i) {
        INFO(col << "[" << i << "]: one batch " << one.at(col)[i] << ", accumulated "
                 << acc.at(col)[i]);
        // The rows' sums in another order (float rounding), nothing more.
        CHECK(acc.at(col)[i] == doctest::Approx(one.at(col)[i]).epsilon(2e-6));
      }
    }
  }
}

TEST_CASE("trainer/the resolved config records every default and reruns the same run") {
  ablate::test::registry();
  setenv("ABLATE_DATA_PATH", ABLATE_TEST_DATA_DIR, 1);
  ablate::test::TempDir dir;
  // No norm, positional, attention, ffn, tokenizer, optimizer, scheduler or sample section.
  const std::string file = dir.write("bare.yaml", R"(name: bare
data: {path: shakespeare_16k.txt}
model: {d_model: 16, n_heads: 2, n_layers: 1, context: 16}
train: {steps: 20, batch_size: 4, eval_every: 20, eval_batches: 2, threads: 1}
eval: [{type: text_loss}, {type: text_loss, name: two, text: "to be"}]
)");
  ablate::RunOptions ro;
  ro.quiet = true;
  ro.out_dir = dir / "a";
  auto a = ablate::run_experiment(ablate::Experiment::load(file), ro);
  const std::string resolved = (std::filesystem::path(a.run_dir) / "config.resolved.yaml").string();
  REQUIRE(std::filesystem::exists(resolved));
  YAML::Node r = YAML::LoadFile(resolved);
  CHECK(r["model"]["norm"]["type"].as<std::string>() == "layernorm");
  CHECK(r["model"]["block"]["type"].as<std::string>() == "prenorm");
  CHECK(r["model"]["norm"]["final"].as<std::string>() == "true");  // the pre-norm block's default
  CHECK(r["model"]["positional"]["type"].as<std::string>() == "learned");
  CHECK(r["model"]["ffn"]["type"].as<std::string>() == "relu");
  CHECK(r["optimizer"]["type"].as<std::string>() == "adamw");
  CHECK(r["optimizer"]["betas"][0].as<std::string>() == "0.9");  // shortest text, not 0.899999976
  CHECK(r["scheduler"]["type"].as<std::string>() == "constant");
  CHECK(r["tokenizer"]["type"].as<std::string>() == "char");
  CHECK(r["train"]["steps"].as<int>() == 20);
  // A list stays a list, its entries in order (not a map with keys 0 and 1).
  REQUIRE(r["eval"].IsSequence());
  REQUIRE(r["eval"].size() == 2);
  CHECK(r["eval"][1]["name"].as<std::string>() == "two");
  CHECK(r["eval"][0]["text"].as<std::string>().rfind("ROMEO:", 0) ==
        0);  // the default text, recorded
  // The same text is in run.h5 (after the file's comment line).
  auto data = ablate::read_run_file(ablate::run_file_path(a.run_dir));
  CHECK(YAML::Dump(YAML::Load(data.str_attrs.at("config_resolved"))) == YAML::Dump(r));
  CHECK(data.str_attrs.at("config").find("norm") ==
        std::string::npos);  // the given config stays as given
  // Running the resolved config is the same run.
  ro.out_dir = dir / "b";
  auto b =
      ablate::run_experiment(ablate::Experiment::load(resolved, {"output.dir=" + (dir / "b")}), ro);
  CHECK(b.train_loss == a.train_loss);
  CHECK(b.val_loss == a.val_loss);
  auto bdata = ablate::read_run_file(ablate::run_file_path(b.run_dir));
  CHECK(bdata.tables.at("eval/two").at("loss") == data.tables.at("eval/two").at("loss"));
}

TEST_CASE(
    "trainer/a warmup-stable-decay run branched before its decay equals a run planned for the "
    "branch's length") {
  // Before its decay a WSD run's lr does not depend on the run's length, so runs of several
  // lengths can share their first steps (docs/RELIABILITY.md, "Branches"): a branch at a
  // kept checkpoint of the stable phase, with another train.steps, is the run planned for
  // that length from the start.
  ablate::test::TempDir dir;
  std::string cfg = ablate::test::kTinyBase;
  cfg.replace(cfg.find("{type: adamw, lr: 1.0e-2}"), 25,
              "{type: adamw, lr: 1.0e-2}\nscheduler: {type: wsd, warmup: 5, decay_fraction: 0.25, "
              "min_factor: 0.1}");
  const std::string yaml = dir.write("run.yaml", cfg);  // 60 steps: the decay over steps 45-60
  const std::string bin =
      "ABLATE_DATA_PATH=" ABLATE_TEST_DATA_DIR " " + ablate::test::ablate_binary() + " run ";
  const std::string run = bin + yaml + " -q -j 1 -o ";
  REQUIRE(ablate::test::run_command(run + dir / "short" + " train.steps=40").status ==
          0);  // the decay over steps 30-40
  // A kept step must be one of the run's.
  const auto outside =
      ablate::test::run_command(run + dir / "bad" + " 'train.keep_checkpoints=[20, 61]'");
  CHECK(outside.status != 0);
  CHECK_MESSAGE(outside.output.find("train.keep_checkpoints") != std::string::npos, outside.output);
  CHECK_MESSAGE(outside.output.find("step 61 is not a step of this run") != std::string::npos,
                outside.output);
  // The stem: the whole 60-step run, keeping its checkpoint at step 25 (between two regular
  // checkpoints, before either decay).
  REQUIRE(ablate::test::run_command(run + dir / "stem" + " 'train.keep_checkpoints=[25]'").status ==
          0);
  CHECK(std::filesystem::exists(ablate::kept_checkpoint_path(dir / "stem", 25)));
  const std::string branch = bin + dir / "stem" + " -q -j 1 train.steps=40 --branch ";
  // Only kept steps and the latest can be branched from; the message lists them.
  const auto missing = ablate::test::run_command(branch + dir / "b30" + " --at 30");
  CHECK(missing.status != 0);
  CHECK_MESSAGE(missing.output.find("no checkpoint at step 30 (kept: 25; latest: step 60)") !=
                    std::string::npos,
                missing.output);
  CHECK(!std::filesystem::exists(dir / "b30"));
  const auto branched = ablate::test::run_command(branch + dir / "branch" + " --at 25");
  REQUIRE_MESSAGE(branched.status == 0, branched.output);
  const auto a = ablate::read_run_file(ablate::run_file_path(dir / "short"));
  const auto b = ablate::read_run_file(ablate::run_file_path(dir / "branch"));
  const auto stem = ablate::read_run_file(ablate::run_file_path(dir / "stem"));
  CHECK(a.tables.at("train").at("lr") == b.tables.at("train").at("lr"));
  CHECK(a.tables.at("train").at("loss") == b.tables.at("train").at("loss"));
  CHECK(a.tables.at("eval").at("val_loss") == b.tables.at("eval").at("val_loss"));
  CHECK(a.texts.at("samples/final") == b.texts.at("samples/final"));
  CHECK(stem.tables.at("train").at("lr") !=
        b.tables.at("train").at("lr"));  // the stem decayed later
  // The branch point is on record: the stem's segment (planned for 60), then the branch's.
  CHECK(b.tables.at("segments").at("start_step") == std::vector<double>{0, 25});
  CHECK(b.tables.at("segments").at("schedule_steps") == std::vector<double>{60, 40});
  CHECK(b.str_attrs.at("status") == "done");
  CHECK(b.num_attrs.at("branched_at") == 25);
  CHECK(b.str_attrs.at("branched_from") == ablate::kept_checkpoint_path(dir / "stem", 25));
  // What a branch starts from: the stem's rows up to step 25 and its CPU time until then
  // (carried by the checkpoint), not the stem's whole run.
  const ablate::Branch prep = ablate::prepare_branch(dir / "stem", 25, dir / "prepared");
  CHECK(prep.step == 25);
  const auto p = ablate::read_run_file(ablate::run_file_path(dir / "prepared"));
  CHECK(p.str_attrs.at("status") == "branched");
  CHECK(p.tables.at("train").at("step").back() == 20);
  CHECK(p.tables.at("eval").at("step") == std::vector<double>{0, 20});
  CHECK(p.texts.count("samples/final") == 0);
  // Every attribute keeps its HDF5 type: flops_per_token is a float even where its value is a
  // whole number (as in this model), branched_at an integer.
  CHECK(stem.num_attrs.at("flops_per_token") == std::floor(stem.num_attrs.at("flops_per_token")));
  for (const auto& attr : stem.num_attrs)
    if (p.num_attrs.count(attr.first))
      CHECK_MESSAGE(p.int_attrs.count(attr.first) == stem.int_attrs.count(attr.first), attr.first);
  CHECK(p.int_attrs.count("flops_per_token") == 0);
  CHECK(p.int_attrs.count("branched_at") == 1);
  const auto kept = ablate::read_checkpoint(ablate::kept_checkpoint_path(dir / "stem", 25));
  double cpu25;
  std::memcpy(&cpu25, &kept.ints.at("cpu/seconds"), sizeof cpu25);
  CHECK(cpu25 > 0);
  CHECK(cpu25 < stem.num_attrs.at("cpu_seconds"));
  CHECK(p.num_attrs.at("cpu_seconds") == cpu25);
  CHECK(b.num_attrs.at("cpu_seconds") > cpu25);
  // A directory that holds a run is not branched into; the stem itself is left as it was.
  const auto again = ablate::test::run_command(branch + dir / "branch" + " --at 25");
  CHECK(again.status != 0);
  CHECK_MESSAGE(again.output.find("already holds a run") != std::string::npos, again.output);
  CHECK(ablate::read_run_file(ablate::run_file_path(dir / "stem")).tables.at("train").at("loss") ==
        stem.tables.at("train").at("loss"));
  // --overwrite deletes the kept checkpoints with the rest of the run.
  REQUIRE(ablate::test::run_command(run + dir / "stem" + " train.steps=10 --overwrite").status ==
          0);
  CHECK(!std::filesystem::exists(dir / "stem/checkpoints"));
}

TEST_CASE(
    "trainer/extending a finished run reproduces the uninterrupted run bitwise (constant lr)") {
  ablate::test::TempDir dir;
  train(
      dir, "full",
      {"train.steps=60", "train.checkpoint_every=20", "train.eval_every=20", "model.dropout=0.1"});
  // A run planned for 40 steps, then extended to 60: with a constant schedule holding its
  // last lr is the same as having planned 60 steps.
  train(
      dir, "part",
      {"train.steps=40", "train.checkpoint_every=20", "train.eval_every=20", "model.dropout=0.1"});
  ablate::test::registry();
  ablate::RunOptions ro;
  ro.out_dir = dir / "part";
  ro.quiet = true;
  ro.resume = true;
  std::string file = dir / "tiny.yaml";
  auto load = [&](const std::string& dropout) {
    return ablate::Experiment::load(
        file, longer({"train.steps=40", "train.checkpoint_every=20", "train.eval_every=20",
                      "model.dropout=" + dropout}));
  };
  // Resuming a finished run without --extend-to is refused: nothing to resume.
  CHECK_THROWS_WITH_AS(ablate::run_experiment(load("0.1"), ro),
                       doctest::Contains("is a finished run"), ablate::Error);
  // A changed config is refused, naming the key...
  ro.extend_to = 60;
  CHECK_THROWS_WITH_AS(ablate::run_experiment(load("0.2"), ro),
                       doctest::Contains("model.dropout: 0.1 -> 0.2"), ablate::Error);
  // ...train.steps and train.schedule_steps are what --extend-to changes.
  ablate::run_experiment(load("0.1"), ro);
  auto full = ablate::read_run_file(ablate::run_file_path(dir / "full"));
  auto part = ablate::read_run_file(ablate::run_file_path(dir / "part"));
  CHECK(full.tables.at("train").at("loss") == part.tables.at("train").at("loss"));
  CHECK(full.tables.at("eval").at("val_loss") == part.tables.at("eval").at("val_loss"));
  // Two segments, each with the config that produced it.
  const auto& seg = part.tables.at("segments");
  CHECK(seg.at("start_step") == std::vector<double>{0, 40});
  CHECK(seg.at("steps") == std::vector<double>{40, 60});
  CHECK(seg.at("schedule_steps") == std::vector<double>{40, 40});
  CHECK(part.texts.at("segments/0").find("steps: 40") != std::string::npos);
  CHECK(part.texts.at("segments/1").find("schedule_steps: 40") != std::string::npos);
  CHECK(part.str_attrs.at("config") == part.texts.at("segments/1"));
}

TEST_CASE("trainer/evaluators get the run's data split and directory, objectives the vocabulary") {
  ablate::test::TempDir d;
  const std::string exp = d.write("tiny.yaml", ablate::test::kTinyBase);
  fs::create_directories(d.path / "plugins");
  for (const std::string probe : {"context_probe", "vocab_objective"})
    fs::copy_file(std::string(ABLATE_TEST_PLUGIN_DIR) + "/" + probe + "/" + probe + ".so",
                  d.path / "plugins" / (probe + ".so"));
  auto r = ablate::test::run_command(
      "ABLATE_DATA_PATH=" ABLATE_TEST_DATA_DIR " " + ablate::test::ablate_binary() + " run " + exp +
      " -q -o " + (d / "run") + " --plugin-dir " + (d / "plugins") +
      " train.steps=20 sample.tokens=0 objective=vocab_objective 'eval=[{type: context_probe}]'");
  REQUIRE_MESSAGE(r.status == 0, r.output);
  const auto rd = ablate::read_run_file(ablate::run_file_path(d / "run"));
  const auto& t = rd.tables.at("eval/context_probe");
  // tiny.yaml: 16 KB of text, characters, train_fraction 0.9.
  const std::string text = ablate::test::read_file(ABLATE_TEST_DATA_DIR "/shakespeare_16k.txt");
  CHECK(t.at("has_data").back() == 1);
  CHECK(t.at("train_chars").back() + t.at("val_chars").back() == static_cast<double>(text.size()));
  CHECK(t.at("train_chars").back() == doctest::Approx(0.9 * text.size()).epsilon(0.01));
  CHECK(t.at("train_ids").back() == t.at("train_chars").back());  // one id per character
  CHECK(t.at("val_ids").back() == t.at("val_chars").back());
  CHECK(t.at("vocab").back() == rd.num_attrs.at("vocab_size"));
  CHECK(t.at("dir_has_experiment").back() == 1);
  // Loading the run builds its objective with the vocabulary too (ablate generate).
  auto gen =
      ablate::test::run_command(ablate::test::ablate_binary() + " generate " + (d / "run") +
                                " --prompt ROMEO --tokens 5 --plugin-dir " + (d / "plugins"));
  CHECK_MESSAGE(gen.status == 0, gen.output);
}
