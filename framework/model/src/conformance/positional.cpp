// The conformance suite of family "positional": embed, rotate, attention slopes and the
// longest position.
#include "ablate/positional.hpp"
#include "kit.hpp"
#include "suites.hpp"

namespace ablate::conformance {
namespace {

constexpr int64_t C = 8, NH = 2, HS = 4, NKV = 1, B = 2, T = 5;
// Token ids (small_vocab: 0-2 and 6-8 digits, 3 a point, 4 '+', 5 '=', 9 'x', 10 newline)
// for plugins that read them: row 0 "12.7+80=9", row 1 "9.81+2=17", prompts 8 and 7 long.
constexpr int64_t IT = 9;

std::vector<float> rows_of(const std::vector<float>& v, int64_t from, int64_t n, int64_t width) {
  return std::vector<float>(v.begin() + from * width, v.begin() + (from + n) * width);
}

// What the positional checks share: the sizes, inputs x (B*T, C), q and k, and token ids.
struct PositionalCase {
  const Subject& s;
  const ModelDims d = small_dims(C, NH, 16);
  const std::string path = path_of(s.family);
  const std::vector<float> x = randn(static_cast<size_t>(B * T * C), 3);
  const std::vector<float> q = randn(static_cast<size_t>(B * T * NH * HS), 4),
                           k = randn(static_cast<size_t>(B * T * NKV * HS), 5);
  const std::vector<int32_t> ids = {1, 2, 3, 6, 4, 7, 0, 5, 8, 8, 3, 7, 1, 4, 2, 5, 1, 6};
  const std::vector<int32_t> prompts = {8, 7};

  Built<PositionalEncoding> encoding() const {
    return build<PositionalEncoding>(s.options, path, d);
  }
};

std::vector<float> embed(PositionalEncoding& p, const std::vector<float>& x, int64_t b, int64_t t,
                         int64_t pos0) {
  Graph g;
  Var y = p.embed(g, g.constant(x.data(), b * t, C), Batch{nullptr, b, t, pos0});
  expect_shape(g, y, b * t, C, "embed's output");
  return values(g, y);
}

// The rotated q followed by the rotated k.
std::vector<float> rotate(PositionalEncoding& p, const std::vector<float>& q,
                          const std::vector<float>& k, int64_t b, int64_t t, int64_t pos0) {
  Graph g;
  Var vq = g.constant(q.data(), b * t, NH * HS), vk = g.constant(k.data(), b * t, NKV * HS);
  p.rotate(g, vq, vk, Batch{nullptr, b, t, pos0}, NH, NKV, HS);
  expect_shape(g, vq, b * t, NH * HS, "rotated q");
  expect_shape(g, vk, b * t, NKV * HS, "rotated k");
  std::vector<float> out = values(g, vq), kv = values(g, vk);
  out.insert(out.end(), kv.begin(), kv.end());
  return out;
}

void embed_is_deterministic(PositionalCase& c, std::string& note) {
  auto a = c.encoding(), b = c.encoding();
  const auto ya = embed(*a.obj, c.x, B, T, 0);
  expect_finite(ya, "embed's output");
  expect(ya == embed(*a.obj, c.x, B, T, 0), "two calls on the same input differ");
  expect(ya == embed(*b.obj, c.x, B, T, 0), "two instances built with the same seed differ");
  note = std::to_string(a.store->count()) + " parameters";
}

void embed_is_position_absolute(PositionalCase& c, std::string&) {
  auto a = c.encoding();
  const auto x1 = rows_of(c.x, 0, T, C);
  const auto full = embed(*a.obj, x1, 1, T, 0);
  const auto tail = embed(*a.obj, rows_of(x1, 2, T - 2, C), 1, T - 2, 2);
  const auto ref = rows_of(full, 2, T - 2, C);
  for (size_t i = 0; i < tail.size(); ++i)
    expect(close(tail[i], ref[i], 1e-5),
           "element " + std::to_string(i) + " at pos0 = 2: " + num(tail[i]) + " vs " + num(ref[i]));
}

// Embeds xi (B*IT, C) with token ids `id` and prompts `prefix` (null: none).
std::vector<float> embed_ids(PositionalEncoding& p, const std::vector<float>& xi,
                             const std::vector<int32_t>& id, const int32_t* prefix) {
  Graph g;
  Batch in{id.data(), B, IT};
  in.prefix = prefix;
  return values(g, p.embed(g, g.constant(xi.data(), B * IT, C), in));
}

// Every other token at each position j past the prompt changes no row of another sequence and
// no position before j.
void expect_no_position_reads_later_ids(const PositionalCase& c, PositionalEncoding& p,
                                        const std::vector<float>& xi, const int32_t* prefix) {
  const auto base = embed_ids(p, xi, c.ids, prefix);
  expect_finite(base, "embed's output with token ids");
  for (int64_t b = 0; b < B; ++b)
    for (int64_t j = prefix ? prefix[b] : 0; j < IT; ++j)
      for (int32_t other = 0; other < static_cast<int32_t>(c.d.vocab_size);
           ++other) {  // every other token there
        std::vector<int32_t> changed = c.ids;
        int32_t& id = changed[static_cast<size_t>(b * IT + j)];
        if (id == other) continue;
        id = other;
        const auto y = embed_ids(p, xi, changed, prefix);
        for (int64_t i = 0; i < B * IT * C; ++i)
          if ((i / C) / IT != b || (i / C) % IT < j)
            expect(y[static_cast<size_t>(i)] == base[static_cast<size_t>(i)],
                   "row " + std::to_string(b) + ", position " + std::to_string((i / C) % IT) +
                       " changed when the id at position " + std::to_string(j) +
                       (prefix ? " (past the prompt of " + std::to_string(prefix[b]) + ")"
                               : " (no prompt)") +
                       " did: a position may read later ids only inside the prompt");
      }
}

void embed_reads_no_later_ids(PositionalCase& c, std::string& note) {
  auto a = c.encoding();
  randomize(*a.store, 8);
  const auto xi = randn(static_cast<size_t>(B * IT * C), 9);
  for (const int32_t* prefix : {c.prompts.data(), static_cast<const int32_t*>(nullptr)})
    expect_no_position_reads_later_ids(c, *a.obj, xi, prefix);
  note = embed_ids(*a.obj, xi, c.ids, c.prompts.data()) ==
                 embed(*a.obj, std::vector<float>(xi.begin(), xi.end()), B, IT, 0)
             ? "ignores the ids"
             : "reads the ids";
}

void rotate_is_position_absolute(PositionalCase& c, std::string&) {
  auto a = c.encoding(), b = c.encoding();
  const auto r = rotate(*a.obj, c.q, c.k, B, T, 0);
  expect_finite(r, "rotated q and k");
  expect(r == rotate(*b.obj, c.q, c.k, B, T, 0), "two instances built with the same seed differ");
  const auto r1 =
      rotate(*a.obj, rows_of(c.q, 0, T, NH * HS), rows_of(c.k, 0, T, NKV * HS), 1, T, 0);
  const auto r2 =
      rotate(*a.obj, rows_of(c.q, 3, 2, NH * HS), rows_of(c.k, 3, 2, NKV * HS), 1, 2, 3);
  for (int64_t i = 0; i < 2 * NH * HS; ++i)
    expect(close(r2[static_cast<size_t>(i)], r1[static_cast<size_t>(3 * NH * HS + i)], 1e-5),
           "q rotated at pos0 = 3 differs from the same rows of a longer sequence at element " +
               std::to_string(i));
}

void rotates_tells_the_truth(PositionalCase& c, std::string& note) {
  auto a = c.encoding();
  Graph g;
  const Var q0 = g.constant(c.q.data(), B * T, NH * HS),
            k0 = g.constant(c.k.data(), B * T, NKV * HS);
  Var vq = q0, vk = k0;
  a->rotate(g, vq, vk, Batch{nullptr, B, T}, NH, NKV, HS);
  const bool unchanged =
      vq.id == q0.id && vk.id == k0.id && values(g, q0) == c.q && values(g, k0) == c.k;
  note = a->rotates() ? "rotates" : "does not rotate";
  if (!a->rotates())
    expect(unchanged, "rotates() is false but rotate() changed q or k: return true from rotates()");
}

void slopes_are_non_negative(PositionalCase& c, std::string& note) {
  auto a = c.encoding();
  const float* sl = a->attention_slopes();
  if (!sl) {
    note = "none";
    return;
  }
  for (int64_t h = 0; h < NH; ++h)
    expect(std::isfinite(sl[h]) && sl[h] >= 0.0f,
           "slope of head " + std::to_string(h) + " is " + num(sl[h]));
}

void max_positions_covers_the_context(PositionalCase& c, std::string& note) {
  auto a = c.encoding();
  const int64_t m = a->max_positions();
  if (m < 0) {
    note = "unlimited";
    return;
  }
  expect(m >= c.d.context, "max_positions " + std::to_string(m) + " is shorter than the context " +
                               std::to_string(c.d.context));
  embed(*a.obj, std::vector<float>(static_cast<size_t>(m * C), 0.5f), 1, m, 0);
  bool threw = false;
  try {
    embed(*a.obj, std::vector<float>(2 * C, 0.5f), 1, 2, m - 1);
  } catch (const Error&) {
    threw = true;
  }
  expect(threw, "embedding positions " + std::to_string(m - 1) + ".." + std::to_string(m) +
                    " did not throw");
}

void gradients_match_finite_differences(PositionalCase& c, std::string& note) {
  auto a = c.encoding();
  randomize(*a.store, 6);
  ParamStore inputs(12);
  Parameter& xp = add_input(inputs, "x", B * T, C);
  Parameter& qp = add_input(inputs, "q", B * T, NH * HS);
  Parameter& kp = add_input(inputs, "k", B * T, NKV * HS);
  std::vector<Parameter*> wrt = a.store->all();
  for (Parameter* p : {&xp, &qp, &kp}) wrt.push_back(p);
  // With the ids and prompts above (the first T of each row; prompts 1 + 3 and 1 + 4
  // positions long at pos0 = 1), so that the parts that read ids are checked too.
  std::vector<int32_t> ids_bt;
  for (int64_t b = 0; b < B; ++b)
    ids_bt.insert(ids_bt.end(), c.ids.begin() + b * IT, c.ids.begin() + b * IT + T);
  const std::vector<int32_t> prefix_bt = {4, 5};
  Batch in{ids_bt.data(), B, T, 1};
  in.prefix = prefix_bt.data();
  expect_gradients(
      [&](Graph& g) {
        Var vq = g.param(qp), vk = g.param(kp);
        a->rotate(g, vq, vk, in, NH, NKV, HS);
        return Outputs{a->embed(g, g.param(xp), in), vq, vk};
      },
      wrt, note);
}

}  // namespace

void check_positional(Checker& ck, const Subject& s) {
  PositionalCase c{s};
  run_properties<PositionalCase>(
      ck, c,
      {{"embed: output (B*T, C), finite, deterministic, same seed same result",
        &embed_is_deterministic},
       {"embed: position-absolute (a window starting at pos0 = the same rows of a longer "
        "sequence)",
        &embed_is_position_absolute},
       {"embed with token ids: no position reads an id after it, except inside the prompt "
        "(Batch::prefix)",
        &embed_reads_no_later_ids},
       {"rotate: q (B*T, NH*HS) and k (B*T, NKV*HS) with NKV < NH; deterministic; "
        "position-absolute",
        &rotate_is_position_absolute},
       {"rotates(): false only if rotate() leaves q and k as they are (attention then skips it)",
        &rotates_tells_the_truth},
       {"attention slopes: finite and non-negative, one per head", &slopes_are_non_negative},
       {"max_positions: covers the context; positions beyond it are an ablate::Error",
        &max_positions_covers_the_context},
       {"gradients by finite differences (embed and rotate; parameters and inputs)",
        &gradients_match_finite_differences}});
  check_options<PositionalEncoding>(ck, s, c.d);
}

}  // namespace ablate::conformance
