// The block family: the shipped pre- and post-norm experiments give bitwise the metrics
// they gave before blocks were plugins (tests/data/block_reference.txt).
#include <doctest/doctest.h>

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

#include "ablate/experiment.hpp"
#include "ablate/runfile.hpp"
#include "ablate/trainer.hpp"
#include "test_util.hpp"

namespace {

// A short run of a shipped experiment, its model and data as shipped.
const std::vector<std::string> kShortRun = {"train.steps=6",     "train.eval_every=3", "train.eval_batches=1",
                                            "train.log_every=2", "train.checkpoint_every=6",
                                            "train.threads=2",   "sample.tokens=16"};

// Every metric of the run (but the time-dependent tokens_per_s) and a hash of its sample,
// as lines "<config> <table>/<column> <bits of each value in hex>".
std::vector<std::string> metric_lines(const std::string& config) {
  ablate::test::TempDir dir;
  ablate::RunOptions ro;
  ro.quiet = true;
  ro.out_dir = dir / "run";
  std::vector<std::string> ov = kShortRun;
  ablate::run_experiment(ablate::Experiment::load(std::string(ABLATE_SOURCE_DIR) + "/experiments/" + config + ".yaml", ov), ro);
  const ablate::RunData d = ablate::read_run_file(ablate::run_file_path(ro.out_dir));
  std::vector<std::string> lines;
  for (const auto& [table, columns] : d.tables)
    for (const auto& [column, values] : columns) {
      if (column == "tokens_per_s") continue;
      std::string line = config + " " + table + "/" + column;
      for (double v : values) {
        uint64_t bits;
        std::memcpy(&bits, &v, sizeof bits);
        char buf[24];
        std::snprintf(buf, sizeof buf, " %016" PRIx64, bits);
        line += buf;
      }
      lines.push_back(line);
    }
  const std::string sample = d.texts.count("samples/final") ? d.texts.at("samples/final") : "";
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : sample) h = (h ^ c) * 0x100000001b3ull;
  char buf[64];
  std::snprintf(buf, sizeof buf, " sample/fnv1a %016" PRIx64, h);
  lines.push_back(config + buf);
  return lines;
}

}  // namespace

// The reference was written by this test case with ABLATE_RECORD_BLOCK_REFERENCE=1, built
// from main at 7d143c8 (before the block family, when norm.placement chose pre or post).
TEST_CASE("block/gpt1_postnorm and the pre-norm baseline give bitwise the metrics recorded before blocks were plugins") {
  ablate::test::registry();
  const std::string ref_path = std::string(ABLATE_TEST_DATA_DIR) + "/block_reference.txt";
  std::vector<std::string> got;
  for (const char* config : {"models/gpt1_postnorm", "models/prenorm_baseline"})
    for (const std::string& l : metric_lines(config)) got.push_back(l);
  const char* record = std::getenv("ABLATE_RECORD_BLOCK_REFERENCE");
  if (record && std::string(record) == "1") {
    std::ofstream out(ref_path);
    out << "# tests/test_block.cpp: short runs (" ;
    for (const auto& o : kShortRun) out << " " << o;
    out << ") of the shipped experiments; each value's IEEE-754 bits in hex.\n";
    for (const auto& l : got) out << l << "\n";
    MESSAGE("recorded " << ref_path);
    return;
  }
  std::ifstream in(ref_path);
  REQUIRE(in.good());
  std::vector<std::string> want;
  for (std::string l; std::getline(in, l);)
    if (!l.empty() && l[0] != '#') want.push_back(l);
  REQUIRE(want.size() == got.size());
  for (size_t i = 0; i < want.size(); ++i) CHECK(got[i] == want[i]);
}
