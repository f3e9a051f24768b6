// Family "scheduler": its descriptor (see ablate/family.hpp). Its conformance checks are in
// conformance/scheduler.cpp, the skeleton of `ablate plugin new scheduler NAME` is
// tools/plugin_skeletons/scheduler.cpp.
#include "ablate/scheduler.hpp"

#include "../conformance/suites.hpp"

namespace ablate {
namespace {

[[maybe_unused]] const bool registered = register_family([] {
  FamilyDescriptor d;
  d.name = Scheduler::kFamily;
  d.key = "scheduler";
  d.list = false;
  d.default_variant = "constant";
  d.summary = "the learning-rate factor at each step";
  d.checks = &conformance::check_scheduler;
  return d;
}());

}  // namespace
}  // namespace ablate
