// No transform: attention reads q, k and v as projected (in place in its fused projection).
#include "ablate/plugin.hpp"
#include "ablate/qk_transform.hpp"

namespace {

class None final : public ablate::QkTransform {
 public:
  None(const ablate::Options&, const ablate::BuildContext&) {}
  bool transforms() const override { return false; }
  void apply(ablate::Graph&, ablate::Var&, ablate::Var&, ablate::Var&,
             const ablate::QkvHeads&) override {}
};

}  // namespace
ABLATE_PLUGIN(ablate::QkTransform, none, None, "q, k and v as projected")
