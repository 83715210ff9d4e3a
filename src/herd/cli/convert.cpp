// herd convert: Hugging Face Llama directories to herd checkpoints of any layout and back (docs/interop.md).
//
//   herd convert --from-hf HF_DIR --out CHECKPOINT_DIR [--tp T --cp C --pp P --dp D]
//   herd convert --to-hf CHECKPOINT_DIR --out HF_DIR [--dtype fp32|bf16|fp16]
//
// --from-hf writes CHECKPOINT_DIR/step_00000000 as a run of that layout would save it (train/checkpoint/interop.h);
// --to-hf reads a checkpoint of any layout (a step directory or a run's directory: its newest step) and
// writes config.json and model.safetensors (train/checkpoint/hf_checkpoint.h; into an existing Hugging Face
// directory it replaces those and the old weights, and leaves its other files alone). Either way nothing
// is left behind on failure.
#include <iostream>

#include "herd/cli/app.h"
#include "herd/train/checkpoint/hf_checkpoint.h"
#include "herd/train/checkpoint/interop.h"

namespace herd::cli {

namespace {

struct ConvertOptions {
  std::string from_hf, to_hf, out, dtype = "fp32";
  train::ConvertLayout layout;
};

int run_convert(const ConvertOptions& o) {
  if (o.from_hf.empty() == o.to_hf.empty()) {
    return report_error("convert", make_error("--from-hf or --to-hf: give exactly one of them"));
  }
  if (!o.to_hf.empty()) {
    const bool layout = o.layout.tp != 1 || o.layout.cp != 1 || o.layout.pp != 1 || o.layout.dp != 1;
    if (layout) {
      return report_error("convert", make_error("--tp/--cp/--pp/--dp choose the layout of --from-hf's output; a "
                                                "Hugging Face directory has none, so leave them out with --to-hf"));
    }
    DType dt = DType::kF32;
    if (o.dtype == "bf16") {
      dt = DType::kBF16;
    } else if (o.dtype == "fp16") {
      dt = DType::kF16;
    } else if (o.dtype != "fp32") {
      return report_error("convert", make_error("--dtype '", o.dtype, "': use fp32, bf16 or fp16"));
    }
    Status s = train::export_hf(o.to_hf, o.out, dt);
    if (!s.ok()) return report_error("convert", s.error());
    std::cout << "wrote " << o.out << " (config.json, model.safetensors, " << o.dtype << ") from " << o.to_hf << "\n";
    return 0;
  }
  if (o.dtype != "fp32") {
    return report_error("convert",
                        make_error("--dtype '", o.dtype, "': herd checkpoints hold fp32; leave --dtype out"));
  }
  Status s = train::convert_from_hf(o.from_hf, o.out, o.layout);
  if (!s.ok()) return report_error("convert", s.error());
  std::cout << "wrote " << o.out << "/step_00000000 (tp " << o.layout.tp << ", cp " << o.layout.cp << ", pp "
            << o.layout.pp << ", dp " << o.layout.dp << ") from " << o.from_hf << "\n";
  return 0;
}

}  // namespace

Subcommand add_convert_command(CLI::App& root) {
  auto opts = std::make_shared<ConvertOptions>();
  CLI::App* app = root.add_subcommand("convert", "Convert Hugging Face Llama directories to herd checkpoints and back");
  app->add_option("--from-hf", opts->from_hf, "A Hugging Face model directory (config.json, model.safetensors)");
  app->add_option("--to-hf", opts->to_hf, "A herd checkpoint of any layout (a step_* directory or a run's directory)");
  app->add_option("--out", opts->out,
                  "The directory to write: new or empty (--from-hf, --to-hf), or an existing Hugging Face directory "
                  "(--to-hf: only config.json and the weights are replaced)")
      ->required();
  app->add_option("--tp", opts->layout.tp, "Tensor-parallel degree of --from-hf's output")
      ->capture_default_str()
      ->check(positive_integer());
  app->add_option("--cp", opts->layout.cp, "Context-parallel degree of --from-hf's output")
      ->capture_default_str()
      ->check(positive_integer());
  app->add_option("--pp", opts->layout.pp, "Pipeline degree of --from-hf's output")
      ->capture_default_str()
      ->check(positive_integer());
  app->add_option("--dp", opts->layout.dp, "Data-parallel (FSDP) degree of --from-hf's output")
      ->capture_default_str()
      ->check(positive_integer());
  app->add_option("--dtype", opts->dtype, "Tensor type --to-hf writes: fp32, bf16 or fp16")->capture_default_str();
  return {app, [opts] { return run_convert(*opts); }};
}

}  // namespace herd::cli
