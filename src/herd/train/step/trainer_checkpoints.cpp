// Trainer's checkpoints: the asynchronous save (snapshot, then a background write), the ranks'
// agreement on its outcome under checkpoint.on_error, and the resume from the newest checkpoint that
// verifies, at any layout.
#include <cmath>
#include <filesystem>

#include "herd/core/json_text.h"
#include "herd/core/log.h"
#include "herd/core/timer.h"
#include "herd/model/weights.h"
#include "herd/train/checkpoint/checkpoint.h"
#include "herd/train/checkpoint/interop.h"
#include "herd/train/step/trainer.h"

namespace herd::train {

namespace {

// A checkpoint resumes only into the run it belongs to: the manifest's model (every setting that shapes
// the weights or what they compute), sequence length and training split must be this run's. The layout
// is free (the loader cuts any writer's pieces into any reader's).
Status check_resumable(const DistCheckpoint& ck, const TrainConfig& cfg, const model::LlamaConfig& run_model,
                       const data::TokenDocuments& train) {
  const std::string where =
      "checkpoint.dir '" + cfg.checkpoint.dir + "': " + std::filesystem::path(ck.path).filename().string();
  const Json& meta = ck.meta();
  const Json saved = meta.contains("config") && meta["config"].is_object() ? meta["config"] : Json::object();
  auto saved_field = [&](const char* section, const char* key) -> const Json* {
    if (!saved.contains(section) || !saved[section].is_object() || !saved[section].contains(key)) return nullptr;
    return &saved[section][key];
  };
  const Json* name = saved_field("model", "name");
  const std::string fix =
      std::string("; resume with the run's own settings") +
      (name != nullptr && name->is_string() ? " (model.name=" + name->get<std::string>() + ")" : "") +
      ", or choose another checkpoint.dir (or --checkpoint.resume=false to start afresh there)";
  if (!meta.contains("model")) return make_error(ck.path, "/manifest.json: meta lacks the model configuration");
  HERD_ASSIGN_OR_RETURN(model::LlamaConfig saved_model,
                        model::config_from_hf_json(meta["model"], ck.path + "/manifest.json: meta.model"));
  const std::string diff = model_mismatch(saved_model, run_model);
  if (!diff.empty()) {
    return make_error(where, " holds another model than this run's: ", diff, " (the checkpoint's vs this run's)", fix);
  }
  if (const Json* seq = saved_field("data", "seq_len"); seq != nullptr && seq->is_number_integer()) {
    if (seq->get<std::int64_t>() != cfg.data.seq_len) {
      return make_error(where, " was trained on other sequences: data.seq_len ", seq->get<std::int64_t>(), " vs ",
                        cfg.data.seq_len, " (the checkpoint's vs this run's)", fix);
    }
  }
  if (meta.contains("data") && meta["data"].is_object()) {
    const Json& d = meta["data"];
    auto count = [&](const char* key) {
      return d.contains(key) && d[key].is_number_integer() ? d[key].get<std::int64_t>() : std::int64_t{-1};
    };
    const std::int64_t docs = count("train_documents"), tokens = count("train_tokens");
    if (docs != train.n_docs() || tokens != train.n_tokens()) {
      return make_error(where, " was trained on another training split: ", docs, " documents (", tokens, " tokens) vs ",
                        train.n_docs(), " documents (", train.n_tokens(), " tokens) in data.dir '", cfg.data.dir,
                        "' (the checkpoint's vs this run's)", fix);
    }
  }
  return Status::Ok();
}

}  // namespace

template <typename T>
void Trainer<T>::wait_for_saves() {
  if (writer_) writer_->wait_idle();
}

template <typename T>
Status Trainer<T>::save_checkpoint() {
  if (!writer_) return make_error("checkpoint.dir is empty; set it to save checkpoints");
  Result<double> started = start_checkpoint();
  if (!started.ok()) return started.error();
  return finish_checkpoints();
}

template <typename T>
Result<double> Trainer<T>::start_checkpoint() {
  Timer t;
  writer_->wait_idle();  // at most one write in flight; its snapshot buffer is reused
  note_checkpoint_outcome(writer_->poll());
  const std::vector<parallel::ShardPiece<T>> pieces = model_->shard_pieces();
  for (const parallel::ShardPiece<T>& p : pieces) {
    for (std::int64_t i = 0; i < p.count(); ++i) {
      if (!std::isfinite(p.param[i])) {
        return make_error("step ", step_, ": weight '", p.name, "' (", model::weight_group(p.name),
                          ") holds a non-finite value; a non-finite checkpoint is never saved");
      }
    }
  }
  snapshot_pieces<T>(pieces, writer_->buffer());
  const Json meta = {{"tokens", tokens_},
                     {"optimizer_steps", model_->optimizer_steps()},
                     {"loader", current_->state().to_json()},
                     {"rng", {{"init_seed", cfg_.train.seed}, {"data_seed", cfg_.data.seed}}},
                     {"config", to_json(cfg_)},
                     {"model", model::config_to_hf_json(model_cfg_)},
                     {"data", {{"train_documents", train_docs_->n_docs()}, {"train_tokens", train_docs_->n_tokens()}}}};
  const Json layout = {{"tp", ctx_.dims.tp()}, {"cp", ctx_.dims.cp()},       {"pp", ctx_.dims.pp()},
                       {"dp", ctx_.dims.dp()}, {"world", ctx_.dims.world()}, {"layout", layout_.layout.to_string()}};
  writer_->start(step_, meta, layout, hooks != nullptr && hooks->fail_save(step_));
  if (!cfg_.checkpoint.async) note_checkpoint_outcome(writer_->poll());
  return t.seconds();
}

template <typename T>
void Trainer<T>::note_checkpoint_outcome(const std::optional<CheckpointWriter::Outcome>& o) {
  if (!o || o->status.ok()) return;
  checkpoint_error_ = o->status.error().with_context("checkpoint of step " + std::to_string(o->step));
  checkpoint_failed_here_ = true;
}

template <typename T>
Status Trainer<T>::finish_checkpoints() {
  if (!writer_) return Status::Ok();
  note_checkpoint_outcome(writer_->wait());
  int failed = checkpoint_failed_here_ ? 1 : 0;
  HERD_RETURN_IF_ERROR(ctx_.world->all_reduce(&failed, 1, DType::kI32, comm::ReduceOp::kMax));
  if (!failed) return Status::Ok();
  return checkpoint_failed("");
}

template <typename T>
Status Trainer<T>::checkpoint_failed(const std::string& continuing) {
  const Status why =
      checkpoint_failed_here_
          ? checkpoint_error_
          : make_error("checkpoint: another rank's save failed (its message names the path and the reason)");
  checkpoint_failed_here_ = false;
  if (cfg_.checkpoint.on_error == "stop") {
    // Every rank stops here; a later save already in flight completes first (or fails and is
    // removed), so nothing half-written stays behind.
    writer_->wait();
    return why.error().with_context("checkpoint.on_error=stop");
  }
  if (ctx_.rank == 0) {
    log_warning(why.error().message(), "; checkpoint.on_error=continue", continuing);
  }
  return Status::Ok();
}

template <typename T>
Status Trainer<T>::resume() {
  // Rank 0 picks the checkpoint (the newest that verifies, with checkpoint.fallback) and every rank opens
  // that one, so the ranks cannot disagree on the step they resume from.
  std::optional<DistCheckpoint> found;
  Status picked = Status::Ok();
  std::int64_t step = -1;  // -1: none; -2: rank 0 failed
  if (ctx_.rank == 0) {
    Result<std::optional<DistCheckpoint>> r = open_latest_checkpoint(cfg_.checkpoint.dir, cfg_.checkpoint.fallback);
    if (!r.ok()) {
      picked = r.error();
      step = -2;
    } else if (*r) {
      found = std::move(**r);
      step = found->step;
    }
  }
  HERD_RETURN_IF_ERROR(ctx_.world->broadcast(&step, 1, DType::kI64, 0));
  if (step == -2) {
    if (!picked.ok()) return picked;
    return make_error("checkpoint.dir '", cfg_.checkpoint.dir, "': rank 0 found no checkpoint to resume from");
  }
  if (step == -1) return Status::Ok();
  if (!found) {
    HERD_ASSIGN_OR_RETURN(
        DistCheckpoint ck,
        open_dist_checkpoint((std::filesystem::path(cfg_.checkpoint.dir) / step_dir_name(step)).string()));
    found = std::move(ck);
  }
  const DistCheckpoint& ck = *found;
  HERD_RETURN_IF_ERROR(check_resumable(ck, cfg_, model_cfg_, *train_docs_));
  std::vector<parallel::ShardPiece<T>> pieces = model_->load_pieces();
  HERD_RETURN_IF_ERROR(ck.load_into<T>(pieces));
  model_->after_load();
  const Json& meta = ck.meta();
  HERD_ASSIGN_OR_RETURN(std::int64_t opt_steps, json_int(meta, ck.path + "/manifest.json: meta", "optimizer_steps"));
  HERD_ASSIGN_OR_RETURN(std::int64_t tokens, json_int(meta, ck.path + "/manifest.json: meta", "tokens"));
  if (!meta.contains("loader")) return make_error(ck.path, "/manifest.json: meta lacks the loader's position");
  model_->set_optimizer_steps(opt_steps);
  step_ = ck.step;
  tokens_ = tokens;
  HERD_ASSIGN_OR_RETURN(data::LoaderState st, data::LoaderState::from_json(meta["loader"]));
  HERD_ASSIGN_OR_RETURN(current_, loader_for(ramp_.at(tokens_)));
  Status s = current_->restore(st);
  if (!s.ok()) return s.error().with_context(ck.path);
  resumed_from_ = step_;
  if (!quiet && ctx_.rank == 0) {
    log_info("resumed from ", ck.path, " (step ", step_, ", ", tokens_, " tokens, written by ",
             ck.manifest["layout"].value("layout", json_text(ck.manifest["layout"])), ")");
  }
  return Status::Ok();
}

#define HERD_TRAINER_CHECKPOINTS(T)                                                                   \
  template void Trainer<T>::wait_for_saves();                                                         \
  template Status Trainer<T>::save_checkpoint();                                                      \
  template Result<double> Trainer<T>::start_checkpoint();                                             \
  template void Trainer<T>::note_checkpoint_outcome(const std::optional<CheckpointWriter::Outcome>&); \
  template Status Trainer<T>::finish_checkpoints();                                                   \
  template Status Trainer<T>::checkpoint_failed(const std::string&);                                  \
  template Status Trainer<T>::resume();
HERD_TRAINER_CHECKPOINTS(float)
HERD_TRAINER_CHECKPOINTS(double)
#undef HERD_TRAINER_CHECKPOINTS

}  // namespace herd::train
