// Place-value embeddings for numbers in a prompt, in the spirit of Abacus embeddings
// (McLeish et al. 2024, each digit's position within its number), but indexed by the
// digit's place relative to the decimal point: units 0, tens 1, tenths -1, hundredths -2.
// Digits of the same significance get the same vector wherever the point puts them
// (`753.78` and `910`: the 7 and the 9 are both hundreds), so + and - can align them.
//
// Learned absolute positions (a table (context, C), as `learned`) plus a learned table of
// place rows added to x (B*T, C):
//   - a digit in a number (a maximal run of digit and point tokens) inside the row's
//     prompt (positions before Batch::prefix[b]) gets the row of its place: the place
//     is counted from the run's first point, or from the run's end if it has none, so it
//     reads the digits after it, up to the point: only the prompt, which no loss scores
//     and which generation is given whole, may look ahead (the run is cut at the prompt's
//     end, so nothing past it is read);
//   - a point in the prompt gets the point row;
//   - every other token, every token past the prompt, and every token when the caller
//     gives no ids (Batch::ids null) or no prompt (prefix null) gets the "other" row.
// Places beyond the table share its last row on each side (options integers, decimals).
// Which tokens are digits and the point comes from the tokenizer's vocabulary
// (BuildContext::vocab): a token whose text is one character of `digits`, or `point`.
#include <algorithm>
#include <string>
#include <vector>

#include "ablate/ops.hpp"
#include "ablate/plugin.hpp"
#include "ablate/positional.hpp"

namespace {

class PlaceValue final : public ablate::PositionalEncoding {
 public:
  bool rotates() const override { return false; }

  PlaceValue(const ablate::Options& o, const ablate::BuildContext& c)
      : context_(c.dims.context),
        integers_(
            o.get_in<int64_t>("integers", 10, 1, 4096,
                              "places before the point with rows of their own (units, tens, ...)")),
        decimals_(o.get_in<int64_t>("decimals", 4, 0, 4096,
                                    "places after the point with rows of their own (tenths, ...)")),
        absolute_(o.get<bool>("absolute", true,
                              "also learned absolute positions (a table of model.context rows)")) {
    const std::string digits =
        o.get<std::string>("digits", "0123456789", "the characters that are digits");
    const std::string point =
        o.get<std::string>("point", ".", "the decimal point's token text (\"\" for none)");
    if (digits.empty())
      o.fail("digits", "is empty; give the digit characters, e.g. \"0123456789\"");
    if (point.size() == 1 && digits.find(point[0]) != std::string::npos)
      o.fail("point", "'" + point + "' is also one of digits \"" + digits +
                          "\"; a token is a digit or the point, not both");
    if (c.dims.context <= 0 || c.dims.d_model <= 0)
      o.fail("",
             "needs positive context and d_model, got context = " + std::to_string(c.dims.context) +
                 ", d_model = " + std::to_string(c.dims.d_model));
    if (!c.vocab)
      o.fail("",
             "needs the tokenizer's vocabulary to know which tokens are digits "
             "(BuildContext::vocab); 'ablate run' and "
             "'ablate eval' give it, a program that builds a Model itself passes the token texts "
             "to Model's constructor");
    if (static_cast<int64_t>(c.vocab->size()) != c.dims.vocab_size)
      o.fail("", "the vocabulary has " + std::to_string(c.vocab->size()) + " token texts for " +
                     std::to_string(c.dims.vocab_size) +
                     " ids (BuildContext::vocab and ModelDims::vocab_size must agree)");
    kind_.assign(c.vocab->size(), kNone);
    int64_t n_digits = 0;
    for (size_t id = 0; id < c.vocab->size(); ++id) {
      const std::string& s = (*c.vocab)[id];
      if (!point.empty() && s == point) kind_[id] = kPoint;
      else if (s.size() == 1 && digits.find(s[0]) != std::string::npos)
        kind_[id] = kDigit, ++n_digits;
    }
    if (n_digits == 0)
      o.fail("digits", "no token of the vocabulary (" + std::to_string(c.vocab->size()) +
                           " tokens) is one of \"" + digits +
                           "\"; place values need a tokenizer with one token per digit (tokenizer: "
                           "char or byte)");
    ablate::ParamScope ps = c.params;
    if (absolute_)
      table_ = &ps.add("weight", c.dims.context, c.dims.d_model, ablate::Role::kPosition);
    // Rows: other, point, then places -decimals .. integers-1.
    places_ = &ps.add("places", 2 + decimals_ + integers_, c.dims.d_model, ablate::Role::kPosition);
  }

  ablate::Var embed(ablate::Graph& g, ablate::Var x, const ablate::Batch& in) override {
    const int64_t B = in.batch, T = in.time;
    if (in.pos0 < 0 || (absolute_ && in.pos0 + T > context_))
      throw ablate::Error("place_value positions: positions " + std::to_string(in.pos0) + ".." +
                          std::to_string(in.pos0 + T - 1) + " exceed the table of " +
                          std::to_string(context_) +
                          " (model.context); shorten the input or set absolute: false");
    // Decoding calls embed on two threads at once (docs/PLUGINS.md): scratch per thread.
    thread_local std::vector<int32_t> rows;
    rows.resize(static_cast<size_t>(B * T));
    if (absolute_) {
      for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 0; t < T; ++t)
          rows[static_cast<size_t>(b * T + t)] = static_cast<int32_t>(in.pos0 + t);
      x = ablate::add(g, x, ablate::embedding(g, g.param(*table_), rows.data(), B * T));
    }
    std::fill(rows.begin(), rows.end(), kOtherRow);
    for (int64_t b = 0; in.ids && in.prefix && b < B; ++b) {
      // The row's prompt within this window: positions pos0 + t < prefix[b].
      const int64_t end = std::clamp<int64_t>(in.prefix[b] - in.pos0, 0, T);
      place_row(in.ids + b * T, end, rows.data() + b * T);
    }
    return ablate::add(g, x, ablate::embedding(g, g.param(*places_), rows.data(), B * T));
  }

  int64_t max_positions() const override { return absolute_ ? context_ : -1; }

 private:
  enum Kind : uint8_t { kNone = 0, kDigit, kPoint };
  static constexpr int32_t kOtherRow = 0, kPointRow = 1;

  Kind kind_of(int32_t id) const {
    return id >= 0 && static_cast<size_t>(id) < kind_.size()
               ? static_cast<Kind>(kind_[static_cast<size_t>(id)])
               : kNone;
  }
  int32_t place_row_of(int64_t place) const {
    return static_cast<int32_t>(2 + decimals_ +
                                std::clamp<int64_t>(place, -decimals_, integers_ - 1));
  }

  // Rows for ids[0, n), each run of digits and points by its first point: a digit before
  // it (or anywhere in a run without one) is units - k places up, the d-th digit after it
  // place -d; a second point in a run gets the other row.
  void place_row(const int32_t* ids, int64_t n, int32_t* out) const {
    for (int64_t i = 0; i < n;) {
      if (kind_of(ids[i]) == kNone) {
        ++i;
        continue;
      }
      int64_t j = i, point = -1;
      for (; j < n && kind_of(ids[j]) != kNone; ++j)
        if (point < 0 && kind_of(ids[j]) == kPoint) point = j;
      const int64_t units = point >= 0 ? point - 1 : j - 1;
      int64_t after = 0;
      for (int64_t k = i; k < j; ++k) {
        if (kind_of(ids[k]) == kPoint) out[k] = k == point ? kPointRow : kOtherRow;
        else out[k] = place_row_of(point >= 0 && k > point ? -(++after) : units - k);
      }
      i = j;
    }
  }

  int64_t context_, integers_, decimals_;
  bool absolute_;
  std::vector<uint8_t> kind_;  // per token id: other, digit, point
  ablate::Parameter* table_ = nullptr;
  ablate::Parameter* places_ = nullptr;
};

}  // namespace
ABLATE_PLUGIN(ablate::PositionalEncoding, place_value, PlaceValue,
              "learned positions plus each prompt digit's place relative to the decimal point "
              "(Abacus-like, McLeish et al. 2024)")
