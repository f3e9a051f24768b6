// The per-run HDF5 file: writer (RunFile) and reader (read_run_file). Default HDF5
// format, no SWMR: plain readers (h5py, h5dump) open it, and flush() makes a killed
// writer leave a readable file (docs/PLATFORM.md measurements). Neither side takes HDF5's
// file lock, so a running run can be read as of its last flush (docs/RESULTS.md).
#include "ablate/runfile.hpp"

#include <H5Cpp.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <set>

#include "ablate/error.hpp"
#include "ablate/fault.hpp"

namespace ablate {
namespace {

constexpr hsize_t kChunkRows = 256;
const char* const kMetrics = "metrics";

herr_t collect_error(unsigned, const H5E_error2_t* e, void* out) {
  auto* v = static_cast<std::vector<std::string>*>(out);
  v->push_back(std::string(e->func_name ? e->func_name : "?") + "(): " + (e->desc ? e->desc : ""));
  return 0;
}

// The first HDF5 failure since silence_hdf5(). Captured when it happens: by the time a
// C++ handler runs, destructors of HDF5 objects have made API calls that clear the stack.
thread_local std::string t_first_error;

herr_t capture_error(hid_t stack, void*) {
  if (!t_first_error.empty()) return 0;
  std::vector<std::string> entries;
  H5Ewalk2(stack, H5E_WALK_UPWARD, collect_error, &entries);
  if (!entries.empty())
    t_first_error = entries.front();  // innermost: "errno = 2, ... No such file"
  return 0;
}

// HDF5 prints its error stack to stderr by default; library code never prints.
void silence_hdf5() {
  H5Eset_auto2(H5E_DEFAULT, capture_error, nullptr);
  t_first_error.clear();
}

std::string hdf5_detail(const H5::Exception& e) {
  if (!t_first_error.empty()) return t_first_error;
  return e.getFuncName() + ": " + e.getDetailMsg();
}

// Runs f, turning HDF5 exceptions into ablate::Error naming the file and the action.
template <class F>
auto guarded(const std::string& path, const std::string& action, F&& f) -> decltype(f()) {
  silence_hdf5();
  try {
    return f();
  } catch (const H5::Exception& e) {
    throw Error(path + ": HDF5 error while " + action + ": " + hdf5_detail(e));
  }
}

std::vector<std::string> split_path(const std::string& s) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    size_t slash = s.find('/', start);
    parts.push_back(
        s.substr(start, slash == std::string::npos ? std::string::npos : slash - start));
    if (slash == std::string::npos) break;
    start = slash + 1;
  }
  return parts;
}

bool bad_component(const std::string& c) { return c.empty() || c == "." || c == ".."; }

// "train", "eval/arithmetic": non-empty components separated by single slashes.
void check_object_path(const std::string& file, const std::string& what, const std::string& name) {
  for (const auto& c : split_path(name))
    if (bad_component(c))
      throw Error(file + ": invalid " + what + " name '" + name +
                  "': use non-empty names separated by '/', e.g. 'eval/arithmetic'");
}

H5::StrType utf8_string_type() {
  H5::StrType t(H5::PredType::C_S1, H5T_VARIABLE);
  t.setCset(H5T_CSET_UTF8);
  return t;
}

H5::Group open_or_create_groups(const std::string& file, H5::Group g, const std::string& path) {
  std::string so_far;
  for (const auto& c : split_path(path)) {
    so_far += (so_far.empty() ? "" : "/") + c;
    if (g.nameExists(c)) {
      if (g.childObjType(c) != H5O_TYPE_GROUP)
        throw Error(file + ": cannot create group '" + so_far + "': a dataset of that name exists");
      g = g.openGroup(c);
    } else {
      g = g.createGroup(c);
    }
  }
  return g;
}

template <class Loc>
void replace_attr(Loc& loc, const std::string& name, const H5::DataType& type, const void* value) {
  if (loc.attrExists(name)) loc.removeAttr(name);
  H5::Attribute a = loc.createAttribute(name, type, H5::DataSpace(H5S_SCALAR));
  a.write(type, value);
}

hsize_t length_of(const H5::DataSet& ds) {
  H5::DataSpace s = ds.getSpace();
  if (s.getSimpleExtentNdims() != 1) return 0;
  hsize_t n = 0;
  s.getSimpleExtentDims(&n);
  return n;
}

std::vector<double> read_column(const H5::DataSet& ds) {
  std::vector<double> v(length_of(ds));
  if (!v.empty()) ds.read(v.data(), H5::PredType::NATIVE_DOUBLE);
  return v;
}

void set_length(const H5::DataSet& ds, hsize_t n) {
  if (H5Dset_extent(ds.getId(), &n) < 0)
    throw H5::DataSetIException("H5Dset_extent", "cannot resize column");
}

void write_column(const H5::DataSet& ds, const std::vector<double>& v) {
  set_length(ds, v.size());
  if (!v.empty()) ds.write(v.data(), H5::PredType::NATIVE_DOUBLE);
}

// Calls visit(relative_path, dataset) for every dataset below g, depth first.
void walk_datasets(
    const H5::Group& g, const std::string& prefix, const std::set<std::string>& skip,
    const std::function<void(const std::string&, const std::string&, const H5::DataSet&)>& visit) {
  hsize_t n = g.getNumObjs();
  for (hsize_t i = 0; i < n; ++i) {
    std::string name = g.getObjnameByIdx(i);
    std::string full = prefix.empty() ? name : prefix + "/" + name;
    if (skip.count(full)) continue;
    H5O_type_t t = g.childObjType(name);
    if (t == H5O_TYPE_GROUP) walk_datasets(g.openGroup(name), full, skip, visit);
    else if (t == H5O_TYPE_DATASET) visit(prefix, name, g.openDataSet(name));
  }
}

// Returns "" when the root carries a readable format attribute we accept, else the reason.
std::string format_problem(const H5::H5File& f) {
  if (!f.attrExists("format")) return "no 'format' attribute";
  H5::Attribute a = f.openAttribute("format");
  if (a.getTypeClass() != H5T_STRING) return "'format' attribute is not a string";
  std::string fmt;
  a.read(a.getStrType(), fmt);
  if (fmt != RunFile::kFormat)
    return "format is '" + fmt + "', expected '" + RunFile::kFormat + "'";
  return "";
}

void check_version(const std::string& path, const H5::H5File& f) {
  if (!f.attrExists("format_version")) return;
  H5::Attribute a = f.openAttribute("format_version");
  if (a.getTypeClass() != H5T_INTEGER)
    throw Error(path + ": 'format_version' attribute is not an integer");
  int64_t v = 0;
  a.read(H5::PredType::NATIVE_INT64, &v);
  if (v > RunFile::kFormatVersion)
    throw Error(path + ": run file format_version " + std::to_string(v) +
                " is newer than this ablate reads (" + std::to_string(RunFile::kFormatVersion) +
                "); update ablate");
}

// File access without HDF5's file lock (readers and the writer alike): a reader such as
// h5py then opens a file that a run is writing, and a reader never blocks the writer.
H5::FileAccPropList unlocked() {
  H5::FileAccPropList fapl;
  H5Pset_file_locking(fapl.getId(), false, true);
  return fapl;
}

std::string not_run_file(const std::string& path, const std::string& why) {
  return path + ": not an ablate run file (" + why + ")";
}

// Opens path for reading or appending with the clear "not an ablate run file" errors.
H5::H5File open_run_file(const std::string& path, unsigned flags) {
  silence_hdf5();
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw Error(not_run_file(path, "no such file"));
  if (!std::filesystem::is_regular_file(path, ec))
    throw Error(not_run_file(path, "not a regular file"));
  if (H5Fis_hdf5(path.c_str()) <= 0) throw Error(not_run_file(path, "not an HDF5 file"));
  H5::H5File f;
  try {
    f.openFile(path, flags, unlocked());
  } catch (const H5::Exception& e) {
    std::string detail = hdf5_detail(e);
    if (detail.find("unable to lock file") != std::string::npos)
      throw Error(
          path +
          ": cannot open the run file for appending: another process has it open (HDF5 file "
          "lock: " +
          detail + "); is that run still going?");
    throw Error(not_run_file(path, "HDF5 cannot open it: " + detail));
  }
  std::string why = guarded(path, "reading the root attributes", [&] { return format_problem(f); });
  if (!why.empty()) throw Error(not_run_file(path, why));
  guarded(path, "reading the root attributes", [&] { check_version(path, f); });
  return f;
}

struct Table {
  std::vector<std::string> columns;  // sorted
  std::map<std::string, H5::DataSet> data;
  hsize_t rows = 0;
};

}  // namespace

struct RunFile::Impl {
  std::string path;
  H5::H5File file;
  std::map<std::string, Table> tables;
  bool open = false;

  ~Impl() {
    try {
      do_close();
    } catch (...) {
    }
  }
  void do_close() {
    if (!open) return;
    open = false;
    tables.clear();  // datasets first: the file only really closes when nothing in it is open
    file.close();
  }
  void check_open() const {
    if (!open) throw Error(path + ": run file is closed");
  }

  // Loads the tables of an existing file; repairs rows torn by a killed writer.
  void load_tables() {
    if (!file.nameExists(kMetrics)) return;
    walk_datasets(file.openGroup(kMetrics), "", {},
                  [&](const std::string& group, const std::string& col, const H5::DataSet& ds) {
                    Table& t = tables[group];
                    t.columns.push_back(col);
                    t.data[col] = ds;
                  });
    for (auto& [group, t] : tables) {
      std::sort(t.columns.begin(), t.columns.end());
      hsize_t n = ~hsize_t{0};
      for (auto& [col, ds] : t.data) n = std::min(n, length_of(ds));
      for (auto& [col, ds] : t.data)
        if (length_of(ds) != n) set_length(ds, n);
      t.rows = n;
    }
  }
};

RunFile::RunFile(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RunFile::RunFile(RunFile&&) noexcept = default;
RunFile& RunFile::operator=(RunFile&&) noexcept = default;
RunFile::~RunFile() = default;

RunFile::Impl& RunFile::impl() const {
  if (!impl_) throw Error("RunFile: used after being moved from");
  return *impl_;
}

RunFile RunFile::create(const std::string& path) {
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  guarded(path, "creating the run file", [&] {
    impl->file = H5::H5File(path, H5F_ACC_TRUNC, H5::FileCreatPropList::DEFAULT, unlocked());
    impl->open = true;
  });
  RunFile rf(std::move(impl));
  rf.set_attr("format", std::string(kFormat));
  rf.set_attr("format_version", kFormatVersion);
  return rf;
}

RunFile RunFile::open_append(const std::string& path) {
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  impl->file = open_run_file(path, H5F_ACC_RDWR);
  impl->open = true;
  guarded(path, "reading the metric tables", [&] { impl->load_tables(); });
  return RunFile(std::move(impl));
}

void RunFile::set_attr(const std::string& name, const std::string& value) {
  Impl& m = impl();
  m.check_open();
  if (value.find('\0') != std::string::npos)
    throw Error(m.path + ": attribute '" + name + "': text contains a NUL byte");
  guarded(m.path, "writing attribute '" + name + "'", [&] {
    const char* c = value.c_str();
    replace_attr(m.file, name, utf8_string_type(), &c);
  });
}

void RunFile::set_attr(const std::string& name, int64_t value) {
  Impl& m = impl();
  m.check_open();
  guarded(m.path, "writing attribute '" + name + "'", [&] {
    if (m.file.attrExists(name)) m.file.removeAttr(name);
    H5::Attribute a =
        m.file.createAttribute(name, H5::PredType::STD_I64LE, H5::DataSpace(H5S_SCALAR));
    a.write(H5::PredType::NATIVE_INT64, &value);
  });
}

void RunFile::set_attr(const std::string& name, double value) {
  Impl& m = impl();
  m.check_open();
  guarded(m.path, "writing attribute '" + name + "'", [&] {
    if (m.file.attrExists(name)) m.file.removeAttr(name);
    H5::Attribute a =
        m.file.createAttribute(name, H5::PredType::IEEE_F64LE, H5::DataSpace(H5S_SCALAR));
    a.write(H5::PredType::NATIVE_DOUBLE, &value);
  });
}

void RunFile::append(const std::string& group,
                     const std::vector<std::pair<std::string, double>>& row) {
  Impl& m = impl();
  m.check_open();
  check_object_path(m.path, "table", group);
  if (row.empty()) throw Error(m.path + ": table '" + group + "': a row needs at least one column");
  std::vector<std::string> cols;
  for (const auto& [c, v] : row) {
    if (c.empty() || c.find('/') != std::string::npos || c == "." || c == "..")
      throw Error(m.path + ": table '" + group + "': invalid column name '" + c +
                  "' (non-empty, no '/')");
    cols.push_back(c);
  }
  std::sort(cols.begin(), cols.end());
  if (auto d = std::adjacent_find(cols.begin(), cols.end()); d != cols.end())
    throw Error(m.path + ": table '" + group + "': column '" + *d + "' appears twice in one row");

  auto it = m.tables.find(group);
  if (it != m.tables.end() && it->second.columns != cols)
    throw Error(m.path + ": table '" + group + "' has columns [" + join(it->second.columns) +
                "] but this row has [" + join(cols) +
                "]: every row of a table needs the same columns");

  guarded(m.path, "appending to table '" + group + "'", [&] {
    if (it == m.tables.end()) {
      H5::Group metrics = open_or_create_groups(m.path, m.file.openGroup("/"), kMetrics);
      H5::Group g = open_or_create_groups(m.path, metrics, group);
      for (const auto& c : cols)
        if (g.nameExists(c))
          throw Error(m.path + ": table '" + group + "': cannot create column '" + c +
                      "': a table or dataset of that name already exists there");
      Table t;
      t.columns = cols;
      hsize_t dims = 0, maxdims = H5S_UNLIMITED, chunk = kChunkRows;
      H5::DataSpace space(1, &dims, &maxdims);
      H5::DSetCreatPropList props;
      props.setChunk(1, &chunk);
      for (const auto& c : cols)
        t.data[c] = g.createDataSet(c, H5::PredType::IEEE_F64LE, space, props);
      it = m.tables.emplace(group, std::move(t)).first;
    }
    Table& t = it->second;
    hsize_t start = t.rows, one = 1, n = t.rows + 1;
    H5::DataSpace mem(1, &one);
    for (const auto& [c, v] : row) {
      H5::DataSet& ds = t.data.at(c);
      set_length(ds, n);
      H5::DataSpace fs = ds.getSpace();
      fs.selectHyperslab(H5S_SELECT_SET, &one, &start);
      ds.write(&v, H5::PredType::NATIVE_DOUBLE, mem, fs);
      fault_point("runfile.append");  // a torn row: the crash tests kill here (fault.hpp)
    }
    t.rows = n;
  });
}

int64_t RunFile::rows(const std::string& group) const {
  Impl& m = impl();
  auto it = m.tables.find(group);
  return it == m.tables.end() ? 0 : static_cast<int64_t>(it->second.rows);
}

std::vector<double> RunFile::column(const std::string& group, const std::string& col) const {
  Impl& m = impl();
  m.check_open();
  auto it = m.tables.find(group);
  if (it == m.tables.end() || !it->second.data.count(col)) return {};
  return guarded(m.path, "reading table '" + group + "'", [&] {
    std::vector<double> v = read_column(it->second.data.at(col));
    v.resize(std::min<size_t>(v.size(), it->second.rows));
    return v;
  });
}

void RunFile::keep_rows(const std::string& group, int64_t n) {
  Impl& m = impl();
  m.check_open();
  auto it = m.tables.find(group);
  if (it == m.tables.end() || n < 0 || static_cast<hsize_t>(n) >= it->second.rows) return;
  guarded(m.path, "truncating table '" + group + "'", [&] {
    for (auto& [col, ds] : it->second.data) set_length(ds, static_cast<hsize_t>(n));
    it->second.rows = static_cast<hsize_t>(n);
  });
}

void RunFile::truncate_after_step(double step) {
  Impl& m = impl();
  m.check_open();
  for (auto& [group, t] : m.tables) {
    auto s = t.data.find("step");
    if (s == t.data.end()) continue;
    guarded(m.path, "truncating table '" + group + "'", [&, &t = t] {
      std::vector<double> steps = read_column(s->second);
      std::vector<char> keep(steps.size());
      size_t kept = 0;
      for (size_t i = 0; i < steps.size(); ++i) kept += keep[i] = steps[i] <= step;
      if (kept == steps.size()) return;
      for (auto& [col, ds] : t.data) {
        std::vector<double> v = read_column(ds), out;
        out.reserve(kept);
        for (size_t i = 0; i < v.size() && i < keep.size(); ++i)
          if (keep[i]) out.push_back(v[i]);
        write_column(ds, out);
      }
      t.rows = kept;
    });
  }
}

void RunFile::write_text(const std::string& dataset, const std::string& text) {
  Impl& m = impl();
  m.check_open();
  check_object_path(m.path, "text dataset", dataset);
  if (dataset == kMetrics || dataset.rfind(std::string(kMetrics) + "/", 0) == 0)
    throw Error(m.path + ": text dataset '" + dataset +
                "': names under 'metrics/' are reserved for tables");
  if (text.find('\0') != std::string::npos)
    throw Error(m.path + ": text dataset '" + dataset + "': text contains a NUL byte");
  guarded(m.path, "writing text dataset '" + dataset + "'", [&] {
    size_t slash = dataset.rfind('/');
    H5::Group g = m.file.openGroup("/");
    if (slash != std::string::npos) g = open_or_create_groups(m.path, g, dataset.substr(0, slash));
    std::string leaf = dataset.substr(slash == std::string::npos ? 0 : slash + 1);
    if (g.nameExists(leaf)) {
      if (g.childObjType(leaf) != H5O_TYPE_DATASET)
        throw Error(m.path + ": text dataset '" + dataset + "': a group of that name exists");
      g.unlink(leaf);
    }
    H5::StrType type = utf8_string_type();
    H5::DataSet ds = g.createDataSet(leaf, type, H5::DataSpace(H5S_SCALAR));
    ds.write(text, type);
  });
}

void RunFile::flush() {
  Impl& m = impl();
  m.check_open();
  guarded(m.path, "flushing", [&] { m.file.flush(H5F_SCOPE_GLOBAL); });
}

void RunFile::close() {
  if (!impl_) return;
  guarded(impl_->path, "closing", [&] { impl_->do_close(); });
}

bool RunFile::is_open() const { return impl_ && impl_->open; }

const std::string& RunFile::path() const { return impl().path; }

RunData read_run_file(const std::string& path) {
  H5::H5File f = open_run_file(path, H5F_ACC_RDONLY);
  RunData out;
  guarded(path, "reading", [&] {
    int n = f.getNumAttrs();
    for (int i = 0; i < n; ++i) {
      H5::Attribute a = f.openAttribute(static_cast<unsigned>(i));
      std::string name = a.getName();
      H5T_class_t cls = a.getTypeClass();
      if (cls == H5T_STRING) {
        std::string v;
        a.read(a.getStrType(), v);
        out.str_attrs[name] = v;
      } else if ((cls == H5T_INTEGER || cls == H5T_FLOAT) &&
                 a.getSpace().getSimpleExtentNpoints() == 1) {
        double v = 0;
        a.read(H5::PredType::NATIVE_DOUBLE, &v);
        out.num_attrs[name] = v;
        if (cls == H5T_INTEGER) out.int_attrs.insert(name);
      }
    }
    if (f.nameExists(kMetrics) && f.childObjType(kMetrics) == H5O_TYPE_GROUP) {
      walk_datasets(f.openGroup(kMetrics), "", {},
                    [&](const std::string& group, const std::string& col, const H5::DataSet& ds) {
                      H5T_class_t cls = ds.getTypeClass();
                      if ((cls == H5T_FLOAT || cls == H5T_INTEGER) &&
                          ds.getSpace().getSimpleExtentNdims() == 1)
                        out.tables[group][col] = read_column(ds);
                    });
      for (auto& [group, cols] : out.tables) {
        size_t rows = ~size_t{0};
        for (auto& [c, v] : cols) rows = std::min(rows, v.size());
        for (auto& [c, v] : cols) v.resize(rows);
      }
    }
    walk_datasets(
        f.openGroup("/"), "", {kMetrics},
        [&](const std::string& group, const std::string& name, const H5::DataSet& ds) {
          if (ds.getTypeClass() != H5T_STRING || ds.getSpace().getSimpleExtentNpoints() != 1)
            return;
          std::string text;
          ds.read(text, ds.getStrType());
          out.texts[group.empty() ? name : group + "/" + name] = text;
        });
  });
  return out;
}

}  // namespace ablate
