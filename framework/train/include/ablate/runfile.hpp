// One HDF5 file per run: root attributes (config, provenance, status), metric tables
// /metrics/<group>/<column> (1-D float64, one row per append) and text datasets.
// Layout and reading examples: docs/RESULTS.md. HDF5 stays behind the pimpl.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace ablate {

// Writer. Every method throws ablate::Error naming the file on failure.
class RunFile {
 public:
  static constexpr const char* kFormat = "ablate-run";
  static constexpr int64_t kFormatVersion = 1;

  // Creates (truncating) path and writes the root attributes format and format_version.
  static RunFile create(const std::string& path);
  // The writer takes no HDF5 file lock, so that h5py and other readers open the file while
  // a run writes it (as of its last flush); the trainer keeps two writers apart with
  // run.lock in the run directory instead.
  // Opens an existing run file for appending (resume). Tables found in the file keep
  // their columns; a table whose columns differ in length (a writer killed mid-row) is
  // cut back to its shortest column.
  static RunFile open_append(const std::string& path);

  RunFile(RunFile&&) noexcept;
  RunFile& operator=(RunFile&&) noexcept;
  RunFile(const RunFile&) = delete;
  RunFile& operator=(const RunFile&) = delete;
  ~RunFile();  // closes without throwing; call close() to see errors

  // Root attributes; setting an existing name replaces it (also with another type).
  void set_attr(const std::string& name, const std::string& value);
  void set_attr(const std::string& name, int64_t value);
  void set_attr(const std::string& name, double value);
  void set_attr(const std::string& name, int value) { set_attr(name, static_cast<int64_t>(value)); }
  void set_attr(const std::string& name, const char* value) { set_attr(name, std::string(value)); }

  // Appends one row to the table `group` ("train", "eval/arithmetic"): one extendible
  // float64 dataset /metrics/<group>/<column> per column. The first append fixes the
  // columns (in any order); a later row must name the same set of columns.
  void append(const std::string& group, const std::vector<std::pair<std::string, double>>& row);
  // Number of rows of a table, 0 if it does not exist.
  int64_t rows(const std::string& group) const;

  // One column of a table as written so far (empty if the table or column does not exist).
  std::vector<double> column(const std::string& group, const std::string& col) const;
  // Keeps the first n rows of a table (a table without a "step" column, e.g. segments).
  void keep_rows(const std::string& group, int64_t n);

  // Keeps only the rows whose "step" column is <= step, in every table that has a
  // "step" column (tables without one are left alone). Used on resume.
  void truncate_after_step(double step);

  // A UTF-8 string dataset at /<dataset> ("samples/final"); replaces an existing one.
  // Names under "metrics/" are reserved for tables.
  void write_text(const std::string& dataset, const std::string& text);

  // H5Fflush: everything appended so far survives if the process is killed afterwards.
  void flush();
  void close();
  bool is_open() const;
  const std::string& path() const;

 private:
  struct Impl;
  explicit RunFile(std::unique_ptr<Impl> impl);
  Impl& impl() const;
  std::unique_ptr<Impl> impl_;
};

// Everything in a run file, for compare/report tools.
struct RunData {
  std::map<std::string, std::string> str_attrs;  // root string attributes
  std::map<std::string, double> num_attrs;       // root numeric scalar attributes
  std::set<std::string> int_attrs;               // which of them HDF5 stores as integers
  std::map<std::string, std::map<std::string, std::vector<double>>>
      tables;                                // group -> column -> values
  std::map<std::string, std::string> texts;  // "samples/final" -> text
};

// Reads a whole run file. Error "<path>: not an ablate run file (<why>)" when the file
// is missing, not HDF5, or has no format = "ablate-run" attribute; Error when its
// format_version is newer than this build reads. Tables are cut to their shortest column.
RunData read_run_file(const std::string& path);

}  // namespace ablate
