// Bad input through the real `ablate` binary: each gives a clear message and a non-zero
// exit (1 for bad input, 2 for bad usage), never a crash (exit 70 is an internal error,
// 128+N a signal) or a silent default. Cases already covered in-process by
// test_config.cpp, test_registry.cpp, test_checkpoint.cpp and test_runfile.cpp are
// checked here only where the CLI adds something (exit codes, --plugin-dir, --resume).
#include <doctest/doctest.h>

#include <H5Cpp.h>

#include <filesystem>
#include <fstream>

#include "ablate/checkpoint.hpp"
#include "ablate/trainer.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;

namespace {

const char* kExp = R"(name: bad
seed: 3
data: {path: shakespeare_16k.txt}
model: {d_model: 16, n_heads: 2, n_layers: 1, context: 16, positional: learned}
train: {steps: 4, batch_size: 2, eval_every: 2, eval_batches: 1, checkpoint_every: 2, threads: 1}
sample: {tokens: 0}
)";

std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// `ablate <args>` with the test data on the data path.
ablate::test::CommandResult ablate_cli(const std::string& args) {
  return ablate::test::run_command("ABLATE_DATA_PATH=" ABLATE_TEST_DATA_DIR " " +
                                   ablate::test::ablate_binary() + " " + args + " </dev/null");
}

// Expects exit `code` and every part in the output.
void expect(const ablate::test::CommandResult& r, int code, const std::vector<std::string>& parts) {
  INFO(r.output);
  CHECK(r.status == code);
  for (const auto& p : parts)
    CHECK_MESSAGE(r.output.find(p) != std::string::npos, "missing: " << p);
}

// A trained two-step run in dir/run.
std::string trained_run(const ablate::test::TempDir& dir) {
  std::string exp = dir.write("exp.yaml", kExp);
  auto r = ablate_cli("run " + exp + " -q -o " + (dir / "run"));
  REQUIRE_MESSAGE(r.status == 0, r.output);
  return dir / "run";
}

}  // namespace

TEST_CASE("reliability/bad input: config errors exit 1 with a located message") {
  ablate::test::TempDir dir;
  std::string exp = dir.write("exp.yaml", kExp);
  struct Case {
    std::string overrides, message;
  };
  const std::vector<Case> cases = {
      {"model.n_heads=0", "model.n_heads: 0 is out of range; allowed: 1 to"},
      {"model.n_layers=-1", "model.n_layers: -1 is out of range"},
      {"model.context=0", "model.context: 0 is out of range"},
      {"train.batch_size=0", "train.batch_size: 0 is out of range"},
      {"train.eval_batches=-2", "train.eval_batches: -2 is out of range"},
      {"model.ffn_multiplier=0", "model.ffn_multiplier: 0 is out of range"},
      {"optimizer.lr=.inf", "optimizer.lr: expected a finite number, got '.inf'"},
      {"optimizer.lr=-1e-3", "optimizer.lr: -0.001 is out of range"},
      {"optimizer.lr=0", "optimizer.lr: 0 is out of range"},
      {"model.dropout=.nan", "model.dropout: expected a finite number"},
      {"model.d_model=1.5", "model.d_model: expected an integer, got '1.5'"},
      {"model.d_model=99999999999999999999",
       "model.d_model: expected an integer, got '99999999999999999999'"},
      {"model.bias=yes", "model.bias: expected true or false, got 'yes'"},
      {"data.path=", "data.path: data file: empty file name"},
      {"'model={a: 1, a: 2}'", "a: given twice, on line 1, columns 2 and 8"},
  };
  for (const auto& c : cases) {
    INFO(c.overrides);
    expect(ablate_cli("run " + exp + " -q -o " + (dir / "run") + " " + c.overrides), 1,
           {"error: command-line override", c.message});
  }
}

TEST_CASE("reliability/bad input: malformed YAML documents") {
  ablate::test::TempDir dir;
  auto run_text = [&](const std::string& text) {
    return ablate_cli("run " + dir.write("doc.yaml", text) + " -q -o " + (dir / "run"));
  };
  expect(run_text("name: x\n\tmodel: 1\n"), 1, {"doc.yaml:2:1: YAML syntax error"});
  expect(run_text("model: {d_model: [32\n"), 1, {"doc.yaml:", "YAML syntax error"});
  expect(run_text("- a\n- b\n"), 1, {"doc.yaml:1:1: an experiment must be a YAML map"});
  expect(run_text("\xff\xfe garbage"), 1, {"doc.yaml:1:1: an experiment must be a YAML map"});
  expect(run_text(""), 1, {"data.path: missing"});
  // yaml-cpp keeps both of two equal keys and a lookup sees the first: refused.
  expect(run_text(std::string(kExp) + "seed: 4\n"), 1,
         {"doc.yaml:7:1: seed: given twice, on line 2 and on line 7; keep one of them"});
  expect(run_text("model: {d_model: 32, d_model: 64}\n"), 1,
         {"doc.yaml:1:22: model.d_model: given twice, on line 1, columns"});
  // Keys must be names (yaml-cpp would throw a bare conversion error later).
  expect(run_text(std::string(kExp) + "? [a, b]\n: 3\n"), 1,
         {"doc.yaml:7:3: the document: a key must be a plain name, not a list"});
  expect(run_text("model: {? {a: 1} : 3}\n"), 1, {"model: a key must be a plain name, not a map"});
  // Aliases that expand exponentially are refused before anything walks them.
  std::string laughs = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n";
  for (int i = 1; i < 8; ++i)
    laughs += "a" + std::to_string(i) + ": &a" + std::to_string(i) + " [" + [&] {
      std::string r;
      for (int k = 0; k < 10; ++k) r += (k ? ", *a" : "*a") + std::to_string(i - 1);
      return r;
    }() + "]\n";
  expect(run_text(laughs), 1, {"doc.yaml: the document expands to more than 100000 YAML nodes"});
  expect(ablate_cli("run " + (dir / "missing.yaml")), 1,
         {"missing.yaml: cannot open experiment file (no such file)"});
}

TEST_CASE("reliability/bad input: data files") {
  ablate::test::TempDir dir;
  std::string exp = dir.write("exp.yaml", kExp);
  auto with_data = [&](const std::string& name, const std::string& bytes) {
    dir.write(name, bytes);
    return ablate_cli("run " + exp + " -q -o " + (dir / "run") + " data.path=" + (dir / name));
  };
  expect(with_data("empty.txt", ""), 1, {"data.path: ", "empty.txt: text file is empty"});
  expect(with_data("latin1.txt", "caf\xe9 au lait\n"), 1,
         {"latin1.txt: not valid UTF-8 at byte offset 3 (line 1, column 4): byte 0xE9", "iconv"});
  expect(with_data("cut.txt", std::string(100, 'a') + "\xe2\x82"), 1,
         {"cut.txt: not valid UTF-8 at byte offset 100", "cut off"});
  expect(with_data("short.txt", "too short\n"), 1,
         {"short.txt: the training part has 9 tokens, fewer than one window (context + 1 = 17)"});
  // Long enough to train on, too short to validate on.
  expect(with_data("noval.txt", std::string(40, 'a') + "b"), 1,
         {"the validation part has", "fewer than one window"});
  expect(ablate_cli("run " + exp + " -q -o " + (dir / "run") + " data.path=no_such_file.txt"), 1,
         {"data file 'no_such_file.txt' not found. Searched:", "ABLATE_DATA_PATH"});
}

TEST_CASE("reliability/bad input: plugin libraries given with --plugin-dir") {
  ablate::test::TempDir dir;
  std::string exp = dir.write("exp.yaml", kExp);
  const std::string base =
      "run " + exp + " -q -o " + (dir / "run") + " --plugin-dir " + ABLATE_TEST_PLUGIN_DIR + "/";
  const std::string v = std::to_string(ablate::kPluginApiVersion);
  expect(ablate_cli(base + "bad_version"), 1,
         {"bad_version.so: plugin API version " + std::to_string(ablate::kPluginApiVersion + 998) +
          ", but this ablate expects " + v});
  auto missing = ablate_cli(base + "missing_symbol");
  expect(missing, 1,
         {"missing_symbol.so: cannot load plugin library", "undefined symbol",
          "ablate_function_that_does_not_exist", "built against another ablate version"});
  CHECK(missing.output.find("Bad file descriptor") ==
        std::string::npos);  // Boost's errno text, unrelated
  expect(ablate_cli(base + "no_symbol"), 1, {"no_symbol.so: not an ablate plugin"});
  expect(ablate_cli(base + "throws model.norm=throws"), 1,
         {"command-line override 'model.norm=throws': model.norm.type: norm 'throws'",
          "failed to initialise: deliberate failure"});
  expect(ablate_cli(base + "nonexistent"), 1,
         {"plugin directory '", "nonexistent' does not exist"});
  expect(ablate_cli("plugins --plugin-dir " + std::string(ABLATE_TEST_PLUGIN_DIR) + "/bad_version"),
         1, {"plugin API version " + std::to_string(ablate::kPluginApiVersion + 998)});
}

TEST_CASE(
    "reliability/bad input: corrupt, truncated and foreign checkpoints for generate and --resume") {
  ablate::test::TempDir dir;
  const std::string run = trained_run(dir);
  const std::string ck = ablate::checkpoint_path(run);
  const std::string good = ablate::test::read_file(ck);
  const std::string resume = "run " + (dir / "exp.yaml") + " -q --resume -o " + run;
  auto both = [&](const std::string& bytes, const std::vector<std::string>& parts) {
    std::ofstream(ck, std::ios::binary | std::ios::trunc) << bytes;
    expect(ablate_cli("generate " + run + " -n 3"), 1, parts);
    expect(ablate_cli(resume), 1, parts);
  };
  both(good.substr(0, 1000), {"checkpoint.ckpt: checkpoint truncated at byte 1000 (header says"});
  both(good.substr(0, 10), {"checkpoint.ckpt: checkpoint truncated at byte 10"});
  std::string flipped = good;
  flipped[good.size() / 2] ^= 0x40;
  both(flipped, {"checkpoint.ckpt: corrupt checkpoint (CRC mismatch)"});
  both("", {"checkpoint.ckpt: not an ablate checkpoint (the file is empty)"});
  both("model:\n  d_model: 16\n",
       {"not an ablate checkpoint (it does not start with \"ABLATECK\")"});
  // Valid container, not written by `ablate run`.
  ablate::Checkpoint foreign;
  foreign.texts["config"] = "name: x\n";
  auto bytes = ablate::serialize_checkpoint(foreign);
  both(std::string(bytes.begin(), bytes.end()), {"checkpoint lacks"});
  // A run file given where a checkpoint is expected.
  expect(ablate_cli("generate " + ablate::run_file_path(run)), 1,
         {"run.h5: not an ablate checkpoint"});
  expect(ablate_cli("generate " + (dir / "nowhere")), 1, {"no checkpoint here"});
}

TEST_CASE("reliability/bad input: --resume with a run.h5 that is not an ablate run file") {
  ablate::test::TempDir dir;
  const std::string run = trained_run(dir);
  const std::string h5 = ablate::run_file_path(run);
  const std::string resume = "run " + (dir / "exp.yaml") + " -q --resume -o " + run;
  std::ofstream(h5, std::ios::trunc) << "just text\n";
  expect(ablate_cli(resume), 1, {"run.h5: not an ablate run file (not an HDF5 file)"});
  {
    H5::H5File f(h5, H5F_ACC_TRUNC);
    f.createGroup("something");
  }
  expect(ablate_cli(resume), 1, {"run.h5: not an ablate run file (no 'format' attribute)"});
  fs::remove(h5);
  fs::create_directory(h5);
  expect(ablate_cli(resume), 1, {"run.h5: not an ablate run file (not a regular file)"});
}

TEST_CASE("reliability/bad input: command-line flags") {
  ablate::test::TempDir dir;
  const std::string run = trained_run(dir);
  const std::string exp = dir / "exp.yaml";
  expect(ablate_cli("run " + exp + " --resme"), 2,
         {"unrecognised option '--resme'. Did you mean '--resume'?", "ablate run --help"});
  expect(ablate_cli("generate " + run + " --temprature 1"), 2, {"Did you mean '--temperature'?"});
  // No abbreviations: a prefix is an error that names the whole option, not a silent match.
  expect(ablate_cli("bench --gen 3 --no-torch"), 2,
         {"unrecognised option '--gen'. Did you mean '--gen-tokens'?"});
  expect(ablate_cli("run " + exp + " --threads 0"), 2, {"--threads must be at least 1, got 0"});
  expect(ablate_cli("run " + exp + " -j -2"), 2, {"--threads must be at least 1, got -2"});
  expect(ablate_cli("run " + exp + " --threads many"), 2,
         {"the argument ('many') for option '--threads' is invalid"});
  expect(ablate_cli("run " + exp + " steps"), 2,
         {"'steps' is not an override; write key.path=value"});
  expect(ablate_cli("run"), 2, {"missing the experiment file"});
  expect(ablate_cli("generate " + run + " --top-p 2"), 2, {"--top-p must be in (0, 1], got 2"});
  expect(ablate_cli("generate " + run + " --top-p 0"), 2, {"--top-p must be in (0, 1], got 0"});
  expect(ablate_cli("generate " + run + " --top-p nan"), 2, {"--top-p must be in (0, 1]"});
  expect(ablate_cli("generate " + run + " --temperature -1"), 2,
         {"--temperature must be a finite number >= 0"});
  expect(ablate_cli("generate " + run + " --temperature nan"), 2,
         {"--temperature must be a finite number >= 0"});
  expect(ablate_cli("generate " + run + " --temperature inf"), 2,
         {"--temperature must be a finite number >= 0"});
  expect(ablate_cli("generate " + run + " --top-k -1"), 2, {"--top-k must be >= 0"});
  expect(ablate_cli("generate " + run + " --tokens -5"), 2, {"--tokens must be >= 0"});
  expect(ablate_cli("generate " + run + " --seed -1"), 2, {"--seed must be >= 0"});
  expect(ablate_cli("generate " + run + " --prompt ''"), 1, {"the prompt encodes to no tokens"});
  // An output file's directory is checked before any work, with the fix.
  const std::string missing = dir / "missing";
  expect(ablate_cli("report " + run + " -o " + missing + "/report.html"), 2,
         {"-o " + missing + "/report.html: the directory " + missing + " does not exist",
          "mkdir -p " + missing});
  expect(ablate_cli("export " + run + " -o " + missing + "/m.csv"), 2,
         {"the directory " + missing + " does not exist"});
  CHECK_FALSE(fs::exists(missing));
  // A file that cannot be written gives the system's reason (here: the path is a directory).
  expect(ablate_cli("export " + run + " -o " + run), 1,
         {run + ": cannot write it: Is a directory"});
  expect(ablate_cli("frobnicate"), 2, {"unknown command 'frobnicate'"});
  expect(ablate_cli("genrate"), 2, {"Did you mean 'generate'?"});
}

TEST_CASE("reliability/generation runs past the learned position table by sliding the window") {
  ablate::test::TempDir dir;
  const std::string run = trained_run(dir);
  // context 16 with learned positions: a 40-character prompt and 50 new tokens.
  auto r =
      ablate_cli("generate " + run + " -n 50 --seed 2 --prompt " + quote(std::string(40, 'e')));
  INFO(r.output);
  CHECK(r.status == 0);
  CHECK(r.output.size() >= 40 + 50);
  // In-process: the model itself refuses positions beyond its table with a clear error.
  ablate::test::registry();
  auto loaded = ablate::load_run(run);
  ablate::Graph g;
  std::vector<int32_t> ids(17, 0);
  ablate::Batch a{ids.data(), 1, 17};
  std::string msg;
  try {
    loaded.model->forward(g, a);
  } catch (const ablate::Error& e) {
    msg = e.what();
  }
  CHECK(msg.find("learned positions: positions 0..16 exceed the table of 16 (model.context)") !=
        std::string::npos);
}
