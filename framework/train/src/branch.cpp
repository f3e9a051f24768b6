// `ablate run RUN --branch NEW_DIR --at STEP`: a new run directory that continues a run from
// one of its checkpoints (see trainer.hpp: Branch).
#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "ablate/runfile.hpp"
#include "ablate/trainer.hpp"
#include "run_checkpoint.hpp"

namespace ablate {
namespace fs = std::filesystem;

namespace {

// The checkpoint a branch at `step` starts from (0: the latest), read; b gets its path, step
// and config.
Checkpoint branch_checkpoint(const std::string& source_dir, int64_t step, Branch& b) {
  const std::string latest = checkpoint_path(source_dir);
  if (!fs::exists(latest) || !fs::exists(run_file_path(source_dir)))
    throw Error("--branch: " + source_dir +
                " is not a run to branch from (it needs run.h5 and checkpoint.ckpt, written by "
                "'ablate run')");
  b.checkpoint = step > 0 && fs::exists(kept_checkpoint_path(source_dir, step))
                     ? kept_checkpoint_path(source_dir, step)
                     : latest;
  Checkpoint ck = read_run_checkpoint(b.checkpoint);
  b.step = static_cast<int64_t>(ck.ints.at("step"));
  if (step > 0 && b.step != step) {
    std::string kept;
    for (int64_t k : RunDir(source_dir).kept_steps())
      kept += (kept.empty() ? "" : ", ") + std::to_string(k);
    throw Error("--branch: " + source_dir + " has no checkpoint at step " + std::to_string(step) +
                " (kept: " + (kept.empty() ? "none" : kept) + "; latest: step " +
                std::to_string(b.step) + "). Branch --at one of those, " +
                "or keep the step's checkpoint when training the run: train.keep_checkpoints: [" +
                std::to_string(step) + "]");
  }
  b.config = ck.texts.at("config");
  return ck;
}

}  // namespace

Branch find_branch(const std::string& source_dir, int64_t step) {
  Branch b;
  branch_checkpoint(source_dir, step, b);
  return b;
}

Branch prepare_branch(const std::string& source_dir, int64_t step, const std::string& new_dir) {
  Branch b;
  Checkpoint ck = branch_checkpoint(source_dir, step, b);
  const std::string h5 = run_file_path(source_dir);
  RunDir dest(new_dir);
  if (dest.holds_run())
    throw Error("--branch: " + new_dir + " already holds a run; branch into a new directory");
  // The source may be training: its run file is read as of its last flush, which is at or
  // after the checkpoint (every checkpoint flushes first).
  RunData d = read_run_file(h5);
  dest.lock(/*create=*/true);
  RunFile rf = RunFile::create(dest.run_file());
  for (const auto& [k, v] : d.str_attrs)
    if (k != "format") rf.set_attr(k, v);
  for (const auto& [k, v] : d.num_attrs) {
    if (k == "format_version") continue;
    if (d.int_attrs.count(k))
      rf.set_attr(k, static_cast<int64_t>(v));  // each attribute keeps its type
    else rf.set_attr(k, v);
  }
  if (double cpu, eval_cpu; kept_cpu_seconds(ck, cpu, eval_cpu)) {  // the CPU time up to it
    rf.set_attr("cpu_seconds", cpu);
    rf.set_attr("eval_cpu_seconds", eval_cpu);
  }
  set_status(rf, RunStatus::branched);
  rf.set_attr("error", "");
  rf.set_attr("branched_from", fs::absolute(b.checkpoint).lexically_normal().string());
  rf.set_attr("branched_at", b.step);
  // Rows up to the branch point: metrics at steps <= it, segments begun before it.
  int64_t segments = 0;
  for (const auto& [group, cols] : d.tables) {
    const auto st = cols.find(group == "segments" ? "start_step" : "step");
    const size_t rows = cols.empty() ? 0 : cols.begin()->second.size();
    std::vector<std::pair<std::string, double>> row;
    for (size_t i = 0; i < rows; ++i) {
      const double at = static_cast<double>(b.step);
      if (st != cols.end() && (group == "segments" ? st->second[i] >= at : st->second[i] > at))
        continue;
      row.clear();
      for (const auto& [c, v] : cols) row.emplace_back(c, v[i]);
      rf.append(group, row);
      segments += group == "segments";
    }
  }
  for (const auto& [name, text] : d.texts) {
    if (name.rfind("samples/", 0) == 0) continue;  // the source's samples are not the branch's
    if (name.rfind("segments/", 0) == 0 && std::atoll(name.c_str() + 9) >= segments) continue;
    rf.write_text(name, text);
  }
  rf.close();
  drop_kept_cpu_seconds(ck);
  write_checkpoint(dest.checkpoint(), ck);
  return b;
}

}  // namespace ablate
