// Reliability of the real `ablate run` binary: kill -9 at seeded random points (between
// steps, half-way through a checkpoint, between a checkpoint's write and its rename,
// mid-row in the HDF5 file, and at a random wall-clock time), check what the killed run
// left behind, resume with --resume, and compare metrics and final weights bitwise with
// an uninterrupted run. Also: config changes on resume, NaN/Inf detection, thread-count
// independence. ABLATE_RESUME_SEED=<n> explores other kill points.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>
#include <sstream>
#include <thread>

#include "ablate/checkpoint.hpp"
#include "ablate/machine.hpp"
#include "ablate/runfile.hpp"
#include "ablate/sanitizer.hpp"
#include "ablate/trainer.hpp"
#include "test_util.hpp"

extern char** environ;

namespace fs = std::filesystem;

using ablate::test::contains;

namespace {

// Dropout > 0 (the mask RNG matters), a warmup + cosine schedule, checkpoints every 4
// steps, train rows every 5 and evaluations every 20, so that checkpoints fall inside a
// train-row window and between evaluations.
const char* kConfig = R"(name: resume
seed: 11
data: {path: shakespeare_16k.txt, train_fraction: 0.9}
tokenizer: char
model: {d_model: 32, n_heads: 4, n_layers: 2, context: 32, dropout: 0.1}
train: {steps: 60, batch_size: 8, eval_every: 20, eval_batches: 2, checkpoint_every: 4, log_every: 5, threads: 2}
optimizer: {type: adamw, lr: 1.0e-2, weight_decay: 0.1}
scheduler: {type: cosine, warmup: 10}
sample: {tokens: 30, prompt: "ROMEO:"}
)";
constexpr int64_t kSteps = 60, kCheckpointEvery = 4, kEvalEvery = 20;

// Starts `ablate run <args>` with ABLATE_FAULT=fault (if not empty); output goes to log.
pid_t spawn_run(const std::vector<std::string>& args, const std::string& fault,
                const std::string& log, const std::vector<std::string>& extra_env = {}) {
  std::vector<std::string> argv = {ablate::test::ablate_binary(), "run"};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e)
    if (std::strncmp(*e, "ABLATE_FAULT=", 13) != 0 &&
        std::strncmp(*e, "ABLATE_DATA_PATH=", 17) != 0)
      env.push_back(*e);
  env.push_back(std::string("ABLATE_DATA_PATH=") + ABLATE_TEST_DATA_DIR);
  if (!fault.empty()) env.push_back("ABLATE_FAULT=" + fault);
  env.insert(env.end(), extra_env.begin(), extra_env.end());
  auto ptrs = [](std::vector<std::string>& v) {
    std::vector<char*> p;
    for (auto& s : v) p.push_back(s.data());
    p.push_back(nullptr);
    return p;
  };
  std::vector<char*> av = ptrs(argv), ev = ptrs(env);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, av[0], &fa, nullptr, av.data(), ev.data());
  posix_spawn_file_actions_destroy(&fa);
  REQUIRE_MESSAGE(rc == 0, "cannot start " << av[0] << ": " << std::strerror(rc));
  return pid;
}

struct Exit {
  bool killed = false;   // by SIGKILL
  int code = -1;         // exit code otherwise
  double seconds = 0;    // from wait_for's call to the exit
  long max_rss_kib = 0;  // the process's peak resident memory (ru_maxrss)
};

Exit wait_for(pid_t pid) {
  int st = 0;
  rusage ru{};
  const auto t0 = std::chrono::steady_clock::now();
  while (::wait4(pid, &st, 0, &ru) < 0 && errno == EINTR) {
  }
  Exit e;
  e.max_rss_kib = ru.ru_maxrss;
  e.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  e.killed = WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL;
  e.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return e;
}

Exit run(const std::vector<std::string>& args, const std::string& fault, const std::string& log) {
  return wait_for(spawn_run(args, fault, log));
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

bool same_bits(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0);
}

// Every column but the wall-clock one, bitwise; only rows with step <= max_step (all by default).
void check_tables(const ablate::RunData& want, const ablate::RunData& got, double max_step = 1e300,
                  bool exact_length = true) {
  for (const char* table : {"train", "eval"}) {
    INFO("table " << table);
    REQUIRE(want.tables.count(table));
    if (!got.tables.count(table)) {
      CHECK(max_step < want.tables.at(table).at("step").front());  // nothing flushed yet
      continue;
    }
    const auto& w = want.tables.at(table);
    const auto& g = got.tables.at(table);
    size_t n = 0;
    while (n < w.at("step").size() && w.at("step")[n] <= max_step) ++n;
    CHECK(g.at("step").size() >= n);
    if (exact_length) CHECK(g.at("step").size() == n);
    for (const auto& column : w) {
      const std::string& col = column.first;
      const auto& values = column.second;
      if (col == "tokens_per_s") continue;
      INFO("column " << col);
      REQUIRE(g.count(col));
      std::vector<double> a(values.begin(), values.begin() + static_cast<long>(n));
      std::vector<double> b(g.at(col).begin(),
                            g.at(col).begin() + static_cast<long>(std::min(n, g.at(col).size())));
      CHECK(same_bits(a, b));
    }
  }
}

// The final state: metrics, sample, and every tensor and integer of the last checkpoint.
void check_same_run(const std::string& want_dir, const std::string& got_dir) {
  auto want = ablate::read_run_file(ablate::run_file_path(want_dir));
  auto got = ablate::read_run_file(ablate::run_file_path(got_dir));
  CHECK(got.str_attrs.at("status") == "done");
  check_tables(want, got);
  CHECK(want.texts.at("samples/final") == got.texts.at("samples/final"));
  auto a = ablate::read_checkpoint(ablate::checkpoint_path(want_dir));
  auto b = ablate::read_checkpoint(ablate::checkpoint_path(got_dir));
  CHECK(a.ints == b.ints);
  CHECK(a.texts == b.texts);
  REQUIRE(a.tensors.size() == b.tensors.size());
  for (const auto& tensor : a.tensors) {
    const std::string& name = tensor.first;
    const auto& v = tensor.second;
    INFO("tensor " << name);
    REQUIRE(b.tensors.count(name));
    CHECK(same_bits(v, b.tensors.at(name)));
  }
}

// What a killed run must leave: a checkpoint that reads (or none), and, once a checkpoint
// exists, a readable run file with every row up to the last flush, equal to the
// uninterrupted run's. `flushed` is the last step known to be flushed (0: unknown).
void check_killed_run(const std::string& dir, const ablate::RunData& want, int64_t flushed) {
  const std::string ck = ablate::checkpoint_path(dir);
  int64_t ck_step = 0;
  if (fs::exists(ck)) {
    ablate::Checkpoint c;
    CHECK_NOTHROW(c = ablate::read_checkpoint(ck));
    ck_step = static_cast<int64_t>(c.ints["step"]);
    CHECK(ck_step % kCheckpointEvery == 0);
  }
  if (ck_step == 0 && flushed == 0) return;  // killed before anything had to be durable
  ablate::RunData got;
  REQUIRE_NOTHROW(got = ablate::read_run_file(ablate::run_file_path(dir)));
  // "done" when a timed kill lands after the run file was closed, before the process exits.
  const std::string& status = got.str_attrs.at("status");
  CHECK((status == "running" || status == "done"));
  check_tables(want, got, static_cast<double>(std::max(ck_step, flushed)), /*exact_length=*/false);
}

// The status in a run directory's run.h5 ("" when there is none or it does not read).
std::string status_of(const std::string& dir) {
  try {
    return ablate::read_run_file(ablate::run_file_path(dir)).str_attrs.at("status");
  } catch (const std::exception&) {
    return "";
  }
}

// The last step whose rows were flushed before the process reached step `next`.
int64_t flushed_before(int64_t next) {
  int64_t s = next - 1;
  while (s > 0 && s % kCheckpointEvery != 0 && s % kEvalEvery != 0) --s;
  return s;
}

}  // namespace

TEST_CASE("reliability/kill -9 at random points, resume, and get the uninterrupted run bitwise") {
  ablate::test::TempDir dir;
  const std::string cfg = dir.write("resume.yaml", kConfig);
  const std::string log = dir / "log.txt";
  auto t0 = std::chrono::steady_clock::now();
  REQUIRE(run({cfg, "-o", dir / "full", "-q"}, "", log).code == 0);
  const double full_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const auto want = ablate::read_run_file(ablate::run_file_path(dir / "full"));

  uint64_t seed = 20240607;
  if (const char* s = std::getenv("ABLATE_RESUME_SEED")) seed = std::strtoull(s, nullptr, 10);
  MESSAGE("kill points from seed " << seed << " (ABLATE_RESUME_SEED)");
  std::mt19937_64 rng(seed);
  auto uniform = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  const int64_t n_checkpoints = kSteps / kCheckpointEvery;

  // Each scenario is a chain: a killed first attempt, then resumes that may be killed
  // again, until one finishes.
  const std::vector<std::string> kinds = {
      "step", "checkpoint.partial", "checkpoint.rename", "runfile.append", "timed", "step"};
  for (size_t k = 0; k < kinds.size(); ++k) {
    const std::string out = dir / ("k" + std::to_string(k));
    std::string kind = kinds[k];
    int attempts = 0;
    for (bool done = false; !done; ++attempts) {
      REQUIRE(attempts < 6);
      // A resumed attempt starts after the checkpoint's step; fault points count arrivals
      // from there.
      int64_t start = 0;
      if (attempts > 0 && fs::exists(ablate::checkpoint_path(out)))
        start = static_cast<int64_t>(
            ablate::read_checkpoint(ablate::checkpoint_path(out)).ints["step"]);
      if (start >= kSteps) kind = "none";                   // killed after the last checkpoint
      if (attempts > 0 && status_of(out) == "done") break;  // killed after it finished
      std::string fault;
      int64_t flushed = 0;
      if (kind == "step") {
        int64_t n = uniform(1, kSteps - start);
        fault = "step:" + std::to_string(n);
        flushed = flushed_before(start + n);
      } else if (kind == "checkpoint.partial" || kind == "checkpoint.rename") {
        int64_t n = uniform(1, n_checkpoints - start / kCheckpointEvery);
        fault = kind + ":" + std::to_string(n);
        flushed = start + n * kCheckpointEvery;  // the run file is flushed before each checkpoint
      } else if (kind == "runfile.append") {
        fault = kind + ":" + std::to_string(uniform(1, 60));
      }
      std::vector<std::string> args = {cfg, "-o", out, "-q"};
      // Killed before its first checkpoint: nothing to resume, so the run starts again.
      if (attempts > 0)
        args.push_back(fs::exists(ablate::checkpoint_path(out)) ? "--resume" : "--overwrite");
      INFO("scenario " << k << " attempt " << attempts << ": " << (fault.empty() ? kind : fault));
      Exit e;
      if (kind == "timed") {
        pid_t pid = spawn_run(args, "", log);
        int64_t ms = uniform(20, std::max<int64_t>(40, static_cast<int64_t>(full_seconds * 900)));
        std::this_thread::sleep_for(std::chrono::milliseconds(ms));
        ::kill(pid, SIGKILL);  // the process may have finished already: then it exited 0
        e = wait_for(pid);
      } else {
        e = run(args, fault, log);
      }
      if (e.killed) {
        check_killed_run(out, want, flushed);
        const std::string tmp = ablate::checkpoint_path(out) + ".tmp";
        if (fault.rfind("checkpoint.partial", 0) == 0) {
          // The half-written file is there, and reading it says what is wrong.
          CHECK(fs::exists(tmp));
          std::string msg;
          try {
            ablate::read_checkpoint(tmp);
          } catch (const ablate::Error& err) {
            msg = err.what();
          }
          CHECK(msg.find("truncated") != std::string::npos);
        }
      } else {
        REQUIRE_MESSAGE(e.code == 0, ablate::test::read_file(log));
        done = true;
      }
      // Half of the resumes are killed again, the same way (at most three kills in all).
      kind = attempts < 2 && uniform(0, 1) == 0 ? kinds[k] : "none";
    }
    INFO("scenario " << k << " (" << kinds[k] << "), " << attempts << " attempts");
    check_same_run(dir / "full", out);
  }
}

TEST_CASE(
    "reliability/resume refuses a changed config unless --allow-config-change, naming the keys") {
  ablate::test::TempDir dir;
  const std::string cfg = dir.write("resume.yaml", kConfig);
  const std::string log = dir / "log.txt";
  const std::string out = dir / "run";
  REQUIRE(run({cfg, "-o", out, "-q"}, "step:30", log).killed);
  auto r = ablate::test::run_command(
      "ABLATE_DATA_PATH=" ABLATE_TEST_DATA_DIR " " + ablate::test::ablate_binary() + " run " + cfg +
      " -o " + out + " -q --resume model.dropout=0.2 optimizer.weight_decay=0.2 train.log_every=3");
  CHECK(r.status == 1);
  CHECK_MESSAGE(
      r.output.find("cannot resume: the config differs from the checkpoint's") != std::string::npos,
      r.output);
  CHECK(r.output.find("model.dropout: 0.1 -> 0.2") != std::string::npos);
  CHECK(r.output.find("optimizer.weight_decay: 0.1 -> 0.2") != std::string::npos);
  CHECK(r.output.find("train.log_every") ==
        std::string::npos);  // bookkeeping: not a reason to refuse
  CHECK(r.output.find("--allow-config-change") != std::string::npos);
  // Refusing left the run as it was: it still resumes to the uninterrupted result.
  REQUIRE_MESSAGE(run({cfg, "-o", dir / "full", "-q"}, "", log).code == 0,
                  ablate::test::read_file(log));
  ablate::test::TempDir copy;
  fs::copy(out, copy.path / "run", fs::copy_options::recursive);
  REQUIRE(run({cfg, "-o", out, "-q", "--resume"}, "", log).code == 0);
  check_same_run(dir / "full", out);
  // With the flag the changed run goes ahead from the checkpoint.
  r = ablate::test::run_command(
      "ABLATE_DATA_PATH=" ABLATE_TEST_DATA_DIR " " + ablate::test::ablate_binary() + " run " + cfg +
      " -o " + (copy / "run") + " -q --resume --allow-config-change train.steps=40");
  CHECK_MESSAGE(r.status == 0, r.output);
  auto d = ablate::read_run_file(ablate::run_file_path(copy / "run"));
  CHECK(d.str_attrs.at("status") == "done");
  CHECK(d.tables.at("eval").at("step").back() == 40);
}

TEST_CASE(
    "reliability/resume refuses training data whose contents changed (data_sha256) unless "
    "--allow-config-change") {
  ablate::test::TempDir dir;
  const std::string text =
      ablate::test::read_file(std::string(ABLATE_TEST_DATA_DIR) + "/shakespeare_16k.txt");
  const std::string data = dir.write("own.txt", text);
  std::string yaml = kConfig;
  yaml.replace(yaml.find("shakespeare_16k.txt"), 19, data);
  const std::string cfg = dir.write("resume.yaml", yaml);
  const std::string log = dir / "log.txt", out = dir / "run";
  REQUIRE(run({cfg, "-o", out, "-q"}, "step:30", log).killed);
  // The same name, other contents (here one character of the file changed).
  std::string edited = text;
  edited[100] = edited[100] == 'x' ? 'y' : 'x';
  dir.write("own.txt", edited);
  const std::string before =
      ablate::read_run_file(ablate::run_file_path(out)).str_attrs.at("data_sha256");
  auto r = ablate::test::run_command(ablate::test::ablate_binary() + " run " + cfg + " -o " + out +
                                     " -q --resume");
  CHECK(r.status == 1);
  CHECK_MESSAGE(r.output.find("cannot resume: the training data changed since the checkpoint: " +
                              data) != std::string::npos,
                r.output);
  CHECK(r.output.find("had sha256 " + before) != std::string::npos);
  CHECK(r.output.find("--allow-config-change") != std::string::npos);
  // Restoring the file lets the run go on; the flag lets it go on with the new contents,
  // recorded as a new segment and in data_sha256.
  ablate::test::TempDir copy;
  fs::copy(out, copy.path / "run", fs::copy_options::recursive);
  dir.write("own.txt", text);
  r = ablate::test::run_command(ablate::test::ablate_binary() + " run " + cfg + " -o " + out +
                                " -q --resume");
  CHECK_MESSAGE(r.status == 0, r.output);
  dir.write("own.txt", edited);
  r = ablate::test::run_command(ablate::test::ablate_binary() + " run " + cfg + " -o " +
                                (copy / "run") + " -q --resume --allow-config-change");
  CHECK_MESSAGE(r.status == 0, r.output);
  auto d = ablate::read_run_file(ablate::run_file_path(copy / "run"));
  CHECK(d.str_attrs.at("status") == "done");
  CHECK(d.str_attrs.at("data_sha256") != before);
  CHECK(d.tables.at("segments").at("start_step").size() == 2);
}

// Options that only say how a run is logged or kept (ablate::bookkeeping_option) may change
// on resume: the run goes on without --allow-config-change and computes what it would have.
TEST_CASE(
    "reliability/resume accepts changed log_every, checkpoint_every and keep_checkpoints and "
    "trains the same") {
  ablate::test::TempDir dir;
  const std::string cfg = dir.write("resume.yaml", kConfig);
  const std::string log = dir / "log.txt";
  const std::string out = dir / "run";
  REQUIRE_MESSAGE(run({cfg, "-o", dir / "full", "-q"}, "", log).code == 0,
                  ablate::test::read_file(log));
  REQUIRE(run({cfg, "-o", out, "-q"}, "step:30", log).killed);
  const auto r = ablate::test::run_command(
      "ABLATE_DATA_PATH=" ABLATE_TEST_DATA_DIR " " + ablate::test::ablate_binary() + " run " + cfg +
      " -o " + out +
      " -q --resume train.log_every=3 train.checkpoint_every=8 'train.keep_checkpoints=[40]'");
  REQUIRE_MESSAGE(r.status == 0, r.output);
  CHECK(fs::exists(fs::path(out) / "checkpoints" / "step-40.ckpt"));  // the new option took effect
  const auto want = ablate::read_run_file(ablate::run_file_path(dir / "full"));
  const auto got = ablate::read_run_file(ablate::run_file_path(out));
  CHECK(got.str_attrs.at("status") == "done");
  CHECK(same_bits(want.tables.at("eval").at("val_loss"), got.tables.at("eval").at("val_loss")));
  CHECK(want.texts.at("samples/final") == got.texts.at("samples/final"));
  const auto a = ablate::read_checkpoint(ablate::checkpoint_path(dir / "full"));
  const auto b = ablate::read_checkpoint(ablate::checkpoint_path(out));
  REQUIRE(a.tensors.size() == b.tensors.size());
  for (const auto& tensor : a.tensors) {
    const std::string& name = tensor.first;
    const auto& v = tensor.second;
    INFO("tensor " << name);
    REQUIRE(b.tensors.count(name));
    CHECK(same_bits(v, b.tensors.at(name)));
  }
}

TEST_CASE(
    "reliability/a NaN loss stops the run, names the step and parameters, marks the run failed") {
  ablate::test::TempDir dir;
  const std::string cfg = dir.write("resume.yaml", kConfig);
  // Plain SGD at lr 100 without clipping overflows within a few steps on this data.
  auto r = ablate::test::run_command(
      "ABLATE_DATA_PATH=" ABLATE_TEST_DATA_DIR " " + ablate::test::ablate_binary() + " run " + cfg +
      " -o " + (dir / "run") +
      " -q optimizer.type=sgd optimizer.lr=100 optimizer.weight_decay=0 train.grad_clip=0");
  INFO(r.output);
  CHECK(r.status == 1);
  CHECK(r.output.find("error: step ") != std::string::npos);
  CHECK(r.output.find("is not finite") != std::string::npos);
  // Whichever overflows first (it differs between builds), the message names a
  // parameter: the first with non-finite values or gradient, or the largest value's.
  CHECK((r.output.find("first parameter with non-finite values: '") != std::string::npos ||
         r.output.find("first parameter with a non-finite gradient: '") != std::string::npos ||
         r.output.find("largest parameter value: ") != std::string::npos));
  CHECK(r.output.find("Lower the learning rate") != std::string::npos);
  auto d = ablate::read_run_file(ablate::run_file_path(dir / "run"));
  CHECK(d.str_attrs.at("status") == "failed");
  const std::string& err = d.str_attrs.at("error");
  CHECK(err.rfind("step ", 0) == 0);
  CHECK(r.output.find(err) != std::string::npos);  // the same message in both places
  CHECK(!d.str_attrs.at("finished").empty());
  // The step named is the first one without a train row of its own.
  const int64_t bad_step = std::stoll(err.substr(5));
  CHECK(bad_step > 1);
  if (d.tables.count("train"))  // none if it failed before the first logged step
    CHECK(d.tables.at("train").at("step").back() < bad_step);
}

TEST_CASE("reliability/auxiliary-loss columns resume bitwise from a checkpoint inside a row") {
  // A mixture of experts logs aux_moe_balance and aux_moe_max_load; the kill at step 30 leaves
  // the checkpoint of step 28, inside the row of steps 26-30, whose partial sums it carries.
  ablate::test::TempDir dir;
  const std::string cfg = dir.write("resume.yaml", kConfig);
  const std::string log = dir / "log.txt", moe = "model.ffn={type: moe, experts: 4, top_k: 2}";
  REQUIRE_MESSAGE(run({cfg, "-o", dir / "full", "-q", moe}, "", log).code == 0,
                  ablate::test::read_file(log));
  const auto full = ablate::read_run_file(ablate::run_file_path(dir / "full"));
  REQUIRE(full.tables.at("train").count("aux_moe_balance"));
  REQUIRE(run({cfg, "-o", dir / "run", "-q", moe}, "step:30", log).killed);
  REQUIRE_MESSAGE(run({cfg, "-o", dir / "run", "-q", "--resume", moe}, "", log).code == 0,
                  ablate::test::read_file(log));
  check_same_run(dir / "full", dir / "run");
}

TEST_CASE("reliability/a whole training run is bitwise the same on 1 and 2 threads") {
  ablate::test::registry();
  setenv("ABLATE_DATA_PATH", ABLATE_TEST_DATA_DIR, 1);
  ablate::test::TempDir dir;
  const std::string cfg = dir.write("resume.yaml", kConfig);
  for (int threads : {1, 2}) {
    ablate::RunOptions ro;
    ro.out_dir = dir / ("t" + std::to_string(threads));
    ro.quiet = true;
    ro.threads = threads;
    // Larger batches and a wider model, so that the parallel loops really split.
    ablate::run_experiment(
        ablate::Experiment::load(cfg, {"train.steps=12", "train.batch_size=16", "model.d_model=64",
                                       "train.checkpoint_every=100", "sample.tokens=20"}),
        ro);
  }
  auto a = ablate::read_run_file(ablate::run_file_path(dir / "t1"));
  auto b = ablate::read_run_file(ablate::run_file_path(dir / "t2"));
  CHECK(a.num_attrs.at("threads") == 1);
  CHECK(b.num_attrs.at("threads") == 2);
  check_same_run(dir / "t1", dir / "t2");
}

namespace {

// Waits (up to 120 s) until pred() holds; false on timeout.
template <class Pred>
bool wait_until(Pred pred) {
  for (int i = 0; i < 2400; ++i) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

ablate::test::CommandResult ablate_run(const std::string& args) {
  return ablate::test::run_command("ABLATE_DATA_PATH=" ABLATE_TEST_DATA_DIR " " +
                                   ablate::test::ablate_binary() + " run " + args);
}

// The run has trained (its log shows the evaluation before training is over).
bool training(const std::string& dir) {
  return contains(ablate::test::read_file(dir + "/run.log"), "eval step 0:");
}

}  // namespace

TEST_CASE("reliability/a run directory is never overwritten silently") {
  ablate::test::TempDir dir;
  const std::string cfg = dir.write("resume.yaml", kConfig);
  const std::string out = dir / "run";
  auto r = ablate_run(cfg + " -q -o " + out + " train.steps=8");
  REQUIRE_MESSAGE(r.status == 0, r.output);
  const auto before = ablate::read_run_file(ablate::run_file_path(out));
  // Starting again over it is refused, naming the three ways on; nothing changes.
  r = ablate_run(cfg + " -q -o " + out + " train.steps=8");
  CHECK(r.status == 1);
  INFO(r.output);
  CHECK(contains(r.output, out + " already holds a run (status done, checkpoint at step 8)"));
  for (const char* flag : {"--resume", "--overwrite", "--fork NEW_DIR"})
    CHECK(contains(r.output, flag));
  auto after = ablate::read_run_file(ablate::run_file_path(out));
  CHECK(after.str_attrs == before.str_attrs);
  check_tables(before, after);
  // Resuming a finished run: nothing to resume (not a "done" run with zero losses).
  r = ablate_run(out + " -q --resume");
  CHECK(r.status == 1);
  CHECK(contains(r.output,
                 "is a finished run (status done, step 8): nothing to resume. --extend-to N"));
  // --overwrite starts afresh: the old sample goes too.
  std::ofstream(out + "/sample.txt") << "stale";
  r = ablate_run(cfg + " -q -o " + out + " --overwrite train.steps=4 sample.tokens=0");
  CHECK_MESSAGE(r.status == 0, r.output);
  CHECK(!fs::exists(out + "/sample.txt"));
  CHECK(ablate::read_run_file(ablate::run_file_path(out)).tables.at("train").at("step").back() ==
        4);
  // Nothing to resume: an empty directory, and a run killed before its first checkpoint.
  fs::create_directories(dir / "empty");
  r = ablate_run(cfg + " -q --resume -o " + (dir / "empty"));
  CHECK(r.status == 1);
  CHECK(contains(r.output, "nothing to resume: no run here (no checkpoint.ckpt)"));
  REQUIRE(run({cfg, "-o", dir / "early", "-q"}, "step:3", dir / "log.txt").killed);
  r = ablate_run(cfg + " -q --resume -o " + (dir / "early"));
  CHECK(r.status == 1);
  CHECK(contains(
      r.output, "nothing to resume: the run stopped before its first checkpoint (status running)"));
  CHECK(contains(r.output, "--overwrite"));
  // A checkpoint without its run file: its metrics are gone.
  fs::remove(ablate::run_file_path(out));
  r = ablate_run(cfg + " -q --resume -o " + out);
  CHECK(r.status == 1);
  CHECK(contains(r.output, "has a checkpoint but no run.h5"));
}

TEST_CASE(
    "reliability/SIGINT and SIGTERM finish the step, checkpoint, and resume from the directory "
    "bitwise") {
  ablate::test::TempDir dir;
  const std::string cfg = dir.write("resume.yaml", kConfig);
  const std::string log = dir / "log.txt";
  REQUIRE(run({cfg, "-o", dir / "full", "-q"}, "", log).code == 0);
  int k = 0;
  for (int sig : {SIGINT, SIGTERM}) {
    const std::string out = dir / ("s" + std::to_string(k++)), out_log = out + ".log";
    // 50 ms a step (fault.hpp): the signal lands mid-run however fast the machine.
    pid_t pid = spawn_run({cfg, "-o", out, "-q"}, "step:50ms", out_log);
    REQUIRE(wait_until([&] { return training(out); }));
    ::kill(pid, sig);
    Exit e = wait_for(pid);
    const std::string said = ablate::test::read_file(out_log);
    INFO(said);
    REQUIRE(e.code == 128 + sig);
    auto d = ablate::read_run_file(ablate::run_file_path(out));
    CHECK(d.str_attrs.at("status") == "interrupted");
    CHECK(contains(d.str_attrs.at("error"), sig == SIGINT ? "stopped by SIGINT after step "
                                                          : "stopped by SIGTERM after step "));
    const int64_t at =
        static_cast<int64_t>(ablate::read_checkpoint(ablate::checkpoint_path(out)).ints["step"]);
    CHECK(contains(d.str_attrs.at("error"),
                   "after step " + std::to_string(at)));  // the checkpoint is of the last step
    CHECK(contains(said, "Continue with:\n  ablate run " + out + " --resume"));
    CHECK(contains(ablate::test::read_file(out + "/run.log"), "interrupted by"));
    // The first process's CPU time and the part of it spent evaluating (step 0's evaluation
    // at least), recorded; made large here so that the sums are visible.
    CHECK(d.num_attrs.at("cpu_seconds") > 0);
    CHECK(d.num_attrs.at("eval_cpu_seconds") > 0);
    CHECK(d.num_attrs.at("eval_cpu_seconds") < d.num_attrs.at("cpu_seconds"));
    const double cpu_before = 1000, eval_cpu_before = 500;
    {
      auto rf = ablate::RunFile::open_append(ablate::run_file_path(out));
      rf.set_attr("cpu_seconds", cpu_before);
      rf.set_attr("eval_cpu_seconds", eval_cpu_before);
    }
    // Resumed from the directory alone (SIGINT), or from the config file it holds (SIGTERM).
    const std::string target = sig == SIGINT ? out : out + "/config.yaml";
    auto r = ablate::test::run_command(
        "cd " + dir.path.string() + " && ABLATE_DATA_PATH=" ABLATE_TEST_DATA_DIR " " +
        ablate::test::ablate_binary() + " run " + target + " -q --resume");
    REQUIRE_MESSAGE(r.status == 0, r.output);
    check_same_run(dir / "full", out);
    // The CPU time adds up over the two processes, and so does its evaluating part (the
    // second process evaluated at least at step 60), which stays below the whole.
    const auto attrs = ablate::read_run_file(ablate::run_file_path(out)).num_attrs;
    const double cpu_after = attrs.at("cpu_seconds"), eval_cpu_after = attrs.at("eval_cpu_seconds");
    CHECK(cpu_after > cpu_before);
    CHECK(cpu_after < cpu_before + 600);
    CHECK(eval_cpu_after > eval_cpu_before);
    CHECK(eval_cpu_after < eval_cpu_before + (cpu_after - cpu_before));
  }
}

TEST_CASE("reliability/a second Ctrl-C exits at once") {
  ablate::test::TempDir dir;
  const std::string cfg = dir.write("resume.yaml", kConfig);
  const std::string out = dir / "run", log = dir / "log.txt";
  // Slow steps (about a second each on 2 cores), so that both signals land in one step.
  pid_t pid = spawn_run(
      {cfg, "-o", out, "-q", "train.batch_size=512", "model.d_model=64", "train.eval_batches=1"},
      "", log);
  REQUIRE(wait_until([&] { return training(out); }));
  ::kill(pid, SIGINT);
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  ::kill(pid, SIGINT);
  Exit e = wait_for(pid);
  const std::string said = ablate::test::read_file(log);
  INFO(said);
  CHECK(e.code == 130);
  CHECK(contains(
      said,
      "interrupt: finishing this step and writing a checkpoint (interrupt again to exit at once)"));
  CHECK(contains(said, "second interrupt: exiting now"));
  // It left at once: no checkpoint of an unfinished step, the run still marked running.
  CHECK(ablate::read_run_file(ablate::run_file_path(out)).str_attrs.at("status") == "running");
}

TEST_CASE(
    "reliability/SIGHUP (a closed terminal) stops a run with a checkpoint, unless it is ignored "
    "(nohup)") {
  ablate::test::TempDir dir;
  const std::string cfg = dir.write("resume.yaml", kConfig);
  const std::string out = dir / "run", log = dir / "log.txt";
  pid_t pid = spawn_run({cfg, "-o", out, "-q"}, "step:50ms", log);
  REQUIRE(wait_until([&] { return training(out); }));
  ::kill(pid, SIGHUP);
  Exit e = wait_for(pid);
  INFO(ablate::test::read_file(log));
  CHECK(e.code == 128 + SIGHUP);
  auto d = ablate::read_run_file(ablate::run_file_path(out));
  CHECK(d.str_attrs.at("status") == "interrupted");
  CHECK(contains(d.str_attrs.at("error"), "stopped by SIGHUP after step "));

  // Started with SIGHUP ignored, as nohup starts it: it stays ignored, the run goes on.
  const std::string out2 = dir / "nohup";
  struct sigaction ignore {
  }, old{};
  ignore.sa_handler = SIG_IGN;
  sigaction(SIGHUP, &ignore, &old);
  pid = spawn_run({cfg, "-o", out2, "-q"}, "step:50ms", log);
  sigaction(SIGHUP, &old, nullptr);
  REQUIRE(wait_until([&] { return training(out2); }));
  ::kill(pid, SIGHUP);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  int status = 0;
  CHECK(::waitpid(pid, &status, WNOHANG) == 0);  // still running
  ::kill(pid, SIGINT);
  e = wait_for(pid);
  CHECK(e.code == 130);
  CHECK(contains(ablate::read_run_file(ablate::run_file_path(out2)).str_attrs.at("error"),
                 "stopped by SIGINT after step "));
}

TEST_CASE("reliability/--fork and init_from start a new run from another run's weights") {
  ablate::test::TempDir dir;
  const std::string cfg = dir.write("resume.yaml", kConfig);
  const std::string src = dir / "src";
  auto r = ablate_run(cfg + " -q -o " + src + " train.steps=8");
  REQUIRE_MESSAGE(r.status == 0, r.output);
  const auto source = ablate::read_run_file(ablate::run_file_path(src));
  const double last_val = source.tables.at("eval").at("val_loss").back();
  // From the directory with --fork, and from a config with init_from: (as an override).
  const std::vector<std::pair<std::string, std::string>> ways = {
      {dir / "fork", src + " -q --fork " + (dir / "fork") + " train.steps=4"},
      {dir / "init", cfg + " -q -o " + (dir / "init") + " init_from=" + src + " train.steps=4"}};
  for (const auto& way : ways) {
    const auto& out = way.first;
    const std::string& args = way.second;
    r = ablate_run(args);
    INFO(args << "\n" << r.output);
    REQUIRE(r.status == 0);
    auto d = ablate::read_run_file(ablate::run_file_path(out));
    CHECK(d.str_attrs.at("init_from") ==
          fs::weakly_canonical(ablate::checkpoint_path(src)).string());
    CHECK(d.num_attrs.at("init_from_step") == 8);
    // Step 0 evaluates the source's weights on the same batches: its last evaluation, bitwise.
    const auto& ev = d.tables.at("eval");
    CHECK(ev.at("step").front() == 0);
    CHECK(ev.at("val_loss").front() == last_val);
    CHECK(d.tables.at("train").at("step").back() == 4);
  }
  // The source is left alone; a source without a checkpoint is refused.
  CHECK(ablate::read_run_file(ablate::run_file_path(src)).tables.at("eval").at("step") ==
        source.tables.at("eval").at("step"));
  r = ablate_run(cfg + " -q -o " + (dir / "x") + " init_from=" + (dir / "nowhere"));
  CHECK(r.status == 1);
  CHECK(contains(r.output, "init_from: " + (dir / "nowhere") + ": no checkpoint there"));
  // A fork into another model: the missing parameter and the model options that differ.
  r = ablate_run(src + " -q --fork " + (dir / "swiglu") + " model.ffn=swiglu model.n_layers=3");
  CHECK(r.status == 1);
  INFO(r.output);
  CHECK(contains(r.output, "checkpoint has no parameter 'blocks.0.ffn."));
  CHECK(contains(r.output,
                 "so the model must have the same parameters as that run; these model options "
                 "differ from it:"));
  CHECK(contains(r.output, "model.n_layers: 2 -> 3"));
  CHECK(contains(r.output, "model.ffn"));
}

TEST_CASE("reliability/h5py reads run.h5 while the run writes it, run.log is kept with -q") {
  if (ablate::test::run_command("/usr/bin/python3 -c 'import h5py'").status != 0) {
    MESSAGE("skipped: /usr/bin/python3 cannot import h5py (apt install python3-h5py)");
    return;
  }
  ablate::test::TempDir dir;
  const std::string cfg = dir.write("resume.yaml", kConfig);
  const std::string out = dir / "run";
  // 10 ms a step (fault.hpp): the run lasts at least 2.4 s however fast the machine, time for
  // the reader to start (python and h5py's import) and read it several times.
  pid_t pid = spawn_run(
      {cfg, "-o", out, "-q", "train.steps=240", "train.eval_every=40", "train.checkpoint_every=40"},
      "step:10ms", dir / "log.txt");
  REQUIRE(wait_until([&] { return training(out); }));
  // Polls until the run is no longer running; no HDF5_USE_FILE_LOCKING in its environment.
  const char* script = R"(import sys, time, h5py
path, ok, rows, lock, errors = sys.argv[1], 0, [], 0, []
end = time.time() + 300
while time.time() < end:
    try:
        with h5py.File(path, 'r') as f:
            status = f.attrs['status']
            status = status.decode() if isinstance(status, bytes) else status
            n = len(f['metrics/train/step']) if 'metrics/train/step' in f else 0
        if status != 'running':
            break
        ok += 1
        rows.append(n)
    except Exception as e:
        lock += 'lock' in str(e)
        errors.append(str(e)[:120])
    time.sleep(0.1)
print('reads', ok, 'first', rows[0] if rows else -1, 'last', rows[-1] if rows else -1, 'lock', lock, 'errors', len(errors))
print('\n'.join(errors[:3])))";
  auto r = ablate::test::run_command("env -u HDF5_USE_FILE_LOCKING /usr/bin/python3 " +
                                     dir.write("poll.py", script) + " " + out + "/run.h5");
  Exit e = wait_for(pid);
  INFO(r.output);
  CHECK(e.code == 0);
  REQUIRE(r.status == 0);
  std::istringstream in(r.output);
  std::string w;
  int64_t reads = 0, first = 0, last = 0, lock = 0, errors = 0;
  in >> w >> reads >> w >> first >> w >> last >> w >> lock >> w >> errors;
  MESSAGE("h5py during the run: " << reads << " reads, train rows " << first << " -> " << last
                                  << ", " << errors << " errors");
  CHECK(lock == 0);
  CHECK(reads >= 3);
  CHECK(last > first);  // the rows grow as the run goes
  const std::string run_log = ablate::test::read_file(out + "/run.log");
  CHECK(contains(run_log, "eval step 240:"));
  CHECK(contains(run_log, "done: " + out));
}

#if !ABLATE_ASAN
TEST_CASE("reliability/the memory estimate is within 10% of the run's peak RSS, float32 and bf16") {
  ablate::test::TempDir dir;
  const std::string cfg = dir.write("resume.yaml", kConfig);
  // Many sequences of a small model (activations dominate), two long sequences of a wider one
  // (the estimate's own step of two sequences is as large as the run's), one (the estimate
  // measures no step larger than the run's), and one short sequence of a model whose 12.6M
  // parameters dominate (the optimizer state counted once; the checkpoint written without a
  // copy of them).
  const std::vector<std::vector<std::string>> shapes = {
      {"train.batch_size=400"},
      {"train.batch_size=2", "model.d_model=128", "model.context=512"},
      {"train.batch_size=1", "model.d_model=128", "model.context=1024"},
      {"train.batch_size=1", "model.d_model=512", "model.n_layers=4", "model.n_heads=8"}};
  for (size_t shape = 0; shape < shapes.size(); ++shape)
    for (const std::string precision : {"float32", "bf16"}) {
      CAPTURE(shape);
      CAPTURE(precision);
      std::vector<std::string> over = {"train.steps=2", "train.threads=1", "sample.tokens=0",
                                       "train.precision=" + precision};
      over.insert(over.end(), shapes[shape].begin(), shapes[shape].end());
      std::string dry_args = cfg + " --dry-run";
      for (const std::string& o : over) dry_args += " " + o;
      const auto dry = ablate_run(dry_args);
      INFO(dry.output);
      REQUIRE(dry.status == 0);
      const size_t at = dry.output.find("peak memory");
      REQUIRE(at != std::string::npos);
      std::istringstream in(dry.output.substr(at + 11));
      double estimate = 0;
      std::string unit;
      in >> estimate >> unit;
      REQUIRE(unit == "MB");
      estimate *= 1e6;
      const std::string name = precision + std::to_string(shape);
      std::vector<std::string> args = {cfg, "-q", "-o", dir / ("run_" + name)};
      args.insert(args.end(), over.begin(), over.end());
      const Exit e = run(args, "", dir / ("log_" + name));
      INFO(ablate::test::read_file(dir / ("log_" + name)));
      REQUIRE(e.code == 0);
      const double peak = static_cast<double>(e.max_rss_kib) * 1024.0;
      CAPTURE(estimate);
      CAPTURE(peak);
      // Linux carries ru_maxrss over fork and exec: the child's reading is the larger of its own
      // peak and this process's peak when it forked. ctest runs this test in a process of its own
      // (about 25 MB); among many tests in one process the reading may be that process's.
      rusage self{};
      ::getrusage(RUSAGE_SELF, &self);
      const double self_peak = static_cast<double>(self.ru_maxrss) * 1024.0;
      CAPTURE(self_peak);
      if (peak <= self_peak) {
        MESSAGE("the run's peak RSS reading is this test process's own peak ("
                << self_peak / 1e6
                << " MB): run the test alone (ctest does) to check the estimate");
        continue;
      }
      CHECK(std::fabs(estimate - peak) <= 0.10 * peak);
    }
}
#endif

TEST_CASE(
    "reliability/--dry-run and the memory estimate: a run that cannot fit fails before training") {
  ablate::test::TempDir dir;
  const std::string cfg = dir.write("resume.yaml", kConfig);
  auto r = ablate_run(cfg + " --dry-run -o " + (dir / "dry"));
  INFO(r.output);
  CHECK(r.status == 0);
  for (const char* part : {"parameters      29696", "FLOPs per step", "peak memory", "activations",
                           "8 sequences x", "available"})
    CHECK(contains(r.output, part));
  CHECK(!fs::exists(dir / "dry"));  // nothing written
  // A million sequences per micro-batch: hundreds of GB of activations.
  r = ablate_run(cfg + " -q -o " + (dir / "big") + " train.batch_size=1000000");
  CHECK(r.status == 1);
  for (const char* part :
       {"error: estimated peak memory", "activations", "1000000 sequences x", "is available (",
        "Lower train.batch_size", "train.grad_accum=", "model.context", "--no-memory-check"})
    CHECK(contains(r.output, part));
  CHECK(!fs::exists(ablate::run_file_path(dir / "big")));  // before training: no run file
  r = ablate_run(cfg + " --dry-run train.batch_size=1000000");
  CHECK(r.status == 1);
  CHECK(contains(r.output, "error: estimated peak memory"));
#if !ABLATE_ASAN
  // Past the check (--no-memory-check) under an address-space limit: a clear error, not
  // "internal error: std::bad_alloc".
  r = ablate::test::run_command("ulimit -v 3000000 && ABLATE_DATA_PATH=" ABLATE_TEST_DATA_DIR " " +
                                ablate::test::ablate_binary() + " run " + cfg +
                                " -q --no-memory-check -o " + (dir / "oom") +
                                " train.batch_size=20000");
  INFO(r.output);
  CHECK(r.status == 1);
  CHECK(contains(r.output, "error: out of memory (std::bad_alloc)"));
  CHECK(contains(r.output, "Lower train.batch_size"));
  CHECK(!contains(r.output, "internal error"));
  CHECK(ablate::read_run_file(ablate::run_file_path(dir / "oom")).str_attrs.at("status") ==
        "failed");
#endif
}

TEST_CASE("reliability/default threads leave out the cores other ablate runs claim") {
  ablate::test::TempDir dir;
  const std::string cfg = dir.write("resume.yaml", kConfig);
  const std::string claims = dir / "claims";
  const std::string env = "ABLATE_RUNTIME_DIR=" + claims;
  auto threads_of = [&](const std::string& out) {
    auto r = ablate::test::run_command(env + " ABLATE_DATA_PATH=" ABLATE_TEST_DATA_DIR " " +
                                       ablate::test::ablate_binary() + " run " + cfg + " -q -o " +
                                       out + " train.threads=0 train.steps=2 sample.tokens=0");
    INFO(r.output);
    REQUIRE(r.status == 0);
    return static_cast<int64_t>(
        ablate::read_run_file(ablate::run_file_path(out)).num_attrs.at("threads"));
  };
  const int64_t cores = ablate::usable_cores();
  pid_t busy = spawn_run({cfg, "-o", dir / "busy", "-q", "-j", "2", "train.steps=100000"}, "",
                         dir / "log.txt", {env});
  REQUIRE(wait_until([&] { return training(dir / "busy"); }));
  CHECK(threads_of(dir / "a") == std::max<int64_t>(1, cores - 2));
  // A sweep shares out the same rest between its points.
  dir.write("sw.yaml",
            "base: resume.yaml\noverrides: {train.steps: 2, sample.tokens: 0}\nsweep: {variants: "
            "{a: {}}, seeds: 1}\n");
  auto sw = ablate::test::run_command(
      env + " ABLATE_DATA_PATH=" ABLATE_TEST_DATA_DIR " " + ablate::test::ablate_binary() +
      " sweep " + (dir / "sw.yaml") + " --dir " + (dir / "sw") + " --jobs 1 -q");
  INFO(sw.output);
  REQUIRE(sw.status == 0);
  const int64_t rest = std::max<int64_t>(1, cores - 2);
  CHECK(contains(
      ablate::test::read_file(dir / "sw/sweep.log"),
      "1 at a time with " + std::to_string(rest) + " thread" + (rest == 1 ? "" : "s") + " each"));
  ::kill(busy, SIGTERM);
  CHECK(wait_for(busy).code == 128 + SIGTERM);
  // A claim whose process is gone (no lock held on it) does not count, and is removed.
  std::ofstream(claims + "/999999") << "8\n";
  CHECK(threads_of(dir / "b") == cores);
  CHECK(!fs::exists(claims + "/999999"));
  // -j still wins.
  auto r = ablate::test::run_command(
      env + " ABLATE_DATA_PATH=" ABLATE_TEST_DATA_DIR " " + ablate::test::ablate_binary() +
      " run " + cfg + " -q -j 3 -o " + (dir / "c") + " train.steps=2 sample.tokens=0");
  REQUIRE(r.status == 0);
  CHECK(ablate::read_run_file(ablate::run_file_path(dir / "c")).num_attrs.at("threads") == 3);
}

TEST_CASE(
    "reliability/a run's lock outlives its process's main thread: status says alive, a new writer "
    "waits for it") {
  ablate::test::TempDir dir;
  const std::string run = dir / "run";
  fs::create_directories(run);
  // The state of a process killed with -9: its main thread has exited (a zombie) while another
  // thread still exits, holding the process's files and the run's lock.
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    new ablate::RunLock(run);  // never released by a destructor: by the process's end
    std::thread([] {
      std::this_thread::sleep_for(std::chrono::milliseconds(1500));
      ::_exit(0);
    }).detach();
    ::syscall(SYS_exit,
              0);  // the main thread alone, without unwinding (no destructors in the child)
  }
  auto leader_state = [&] {
    const std::string stat = ablate::test::read_file("/proc/" + std::to_string(child) + "/stat");
    const size_t paren = stat.rfind(')');
    return paren != std::string::npos && paren + 2 < stat.size() ? stat[paren + 2] : '?';
  };
  REQUIRE(wait_until([&] { return leader_state() == 'Z'; }));
  CHECK(ablate::run_lock_owner_alive(run));
  CHECK(ablate::process_alive(child));
  const auto t0 = std::chrono::steady_clock::now();
  ablate::RunLock mine(run);  // waits for the lock instead of failing
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(waited > 0.2);
  CHECK(wait_for(child).code == 0);
  CHECK(!ablate::process_alive(child));
  CHECK(ablate::run_lock_owner_alive(run));  // the lock is now this process's
  CHECK(ablate::process_alive(::getpid()));
  // A live owner is not waited for.
  std::string refused;
  try {
    ablate::RunLock again(run);
  } catch (const ablate::Error& e) {
    refused = e.what();
  }
  CHECK(contains(refused, "another ablate process (pid " + std::to_string(::getpid()) +
                              ") is writing this run"));
}
