// GPT-2's byte-level BPE, the parts that its tokenizer (plugins/tokenizer/gpt2/) and the
// trainer of byte-level BPE vocabularies (ablate/bpe_train.hpp, `ablate data train-tokenizer`)
// share: the pre-tokenizer, which cuts text into pieces as GPT-2's regex
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// does (a hand-written scanner with Unicode 17's letter, number and White_Space tables), and
// GPT-2's "bytes_to_unicode" map between bytes and the characters that token files write them as.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace ablate::byte_bpe {

// ---- Unicode classes for the pre-tokenizer ---------------------------------------------------

enum Class : uint8_t { kOther = 0, kLetter = 1, kNumber = 2, kSpace = 3 };

// Classes of U+0000..U+FFFF, one byte each.
const std::array<uint8_t, 0x10000>& bmp_classes();
// The class of a code point above U+FFFF.
uint8_t astral_class(uint32_t cp);

// One character of the text: its class and its length in bytes. A byte that does not start
// a valid UTF-8 sequence is a character of its own, of class kOther.
struct Char {
  uint8_t cls, len;
};

class Scanner {
 public:
  Scanner() : bmp_(bmp_classes()) {}

  Char at(const unsigned char* s, size_t i, size_t n) const {
    const unsigned char b0 = s[i];
    if (b0 < 0x80) return {bmp_[b0], 1};
    const size_t left = n - i;
    if (b0 >= 0xC2 && b0 <= 0xDF) {
      if (left >= 2 && (s[i + 1] & 0xC0) == 0x80)
        return {bmp_[((b0 & 0x1Fu) << 6) | (s[i + 1] & 0x3Fu)], 2};
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
      if (left >= 3 && (s[i + 1] & 0xC0) == 0x80 && (s[i + 2] & 0xC0) == 0x80) {
        const uint32_t cp = ((b0 & 0x0Fu) << 12) | ((s[i + 1] & 0x3Fu) << 6) | (s[i + 2] & 0x3Fu);
        if (cp >= 0x800 && (cp < 0xD800 || cp > 0xDFFF)) return {bmp_[cp], 3};
      }
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
      if (left >= 4 && (s[i + 1] & 0xC0) == 0x80 && (s[i + 2] & 0xC0) == 0x80 &&
          (s[i + 3] & 0xC0) == 0x80) {
        const uint32_t cp = ((b0 & 0x07u) << 18) | ((s[i + 1] & 0x3Fu) << 12) |
                            ((s[i + 2] & 0x3Fu) << 6) | (s[i + 3] & 0x3Fu);
        if (cp >= 0x10000 && cp <= 0x10FFFF) return {astral_class(cp), 4};
      }
    }
    return {kOther, 1};
  }

  // Calls emit(begin, end) for each piece of s[0, n), in order, as the regex of GPT-2 cuts
  // them (leftmost alternative first, each greedy).
  template <class F>
  void split(const unsigned char* s, size_t n, F&& emit) const {
    size_t i = 0;
    while (i < n) {
      const size_t start = i;
      if (s[i] == '\'' && i + 1 < n) {  // 's 't 're 've 'm 'll 'd
        const unsigned char c = s[i + 1];
        if (c == 's' || c == 't' || c == 'm' || c == 'd') {
          emit(i, i + 2);
          i += 2;
          continue;
        }
        if (i + 2 < n) {
          const unsigned char d = s[i + 2];
          if ((c == 'r' && d == 'e') || (c == 'v' && d == 'e') || (c == 'l' && d == 'l')) {
            emit(i, i + 3);
            i += 3;
            continue;
          }
        }
      }
      Char c = at(s, i, n);
      if (s[i] == ' ' && i + 1 < n) {  // " ?" before letters, numbers or other symbols
        const Char d = at(s, i + 1, n);
        if (d.cls != kSpace) ++i, c = d;
      }
      size_t j = i + c.len;
      if (c.cls == kSpace) {
        // \s+(?!\S): a whitespace run that a non-space follows leaves its last character to
        // the next piece (a single character stays: \s+).
        size_t last = i;
        while (j < n) {
          const Char d = at(s, j, n);
          if (d.cls != kSpace) break;
          last = j;
          j += d.len;
        }
        if (j < n && last > i) j = last;
      } else {
        while (j < n) {
          const Char d = at(s, j, n);
          if (d.cls != c.cls) break;
          j += d.len;
        }
      }
      emit(start, j);
      i = j;
    }
  }

 private:
  const std::array<uint8_t, 0x10000>& bmp_;
};

// One scanner for the process (its table is built once).
const Scanner& scanner();

// ---- GPT-2's byte <-> character map ----------------------------------------------------------

// bytes_to_unicode: the printable bytes ('!'..'~', U+00A1..U+00AC, U+00AE..U+00FF) stand for
// themselves, the other 68 for U+0100, U+0101, ... in byte order (a space is U+0120 'Ġ').
struct ByteMap {
  std::array<uint32_t, 256> to_cp{};
  std::array<int16_t, 0x144> to_byte{};  // code point -> byte, -1 for none
  ByteMap() {
    to_byte.fill(-1);
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable =
          (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      to_cp[b] = printable ? static_cast<uint32_t>(b) : next++;
      to_byte[to_cp[b]] = static_cast<int16_t>(b);
    }
  }
};

const ByteMap& byte_map();

// Bytes in GPT-2's character form (UTF-8): "Hello world" -> "HelloĠworld".
std::string to_chars(std::string_view bytes);

// The 256 bytes in the order of GPT-2's first 256 ids (its encoder.json): the printable ones
// ('!'..'~', U+00A1..U+00AC, U+00AE..U+00FF) in byte order, then the other 68 in byte order.
const std::array<uint8_t, 256>& byte_order();

}  // namespace ablate::byte_bpe
