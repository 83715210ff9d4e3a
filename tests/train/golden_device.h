// The golden PyTorch check (tools/llama_golden.py, tests/train/golden/llama_tiny.bin) through herd's
// training code on a device: the one-rank RankModel (the trainer's model, with its op interface and
// communicators) on the golden packed batch, its loss and every reduced gradient against the float64
// reference. golden_test.cpp checks nn::LlamaModel on the CPU; this runs the same data through the
// path a GPU run takes, so the same check holds on the CPU, on a stand-in device and on a GPU.
#pragma once

#include <string>
#include <vector>

#include "golden_file.h"
#include "herd/comm/local/local_world.h"
#include "herd/nn/init.h"
#include "herd/nn/model.h"
#include "herd/parallel/device_memory.h"
#include "herd/parallel/rank_model.h"

namespace herd::testing {

struct GoldenDeviceErrors {
  double loss = 0;        // |loss - ref| / ref
  double worst_grad = 0;  // the largest max |g - ref| / max |ref| over the tensors
  std::string worst_grad_name;
};

// The golden initial weights in nn::LlamaModel's flat layout (the file's param_order).
inline std::vector<float> golden_full_weights(const GoldenFile& g, const model::LlamaConfig& cfg) {
  nn::LlamaModel<float> m(cfg, model::Recompute::kNone, 1, 1);
  const std::vector<std::string> order = g.header["param_order"];
  HERD_CHECK(order.size() == m.named_params().size(), "golden param_order against the model's");
  for (std::size_t i = 0; i < order.size(); ++i) {
    const nn::NamedParam& p = m.named_params()[i];
    HERD_CHECK(order[i] == p.name, "golden param ", order[i], " against ", p.name);
    nn::fill_uniform_golden(m.params() + p.offset, p.count(), i, g.header["init"][order[i]]["center"].get<double>(),
                            g.header["init"][order[i]]["scale"].get<double>());
  }
  return {m.params(), m.params() + m.param_count()};
}

// One fp32 forward and backward of the golden batch through a one-rank RankModel on `device` (whose op
// interface must be registered), under `recompute`.
inline Result<GoldenDeviceErrors> golden_rank_model(kernels::Device device, model::Recompute recompute) {
  const GoldenFile& g = golden_file("llama_tiny.bin");
  const model::LlamaConfig cfg = golden_model_config(g);
  const nn::MicroBatch mb = golden_batch(g);
  const std::vector<float> full = golden_full_weights(g, cfg);
  nn::LlamaModel<float> table(cfg, model::Recompute::kNone, 1, 1);  // names and offsets
  comm::CommOptions o;
  o.timeout_s = 60;
  if (device != kernels::Device::kCpu) o.device_memory = parallel::make_device_memory(kernels::ops_for(device));
  comm::LocalWorld world(1, o);
  GoldenDeviceErrors e;
  const Status s = comm::first_error(world.run([&](comm::Communicator& w) -> Status {
    const topology::ParallelDims dims = *topology::ParallelDims::make(1, 1, 1, 1);
    HERD_ASSIGN_OR_RETURN(auto groups, parallel::ParallelGroups::make(w, dims));
    parallel::ParallelContext ctx = groups->context(false, true);
    ctx.device = device;
    parallel::RankModelOptions ro;
    ro.recompute = recompute;
    ro.micro_batch = mb.batch;
    ro.seq_len = mb.seq_len;
    ro.schedule.microbatches = 1;
    HERD_ASSIGN_OR_RETURN(auto model, parallel::RankModel<float>::make(ctx, cfg, ro));
    model->load_full(full.data());
    model->zero_grads();
    std::int64_t count = 0;
    for (std::int64_t i = 0; i < mb.rows(); ++i) count += mb.targets[i] >= 0;
    HERD_ASSIGN_OR_RETURN(const kernels::CrossEntropyLoss l,
                          model->forward_backward_step({mb}, 1.0f / static_cast<float>(count)));
    const double ref = g.header["loss"];
    e.loss = std::abs(l.loss_sum / static_cast<double>(l.count) - ref) / ref;
    HERD_ASSIGN_OR_RETURN(const std::vector<float> grads, model->gather_full(/*grads=*/true));
    for (const nn::NamedParam& p : table.named_params()) {
      const double rel = max_relative_error(grads.data() + p.offset, g.f32.at("grad." + p.name));
      if (rel >= e.worst_grad) e.worst_grad = rel, e.worst_grad_name = p.name;
    }
    return Status::Ok();
  }));
  if (!s.ok()) return s.error();
  return e;
}

}  // namespace herd::testing
