// kernels/copy.h against memcpy / memset: every byte, at sizes around the chunking's boundaries.
#include "herd/kernels/copy.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

namespace herd::kernels {
namespace {

TEST(Copy, EveryByteAtEverySplit) {
  const std::size_t chunk = std::size_t{1} << 18;
  for (std::size_t bytes : {std::size_t{0}, std::size_t{1}, std::size_t{4095}, 2 * chunk - 1, 2 * chunk, 2 * chunk + 3,
                            5 * chunk + 17, 9 * chunk}) {
    std::vector<unsigned char> src(bytes + 2), dst(bytes + 2, 0xAB);
    for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<unsigned char>(i * 131 + 7);
    copy_buffer(src.data() + 1, dst.data() + 1, bytes);  // unaligned on purpose
    EXPECT_EQ(std::memcmp(src.data() + 1, dst.data() + 1, bytes), 0) << bytes;
    EXPECT_EQ(dst[0], 0xAB) << bytes;  // nothing outside the range
    EXPECT_EQ(dst[bytes + 1], 0xAB) << bytes;
    zero_buffer(dst.data() + 1, bytes);
    for (std::size_t i = 1; i <= bytes; ++i) ASSERT_EQ(dst[i], 0) << bytes << " at " << i;
    EXPECT_EQ(dst[0], 0xAB) << bytes;
    EXPECT_EQ(dst[bytes + 1], 0xAB) << bytes;
  }
}

}  // namespace
}  // namespace herd::kernels
