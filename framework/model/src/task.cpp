// Evaluators named in an experiment's eval list: evaluator variants, or tasks' evaluators
// (see task.hpp).
#include "ablate/task.hpp"

#include "ablate/registry.hpp"

namespace ablate {

std::unique_ptr<Evaluator> make_evaluator(const Options& entry, const BuildContext& ctx) {
  auto& reg = PluginRegistry::instance();
  const std::string type = PluginRegistry::type_of(entry);
  if (!reg.find(Task::kFamily, type)) {
    if (!reg.find(Evaluator::kFamily, type)) {
      std::vector<std::string> names;
      for (const char* f : {Evaluator::kFamily, Task::kFamily})
        for (const PluginEntry* e : reg.variants(f)) names.push_back(e->info->name);
      const std::string dym = did_you_mean(type, names);
      entry.fail("type", "unknown evaluator or task '" + type +
                             "'. Available: " + (names.empty() ? "(none found)" : join(names)) +
                             (dym.empty() ? "" : ". Did you mean '" + dym + "'?"));
    }
    return reg.create<Evaluator>(entry, ctx);
  }
  YAML::Node bare;
  bare["type"] = type;
  const std::unique_ptr<Task> task =
      reg.create<Task>(Options(bare, entry.source(), entry.path()), ctx);
  entry.mark_used("type");
  std::unique_ptr<Evaluator> ev = task->evaluator(entry, ctx);
  entry.check_unused({"type"});
  return ev;
}

}  // namespace ablate
