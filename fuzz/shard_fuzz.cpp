// libFuzzer target: a token shard file (`herd data` output: header, documents, checksum).
#include "fuzz_util.h"
#include "herd/data/shard.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace herd;
  const std::string path = fuzz::write_input("shard.bin", data, size);
  Result<data::TokenDocuments> docs = data::read_shard(path);
  (void)docs;
  return 0;
}
