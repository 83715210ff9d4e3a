// libFuzzer target: a checkpoint's manifest.json, as resume and `herd generate` open it (the shard files
// it names are absent, so everything up to verifying them is exercised).
#include "fuzz_util.h"
#include "herd/train/checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace herd;
  const std::string path = fuzz::write_input("ckpt/step_00000010/manifest.json", data, size);
  const std::string step_dir = path.substr(0, path.rfind('/'));
  Result<train::DistCheckpoint> ck = train::open_dist_checkpoint(step_dir);
  (void)ck;
  Result<std::optional<train::DistCheckpoint>> latest =
      train::open_latest_checkpoint(step_dir.substr(0, step_dir.rfind('/')), /*fallback=*/true);
  (void)latest;
  return 0;
}
