// A run directory (RunDir): how a run starts there for each flag and each thing the directory
// holds, the same error for a bad combination of flags from the library and the CLI, a
// sweep's plan (skip, resume, keep aside, an unreadable run file), statuses on disk, marking
// a failure. Real run files and checkpoints are written and read back.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "ablate/checkpoint.hpp"
#include "ablate/error.hpp"
#include "ablate/experiment.hpp"
#include "ablate/run_dir.hpp"
#include "ablate/runfile.hpp"
#include "ablate/trainer.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using ablate::RunDir;
using ablate::RunStatus;
using ablate::StartFlags;
using ablate::StartMode;
using ablate::test::contains;
using ablate::test::error_of;
using ablate::test::TempDir;

namespace {

// A run file with `status` and train rows up to `last_step` (none when 0).
void write_run_file(const std::string& dir, RunStatus status, int64_t last_step,
                    const std::string& config = "train: {steps: 40}") {
  fs::create_directories(dir);
  ablate::RunFile rf = ablate::RunFile::create(ablate::run_file_path(dir));
  ablate::set_status(rf, status);
  rf.set_attr("config", config);
  for (int64_t s = 10; s <= last_step; s += 10)
    rf.append("train", {{"step", double(s)}, {"loss", 1.0}});
  rf.close();
}

// A checkpoint with the keys a resume reads, at `step`.
void write_run_checkpoint(const std::string& dir, int64_t step) {
  fs::create_directories(dir);
  ablate::Checkpoint ck;
  ck.ints["step"] = static_cast<uint64_t>(step);
  ck.ints["rng/data"] = 1;
  ck.texts["config"] = "train: {steps: 40}";
  ck.texts["tokenizer"] = "";
  ablate::write_checkpoint(ablate::checkpoint_path(dir), ck);
}

StartFlags flags(bool resume, bool overwrite, int64_t extend_to = 0) {
  StartFlags f;
  f.resume = resume;
  f.overwrite = overwrite;
  f.extend_to = extend_to;
  return f;
}

}  // namespace

TEST_CASE("run_dir/plan: fresh in an empty directory, never over a run without a flag") {
  TempDir d;
  const RunDir empty(d / "none");
  CHECK(empty.plan({}).mode == StartMode::fresh);
  CHECK(empty.plan(flags(false, true)).mode == StartMode::overwrite);  // nothing to delete

  const RunDir dir(d / "run");
  write_run_file(dir.path(), RunStatus::running, 20);
  write_run_checkpoint(dir.path(), 20);
  CHECK(dir.holds_run());
  CHECK(dir.describe() == "status running, checkpoint at step 20");
  const std::string err = error_of([&] { dir.plan({}); });
  CHECK_MESSAGE(
      contains(err, dir.path() + " already holds a run (status running, checkpoint at step "
                                 "20); not overwriting it. Use --resume to continue it"),
      err);
  CHECK(fs::exists(dir.run_file()));  // planning changes nothing
}

TEST_CASE("run_dir/plan: overwrite deletes the files a run writes and nothing else") {
  TempDir d;
  RunDir dir(d / "run");
  write_run_file(dir.path(), RunStatus::done, 40);
  write_run_checkpoint(dir.path(), 40);
  for (const std::string f :
       {"run.log", "sample.txt", "config.yaml", "config.resolved.yaml", "checkpoint.ckpt.tmp",
        "notes.txt", "checkpoints/step-20.ckpt", "checkpoints/other.txt"}) {
    fs::create_directories(fs::path(dir.path() + "/" + f).parent_path());
    std::ofstream(dir.path() + "/" + f) << "x";
  }
  CHECK(dir.kept_steps() == std::vector<int64_t>{20});
  const ablate::StartPlan plan = dir.plan(flags(false, true));
  REQUIRE(plan.mode == StartMode::overwrite);
  dir.remove_run();
  CHECK_FALSE(dir.holds_run());
  for (const std::string f : {"run.log", "sample.txt", "config.yaml", "config.resolved.yaml",
                              "checkpoint.ckpt.tmp", "checkpoints/step-20.ckpt"})
    CHECK_MESSAGE(!fs::exists(dir.path() + "/" + f), f);
  CHECK(fs::exists(dir.path() + "/notes.txt"));
  CHECK(fs::exists(dir.path() + "/checkpoints/other.txt"));
}

TEST_CASE("run_dir/plan: resume and extend continue from the checkpoint") {
  TempDir d;
  const RunDir dir(d / "run");
  write_run_file(dir.path(), RunStatus::interrupted, 30);
  write_run_checkpoint(dir.path(), 30);
  ablate::StartPlan plan = dir.plan(flags(true, false));
  CHECK(plan.mode == StartMode::resume);
  CHECK(plan.resumes());
  CHECK(plan.checkpoint_step == 30);
  REQUIRE(plan.previous);
  CHECK(plan.previous->str_attrs.at("status") == "interrupted");
  CHECK(dir.plan(flags(true, false, 80)).mode == StartMode::extend);

  // A finished run: nothing to resume, but it extends.
  const RunDir done(d / "done");
  write_run_file(done.path(), RunStatus::done, 40);
  write_run_checkpoint(done.path(), 40);
  const std::string err = error_of([&] { done.plan(flags(true, false)); });
  CHECK_MESSAGE(
      contains(err, done.path() + " is a finished run (status done, step 40): nothing to resume. "
                                  "--extend-to N continues it to step N"),
      err);
  plan = done.plan(flags(true, false, 80));
  CHECK(plan.mode == StartMode::extend);
  CHECK(plan.checkpoint_step == 40);
}

TEST_CASE("run_dir/plan: what cannot be resumed says why") {
  TempDir d;
  CHECK(contains(error_of([&] { RunDir(d / "none").plan(flags(true, false)); }),
                 "nothing to resume: no run here (no checkpoint.ckpt). Start a run there without "
                 "--resume"));
  const RunDir early(d / "early");
  write_run_file(early.path(), RunStatus::running, 0);
  CHECK(contains(error_of([&] { early.plan(flags(true, false)); }),
                 "nothing to resume: the run stopped before its first checkpoint (status "
                 "running). Start it again with --overwrite"));
  const RunDir no_metrics(d / "no_metrics");
  write_run_checkpoint(no_metrics.path(), 20);
  CHECK(contains(error_of([&] { no_metrics.plan(flags(true, false)); }),
                 "has a checkpoint but no run.h5 (its metrics are gone), so it cannot be resumed"));
}

TEST_CASE("run_dir/a bad combination of flags gives the same error everywhere") {
  TempDir d;
  const std::string both = "--resume and --overwrite exclude each other";
  const std::string extend = "--extend-to continues a run: it needs --resume";
  CHECK(error_of([] { flags(true, true).check(); }) == both);
  CHECK(error_of([] { flags(false, false, 50).check(); }) == extend);
  CHECK(error_of([&] { RunDir(d / "x").plan(flags(true, true)); }) == both);
  CHECK(error_of([&] { RunDir(d / "x").plan(flags(false, true, 50)); }) == extend);
  // run_experiment refuses before it builds or touches anything.
  const ablate::Experiment exp = ablate::Experiment::parse("name: x\n", d / "x.yaml", d.path);
  ablate::RunOptions ro;
  ro.out_dir = d / "x";
  ro.resume = ro.overwrite = true;
  CHECK(error_of([&] { ablate::run_experiment(exp, ro); }) == both);
  ro.resume = ro.overwrite = false;
  ro.extend_to = 50;
  CHECK(error_of([&] { ablate::run_experiment(exp, ro); }) == extend);
  CHECK_FALSE(fs::exists(d / "x"));
  // The CLI: a usage error (exit 2) with the same words (--extend-to implies --resume there).
  const std::string cfg = d.write("x.yaml", "name: x\n");
  for (const std::string args : {" --resume --overwrite", " --extend-to 50 --overwrite"}) {
    const auto r = ablate::test::run_command(ablate::test::ablate_binary() + " run " + cfg +
                                             " -o " + (d / "x") + args);
    CHECK_MESSAGE(r.status == 2, r.output);
    CHECK_MESSAGE(contains(r.output, both), r.output);
  }
}

TEST_CASE("run_dir/plan_point: a sweep's point skips, resumes, keeps aside or starts afresh") {
  TempDir d;
  // Finished with the same config: skipped; with another: an error naming the changes.
  const RunDir done(d / "done");
  write_run_file(done.path(), RunStatus::done, 40);
  write_run_checkpoint(done.path(), 40);
  CHECK(done.plan_point(done.state(), {}).mode == StartMode::skip);
  CHECK(contains(error_of([&] { done.plan_point(done.state(), {"model.d_model: 64 -> 96"}); }),
                 " holds a finished run of a different config (model.d_model: 64 -> 96)"));

  // Unfinished with a checkpoint and the same config: resumed; with another config: kept aside.
  const RunDir stopped(d / "stopped");
  write_run_file(stopped.path(), RunStatus::interrupted, 30);
  write_run_checkpoint(stopped.path(), 30);
  ablate::StartPlan plan = stopped.plan_point(stopped.state(), {});
  CHECK(plan.mode == StartMode::resume);
  CHECK(stopped.prepare_point(plan).empty());
  CHECK(plan.mode == StartMode::resume);
  plan = stopped.plan_point(stopped.state(), {"train.steps: 40 -> 80"});
  CHECK(plan.mode == StartMode::keep_aside);
  CHECK(plan.aside_suffix == ".stopped-at-30");

  // No checkpoint (trained 20 steps): kept aside, then "-2" once that suffix is taken.
  const RunDir lost(d / "lost");
  write_run_file(lost.path(), RunStatus::interrupted, 20);
  std::ofstream(lost.log()) << "log\n";
  const ablate::RunState st = lost.state();
  CHECK(st.last_step == 20);
  CHECK_FALSE(st.checkpoint);
  plan = lost.plan_point(st, {});
  REQUIRE(plan.mode == StartMode::keep_aside);
  CHECK(plan.aside_suffix == ".stopped-at-20");
  CHECK(lost.prepare_point(plan) ==
        std::vector<std::string>{"run.h5.stopped-at-20", "run.log.stopped-at-20"});
  CHECK_FALSE(fs::exists(lost.run_file()));
  CHECK(ablate::read_run_file(lost.run_file() + ".stopped-at-20").str_attrs.at("status") ==
        "interrupted");
  CHECK(lost.plan_point(st, {}).aside_suffix == ".stopped-at-20-2");

  // Nothing trained nor checkpointed: started afresh over it (nothing worth keeping).
  const RunDir early(d / "early");
  write_run_file(early.path(), RunStatus::running, 0);
  CHECK(early.plan_point(early.state(), {}).mode == StartMode::overwrite);
  CHECK(RunDir(d / "none").plan_point(RunDir(d / "none").state(), {}).mode == StartMode::overwrite);

  // A run file broken by a crash beside a checkpoint: kept as run.h5.unreadable.
  const RunDir broken(d / "broken");
  write_run_checkpoint(broken.path(), 10);
  std::ofstream(broken.run_file()) << "not hdf5";
  const ablate::RunState bs = broken.state();
  CHECK(bs.status == RunStatus::unreadable);
  plan = broken.plan_point(bs, {});
  CHECK(plan.mode == StartMode::overwrite);
  CHECK(plan.unreadable_aside);
  CHECK(broken.prepare_point(plan).empty());
  CHECK(fs::exists(broken.run_file() + ".unreadable"));
  CHECK_FALSE(fs::exists(broken.run_file()));
}

TEST_CASE("run_dir/statuses keep their names on disk, and a failure is recorded") {
  for (RunStatus s : {RunStatus::missing, RunStatus::running, RunStatus::done, RunStatus::failed,
                      RunStatus::interrupted, RunStatus::branched, RunStatus::unreadable})
    CHECK(ablate::parse_status(ablate::status_name(s)) == s);
  CHECK(std::string(ablate::status_name(RunStatus::interrupted)) == "interrupted");
  CHECK(ablate::parse_status("") == RunStatus::running);  // killed before it wrote one
  CHECK(ablate::parse_status("exploded") == RunStatus::unreadable);

  TempDir d;
  const RunDir dir(d / "run");
  CHECK(dir.state().status == RunStatus::missing);
  dir.mark_failed("x", "train: {steps: 5}", "killed by SIGKILL");
  const ablate::RunData data = ablate::read_run_file(dir.run_file());
  CHECK(data.str_attrs.at("status") == "failed");
  CHECK(data.str_attrs.at("error") == "killed by SIGKILL");
  CHECK(data.str_attrs.at("config") == "train: {steps: 5}");
  CHECK(dir.state().status == RunStatus::failed);

  // A failure that could not be written into a run file: failed.txt, until the run starts again.
  const RunDir marked(d / "marked");
  fs::create_directories(marked.path());
  std::ofstream(marked.failure_marker()) << "no space left\n";
  CHECK(marked.state().status == RunStatus::failed);
  CHECK(contains(marked.state().error, "no space left"));
  marked.clear_failure();
  CHECK(marked.state().status == RunStatus::missing);
}
