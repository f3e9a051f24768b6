// Family "tokenizer": its descriptor (see ablate/family.hpp) and the skeleton of
// `ablate plugin new tokenizer NAME`; its conformance checks are in conformance/tokenizer.cpp.
#include "ablate/tokenizer.hpp"

#include "../conformance/suites.hpp"

namespace ablate {
namespace {

const char* kTemplate =
    R"TPL(// @NAME@: a tokenizer for ablate (family "tokenizer"), from `ablate plugin new tokenizer @NAME@`.
// Fitted on the training text and saved with the run, so that generation encodes prompts as
// training did. As generated: the bytes that occur in the training text, sorted, then one
// unknown id (V-1) for the others. decode(encode(text)) == text for the training text.
#include <array>
#include <sstream>
#include <string>
#include <vector>

#include "ablate/error.hpp"
#include "ablate/plugin.hpp"
#include "ablate/tokenizer.hpp"

namespace {

class @CLASS@ final : public ablate::Tokenizer {
 public:
  @CLASS@(const ablate::Options& o, const ablate::BuildContext&)
      : unknown_(o.get<std::string>("unknown", "\xEF\xBF\xBD", "text that the unknown id decodes to (default U+FFFD)")) {
    set_bytes({});
  }

  void fit(const std::string& text) override {
    std::array<bool, 256> seen{};
    for (unsigned char ch : text) seen[ch] = true;
    std::vector<int> bytes;
    for (int b = 0; b < 256; ++b)
      if (seen[static_cast<size_t>(b)]) bytes.push_back(b);
    set_bytes(bytes);
  }

  std::vector<int32_t> encode(const std::string& text) const override {
    std::vector<int32_t> ids;
    ids.reserve(text.size());
    for (unsigned char ch : text) ids.push_back(id_[ch]);
    return ids;
  }

  std::string decode(const std::vector<int32_t>& ids) const override {
    std::string out;
    for (int32_t id : ids) {
      if (id >= 0 && static_cast<size_t>(id) < bytes_.size()) out += static_cast<char>(bytes_[static_cast<size_t>(id)]);
      else out += unknown_;
    }
    return out;
  }

  int64_t vocab_size() const override { return static_cast<int64_t>(bytes_.size()) + 1; }

  std::string save() const override {
    std::ostringstream s;
    s << "@NAME@ 1 " << bytes_.size();
    for (int b : bytes_) s << " " << b;
    return s.str();
  }

  void load(const std::string& state) override {
    std::istringstream s(state);
    std::string magic;
    int version = 0;
    size_t n = 0;
    if (!(s >> magic >> version >> n) || magic != "@NAME@" || version != 1 || n > 256)
      throw ablate::Error("@NAME@ tokenizer state: not a version-1 @NAME@ state");
    std::vector<int> bytes(n);
    for (size_t i = 0; i < n; ++i)
      if (!(s >> bytes[i]) || bytes[i] < 0 || bytes[i] > 255) throw ablate::Error("@NAME@ tokenizer state: bad byte value");
    set_bytes(bytes);
  }

 private:
  void set_bytes(const std::vector<int>& bytes) {
    bytes_ = bytes;
    id_.fill(static_cast<int32_t>(bytes_.size()));  // the unknown id
    for (size_t i = 0; i < bytes_.size(); ++i) id_[static_cast<size_t>(bytes_[i])] = static_cast<int32_t>(i);
  }

  std::string unknown_;
  std::vector<int> bytes_;       // id -> byte
  std::array<int32_t, 256> id_;  // byte -> id
};

}  // namespace
ABLATE_PLUGIN(ablate::Tokenizer, @NAME@, @CLASS@, "the bytes of the training text plus an unknown id")
)TPL";

[[maybe_unused]] const bool registered = register_family([] {
  FamilyDescriptor d;
  d.name = Tokenizer::kFamily;
  d.key = "tokenizer";
  d.list = false;
  d.default_variant = "char";
  d.summary = "text to token ids and back, fitted on the training text";
  d.checks = &conformance::check_tokenizer;
  d.template_summary = "the bytes of the training text plus an unknown id";
  d.template_source = kTemplate;
  return d;
}());

}  // namespace
}  // namespace ablate
