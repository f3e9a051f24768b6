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

#include "ablate/custom_op.hpp"
#include "ablate/error.hpp"
#include "ablate/family.hpp"
#include "ablate/ops.hpp"
#include "ablate/registry.hpp"
#include "families/kit.hpp"

namespace ablate::conformance {

int Report::failed() const {
  return static_cast<int>(
      std::count_if(checks.begin(), checks.end(), [](const CheckResult& c) { return !c.passed; }));
}

std::string format_check(const CheckResult& c) {
  std::string line = (c.passed ? "  PASS  " : "  FAIL  ") + c.name;
  if (!c.detail.empty()) {
    // Multi-line details are indented under their check.
    std::string d = c.detail;
    for (size_t p = d.find('\n'); p != std::string::npos; p = d.find('\n', p + 9))
      d.replace(p, 1, "\n        ");
    line += c.passed ? " (" + d + ")" : "\n        " + d;
  }
  return line + "\n";
}

std::string Report::text() const {
  std::string s;
  for (const CheckResult& c : checks) s += format_check(c);
  const int f = failed();
  return s + std::to_string(checks.size()) +
         " checks: " + std::to_string(checks.size() - static_cast<size_t>(f)) + " passed, " +
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

std::vector<std::string> small_vocab(int64_t n) {
  static const char* const kTexts[] = {"0", "1", "2", ".", "+", "=", "7", "8", "9", "x", "\n"};
  std::vector<std::string> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(i < 11 ? kTexts[i] : "t" + std::to_string(i));
  return v;
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

Parameter& add_input(ParamStore& store, const std::string& name, int64_t rows, int64_t cols,
                     float std) {
  Parameter& p = store.add(name, rows, cols, Role::kCustom);
  fill_normal(p.value, store.rng(), std);
  return p;
}

GradCheckResult check_gradients(const ForwardFn& forward, const std::vector<Parameter*>& wrt,
                                int per_tensor, double h, double rtol, double atol, GradLoss what) {
  GradCheckResult res;
  Graph g;
  std::vector<std::vector<float>> R;
  Outputs ys = forward(g);
  for (int id = 0; id < static_cast<int>(g.num_nodes()); ++id) {
    const std::string op = g.node(id).op;
    if (is_custom_op(op) &&
        std::find(res.custom_ops.begin(), res.custom_ops.end(), op) == res.custom_ops.end())
      res.custom_ops.push_back(op);
  }
  for (const AuxTerm& t : g.aux())
    if (std::find(res.aux_terms.begin(), res.aux_terms.end(), t.name) == res.aux_terms.end())
      res.aux_terms.push_back(t.name);
  const bool outputs = what == GradLoss::kOutputsAndAux;
  Var loss;
  for (size_t k = 0; k < ys.size(); ++k) {
    const Tensor& t = g.value(ys[k]);
    R.push_back(randn(static_cast<size_t>(t.numel()), 1000 + k));
    if (!outputs) continue;
    Var r = g.constant(R.back().data(), t.rows, t.cols);
    Var s = sum(g, mul(g, ys[k], r));
    loss = loss.valid() ? add(g, loss, s) : s;
  }
  // The auxiliary terms at weight 1, whatever weight the plugin trains them at: a wrong
  // gradient of a term weighted 0.01 in training is as wrong.
  for (const AuxTerm& t : g.aux()) loss = loss.valid() ? add(g, loss, t.value) : t.value;
  if (!loss.valid()) return res;  // nothing to check (aux_only without terms)
  for (Parameter* p : wrt)
    std::memset(p->grad.data, 0, sizeof(float) * static_cast<size_t>(p->grad.numel()));
  g.backward(loss);
  std::vector<std::vector<float>> analytic;
  for (Parameter* p : wrt) analytic.emplace_back(p->grad.data, p->grad.data + p->grad.numel());

  auto eval = [&]() {
    g.reset();
    NoGrad ng(g);
    Outputs out = forward(g);
    double L = 0;
    for (size_t k = 0; k < out.size() && outputs; ++k) {
      const Tensor& t = g.value(out[k]);
      for (int64_t i = 0; i < t.numel(); ++i)
        L += static_cast<double>(R[k][static_cast<size_t>(i)]) * t.data[i];
    }
    for (const AuxTerm& t : g.aux()) L += g.value(t.value).data[0];
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
      std::swap(idx[static_cast<size_t>(i)],
                idx[static_cast<size_t>(
                    i + static_cast<int64_t>(pick.below(static_cast<uint64_t>(n - i))))]);
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
        res.report += p.name + "[" + std::to_string(i) + "]: analytic " + std::to_string(a) +
                      ", numeric " + std::to_string(central) + "\n";
      }
    }
  }
  return res;
}

namespace {

// The plugin's own record: a YAML-friendly name and a summary for `ablate plugins`.
void check_info(Checker& ck, const PluginEntry& e) {
  ck.run("plugin info: lower-case name usable in YAML, non-empty summary", [&](std::string&) {
    const std::string name = e.info->name;
    expect(!name.empty() &&
               name.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_") == std::string::npos,
           "name '" + name +
               "' should be lower case letters, digits and underscores (it is written in YAML)");
    expect(e.info->summary && *e.info->summary, "the summary is empty; `ablate plugins` shows it");
  });
}

}  // namespace

std::vector<std::string> checked_families() {
  std::vector<std::string> f;
  for (const FamilyDescriptor* d : families())
    if (d->checks) f.push_back(d->name);
  return f;
}

bool has_checks(const std::string& family) {
  const auto f = checked_families();
  return std::find(f.begin(), f.end(), family) != f.end();
}

std::vector<OptionDoc> describe(const std::string& family, const std::string& name,
                                const ModelDims& dims, const std::string& path) {
  const PluginEntry* e = PluginRegistry::instance().find(family, name);
  if (!e) throw Error("no " + family + " variant named '" + name + "' is registered");
  Options o = Options::describe(path);
  ParamStore store(1);
  try {
    const std::vector<std::string> vocab = small_vocab(dims.vocab_size);
    e->info->destroy(
        e->info->create(o, BuildContext{dims, ParamScope(store, "p."), 1, nullptr, &vocab}));
  } catch (const std::exception&) {
    // Variants with required options may refuse an empty map; what was read is listed.
  }
  return o.docs();
}

Report check_variant(const std::string& family, const std::string& name, const Settings& settings) {
  const PluginEntry* e = PluginRegistry::instance().find(family, name);
  if (!e) throw Error("no " + family + " variant named '" + name + "' is registered");
  YAML::Node opts;
  try {
    opts = settings.options_yaml.empty() ? YAML::Node(YAML::NodeType::Map)
                                         : YAML::Load(settings.options_yaml);
  } catch (const YAML::Exception& ex) {
    throw Error("the options '" + settings.options_yaml + "' are not valid YAML: " + ex.what());
  }
  if (opts.IsNull()) opts = YAML::Node(YAML::NodeType::Map);
  if (!opts.IsMap())
    throw Error("the options must be a YAML map such as '{hidden: 32}', got '" +
                settings.options_yaml + "'");
  opts["type"] = name;
  Report r;
  r.family = family;
  r.variant = name;
  r.file = e->file;
  Checker ck(r, settings);
  const Subject s{family, name, opts, settings};
  const FamilyDescriptor* fd = find_family(family);
  if (!fd || !fd->checks)
    throw Error("no conformance checks for plugin family '" + family +
                "'. Families with checks: " + join(checked_families()));
  check_info(ck, *e);
  fd->checks(ck, s);
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