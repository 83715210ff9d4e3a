// libFuzzer target: a metrics file (JSON lines) as `herd plot` reads it.
#include "fuzz_util.h"
#include "herd/cli/loss_plot.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace herd;
  const std::string path = fuzz::write_input("metrics.jsonl", data, size);
  Result<cli::LossCurves> curves = cli::read_loss_curves(path);
  (void)curves;
  return 0;
}
