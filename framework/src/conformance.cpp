// Conformance checks per plugin family (see conformance.hpp). Each check is a named
// section: it passes unless an expectation fails or the plugin throws; the report says
// which and why. The checks are those the test suite ran per family before, so a variant
// built out of tree is held to the same bar as the built-in ones.
#include "ablate/conformance.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <sstream>

#include "ablate/attention.hpp"
#include "ablate/error.hpp"
#include "ablate/evaluator.hpp"
#include "ablate/ffn.hpp"
#include "ablate/model.hpp"
#include "ablate/norm.hpp"
#include "ablate/ops.hpp"
#include "ablate/optimizer.hpp"
#include "ablate/positional.hpp"
#include "ablate/registry.hpp"
#include "ablate/scheduler.hpp"
#include "ablate/tokenizer.hpp"

namespace ablate::conformance {

int Report::failed() const {
  return static_cast<int>(std::count_if(checks.begin(), checks.end(), [](const CheckResult& c) { return !c.passed; }));
}

std::string format_check(const CheckResult& c) {
  std::string line = (c.passed ? "  PASS  " : "  FAIL  ") + c.name;
  if (!c.detail.empty()) {
    // Multi-line details are indented under their check.
    std::string d = c.detail;
    for (size_t p = d.find('\n'); p != std::string::npos; p = d.find('\n', p + 9)) d.replace(p, 1, "\n        ");
    line += c.passed ? " (" + d + ")" : "\n        " + d;
  }
  return line + "\n";
}

std::string Report::text() const {
  std::string s;
  for (const CheckResult& c : checks) s += format_check(c);
  const int f = failed();
  return s + std::to_string(checks.size()) + " checks: " + std::to_string(checks.size() - static_cast<size_t>(f)) + " passed, " +
         std::to_string(f) + " failed\n";
}

Options options_from_yaml(const std::string& yaml, const std::string& path) {
  return Options(YAML::Load(yaml), std::make_shared<ConfigSource>(), path);
}

ModelDims small_dims(int64_t C, int64_t NH, int64_t context, bool bias) {
  ModelDims d;
  d.vocab_size = 11;
  d.d_model = C;
  d.n_heads = NH;
  d.n_layers = 2;
  d.context = context;
  d.bias = bias;
  d.layer = 0;
  return d;
}

std::vector<float> randn(size_t n, uint64_t seed, float std) {
  Rng r(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = std * r.normal();
  return v;
}

void randomize(ParamStore& s, uint64_t seed, float std) {
  Rng r(seed);
  for (Parameter* p : s.all())
    for (int64_t i = 0; i < p->value.numel(); ++i) p->value.data[i] = std * r.normal();
}

GradCheckResult check_gradients(const ForwardFn& forward, const std::vector<Parameter*>& wrt, int per_tensor, double h,
                                double rtol, double atol) {
  GradCheckResult res;
  Graph g;
  std::vector<std::vector<float>> R;
  Outputs ys = forward(g);
  Var loss;
  for (size_t k = 0; k < ys.size(); ++k) {
    const Tensor& t = g.value(ys[k]);
    R.push_back(randn(static_cast<size_t>(t.numel()), 1000 + k));
    Var r = g.constant(R.back().data(), t.rows, t.cols);
    Var s = sum(g, mul(g, ys[k], r));
    loss = loss.valid() ? add(g, loss, s) : s;
  }
  for (Parameter* p : wrt) std::memset(p->grad.data, 0, sizeof(float) * static_cast<size_t>(p->grad.numel()));
  g.backward(loss);
  std::vector<std::vector<float>> analytic;
  for (Parameter* p : wrt) analytic.emplace_back(p->grad.data, p->grad.data + p->grad.numel());

  auto eval = [&]() {
    g.reset();
    NoGrad ng(g);
    Outputs out = forward(g);
    double L = 0;
    for (size_t k = 0; k < out.size(); ++k) {
      const Tensor& t = g.value(out[k]);
      for (int64_t i = 0; i < t.numel(); ++i) L += static_cast<double>(R[k][static_cast<size_t>(i)]) * t.data[i];
    }
    return L;
  };
  const double L0 = eval();
  Rng pick(99);
  for (size_t pi = 0; pi < wrt.size(); ++pi) {
    Parameter& p = *wrt[pi];
    const int64_t n = p.value.numel();
    double scale = 0;
    for (float a : analytic[pi]) scale = std::max(scale, static_cast<double>(std::fabs(a)));
    scale = std::max(scale, 1.0);
    // Distinct elements: the first per_tensor of a seeded shuffle.
    std::vector<int64_t> idx(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) idx[static_cast<size_t>(i)] = i;
    const int64_t m = std::min<int64_t>(n, per_tensor);
    for (int64_t i = 0; i < m; ++i)
      std::swap(idx[static_cast<size_t>(i)], idx[static_cast<size_t>(i + static_cast<int64_t>(pick.below(static_cast<uint64_t>(n - i))))]);
    idx.resize(static_cast<size_t>(m));
    for (int64_t i : idx) {
      float& v = p.value.data[i];
      const float saved = v;
      v = static_cast<float>(saved + h);
      const double hp = static_cast<double>(v) - saved;
      const double Lp = eval();
      v = static_cast<float>(saved - h);
      const double hm = saved - static_cast<double>(v);
      const double Lm = eval();
      v = saved;
      const double fwd = (Lp - L0) / hp, bwd = (L0 - Lm) / hm, central = (Lp - Lm) / (hp + hm);
      const double a = analytic[pi][static_cast<size_t>(i)];
      const double tol = atol * scale + rtol * std::max(std::fabs(a), std::fabs(central));
      if (std::fabs(fwd - bwd) > tol + 0.05 * std::max(std::fabs(fwd), std::fabs(bwd))) {
        ++res.skipped;
        continue;
      }
      ++res.checked;
      if (std::fabs(a - central) > tol) {
        ++res.failed;
        res.report += p.name + "[" + std::to_string(i) + "]: analytic " + std::to_string(a) + ", numeric " +
                      std::to_string(central) + "\n";
      }
    }
  }
  return res;
}

namespace {

// ---- check machinery --------------------------------------------------------------------

struct Failure {
  std::string message;
};

void expect(bool ok, const std::string& message) {
  if (!ok) throw Failure{message};
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

std::string num(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

bool close(double a, double b, double eps) { return std::fabs(a - b) <= eps * (1.0 + std::max(std::fabs(a), std::fabs(b))); }

class Checker {
 public:
  Checker(Report& r, const Settings& s) : report_(r), settings_(s) {}
  // Runs one named check: it passes unless `fn` fails an expectation or throws. `fn` may
  // leave a note (shown in parentheses after PASS).
  void run(const std::string& name, const std::function<void(std::string& note)>& fn) {
    CheckResult c{name, true, ""};
    if (settings_.on_start) settings_.on_start(name);
    try {
      fn(c.detail);
    } catch (const Failure& f) {
      c.passed = false;
      c.detail = f.message;
    } catch (const std::exception& e) {
      c.passed = false;
      c.detail = std::string("threw: ") + e.what();
    } catch (...) {
      c.passed = false;
      c.detail = "threw an exception that is not a std::exception";
    }
    if (settings_.on_result) settings_.on_result(c);
    report_.checks.push_back(std::move(c));
  }

 private:
  Report& report_;
  const Settings& settings_;
};

// What a family's checks get: the variant's name and its options as a YAML map.
struct Subject {
  std::string family, name;
  YAML::Node options;  // {type: name, ...extra options}
  const Settings& settings;
  YAML::Node with(const std::string& key, const YAML::Node& value) const {
    YAML::Node n = YAML::Clone(options);
    n[key] = value;
    return n;
  }
};

template <class Base>
struct Built {
  std::unique_ptr<ParamStore> store;  // declared first: destroyed after the plugin
  std::unique_ptr<Base> obj;
  Base* operator->() const { return obj.get(); }
};

template <class Base>
Built<Base> build(const YAML::Node& node, const std::string& path, const ModelDims& d, uint64_t seed = 7) {
  Built<Base> b;
  b.store = std::make_unique<ParamStore>(seed);
  Options o(YAML::Clone(node), std::make_shared<ConfigSource>(), path);
  b.obj = PluginRegistry::instance().create<Base>(o, BuildContext{d, ParamScope(*b.store, "p."), seed});
  return b;
}

std::vector<float> values(Graph& g, Var v) {
  const Tensor& t = g.value(v);
  return std::vector<float>(t.data, t.data + t.numel());
}

void expect_shape(Graph& g, Var v, int64_t rows, int64_t cols, const std::string& what) {
  const Tensor& t = g.value(v);
  expect(t.rows == rows && t.cols == cols, what + " is (" + std::to_string(t.rows) + ", " + std::to_string(t.cols) +
                                               "), expected (" + std::to_string(rows) + ", " + std::to_string(cols) + ")");
}

void expect_finite(const std::vector<float>& v, const std::string& what) {
  for (size_t i = 0; i < v.size(); ++i)
    expect(std::isfinite(v[i]), what + " has a non-finite value " + num(v[i]) + " at element " + std::to_string(i));
}

void expect_gradients(const ForwardFn& f, const std::vector<Parameter*>& wrt, std::string& note) {
  const GradCheckResult r = check_gradients(f, wrt);
  std::string lines = r.report;
  size_t cut = 0;
  for (int k = 0; k < 6 && cut != std::string::npos; ++k) cut = lines.find('\n', cut ? cut + 1 : 0);
  if (cut != std::string::npos) lines = lines.substr(0, cut) + "\n...";
  expect(r.failed == 0, std::to_string(r.failed) + " of " + std::to_string(r.checked) +
                            " elements disagree with finite differences (name[index]: analytic vs numeric):\n" + lines);
  expect(r.checked > 0, "no element could be checked (" + std::to_string(r.skipped) + " on kinks)");
  expect(r.skipped <= r.checked, "too many elements on kinks: " + std::to_string(r.skipped) + " skipped, " +
                                     std::to_string(r.checked) + " checked");
  note = std::to_string(r.checked) + " elements checked" + (r.skipped ? ", " + std::to_string(r.skipped) + " on kinks skipped" : "");
}

template <class T>
struct Tag {
  using type = T;
};

// Calls f(Tag<Interface>{}) for the family's interface class.
template <class F>
void dispatch(const std::string& family, F&& f) {
  if (family == Ffn::kFamily) f(Tag<Ffn>{});
  else if (family == Norm::kFamily) f(Tag<Norm>{});
  else if (family == PositionalEncoding::kFamily) f(Tag<PositionalEncoding>{});
  else if (family == Attention::kFamily) f(Tag<Attention>{});
  else if (family == Tokenizer::kFamily) f(Tag<Tokenizer>{});
  else if (family == Optimizer::kFamily) f(Tag<Optimizer>{});
  else if (family == Scheduler::kFamily) f(Tag<Scheduler>{});
  else if (family == Evaluator::kFamily) f(Tag<Evaluator>{});
  else throw Error("no conformance checks for plugin family '" + family + "'. Families with checks: " + join(checked_families()));
}

// The key path a family's options live at in an experiment (for messages).
std::string path_of(const std::string& family) {
  if (family == Tokenizer::kFamily) return "tokenizer";
  if (family == Optimizer::kFamily) return "optimizer";
  if (family == Scheduler::kFamily) return "scheduler";
  if (family == Evaluator::kFamily) return "eval.0";
  return "model." + family;
}

// An unknown key is a ConfigError naming it; every numeric option rejects an absurd value
// (at least one of a huge negative and a huge positive one) with an error naming the key.
template <class Base>
void check_options(Checker& ck, const Subject& s, const ModelDims& d) {
  const std::string path = path_of(s.family);
  ck.run("rejects an unknown option", [&](std::string&) {
    try {
      build<Base>(s.with("no_such_option", YAML::Node(1)), path, d);
    } catch (const ConfigError& e) {
      expect(contains(e.what(), "no_such_option"), std::string("the error does not name the key: ") + e.what());
      return;
    }
    expect(false, "{no_such_option: 1} was accepted; read options with Options::get and create the variant "
                  "through PluginRegistry::create, which rejects keys nobody read");
  });
  ck.run("rejects absurd values of numeric options", [&](std::string& note) {
    int n_numeric = 0;
    for (const OptionDoc& doc : describe(s.family, s.name, d, path)) {
      std::vector<std::string> absurd;
      if (doc.type == "a number") absurd = {"-1e30", "1e30"};
      else if (doc.type == "an integer") absurd = {"-4611686018427387904", "4611686018427387904"};
      else if (doc.type == "a list of numbers") absurd = {"[-1e30, -1e30]", "[1e30, 1e30]"};
      else if (doc.type == "a list of integers") absurd = {"[-4611686018427387904]", "[4611686018427387904]"};
      else continue;
      ++n_numeric;
      int rejected = 0;
      for (const std::string& v : absurd) {
        try {
          build<Base>(s.with(doc.key, YAML::Load(v)), path, d);
        } catch (const ConfigError& e) {
          expect(contains(e.what(), path + "." + doc.key),
                 "option '" + doc.key + "' = " + v + " is rejected, but the error does not name " + path + "." + doc.key + ": " + e.what());
          ++rejected;
        }
      }
      expect(rejected > 0, "numeric option '" + doc.key + "' accepts both " + absurd[0] + " and " + absurd[1] +
                               "; give it a range (Options::get_in)");
    }
    note = n_numeric ? std::to_string(n_numeric) + " numeric option" + (n_numeric > 1 ? "s" : "") : "no numeric options";
  });
}

// ---- ffn and norm: x (rows, C) -> (rows, C) ----------------------------------------------

template <class Base>
void check_rowwise(Checker& ck, const Subject& s, int64_t C, int64_t rows, float x_std, float param_std, bool both_bias) {
  auto run = [&](Base& m, const std::vector<float>& x) {
    Graph g;
    Var y = m.forward(g, g.constant(x.data(), rows, C));
    expect_shape(g, y, rows, C, "the output");
    return values(g, y);
  };
  const std::vector<float> x = randn(static_cast<size_t>(rows * C), 3, x_std);
  std::vector<bool> biases = both_bias ? std::vector<bool>{false, true} : std::vector<bool>{true};
  for (bool bias : biases) {
    const ModelDims d = small_dims(C, 2, 16, bias);
    const std::string tag = both_bias ? std::string(" [model.bias ") + (bias ? "true]" : "false]") : "";
    ck.run("builds; output (rows, C) = (" + std::to_string(rows) + ", " + std::to_string(C) + "), finite" + tag, [&](std::string& note) {
      auto a = build<Base>(s.options, path_of(s.family), d);
      expect_finite(run(*a.obj, x), "the output");
      note = std::to_string(a.store->count()) + " parameters";
    });
    ck.run("deterministic: same input, same output; same seed, same parameters" + tag, [&](std::string&) {
      auto a = build<Base>(s.options, path_of(s.family), d);
      auto b = build<Base>(s.options, path_of(s.family), d);
      const auto ya = run(*a.obj, x);
      expect(ya == run(*a.obj, x), "two calls on the same input differ");
      expect(ya == run(*b.obj, x), "two instances built with the same seed differ");
    });
    ck.run("gradients by finite differences (parameters and input)" + tag, [&](std::string& note) {
      auto a = build<Base>(s.options, path_of(s.family), d);
      randomize(*a.store, 5, param_std);
      ParamStore inputs(11);
      Parameter& xp = inputs.add("x", rows, C, Init::kNormal, 1.0f);
      std::vector<Parameter*> wrt = a.store->all();
      wrt.push_back(&xp);
      expect_gradients([&](Graph& g) { return Outputs{a->forward(g, g.param(xp))}; }, wrt, note);
    });
  }
  check_options<Base>(ck, s, small_dims(C, 2, 16, true));
}

void check_ffn(Checker& ck, const Subject& s) { check_rowwise<Ffn>(ck, s, 12, 6, 1.0f, 0.5f, true); }
void check_norm(Checker& ck, const Subject& s) { check_rowwise<Norm>(ck, s, 10, 5, 2.0f, 1.0f, false); }

// ---- positional ----------------------------------------------------------------------------

void check_positional(Checker& ck, const Subject& s) {
  constexpr int64_t C = 8, NH = 2, HS = 4, NKV = 1, B = 2, T = 5;
  const ModelDims d = small_dims(C, NH, 16);
  const std::string path = path_of(s.family);
  auto embed = [&](PositionalEncoding& p, const std::vector<float>& x, int64_t b, int64_t t, int64_t pos0) {
    Graph g;
    Var y = p.embed(g, g.constant(x.data(), b * t, C), PosContext{b, t, pos0});
    expect_shape(g, y, b * t, C, "embed's output");
    return values(g, y);
  };
  auto rotate = [&](PositionalEncoding& p, const std::vector<float>& q, const std::vector<float>& k, int64_t b, int64_t t,
                    int64_t pos0) {
    Graph g;
    Var vq = g.constant(q.data(), b * t, NH * HS), vk = g.constant(k.data(), b * t, NKV * HS);
    p.rotate(g, vq, vk, PosContext{b, t, pos0}, NH, NKV, HS);
    expect_shape(g, vq, b * t, NH * HS, "rotated q");
    expect_shape(g, vk, b * t, NKV * HS, "rotated k");
    std::vector<float> out = values(g, vq), kv = values(g, vk);
    out.insert(out.end(), kv.begin(), kv.end());
    return out;
  };
  auto rows = [](const std::vector<float>& v, int64_t from, int64_t n, int64_t width) {
    return std::vector<float>(v.begin() + from * width, v.begin() + (from + n) * width);
  };
  const auto x = randn(static_cast<size_t>(B * T * C), 3);
  const auto q = randn(static_cast<size_t>(B * T * NH * HS), 4), k = randn(static_cast<size_t>(B * T * NKV * HS), 5);

  ck.run("embed: output (B*T, C), finite, deterministic, same seed same result", [&](std::string& note) {
    auto a = build<PositionalEncoding>(s.options, path, d), b = build<PositionalEncoding>(s.options, path, d);
    const auto ya = embed(*a.obj, x, B, T, 0);
    expect_finite(ya, "embed's output");
    expect(ya == embed(*a.obj, x, B, T, 0), "two calls on the same input differ");
    expect(ya == embed(*b.obj, x, B, T, 0), "two instances built with the same seed differ");
    note = std::to_string(a.store->count()) + " parameters";
  });
  ck.run("embed: position-absolute (a window starting at pos0 = the same rows of a longer sequence)", [&](std::string&) {
    auto a = build<PositionalEncoding>(s.options, path, d);
    const auto x1 = rows(x, 0, T, C);
    const auto full = embed(*a.obj, x1, 1, T, 0);
    const auto tail = embed(*a.obj, rows(x1, 2, T - 2, C), 1, T - 2, 2);
    const auto ref = rows(full, 2, T - 2, C);
    for (size_t i = 0; i < tail.size(); ++i)
      expect(close(tail[i], ref[i], 1e-5), "element " + std::to_string(i) + " at pos0 = 2: " + num(tail[i]) + " vs " + num(ref[i]));
  });
  ck.run("rotate: q (B*T, NH*HS) and k (B*T, NKV*HS) with NKV < NH; deterministic; position-absolute", [&](std::string&) {
    auto a = build<PositionalEncoding>(s.options, path, d), b = build<PositionalEncoding>(s.options, path, d);
    const auto r = rotate(*a.obj, q, k, B, T, 0);
    expect_finite(r, "rotated q and k");
    expect(r == rotate(*b.obj, q, k, B, T, 0), "two instances built with the same seed differ");
    const auto r1 = rotate(*a.obj, rows(q, 0, T, NH * HS), rows(k, 0, T, NKV * HS), 1, T, 0);
    const auto r2 = rotate(*a.obj, rows(q, 3, 2, NH * HS), rows(k, 3, 2, NKV * HS), 1, 2, 3);
    for (int64_t i = 0; i < 2 * NH * HS; ++i)
      expect(close(r2[static_cast<size_t>(i)], r1[static_cast<size_t>(3 * NH * HS + i)], 1e-5),
             "q rotated at pos0 = 3 differs from the same rows of a longer sequence at element " + std::to_string(i));
  });
  ck.run("rotates(): false only if rotate() leaves q and k as they are (attention then skips it)", [&](std::string& note) {
    auto a = build<PositionalEncoding>(s.options, path, d);
    Graph g;
    const Var q0 = g.constant(q.data(), B * T, NH * HS), k0 = g.constant(k.data(), B * T, NKV * HS);
    Var vq = q0, vk = k0;
    a->rotate(g, vq, vk, PosContext{B, T, 0}, NH, NKV, HS);
    const bool unchanged = vq.id == q0.id && vk.id == k0.id && values(g, q0) == q && values(g, k0) == k;
    note = a->rotates() ? "rotates" : "does not rotate";
    if (!a->rotates())
      expect(unchanged, "rotates() is false but rotate() changed q or k: return true from rotates()");
  });
  ck.run("attention slopes: finite and non-negative, one per head", [&](std::string& note) {
    auto a = build<PositionalEncoding>(s.options, path, d);
    const float* sl = a->attention_slopes();
    if (!sl) {
      note = "none";
      return;
    }
    for (int64_t h = 0; h < NH; ++h)
      expect(std::isfinite(sl[h]) && sl[h] >= 0.0f, "slope of head " + std::to_string(h) + " is " + num(sl[h]));
  });
  ck.run("max_positions: covers the context; positions beyond it are an ablate::Error", [&](std::string& note) {
    auto a = build<PositionalEncoding>(s.options, path, d);
    const int64_t m = a->max_positions();
    if (m < 0) {
      note = "unlimited";
      return;
    }
    expect(m >= d.context, "max_positions " + std::to_string(m) + " is shorter than the context " + std::to_string(d.context));
    embed(*a.obj, std::vector<float>(static_cast<size_t>(m * C), 0.5f), 1, m, 0);
    bool threw = false;
    try {
      embed(*a.obj, std::vector<float>(2 * C, 0.5f), 1, 2, m - 1);
    } catch (const Error&) {
      threw = true;
    }
    expect(threw, "embedding positions " + std::to_string(m - 1) + ".." + std::to_string(m) + " did not throw");
  });
  ck.run("gradients by finite differences (embed and rotate; parameters and inputs)", [&](std::string& note) {
    auto a = build<PositionalEncoding>(s.options, path, d);
    randomize(*a.store, 6);
    ParamStore inputs(12);
    Parameter& xp = inputs.add("x", B * T, C, Init::kNormal, 1.0f);
    Parameter& qp = inputs.add("q", B * T, NH * HS, Init::kNormal, 1.0f);
    Parameter& kp = inputs.add("k", B * T, NKV * HS, Init::kNormal, 1.0f);
    std::vector<Parameter*> wrt = a.store->all();
    for (Parameter* p : {&xp, &qp, &kp}) wrt.push_back(p);
    expect_gradients(
        [&](Graph& g) {
          Var vq = g.param(qp), vk = g.param(kp);
          a->rotate(g, vq, vk, PosContext{B, T, 1}, NH, NKV, HS);
          return Outputs{a->embed(g, g.param(xp), PosContext{B, T, 1}), vq, vk};
        },
        wrt, note);
  });
  check_options<PositionalEncoding>(ck, s, d);
}

// ---- attention -----------------------------------------------------------------------------

void check_attention(Checker& ck, const Subject& s) {
  constexpr int64_t C = 8, NH = 2, B = 2, T = 5;
  const ModelDims d = small_dims(C, NH, 16);
  const std::string path = path_of(s.family);
  auto run = [&](Attention& a, PositionalEncoding* pos, const std::vector<float>& x, int64_t b, int64_t t,
                 float* weights = nullptr, const uint8_t* key_mask = nullptr) {
    Graph g;
    AttentionInput in;
    in.pos = {b, t, 0};
    in.positional = pos;
    in.weights_out = weights;
    in.key_mask = key_mask;
    Var y = a.forward(g, g.constant(x.data(), b * t, C), in);
    expect_shape(g, y, b * t, C, "the output");
    return values(g, y);
  };
  // No positional encoding, then every registered one: each acts inside attention.
  struct Pos {
    std::string name;
    Built<PositionalEncoding> p;
    std::string label() const { return name.empty() ? "no positional encoding" : "positional '" + name + "'"; }
  };
  std::vector<Pos> all;
  all.push_back({"", {}});
  std::string unbuildable;
  for (const PluginEntry* e : PluginRegistry::instance().variants(PositionalEncoding::kFamily)) {
    YAML::Node n;
    n["type"] = e->info->name;
    try {
      all.push_back({e->info->name, build<PositionalEncoding>(n, "model.positional", d)});
    } catch (const std::exception&) {
      unbuildable += std::string(unbuildable.empty() ? "" : ", ") + e->info->name;
    }
  }
  const auto x = randn(static_cast<size_t>(B * T * C), 3);
  std::vector<const Pos*> usable;

  ck.run("builds; output (B*T, C), finite; with no positional encoding and with each registered one", [&](std::string& note) {
    auto a = build<Attention>(s.options, path, d);
    expect(a->n_heads() > 0 && a->kv_width() > 0, "n_heads() = " + std::to_string(a->n_heads()) + ", kv_width() = " +
                                                       std::to_string(a->kv_width()) + "; both must be positive");
    std::string refused;
    for (const Pos& p : all) {
      try {
        expect_finite(run(*a.obj, p.p.obj.get(), x, B, T), "the output with " + p.label());
        usable.push_back(&p);
      } catch (const ConfigError&) {
        throw;
      } catch (const Error& e) {
        if (p.name.empty()) throw;
        refused += "\n" + p.name + ": " + e.what();
      }
    }
    note = std::to_string(a.store->count()) + " parameters; positional encodings: " + std::to_string(usable.size() - 1) + " used";
    if (!refused.empty()) note += "; refused with an ablate::Error (allowed):" + refused;
    if (!unbuildable.empty()) note += "; not buildable at these sizes: " + unbuildable;
  });
  if (usable.empty()) return;

  ck.run("deterministic: same input, same output; same seed, same parameters", [&](std::string&) {
    auto a = build<Attention>(s.options, path, d), b = build<Attention>(s.options, path, d);
    for (const Pos* p : usable) {
      const auto ya = run(*a.obj, p->p.obj.get(), x, B, T);
      expect(ya == run(*a.obj, p->p.obj.get(), x, B, T), "two calls differ, with " + p->label());
      expect(ya == run(*b.obj, p->p.obj.get(), x, B, T), "two instances built with the same seed differ, with " + p->label());
    }
  });
  ck.run("attention weights (weights_out): (B, NH, T, T) probabilities, rows sum to 1", [&](std::string&) {
    auto a = build<Attention>(s.options, path, d);
    const int64_t NHa = a->n_heads();
    for (const Pos* p : usable) {
      std::vector<float> w(static_cast<size_t>(B * NHa * T * T), -1.0f);
      run(*a.obj, p->p.obj.get(), x, B, T, w.data());
      for (int64_t r = 0; r < B * NHa * T; ++r) {
        double sum = 0;
        for (int64_t j = 0; j < T; ++j) {
          const float v = w[static_cast<size_t>(r * T + j)];
          expect(v >= 0.0f && v <= 1.0f, "weight " + num(v) + " in row " + std::to_string(r) + " with " + p->label() +
                                             (v == -1.0f ? " (never written: fill AttentionInput::weights_out)" : ""));
          sum += v;
        }
        expect(std::fabs(sum - 1.0) < 1e-5, "row " + std::to_string(r) + " sums to " + num(sum) + " with " + p->label());
      }
    }
  });
  ck.run("key padding mask: all-real changes nothing; padded keys get weight 0 and do not affect real tokens", [&](std::string&) {
    auto a = build<Attention>(s.options, path, d);
    const int64_t NHa = a->n_heads();
    // Sequence 0 padded at its end, sequence 1 at its start.
    std::vector<uint8_t> all_real(static_cast<size_t>(B * T), 1), mask = all_real;
    mask[3] = mask[4] = 0;
    mask[T + 0] = mask[T + 1] = 0;
    std::vector<float> x2 = x;
    const auto noise = randn(x.size(), 77, 3.0f);
    for (int64_t r = 0; r < B * T; ++r)
      if (!mask[static_cast<size_t>(r)])
        for (int64_t c = 0; c < C; ++c) x2[static_cast<size_t>(r * C + c)] = noise[static_cast<size_t>(r * C + c)];
    for (const Pos* p : usable) {
      PositionalEncoding* pp = p->p.obj.get();
      expect(run(*a.obj, pp, x, B, T, nullptr, all_real.data()) == run(*a.obj, pp, x, B, T),
             "a mask without padding changes the output, with " + p->label());
      std::vector<float> w(static_cast<size_t>(B * NHa * T * T), -1.0f);
      const auto y1 = run(*a.obj, pp, x, B, T, w.data(), mask.data());
      const auto y2 = run(*a.obj, pp, x2, B, T, nullptr, mask.data());
      for (int64_t r = 0; r < B * T; ++r) {
        if (!mask[static_cast<size_t>(r)]) continue;
        for (int64_t c = 0; c < C; ++c) {
          const size_t i = static_cast<size_t>(r * C + c);
          expect(close(y1[i], y2[i], 1e-5), "changing padding tokens changes the output of real token " + std::to_string(r % T) +
                                                " of sequence " + std::to_string(r / T) + " (" + num(y1[i]) + " vs " +
                                                num(y2[i]) + "), with " + p->label());
        }
      }
      for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < NHa; ++h)
          for (int64_t i = 0; i < T; ++i) {
            if (!mask[static_cast<size_t>(b * T + i)]) continue;
            for (int64_t j = 0; j < T; ++j)
              if (!mask[static_cast<size_t>(b * T + j)])
                expect(w[static_cast<size_t>(((b * NHa + h) * T + i) * T + j)] == 0.0f,
                       "query " + std::to_string(i) + " of sequence " + std::to_string(b) + " gives weight to padded key " +
                           std::to_string(j) + ", with " + p->label());
          }
    }
  });
  ck.run("causal variants: KV-cache decoding one token at a time reproduces the full forward", [&](std::string& note) {
    auto a = build<Attention>(s.options, path, d);
    // Causal if the outputs before the last position ignore the last token.
    std::vector<float> xl = x;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t c = 0; c < C; ++c) xl[static_cast<size_t>((b * T + T - 1) * C + c)] += 1.0f;
    const auto y0 = run(*a.obj, nullptr, x, B, T), y1 = run(*a.obj, nullptr, xl, B, T);
    bool causal = true;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < (T - 1) * C; ++i)
        causal = causal && close(y0[static_cast<size_t>(b * T * C + i)], y1[static_cast<size_t>(b * T * C + i)], 1e-6);
    if (!causal) {
      note = "not causal: outputs depend on later tokens (an encoder), so incremental decoding is not checked";
      return;
    }
    for (const Pos* p : usable) {
      const auto ya = run(*a.obj, p->p.obj.get(), x, B, T);
      KVCache cache;
      cache.init(1, T, a->kv_width());
      Graph g;
      NoGrad ng(g);
      for (int64_t t = 0; t < T; ++t) {
        g.reset();
        AttentionInput in;
        in.pos = {1, 1, t};
        in.positional = p->p.obj.get();
        in.cache = &cache;
        Var y = a->forward(g, g.constant(x.data() + t * C, 1, C), in);
        expect_shape(g, y, 1, C, "the output of one cached step");
        const auto yt = values(g, y);
        for (int64_t c = 0; c < C; ++c)
          expect(close(yt[static_cast<size_t>(c)], ya[static_cast<size_t>(t * C + c)], 1e-4),
                 "step " + std::to_string(t) + " differs from the full forward (" + num(yt[static_cast<size_t>(c)]) + " vs " +
                     num(ya[static_cast<size_t>(t * C + c)]) + "), with " + p->label());
      }
      expect(cache.length == T, "the cache holds " + std::to_string(cache.length) + " positions after " + std::to_string(T) + " steps");
    }
  });
  ck.run("gradients by finite differences (parameters and input; without and with a padding mask)", [&](std::string& note) {
    auto a = build<Attention>(s.options, path, d);
    randomize(*a.store, 5, 0.3f);
    ParamStore inputs(11);
    Parameter& xp = inputs.add("x", B * T, C, Init::kNormal, 1.0f);
    std::vector<Parameter*> wrt = a.store->all();
    wrt.push_back(&xp);
    std::vector<uint8_t> mask(static_cast<size_t>(B * T), 1);
    mask[static_cast<size_t>(T)] = 0;
    mask[static_cast<size_t>(T - 1)] = 0;
    int checked = 0;
    for (const Pos* p : usable)
      for (const uint8_t* km : {static_cast<const uint8_t*>(nullptr), static_cast<const uint8_t*>(mask.data())}) {
        std::string n;
        try {
          expect_gradients(
              [&](Graph& g) {
                AttentionInput in;
                in.pos = {B, T, 0};
                in.positional = p->p.obj.get();
                in.key_mask = km;
                return Outputs{a->forward(g, g.param(xp), in)};
              },
              wrt, n);
        } catch (const Failure& f) {
          throw Failure{"with " + p->label() + (km ? " and a padding mask" : "") + ": " + f.message};
        }
        ++checked;
      }
    note = std::to_string(checked) + " configurations";
  });
  check_options<Attention>(ck, s, d);
}

// ---- tokenizer -----------------------------------------------------------------------------

void check_tokenizer(Checker& ck, const Subject& s) {
  const std::string& text = s.settings.sample_text.empty() ? builtin_sample_text() : s.settings.sample_text;
  size_t cut = text.size() * 9 / 10;
  while (cut < text.size() && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) ++cut;
  const std::string train = text.substr(0, cut), held = text.substr(cut);
  const ModelDims d = small_dims();
  auto fitted = [&]() {
    auto t = build<Tokenizer>(s.options, "tokenizer", d);
    t->fit(train);
    return t;
  };
  auto in_range = [](const std::vector<int32_t>& ids, int64_t V, const std::string& what) {
    for (size_t i = 0; i < ids.size(); ++i)
      expect(ids[i] >= 0 && ids[i] < V, what + ": id " + std::to_string(ids[i]) + " at " + std::to_string(i) +
                                            " is outside [0, " + std::to_string(V) + ")");
  };
  ck.run("fit; ids in [0, V); decode(encode(text)) == text; at most one token per byte", [&](std::string& note) {
    auto t = fitted();
    const int64_t V = t->vocab_size();
    expect(V > 0, "vocab_size() is " + std::to_string(V));
    const auto ids = t->encode(train);
    expect(!ids.empty(), "the training text encodes to no ids");
    in_range(ids, V, "the training text");
    expect(ids.size() <= train.size(), std::to_string(ids.size()) + " tokens for " + std::to_string(train.size()) + " bytes");
    const std::string back = t->decode(ids);
    if (back != train) {
      size_t i = 0;
      while (i < back.size() && i < train.size() && back[i] == train[i]) ++i;
      expect(false, "the round trip differs from byte " + std::to_string(i) + ": '" + train.substr(i, 20) + "' became '" +
                        back.substr(i, 20) + "'");
    }
    in_range(t->encode(held), V, "held-out text");
    expect(t->pad_id() < V, "pad_id() " + std::to_string(t->pad_id()) + " is not below vocab_size() " + std::to_string(V));
    note = "V = " + std::to_string(V) + ", " + std::to_string(ids.size()) + " tokens for " + std::to_string(train.size()) + " bytes";
  });
  ck.run("deterministic fit; save() then load() restores it exactly", [&](std::string&) {
    auto t = fitted(), again = fitted();
    expect(again->save() == t->save(), "fitting the same text twice gives different states");
    auto loaded = build<Tokenizer>(s.options, "tokenizer", d);
    loaded->load(t->save());
    expect(loaded->vocab_size() == t->vocab_size(), "vocab_size() after load is " + std::to_string(loaded->vocab_size()) +
                                                        ", before " + std::to_string(t->vocab_size()));
    expect(loaded->encode(held) == t->encode(held), "the loaded tokenizer encodes differently");
    expect(loaded->save() == t->save(), "saving the loaded tokenizer gives a different state");
  });
  ck.run("unseen characters and out-of-range ids do not throw; empty text <-> no ids", [&](std::string&) {
    auto t = fitted();
    const int64_t V = t->vocab_size();
    in_range(t->encode("\x01 caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80 \xFF"), V, "unseen text");
    t->decode({-1, static_cast<int32_t>(V), 1 << 30});
    expect(t->encode("").empty(), "empty text encodes to ids");
    expect(t->decode({}).empty(), "no ids decode to text");
  });
  ck.run("load() rejects a state that is not its own with an ablate::Error", [&](std::string&) {
    auto t = build<Tokenizer>(s.options, "tokenizer", d);
    bool threw = false;
    try {
      t->load("garbage");
    } catch (const Error&) {
      threw = true;
    }
    expect(threw, "load(\"garbage\") did not throw");
  });
  check_options<Tokenizer>(ck, s, d);
}

// ---- optimizer -----------------------------------------------------------------------------

// Two parameters (one decayed, one not) and a diagonal quadratic 0.5 * sum c (p - t)^2.
struct Quadratic {
  ParamStore store{3};
  std::vector<float> target, curv;
  Quadratic() {
    store.add("w", 3, 4, Init::kNormal, 1.0f, true);
    store.add("b", 1, 4, Init::kNormal, 1.0f, false);
    target = randn(16, 4);
    curv = randn(16, 5);
    for (float& c : curv) c = 0.5f + std::fabs(c);
  }
  // Sets the gradients, returns the loss.
  double grad() {
    double loss = 0;
    size_t k = 0;
    for (Parameter* p : store.all())
      for (int64_t i = 0; i < p->value.numel(); ++i, ++k) {
        const double r = p->value.data[i] - target[k];
        loss += 0.5 * curv[k] * r * r;
        p->grad.data[i] = static_cast<float>(curv[k] * r);
      }
    return loss;
  }
  std::vector<float> flat() const {
    std::vector<float> v;
    for (Parameter* p : store.all()) v.insert(v.end(), p->value.data, p->value.data + p->value.numel());
    return v;
  }
  void run(Optimizer& o, int64_t first, int64_t n) {
    for (int64_t s = first; s < first + n; ++s) {
      grad();
      o.step(store.all(), o.base_lr(), s);
    }
  }
};

void check_optimizer(Checker& ck, const Subject& s) {
  const ModelDims d = small_dims();
  const std::string path = path_of(s.family);
  ck.run("positive base_lr; 100 steps decrease a quadratic; parameters stay finite", [&](std::string& note) {
    auto o = build<Optimizer>(s.options, path, d);
    expect(o->base_lr() > 0.0f, "base_lr() is " + num(o->base_lr()));
    Quadratic q;
    o->init(q.store.all());
    const double before = q.grad();
    q.run(*o.obj, 1, 100);
    const double after = q.grad();
    expect_finite(q.flat(), "the parameters");
    expect(after < before, "the loss went from " + num(before) + " to " + num(after));
    note = "loss " + num(before) + " -> " + num(after);
  });
  ck.run("state buffers: unique names, each as large as a parameter", [&](std::string& note) {
    auto o = build<Optimizer>(s.options, path, d);
    Quadratic q;
    o->init(q.store.all());
    q.run(*o.obj, 1, 3);
    std::set<std::string> names;
    std::multiset<size_t> sizes;
    for (Parameter* p : q.store.all()) sizes.insert(static_cast<size_t>(p->value.numel()));
    for (const StateBuffer& b : o->state()) {
      expect(names.insert(b.name).second, "state buffer name '" + b.name + "' is used twice");
      expect(b.data != nullptr, "state buffer '" + b.name + "' has no data");
      expect(sizes.count(b.data->size()) > 0, "state buffer '" + b.name + "' has " + std::to_string(b.data->size()) +
                                                  " values, not the size of any parameter");
    }
    note = std::to_string(names.size()) + " buffers for 2 parameters";
  });
  ck.run("deterministic; resumes bit for bit from its state buffers (as checkpoints do)", [&](std::string&) {
    Quadratic q1, q2;
    auto o1 = build<Optimizer>(s.options, path, d), o2 = build<Optimizer>(s.options, path, d);
    o1->init(q1.store.all());
    o2->init(q2.store.all());
    q1.run(*o1.obj, 1, 10);
    q2.run(*o2.obj, 1, 10);
    expect(q1.flat() == q2.flat(), "two runs from the same start differ");
    std::map<std::string, std::vector<float>> saved;
    for (const auto& b : o1->state()) saved[b.name] = *b.data;
    const std::vector<float> params = q1.flat();
    q1.run(*o1.obj, 11, 5);
    Quadratic q3;
    size_t k = 0;
    for (Parameter* p : q3.store.all())
      for (int64_t i = 0; i < p->value.numel(); ++i) p->value.data[i] = params[k++];
    auto o3 = build<Optimizer>(s.options, path, d);
    o3->init(q3.store.all());
    for (const auto& b : o3->state()) {
      expect(saved.count(b.name) > 0, "a fresh optimizer has a state buffer '" + b.name + "' that the first did not have");
      *b.data = saved[b.name];
    }
    q3.run(*o3.obj, 11, 5);
    expect(q3.flat() == q1.flat(), "steps 11-15 after restoring the state differ from the uninterrupted run");
  });
  check_options<Optimizer>(ck, s, d);
}

// ---- scheduler -----------------------------------------------------------------------------

void check_scheduler(Checker& ck, const Subject& s) {
  const ModelDims d = small_dims();
  const std::string path = path_of(s.family);
  ck.run("factors finite and in [0, 1] over runs of 1 to 60000 steps; positive mid-run", [&](std::string&) {
    auto sc = build<Scheduler>(s.options, path, d);
    for (int64_t total : {1, 2, 10, 1000, 60000}) {
      const int64_t stride = std::max<int64_t>(1, total / 500);
      for (int64_t step = 0; step <= total + 10; step += stride) {
        const float f = sc->factor(step, total);
        expect(std::isfinite(f) && f >= 0.0f && f <= 1.0001f,
               "factor(" + std::to_string(step) + ", " + std::to_string(total) + ") = " + num(f));
      }
      expect(sc->factor(total / 2, total) > 0.0f, "factor is 0 half way through a run of " + std::to_string(total) + " steps");
    }
  });
  ck.run("deterministic: two instances give the same factors", [&](std::string&) {
    auto a = build<Scheduler>(s.options, path, d), b = build<Scheduler>(s.options, path, d);
    for (int64_t step = 0; step <= 1000; step += 7)
      expect(a->factor(step, 1000) == b->factor(step, 1000), "factor(" + std::to_string(step) + ", 1000) differs");
  });
  check_options<Scheduler>(ck, s, d);
}

// ---- evaluator -----------------------------------------------------------------------------

void check_evaluator(Checker& ck, const Subject& s) {
  const ModelDims d = small_dims();
  const std::string path = path_of(s.family);
  auto& reg = PluginRegistry::instance();
  auto toks = reg.variants(Tokenizer::kFamily);
  if (toks.empty()) {
    ck.run("a tokenizer to evaluate with", [](std::string&) { expect(false, "no tokenizer plugin found in the plugin path"); });
    return;
  }
  YAML::Node tn;
  tn["type"] = toks.front()->info->name;
  std::unique_ptr<Tokenizer> tok;
  std::unique_ptr<Model> model;
  bool built = false;
  ck.run("builds with the given options; a tiny model to evaluate", [&](std::string& note) {
    auto t = build<Tokenizer>(tn, "tokenizer", d);
    t->fit(s.settings.sample_text.empty() ? builtin_sample_text() : s.settings.sample_text);
    model = std::make_unique<Model>(options_from_yaml("{d_model: 16, n_heads: 2, n_layers: 1, context: 32}", "model"),
                                    t->vocab_size(), 1);
    tok = std::move(t.obj);
    try {
      build<Evaluator>(s.options, path, d);
    } catch (const ConfigError& e) {
      throw Failure{std::string(e.what()) + "\n(give the options it needs with --options '{key: value, ...}')"};
    }
    built = true;
    note = std::string("tokenizer '") + toks.front()->info->name + "', " + std::to_string(model->n_params()) + " parameters";
  });
  if (!built) return;
  ck.run("evaluate: named metrics, the same columns and values on repeated calls", [&](std::string& note) {
    auto e = build<Evaluator>(s.options, path, d);
    auto call = [&](bool final) {
      EvalContext ctx{*model, *tok, 10, final, 1, std::string(".")};
      return e->evaluate(ctx);
    };
    const auto r1 = call(false), r2 = call(false), r3 = call(true);
    expect(!r1.empty(), "no metrics");
    expect(r1.size() == r2.size() && r1.size() == r3.size(), "the number of columns changes between calls");
    for (size_t i = 0; i < r1.size(); ++i) {
      expect(!r1[i].first.empty(), "metric " + std::to_string(i) + " has no name");
      expect(r1[i].first == r2[i].first && r1[i].first == r3[i].first, "column " + std::to_string(i) + " changes name");
      const bool same = r1[i].second == r2[i].second || (std::isnan(r1[i].second) && std::isnan(r2[i].second));
      expect(same, "metric '" + r1[i].first + "' differs between two identical calls: " + num(r1[i].second) + " vs " + num(r2[i].second));
    }
    note = std::to_string(r1.size()) + " metrics";
  });
  check_options<Evaluator>(ck, s, d);
}

// The plugin's own record: a YAML-friendly name and a summary for `ablate plugins`.
void check_info(Checker& ck, const PluginEntry& e) {
  ck.run("plugin info: lower-case name usable in YAML, non-empty summary", [&](std::string&) {
    const std::string name = e.info->name;
    expect(!name.empty() && name.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_") == std::string::npos,
           "name '" + name + "' should be lower case letters, digits and underscores (it is written in YAML)");
    expect(e.info->summary && *e.info->summary, "the summary is empty; `ablate plugins` shows it");
  });
}

}  // namespace

std::vector<std::string> checked_families() {
  return {Attention::kFamily, Evaluator::kFamily, Ffn::kFamily, Norm::kFamily, Optimizer::kFamily,
          PositionalEncoding::kFamily, Scheduler::kFamily, Tokenizer::kFamily};
}

bool has_checks(const std::string& family) {
  const auto f = checked_families();
  return std::find(f.begin(), f.end(), family) != f.end();
}

std::vector<OptionDoc> describe(const std::string& family, const std::string& name, const ModelDims& dims, const std::string& path) {
  const PluginEntry* e = PluginRegistry::instance().find(family, name);
  if (!e) throw Error("no " + family + " variant named '" + name + "' is registered");
  Options o = Options::describe(path);
  ParamStore store(1);
  dispatch(family, [&](auto tag) {
    using Base = typename decltype(tag)::type;
    try {
      std::unique_ptr<Base> obj(static_cast<Base*>(e->info->create(o, BuildContext{dims, ParamScope(store, "p."), 1})));
    } catch (const std::exception&) {
      // Variants with required options may refuse an empty map; what was read is listed.
    }
  });
  return o.docs();
}

Report check_variant(const std::string& family, const std::string& name, const Settings& settings) {
  const PluginEntry* e = PluginRegistry::instance().find(family, name);
  if (!e) throw Error("no " + family + " variant named '" + name + "' is registered");
  YAML::Node opts;
  try {
    opts = settings.options_yaml.empty() ? YAML::Node(YAML::NodeType::Map) : YAML::Load(settings.options_yaml);
  } catch (const YAML::Exception& ex) {
    throw Error("the options '" + settings.options_yaml + "' are not valid YAML: " + ex.what());
  }
  if (opts.IsNull()) opts = YAML::Node(YAML::NodeType::Map);
  if (!opts.IsMap()) throw Error("the options must be a YAML map such as '{hidden: 32}', got '" + settings.options_yaml + "'");
  opts["type"] = name;
  Report r;
  r.family = family;
  r.variant = name;
  r.file = e->file;
  Checker ck(r, settings);
  const Subject s{family, name, opts, settings};
  check_info(ck, *e);
  if (family == Ffn::kFamily) check_ffn(ck, s);
  else if (family == Norm::kFamily) check_norm(ck, s);
  else if (family == PositionalEncoding::kFamily) check_positional(ck, s);
  else if (family == Attention::kFamily) check_attention(ck, s);
  else if (family == Tokenizer::kFamily) check_tokenizer(ck, s);
  else if (family == Optimizer::kFamily) check_optimizer(ck, s);
  else if (family == Scheduler::kFamily) check_scheduler(ck, s);
  else if (family == Evaluator::kFamily) check_evaluator(ck, s);
  else throw Error("no conformance checks for plugin family '" + family + "'. Families with checks: " + join(checked_families()));
  return r;
}

const std::string& builtin_sample_text() {
  // The opening of tiny Shakespeare (public domain), enough for tokenizers to fit on.
  static const std::string text = R"SAMPLE(First Citizen:
Before we proceed any further, hear me speak.

All:
Speak, speak.

First Citizen:
You are all resolved rather to die than to famish?

All:
Resolved. resolved.

First Citizen:
First, you know Caius Marcius is chief enemy to the people.

All:
We know't, we know't.

First Citizen:
Let us kill him, and we'll have corn at our own price.
Is't a verdict?

All:
No more talking on't; let it be done: away, away!

Second Citizen:
One word, good citizens.

First Citizen:
We are accounted poor citizens, the patricians good.
What authority surfeits on would relieve us: if they
would yield us but the superfluity, while it were
wholesome, we might guess they relieved us humanely;
but they think we are too dear: the leanness that
afflicts us, the object of our misery, is as an
inventory to particularise their abundance; our
sufferance is a gain to them Let us revenge this with
our pikes, ere we become rakes: for the gods know I
speak this in hunger for bread, not in thirst for revenge.

Second Citizen:
Would you proceed especially against Caius Marcius?

All:
Against him first: he's a very dog to the commonalty.

Second Citizen:
Consider you what services he has done for his country?

First Citizen:
Very well; and could be content to give him good
report fort, but that he pays himself with being proud.

Second Citizen:
Nay, but speak not maliciously.

First Citizen:
I say unto you, what he hath done famously, he did
it to that end: though soft-conscienced men can be
content to say it was for his country he did it to
please his mother and to be partly proud; which he
is, even till the altitude of his virtue.

Second Citizen:
What he cannot help in his nature, you account a
vice in him. You must in no way say he is covetous.

First Citizen:
If I must not, I need not be barren of accusations;
he hath faults, with surplus, to tire in repetition.
What shouts are these? The other side o' the city
is risen: why stay we prating here? to the Capitol!

All:
Come, come.

First Citizen:
Soft! who comes here?

Second Citizen:
Worthy Menenius Agrippa; one that hath always loved
the people.

First Citizen:
He's one honest enough: would all the rest were so!

MENENIUS:
What work's, my countrymen, in hand? where go you
With bats and clubs? The matter? speak, I pray you.

First Citizen:
Our business is not unknown to the senate; they have
had inkling this fortnight what we intend to do,
which now we'll show 'em in deeds. They say poor
suitors have strong breaths: they shall know we
have strong arms too.

MENENIUS:
Why, masters, my good friends, mine honest neighbours,
Will you undo yourselves?

First Citizen:
We cannot, sir, we are undone already.
)SAMPLE";
  return text;
}

}  // namespace ablate::conformance
