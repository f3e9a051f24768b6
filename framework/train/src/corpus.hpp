// Reading a text corpus as a stream of documents, for `ablate data prepare` (prepare.cpp):
// plain, gzip (.gz) or zstd (.zst) files, decompressed as they are read; text files (a file
// is a document, or documents are cut at a separator) and JSONL (a document per line, the
// text in one field). Long documents come in pieces, so memory stays bounded whatever the
// file. Internal to the train layer.
#pragma once
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "ablate/data_source.hpp"

namespace ablate {

// Files that an input names: a file, a directory (its files, recursively, by name; hidden
// ones left out) or a glob pattern. `skip_under`: a directory whose files are never inputs
// (the output). Errors name the input.
std::vector<std::string> expand_inputs(const std::string& input, const std::string& skip_under);

// A file's bytes, decompressed when its name ends in .gz or .zst; the SHA-256 of the file as
// stored and the bytes read from it so far (compressed) come with them.
class ByteStream {
 public:
  explicit ByteStream(const std::string& path);
  ~ByteStream();
  ByteStream(const ByteStream&) = delete;
  ByteStream& operator=(const ByteStream&) = delete;
  // Up to n bytes into out; 0 at the end.
  size_t read(char* out, size_t n);
  uint64_t consumed() const { return consumed_; }
  std::string sha256() { return sha_.hex(); }  // of the whole file, once read to the end
  const std::string& path() const { return path_; }

 private:
  size_t fill_raw();  // reads the next raw block; 0 at the end of the file
  enum class Kind { kPlain, kGzip, kZstd } kind_;
  std::string path_;
  std::FILE* f_ = nullptr;
  uint64_t consumed_ = 0;
  Sha256 sha_;
  std::vector<char> raw_;
  size_t raw_pos_ = 0, raw_len_ = 0;
  bool raw_eof_ = false, done_ = false;
  bool frame_done_ = false;  // zstd: the last frame read is complete
  void* z_ = nullptr;        // z_stream or ZSTD_DStream
};

// A piece of a document: a whole document, or a part of a long one cut after a newline
// (or, in a line longer than a piece, at a UTF-8 character boundary).
struct Piece {
  std::string text;
  bool starts_document = false;
  std::string where;  // "file:line" (JSONL) or "file" and the byte offset, for errors
};

// Documents of one file, piece by piece.
class DocumentReader {
 public:
  // `jsonl`: a document per line, its text in `field`; else `separator` cuts a text file into
  // documents ("" : the file is one document). Empty documents are left out.
  DocumentReader(const std::string& path, bool jsonl, const std::string& field,
                 const std::string& separator, size_t piece_bytes);
  // The next piece; false at the end of the file.
  bool next(Piece& p);
  ByteStream& stream() { return in_; }

 private:
  bool more();  // reads more bytes into buf_; false at the end
  bool next_jsonl(Piece& p);
  // The text of a JSONL line's field; Error naming `where` when the line has none.
  std::string jsonl_text(const std::string& line, const std::string& where) const;
  // Text: the next document up to the separator, or a piece of a long one.
  bool next_text(Piece& p);
  // Where a piece of a long document ends: after a newline between two characters that are not
  // white space (no GPT-2 pre-token spans such a newline, so its ids are those of the whole),
  // else after any newline, else at a UTF-8 boundary; at most piece_ bytes after pos_.
  size_t piece_cut() const;
  // buf_[pos_, cut) as the next piece; `document_goes_on` when more of its document follows.
  void take_piece(Piece& p, size_t cut, bool document_goes_on);
  ByteStream in_;
  bool jsonl_;
  std::string field_, sep_;
  size_t piece_;
  std::string buf_;
  size_t pos_ = 0;       // unread bytes start here
  uint64_t offset_ = 0;  // decompressed offset of buf_[pos_]
  int64_t line_ = 0;     // JSONL lines read
  bool eof_ = false, in_document_ = false;
};

// True when a file is read as JSONL: its name (without .gz / .zst) ends in .jsonl or .ndjson.
bool is_jsonl_name(const std::string& path);

}  // namespace ablate
