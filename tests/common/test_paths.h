// Where the tests find the repository (fixtures under tests/fixtures/, fetched assets under assets/)
// and the herd binary. tests/CMakeLists.txt force-includes this header into every test source and
// compiles the two paths into test_paths.cpp alone, so the command line of a test source names no
// absolute path and ccache reuses its object in a clone at another path (CCACHE_BASEDIR, scripts/).
#pragma once

namespace herd::testing {

const char* source_dir();   // the checkout the tests were configured from, or $HERD_SOURCE_DIR
const char* herd_binary();  // the herd executable of the same build

}  // namespace herd::testing

#define HERD_SOURCE_DIR (::herd::testing::source_dir())
#define HERD_BINARY (::herd::testing::herd_binary())
