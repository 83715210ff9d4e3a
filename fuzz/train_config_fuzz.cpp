// libFuzzer target: a training config file (JSON) and its --section.field=value overrides, through the
// same path as `herd train CONFIG --a.b=c`: parse, apply, validate, resolve the layout. The input is the
// file's text; lines after a line "--" are overrides.
#include "fuzz_util.h"
#include "herd/core/json.h"
#include "herd/train/job/config.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace herd;
  const std::string text = fuzz::as_text(data, size);
  const std::size_t split = text.find("\n--\n");
  const std::string file = text.substr(0, split);
  std::vector<std::string> overrides;
  if (split != std::string::npos) {
    std::string rest = text.substr(split + 4);
    std::size_t at = 0;
    while (at <= rest.size()) {
      const std::size_t nl = rest.find('\n', at);
      overrides.push_back(rest.substr(at, nl == std::string::npos ? std::string::npos : nl - at));
      if (nl == std::string::npos) break;
      at = nl + 1;
    }
  }
  const std::string path =
      fuzz::write_input("config.json", reinterpret_cast<const std::uint8_t*>(file.data()), file.size());
  Result<train::TrainConfig> cfg = train::read_config(path, overrides);
  if (!cfg.ok()) return 0;
  if (!train::validate(*cfg).ok()) return 0;
  Result<train::ResolvedLayout> layout = train::resolve_layout(*cfg);
  (void)layout;
  (void)train::to_json(*cfg).dump();
  return 0;
}
