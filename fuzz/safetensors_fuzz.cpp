// libFuzzer target: a safetensors file (Hugging Face weights: header length, JSON header, raw data),
// opened and every tensor read whole.
#include <vector>

#include "fuzz_util.h"
#include "herd/core/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace herd;
  const std::string path = fuzz::write_input("model.safetensors", data, size);
  Result<std::unique_ptr<SafetensorsFile>> f = SafetensorsFile::open(path);
  if (!f.ok()) return 0;
  std::vector<float> values;
  for (const SafetensorsEntry& e : (*f)->entries()) {
    values.resize(static_cast<std::size_t>(e.numel()));
    (*f)->read<float>(e, 0, e.numel(), values.data());
  }
  return 0;
}
