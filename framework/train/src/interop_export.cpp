// Export of models (see interop.hpp): a run's weights with ablate's names, or as a Hugging Face
// model directory through the tables of hf_layout.cpp.
#include <cstring>
#include <filesystem>
#include <fstream>

#include "ablate/error.hpp"
#include "ablate/safetensors.hpp"
#include "interop_map.hpp"

namespace ablate {
namespace fs = std::filesystem;
using namespace interop;

void export_safetensors(LoadedRun& run, const std::string& path) {
  std::vector<SafetensorsTensor> tensors;
  for (Parameter* p : run.model->params().all())
    tensors.push_back({p->name, {p->value.rows, p->value.cols}, p->value.data});
  write_safetensors(path, tensors, ablate_metadata(run, run.experiment->resolved_yaml()));
}

std::vector<std::string> export_hf(LoadedRun& run, const std::string& dir) {
  const std::string resolved_text = run.experiment->resolved_yaml();
  const Flat flat = flat_of(YAML::Load(resolved_text));
  const Architecture* arch = nullptr;
  std::string why;
  for (const Architecture& a : hf::architectures()) {
    const std::vector<std::string> p = mismatches(a, flat);
    if (p.empty()) {
      arch = &a;
      break;
    }
    why += "\n  not " + std::string(a.name) + ":\n    " + join(p, "\n    ");
  }
  if (!arch)
    throw Error(run.dir + ": its model has no Hugging Face equivalent (ablate maps " +
                join(hf_architectures()) + "):" + why +
                "\nExport its weights with ablate's names instead: ablate export " + run.dir +
                " --format safetensors -o FILE");
  Model& m = *run.model;
  Sizes sz = sizes_of(m.dims());
  std::vector<std::vector<float>> data;
  std::vector<std::pair<std::string, std::vector<int64_t>>> names;
  for (Parameter* p : m.params().all()) {
    int64_t layer = -1;
    const TensorRule* rule = tensor_rule(*arch, p->name, layer);
    if (!rule)
      throw Error(run.dir + ": parameter '" + p->name + "' has no place in " + arch->name +
                  " (a variant's parameters were renamed?)");
    sz.KV = (p->value.cols - sz.C) / 2;
    for (const Part& part : parts_of(*rule, layer, *p, sz)) {
      data.push_back(to_hf(*rule, part, *p, sz));
      names.emplace_back(part.name, part.shape);
    }
  }
  std::vector<SafetensorsTensor> tensors;
  for (size_t i = 0; i < data.size(); ++i)
    tensors.push_back({names[i].first, names[i].second, data[i].data()});
  std::string type;
  if (auto it = flat.find("tokenizer.type"); it != flat.end()) type = it->second;
  std::string tok_why;
  const auto tok_files = hf::tokenizer_files(type, *run.tokenizer, flat, m.dims().context, tok_why);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (!fs::is_directory(dir))
    throw Error(dir + ": cannot create the directory" + (ec ? ": " + ec.message() : std::string()));
  write_safetensors((fs::path(dir) / "model.safetensors").string(), tensors,
                    ablate_metadata(run, resolved_text));
  auto write = [&](const std::string& name, const std::string& text) {
    const std::string path = (fs::path(dir) / name).string();
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << text;
    if (!out.flush()) throw Error(path + ": cannot write: " + std::strerror(errno));
  };
  write("config.json", arch->config_json(flat, m, run.tokenizer->eot_id()).dump(2) + "\n");
  for (const auto& [name, text] : tok_files) write(name, text);
  std::vector<std::string> notes;
  notes.push_back(std::string(arch->name) + ": " + std::to_string(tensors.size()) +
                  " tensors in model.safetensors, config.json");
  if (tok_files.empty())
    notes.push_back("the tokenizer does not export (" + tok_why +
                    "); ablate reads it back from model.safetensors' metadata, "
                    "other programs need a tokenizer of their own");
  else {
    std::string list;
    for (const auto& [name, text] : tok_files) list += (list.empty() ? "" : ", ") + name;
    notes.push_back("tokenizer '" + type + "': " + list);
  }
  return notes;
}

}  // namespace ablate
