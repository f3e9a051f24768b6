// Text data loading and window sampling (see data.hpp).
#include "ablate/data.hpp"

#include <filesystem>
#include <regex>

#include <yaml-cpp/yaml.h>

#include "ablate/data_source.hpp"
#include "ablate/error.hpp"
#include "ablate/ops.hpp"
#include "dataset_data.hpp"
#include "shard_data.hpp"

namespace ablate {

namespace fs = std::filesystem;

namespace {

// Encodes text line by line (each line with its '\n'), so that every line starts a token
// and its offset is known whatever the tokenizer merges. Returns the offsets; `spans` (if
// given) gets each encoded line's offset and length in the text, without its newline.
std::vector<int64_t> encode_lines(const Tokenizer& tok, const std::string& text,
                                  std::vector<int32_t>& ids,
                                  std::vector<std::pair<size_t, size_t>>* spans = nullptr) {
  std::vector<int64_t> starts;
  ids.clear();
  for (size_t i = 0; i < text.size();) {
    size_t nl = text.find('\n', i);
    size_t end = nl == std::string::npos ? text.size() : nl + 1;
    std::vector<int32_t> line = tok.encode(text.substr(i, end - i));
    if (!line.empty()) {
      starts.push_back(static_cast<int64_t>(ids.size()));
      ids.insert(ids.end(), line.begin(), line.end());
      if (spans) spans->emplace_back(i, (nl == std::string::npos ? end : nl) - i);
    }
    i = end;
  }
  return starts;
}

constexpr size_t kMaxLineRules = 8;

// The rules of data.line_weights; `where` gets each rule's map, for errors that name its line.
std::vector<LineWeights::Rule> read_line_rules(const Options& o, std::vector<Options>& where) {
  std::vector<LineWeights::Rule> rules;
  const YAML::Node list = o.node()["line_weights"];
  o.mark_used("line_weights");
  if (!list.IsDefined() || list.IsNull()) return rules;
  const char* example =
      "e.g. line_weights: [{match: '\\*', weight: 0}, {match: '^[^=]*\\.', weight: 3, until: "
      "2000}]";
  if (!list.IsSequence() || list.size() > kMaxLineRules)
    o.fail("line_weights",
           "expected a list of up to " + std::to_string(kMaxLineRules) +
               " rules {match: REGEX, weight: W, from: STEP, until: STEP} ([]: none), " + example);
  for (size_t i = 0; i < list.size(); ++i) {
    Options r(list[i], o.source(), o.key_path("line_weights") + "." + std::to_string(i));
    LineWeights::Rule rule;
    rule.match = r.require<std::string>(
        "match", "ECMAScript regular expression searched in each line (without its newline)");
    rule.weight = r.get_in<double>("weight", 1.0, 0.0, 1e6,
                                   "how many times as often a matching line is drawn (0: never)");
    rule.from = r.get_in<int64_t>("from", 1, 1, int64_t{1} << 62, "first step the rule holds");
    rule.until = r.get_in<int64_t>("until", -1, -1, int64_t{1} << 62,
                                   "last step the rule holds (-1: to the end)");
    if (rule.until >= 0 && rule.until < rule.from)
      r.fail("until", std::to_string(rule.until) + " is before from (" + std::to_string(rule.from) +
                          "); give until >= from, or -1 for to the end of training");
    r.check_unused();
    rules.push_back(rule);
    where.push_back(r);
  }
  return rules;
}

// Groups the training lines by the rules they match and checks that every rule matches some
// but not all lines and that at every step some line can be drawn.
void group_lines(const Options& o, const std::vector<Options>& rule_opts, TextData& d,
                 const std::vector<std::pair<size_t, size_t>>& spans) {
  LineWeights& lw = d.line_weights;
  const size_t n_rules = lw.rules.size(), n = spans.size();
  std::vector<uint8_t> mask(n, 0);
  for (size_t r = 0; r < n_rules; ++r) {
    const Options& ro = rule_opts[r];
    std::regex re;
    try {
      re = std::regex(lw.rules[r].match, std::regex::ECMAScript | std::regex::optimize);
    } catch (const std::regex_error& e) {
      ro.fail("match", "'" + lw.rules[r].match + "' is not a regular expression (ECMAScript): " +
                           e.what() + "; escape special characters, e.g. '\\*' for a literal '*'");
    }
    const uint8_t bit = static_cast<uint8_t>(1u << r);
    parallel_for(static_cast<int64_t>(n), 4096, [&](int64_t lo, int64_t hi) {
      for (int64_t k = lo; k < hi; ++k) {
        const char* first = d.train_text.data() + spans[static_cast<size_t>(k)].first;
        if (std::regex_search(first, first + spans[static_cast<size_t>(k)].second, re))
          mask[static_cast<size_t>(k)] |= bit;
      }
    });
    size_t hits = 0;
    for (uint8_t m : mask) hits += (m & bit) != 0;
    if (hits == 0 || hits == n)
      ro.fail("match", "'" + lw.rules[r].match + "' matches " + (hits ? "every one" : "none") +
                           " of the " + std::to_string(n) + " training lines of " + d.path +
                           ", so its weight changes nothing; give a pattern that picks out some "
                           "lines (ECMAScript, searched anywhere in a line)");
  }
  lw.groups.assign(size_t{1} << n_rules, {});
  for (size_t k = 0; k < n; ++k) lw.groups[mask[k]].push_back(static_cast<int64_t>(k));
  // The weights change only where a rule starts or ends.
  std::vector<int64_t> steps{1};
  for (const auto& r : lw.rules) {
    steps.push_back(r.from);
    if (r.until >= 0) steps.push_back(r.until + 1);
  }
  double w[size_t{1} << kMaxLineRules];
  for (int64_t s : steps) {
    if (lw.group_weights(s, w) <= 0)
      o.fail("line_weights", "at step " + std::to_string(s) +
                                 " every training line has weight 0, so no window can be drawn; "
                                 "give some lines a weight above 0 there");
  }
}

// The index of the training line a window starts at, drawn with the groups' weights w and
// their total mass (LineWeights::group_weights).
int64_t draw_weighted_line(const LineWeights& lw, const double* w, double total, Rng& rng) {
  double u = static_cast<double>(rng.next_u64() >> 11) * 0x1p-53 * total;
  size_t last = 0;
  for (size_t g = 0; g < lw.groups.size(); ++g) {
    const double mass = w[g] * static_cast<double>(lw.groups[g].size());
    if (mass <= 0) continue;
    last = g;
    if (u < mass) {
      const size_t i = std::min(lw.groups[g].size() - 1, static_cast<size_t>(u / w[g]));
      return lw.groups[g][i];
    }
    u -= mass;
  }
  return lw.groups[last].back();  // rounding at the very end of the range
}

}  // namespace

namespace {

// The data section's options, read and checked (everything but the file).
struct DataSpec {
  std::string name, after;
  double frac = 0.9;
  std::vector<Options> rule_opts;  // where each line_weights rule is, for its errors
};

DataSpec read_data_spec(const Options& o, TextData& d) {
  DataSpec spec;
  spec.name = o.require<std::string>(
      "path", "text file: a path, or a file name found in the data directories");
  spec.frac = o.get_in<double>("train_fraction", 0.9, 0.01, 0.999,
                               "leading fraction of the file used for training");
  std::string windows = o.get_choice(
      "windows", "random", {"random", "lines"},
      "where windows start: anywhere (random) or at line starts (lines: whole problems)");
  d.line_windows = windows == "lines";
  d.pad_lines = o.get_choice("fill", "pack", {"pack", "pad"},
                             "with windows: lines, the rest of a window holds the following lines "
                             "(pack) or padding after the "
                             "last whole line (pad); random windows are always packed") == "pad";
  if (d.pad_lines && !d.line_windows)
    o.fail("fill", "pad applies only to line windows; add data.windows: lines or remove data.fill");
  const std::string& after = spec.after =
      o.get<std::string>("score_after", "",
                         "score only the tokens after this text in each line, e.g. \"=\": the "
                         "answers of prompt/answer lines (needs "
                         "windows: lines); empty: every token");
  if (!after.empty() && !d.line_windows)
    o.fail("score_after",
           "'" + after +
               "' marks where each line's answer starts, which needs windows that start at "
               "lines; add data.windows: lines or remove data.score_after");
  d.line_weights.rules = read_line_rules(o, spec.rule_opts);
  if (!d.line_weights.rules.empty() && !d.line_windows)
    o.fail(
        "line_weights",
        "weights lines, which needs windows that start at lines; add data.windows: lines or remove "
        "data.line_weights");
  o.check_unused();
  return spec;
}

std::string resolve_data_path(const Options& o, const DataSpec& spec, const std::string& yaml_dir) {
  try {
    return resolve_data_file(spec.name, yaml_dir);
  } catch (const ConfigError&) {
    throw;
  } catch (const Error& e) {
    o.fail("path", e.what());
  }
}

// Reads d.path as the spec says into d (whose options read_data_spec filled in).
void read_text_data(const Options& o, const DataSpec& spec, Tokenizer& tok, int64_t context,
                    bool fit, TextData& d) {
  const std::string& after = spec.after;
  try {
    std::string text = read_text_file(d.path);
    d.sha256 = sha256_hex(text);
    // Split on a UTF-8 character boundary so neither part starts mid-character; with line
    // windows, on a line boundary.
    size_t cut = static_cast<size_t>(static_cast<double>(text.size()) * spec.frac);
    while (cut < text.size() && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) ++cut;
    if (d.line_windows && cut > 0 && cut < text.size() && text[cut - 1] != '\n') {
      size_t nl = text.find('\n', cut);
      cut = nl == std::string::npos ? text.size() : nl + 1;
    }
    d.train_text = text.substr(0, cut);
    d.val_text = text.substr(cut);
  } catch (const ConfigError&) {
    throw;
  } catch (const Error& e) {
    o.fail("path", e.what());
  }
  if (fit) tok.fit(d.train_text);
  if (!d.line_windows) {
    d.train = tok.encode(d.train_text);
    d.val = tok.encode(d.val_text);
    auto check = [&](const std::vector<int32_t>& t, const char* part) {
      if (static_cast<int64_t>(t.size()) < context + 1)
        o.fail("path",
               d.path + ": the " + std::string(part) + " part has " + std::to_string(t.size()) +
                   " tokens, fewer than one window (context + 1 = " + std::to_string(context + 1) +
                   "); use a longer file, a smaller model.context, or change data.train_fraction");
    };
    check(d.train, "training");
    check(d.val, "validation");
    return;
  }
  d.pad_input = tok.pad_id() >= 0 ? tok.pad_id() : 0;
  std::vector<std::pair<size_t, size_t>> spans;
  d.train_lines = encode_lines(tok, d.train_text, d.train, &spans);
  d.val_lines = encode_lines(tok, d.val_text, d.val);
  if (!after.empty()) {
    const std::vector<int32_t> ids = tok.encode(after);
    if (ids.size() != 1)
      o.fail("score_after", "'" + after + "' is " + std::to_string(ids.size()) +
                                " tokens for this tokenizer; give text that is one token (with the "
                                "char tokenizer: one "
                                "character that ends every prompt, e.g. \"=\")");
    if (d.train_text.find(after) == std::string::npos)
      o.fail("score_after",
             "no line of " + d.path + "'s training part contains '" + after +
                 "', so nothing would be scored; give the text that ends each prompt");
    d.score_after = ids[0];
  }
  auto check = [&](const std::vector<int64_t>& starts, const std::vector<int32_t>& t,
                   const char* part, const std::string& text, int64_t first_line) {
    if (starts.empty())
      o.fail("path", d.path + ": the " + std::string(part) +
                         " part has no lines; use a longer file or change data.train_fraction");
    // A line longer than a window would never have its end (the answer) trained on.
    for (size_t k = 0; k < starts.size(); ++k) {
      int64_t len =
          (k + 1 < starts.size() ? starts[k + 1] : static_cast<int64_t>(t.size())) - starts[k];
      if (len > context + 1) {
        int64_t line = first_line;
        for (size_t i = 0, seen = 0; i < text.size() && seen < k; ++i)
          if (text[i] == '\n') ++seen, ++line;
        o.fail("windows",
               d.path + ":" + std::to_string(line) + ": a line of " + std::to_string(len) +
                   " tokens does not fit a window of context + 1 = " + std::to_string(context + 1) +
                   " tokens; raise model.context to at least " + std::to_string(len - 1) +
                   " or use data.windows: random");
      }
    }
  };
  int64_t train_newlines = 0;
  for (char c : d.train_text) train_newlines += c == '\n';
  check(d.train_lines, d.train, "training", d.train_text, 1);
  check(d.val_lines, d.val, "validation", d.val_text, 1 + train_newlines);
  if (!d.line_weights.rules.empty()) group_lines(o, spec.rule_opts, d, spans);
}

// The living DataMemo's data: what it was loaded from (the key) and the tokenizer's
// state after fitting.
struct Memo {
  std::string key, tokenizer_state;
  std::shared_ptr<const TextData> data;
};
Memo* g_memo = nullptr;

}  // namespace

DataMemo::DataMemo() {
  if (g_memo) throw Error("internal: a DataMemo lives already; one at a time");
  g_memo = new Memo;
}

DataMemo::~DataMemo() {
  delete g_memo;
  g_memo = nullptr;
}

TextData load_text_data(const Options& o, const std::string& yaml_dir, Tokenizer& tok,
                        int64_t context, bool fit) {
  TextData d;
  if (names_dataset(o)) {
    load_dataset_data(o, yaml_dir, tok, "", context, fit, d);
    return d;
  }
  if (names_shards(o)) {
    load_shard_data(o, read_shard_spec(o, yaml_dir), tok, context, fit, d);
    return d;
  }
  const DataSpec spec = read_data_spec(o, d);
  d.path = resolve_data_path(o, spec, yaml_dir);
  read_text_data(o, spec, tok, context, fit, d);
  return d;
}

std::shared_ptr<const TextData> load_shared_text_data(const Options& o, const std::string& yaml_dir,
                                                      Tokenizer& tok,
                                                      const std::string& tokenizer_key,
                                                      int64_t context, bool fit) {
  auto d = std::make_shared<TextData>();
  if (names_dataset(o)) {
    std::string key;
    if (g_memo) {
      YAML::Emitter section;
      section << o.node();
      key = std::string("dataset\n") + section.c_str() + '\n' + tokenizer_key + '\n' +
            std::to_string(context) + (fit ? "\nfit" : "\nloaded " + tok.save());
      if (g_memo->data && g_memo->key == key) {
        if (fit) tok.load(g_memo->tokenizer_state);
        return g_memo->data;
      }
    }
    load_dataset_data(o, yaml_dir, tok, tokenizer_key, context, fit, *d);
    if (g_memo) *g_memo = Memo{key, tok.save(), d};
    return d;
  }
  if (names_shards(o)) {
    const ShardSpec spec = read_shard_spec(o, yaml_dir);  // checked on every call, memo or not
    std::string key;
    if (g_memo) {
      YAML::Emitter section;
      section << o.node();
      key = "shards\n" + shard_files_key(spec) + section.c_str() + '\n' + tokenizer_key + '\n' +
            std::to_string(context) + (fit ? "\nfit" : "\nloaded " + tok.save());
      if (g_memo->data && g_memo->key == key) {
        if (fit) tok.load(g_memo->tokenizer_state);
        return g_memo->data;
      }
    }
    load_shard_data(o, spec, tok, context, fit, *d);
    if (g_memo) *g_memo = Memo{key, tok.save(), d};
    return d;
  }
  const DataSpec spec = read_data_spec(o, *d);  // checked on every call, memo or not
  d->path = resolve_data_path(o, spec, yaml_dir);
  std::string key;
  if (g_memo) {
    std::error_code ec;
    const auto size = fs::file_size(d->path, ec);
    const auto time = fs::last_write_time(d->path, ec).time_since_epoch().count();
    YAML::Emitter section;
    section << o.node();
    key = d->path + '\n' + std::to_string(size) + ' ' + std::to_string(time) + '\n' +
          section.c_str() + '\n' + tokenizer_key + '\n' + std::to_string(context) +
          (fit ? "\nfit" : "\nloaded " + tok.save());
    if (g_memo->data && g_memo->key == key) {
      if (fit) tok.load(g_memo->tokenizer_state);
      return g_memo->data;
    }
  }
  read_text_data(o, spec, tok, context, fit, *d);
  if (g_memo) *g_memo = Memo{key, tok.save(), d};
  return d;
}

bool LineWeights::active(int64_t step) const {
  for (const Rule& r : rules)
    if (r.active(step)) return true;
  return false;
}

double LineWeights::group_weights(int64_t step, double* w) const {
  double total = 0;
  for (size_t g = 0; g < groups.size(); ++g) {
    w[g] = 1;
    for (size_t r = 0; r < rules.size(); ++r)
      if ((g >> r & 1) && rules[r].active(step)) w[g] *= rules[r].weight;
    total += w[g] * static_cast<double>(groups[g].size());
  }
  return total;
}

int64_t TextData::tokens(bool train_part) const {
  if (from_shards()) return (train_part ? train_shards : val_shards)->tokens;
  return static_cast<int64_t>((train_part ? train : val).size());
}

void sample_batch(const TextData& data, bool train, int64_t B, int64_t T, Rng& rng, int32_t* x,
                  int32_t* y, int64_t step) {
  if (data.from_shards()) {
    sample_shard_windows(train ? *data.train_shards : *data.val_shards, B, T, rng, x, y);
    return;
  }
  const std::vector<int32_t>& tokens = train ? data.train : data.val;
  if (!data.line_windows) {
    const uint64_t range = tokens.size() - static_cast<size_t>(T);  // offsets 0..size-T-1
    for (int64_t b = 0; b < B; ++b) {
      size_t i = static_cast<size_t>(rng.below(range));
      for (int64_t t = 0; t < T; ++t) {
        x[b * T + t] = tokens[i + static_cast<size_t>(t)];
        y[b * T + t] = tokens[i + static_cast<size_t>(t) + 1];
      }
    }
    return;
  }
  const std::vector<int64_t>& starts = train ? data.train_lines : data.val_lines;
  const int64_t size = static_cast<int64_t>(tokens.size()),
                n_lines = static_cast<int64_t>(starts.size());
  const bool weighted = train && step >= 1 && data.line_weights.active(step);
  double w[size_t{1} << kMaxLineRules], total = 0;  // the step's group weights, once a batch
  if (weighted) total = data.line_weights.group_weights(step, w);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t k = weighted ? draw_weighted_line(data.line_weights, w, total, rng)
                               : static_cast<int64_t>(rng.below(static_cast<uint64_t>(n_lines)));
    const int64_t i = starts[static_cast<size_t>(k)];
    // The window holds tokens [i, end): up to T+1 of the stream (pack), or the whole lines
    // that fit in T+1 tokens (pad); the rest is padding.
    int64_t end = std::min(size, i + T + 1);
    if (data.pad_lines) {
      int64_t e = k + 1 < n_lines ? starts[static_cast<size_t>(k + 1)] : size;
      for (int64_t j = k + 1; j < n_lines; ++j) {
        int64_t next = j + 1 < n_lines ? starts[static_cast<size_t>(j + 1)] : size;
        if (next - i > T + 1) break;
        e = next;
      }
      end = std::min(end, e);
    }
    const int64_t m = end - i;
    for (int64_t t = 0; t < T; ++t) {
      x[b * T + t] = t < m ? tokens[static_cast<size_t>(i + t)] : data.pad_input;
      y[b * T + t] = t + 1 < m ? tokens[static_cast<size_t>(i + t + 1)] : -1;
    }
    if (data.score_after >= 0) {
      // A target counts once its line has shown the token, up to the line's end; the
      // next line's first token (its start, not an answer) does not.
      bool seen = false;
      int64_t next = k + 1;  // the next line start's index in `starts`
      for (int64_t t = 0; t + 1 < m; ++t) {
        seen = seen || x[b * T + t] == data.score_after;
        const bool line_ends = next < n_lines && starts[static_cast<size_t>(next)] == i + t + 1;
        if (!seen || line_ends) y[b * T + t] = -1;
        if (line_ends) seen = false, ++next;
      }
    }
  }
}

namespace {

// The streams consecutive windows cover: the part's tokens, or each of its shards.
struct Streams {
  const std::vector<int32_t>* tokens = nullptr;
  const ShardSplit* shards = nullptr;
  Streams(const TextData& d, bool train) {
    if (d.from_shards()) shards = (train ? d.train_shards : d.val_shards).get();
    else tokens = train ? &d.train : &d.val;
  }
  size_t count() const { return shards ? shards->shards.size() : 1; }
  int64_t size(size_t k) const {
    return shards ? shards->shards[k].size() : static_cast<int64_t>(tokens->size());
  }
  void copy(size_t k, int64_t begin, int64_t n, int32_t* out) const {
    if (shards) shards->shards[k].copy(begin, n, out);
    else std::copy(tokens->begin() + begin, tokens->begin() + begin + n, out);
  }
  // Windows of T targets that cover stream k's tokens after its first.
  static int64_t windows(int64_t n, int64_t T) { return n >= 2 ? (n - 1 + T - 1) / T : 0; }
};

}  // namespace

int64_t consecutive_windows(const TextData& data, bool train, int64_t T) {
  const Streams st(data, train);
  int64_t w = 0;
  for (size_t k = 0; k < st.count(); ++k) w += Streams::windows(st.size(k), T);
  return w;
}

void consecutive_batch(const TextData& data, bool train, int64_t first, int64_t B, int64_t T,
                       int32_t* x, int32_t* y) {
  const Streams st(data, train);
  std::fill(x, x + B * T, 0);
  std::fill(y, y + B * T, -1);
  size_t k = 0;
  int64_t before = 0;  // windows of the streams before k
  for (int64_t b = 0; b < B; ++b) {
    const int64_t w = first + b;
    while (k < st.count() && w >= before + Streams::windows(st.size(k), T))
      before += Streams::windows(st.size(k++), T);
    if (k == st.count()) return;  // past the last window: padding
    const int64_t i = (w - before) * T,
                  m = std::min(T, st.size(k) - 1 - i);  // targets in this window
    st.copy(k, i, m, x + b * T);
    st.copy(k, i + 1, m, y + b * T);
  }
}

}  // namespace ablate
