// Text data loading and window sampling (see data.hpp).
#include "ablate/data.hpp"

#include "ablate/data_source.hpp"
#include "ablate/error.hpp"

namespace ablate {

namespace {

// Encodes text line by line (each line with its '\n'), so that every line starts a token
// and its offset is known whatever the tokenizer merges. Returns the offsets.
std::vector<int64_t> encode_lines(const Tokenizer& tok, const std::string& text, std::vector<int32_t>& ids) {
  std::vector<int64_t> starts;
  ids.clear();
  for (size_t i = 0; i < text.size();) {
    size_t nl = text.find('\n', i);
    size_t end = nl == std::string::npos ? text.size() : nl + 1;
    std::vector<int32_t> line = tok.encode(text.substr(i, end - i));
    if (!line.empty()) {
      starts.push_back(static_cast<int64_t>(ids.size()));
      ids.insert(ids.end(), line.begin(), line.end());
    }
    i = end;
  }
  return starts;
}

}  // namespace

TextData load_text_data(const Options& o, const std::string& yaml_dir, Tokenizer& tok, int64_t context, bool fit) {
  TextData d;
  std::string name = o.require<std::string>("path", "text file: a path, or a file name found in the data directories");
  double frac = o.get_in<double>("train_fraction", 0.9, 0.01, 0.999, "leading fraction of the file used for training");
  std::string windows = o.get_choice("windows", "random", {"random", "lines"},
                                     "where windows start: anywhere (random) or at line starts (lines: whole problems)");
  d.line_windows = windows == "lines";
  d.pad_lines = o.get_choice("fill", "pack", {"pack", "pad"},
                             "with windows: lines, the rest of a window holds the following lines (pack) or padding after the "
                             "last whole line (pad); random windows are always packed") == "pad";
  if (d.pad_lines && !d.line_windows)
    o.fail("fill", "pad applies only to line windows; add data.windows: lines or remove data.fill");
  const std::string after = o.get<std::string>(
      "score_after", "",
      "score only the tokens after this text in each line, e.g. \"=\": the answers of prompt/answer lines (needs "
      "windows: lines); empty: every token");
  if (!after.empty() && !d.line_windows)
    o.fail("score_after", "'" + after + "' marks where each line's answer starts, which needs windows that start at "
                          "lines; add data.windows: lines or remove data.score_after");
  o.check_unused();
  try {
    d.path = resolve_data_file(name, yaml_dir);
    std::string text = read_text_file(d.path);
    // Split on a UTF-8 character boundary so neither part starts mid-character; with line
    // windows, on a line boundary.
    size_t cut = static_cast<size_t>(static_cast<double>(text.size()) * frac);
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
        o.fail("path", d.path + ": the " + std::string(part) + " part has " + std::to_string(t.size()) +
                           " tokens, fewer than one window (context + 1 = " + std::to_string(context + 1) +
                           "); use a longer file, a smaller model.context, or change data.train_fraction");
    };
    check(d.train, "training");
    check(d.val, "validation");
    return d;
  }
  d.pad_input = tok.pad_id() >= 0 ? tok.pad_id() : 0;
  d.train_lines = encode_lines(tok, d.train_text, d.train);
  d.val_lines = encode_lines(tok, d.val_text, d.val);
  if (!after.empty()) {
    const std::vector<int32_t> ids = tok.encode(after);
    if (ids.size() != 1)
      o.fail("score_after", "'" + after + "' is " + std::to_string(ids.size()) +
                                " tokens for this tokenizer; give text that is one token (with the char tokenizer: one "
                                "character that ends every prompt, e.g. \"=\")");
    if (d.train_text.find(after) == std::string::npos)
      o.fail("score_after", "no line of " + d.path + "'s training part contains '" + after +
                                "', so nothing would be scored; give the text that ends each prompt");
    d.score_after = ids[0];
  }
  auto check = [&](const std::vector<int64_t>& starts, const std::vector<int32_t>& t, const char* part,
                   const std::string& text, int64_t first_line) {
    if (starts.empty())
      o.fail("path", d.path + ": the " + std::string(part) + " part has no lines; use a longer file or change data.train_fraction");
    // A line longer than a window would never have its end (the answer) trained on.
    for (size_t k = 0; k < starts.size(); ++k) {
      int64_t len = (k + 1 < starts.size() ? starts[k + 1] : static_cast<int64_t>(t.size())) - starts[k];
      if (len > context + 1) {
        int64_t line = first_line;
        for (size_t i = 0, seen = 0; i < text.size() && seen < k; ++i)
          if (text[i] == '\n') ++seen, ++line;
        o.fail("windows", d.path + ":" + std::to_string(line) + ": a line of " + std::to_string(len) +
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
  return d;
}

void sample_batch(const TextData& data, bool train, int64_t B, int64_t T, Rng& rng, int32_t* x, int32_t* y) {
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
  const int64_t size = static_cast<int64_t>(tokens.size()), n_lines = static_cast<int64_t>(starts.size());
  for (int64_t b = 0; b < B; ++b) {
    const int64_t k = static_cast<int64_t>(rng.below(static_cast<uint64_t>(n_lines)));
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

}  // namespace ablate
