// The seed models of REFERENCE.md as experiments (experiments/models/*.yaml): the post-norm
// GPT-1 model has exactly 44,487 parameters with V = 71; the SwiGLU twin of the pre-norm
// baseline has its parameter count; every model file builds.
#include <doctest/doctest.h>

#include <filesystem>

#include "ablate/experiment.hpp"
#include "ablate/model.hpp"
#include "test_util.hpp"

namespace {

std::string model_file(const std::string& name) { return std::string(ABLATE_SOURCE_DIR) + "/experiments/models/" + name + ".yaml"; }

int64_t params(const std::string& name, int64_t vocab) {
  ablate::test::registry();
  const ablate::Experiment e = ablate::Experiment::load(model_file(name));
  const ablate::Model m(e.root().child("model"), vocab, 1);
  return m.n_params();
}

}  // namespace

TEST_CASE("models/gpt1_postnorm: 44,487 parameters with V = 71 (2,272 + 2,048 + 3 x 12,608 + 2,343)") {
  CHECK(params("gpt1_postnorm", 71) == 44487);
  CHECK(params("gpt1_postnorm", 66) == 44487 - 2 * 5 * 32 - 5);  // tiny Shakespeare: 65 characters + unknown = 44,162
}

TEST_CASE("models/prenorm: the SwiGLU twin has exactly the baseline's parameters (V = 65)") {
  const int64_t relu = params("prenorm_baseline", 65), swiglu = params("prenorm_swiglu", 65);
  CHECK(relu == swiglu);
  // 8 blocks of 4*96^2 (attention) + 2*96*384 (FFN) + 2*2*96 (norms), embeddings, final norm, head.
  CHECK(relu == 8 * (4 * 96 * 96 + 2 * 96 * 384 + 4 * 96) + 65 * 96 + 128 * 96 + 2 * 96 + 96 * 65);
}

TEST_CASE("models/every experiments/models file parses and builds its model") {
  int n = 0;
  for (const auto& f : std::filesystem::directory_iterator(std::string(ABLATE_SOURCE_DIR) + "/experiments/models")) {
    if (f.path().extension() != ".yaml") continue;
    INFO(f.path().string());
    CHECK(params(f.path().stem().string(), 100) > 0);
    ++n;
  }
  CHECK(n >= 5);
}
