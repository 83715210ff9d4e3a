// herd::Precision: the run's precision by name, both ways.
#include "herd/core/precision.h"

#include <gtest/gtest.h>

namespace herd {
namespace {

TEST(Precision, EveryNameReadsBackAndNothingElseDoes) {
  for (Precision p : {Precision::kBF16, Precision::kFP16, Precision::kFP8, Precision::kFP32, Precision::kFP64}) {
    const std::optional<Precision> back = precision_from_name(precision_name(p));
    ASSERT_TRUE(back.has_value()) << precision_name(p);
    EXPECT_EQ(*back, p);
  }
  for (const char* bad : {"", "BF16", "fp", "bf8", "float32", "int4"}) EXPECT_FALSE(precision_from_name(bad)) << bad;
}

}  // namespace
}  // namespace herd
