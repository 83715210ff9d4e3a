// Hugging Face directories in (mapped, checked, read piece by piece) and out (hf_checkpoint.h).
#include "herd/train/checkpoint/hf_checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include "herd/core/file_write.h"
#include "herd/core/json_text.h"
#include "herd/model/weights.h"
#include "herd/train/checkpoint/checkpoint.h"

namespace herd::train {

namespace fs = std::filesystem;

std::string hf_tensor_name(const std::string& n) {
  if (n == "tok_embedding") return "model.embed_tokens.weight";
  if (n == "final_norm") return "model.norm.weight";
  if (n == "output") return "lm_head.weight";
  const std::size_t dot = n.find('.', 7);  // "layers.<L>.<w>"
  if (n.rfind("layers.", 0) == 0 && dot != std::string::npos) {
    const std::string layer = n.substr(7, dot - 7), w = n.substr(dot + 1);
    static const std::map<std::string, std::string> kLayer = {
        {"attn_norm", "input_layernorm"}, {"wq", "self_attn.q_proj"}, {"wk", "self_attn.k_proj"},
        {"wv", "self_attn.v_proj"},       {"wo", "self_attn.o_proj"}, {"mlp_norm", "post_attention_layernorm"},
        {"w_gate", "mlp.gate_proj"},      {"w_up", "mlp.up_proj"},    {"w_down", "mlp.down_proj"}};
    auto it = kLayer.find(w);
    if (it != kLayer.end()) return "model.layers." + layer + "." + it->second + ".weight";
  }
  return n;
}

bool is_hf_dir(const std::string& dir) {
  std::error_code ec;
  const fs::path d(dir);
  return fs::is_regular_file(d / "config.json", ec) &&
         (fs::exists(d / "model.safetensors", ec) || fs::exists(d / "model.safetensors.index.json", ec));
}

Status check_hf_runnable(const model::LlamaConfig& c, const Json& raw, const std::string& where) {
  auto refuse = [&](const std::string& what, const std::string& fix) {
    return make_error(where, ": ", what, " is not supported by herd's Llama runtime; ", fix);
  };
  if (raw.contains("model_type") && raw["model_type"].is_string() && raw["model_type"] != "llama") {
    return refuse("model_type \"" + raw["model_type"].get<std::string>() + "\"", "only \"llama\" models convert");
  }
  if (raw.contains("hidden_act") && raw["hidden_act"].is_string() && raw["hidden_act"] != "silu") {
    return refuse("hidden_act \"" + raw["hidden_act"].get<std::string>() + "\"", "Llama uses \"silu\"");
  }
  if (c.attention_bias) return refuse("attention_bias true", "use a model without attention biases");
  if (c.mlp_bias) return refuse("mlp_bias true", "use a model without MLP biases");
  if (c.mlp != model::MlpKind::kSwiGLU || c.norm != model::NormKind::kRMSNorm ||
      c.position != model::PositionKind::kRoPE) {
    return refuse("a GPT-style configuration (mlp/norm/position)", "use a Llama configuration");
  }
  return Status::Ok();
}

Result<std::unique_ptr<HfModelDir>> HfModelDir::open(const std::string& dir) {
  const fs::path d(dir);
  std::error_code ec;
  if (!fs::is_directory(d, ec)) return make_error(dir, ": not a directory; give a Hugging Face model directory");
  const std::string cpath = (d / "config.json").string();
  if (!fs::is_regular_file(cpath, ec)) {
    return make_error(cpath, ": missing; a Hugging Face model directory has config.json and model.safetensors");
  }
  HERD_ASSIGN_OR_RETURN(Json raw, read_json_file(cpath));
  std::unique_ptr<HfModelDir> m(new HfModelDir());
  m->dir_ = dir;
  {
    Result<model::LlamaConfig> c = model::config_from_hf_json(raw, d.filename().string());
    if (!c.ok()) return c.error().with_context(cpath);
    m->cfg_ = *c;
  }
  HERD_RETURN_IF_ERROR(check_hf_runnable(m->cfg_, raw, cpath));

  // tensor name -> file (inside dir)
  std::map<std::string, std::string> where;
  std::vector<std::string> files;
  const fs::path single = d / "model.safetensors", index = d / "model.safetensors.index.json";
  if (fs::exists(single, ec)) {
    files.push_back("model.safetensors");
  } else if (fs::exists(index, ec)) {
    HERD_ASSIGN_OR_RETURN(Json ij, read_json_file(index.string()));
    if (!ij.is_object() || !ij.contains("weight_map") || !ij["weight_map"].is_object()) {
      return make_error(index.string(), ": weight_map: expected an object of tensor -> file; the index is corrupt");
    }
    std::set<std::string> seen;
    for (auto it = ij["weight_map"].begin(); it != ij["weight_map"].end(); ++it) {
      if (!it.value().is_string()) {
        return make_error(index.string(), ": weight_map[\"", it.key(), "\"]: expected a file name, got ",
                          json_preview(it.value()));
      }
      const std::string f = it.value().get<std::string>();
      if (f.empty() || f.find('/') != std::string::npos || f.find("..") != std::string::npos) {
        return make_error(index.string(), ": weight_map[\"", it.key(), "\"]: '", f,
                          "' is not a file name inside the directory");
      }
      where[it.key()] = f;
      if (seen.insert(f).second) files.push_back(f);
    }
    for (const std::string& f : files) {
      if (!fs::exists(d / f, ec)) {
        return make_error(index.string(), ": names shard '", f,
                          "', which is missing from the directory; download every shard the index lists");
      }
    }
  } else {
    return make_error(dir,
                      ": no model.safetensors or model.safetensors.index.json (herd reads safetensors only; "
                      "save the model with safe_serialization=True)");
  }
  std::map<std::string, const SafetensorsFile*> by_name;
  std::map<std::string, std::pair<const SafetensorsFile*, const SafetensorsEntry*>> found;
  for (const std::string& f : files) {
    HERD_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> sf, SafetensorsFile::open((d / f).string()));
    by_name[f] = sf.get();
    m->files_.push_back(std::move(sf));
  }
  for (const auto& sf : m->files_) {
    for (const SafetensorsEntry& e : sf->entries()) {
      // With an index, the tensor is taken from the file the index names.
      auto w = where.find(e.name);
      if (!where.empty() && (w == where.end() || by_name[w->second] != sf.get())) continue;
      found[e.name] = {sf.get(), &e};
    }
  }
  for (const auto& [name, file] : where) {
    if (found.find(name) == found.end()) {
      return make_error(index.string(), ": tensor '", name, "' is listed in '", file,
                        "' but that file does not hold it; the shard and the index disagree, download them again");
    }
  }
  const std::string location = where.empty() ? single.string() : index.string();
  for (const model::Weight& w : model::llama_weights(m->cfg_, 1)) {
    std::string hf = hf_tensor_name(w.name);
    auto it = found.find(hf);
    if (it == found.end() && w.name == "output" && m->cfg_.tie_embeddings) {
      hf = hf_tensor_name("tok_embedding");
      it = found.find(hf);
    }
    if (it == found.end()) {
      return make_error(location, ": tensor '", hf, "' (herd's ", w.name,
                        ") is missing; the checkpoint is incomplete or not a Llama model");
    }
    const SafetensorsEntry& e = *it->second.second;
    const std::vector<std::int64_t> want =
        w.is_norm() ? std::vector<std::int64_t>{w.rows} : std::vector<std::int64_t>{w.rows, w.cols};
    if (e.shape != want) {
      std::string got, exp;
      for (std::int64_t s : e.shape) got += (got.empty() ? "" : ", ") + std::to_string(s);
      for (std::int64_t s : want) exp += (exp.empty() ? "" : ", ") + std::to_string(s);
      return make_error(it->second.first->path(), ": tensor '", hf, "' has shape [", got, "] but config.json gives [",
                        exp, "]; the weights and config.json belong to different models");
    }
    m->refs_[w.name] = Ref{it->second.first, &e};
  }
  return m;
}

template <typename T>
Status HfModelDir::load_into(std::vector<parallel::ShardPiece<T>>& pieces) const {
  for (parallel::ShardPiece<T>& p : pieces) {
    auto it = refs_.find(p.name);
    if (it == refs_.end()) return make_error(dir_, ": the model has no weight '", p.name, "'");
    const SafetensorsEntry& e = *it->second.entry;
    const std::int64_t cols = e.shape.size() == 2 ? e.shape[1] : 1;
    if (p.rows * p.cols != e.numel() || p.cols != cols) {
      return make_error(it->second.file->path(), ": tensor '", e.name, "' does not match the model's ", p.name, " (",
                        p.rows, " x ", p.cols, ")");
    }
    // The piece is elements [e0, e1) of the row-major block [r0, r1) x [c0, c1): read it run by run.
    const std::int64_t bw = p.c1 - p.c0;
    std::int64_t k = p.e0;
    while (k < p.e1) {
      const std::int64_t row = k / bw, col = k % bw;
      const std::int64_t run = std::min(bw - col, p.e1 - k);
      const std::int64_t full = (p.r0 + row) * p.cols + p.c0 + col;
      it->second.file->template read<T>(e, full, run, p.param + (k - p.e0));
      k += run;
    }
    std::fill(p.m, p.m + p.count(), T(0));
    std::fill(p.v, p.v + p.count(), T(0));
  }
  return Status::Ok();
}

template Status HfModelDir::load_into<float>(std::vector<parallel::ShardPiece<float>>&) const;
template Status HfModelDir::load_into<double>(std::vector<parallel::ShardPiece<double>>&) const;

namespace {

// One full tensor's parameters assembled from the checkpoint's pieces (any writer layout), read with
// pread from the shard files: only this tensor's ranges are read.
Status assemble(const DistCheckpoint& ck, const std::string& name, std::int64_t rows, std::int64_t cols,
                std::vector<double>& out) {
  const std::size_t eb = ck.elem() == "fp64" ? 8 : 4;
  const std::int64_t n = rows * cols;
  out.assign(static_cast<std::size_t>(n), 0.0);
  std::vector<unsigned char> covered(static_cast<std::size_t>(n), 0);
  std::vector<char> buf;
  for (const Json& f : ck.manifest["files"]) {
    const std::string path = (fs::path(ck.path) / f["file"].get<std::string>()).string();
    for (const Json& p : f["pieces"]) {
      if (p["name"] != name) continue;
      if (p["rows"].get<std::int64_t>() != rows || p["cols"].get<std::int64_t>() != cols) {
        return make_error(path, ": tensor '", name, "' is ", p["rows"].get<std::int64_t>(), " x ",
                          p["cols"].get<std::int64_t>(), " but the checkpoint's model has ", rows, " x ", cols);
      }
      const std::int64_t r0 = p["r0"], c0 = p["c0"], c1 = p["c1"], e0 = p["e0"], e1 = p["e1"], off = p["offset"];
      const std::int64_t cnt = e1 - e0, bw = c1 - c0;
      buf.resize(static_cast<std::size_t>(cnt) * eb);
      const int fd = ::open(path.c_str(), O_RDONLY);
      if (fd < 0) return make_error(path, ": cannot open (", std::strerror(errno), ")");
      const ssize_t got = ::pread(fd, buf.data(), buf.size(), static_cast<off_t>(off * static_cast<std::int64_t>(eb)));
      ::close(fd);
      if (got != static_cast<ssize_t>(buf.size())) return make_error(path, ": short read of '", name, "'");
      for (std::int64_t e = e0; e < e1; ++e) {
        const std::int64_t i = (r0 + e / bw) * cols + (c0 + e % bw);
        const char* src = buf.data() + static_cast<std::size_t>(e - e0) * eb;
        if (eb == 8) {
          std::memcpy(&out[static_cast<std::size_t>(i)], src, 8);
        } else {
          float v;
          std::memcpy(&v, src, 4);
          out[static_cast<std::size_t>(i)] = v;
        }
        ++covered[static_cast<std::size_t>(i)];
      }
    }
  }
  for (std::int64_t i = 0; i < n; ++i) {
    if (covered[static_cast<std::size_t>(i)] != 1) {
      return make_error(ck.path, ": element ", i, " of '", name, "' is stored ",
                        int(covered[static_cast<std::size_t>(i)]), " times (expected once); the checkpoint is corrupt");
    }
  }
  return Status::Ok();
}

Status write_text(const fs::path& path, const std::string& text) { return write_file(path.string(), text); }

const char* torch_dtype(DType t) {
  switch (t) {
    case DType::kBF16: return "bfloat16";
    case DType::kF16: return "float16";
    default: return "float32";
  }
}

}  // namespace

Status export_hf(const std::string& checkpoint, const std::string& out_dir, DType dtype) {
  if (dtype != DType::kF32 && dtype != DType::kBF16 && dtype != DType::kF16) {
    return make_error("--dtype ", dtype_name(dtype), ": export writes fp32, bf16 or fp16");
  }
  std::error_code ec;
  fs::path out = fs::path(out_dir).lexically_normal();
  if (out.filename().empty()) out = out.parent_path();  // "dir/": the directory itself
  if (fs::exists(out, ec) && !is_hf_dir(out_dir) && !(fs::is_directory(out, ec) && fs::is_empty(out, ec))) {
    return make_error(out_dir, ": exists and is not a Hugging Face model directory; choose a new directory");
  }
  HERD_ASSIGN_OR_RETURN(DistCheckpoint ck, open_checkpoint(checkpoint));
  const Json& meta = ck.meta();
  if (!meta.contains("model")) return make_error(ck.path, "/manifest.json: meta has no model configuration");
  HERD_ASSIGN_OR_RETURN(model::LlamaConfig cfg, model::config_from_hf_json(meta["model"], ck.path + " meta.model"));
  HERD_RETURN_IF_ERROR(check_hf_runnable(cfg, meta["model"], ck.path + "/manifest.json: meta.model"));

  Json config = model::config_to_hf_json(cfg);
  for (const char* k : {"mlp", "norm", "position"}) config.erase(k);
  config["architectures"] = {"LlamaForCausalLM"};
  config["model_type"] = "llama";
  config["hidden_act"] = "silu";
  config["tie_word_embeddings"] = false;  // herd's head is its own weight
  config["attention_dropout"] = 0.0;
  config["initializer_range"] = 0.02;
  config["use_cache"] = true;
  config["torch_dtype"] = torch_dtype(dtype);
  for (const char* k : {"bos_token_id", "eos_token_id"}) {
    if (meta["model"].contains(k)) config[k] = meta["model"][k];
  }

  const std::vector<model::Weight> weights = model::llama_weights(cfg, 1);
  std::vector<SafetensorsOut> tensors;
  for (const model::Weight& w : weights) {
    SafetensorsOut t;
    t.name = hf_tensor_name(w.name);
    t.dtype = dtype;
    t.shape = w.is_norm() ? std::vector<std::int64_t>{w.rows} : std::vector<std::int64_t>{w.rows, w.cols};
    tensors.push_back(t);
  }
  const fs::path tmp = fs::path(out.string() + ".tmp-hf");
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp, ec);
  if (ec) return make_error(tmp.string(), ": cannot create (", ec.message(), "); choose a writable directory");
  auto fail = [&](const Error& e) {
    std::error_code ig;
    fs::remove_all(tmp, ig);
    return Status(e);
  };
  Status s = write_safetensors((tmp / "model.safetensors").string(), tensors,
                               [&](std::size_t i, std::vector<double>& v) {
                                 return assemble(ck, weights[i].name, weights[i].rows, weights[i].cols, v);
                               },
                               Json{{"format", "pt"}, {"source", "herd " + ck.path}});
  if (!s.ok()) return fail(s.error());
  s = write_text(tmp / "config.json", json_text(config, 2) + "\n");
  if (!s.ok()) return fail(s.error());
  if (!fs::exists(out, ec)) {
    fs::rename(tmp, out, ec);
    if (ec) return fail(make_error(out_dir, ": rename from ", tmp.string(), " failed (", ec.message(), ")"));
    return Status::Ok();
  }
  // An existing directory keeps every file the export does not write (README.md, tokenizer files,
  // generation_config.json, ...). The export's files are renamed over their old versions, so each is
  // whole at any moment; model.safetensors replaces the weights, so sharded weights and their index,
  // which would name other tensors, are removed.
  std::vector<fs::path> old_weights;
  for (fs::directory_iterator it(out, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const bool shard =
        name.rfind("model-", 0) == 0 && name.size() > 12 && name.compare(name.size() - 12, 12, ".safetensors") == 0;
    if (shard || name == "model.safetensors.index.json") old_weights.push_back(it->path());
  }
  if (ec) return fail(make_error(out_dir, ": cannot list it (", ec.message(), ")"));
  fs::rename(tmp / "model.safetensors", out / "model.safetensors", ec);
  if (ec) return fail(make_error(out_dir, "/model.safetensors: cannot replace it (", ec.message(), ")"));
  for (const fs::path& p : old_weights) {
    fs::remove(p, ec);
    if (ec) return fail(make_error(p.string(), ": cannot remove the old weights (", ec.message(), ")"));
  }
  fs::rename(tmp / "config.json", out / "config.json", ec);
  if (ec) return fail(make_error(out_dir, "/config.json: cannot replace it (", ec.message(), ")"));
  fs::remove_all(tmp, ec);
  return Status::Ok();
}

}  // namespace herd::train
