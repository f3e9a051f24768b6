// Family "task": its descriptor (see ablate/family.hpp). Its conformance checks are in
// conformance/task.cpp, the skeleton of `ablate plugin new task NAME` is
// tools/plugin_skeletons/task.cpp.
#include "ablate/registry.hpp"
#include "ablate/task.hpp"

#include "../conformance/suites.hpp"

namespace ablate {
namespace {

std::vector<std::pair<std::string, std::vector<OptionDoc>>> task_options(void* variant) {
  Task& t = *static_cast<Task*>(variant);
  Options data = Options::describe("");
  std::ostringstream ignored;
  t.write_data(data, ignored);
  Options eval = Options::describe("eval.0");
  try {
    t.evaluator(eval, StandaloneContext());
  } catch (const std::exception&) {
  }
  return {{"ablate data flags (--key-name value)", data.docs()},
          {"evaluator options (eval entry, ablate eval flags)", eval.docs()}};
}

[[maybe_unused]] const bool registered = register_family([] {
  FamilyDescriptor d;
  d.name = Task::kFamily;
  d.key = "eval";
  d.list = true;
  d.summary =
      "data of its own (ablate data TASK) and scoring (eval: [{type: TASK}], ablate eval --task "
      "TASK)";
  d.checks = &conformance::check_task;
  d.more_options = &task_options;
  return d;
}());

}  // namespace
}  // namespace ablate
