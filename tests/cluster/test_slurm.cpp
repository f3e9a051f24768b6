// Sweeps on a real Slurm: the test starts a single-node Slurm on this machine
// (tests/cluster/slurm_local.sh: munged, slurmctld, slurmd), submits a 4-point sweep as an
// array job, follows it with --status, checks the run files and `ablate compare`, submits
// again (only what is not done), sees a killed task as failed, and stops the daemons.
// Needs root and slurmctld slurmd slurm-client munge (tools/bootstrap.sh --cluster).
#include <doctest/doctest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <regex>
#include <set>
#include <thread>

#include "ablate/runfile.hpp"
#include "ablate/sweep.hpp"
#include "../test_util.hpp"

namespace fs = std::filesystem;
using ablate::test::run_command;
using ablate::test::TempDir;

namespace {

const std::string kSlurmScript = std::string(ABLATE_SOURCE_DIR) + "/tests/cluster/slurm_local.sh";
// Fixed, so that a run killed half-way (ctest's timeout) is cleaned up by the next one.
const std::string kSlurmDir = "/tmp/ablate_cluster_test_slurm";

// The daemons for the scope of a test, stopped on every way out.
struct LocalSlurm {
  bool up = false;
  std::string error;
  LocalSlurm() {
    auto r = run_command(kSlurmScript + " start " + kSlurmDir);
    up = r.status == 0;
    error = r.output;
    if (up) setenv("SLURM_CONF", (kSlurmDir + "/slurm.conf").c_str(), 1);
  }
  ~LocalSlurm() {
    run_command(kSlurmScript + " stop " + kSlurmDir);
    unsetenv("SLURM_CONF");
  }
};

using ablate::test::kTinyBase;

std::string ablate_cmd(const TempDir& d, const std::string& args, const std::string& env = "") {
  return "cd " + d.path.string() + " && " + env + " ABLATE_DATA_PATH=" + ABLATE_TEST_DATA_DIR +
         " " + ablate::test::ablate_binary() + " " + args;
}

// A shell command in d with the test data on the data path (Slurm passes the environment on).
std::string in_dir(const TempDir& d, const std::string& cmd) {
  return "cd " + d.path.string() + " && export ABLATE_DATA_PATH=" + ABLATE_TEST_DATA_DIR + " && " +
         cmd;
}

// Polls `--status` until no point is pending or running; returns the last output and every
// state seen on the way.
std::string wait_for(const TempDir& d, const std::string& sweep_args, std::set<std::string>& seen,
                     double timeout_s = 240) {
  auto t0 = std::chrono::steady_clock::now();
  std::string out;
  while (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < timeout_s) {
    auto st = run_command(ablate_cmd(d, "sweep " + sweep_args + " --status"));
    REQUIRE_MESSAGE(st.status == 0, st.output);
    out = st.output;
    for (const char* s : {" pending ", " running ", " done ", " failed ", " not started "})
      if (out.find(s) != std::string::npos) seen.insert(s);
    if (out.find(" pending ") == std::string::npos && out.find(" running ") == std::string::npos)
      return out;
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  FAIL("the sweep did not finish within " << timeout_s << " s; last status:\n" << out);
  return out;
}

}  // namespace

TEST_CASE("cluster/slurm: a 4-point sweep as an array job, status, resubmission, a failed task") {
  REQUIRE_MESSAGE(getuid() == 0,
                  "the Slurm test starts slurmctld/slurmd as SlurmUser=root: run it as root");
  LocalSlurm slurm;
  REQUIRE_MESSAGE(slurm.up,
                  "could not start a local Slurm (install slurmctld slurmd slurm-client munge: "
                  "tools/bootstrap.sh --cluster):\n"
                      << slurm.error);
  TempDir d;
  d.write("base.yaml", kTinyBase);
  d.write("sweep.yaml", R"(name: onslurm
base: base.yaml
sweep:
  variants:
    relu: {model.ffn: relu}
    gelu: {model.ffn: gelu}
  baseline: relu
  seeds: 2
)");

  auto sub = run_command(ablate_cmd(
      d, "sweep sweep.yaml --launcher slurm --dir out --cpus-per-task 1 --time 10:00 --jobs 2"));
  REQUIRE_MESSAGE(sub.status == 0, sub.output);
  std::smatch m;
  REQUIRE_MESSAGE(
      std::regex_search(sub.output, m,
                        std::regex(R"(submitted 4 as Slurm array job (\d+) \(--array=0-3\))")),
      sub.output);
  const std::string job = m[1];
  // The script stays readable in the sweep directory, and the job is recorded.
  const std::string script = ablate::test::read_file(d / "out/slurm/submit-1.sbatch");
  CHECK(script.find("#SBATCH --array=0-3%2\n") !=
        std::string::npos);  // --jobs 2: at most 2 at once
  CHECK(script.find("#SBATCH --time=10:00") != std::string::npos);
  CHECK(script.find("#SBATCH --cpus-per-task=1") != std::string::npos);
  CHECK(script.find("--point \"$SLURM_ARRAY_TASK_ID\"") != std::string::npos);
  CHECK(ablate::test::read_file(d / "out/slurm_jobs").rfind(job + " 0-3 ", 0) == 0);

  std::set<std::string> seen;
  std::string st = wait_for(d, "sweep.yaml --dir out", seen);
  INFO(st);
  CHECK(st.find("4 points: 4 done") != std::string::npos);
  CHECK((seen.count(" pending ") || seen.count(" running ")));  // Slurm's view while it ran
  ablate::Sweep s = ablate::load_sweep(d / "sweep.yaml", d / "out");
  for (const auto& p : s.points) {
    CHECK_MESSAGE(ablate::run_state(p.run_dir).status == ablate::RunStatus::done, p.run_dir);
    CHECK(fs::exists(d / ("out/logs/slurm-" + job + "_" + std::to_string(p.index) + ".log")));
    CHECK(st.find(job + "_" + std::to_string(p.index)) != std::string::npos);
  }
  auto cmp = run_command(ablate_cmd(d, "compare out --metric val_loss"));
  REQUIRE_MESSAGE(cmp.status == 0, cmp.output);
  // Both variants, each with its two seeds, compared against the baseline.
  CHECK_MESSAGE(std::regex_search(cmp.output, std::regex(R"(\nrelu +2 +\d)")), cmp.output);
  CHECK_MESSAGE(std::regex_search(cmp.output, std::regex(R"(\ngelu +2 +\d.*[+-]\d)")), cmp.output);
  CHECK(cmp.output.find("baseline relu") != std::string::npos);

  // Submitting again: nothing is left; after losing one point, only that one goes.
  auto again = run_command(ablate_cmd(d, "sweep sweep.yaml --launcher slurm --dir out"));
  REQUIRE_MESSAGE(again.status == 0, again.output);
  CHECK_MESSAGE(again.output.find("4 already done; nothing to submit") != std::string::npos,
                again.output);
  fs::remove_all(s.points[2].run_dir);
  // --points 1-2: of the two chosen, 1 is done and 2 goes.
  auto redo =
      run_command(ablate_cmd(d, "sweep sweep.yaml --launcher slurm --dir out --points 1-2"));
  REQUIRE_MESSAGE(redo.status == 0, redo.output);
  CHECK_MESSAGE(
      redo.output.find(
          "4 points (2 chosen with --points), 1 already done; submitted 1 as Slurm array job") !=
          std::string::npos,
      redo.output);
  CHECK(redo.output.find("(--array=2)") != std::string::npos);
  CHECK(fs::exists(d / "out/slurm/submit-2.sbatch"));
  st = wait_for(d, "sweep.yaml --dir out", seen);
  CHECK_MESSAGE(st.find("4 points: 4 done") != std::string::npos, st);

  // A task killed mid-run (SIGKILL at step 5, as an out-of-memory kill would): Slurm
  // reports it FAILED, and the point shows failed although its run file says running.
  d.write("one.yaml", "name: killed\nbase: base.yaml\nsweep: {seeds: 1}\n");
  auto k = run_command(
      ablate_cmd(d, "sweep one.yaml --launcher slurm --dir killed", "ABLATE_FAULT=step:5"));
  REQUIRE_MESSAGE(k.status == 0, k.output);
  std::string ks = wait_for(d, "one.yaml --dir killed", seen);
  CHECK_MESSAGE(ks.find("1 points: 1 failed") != std::string::npos, ks);
  CHECK_MESSAGE(ks.find("Slurm: FAILED") != std::string::npos, ks);
}

TEST_CASE(
    "cluster/slurm: a data-parallel run under Slurm (srun --mpi=pmix, mpirun inside sbatch)") {
  REQUIRE_MESSAGE(ABLATE_HAVE_MPI,
                  "this build has no MPI: install libopenmpi-dev openmpi-bin (tools/bootstrap.sh "
                  "--cluster) and reconfigure");
  REQUIRE(getuid() == 0);
  LocalSlurm slurm;
  REQUIRE_MESSAGE(slurm.up, slurm.error);
  TempDir d;
  d.write("dp.yaml", R"(name: dp
seed: 5
data: {path: shakespeare_16k.txt}
model: {d_model: 32, n_heads: 4, n_layers: 2, context: 32, dropout: 0.1}
train: {steps: 30, batch_size: 16, eval_every: 15, eval_batches: 3, checkpoint_every: 15, log_every: 5}
sample: {tokens: 0}
)");
  const std::string bin =
      ablate::test::ablate_binary() + " run " + (d / "dp.yaml") + " --threads 1 --quiet -o ";
  auto one = run_command(ablate_cmd(d, "run dp.yaml --threads 1 --quiet -o one"));
  REQUIRE_MESSAGE(one.status == 0, one.output);
  auto srun = run_command(in_dir(d, "timeout 300 srun --mpi=pmix -n 2 " + bin + (d / "srun")));
  REQUIRE_MESSAGE(srun.status == 0, srun.output);
  d.write("mpi.sbatch", "#!/bin/bash\n#SBATCH --ntasks=2\n#SBATCH --output=" + (d / "mpi.log") +
                            "\nmpirun --allow-run-as-root " + bin + (d / "sbatch") + "\n");
  auto sb = run_command(in_dir(d, "timeout 300 sbatch --wait " + (d / "mpi.sbatch")));
  REQUIRE_MESSAGE(sb.status == 0, sb.output << ablate::test::read_file(d / "mpi.log"));
  const auto a = ablate::read_run_file(d / "one/run.h5");
  for (const char* dir : {"srun", "sbatch"}) {
    const auto b = ablate::read_run_file(d / (std::string(dir) + "/run.h5"));
    CHECK_MESSAGE(b.num_attrs.at("ranks") == 2, dir);
    const auto& la = a.tables.at("train").at("loss");
    const auto& lb = b.tables.at("train").at("loss");
    REQUIRE(la.size() == lb.size());
    for (size_t i = 0; i < la.size(); ++i)
      CHECK_MESSAGE(std::fabs(la[i] - lb[i]) < 1e-4 * la[i], dir << " step row " << i);
  }
}
