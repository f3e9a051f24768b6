// The conformance suite of family "init": the initial values of every role of parameter.
#include "ablate/init.hpp"
#include "kit.hpp"
#include "suites.hpp"

namespace ablate::conformance {
namespace {

constexpr Role kRoles[] = {Role::kEmbedding, Role::kPosition, Role::kHidden, Role::kResidualOut,
                           Role::kHead,      Role::kGain,     Role::kBias,   Role::kCustom};

// One parameter per role (16 x 24; gains and biases 1 x 24; custom ones 0.25), initialised
// by the variant built with `seed`; the values by role.
std::vector<std::vector<float>> initialised(const Subject& s, const ModelDims& d, uint64_t seed) {
  ParamStore store(seed);
  for (Role r : kRoles) {
    const bool row = r == Role::kGain || r == Role::kBias;
    Parameter& p = store.add(role_name(r), row ? 1 : 16, 24, r);
    if (r == Role::kCustom) fill(p.value, 0.25f);
  }
  Options o(YAML::Clone(s.options), std::make_shared<ConfigSource>(), path_of(s.family));
  auto init = PluginRegistry::instance().create<Initializer>(
      o, BuildContext{d, ParamScope(store, ""), seed});
  initialise(store, *init);
  std::vector<std::vector<float>> v;
  for (Parameter* p : store.all()) v.emplace_back(p->value.data, p->value.data + p->value.numel());
  return v;
}

// What the init checks share: the variant.
struct InitCase {
  const Subject& s;
  const ModelDims d = small_dims();
};

void sets_every_role(InitCase& c, std::string&) {
  const auto v = initialised(c.s, c.d, 3);
  for (Role r : kRoles)
    expect_finite(v[static_cast<size_t>(r)], std::string("the ") + role_name(r) + " parameter");
  expect(v[static_cast<size_t>(Role::kCustom)] == std::vector<float>(16 * 24, 0.25f),
         "a custom parameter's values (set by its plugin) were changed");
}

// A residual-output matrix may start at 0 (modded-nanogpt): its inputs come from random
// matrices, so its units differ from the first gradient on. Any other constant would not.
void matrices_start_random(InitCase& c, std::string& note) {
  const auto a = initialised(c.s, c.d, 3), b = initialised(c.s, c.d, 3),
             other = initialised(c.s, c.d, 4);
  expect(a == b, "two initialisations with the same seed differ");
  for (Role r : {Role::kEmbedding, Role::kHidden, Role::kResidualOut, Role::kHead}) {
    const auto& v = a[static_cast<size_t>(r)];
    if (std::any_of(v.begin(), v.end(), [&](float x) { return x != v[0]; })) continue;
    expect(r == Role::kResidualOut && v[0] == 0.0f, std::string("every value of the ") +
                                                        role_name(r) + " matrix is " + num(v[0]) +
                                                        " (units would stay symmetric)");
    note = "residual-output matrices start at 0";
  }
  expect(a != other, "seeds 3 and 4 give the same values");
}

}  // namespace

void check_init(Checker& ck, const Subject& s) {
  InitCase c{s};
  run_properties<InitCase>(
      ck, c,
      {{"every role gets finite values; custom parameters are left alone", &sets_every_role},
       {"matrices start random: not constant, other values for another seed; deterministic",
        &matrices_start_random}});
  check_options<Initializer>(ck, s, c.d);
}

}  // namespace ablate::conformance
