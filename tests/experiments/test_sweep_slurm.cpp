// The Slurm launcher's parts that need no Slurm: array index lists, and the errors when
// sbatch is missing or sbatch options come without --launcher slurm. The real Slurm test
// is tests/cluster/test_slurm.cpp (ctest label cluster).
#include <doctest/doctest.h>

#include "ablate/sweep.hpp"
#include "test_util.hpp"

using ablate::test::run_command;
using ablate::test::TempDir;

namespace {

const char* kBase = R"(name: tiny
data: {path: shakespeare_16k.txt}
model: {d_model: 16, n_heads: 2, n_layers: 1, context: 16}
train: {steps: 2, batch_size: 2}
)";

std::string ablate_cmd(const TempDir& d, const std::string& args, const std::string& env = "") {
  return "cd " + d.path.string() + " && " + env + " ABLATE_DATA_PATH=" + ABLATE_TEST_DATA_DIR +
         " " + ablate::test::ablate_binary() + " " + args;
}

}  // namespace

TEST_CASE("sweep/slurm: without sbatch, --launcher slurm says what to install") {
  TempDir d;
  d.write("base.yaml", kBase);
  d.write("one.yaml", "name: one\nbase: base.yaml\nsweep: {seeds: 1}\n");
  auto r =
      run_command(ablate_cmd(d, "sweep one.yaml --launcher slurm --dir out", "PATH=/nonexistent"));
  CHECK(r.status == 1);
  CHECK_MESSAGE(r.output.find("'sbatch' is not on PATH") != std::string::npos, r.output);
  CHECK(r.output.find("slurm-client") != std::string::npos);
  auto bad = run_command(ablate_cmd(d, "sweep one.yaml --partition x --dir out"));
  CHECK(bad.status == 2);
  CHECK(bad.output.find("--partition is an sbatch option: it needs --launcher slurm") !=
        std::string::npos);
}

TEST_CASE("sweep/slurm: array index lists") {
  CHECK(ablate::array_spec({3, 0, 1, 2, 5, 7, 8}) == "0-3,5,7-8");
  CHECK(ablate::array_spec({4}) == "4");
  CHECK(ablate::parse_array_spec("0-3,5,7-8") == std::vector<int64_t>{0, 1, 2, 3, 5, 7, 8});
  CHECK(ablate::parse_array_spec("[1-7:3]%2") == std::vector<int64_t>{1, 4, 7});
  CHECK_THROWS_AS(ablate::parse_array_spec("1-x"), ablate::Error);
}
