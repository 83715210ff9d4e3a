// libFuzzer target: a tokenizer file (tiktoken's base64 rank format, as Llama 3's tokenizer.model), then
// a round trip through the loaded vocabulary when it loads.
#include "fuzz_util.h"
#include "herd/data/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace herd;
  const std::string path = fuzz::write_input("tokenizer.model", data, size);
  Result<data::Tokenizer> tok = data::Tokenizer::load(path);
  if (!tok.ok()) return 0;
  Result<std::vector<std::int32_t>> ids = tok->encode("The State of the Union, 1790: \xc3\xa9t\xc3\xa9 42!");
  if (ids.ok()) (void)tok->decode(*ids);
  return 0;
}
