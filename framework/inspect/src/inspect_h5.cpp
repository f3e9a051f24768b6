// The inspection's numbers as HDF5 (layout in docs/INSPECT.md): root attributes
// format = "ablate-inspect" and format_version, float32/float64/int32 arrays, UTF-8
// string lists for token labels.
#include <H5Cpp.h>

#include "ablate/error.hpp"
#include "ablate/inspect.hpp"

namespace ablate {
namespace {

H5::StrType utf8() {
  H5::StrType t(H5::PredType::C_S1, H5T_VARIABLE);
  t.setCset(H5T_CSET_UTF8);
  return t;
}

template <class Loc>
void attr(Loc& loc, const std::string& name, const std::string& v) {
  const char* p = v.c_str();
  loc.createAttribute(name, utf8(), H5::DataSpace(H5S_SCALAR)).write(utf8(), &p);
}
template <class Loc>
void attr(Loc& loc, const std::string& name, int64_t v) {
  loc.createAttribute(name, H5::PredType::STD_I64LE, H5::DataSpace(H5S_SCALAR))
      .write(H5::PredType::NATIVE_INT64, &v);
}
template <class Loc>
void attr(Loc& loc, const std::string& name, double v) {
  loc.createAttribute(name, H5::PredType::IEEE_F64LE, H5::DataSpace(H5S_SCALAR))
      .write(H5::PredType::NATIVE_DOUBLE, &v);
}

void floats(H5::Group& g, const std::string& name, const std::vector<hsize_t>& dims,
            const float* data) {
  H5::DataSpace space(static_cast<int>(dims.size()), dims.data());
  g.createDataSet(name, H5::PredType::IEEE_F32LE, space).write(data, H5::PredType::NATIVE_FLOAT);
}

// Eigen matrices are column-major; HDF5 wants row-major (rows, cols).
void matrix(H5::Group& g, const std::string& name, const Eigen::MatrixXd& m) {
  const Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> r = m;
  const hsize_t dims[2] = {static_cast<hsize_t>(m.rows()), static_cast<hsize_t>(m.cols())};
  H5::DataSpace space(2, dims);
  g.createDataSet(name, H5::PredType::IEEE_F64LE, space)
      .write(r.data(), H5::PredType::NATIVE_DOUBLE);
}

void doubles(H5::Group& g, const std::string& name, const std::vector<double>& v) {
  const hsize_t n = v.size();
  H5::DataSpace space(1, &n);
  H5::DataSet ds = g.createDataSet(name, H5::PredType::IEEE_F64LE, space);
  if (!v.empty()) ds.write(v.data(), H5::PredType::NATIVE_DOUBLE);
}

void ints(H5::Group& g, const std::string& name, const std::vector<int32_t>& v) {
  const hsize_t n = v.size();
  H5::DataSpace space(1, &n);
  H5::DataSet ds = g.createDataSet(name, H5::PredType::STD_I32LE, space);
  if (!v.empty()) ds.write(v.data(), H5::PredType::NATIVE_INT32);
}

void strings(H5::Group& g, const std::string& name, const std::vector<std::string>& v) {
  std::vector<const char*> p;
  for (const auto& s : v) p.push_back(s.c_str());
  const hsize_t n = v.size();
  H5::DataSpace space(1, &n);
  H5::DataSet ds = g.createDataSet(name, utf8(), space);
  if (!p.empty()) ds.write(p.data(), utf8());
}

void token_map(H5::Group parent, const std::string& name, const TokenMap& m, const Inspection& in) {
  H5::Group g = parent.createGroup(name);
  matrix(g, "matrix", m.matrix);
  matrix(g, "pca", m.pca.points);
  doubles(g, "pca_explained", m.pca.explained);
  ints(g, "tsne_ids", m.shown);
  if (m.tsne.points.rows() > 0) {
    matrix(g, "tsne", m.tsne.points);
    attr(g, "tsne_kl", m.tsne.kl);
  }
  attr(g, "tsne_perplexity", in.perplexity);
  attr(g, "tsne_seed", static_cast<int64_t>(in.seed));
}

}  // namespace

void write_inspection_h5(const Inspection& in, const std::string& path) {
  try {
    H5::Exception::dontPrint();
    H5::H5File f(path, H5F_ACC_TRUNC);
    H5::Group root = f.openGroup("/");
    attr(root, "format", std::string("ablate-inspect"));
    attr(root, "format_version", int64_t{1});
    attr(root, "run", in.run_dir);
    attr(root, "run_name", in.run_name);
    attr(root, "step", in.step);
    attr(root, "precision", in.precision);
    attr(root, "text", in.text);
    attr(root, "positional", in.positional_type);
    attr(root, "tied_embeddings", static_cast<int64_t>(in.tied));

    H5::Group tokens = f.createGroup("tokens");
    ints(tokens, "ids", in.ids);
    std::vector<std::string> labels;
    for (int32_t id : in.ids) labels.push_back(in.vocab_labels[static_cast<size_t>(id)]);
    strings(tokens, "labels", labels);
    H5::Group vocab = f.createGroup("vocab");
    strings(vocab, "labels", in.vocab_labels);

    floats(root, "attention",
           {static_cast<hsize_t>(in.n_layers), static_cast<hsize_t>(in.n_heads),
            static_cast<hsize_t>(in.time), static_cast<hsize_t>(in.time)},
           in.attention.data());
    H5::DataSet att = f.openDataSet("attention");
    attr(att, "axes", std::string("layer, head, query position, key position"));
    H5::Group next = f.createGroup("next_token");
    floats(next, "probs", {static_cast<hsize_t>(in.next_probs.size())}, in.next_probs.data());
    attr(next, "after_position", in.time - 1);

    H5::Group emb = f.createGroup("embedding");
    token_map(emb, "token", in.embedding, in);
    if (!in.tied) token_map(emb, "lm_head", in.head, in);

    H5::Group pos = f.createGroup("positional");
    for (const auto& v : in.positional) {
      const std::string group = v.variant.empty() ? "run" : v.variant;
      H5::Group g = pos.nameExists(group) ? pos.openGroup(group) : pos.createGroup(group);
      if (!g.attrExists("reference")) attr(g, "reference", static_cast<int64_t>(v.reference));
      matrix(g, v.key, v.values);
      H5::DataSet ds = g.openDataSet(v.key);
      attr(ds, "title", v.title);
      if (v.vectors.size() > 0)
        matrix(g, v.key == "cosine" ? std::string("vectors") : v.key + "_vectors", v.vectors);
    }
    f.close();
  } catch (const H5::Exception& e) {
    throw Error(path + ": cannot write the inspection file (" + e.getDetailMsg() +
                "); check that the directory exists and is writable");
  }
}

}  // namespace ablate
