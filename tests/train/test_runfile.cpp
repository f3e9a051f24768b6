// The per-run HDF5 file: round trip through read_run_file, h5py and h5dump, resume
// (append, truncate_after_step), clear errors, and a writer killed without closing.
#include <doctest/doctest.h>
#include <hdf5.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "ablate/error.hpp"
#include "ablate/runfile.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using ablate::RunFile;

using ablate::test::contains;
using ablate::test::error_of;
using ablate::test::TempDir;

namespace {

// Exit status and combined output of a shell command.
std::pair<int, std::string> run(const std::string& cmd) {
  std::string out;
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return {-1, ""};
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int status = ::pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

bool have_h5py() { return run("/usr/bin/python3 -c 'import h5py'").first == 0; }

// train: steps 0..n-1 with loss = 4 - step/100; val every 100 steps.
void write_sample(RunFile& rf, int n) {
  for (int s = 0; s < n; ++s)
    rf.append("train", {{"step", s},
                        {"loss", 4.0 - s / 100.0},
                        {"lr", 3e-4},
                        {"grad_norm", 0.5 + s},
                        {"tokens_per_s", 1e5}});
  for (int s = 0; s < n; s += 100)
    rf.append("val", {{"step", s}, {"loss", 4.5 - s / 100.0}, {"ppl", 90.0 - s}});
}

const std::string kSample = "First Citizen:\nBefore we proceed — any further, hear me speak. ✓";

}  // namespace

TEST_CASE("io/runfile: write, then read back with read_run_file") {
  TempDir dir;
  const std::string path = dir / "run.h5";
  {
    RunFile rf = RunFile::create(path);
    CHECK(rf.is_open());
    rf.set_attr("config", "model:\n  d: 96\n");
    rf.set_attr("status", "running");
    rf.set_attr("n_params", int64_t{44487});
    rf.set_attr("threads", 2);
    rf.set_attr("wall_s", 1.5);
    rf.set_attr("status", "done");      // overwrite
    rf.set_attr("wall_s", int64_t{7});  // overwrite with another type
    write_sample(rf, 300);              // more than one 256-row chunk
    // A table can hold sub-tables: eval has columns and eval/arithmetic below it.
    rf.append("eval", {{"step", 299}, {"val_loss", 1.75}});
    rf.append("eval/arithmetic", {{"step", 299}, {"char_acc", 0.59}, {"exact", 0.0007}});
    rf.write_text("samples/final", "draft");
    rf.write_text("samples/final", kSample);  // overwrite
    rf.write_text("notes", "");
    CHECK(rf.rows("train") == 300);
    CHECK(rf.rows("val") == 3);
    CHECK(rf.rows("nope") == 0);
    rf.flush();
    rf.close();
    CHECK_FALSE(rf.is_open());
    CHECK(contains(error_of([&] { rf.append("train", {{"step", 1}}); }), "closed"));
  }
  ablate::RunData d = ablate::read_run_file(path);
  CHECK(d.str_attrs.at("format") == "ablate-run");
  CHECK(d.num_attrs.at("format_version") == 1);
  CHECK(d.str_attrs.at("config") == "model:\n  d: 96\n");
  CHECK(d.str_attrs.at("status") == "done");
  CHECK(d.num_attrs.at("n_params") == 44487);
  CHECK(d.num_attrs.at("threads") == 2);
  CHECK(d.num_attrs.at("wall_s") == 7);
  REQUIRE(d.tables.size() == 4);
  CHECK(d.tables.at("eval").size() == 2);
  CHECK(d.tables.at("eval").at("val_loss") == std::vector<double>{1.75});
  const auto& train = d.tables.at("train");
  CHECK(train.size() == 5);
  REQUIRE(train.at("step").size() == 300);
  for (int s = 0; s < 300; ++s) {
    CHECK(train.at("step")[s] == s);
    CHECK(train.at("loss")[s] == 4.0 - s / 100.0);  // float64: bitwise
    CHECK(train.at("grad_norm")[s] == 0.5 + s);
  }
  CHECK(d.tables.at("val").at("ppl") == std::vector<double>{90, -10, -110});
  CHECK(d.tables.at("eval/arithmetic").at("exact") == std::vector<double>{0.0007});
  CHECK(d.texts.at("samples/final") == kSample);
  CHECK(d.texts.at("notes") == "");
  CHECK(d.texts.size() == 2);
}

TEST_CASE("io/runfile: h5py and h5dump read the file") {
  TempDir dir;
  const std::string path = dir / "run.h5";
  {
    RunFile rf = RunFile::create(path);
    rf.set_attr("status", "done");
    rf.set_attr("n_params", int64_t{44487});
    write_sample(rf, 300);
    rf.write_text("samples/final", kSample);
  }  // the destructor closes
  if (!have_h5py()) {
    MESSAGE(
        "skipped the h5py check: /usr/bin/python3 cannot import h5py (apt install python3-h5py)");
  } else {
    const std::string script =
        "import sys, h5py\n"
        "f = h5py.File(sys.argv[1], 'r')\n"
        "assert f.attrs['format'] == 'ablate-run', f.attrs['format']\n"
        "assert f.attrs['format_version'] == 1\n"
        "assert f.attrs['status'] == 'done'\n"
        "assert f.attrs['n_params'] == 44487\n"
        "t = f['metrics/train']\n"
        "assert sorted(t.keys()) == ['grad_norm', 'loss', 'lr', 'step', 'tokens_per_s'], "
        "list(t.keys())\n"
        "assert t['step'].shape == (300,) and t['step'].dtype == 'float64'\n"
        "assert list(t['step'][:5]) == [0, 1, 2, 3, 4]\n"
        "assert t['loss'][299] == 4.0 - 299 / 100.0\n"
        "assert list(f['metrics/val/step'][:]) == [0, 100, 200]\n"
        "assert f['samples/final'].asstr()[()] == sys.argv[2]\n"
        "print('h5py-ok')\n";
    const auto [rc, output] = run("/usr/bin/python3 -c " + shell_quote(script) + " " +
                                  shell_quote(path) + " " + shell_quote(kSample));
    const std::string out = output;
    INFO(out);
    CHECK(rc == 0);
    CHECK(contains(out, "h5py-ok"));
  }
  if (run("command -v h5dump").first != 0) {
    MESSAGE("skipped the h5dump check: h5dump not installed (apt install hdf5-tools)");
  } else {
    const auto [rc, output] = run("h5dump -H " + shell_quote(path));
    const std::string out = output;
    INFO(out);
    CHECK(rc == 0);
    CHECK(contains(out, "ATTRIBUTE \"format\""));
    CHECK(contains(out, "GROUP \"metrics\""));
    CHECK(contains(out, "GROUP \"train\""));
    CHECK(contains(out, "DATASET \"tokens_per_s\""));
    CHECK(contains(out, "( 300 ) / ( H5S_UNLIMITED )"));
    CHECK(contains(out, "DATASET \"final\""));
  }
}

TEST_CASE("io/runfile: append after reopen, truncate_after_step") {
  TempDir dir;
  const std::string path = dir / "run.h5";
  {
    RunFile rf = RunFile::create(path);
    write_sample(rf, 300);
    rf.append("notes", {{"value", 1}});  // a table without a step column
    rf.set_attr("status", "running");
  }
  {
    RunFile rf = RunFile::open_append(path);
    CHECK(rf.rows("train") == 300);
    CHECK(rf.rows("val") == 3);
    CHECK(contains(error_of([&] {
                     rf.append("train", {{"step", 300}, {"loss", 1}});
                   }),
                   "table 'train' has columns [grad_norm, loss, lr, step, tokens_per_s] but this "
                   "row has [loss, step]"));
    // Resume from a checkpoint at step 150: rows after it go, new ones follow.
    rf.truncate_after_step(150);
    CHECK(rf.rows("train") == 151);
    CHECK(rf.rows("val") == 2);
    CHECK(rf.rows("notes") == 1);
    for (int s = 151; s < 160; ++s)
      rf.append("train",
                {{"tokens_per_s", 2e5}, {"step", s}, {"loss", -s}, {"lr", 1e-4}, {"grad_norm", 0}});
    rf.set_attr("status", "done");
  }
  ablate::RunData d = ablate::read_run_file(path);
  CHECK(d.str_attrs.at("status") == "done");
  const auto& step = d.tables.at("train").at("step");
  REQUIRE(step.size() == 160);
  for (int s = 0; s < 160; ++s) CHECK(step[s] == s);
  CHECK(d.tables.at("train").at("loss")[150] == 4.0 - 150 / 100.0);
  CHECK(d.tables.at("train").at("loss")[151] == -151);
  CHECK(d.tables.at("val").at("step") == std::vector<double>{0, 100});
  CHECK(d.tables.at("notes").at("value") == std::vector<double>{1});
  {
    RunFile rf = RunFile::open_append(path);
    rf.truncate_after_step(-1);  // everything goes; the columns stay
    CHECK(rf.rows("train") == 0);
    rf.append("train",
              {{"tokens_per_s", 1}, {"step", 0}, {"loss", 9}, {"lr", 1}, {"grad_norm", 1}});
  }
  d = ablate::read_run_file(path);
  CHECK(d.tables.at("train").at("loss") == std::vector<double>{9});
  CHECK(d.tables.at("val").at("loss").empty());
}

TEST_CASE("io/runfile: bad names and misuse give clear errors") {
  TempDir dir;
  const std::string path = dir / "run.h5";
  RunFile rf = RunFile::create(path);
  CHECK(contains(error_of([&] { rf.append("", {{"step", 0}}); }), "invalid table name ''"));
  CHECK(contains(error_of([&] { rf.append("eval//x", {{"step", 0}}); }), "invalid table name"));
  CHECK(contains(error_of([&] { rf.append("train", {}); }), "at least one column"));
  CHECK(contains(error_of([&] { rf.append("train", {{"a/b", 0}}); }), "invalid column name 'a/b'"));
  CHECK(contains(error_of([&] {
                   rf.append("train", {{"step", 0}, {"step", 1}});
                 }),
                 "column 'step' appears twice"));
  rf.append("eval", {{"arithmetic", 1}});
  CHECK(contains(error_of([&] {
                   rf.append("eval/arithmetic", {{"step", 0}});
                 }),
                 "a dataset of that name exists"));
  CHECK(contains(error_of([&] { rf.write_text("metrics/x", "t"); }), "reserved"));
  CHECK(contains(error_of([&] { rf.write_text("x", std::string("a\0b", 3)); }), "NUL"));
  CHECK(rf.path() == path);
  RunFile moved = std::move(rf);
  CHECK(contains(error_of([&] { rf.flush(); }), "moved"));
  moved.close();
  moved.close();  // twice is fine
  CHECK(contains(error_of([] { RunFile::create("/nonexistent-dir/run.h5"); }),
                 "/nonexistent-dir/run.h5: HDF5 error"));
}

TEST_CASE("io/runfile: files that are not run files") {
  TempDir dir;
  const std::string text = dir / "notes.txt";
  std::ofstream(text) << "just text\n";
  const std::string plain = dir / "plain.h5";
  hid_t f = H5Fcreate(plain.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  REQUIRE(f >= 0);
  H5Fclose(f);
  const std::string missing = dir / "missing.h5";

  for (auto read : {std::function<void(const std::string&)>(
                        [](const std::string& p) { ablate::read_run_file(p); }),
                    std::function<void(const std::string&)>(
                        [](const std::string& p) { RunFile::open_append(p); })}) {
    CHECK(error_of([&] { read(text); }) == text + ": not an ablate run file (not an HDF5 file)");
    CHECK(error_of([&] { read(plain); }) ==
          plain + ": not an ablate run file (no 'format' attribute)");
    CHECK(error_of([&] { read(missing); }) == missing + ": not an ablate run file (no such file)");
    CHECK(error_of([&] { read(dir.path.string()); }) ==
          dir.path.string() + ": not an ablate run file (not a regular file)");
  }
  {
    RunFile rf = RunFile::create(dir / "future.h5");
    rf.set_attr("format_version", int64_t{2});
  }
  CHECK(contains(error_of([&] { ablate::read_run_file(dir / "future.h5"); }),
                 "format_version 2 is newer than this ablate reads (1)"));
  {
    RunFile rf = RunFile::create(dir / "other.h5");
    rf.set_attr("format", "something-else");
  }
  CHECK(contains(error_of([&] { ablate::read_run_file(dir / "other.h5"); }),
                 "not an ablate run file (format is 'something-else', expected 'ablate-run')"));
}

TEST_CASE("io/runfile: a writer killed without closing leaves every flushed row") {
  TempDir dir;
  for (bool sigkill : {false, true}) {
    const std::string path = dir / (sigkill ? "killed.h5" : "exited.h5");
    std::fflush(nullptr);
    pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      try {
        RunFile rf = RunFile::create(path);
        rf.set_attr("status", "running");
        for (int s = 0; s < 1000; ++s) {
          rf.append("train", {{"step", s}, {"loss", 1.0 / (s + 1)}});
          if (s % 100 == 99) {
            rf.append("val", {{"step", s}, {"loss", 2.0 / (s + 1)}});
            rf.flush();
          }
        }
        rf.write_text("samples/final", kSample);
        rf.flush();
        if (sigkill) ::raise(SIGKILL);
        ::_exit(0);  // no destructors, no HDF5 atexit close
      } catch (...) {
        ::_exit(3);
      }
    }
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    if (sigkill) {
      CHECK(WIFSIGNALED(status));
      CHECK(WTERMSIG(status) == SIGKILL);
    } else {
      CHECK(WIFEXITED(status));
      CHECK(WEXITSTATUS(status) == 0);
    }
    ablate::RunData d = ablate::read_run_file(path);
    CHECK(d.str_attrs.at("status") == "running");
    const auto& loss = d.tables.at("train").at("loss");
    REQUIRE(loss.size() == 1000);
    for (int s = 0; s < 1000; ++s) CHECK(loss[s] == 1.0 / (s + 1));
    CHECK(d.tables.at("val").at("step").size() == 10);
    CHECK(d.texts.at("samples/final") == kSample);
    // The file can be resumed as well.
    RunFile rf = RunFile::open_append(path);
    CHECK(rf.rows("train") == 1000);
    rf.truncate_after_step(499);
    CHECK(rf.rows("train") == 500);
    CHECK(rf.rows("val") == 5);
  }
}

TEST_CASE(
    "io/runfile: a run still being written can be read, by h5py too (the writer takes no HDF5 "
    "lock)") {
  TempDir dir;
  const std::string path = dir / "live.h5";
  int ready[2], go[2];
  REQUIRE(::pipe(ready) == 0);
  REQUIRE(::pipe(go) == 0);
  std::fflush(nullptr);
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(ready[0]);
    ::close(go[1]);
    int rc = 0;
    try {
      RunFile rf = RunFile::create(path);
      rf.append("train", {{"step", 0}, {"loss", 4.2}});
      rf.flush();
      char c = 1;
      if (::write(ready[1], &c, 1) != 1) rc = 4;
      while (::read(go[0], &c, 1) > 0) {
      }
    } catch (...) {
      rc = 3;
    }
    ::_exit(rc);
  }
  ::close(ready[1]);
  ::close(go[0]);
  char c = 0;
  CHECK(::read(ready[0], &c, 1) == 1);
  ablate::RunData d = ablate::read_run_file(path);
  CHECK(d.tables.at("train").at("loss") == std::vector<double>{4.2});
  if (have_h5py()) {
    // No HDF5_USE_FILE_LOCKING=FALSE: h5py takes its shared lock, which the writer allows.
    const auto [rc, output] = run("env -u HDF5_USE_FILE_LOCKING /usr/bin/python3 -c " +
                                  shell_quote("import sys, h5py\nf = h5py.File(sys.argv[1], "
                                              "'r')\nprint('loss', f['metrics/train/loss'][0])") +
                                  " " + shell_quote(path) + " 2>&1");
    const std::string out = output;
    INFO(out);
    CHECK(rc == 0);
    CHECK(contains(out, "loss 4.2"));
  }
  ::close(go[1]);
  ::close(ready[0]);
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  RunFile::open_append(path).close();
}
