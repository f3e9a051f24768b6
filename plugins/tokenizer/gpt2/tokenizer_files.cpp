// Reading the files of GPT-2's tokenizer (see tokenizer_files.hpp).
#include "tokenizer_files.hpp"

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unordered_map>
#include <utility>

#include <nlohmann/json.hpp>

#include "ablate/byte_bpe.hpp"
#include "ablate/error.hpp"

namespace ablate::gpt2 {

namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;
using ablate::byte_bpe::byte_map;
using ablate::byte_bpe::ByteMap;

// The raw bytes of a token written in GPT-2's character form; `bad` gets the reason when the
// text has a character outside the map (then the file is not a byte-level BPE vocabulary).
bool unmapped_bytes(const std::string& text, std::string& out, std::string& bad) {
  const ByteMap& m = byte_map();
  out.clear();
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  for (size_t i = 0; i < n;) {
    // One UTF-8 character (JSON strings are valid UTF-8; a merges line may not be).
    const unsigned char b0 = s[i];
    size_t len = b0 < 0x80                 ? 1
                 : b0 >= 0xC0 && b0 < 0xE0 ? 2
                 : b0 >= 0xE0 && b0 < 0xF0 ? 3
                 : b0 >= 0xF0 && b0 < 0xF8 ? 4
                                           : 0;
    uint32_t cp = len <= 1 ? b0 : b0 & (0x7Fu >> len);
    for (size_t k = 1; k < len; ++k) {
      if (i + k >= n || (s[i + k] & 0xC0) != 0x80) {
        len = 0;
        break;
      }
      cp = (cp << 6) | (s[i + k] & 0x3Fu);
    }
    if (len == 0 || cp >= m.to_byte.size() || m.to_byte[cp] < 0) {
      char what[32];
      if (len == 0)
        std::snprintf(what, sizeof what, "the byte 0x%02X (not UTF-8)", static_cast<unsigned>(b0));
      else std::snprintf(what, sizeof what, "the character U+%04X", static_cast<unsigned>(cp));
      bad = std::string("it has ") + what +
            ", which is not one of the 256 byte characters of GPT-2's bytes_to_unicode map";
      return false;
    }
    out += static_cast<char>(m.to_byte[cp]);
    i += len;
  }
  return true;
}

std::string read_file(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  ABLATE_CHECK(in, what, ": cannot open ", path, ": ", std::strerror(errno));
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ABLATE_CHECK(!in.bad(), what, ": error while reading ", path);
  return s;
}

Json parse_json(const std::string& text, const std::string& path, const std::string& fix) {
  try {
    return Json::parse(text);
  } catch (const Json::parse_error& e) {
    std::string why = e.what();
    const size_t colon = why.find("] ");
    if (colon != std::string::npos) why = why.substr(colon + 2);
    const bool truncated = e.byte >= text.size();
    throw Error(path + ": not valid JSON" +
                (truncated ? " (it ends too early: a truncated or incomplete download?)" : "") +
                ": " + why + ". " + fix);
  }
}

// The JSON type of a value, for messages.
std::string kind_of(const Json& j) {
  if (j.is_object()) return "an object";
  if (j.is_array()) return "a list";
  if (j.is_string()) return "a string";
  if (j.is_number()) return "a number";
  if (j.is_boolean()) return "true/false";
  return "null";
}

// token text (GPT-2 character form) -> id, from encoder.json or a tokenizer.json's model.vocab.
std::vector<std::string> read_vocab_map(const Json& j, const std::string& path,
                                        const std::string& fix) {
  ABLATE_CHECK(j.is_object(), path, ": expected a JSON object of token -> id, found ", kind_of(j),
               ". ", fix);
  if (j.contains("model") && j["model"].is_object())
    throw Error(path +
                ": this is a Hugging Face tokenizer.json, not a token -> id map: name it with "
                "`tokenizer: {type: gpt2, tokenizer_json: " +
                fs::path(path).filename().string() + "}`");
  std::vector<std::string> by_id;
  for (auto it = j.begin(); it != j.end(); ++it) {
    ABLATE_CHECK(it.value().is_number_integer(), path, ": the value of token ", in_quotes(it.key()),
                 " is ", kind_of(it.value()), ", not an integer id: not a token -> id map. ", fix);
    const int64_t id = it.value().get<int64_t>();
    ABLATE_CHECK(id >= 0 && id < static_cast<int64_t>(j.size()) + (int64_t{1} << 20), path,
                 ": token ", in_quotes(it.key()), " has id ", id, ", out of range");
    if (static_cast<size_t>(id) >= by_id.size()) by_id.resize(static_cast<size_t>(id) + 1);
    ABLATE_CHECK(by_id[static_cast<size_t>(id)].empty(), path, ": tokens ",
                 in_quotes(by_id[static_cast<size_t>(id)]), " and ", in_quotes(it.key()),
                 " have the same id ", id);
    ABLATE_CHECK(!it.key().empty(), path, ": an empty token (id ", id, ")");
    by_id[static_cast<size_t>(id)] = it.key();
  }
  return by_id;
}

// The merges as pairs of token texts, in rank order.
using Merges = std::vector<std::pair<std::string, std::string>>;

Merges read_merges_text(const std::string& text, const std::string& path, const std::string& fix) {
  if (text.find_first_not_of(" \t\r\n") != std::string::npos &&
      text[text.find_first_not_of(" \t\r\n")] == '{')
    throw Error(
        path +
        ": this is JSON, not a merges file (vocab.bpe / merges.txt: one merge 'a b' per line). " +
        fix);
  Merges m;
  std::istringstream in(text);
  std::string line;
  size_t no = 0;
  while (std::getline(in, line)) {
    ++no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || (no == 1 && line.rfind("#version", 0) == 0)) continue;
    const size_t sp = line.find(' ');
    if (sp == std::string::npos || sp == 0 || sp + 1 == line.size() ||
        line.find(' ', sp + 1) != std::string::npos)
      throw Error(path + ":" + std::to_string(no) +
                  ": expected a merge 'a b' (two tokens and one space), got " + in_quotes(line) +
                  ". " + fix);
    m.emplace_back(line.substr(0, sp), line.substr(sp + 1));
  }
  ABLATE_CHECK(!m.empty(), path, ": no merges in the file. ", fix);
  return m;
}

// Token specs from token texts by id and merges: a merged token's rank is the index of the
// first merge that makes it. Ids marked `raw` are special tokens whose text is as written
// (a tokenizer.json's added tokens); ids the merges never make are plain (single bytes) or,
// when `unmerged_are_special`, special (GPT-2's <|endoftext|> in encoder.json).
std::vector<TokenSpec> specs_of(const std::vector<std::string>& by_id, const std::vector<bool>& raw,
                                const Merges& merges, bool unmerged_are_special,
                                const std::string& vocab_path, const std::string& merges_path) {
  std::unordered_map<std::string, int32_t> id_of;
  for (size_t id = 0; id < by_id.size(); ++id) {
    if (raw[id]) continue;
    ABLATE_CHECK(!by_id[id].empty(), vocab_path, ": no token has id ", id,
                 " (ids must run from 0 to ", by_id.size() - 1, " without gaps)");
    id_of.emplace(by_id[id], static_cast<int32_t>(id));
  }
  std::vector<TokenSpec> specs(by_id.size(), TokenSpec{"", kPlain});
  for (size_t id = 0; id < by_id.size(); ++id) {
    if (raw[id]) {
      specs[id] = {by_id[id], kSpecial};
      continue;
    }
    std::string bad;
    ABLATE_CHECK(unmapped_bytes(by_id[id], specs[id].bytes, bad), vocab_path, ": token ",
                 in_quotes(by_id[id]), " (id ", id, "): ", bad,
                 ": not a byte-level BPE vocabulary such as GPT-2's encoder.json");
  }
  for (size_t r = 0; r < merges.size(); ++r) {
    const auto& [a, b] = merges[r];
    const std::string where =
        merges_path + ": merge " + std::to_string(r + 1) + " (" + in_quotes(a + " " + b) + ")";
    for (const std::string* part : {&a, &b})
      ABLATE_CHECK(id_of.count(*part), where, ": ", in_quotes(*part), " is not a token of ",
                   vocab_path, "; are the two files of the same tokenizer?");
    auto it = id_of.find(a + b);
    ABLATE_CHECK(it != id_of.end(), where, ": it makes ", in_quotes(a + b),
                 ", which is not a token of ", vocab_path,
                 "; are the two files of the same tokenizer?");
    TokenSpec& t = specs[static_cast<size_t>(it->second)];
    if (t.rank == kPlain) t.rank = static_cast<int32_t>(r);
  }
  if (unmerged_are_special)
    for (TokenSpec& t : specs)
      if (t.rank == kPlain && t.bytes.size() > 1) t.rank = kSpecial;
  return specs;
}

const char* const kTokenizerJsonFix =
    "Give `tokenizer_json` a Hugging Face tokenizer.json of a byte-level BPE model (GPT-2's, for "
    "example)";

// The error for a tokenizer.json that is not GPT-2's kind of byte-level BPE.
Error unsupported(const std::string& path, const std::string& what_found) {
  return Error(path + ": " + what_found +
               "; supported: GPT-2's byte-level BPE (no normalizer, pre_tokenizer "
               "ByteLevel with add_prefix_space "
               "false and use_regex true, no continuing_subword_prefix, "
               "end_of_word_suffix or byte_fallback)");
}

std::string string_field(const Json& o, const char* k) {
  return o.contains(k) && o[k].is_string() ? o[k].get<std::string>() : "";
}

// A tokenizer.json's BPE model, checked to be a byte-level BPE as GPT-2's (its pre-tokenizer,
// no normalizer, none of the options that change how words are cut).
const Json& byte_level_bpe_model(const Json& j, const std::string& path) {
  const std::string fix = kTokenizerJsonFix;
  if (!j.is_object() || !j.contains("model") || !j["model"].is_object())
    throw Error(path + ": not a Hugging Face tokenizer.json (no \"model\" object)" +
                (j.is_object() && !j.empty() && j.begin().value().is_number_integer()
                     ? std::string("; it looks like a token -> id map: name it with "
                                   "`encoder:` (and the merges file with `merges:`)")
                     : ". " + fix));
  const Json& model = j["model"];
  const std::string type = string_field(model, "type");
  if (type != "BPE")
    throw Error(path + ": the model is " +
                (type.empty() ? std::string("of no type") : "'" + type + "'") +
                "; supported: a byte-level 'BPE' model (model.type BPE with a ByteLevel "
                "pre-tokenizer, as GPT-2's)");
  if (j.contains("normalizer") && !j["normalizer"].is_null())
    throw unsupported(path, "the normalizer is '" + string_field(j["normalizer"], "type") + "'");
  const Json pre = j.contains("pre_tokenizer") ? j["pre_tokenizer"] : Json();
  if (pre.is_null())
    throw unsupported(path, "there is no pre_tokenizer (a byte-level BPE has ByteLevel)");
  if (string_field(pre, "type") != "ByteLevel")
    throw unsupported(path, "the pre_tokenizer is '" + string_field(pre, "type") + "'");
  if (pre.value("add_prefix_space", false))
    throw unsupported(path, "the ByteLevel pre_tokenizer has add_prefix_space true");
  if (!pre.value("use_regex", true))
    throw unsupported(path, "the ByteLevel pre_tokenizer has use_regex false");
  if (!string_field(model, "continuing_subword_prefix").empty())
    throw unsupported(path, "the model has a continuing_subword_prefix");
  if (!string_field(model, "end_of_word_suffix").empty())
    throw unsupported(path, "the model has an end_of_word_suffix");
  if (model.contains("byte_fallback") && model["byte_fallback"].is_boolean() &&
      model["byte_fallback"].get<bool>())
    throw unsupported(path, "the model has byte_fallback true");
  ABLATE_CHECK(model.contains("vocab") && model.contains("merges"), path,
               ": model.vocab or model.merges is missing. ", fix, ".");
  return model;
}

// model.merges: "a b" texts or ["a", "b"] pairs, in rank order.
Merges read_json_merges(const Json& list, const std::string& path) {
  ABLATE_CHECK(list.is_array(), path, ": model.merges is ", kind_of(list), ", expected a list");
  Merges merges;
  for (const Json& m : list) {
    const std::string at = path + ": model.merges[" + std::to_string(merges.size()) + "]";
    if (m.is_string()) {  // "a b"
      const std::string s = m.get<std::string>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || sp == 0 || sp + 1 == s.size() ||
          s.find(' ', sp + 1) != std::string::npos)
        throw Error(at + " is " + in_quotes(s) + ", expected 'a b' (two tokens and one space)");
      merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() &&
               m[1].is_string()) {  // ["a", "b"]
      merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    } else {
      throw Error(at + " is " + kind_of(m) + ", expected \"a b\" or [\"a\", \"b\"]");
    }
  }
  return merges;
}

// added_tokens as (id, content): special, matched in the text as written (not in GPT-2's
// character form).
std::vector<std::pair<int64_t, std::string>> read_added_tokens(const Json& j,
                                                               const std::string& path) {
  std::vector<std::pair<int64_t, std::string>> added;
  if (!j.contains("added_tokens") || j["added_tokens"].is_null()) return added;
  ABLATE_CHECK(j["added_tokens"].is_array(), path, ": added_tokens is ", kind_of(j["added_tokens"]),
               ", expected a list");
  for (const Json& a : j["added_tokens"]) {
    if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() ||
        !a.contains("content") || !a["content"].is_string())
      throw Error(path + ": added_tokens has an entry without an integer id and a content string");
    for (const char* flag : {"lstrip", "rstrip", "single_word"})
      if (a.contains(flag) && a[flag].is_boolean() && a[flag].get<bool>())
        throw unsupported(path, "the added token " + in_quotes(a["content"].get<std::string>()) +
                                    " has " + flag + " true");
    added.emplace_back(a["id"].get<int64_t>(), a["content"].get<std::string>());
  }
  return added;
}

// The added tokens put into the texts by id; returns which ids they are. An added token is
// special whether or not model.vocab also has it (GPT-2's <|endoftext|> is in both, with the
// same id).
std::vector<bool> add_tokens(const std::vector<std::pair<int64_t, std::string>>& added,
                             std::vector<std::string>& by_id, const std::string& path) {
  for (const auto& [id, content] : added) {
    if (id < 0 || id > static_cast<int64_t>(by_id.size()) + (1 << 20))
      throw Error(path + ": added token " + in_quotes(content) + " has id " + std::to_string(id) +
                  ", out of range");
    if (static_cast<size_t>(id) >= by_id.size()) by_id.resize(static_cast<size_t>(id) + 1);
  }
  std::vector<bool> raw(by_id.size(), false);
  for (const auto& [id, content] : added) {
    std::string& text = by_id[static_cast<size_t>(id)];
    std::string bytes, bad;
    if (!text.empty() && !(unmapped_bytes(text, bytes, bad) && bytes == content))
      throw Error(path + ": added token " + in_quotes(content) + " has id " + std::to_string(id) +
                  ", which model.vocab gives to " + in_quotes(text));
    text = content;
    raw[static_cast<size_t>(id)] = true;
  }
  return raw;
}

}  // namespace

std::vector<TokenSpec> read_tokenizer_json(const std::string& path) {
  const std::string fix = kTokenizerJsonFix;
  const Json j = parse_json(read_file(path, path), path, fix + ".");
  const Json& model = byte_level_bpe_model(j, path);
  std::vector<std::string> by_id =
      read_vocab_map(model["vocab"], path + " (model.vocab)", fix + ".");
  const Merges merges = read_json_merges(model["merges"], path);
  const std::vector<bool> raw = add_tokens(read_added_tokens(j, path), by_id, path);
  return specs_of(by_id, raw, merges, false, path + " (model.vocab)", path + " (model.merges)");
}

// GPT-2's two files (or Hugging Face's vocab.json and merges.txt).
std::vector<TokenSpec> read_gpt2_files(const std::string& encoder_path,
                                       const std::string& merges_path) {
  const std::string fix_e =
      "`encoder` names GPT-2's encoder.json (Hugging Face: vocab.json), a JSON map of token -> id";
  const std::string fix_m =
      "`merges` names GPT-2's vocab.bpe (Hugging Face: merges.txt), one merge 'a b' per line";
  const std::string enc_text = read_file(encoder_path, encoder_path);
  if (enc_text.rfind("#version", 0) == 0)
    throw Error(encoder_path +
                ": this is a merges file (it starts with '#version', as vocab.bpe does), "
                "not a token -> id map: "
                "give it as `merges`. " +
                fix_e);
  const Json j = parse_json(enc_text, encoder_path, fix_e + ".");
  const std::vector<std::string> by_id = read_vocab_map(j, encoder_path, fix_e + ".");
  const Merges merges =
      read_merges_text(read_file(merges_path, merges_path), merges_path, fix_m + ".");
  return specs_of(by_id, std::vector<bool>(by_id.size(), false), merges, true, encoder_path,
                  merges_path);
}

std::string in_quotes(const std::string& s, size_t max) {
  std::string q = s.size() > max ? s.substr(0, max) + "..." : s;
  return "'" + q + "'";
}

}  // namespace ablate::gpt2
