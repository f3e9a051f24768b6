// ablate bench: training and generation throughput of named model configurations,
// side by side with the PyTorch reference (../shared/bench/torch_ref.sh) in one run.
#if defined(__x86_64__)
#include <immintrin.h>
#endif
#include <sys/resource.h>
#include <tbb/global_control.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "ablate/conformance.hpp"
#include "ablate/experiment.hpp"
#include "ablate/generate.hpp"
#include "ablate/machine.hpp"
#include "ablate/model.hpp"
#include "ablate/ops.hpp"
#include "ablate/optimizer.hpp"
#include "ablate/registry.hpp"
#include "alloc_counter.hpp"
#include "commands.hpp"

namespace po = boost::program_options;
namespace fs = std::filesystem;
using clock_type = std::chrono::steady_clock;

namespace {

struct BenchResult {
  std::string name, torch_name;
  int64_t params = 0;
  double flops_per_token = 0, train_tok_s = 0, gflops = 0, gen_tok_s = 0, step_ms = 0;
  uint64_t allocs_per_step = 0;
  // The most of the graph's arena a timed step used (activations, their gradients, saved state):
  // what the step's pages hold.
  double arena_mib = 0;
  ablate::OpProfile profile;
  double profile_step_s = 0, profile_optimizer_s = 0;  // summed over the profiled steps
  int64_t profile_steps = 0;
  double torch_train_tok_s = 0, torch_gen_tok_s = 0;
  std::string torch_threads;
  double peak_gflops = 0;  // the FMA peak measured just before and after this config (the higher)
  // A cache line's round trip between two threads just before and after this config (the
  // slower of the two; 0 on one thread or one core): where the cores sit, which a VM's host
  // may change.
  double round_trip_ns = 0;
  double f32_train_tok_s = 0;  // --precision bf16: the same model in float32, in the same round
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0 : n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// Tokens per second generating `gen_tokens` at batch 1: the median of three runs.
double generation_rate(ablate::Model& model, int64_t gen_tokens) {
  ablate::Sampling s;
  ablate::Rng grng(0);
  ablate::generate(model, {0}, 16, s, grng);  // warm-up
  std::vector<double> secs;
  for (int rep = 0; rep < 3; ++rep) {
    auto t0 = clock_type::now();
    ablate::generate(model, {0}, gen_tokens, s, grng);
    secs.push_back(std::chrono::duration<double>(clock_type::now() - t0).count());
  }
  return static_cast<double>(gen_tokens) / median(secs);
}

BenchResult bench_one(const std::string& file, int64_t steps, int64_t warmup, int64_t gen_tokens,
                      bool profile, ablate::Precision precision) {
  ablate::set_default_precision(precision);  // generation's graphs too
  auto exp = ablate::Experiment::load(file);
  ablate::Options root = exp.root();
  BenchResult r;
  r.name = root.get<std::string>("name", fs::path(file).stem().string());
  r.torch_name = root.get<std::string>("torch", "", "torch_ref.sh configuration to compare with");
  int64_t V = root.get_in<int64_t>("vocab", 65, 2, 1 << 24, "vocabulary size (random tokens)");
  // Token texts for variants that read them (e.g. place_value): the conformance kit's
  // small vocabulary (digits, a point, '+', '=', ...); the random tokens index it.
  ablate::Model model(root.child("model"), V, 1, ablate::conformance::small_vocab(V));
  ablate::Options tr = root.child("train");
  int64_t B = tr.get_in<int64_t>("batch_size", 32, 1, 1 << 20);
  tr.check_unused();
  auto opt = ablate::PluginRegistry::instance().create<ablate::Optimizer>(
      root.child("optimizer"), ablate::StandaloneContext(1));
  root.check_unused();
  const int64_t T = model.dims().context;
  r.params = model.n_params();
  r.flops_per_token = model.flops_per_token();
  auto params = model.params().all();
  opt->init(params);
  ablate::Graph g;
  g.training = true;
  g.precision = precision;
  ablate::Rng rng(1337);
  std::vector<int32_t> x(static_cast<size_t>(B * T)), y(x.size());
  std::vector<double> ms;
  uint64_t allocs = 0;
  {
    // One sequence plans the values' lifetimes (graph.hpp), as a training run does.
    g.reset();
    ablate::cross_entropy(g, model.forward(g, ablate::Batch{x.data(), 1, T}), y.data(), T);
  }
  // Warm-up, timed steps, then (--profile) as many steps again with per-op timing, so
  // that the clock reads of the profile do not touch the timed steps.
  const int64_t profiled = profile ? steps : 0;
  for (int64_t it = 0; it < warmup + steps + profiled; ++it) {
    const bool prof = it >= warmup + steps;
    for (size_t i = 0; i < x.size(); ++i)
      x[i] = static_cast<int32_t>(rng.below(static_cast<uint64_t>(V)));
    for (size_t i = 0; i < y.size(); ++i)
      y[i] = static_cast<int32_t>(rng.below(static_cast<uint64_t>(V)));
    uint64_t a0 = ablate::cli::allocation_count();
    auto t0 = clock_type::now();
    g.reset();
    g.profile = prof ? &r.profile : nullptr;
    ablate::Batch fa{x.data(), B, T};
    ablate::Var loss = ablate::cross_entropy(g, model.forward(g, fa), y.data(), B * T);
    model.params().zero_grad();
    g.backward(loss);
    auto t1 = clock_type::now();
    opt->step(params, opt->base_lr(), it + 1);
    auto t2 = clock_type::now();
    double dt = std::chrono::duration<double, std::milli>(t2 - t0).count();
    if (prof) {
      r.profile_steps += 1;
      r.profile_step_s += dt / 1e3;
      r.profile_optimizer_s += std::chrono::duration<double>(t2 - t1).count();
    } else if (it >= warmup) {
      allocs = std::max(allocs, ablate::cli::allocation_count() - a0);  // before push_back's own
      ms.push_back(dt);
      r.arena_mib = std::max(r.arena_mib, static_cast<double>(g.step_bytes()) / (1 << 20));
    }
  }
  g.profile = nullptr;
  r.step_ms = median(ms);
  r.train_tok_s = static_cast<double>(B * T) / (r.step_ms / 1e3);
  r.gflops = r.flops_per_token * r.train_tok_s / 1e9;
  r.allocs_per_step = allocs;
  if (gen_tokens > 0) r.gen_tok_s = generation_rate(model, gen_tokens);
  return r;
}

// 12 independent chains of `iters` fused multiply-adds each, on the vectors of one
// kernel path (each function compiled for its instruction set, called only where the
// CPU has it); returns their sum, which keeps the loop. Flops: 2 x lanes x 12 x iters.
constexpr int kChains = 12;
#if defined(__x86_64__)
__attribute__((target("avx512f"))) float fma_chains_avx512(int64_t iters, float seed) {
  __m512 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(0.001f * static_cast<float>(c) + seed);
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
  for (int64_t i = 0; i < iters; ++i)
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_fmadd_ps(acc[c], a, b);
  alignas(64) float t[16];
  float s = 0;
  for (int c = 0; c < kChains; ++c) {
    _mm512_store_ps(t, acc[c]);  // (not _mm512_reduce_add_ps: GCC 12 warns inside its header)
    for (float x : t) s += x;
  }
  return s;
}
__attribute__((target("avx2,fma"))) float fma_chains_avx2(int64_t iters, float seed) {
  __m256 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm256_set1_ps(0.001f * static_cast<float>(c) + seed);
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
  for (int64_t i = 0; i < iters; ++i)
    for (int c = 0; c < kChains; ++c) acc[c] = _mm256_fmadd_ps(acc[c], a, b);
  alignas(32) float t[8];
  float s = 0;
  for (int c = 0; c < kChains; ++c) {
    _mm256_store_ps(t, acc[c]);
    for (float x : t) s += x;
  }
  return s;
}
#endif
// The portable path: four-wide multiply and add (SSE2 on x86-64: no FMA).
float fma_chains_portable(int64_t iters, float seed) {
  using v4 = float __attribute__((vector_size(16)));
  v4 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = v4{} + (0.001f * static_cast<float>(c) + seed);
  const v4 a = v4{} + 0.999999f, b = v4{} + 1e-7f;
  for (int64_t i = 0; i < iters; ++i)
    for (int c = 0; c < kChains; ++c) acc[c] = acc[c] * a + b;
  float s = 0;
  for (int c = 0; c < kChains; ++c) s += acc[c][0] + acc[c][1] + acc[c][2] + acc[c][3];
  return s;
}

// FP32 multiply-add peak of `threads` cores on the kernel path in use (ablate::kernel_path):
// each thread runs 12 independent chains of its widest multiply-adds for about `seconds`.
double measure_fma_peak(int64_t threads, double seconds) {
  const std::string path = ablate::kernel_path();
  int kLanes = 4;
  float (*chains)(int64_t, float) = &fma_chains_portable;
#if defined(__x86_64__)
  if (path == "avx512" || path == "avx512_bf16" || path == "onednn_bf16")
    kLanes = 16, chains = &fma_chains_avx512;
  if (path == "avx2") kLanes = 8, chains = &fma_chains_avx2;
#endif
  constexpr int64_t kInner = 1 << 16;
  // One std::thread per core, all started before any is timed, and the total flops over
  // the wall time of the whole run: so the cores are counted only while they run at once.
  std::vector<int64_t> iters(static_cast<size_t>(threads), 0);
  std::vector<float> sink(static_cast<size_t>(threads), 0.0f);
  std::atomic<int64_t> ready{0};
  auto work = [&](int64_t t) {
    ready.fetch_add(1);
    while (ready.load() < threads) {
    }
    auto t0 = clock_type::now();
    int64_t n = 0;
    float s = 0;
    while (std::chrono::duration<double>(clock_type::now() - t0).count() < seconds) {
      s += chains(kInner, static_cast<float>(t));
      n += kInner;
    }
    sink[static_cast<size_t>(t)] = s;  // keeps the loop
    iters[static_cast<size_t>(t)] = n;
  };
  std::vector<std::thread> pool;
  for (int64_t t = 1; t < threads; ++t) pool.emplace_back(work, t);
  while (ready.load() < threads - 1) {
  }
  auto t0 = clock_type::now();
  work(0);
  for (auto& th : pool) th.join();
  const double wall = std::chrono::duration<double>(clock_type::now() - t0).count();
  double flops = 0;
  for (size_t t = 0; t < iters.size(); ++t)
    flops +=
        2.0 * kLanes * kChains * static_cast<double>(iters[t]) + (sink[t] == 12345.0f ? 1.0 : 0.0);
  return flops / wall / 1e9;
}

// A cache line's round trip between this thread and another, in ns: the median of up to 9
// batches of 100 hand-offs (each side waits for the other's store), no more batches after
// 50 ms (on a loaded machine a hand-off may wait for a time slice). What every parallel
// loop's start and end cost, and a measure of how far apart the cores are: on a KVM guest of
// 2 vCPUs it moved between about 135 ns and 650 ns within one process (cores that share an
// L3, and cores that do not), and the small models' steps with it.
double measure_round_trip_ns() {
  alignas(64) std::atomic<int64_t> ping{0};
  alignas(64) std::atomic<int64_t> pong{0};
  alignas(64) std::atomic<bool> done{false};
  std::thread other([&] {
    for (int64_t seen = 0; !done.load(std::memory_order_relaxed);) {
      const int64_t p = ping.load(std::memory_order_acquire);
      if (p != seen) pong.store(seen = p, std::memory_order_release);
    }
  });
  constexpr int64_t kBatch = 100, kBatches = 9;
  const auto start = clock_type::now();
  std::vector<double> ns;
  for (int64_t i = 0; static_cast<int64_t>(ns.size()) < kBatches &&
                      clock_type::now() - start < std::chrono::milliseconds(50);) {
    const auto t0 = clock_type::now();
    for (const int64_t end = i + kBatch; i < end;) {
      ping.store(++i, std::memory_order_release);
      while (pong.load(std::memory_order_acquire) != i) {
      }
    }
    ns.push_back(std::chrono::duration<double, std::nano>(clock_type::now() - t0).count() /
                 static_cast<double>(kBatch));
  }
  done.store(true, std::memory_order_relaxed);
  other.join();
  return median(ns);
}

// Runs torch_ref.sh and reads its {"best": ...} line. On the forced AVX2 path PyTorch is
// capped to AVX2 too: ATen's kernels by ATEN_CPU_CAPABILITY, OpenBLAS's by running the
// script with its AVX-512 kernel set (SkylakeX, chosen from /proc/cpuinfo) swapped for
// Haswell's; the script is read-only shared code, so the swap is made on the way in.
// PyTorch generates as many tokens as ablate (--gen_tokens; the script's own default for
// nanogpt-baby is 64, a quarter of the work at its context lengths), or none.
void run_torch(BenchResult& r, const std::string& script, int64_t gen_tokens, bool autocast) {
  const std::string args =
      " " + r.torch_name + " best" + (autocast ? " --autocast bf16" : "") +
      (gen_tokens > 0 ? " --gen_tokens " + std::to_string(gen_tokens) : " --no_gen") +
      " 2>/dev/null";
  std::string cmd = script + args;
  if (std::string(ablate::kernel_path()) == "avx2")
    cmd =
        "ATEN_CPU_CAPABILITY=avx2 bash -c \"$(sed "
        "'s/OPENBLAS_CORETYPE=SkylakeX/OPENBLAS_CORETYPE=Haswell/' '" +
        script + "')\" '" + script + "'" + args;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return;
  std::string out;
  char buf[4096];
  while (fgets(buf, sizeof buf, p)) out += buf;
  pclose(p);
  auto field = [&](const std::string& line, const std::string& key) -> std::string {
    auto k = line.find("\"" + key + "\": ");
    if (k == std::string::npos) return "";
    k += key.size() + 4;
    auto e = line.find_first_of(",}", k);
    return line.substr(k, e - k);
  };
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);)
    if (line.rfind("{\"best\"", 0) == 0) {
      std::string t = field(line, "train_tok_s"), gtok = field(line, "infer_tok_s");
      r.torch_train_tok_s = t.empty() || t == "null" ? 0 : std::stod(t);
      r.torch_gen_tok_s = gtok.empty() || gtok == "null" ? 0 : std::stod(gtok);
      r.torch_threads = field(line, "threads") + "/" + field(line, "blas_threads");
    }
}

// What `ablate bench` measures and how it prints, from its options.
struct BenchSettings {
  std::vector<std::string> files;
  std::string torch;  // torch_ref.sh, or "" when PyTorch is not run
  int64_t threads = 2, steps = 10, warmup = 3, gen_tokens = 256, rounds = 1;
  bool profile = false, markdown = false;
  ablate::Precision precision = ablate::Precision::float32;
  bool bf16() const { return precision == ablate::Precision::bf16; }
};

std::vector<std::string> bench_files(const po::variables_map& vm) {
  if (vm.count("config")) return vm["config"].as<std::vector<std::string>>();
  std::vector<std::string> files;
  fs::path dir = fs::path(ABLATE_SOURCE_DIR) / "experiments" / "bench";
  for (const auto& f : fs::directory_iterator(dir))
    if (f.path().extension() == ".yaml") files.push_back(f.path().string());
  std::sort(files.begin(), files.end());
  return files;
}

// torch_ref.sh from --torch or its default place, or "" (--no-torch, or no default script).
std::string torch_script(const po::variables_map& vm) {
  if (vm["no-torch"].as<bool>()) return "";
  const std::string torch =
      vm.count("torch")
          ? vm["torch"].as<std::string>()
          : (fs::path(ABLATE_SOURCE_DIR) / ".." / "shared" / "bench" / "torch_ref.sh").string();
  if (fs::exists(torch)) return torch;
  if (vm.count("torch")) throw ablate::cli::UsageError("--torch: no such file '" + torch + "'");
  std::cerr << "bench: " << torch << " not found; PyTorch is not run (give --torch PATH)\n";
  return "";
}

// The settings, or nothing when --help was printed.
std::optional<BenchSettings> parse_bench_options(const std::vector<std::string>& args) {
  po::options_description opts("options");
  opts.add_options()("config", po::value<std::vector<std::string>>()->composing(),
                     "bench YAML files (default: experiments/bench/*.yaml)")(
      "threads,j", po::value<int64_t>()->default_value(2), "ablate worker threads")(
      "steps", po::value<int64_t>()->default_value(10), "timed training steps")(
      "warmup", po::value<int64_t>()->default_value(3), "untimed warm-up steps")(
      "gen-tokens", po::value<int64_t>()->default_value(256),
      "tokens generated (batch 1) for the generation rate, by PyTorch too; 0: skip")(
      "torch", po::value<std::string>(),
      "path of torch_ref.sh to run side by side (default: ../shared/bench/torch_ref.sh if "
      "present)")("no-torch", po::bool_switch(), "do not run PyTorch")(
      "markdown", po::bool_switch(), "print the table as Markdown")(
      "profile", po::bool_switch(),
      "also time each op family, forward and backward, over as many extra steps")(
      "precision", po::value<std::string>()->default_value("float32"),
      "float32, or bf16: ablate trains with bf16 matrix products (and in float32 too, for the 'vs "
      "f32' column), PyTorch "
      "under autocast bf16")("repeat", po::value<int64_t>()->default_value(1),
                             "rounds of every config, ablate and PyTorch alternating; the table "
                             "shows medians and the ratios' ranges")(
      "plugin-dir", po::value<std::vector<std::string>>()->composing(),
      "extra plugin directory (repeatable)");
  po::positional_options_description pos;
  pos.add("config", -1);
  po::variables_map vm;
  if (!ablate::cli::parse(args, "ablate bench [CONFIG.yaml ...] [options]", opts, pos, vm))
    return std::nullopt;
  ablate::cli::add_plugin_dirs(vm);
  BenchSettings s;
  s.files = bench_files(vm);
  s.torch = torch_script(vm);
  s.threads = vm["threads"].as<int64_t>();
  if (s.threads < 1) throw ablate::cli::UsageError("--threads must be >= 1");
  s.precision = ablate::parse_precision(vm["precision"].as<std::string>(), "--precision");
  s.rounds = vm["repeat"].as<int64_t>();
  if (s.rounds < 1) throw ablate::cli::UsageError("--repeat must be >= 1");
  s.steps = vm["steps"].as<int64_t>();
  s.warmup = vm["warmup"].as<int64_t>();
  s.gen_tokens = vm["gen-tokens"].as<int64_t>();
  s.profile = vm["profile"].as<bool>();
  s.markdown = vm["markdown"].as<bool>();
  return s;
}

// One configuration in one round: ablate (and, for bf16, ablate in float32), the FMA peak
// around it and PyTorch, with a progress line on stderr.
BenchResult bench_config(const BenchSettings& s, const std::string& f, int64_t round) {
  // The FMA peak right before and right after each configuration, the higher of the
  // two: % peak compares the model with what the cores could do at the same time.
  const double peak_before = measure_fma_peak(s.threads, 0.5);
  // (Two spinning threads on one core would wait out each other's time slices.)
  const bool trip = s.threads > 1 && ablate::usable_cores() > 1;
  const double trip_before = trip ? measure_round_trip_ns() : 0.0;
  std::cerr << "bench: ";
  if (s.rounds > 1) std::cerr << "round " << round + 1 << "/" << s.rounds << ": ";
  std::cerr << f << " ..." << std::flush;
  double f32_tok_s = 0;
  if (s.bf16()) {
    f32_tok_s = bench_one(f, s.steps, s.warmup, 0, false, ablate::Precision::float32).train_tok_s;
    std::cerr << " float32 " << static_cast<int64_t>(f32_tok_s) << " tok/s,";
  }
  BenchResult r =
      bench_one(f, s.steps, s.warmup, s.gen_tokens, s.profile && round == 0, s.precision);
  r.f32_train_tok_s = f32_tok_s;
  r.peak_gflops = std::max(peak_before, measure_fma_peak(s.threads, 0.5));
  if (trip) r.round_trip_ns = std::max(trip_before, measure_round_trip_ns());
  std::cerr << " ablate " << (s.bf16() ? "bf16 " : "") << static_cast<int64_t>(r.train_tok_s)
            << " tok/s (FMA peak " << std::lround(r.peak_gflops) << " GFLOP/s";
  if (trip) std::cerr << ", core round trip " << std::lround(r.round_trip_ns) << " ns";
  std::cerr << ")";
  if (!s.torch.empty() && !r.torch_name.empty()) {
    run_torch(r, s.torch, s.gen_tokens, s.bf16());
    std::cerr << ", PyTorch " << static_cast<int64_t>(r.torch_train_tok_s) << " tok/s";
  }
  std::cerr << "\n";
  return r;
}

// Every configuration's results, one per round.
std::vector<std::vector<BenchResult>> run_rounds(const BenchSettings& s) {
  // Rounds of all configs rather than repeats of one: this VM's speed drifts by 10-20%
  // over minutes, and each round measures ablate and PyTorch a minute apart at most.
  std::cerr << "bench: " << ablate::cpu_model() << ", kernel path " << ablate::kernel_path()
            << "\n";
  if (s.bf16()) std::cerr << "bench: bf16 products on the " << ablate::bf16_kernel() << " kernel\n";
  if (s.bf16() && !ablate::bf16_notice().empty()) std::cerr << ablate::bf16_notice() << "\n";
  std::vector<std::vector<BenchResult>> runs(s.files.size());
  for (int64_t round = 0; round < s.rounds; ++round)
    for (size_t i = 0; i < s.files.size(); ++i)
      runs[i].push_back(bench_config(s, s.files[i], round));
  return runs;
}

std::string num(double v, int prec) {
  char b[32];
  std::snprintf(b, sizeof b, "%.*f", prec, v);
  return std::string(b);
}

// Prints table rows, aligned in columns or as Markdown.
struct TablePrinter {
  bool md = false;
  void row(const std::vector<std::string>& cells) const {
    const char* sep = md ? " | " : "  ";
    std::cout << (md ? "| " : "");
    for (size_t i = 0; i < cells.size(); ++i) {
      char buf[64];
      std::snprintf(buf, sizeof buf, md ? "%s" : (i == 0 ? "%-18s" : "%12s"), cells[i].c_str());
      std::cout << buf << (i + 1 < cells.size() ? sep : "");
    }
    std::cout << (md ? " |" : "") << "\n";
  }
};

// The throughput table's row of one configuration. Each cell: the median over the rounds;
// ratios and % peak are taken per round (both systems measured minutes apart at most), and
// with several rounds their range follows.
std::vector<std::string> throughput_cells(const std::vector<BenchResult>& rs, bool bf16) {
  const BenchResult& r = rs.front();
  auto values = [&](auto f) {
    std::vector<double> v;
    for (const auto& x : rs) v.push_back(f(x));
    return v;
  };
  auto med = [&](auto f) { return median(values(f)); };
  auto cell = [&](auto f, int prec, const std::string& unit) {
    const std::vector<double> v = values(f);
    std::string c = num(median(v), prec) + unit;
    if (v.size() > 1)
      c += " [" + num(*std::min_element(v.begin(), v.end()), prec) + "-" +
           num(*std::max_element(v.begin(), v.end()), prec) + "]";
    return c;
  };
  // (No generation ratio when either side skipped generation: --gen-tokens 0.)
  const bool t = r.torch_train_tok_s > 0, tg = r.torch_gen_tok_s > 0 && r.gen_tok_s > 0;
  uint64_t allocs = 0;
  for (const auto& x : rs) allocs = std::max(allocs, x.allocs_per_step);
  std::vector<std::string> cells = {
      r.name,
      std::to_string(r.params),
      num(med([](const BenchResult& x) { return x.train_tok_s; }), 0),
      num(med([](const BenchResult& x) { return x.gflops; }), 1),
      num(med([](const BenchResult& x) { return x.peak_gflops; }), 0),
      cell([](const BenchResult& x) { return 100 * x.gflops / x.peak_gflops; }, 0, "%"),
      t ? num(med([](const BenchResult& x) { return x.torch_train_tok_s; }), 0) : "-",
      t ? cell([](const BenchResult& x) { return x.train_tok_s / x.torch_train_tok_s; }, 2, "x")
        : "-",
      r.gen_tok_s > 0 ? num(med([](const BenchResult& x) { return x.gen_tok_s; }), 0) : "-",
      tg ? num(med([](const BenchResult& x) { return x.torch_gen_tok_s; }), 0) : "-",
      tg ? cell([](const BenchResult& x) { return x.gen_tok_s / x.torch_gen_tok_s; }, 1, "x") : "-",
      std::to_string(allocs),
      num(r.arena_mib, 0),
      r.round_trip_ns > 0 ? cell([](const BenchResult& x) { return x.round_trip_ns; }, 0, "")
                          : "-"};
  if (bf16)
    cells.insert(
        cells.begin() + 3,
        {num(med([](const BenchResult& x) { return x.f32_train_tok_s; }), 0),
         cell([](const BenchResult& x) { return x.train_tok_s / x.f32_train_tok_s; }, 2, "x")});
  return cells;
}

void print_throughput(const std::vector<std::vector<BenchResult>>& runs, bool bf16,
                      const TablePrinter& table) {
  std::vector<std::string> head = {
      "config", "params",    "tok/s",     "GFLOP/s",   "FMA peak",    "% peak",    "torch tok/s",
      "ratio",  "gen tok/s", "torch gen", "gen ratio", "allocs/step", "arena MiB", "round trip ns"};
  if (bf16) head.insert(head.begin() + 3, {"f32 tok/s", "vs f32"});
  table.row(head);
  if (table.md) {
    std::vector<std::string> align(head.size(), "---:");
    align[0] = "---";
    table.row(align);
  }
  for (const auto& rs : runs) table.row(throughput_cells(rs, bf16));
}

// Where a profiled configuration's training step goes, per op family.
void print_profile(const BenchResult& r, int64_t threads, const TablePrinter& table) {
  const double n = static_cast<double>(r.profile_steps), step_ms = r.profile_step_s / n * 1e3;
  std::cout << "\n"
            << (table.md ? "#### " : "") << r.name << ": where a training step's "
            << num(step_ms, 2) << " ms go (" << r.profile_steps << " profiled steps, " << threads
            << " threads)\n\n";
  table.row({"op family", "forward ms", "backward ms", "total ms", "% of step", "calls/step"});
  if (table.md) table.row({"---", "---:", "---:", "---:", "---:", "---:"});
  std::vector<std::pair<std::string, ablate::OpProfile::Entry>> ops(r.profile.ops.begin(),
                                                                    r.profile.ops.end());
  std::sort(ops.begin(), ops.end(), [](const auto& a, const auto& b) {
    return a.second.forward_s + a.second.backward_s > b.second.forward_s + b.second.backward_s;
  });
  double fwd = 0, bwd = 0;
  for (const auto& [op, e] : ops) {
    fwd += e.forward_s, bwd += e.backward_s;
    const double tot = (e.forward_s + e.backward_s) / n * 1e3;
    table.row({op, num(e.forward_s / n * 1e3, 3), num(e.backward_s / n * 1e3, 3), num(tot, 3),
               num(100 * tot / step_ms, 1), num(static_cast<double>(e.calls) / n, 0)});
  }
  const double opt_ms = r.profile_optimizer_s / n * 1e3,
               other = step_ms - (fwd + bwd) / n * 1e3 - opt_ms;
  table.row({"optimizer step", "-", "-", num(opt_ms, 3), num(100 * opt_ms / step_ms, 1), "1"});
  table.row(
      {"other (zero_grad, reset)", "-", "-", num(other, 3), num(100 * other / step_ms, 1), "-"});
  table.row({"all ops", num(fwd / n * 1e3, 3), num(bwd / n * 1e3, 3), num((fwd + bwd) / n * 1e3, 3),
             num(100 * (fwd + bwd) / n * 1e3 / step_ms, 1), "-"});
}

// The conditions of the measurement: CPU, kernel path, threads, precision, peak RSS.
void print_conditions(const BenchSettings& s, long peak_rss_kib) {
  const bool bf16 = s.bf16();
  std::cout << "\nCPU: " << ablate::cpu_model() << "; kernel path: " << ablate::kernel_path()
            << (std::getenv("ABLATE_ISA") && *std::getenv("ABLATE_ISA") ? " (forced by ABLATE_ISA)"
                                                                        : " (the CPU's best)")
            << (std::string(ablate::kernel_path()) == "avx2" && std::getenv("ABLATE_ISA")
                    ? "; PyTorch capped to AVX2"
                    : "")
            << "\nablate: " << s.threads << " threads, "
            << (bf16 ? std::string("bf16 products (") + ablate::bf16_kernel() +
                           " kernel; 'vs f32': against float32 in the same round)"
                     : std::string("float32"))
            << "; FP32 FMA peak measured before and after each config (GFLOP/s,"
            << " the higher of the two); round trip ns: a cache line between two threads,"
            << " before and after each config (the slower)"
            << "; PyTorch" << (bf16 ? " (autocast bf16)" : "")
            << ": best of 1, 2 and 2 threads with 1 BLAS thread"
            << " (torch_ref.sh); peak RSS " << peak_rss_kib / 1024 << " MiB";
  if (s.rounds > 1)
    std::cout << "; medians of " << s.rounds << " rounds, [min-max] of the per-round values";
  std::cout << "\n";
}

int cmd_bench(const std::vector<std::string>& args) {
  const std::optional<BenchSettings> s = parse_bench_options(args);
  if (!s) return 0;
  tbb::global_control gc(tbb::global_control::max_allowed_parallelism,
                         static_cast<size_t>(s->threads));
  const std::vector<std::vector<BenchResult>> runs = run_rounds(*s);
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  const TablePrinter table{s->markdown};
  print_throughput(runs, s->bf16(), table);
  for (const auto& rs : runs)
    if (rs.front().profile_steps > 0) print_profile(rs.front(), s->threads, table);
  print_conditions(*s, ru.ru_maxrss);
  return 0;
}

}  // namespace

ABLATE_COMMAND("bench", "training/generation throughput vs the PyTorch reference (torch_ref.sh)",
               cmd_bench);
