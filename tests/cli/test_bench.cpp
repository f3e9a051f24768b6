// The per-op profile of the graph and the `ablate bench` command that prints it.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "ablate/conformance.hpp"
#include "ablate/graph.hpp"
#include "ablate/machine.hpp"
#include "ablate/ops.hpp"
#include "ablate/tensor.hpp"
#include "test_util.hpp"

namespace {
using namespace ablate;
using conformance::add_input;

// A small attention block and its loss: linear -> attention -> linear -> cross entropy.
struct TinyBlock {
  static constexpr int64_t B = 2, T = 8, NH = 2, HS = 4, C = NH * HS, V = 5;
  ParamStore store{7};
  Parameter *wqkv, *wo, *emb;
  std::vector<int32_t> tokens, targets;
  TinyBlock() {
    Rng rng(7);
    emb = &add_input(store, "emb", V, C, 0.5f);
    wqkv = &add_input(store, "wqkv", C, 3 * C, 0.3f);
    wo = &add_input(store, "wo", C, V, 0.3f);
    for (int64_t i = 0; i < B * T; ++i) {
      tokens.push_back(static_cast<int32_t>(rng.below(V)));
      targets.push_back(static_cast<int32_t>(rng.below(V)));
    }
  }
  std::vector<float> grads(OpProfile* profile) {
    store.zero_grad();
    Graph g;
    g.profile = profile;
    Var x = embedding(g, g.param(*emb), tokens.data(), B * T);
    Var qkv = linear(g, x, g.param(*wqkv));
    AttentionSpec spec;
    spec.batch = B, spec.time = T, spec.n_heads = NH, spec.n_kv_heads = NH, spec.head_size = HS;
    Var a = attention(g, slice_cols(g, qkv, 0, C), slice_cols(g, qkv, C, C),
                      slice_cols(g, qkv, 2 * C, C), spec);
    g.backward(cross_entropy(g, linear(g, a, g.param(*wo)), targets.data(), B * T));
    std::vector<float> out;
    for (Parameter* p : {emb, wqkv, wo})
      out.insert(out.end(), p->grad.data, p->grad.data + p->grad.numel());
    return out;
  }
};

}  // namespace

TEST_CASE("graph/profile: every op family gets forward and backward time, results unchanged") {
  TinyBlock m;
  const std::vector<float> plain = m.grads(nullptr);
  OpProfile prof;
  const std::vector<float> profiled = m.grads(&prof);
  REQUIRE(plain.size() == profiled.size());
  CHECK(std::memcmp(plain.data(), profiled.data(), plain.size() * sizeof(float)) == 0);
  for (const char* op : {"embedding", "linear", "slice_cols", "attention", "cross_entropy"}) {
    CAPTURE(op);
    REQUIRE(prof.ops.count(op) == 1);
    CHECK(prof.ops.at(op).forward_s > 0);
    CHECK(prof.ops.at(op).backward_s > 0);
  }
  CHECK(prof.ops.at("linear").calls == 2);
  CHECK(prof.ops.at("slice_cols").calls == 3);
  CHECK(prof.ops.at("attention").calls == 1);
  CHECK(prof.ops.count("input") == 1);  // the three parameter leaves
  CHECK(prof.ops.at("input").backward_s == 0);
  // A second profiled step adds to the same entries.
  m.grads(&prof);
  CHECK(prof.ops.at("linear").calls == 4);
}

TEST_CASE("bench/the command prints throughput, allocations per step and the op profile") {
  ablate::test::TempDir dir;
  const std::string cfg = dir.write("tiny.yaml", R"(name: tiny
vocab: 11
model: {d_model: 16, n_heads: 2, n_layers: 1, context: 16, positional: learned, attention: causal, ffn: relu,
        block: prenorm, norm: {type: layernorm, final: true}}
train: {batch_size: 4}
optimizer: {type: adamw, lr: 1.0e-3}
)");
  auto r =
      ablate::test::run_command(ablate::test::ablate_binary() + " bench " + cfg +
                                " --no-torch --steps 3 --warmup 2 --gen-tokens 8 --profile -j 1");
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(r.output.find("tiny ") != std::string::npos);
  CHECK(r.output.find("allocs/step") != std::string::npos);
  CHECK(r.output.find("FP32 FMA peak measured") != std::string::npos);
  CHECK(r.output.find("% peak") != std::string::npos);
  CHECK(r.output.find("where a training step's") != std::string::npos);
  for (const char* op :
       {"\nlinear ", "\nattention ", "\nlayernorm ", "\ncross_entropy ", "\noptimizer step "})
    CHECK(r.output.find(op) != std::string::npos);
  // A steady-state training step allocates nothing (malloc and operator new are counted),
  // on one thread and on two: the third-to-last column of the tiny row. The last is the
  // cache line's round trip between two threads, measured only when there are two (and two
  // cores).
  for (const char* threads : {"1", "2"}) {
    CAPTURE(threads);
    auto t =
        ablate::test::run_command(ablate::test::ablate_binary() + " bench " + cfg +
                                  " --no-torch --steps 5 --warmup 3 --gen-tokens 0 -j " + threads);
    INFO(t.output);
    REQUIRE(t.status == 0);
    const size_t row = t.output.find("\ntiny ");
    REQUIRE(row != std::string::npos);
    std::istringstream fields(t.output.substr(row + 1, t.output.find('\n', row + 1) - row - 1));
    std::vector<std::string> f;
    for (std::string x; fields >> x;) f.push_back(x);
    REQUIRE(f.size() >= 3);
    CHECK(f[f.size() - 3] == "0");
    if (std::string(threads) == "1" || ablate::usable_cores() < 2) {
      CHECK(f.back() == "-");
    } else {
      // (Milliseconds where other processes hold the cores: each hand-off waits for a slice.)
      const double ns = std::stod(f.back());
      CHECK(ns > 1.0);
      CHECK(std::isfinite(ns));
    }
  }
  // --repeat runs rounds of ablate and the reference alternately and prints medians with
  // the per-round ranges. The reference here is a stand-in script (PyTorch is not installed
  // for the tests) that reports 1000, 2000, 3000 tokens/s on its successive runs.
  {
    const std::string counter = dir / "calls";
    const std::string fake = dir.write(
        "torch_ref.sh", "#!/bin/sh\nn=$(cat '" + counter +
                            "' 2>/dev/null || echo 0); n=$((n+1)); echo $n > '" + counter +
                            "'\necho \"{\\\"best\\\": 1, \\\"train_tok_s\\\": ${n}000, "
                            "\\\"infer_tok_s\\\": ${n}0}\"\n");
    REQUIRE(std::system(("chmod +x '" + fake + "'").c_str()) == 0);
    const std::string tcfg =
        dir.write("tiny_t.yaml", "torch: tiny\n" + ablate::test::read_file(cfg));
    auto t =
        ablate::test::run_command(ablate::test::ablate_binary() + " bench " + tcfg + " --torch " +
                                  fake + " --steps 2 --warmup 1 --gen-tokens 4 --repeat 3 -j 1");
    INFO(t.output);
    REQUIRE(t.status == 0);
    CHECK(ablate::test::read_file(counter) == "3\n");
    CHECK(t.output.find("round 3/3") != std::string::npos);
    const size_t row = t.output.find("\ntiny ");
    REQUIRE(row != std::string::npos);
    const std::string line = t.output.substr(row + 1, t.output.find('\n', row + 1) - row - 1);
    CHECK(line.find(" 2000 ") != std::string::npos);  // the reference's median
    CHECK(line.find("x [") != std::string::npos);     // the ratios' range
    CHECK(t.output.find("medians of 3 rounds") != std::string::npos);
    auto z = ablate::test::run_command(ablate::test::ablate_binary() + " bench " + cfg +
                                       " --no-torch --repeat 0");
    CHECK(z.status != 0);
    CHECK(z.output.find("--repeat must be >= 1") != std::string::npos);
  }
  // A variant that reads the tokens' texts (place_value) gets a vocabulary and is benched.
  {
    std::string text = ablate::test::read_file(cfg);
    const size_t at = text.find("positional: learned");
    REQUIRE(at != std::string::npos);
    text.replace(at, std::string("positional: learned").size(), "positional: place_value");
    const std::string pv = dir.write("tiny_pv.yaml", text);
    auto t = ablate::test::run_command(ablate::test::ablate_binary() + " bench " + pv +
                                       " --no-torch --steps 2 --warmup 1 --gen-tokens 4 -j 1");
    INFO(t.output);
    CHECK(t.status == 0);
    CHECK(t.output.find("\ntiny ") != std::string::npos);
  }
  // An unknown key in a bench file is an error, not a silent default.
  const std::string bad =
      dir.write("bad.yaml",
                "name: bad\nvocab: 11\nmodel: {d_model: 16, n_heads: 2, n_layers: 1, context: 16}\n"
                "train: {batch_size: 4, bach: 2}\noptimizer: {type: adamw}\n");
  auto b = ablate::test::run_command(ablate::test::ablate_binary() + " bench " + bad +
                                     " --no-torch --gen-tokens 0");
  CHECK(b.status != 0);
  CHECK(b.output.find("bach") != std::string::npos);
}

TEST_CASE(
    "bench/kernel paths: ABLATE_ISA forces a lower one and refuses an unknown or a higher one") {
  // The process's own path is the one ABLATE_ISA names (ctest runs the op suite once per
  // path: tests/CMakeLists.txt), else the CPU's best.
  const char* forced = std::getenv("ABLATE_ISA");
  if (forced && *forced) CHECK(std::string(ablate::kernel_path()) == forced);
  ablate::test::TempDir dir;
  const std::string cfg = dir.write("tiny.yaml", R"(name: tiny
vocab: 11
model: {d_model: 16, n_heads: 2, n_layers: 1, context: 16, positional: learned, attention: causal, ffn: relu,
        block: prenorm, norm: {type: layernorm, final: true}}
train: {batch_size: 4}
optimizer: {type: adamw, lr: 1.0e-3}
)");
  const std::string bench = ablate::test::ablate_binary() + " bench " + cfg +
                            " --no-torch --steps 1 --warmup 1 --gen-tokens 4 -j 1";
  // Unforced: the CPU's best, printed with the CPU model.
  auto best = ablate::test::run_command("env -u ABLATE_ISA " + bench);
  INFO(best.output);
  REQUIRE(best.status == 0);
  CHECK(best.output.find("CPU: ") != std::string::npos);
  CHECK(best.output.find("(the CPU's best)") != std::string::npos);
  std::string best_path;
  for (const char* p : {"avx512", "avx2", "portable"})
    if (best.output.find(std::string("kernel path: ") + p + " ") != std::string::npos)
      best_path = p;
  REQUIRE(!best_path.empty());
  // The portable path runs on every CPU, and the bench says it was forced.
  auto low = ablate::test::run_command("ABLATE_ISA=portable " + bench);
  INFO(low.output);
  CHECK(low.status == 0);
  CHECK(low.output.find("kernel path: portable (forced by ABLATE_ISA)") != std::string::npos);
  auto bogus = ablate::test::run_command("ABLATE_ISA=sse9 " + bench);
  CHECK(bogus.status != 0);
  CHECK(bogus.output.find("ABLATE_ISA='sse9' is not a kernel path: use avx512, avx2 or portable") !=
        std::string::npos);
  if (best_path == "avx512") {
    MESSAGE(
        "this CPU runs every kernel path: the error for a path above the CPU's is not reachable "
        "here");
  } else {
    auto high = ablate::test::run_command("ABLATE_ISA=avx512 " + bench);
    CHECK(high.status != 0);
    CHECK(high.output.find("ABLATE_ISA=avx512: this CPU") != std::string::npos);
    CHECK(high.output.find("the best it runs is '" + best_path + "'") != std::string::npos);
  }
}
