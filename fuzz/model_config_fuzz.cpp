// libFuzzer target: a Hugging Face style config.json (`herd model CONFIG`, model.name=PATH), then the
// model math the planner runs on it: parameters, FLOPs per token, activation bytes. UBSan turns an
// integer overflow in that math into a crash, so sizes near 2^31 and 2^63 are exercised too.
#include "fuzz_util.h"
#include "herd/model/activations.h"
#include "herd/model/config.h"
#include "herd/model/flops.h"
#include "herd/model/params.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace herd;
  const std::string path = fuzz::write_input("model/config.json", data, size);
  Result<model::LlamaConfig> m = model::load_hf_config(path);
  if (!m.ok() || !model::validate(*m).ok()) return 0;
  (void)model::model_params(*m).total();
  for (std::int64_t seq : {std::int64_t{1}, std::int64_t{4096}, m->max_seq_len}) {
    Result<double> flops = model::train_model_flops_per_token(*m, seq, model::AttentionMask::causal());
    (void)flops;
    model::ActivationShape s;
    s.seq_len = seq;
    // As herd model and the planner do: a shape the model math cannot take is refused first.
    if (model::validate_activation_shape(*m, s).ok()) (void)model::layer_activation_bytes(*m, s);
  }
  return 0;
}
