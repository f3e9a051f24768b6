// Reading a corpus as documents (see corpus.hpp).
#include "corpus.hpp"

#include <glob.h>
#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "ablate/error.hpp"

namespace ablate {

namespace fs = std::filesystem;

namespace {

constexpr size_t kRawBlock = size_t{1} << 20;  // bytes read from a file at a time
constexpr size_t kReadMore = size_t{1} << 20;  // decompressed bytes a reader asks for at a time

bool ends_with(const std::string& s, const std::string& end) {
  return s.size() >= end.size() && s.compare(s.size() - end.size(), end.size(), end) == 0;
}

constexpr size_t kCleanCutSearch = size_t{64}
                                   << 10;  // how far back a piece's end looks for a clean cut

bool is_space(char c) {
  return c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
}

bool has_glob_chars(const std::string& s) { return s.find_first_of("*?[") != std::string::npos; }

bool is_under(const fs::path& p, const fs::path& dir) {
  if (dir.empty()) return false;
  auto rel = p.lexically_relative(dir);
  return !rel.empty() && *rel.begin() != "..";
}

fs::path canonical_or_same(const fs::path& p) {
  std::error_code ec;
  fs::path c = fs::weakly_canonical(p, ec);
  return ec ? p : c;
}

}  // namespace

bool is_jsonl_name(const std::string& path) {
  std::string n = fs::path(path).filename().string();
  for (const char* z : {".gz", ".zst"})
    if (ends_with(n, z)) n.resize(n.size() - std::strlen(z));
  return ends_with(n, ".jsonl") || ends_with(n, ".ndjson");
}

std::vector<std::string> expand_inputs(const std::string& input, const std::string& skip_under) {
  const fs::path skip = skip_under.empty() ? fs::path() : canonical_or_same(skip_under);
  std::vector<std::string> out;
  std::error_code ec;
  if (fs::is_regular_file(input, ec)) return {input};
  if (fs::is_directory(input, ec)) {
    for (auto it = fs::recursive_directory_iterator(input, ec);
         !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
      const fs::path& p = it->path();
      const std::string name = p.filename().string();
      if (!name.empty() && name[0] == '.') {
        if (it->is_directory()) it.disable_recursion_pending();
        continue;
      }
      if (is_under(canonical_or_same(p), skip)) continue;
      if (it->is_regular_file()) out.push_back(p.string());
    }
    if (ec) throw Error(input + ": cannot list the directory: " + ec.message());
    std::sort(out.begin(), out.end());
    if (out.empty()) throw Error(input + ": a directory with no files to read");
    return out;
  }
  if (has_glob_chars(input)) {
    glob_t g{};
    if (::glob(input.c_str(), 0, nullptr, &g) == 0)
      for (size_t i = 0; i < g.gl_pathc; ++i)
        if (fs::is_regular_file(g.gl_pathv[i], ec) &&
            !is_under(canonical_or_same(g.gl_pathv[i]), skip))
          out.emplace_back(g.gl_pathv[i]);
    ::globfree(&g);
    std::sort(out.begin(), out.end());
    if (out.empty())
      throw Error("'" + input +
                  "' matches no file; give files, a directory or a glob that matches some");
    return out;
  }
  throw Error(input + ": no such file or directory");
}

// ---- ByteStream --------------------------------------------------------------------------

ByteStream::ByteStream(const std::string& path) : path_(path), raw_(kRawBlock) {
  kind_ = ends_with(path, ".gz")    ? Kind::kGzip
          : ends_with(path, ".zst") ? Kind::kZstd
                                    : Kind::kPlain;
  f_ = std::fopen(path.c_str(), "rb");
  if (!f_) throw Error(path + ": cannot open: " + std::strerror(errno));
  if (kind_ == Kind::kGzip) {
    auto* z = new z_stream{};
    // 15 + 32: a zlib or gzip header, detected
    if (inflateInit2(z, 15 + 32) != Z_OK) {
      delete z;
      std::fclose(f_);
      throw Error(path + ": cannot start zlib's decompressor");
    }
    z_ = z;
  } else if (kind_ == Kind::kZstd) {
    ZSTD_DStream* d = ZSTD_createDStream();
    if (!d) {
      std::fclose(f_);
      throw Error(path + ": cannot start zstd's decompressor");
    }
    ZSTD_initDStream(d);
    z_ = d;
  }
}

ByteStream::~ByteStream() {
  if (kind_ == Kind::kGzip && z_) {
    inflateEnd(static_cast<z_stream*>(z_));
    delete static_cast<z_stream*>(z_);
  } else if (kind_ == Kind::kZstd && z_) {
    ZSTD_freeDStream(static_cast<ZSTD_DStream*>(z_));
  }
  if (f_) std::fclose(f_);
}

size_t ByteStream::fill_raw() {
  if (raw_eof_) return 0;
  const size_t n = std::fread(raw_.data(), 1, raw_.size(), f_);
  if (n < raw_.size() && std::ferror(f_))
    throw Error(path_ + ": read error: " + std::strerror(errno));
  if (n == 0) raw_eof_ = true;
  sha_.update(raw_.data(), n);
  consumed_ += n;
  raw_pos_ = 0;
  raw_len_ = n;
  return n;
}

size_t ByteStream::read(char* out, size_t n) {
  if (done_ || n == 0) return 0;
  if (kind_ == Kind::kPlain) {
    if (raw_pos_ == raw_len_ && fill_raw() == 0) {
      done_ = true;
      return 0;
    }
    const size_t k = std::min(n, raw_len_ - raw_pos_);
    std::memcpy(out, raw_.data() + raw_pos_, k);
    raw_pos_ += k;
    return k;
  }
  if (kind_ == Kind::kGzip) {
    auto* z = static_cast<z_stream*>(z_);
    z->next_out = reinterpret_cast<Bytef*>(out);
    z->avail_out = static_cast<uInt>(std::min<size_t>(n, 1u << 30));
    const uInt want = z->avail_out;
    while (z->avail_out == want) {
      if (raw_pos_ == raw_len_) {
        if (fill_raw() == 0) {
          if (consumed_ == 0) throw Error(path_ + ": an empty file, not gzip data");
          throw Error(path_ + ": gzip data cut short at byte " + std::to_string(consumed_) +
                      " (the file ends inside a compressed stream): copy or compress it again");
        }
      }
      z->next_in = reinterpret_cast<Bytef*>(raw_.data() + raw_pos_);
      z->avail_in = static_cast<uInt>(raw_len_ - raw_pos_);
      const int rc = inflate(z, Z_NO_FLUSH);
      raw_pos_ = raw_len_ - z->avail_in;
      if (rc == Z_STREAM_END) {
        // Concatenated gzip members (as `cat a.gz b.gz`) are one stream: go on if more follows.
        if (raw_pos_ == raw_len_ && fill_raw() == 0) {
          done_ = true;
          break;
        }
        inflateReset(z);
      } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
        throw Error(path_ + ": not valid gzip data near byte " +
                    std::to_string(consumed_ - (raw_len_ - raw_pos_)) + ": " +
                    (z->msg ? z->msg : "zlib error " + std::to_string(rc)));
      }
    }
    return want - z->avail_out;
  }
  auto* d = static_cast<ZSTD_DStream*>(z_);
  ZSTD_outBuffer ob{out, n, 0};
  while (ob.pos == 0) {
    if (raw_pos_ == raw_len_ && fill_raw() == 0) {
      if (consumed_ == 0) throw Error(path_ + ": an empty file, not zstd data");
      if (!frame_done_)
        throw Error(path_ + ": zstd data cut short at byte " + std::to_string(consumed_) +
                    " (the file ends inside a frame): copy or compress it again");
      done_ = true;
      return 0;
    }
    ZSTD_inBuffer ib{raw_.data() + raw_pos_, raw_len_ - raw_pos_, 0};
    const size_t rc = ZSTD_decompressStream(d, &ob, &ib);
    raw_pos_ += ib.pos;
    if (ZSTD_isError(rc))
      throw Error(path_ + ": not valid zstd data near byte " +
                  std::to_string(consumed_ - (raw_len_ - raw_pos_)) + ": " + ZSTD_getErrorName(rc));
    frame_done_ = rc == 0;
  }
  return ob.pos;
}

// ---- DocumentReader ----------------------------------------------------------------------

DocumentReader::DocumentReader(const std::string& path, bool jsonl, const std::string& field,
                               const std::string& separator, size_t piece_bytes)
    : in_(path),
      jsonl_(jsonl),
      field_(field),
      sep_(separator),
      piece_(std::max<size_t>(piece_bytes, 16)) {}

bool DocumentReader::more() {
  if (eof_) return false;
  if (pos_ > 0 && pos_ >= buf_.size() / 2) {
    buf_.erase(0, pos_);
    pos_ = 0;
  }
  const size_t old = buf_.size();
  buf_.resize(old + kReadMore);
  const size_t n = in_.read(buf_.data() + old, kReadMore);
  buf_.resize(old + n);
  if (n == 0) eof_ = true;
  return n > 0;
}

bool DocumentReader::next(Piece& p) { return jsonl_ ? next_jsonl(p) : next_text(p); }

bool DocumentReader::next_jsonl(Piece& p) {
  size_t scan = 0;  // bytes after pos_ known to hold no newline
  for (;;) {
    size_t nl = buf_.find('\n', pos_ + scan);
    if (nl == std::string::npos) {
      scan = buf_.size() - pos_;
      if (more()) continue;
      if (pos_ == buf_.size()) return false;
      nl = buf_.size();  // the last line, without a newline
    }
    std::string line = buf_.substr(pos_, nl - pos_);
    ++line_;
    offset_ += std::min(nl + 1, buf_.size()) - pos_;
    pos_ = std::min(nl + 1, buf_.size());
    scan = 0;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = in_.path() + ":" + std::to_string(line_);
    std::string text = jsonl_text(line, where);
    if (text.empty()) continue;
    p.text = std::move(text);
    p.starts_document = true;
    p.where = where;
    return true;
  }
}

std::string DocumentReader::jsonl_text(const std::string& line, const std::string& where) const {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(line);
  } catch (const nlohmann::json::exception& e) {
    throw Error(where + ": not a JSON line: " + e.what() +
                ". JSONL holds one JSON object per line");
  }
  if (!j.is_object())
    throw Error(where + ": a JSON " + std::string(j.type_name()) + ", not an object {\"" + field_ +
                "\": \"...\"}");
  auto it = j.find(field_);
  if (it == j.end()) {
    std::vector<std::string> keys;
    for (const auto& kv : j.items()) keys.push_back(kv.key());
    throw Error(where + ": no field '" + field_ + "'; this object has " +
                (keys.empty() ? "no fields" : "fields " + join(keys)) +
                ". Name the field that holds the text: --field NAME");
  }
  if (!it->is_string())
    throw Error(where + ": field '" + field_ + "' is a JSON " + std::string(it->type_name()) +
                ", not a string of text");
  return it->get<std::string>();
}

bool DocumentReader::next_text(Piece& p) {
  const size_t keep_back = sep_.empty() ? 0 : sep_.size() - 1;  // a separator may start there
  size_t scan = 0;
  for (;;) {
    if (!sep_.empty()) {
      const size_t f = buf_.find(sep_, pos_ + scan);
      if (f != std::string::npos) {
        const bool starts = !in_document_;
        const uint64_t at = offset_;
        std::string text = buf_.substr(pos_, f - pos_);
        offset_ += f + sep_.size() - pos_;
        pos_ = f + sep_.size();
        in_document_ = false;
        scan = 0;
        if (text.empty()) continue;  // an empty document, or the end of one cut into pieces
        p.text = std::move(text);
        p.starts_document = starts;
        p.where = in_.path() + " byte " + std::to_string(at);
        return true;
      }
    }
    const size_t avail = buf_.size() - pos_;
    if (avail >= piece_ + keep_back) {
      take_piece(p, piece_cut(), true);
      return true;
    }
    scan = avail > keep_back ? avail - keep_back : 0;
    if (more()) continue;
    if (pos_ == buf_.size()) {
      in_document_ = false;
      return false;
    }
    take_piece(p, buf_.size(), false);
    return true;
  }
}

size_t DocumentReader::piece_cut() const {
  const size_t end = pos_ + piece_;  // the piece is [pos_, cut), cut <= end
  for (size_t c = end - 1; c > pos_ && c + 1 < buf_.size() && c + kCleanCutSearch > end; --c)
    if (buf_[c] == '\n' && !is_space(buf_[c - 1]) && !is_space(buf_[c + 1])) return c + 1;
  const size_t nl = buf_.rfind('\n', end - 1);
  if (nl != std::string::npos && nl >= pos_) return nl + 1;
  size_t cut = end;
  while (cut > pos_ + 1 && (static_cast<unsigned char>(buf_[cut]) & 0xC0) == 0x80) --cut;
  return cut;
}

void DocumentReader::take_piece(Piece& p, size_t cut, bool document_goes_on) {
  p.text = buf_.substr(pos_, cut - pos_);
  p.starts_document = !in_document_;
  p.where = in_.path() + " byte " + std::to_string(offset_);
  in_document_ = document_goes_on;
  offset_ += cut - pos_;
  pos_ = cut;
}

}  // namespace ablate
