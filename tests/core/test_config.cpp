// Experiment files and overrides: every error names file:line:column, the key path,
// the bad value, what is allowed and a did-you-mean.
#include <doctest/doctest.h>

#include <cmath>

#include "ablate/experiment.hpp"
#include "ablate/trainer.hpp"
#include "test_util.hpp"

namespace {

const char* kBase = R"(name: cfg
data:
  path: shakespeare_16k.txt
model:
  d_model: 32
  n_heads: 4
  n_layers: 1
  context: 16
  ffn: relu
train:
  steps: 2
  batch_size: 2
  eval_batches: 1
sample: {tokens: 0}
)";

// Runs the experiment text (with overrides) and returns the error message.
std::string error_of(const std::string& text, const std::vector<std::string>& overrides = {}) {
  ablate::test::registry();
  ablate::test::TempDir dir;
  std::string file = dir.write("exp.yaml", text);
  try {
    auto exp = ablate::Experiment::load(file, overrides);
    ablate::RunOptions ro;
    ro.out_dir = dir / "run";
    ro.quiet = true;
    setenv("ABLATE_DATA_PATH", ABLATE_TEST_DATA_DIR, 1);
    ablate::run_experiment(exp, ro);
  } catch (const ablate::Error& e) {
    std::string m = e.what();
    auto p = m.find(file);
    if (p != std::string::npos) m.replace(p, file.size(), "exp.yaml");
    return m;
  }
  return "(no error)";
}

std::string replace(std::string s, const std::string& from, const std::string& to) {
  auto p = s.find(from);
  REQUIRE(p != std::string::npos);
  return s.replace(p, from.size(), to);
}

}  // namespace

TEST_CASE("config/the base experiment runs") { CHECK(error_of(kBase) == "(no error)"); }

TEST_CASE("config/unknown key: location, path, allowed keys, did-you-mean") {
  std::string m = error_of(replace(kBase, "  n_layers: 1", "  n_layer: 1"));
  CHECK(m.find("exp.yaml:7:3: model.n_layer: unknown key in model") != std::string::npos);
  CHECK(m.find("Did you mean 'n_layers'?") != std::string::npos);
  CHECK(m.find("d_model") != std::string::npos);  // allowed keys listed
}

TEST_CASE("config/unknown top-level section") {
  std::string m = error_of(std::string(kBase) + "trian: {steps: 3}\n");
  CHECK(m.find("exp.yaml:15:1: trian: unknown key") != std::string::npos);
  CHECK(m.find("Did you mean 'train'?") != std::string::npos);
}

TEST_CASE("config/wrong type names the expected type and the value") {
  std::string m = error_of(replace(kBase, "  d_model: 32", "  d_model: wide"));
  CHECK(m.find("exp.yaml:5:12: model.d_model: expected an integer, got 'wide'") !=
        std::string::npos);
  m = error_of(replace(kBase, "  steps: 2", "  steps: [1, 2]"));
  CHECK(m.find("train.steps: expected an integer, got a list") != std::string::npos);
}

TEST_CASE("config/unknown plugin name lists variants with a did-you-mean") {
  std::string m = error_of(replace(kBase, "  ffn: relu", "  ffn: rleu"));
  CHECK(m.find("exp.yaml:9:8: model.ffn.type: unknown ffn 'rleu'") != std::string::npos);
  CHECK(m.find("Did you mean 'relu'?") != std::string::npos);
  CHECK(m.find("Available:") != std::string::npos);
}

TEST_CASE("config/unknown plugin option is reported at its key") {
  std::string m = error_of(replace(kBase, "  ffn: relu", "  ffn: {type: relu, hiden: 64}"));
  CHECK(m.find("model.ffn.hiden: unknown key") != std::string::npos);
  CHECK(m.find("Did you mean 'hidden'?") != std::string::npos);
}

TEST_CASE("config/out-of-range values") {
  CHECK(error_of(replace(kBase, "  n_heads: 4", "  n_heads: 5"))
            .find("model.n_heads: 5 does not divide d_model = 32") != std::string::npos);
  CHECK(error_of(replace(kBase, "  d_model: 32", "  d_model: 0"))
            .find("model.d_model: 0 is out of range") != std::string::npos);
  CHECK(error_of(replace(kBase, "  steps: 2", "  steps: -3"))
            .find("train.steps: -3 is out of range") != std::string::npos);
  CHECK(error_of(std::string(kBase) + "optimizer: {type: adamw, lr: .nan}\n")
            .find("optimizer.lr: expected a finite number") != std::string::npos);
}

TEST_CASE("config/YAML syntax errors carry the location") {
  std::string m = error_of("model:\n  d_model: [32\n");
  CHECK(m.find("exp.yaml:") != std::string::npos);
  CHECK(m.find("YAML syntax error") != std::string::npos);
}

TEST_CASE("config/overrides are applied and checked like the file") {
  CHECK(error_of(kBase, {"train.steps=3", "model.n_layers=2"}) == "(no error)");
  std::string m = error_of(kBase, {"model.n_layer=2"});
  CHECK(m.find("command-line override 'model.n_layer=2': model.n_layer: unknown key") !=
        std::string::npos);
  CHECK(m.find("Did you mean 'n_layers'?") != std::string::npos);
  m = error_of(kBase, {"train.steps=many"});
  CHECK(m.find("command-line override 'train.steps=many': train.steps: expected an integer, got "
               "'many'") != std::string::npos);
  m = error_of(kBase, {"model.ffn.type=gleu"});
  CHECK(m.find("unknown ffn 'gleu'") != std::string::npos);
  CHECK(m.find("Did you mean 'gelu'?") != std::string::npos);
  CHECK(error_of(kBase, {"steps"}).find("expected key.path=value") != std::string::npos);
}

TEST_CASE("config/data errors name the file") {
  CHECK(error_of(replace(kBase, "shakespeare_16k.txt", "no_such_file.txt"))
            .find("no_such_file.txt") != std::string::npos);
  CHECK(
      error_of(replace(kBase, "  context: 16", "  context: 4000")).find("fewer than one window") !=
      std::string::npos);
}

TEST_CASE("config/flatten and override helpers") {
  YAML::Node n = YAML::Load("{a: {b: 1, c: relu}, d: [1, 2]}");
  ablate::apply_override(n, "a.c.hidden=64");
  auto f = ablate::flatten(n);
  REQUIRE(f.size() == 4);
  CHECK(f[0].first == "a.b");
  CHECK(f[1].first == "a.c.hidden");
  CHECK(f[2].first == "a.c.type");
  CHECK(f[2].second == "relu");
  CHECK(f[3].second == "[1, 2]");
  // Block style flattens as flow style does: a config rewritten from one to the other has not
  // changed (resume, a sweep's adopted runs) and compare's option values read alike.
  const YAML::Node block = YAML::Load(
      "optimizer:\n  betas:\n    - 0.9\n    - 0.98\n  groups:\n    - {lr: 1}\n    - lr: 2\n      "
      "wd:\n        - 0\n");
  const YAML::Node flow =
      YAML::Load("optimizer: {betas: [0.9, 0.98], groups: [{lr: 1}, {lr: 2, wd: [0]}]}");
  CHECK(ablate::flatten(block) == ablate::flatten(flow));
  CHECK(ablate::flatten(block)[0].second == "[0.9, 0.98]");
  // A list of maps is entered by position, as overrides enter it; a list of values is one value.
  const auto fb = ablate::flatten(block);
  REQUIRE(fb.size() == 4);
  CHECK(fb[1] == std::make_pair(std::string("optimizer.groups.0.lr"), std::string("1")));
  CHECK(fb[3] == std::make_pair(std::string("optimizer.groups.1.wd"), std::string("[0]")));
  CHECK(ablate::config_changes(block, flow).empty());
  // Resolved configs written before lists stayed lists (eval: {0: {...}}) flatten as the list does.
  CHECK(ablate::flatten(YAML::Load("eval: {0: {type: a, data: x}, 1: {type: b}}")) ==
        ablate::flatten(YAML::Load("eval: [{type: a, data: x}, {type: b}]")));
  // and the node flattened keeps its own style
  CHECK(block["optimizer"]["betas"].Style() == YAML::EmitterStyle::Block);
}

TEST_CASE("config/overrides reach into lists by position, with errors for a bad index") {
  YAML::Node n = YAML::Load(
      "{eval: [{type: arithmetic, data: a.txt}, generate], optimizer: {betas: [0.9, 0.99]}}");
  ablate::apply_override(n, "eval.0.data=b.txt");
  ablate::apply_override(n, "eval.1.tokens=5");  // a scalar entry is the {type: ...} shorthand
  ablate::apply_override(n, "optimizer.betas.1=0.98");
  CHECK(n["eval"][0]["data"].as<std::string>() == "b.txt");
  CHECK(n["eval"][0]["type"].as<std::string>() == "arithmetic");
  CHECK(n["eval"][1]["type"].as<std::string>() == "generate");
  CHECK(n["eval"][1]["tokens"].as<int>() == 5);
  CHECK(n["optimizer"]["betas"][1].as<double>() == 0.98);
  CHECK(n["eval"].IsSequence());
  CHECK(n["eval"].size() == 2);
  auto error = [&](const std::string& a) {
    try {
      ablate::apply_override(n, a);
    } catch (const ablate::ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  CHECK(error("eval.2.data=c.txt") ==
        "command-line override 'eval.2.data=c.txt': index 2 is out of range: 'eval' has 2 entries "
        "(0 to 1); to add one, give the whole list "
        "(eval=[...])");
  CHECK(error("optimizer.betas.7=1")
            .find("index 7 is out of range: 'optimizer.betas' has 2 entries") != std::string::npos);
  CHECK(error("eval.data=c.txt") ==
        "command-line override 'eval.data=c.txt': 'eval' is a list; give the position of an entry "
        "(eval.0.data) or the whole list (eval=[...])");
  CHECK(error("eval.-1.data=x").find("'eval' is a list") != std::string::npos);
  CHECK(n["eval"].size() == 2);  // errors change nothing
}

TEST_CASE("core/hms writes durations for progress lines and sweep status") {
  CHECK(ablate::hms(0) == "00:00");
  CHECK(ablate::hms(65.4) == "01:05");
  CHECK(ablate::hms(3599.6) == "1:00:00");  // rounded to the second, then split
  CHECK(ablate::hms(3725) == "1:02:05");
  CHECK(ablate::hms(-1) == "--:--");
  CHECK(ablate::hms(std::nan("")) == "--:--");
}

TEST_CASE("core/message joins texts and numbers, ABLATE_CHECK throws it when its condition fails") {
  const std::string path = "a.bin";
  CHECK(ablate::message(path, ": ", int64_t{-3}, " of ", size_t{7}, ", ", 'x', ' ', true, " ",
                        uint8_t{200}) == "a.bin: -3 of 7, x true 200");
  // Floating-point numbers in the shortest form that reads back to the same value.
  CHECK(ablate::message(0.001, " ", 2.5e6, " ", 1e20, " ", 1.0f / 3.0f, " ", 1234567.0, " ",
                        -0.5) == "0.001 2500000 1e+20 0.33333334 1234567 -0.5");
  int evaluated = 0;
  auto count = [&] { return ++evaluated; };
  CHECK_NOTHROW(ABLATE_CHECK(1 + 1 == 2, "never built ", count()));
  CHECK(evaluated == 0);  // the message is built only on failure
  CHECK_THROWS_WITH_AS(ABLATE_CHECK(path.empty(), path, " is not empty (", path.size(), " bytes)"),
                       "a.bin is not empty (5 bytes)", ablate::Error);
}
