// No positional information (NoPE, Kazemnejad et al. 2023): every hook is the identity.
// With causal attention, position can still be inferred from the mask.
#include "ablate/plugin.hpp"
#include "ablate/positional.hpp"

namespace {

class NoPositional final : public ablate::PositionalEncoding {
 public:
  bool rotates() const override { return false; }
  NoPositional(const ablate::Options&, const ablate::BuildContext&) {}
};

}  // namespace
ABLATE_PLUGIN(ablate::PositionalEncoding, none, NoPositional, "no positional encoding (NoPE)")
