// libFuzzer target: a `herd data` directory's meta.json, as herd train and herd data verify read it.
#include "fuzz_util.h"
#include "herd/data/shard.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace herd;
  const std::string path = fuzz::write_input("data/meta.json", data, size);
  Result<data::DatasetMeta> meta = data::read_dataset_meta(path.substr(0, path.rfind('/')));
  (void)meta;
  return 0;
}
