// ablate generate RUN --prompt TEXT: samples text from a trained run.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>

#include "ablate/error.hpp"
#include "ablate/generate.hpp"
#include "ablate/inspect.hpp"
#include "ablate/ops.hpp"
#include "ablate/trainer.hpp"
#include "commands.hpp"

namespace po = boost::program_options;

namespace {

// --temperature, --top-k, --top-p and --greedy, checked.
ablate::Sampling sampling(const po::variables_map& vm) {
  ablate::Sampling s;
  s.temperature = vm["temperature"].as<float>();
  s.top_k = vm["top-k"].as<int64_t>();
  s.top_p = vm["top-p"].as<float>();
  s.greedy = vm["greedy"].as<bool>();
  // Negated comparisons, so that NaN is refused too.
  if (!(s.temperature >= 0 && std::isfinite(s.temperature)))
    throw ablate::cli::UsageError("--temperature must be a finite number >= 0, got " +
                                  std::to_string(s.temperature));
  if (s.top_k < 0)
    throw ablate::cli::UsageError("--top-k must be >= 0, got " + std::to_string(s.top_k));
  if (!(s.top_p > 0 && s.top_p <= 1))
    throw ablate::cli::UsageError("--top-p must be in (0, 1], got " + std::to_string(s.top_p));
  return s;
}

// Characters outside the training data have no token: refused, as by inspect, unless
// --allow-unknown maps them (visibly) to the unknown symbol.
void check_prompt_characters(const ablate::Tokenizer& tok, const std::string& prompt,
                             bool allow_unknown) {
  const auto unknown = ablate::unknown_characters(tok, prompt);
  if (unknown.empty()) return;
  std::string list;
  for (const auto& c : unknown)
    list += (list.empty() ? "'" : ", '") + ablate::visible_token(c) + "'";
  const std::string what = "the prompt has " + std::to_string(unknown.size()) + " character" +
                           (unknown.size() == 1 ? "" : "s") +
                           " the run's tokenizer does not know: " + list;
  if (!allow_unknown)
    throw ablate::Error(what +
                        "; use only characters of the training data, or --allow-unknown to "
                        "encode them as the unknown symbol");
  std::cerr << "warning: " << what << "; encoded as the unknown symbol (shown as it decodes)\n";
}

// Generates `n` tokens after `ids`, printing the text as it grows; returns how many it made.
int64_t generate_printing(ablate::LoadedRun& run, const std::vector<int32_t>& ids, int64_t n,
                          const ablate::Sampling& s, ablate::Rng& rng) {
  // Decoding the whole sequence each time keeps what a tokenizer puts between tokens (BPE's
  // implied spaces) and whole UTF-8 characters.
  std::vector<int32_t> seq = ids;
  std::string shown = run.tokenizer->decode(seq);
  std::cout << shown << std::flush;
  ablate::generate(*run.model, ids, n, s, rng, [&](int32_t t) {
    seq.push_back(t);
    std::string text = run.tokenizer->decode(seq);
    if (text.size() >= shown.size() && text.compare(0, shown.size(), shown) == 0)
      std::cout << text.substr(shown.size());
    else std::cout << text;  // a tokenizer that rewrote earlier text: show it whole
    std::cout << std::flush;
    shown = std::move(text);
  });
  std::cout << "\n";
  return static_cast<int64_t>(seq.size() - ids.size());
}

int cmd_generate(const std::vector<std::string>& args) {
  po::options_description opts("options");
  opts.add_options()("run", po::value<std::string>(), "run directory (or its checkpoint file)")(
      "prompt,p", po::value<std::string>()->default_value("\n"), "text to continue")(
      "tokens,n", po::value<int64_t>()->default_value(200), "tokens to generate")(
      "temperature,t", po::value<float>()->default_value(1.0f), "softmax temperature (0: greedy)")(
      "top-k", po::value<int64_t>()->default_value(0),
      "sample among the k most likely tokens (0: all)")(
      "top-p", po::value<float>()->default_value(1.0f), "nucleus sampling threshold (1: off)")(
      "greedy", po::bool_switch(), "always take the most likely token")(
      "seed", po::value<int64_t>()->default_value(1), "random seed (>= 0)")(
      "precision", po::value<std::string>(),
      "inputs of the matrix products: float32 or bf16 (default: the run's train.precision)")(
      "allow-unknown", po::bool_switch(),
      "encode prompt characters the tokenizer does not know as its unknown symbol (with a "
      "warning)")("stats", po::bool_switch(),
                  "print the prompt's and the generated tokens and the generation's tokens/s to "
                  "stderr at the end")("plugin-dir",
                                       po::value<std::vector<std::string>>()->composing(),
                                       "extra plugin directory (repeatable)");
  po::positional_options_description pos;
  pos.add("run", 1);
  po::variables_map vm;
  if (!ablate::cli::parse(args, "ablate generate RUN [--prompt TEXT] [--tokens N] [options]", opts,
                          pos, vm))
    return 0;
  if (!vm.count("run"))
    throw ablate::cli::UsageError("missing the run directory (e.g. runs/quickstart)");
  ablate::cli::add_plugin_dirs(vm);
  const ablate::Sampling s = sampling(vm);
  const int64_t n = vm["tokens"].as<int64_t>();
  if (n < 0) throw ablate::cli::UsageError("--tokens must be >= 0, got " + std::to_string(n));
  const int64_t seed = vm["seed"].as<int64_t>();
  if (seed < 0) throw ablate::cli::UsageError("--seed must be >= 0, got " + std::to_string(seed));
  auto run = ablate::load_run(vm["run"].as<std::string>());
  ablate::require_generating(run, "generating text");
  const std::string prompt = vm["prompt"].as<std::string>();
  check_prompt_characters(*run.tokenizer, prompt, vm["allow-unknown"].as<bool>());
  ablate::cli::use_precision(run, vm.count("precision") ? vm["precision"].as<std::string>() : "");
  const std::vector<int32_t> ids = run.tokenizer->encode(prompt);
  ablate::Rng rng(static_cast<uint64_t>(seed));
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t made = generate_printing(run, ids, n, s, rng);
  if (vm["stats"].as<bool>()) {
    // The prompt's prefill and every decoding step, with the KV cache; not the loading.
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::fprintf(stderr, "generate: %zu prompt tokens, %lld generated in %.3f s: %.2f tokens/s\n",
                 ids.size(), static_cast<long long>(made), sec,
                 sec > 0 ? static_cast<double>(made) / sec : 0.0);
  }
  return 0;
}

}  // namespace

ABLATE_COMMAND("generate",
               "sample text from a trained run (KV cache; greedy, temperature, top-k, top-p)",
               cmd_generate);
