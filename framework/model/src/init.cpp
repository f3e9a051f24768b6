// Running an init variant over a ParamStore (see init.hpp).
#include "ablate/init.hpp"

#include "ablate/family.hpp"
#include "ablate/registry.hpp"

namespace ablate {

void initialise(ParamStore& store, const Initializer& init) {
  for (Parameter* p : store.all())
    if (p->role != Role::kCustom) init.initialise(*p, store.rng());
}

void initialise_default(ParamStore& store, const ModelDims& dims) {
  YAML::Node n;
  n["type"] = family(Initializer::kFamily).default_variant;
  Options o(n, std::make_shared<ConfigSource>(), "model.init");
  auto init = PluginRegistry::instance().create<Initializer>(
      o, BuildContext{dims, ParamScope(store, ""), 0});
  initialise(store, *init);
}

}  // namespace ablate
