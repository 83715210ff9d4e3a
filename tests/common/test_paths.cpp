// The build's paths behind tests/common/test_paths.h (HERD_SOURCE_DIR_PATH and HERD_BINARY_PATH come
// from tests/CMakeLists.txt). A test binary run from another checkout (the GPU machine of
// scripts/device_check.sh) is given it in the environment, HERD_SOURCE_DIR.
#include "common/test_paths.h"

#include <cstdlib>

namespace herd::testing {

const char* source_dir() {
  const char* env = std::getenv("HERD_SOURCE_DIR");
  return env != nullptr && env[0] != '\0' ? env : HERD_SOURCE_DIR_PATH;
}
const char* herd_binary() { return HERD_BINARY_PATH; }

}  // namespace herd::testing
