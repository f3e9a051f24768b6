// Family "init": the initial values of a model's parameters, decided by each parameter's
// role and shape (tensor.hpp: Role). Plugins create parameters with a role and no values;
// the model then runs its init variant (model.init) over every parameter in creation order.
#pragma once
#include "ablate/plugin.hpp"
#include "ablate/tensor.hpp"

namespace ablate {

class Initializer {
 public:
  static constexpr const char* kFamily = "init";
  virtual ~Initializer() = default;
  // Writes p.value (shape p.value.rows x p.value.cols, role p.role), drawing any random
  // numbers from rng. Called once per parameter in creation order, never for Role::kCustom.
  // Model sizes (d_model, n_layers, ...) come from the BuildContext given to the constructor.
  virtual void initialise(Parameter& p, Rng& rng) const = 0;
};

// Runs `init` over every parameter of `store` but the custom ones, in creation order, with
// store.rng().
void initialise(ParamStore& store, const Initializer& init);
// The same with the family's default variant (its descriptor,
// framework/model/src/families/init.cpp): for plugins built outside a model (tests, conformance
// checks).
void initialise_default(ParamStore& store, const ModelDims& dims);

}  // namespace ablate
