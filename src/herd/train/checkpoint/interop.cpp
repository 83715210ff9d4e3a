// --init.from and herd convert --from-hf (interop.h).
#include "herd/train/checkpoint/interop.h"

#include <algorithm>
#include <filesystem>
#include <sstream>

#include "herd/comm/local/local_world.h"
#include "herd/parallel/context.h"
#include "herd/train/checkpoint/checkpoint.h"
#include "herd/train/checkpoint/hf_checkpoint.h"
#include "herd/train/job/job.h"
#include "herd/train/step/trainer.h"

namespace herd::train {

namespace fs = std::filesystem;

std::string model_mismatch(const model::LlamaConfig& a, const model::LlamaConfig& b) {
  std::ostringstream o;
  auto cmp = [&](const char* field, auto x, auto y) {
    if (o.tellp() == 0 && x != y) o << field << " " << x << " vs " << y;
  };
  cmp("hidden_size", a.hidden, b.hidden);
  cmp("intermediate_size", a.ffn_hidden, b.ffn_hidden);
  cmp("num_hidden_layers", a.n_layers, b.n_layers);
  cmp("num_attention_heads", a.n_heads, b.n_heads);
  cmp("num_key_value_heads", a.n_kv_heads, b.n_kv_heads);
  cmp("head_dim", a.head_dim, b.head_dim);
  cmp("vocab_size", a.vocab, b.vocab);
  cmp("rope_theta", a.rope_theta, b.rope_theta);
  cmp("rope_scaling.factor", a.rope_scaling.factor, b.rope_scaling.factor);
  if (a.rope_scaling.enabled() && b.rope_scaling.enabled()) {
    cmp("rope_scaling.low_freq_factor", a.rope_scaling.low_freq_factor, b.rope_scaling.low_freq_factor);
    cmp("rope_scaling.high_freq_factor", a.rope_scaling.high_freq_factor, b.rope_scaling.high_freq_factor);
    cmp("rope_scaling.original_max_position_embeddings", a.rope_scaling.original_max_position_embeddings,
        b.rope_scaling.original_max_position_embeddings);
  }
  cmp("rms_norm_eps", a.norm_eps, b.norm_eps);
  return o.str();
}

template <typename T>
Status load_initial_weights(const std::string& dir, const model::LlamaConfig& model_cfg,
                            parallel::RankModel<T>& model) {
  std::vector<parallel::ShardPiece<T>> pieces = model.load_pieces();
  auto mismatch = [&](const model::LlamaConfig& src, const std::string& what) -> Status {
    const std::string m = model_mismatch(src, model_cfg);
    if (m.empty()) return Status::Ok();
    return make_error("init.from '", dir, "': its ", what, " and the run's model (model.name=", model_cfg.name,
                      ") differ: ", m, "; set --model.name=", dir, " to train that model");
  };
  if (is_hf_dir(dir)) {
    HERD_ASSIGN_OR_RETURN(std::unique_ptr<HfModelDir> hf, HfModelDir::open(dir));
    HERD_RETURN_IF_ERROR(mismatch(hf->config(), "config.json"));
    Status s = hf->load_into<T>(pieces);
    if (!s.ok()) return s.error().with_context("init.from");
  } else {
    Result<DistCheckpoint> ck = open_checkpoint(dir);
    if (!ck.ok()) {
      return ck.error().with_context("init.from '" + dir +
                                     "' (neither a Hugging Face directory with config.json and model.safetensors, "
                                     "nor a herd checkpoint)");
    }
    if (ck->meta().contains("model")) {
      Result<model::LlamaConfig> src = model::config_from_hf_json(ck->meta()["model"], ck->path);
      if (!src.ok()) return src.error().with_context("init.from " + ck->path + "/manifest.json: meta.model");
      HERD_RETURN_IF_ERROR(mismatch(*src, "checkpoint's model"));
    }
    // The checkpoint's element type may differ from the run's: read in its own type, convert.
    if (ck->elem() == (sizeof(T) == 8 ? "fp64" : "fp32")) {
      Status s = ck->load_into<T>(pieces);
      if (!s.ok()) return s.error().with_context("init.from");
    } else {
      using U = std::conditional_t<sizeof(T) == 8, float, double>;
      std::vector<std::vector<U>> store;
      std::vector<parallel::ShardPiece<U>> other;
      for (const parallel::ShardPiece<T>& p : pieces) {
        store.emplace_back(3 * static_cast<std::size_t>(p.count()));
        parallel::ShardPiece<U> q;
        q.name = p.name, q.rows = p.rows, q.cols = p.cols, q.r0 = p.r0, q.r1 = p.r1, q.c0 = p.c0, q.c1 = p.c1;
        q.e0 = p.e0, q.e1 = p.e1;
        q.param = store.back().data();
        q.m = q.param + p.count();
        q.v = q.m + p.count();
        other.push_back(q);
      }
      Status s = ck->load_into<U>(other);
      if (!s.ok()) return s.error().with_context("init.from");
      for (std::size_t i = 0; i < pieces.size(); ++i) {
        for (std::int64_t k = 0; k < pieces[i].count(); ++k) pieces[i].param[k] = static_cast<T>(other[i].param[k]);
      }
    }
    for (parallel::ShardPiece<T>& p : pieces) {  // weights only: a fresh optimizer
      std::fill(p.m, p.m + p.count(), T(0));
      std::fill(p.v, p.v + p.count(), T(0));
    }
  }
  model.set_optimizer_steps(0);
  model.after_load();
  return Status::Ok();
}

template Status load_initial_weights<float>(const std::string&, const model::LlamaConfig&, parallel::RankModel<float>&);
template Status load_initial_weights<double>(const std::string&, const model::LlamaConfig&,
                                             parallel::RankModel<double>&);

Status convert_from_hf(const std::string& hf_dir, const std::string& out_dir, const ConvertLayout& layout) {
  std::error_code ec;
  if (fs::exists(out_dir, ec) && !(fs::is_directory(out_dir, ec) && fs::is_empty(out_dir, ec))) {
    return make_error("--out '", out_dir, "': exists and is not empty; choose a new directory");
  }
  // Everything about the source is checked here, before any rank starts or anything is written.
  HERD_ASSIGN_OR_RETURN(std::unique_ptr<HfModelDir> hf, HfModelDir::open(hf_dir));
  const model::LlamaConfig& m = hf->config();

  // A training configuration of the target layout: the smallest batch and sequence it accepts.
  TrainConfig cfg;
  cfg.parallel.tp = layout.tp;
  cfg.parallel.cp = layout.cp;
  cfg.parallel.pp = layout.pp;
  cfg.parallel.dp = layout.dp;
  cfg.parallel.comm_timeout_s = 600;
  cfg.train.global_batch = layout.dp * layout.pp;
  cfg.data.seq_len = std::min<std::int64_t>(m.max_seq_len, 2 * layout.cp * layout.tp);
  const std::int64_t world = layout.tp * layout.cp * layout.pp * layout.dp;
  Result<JobLayout> checked = check_layout(cfg, m, world);
  if (!checked.ok()) return checked.error().with_context("--tp/--cp/--pp/--dp");
  const ResolvedLayout& resolved = checked->resolved;
  const Json layout_json = {{"tp", layout.tp}, {"cp", layout.cp}, {"pp", layout.pp},
                            {"dp", layout.dp}, {"world", world},  {"layout", resolved.layout.to_string()}};
  Json model_json = model::config_to_hf_json(m);
  Json meta = {{"tokens", 0}, {"optimizer_steps", 0}, {"model", model_json}, {"source", {{"hf_dir", hf_dir}}}};

  const std::string tmp = out_dir + ".tmp-convert";
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp, ec);
  if (ec) return make_error("--out '", out_dir, "': cannot create ", tmp, " (", ec.message(), ")");
  comm::CommOptions opts = comm_options(cfg);
  comm::LocalWorld lw(static_cast<int>(world), opts);
  const std::vector<Status> st = lw.run([&](comm::Communicator& w) -> Status {
    HERD_ASSIGN_OR_RETURN(std::unique_ptr<parallel::ParallelGroups> groups,
                          parallel::ParallelGroups::make(w, checked->dims));
    const parallel::ParallelContext ctx =
        groups->context(cfg.parallel.sequence_parallel, cfg.parallel.reshard_after_forward);
    HERD_ASSIGN_OR_RETURN(std::unique_ptr<parallel::RankModel<float>> model,
                          parallel::RankModel<float>::make(ctx, m, checked->model_options(cfg.data.seq_len)));
    std::vector<parallel::ShardPiece<float>> load = model->load_pieces();
    HERD_RETURN_IF_ERROR(hf->load_into<float>(load));
    return save_dist_checkpoint<float>(tmp, 0, meta, layout_json, w, model->shard_pieces(), 1);
  });
  Status s = comm::first_error(st);
  if (s.ok()) {
    fs::remove_all(out_dir, ec);  // an empty directory
    fs::rename(tmp, out_dir, ec);
    if (ec) s = make_error("--out '", out_dir, "': rename from ", tmp, " failed (", ec.message(), ")");
  }
  if (!s.ok()) fs::remove_all(tmp, ec);
  return s;
}

}  // namespace herd::train
