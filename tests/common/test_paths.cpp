// The build's paths behind tests/common/test_paths.h (HERD_SOURCE_DIR_PATH and HERD_BINARY_PATH come
// from tests/CMakeLists.txt).
#include "common/test_paths.h"

namespace herd::testing {

const char* source_dir() { return HERD_SOURCE_DIR_PATH; }
const char* herd_binary() { return HERD_BINARY_PATH; }

}  // namespace herd::testing
