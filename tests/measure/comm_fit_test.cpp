// The link fit against samples made from a known latency and bandwidth, and the local communicator's
// samples carrying the collective model's terms.
#include "herd/measure/comm_fit.h"

#include <gtest/gtest.h>

namespace herd::measure {
namespace {

// Samples exactly on the model: seconds = steps x latency + volume / bandwidth.
CommSample on_model(const std::string& op, int n, double bytes, double lat, double bw) {
  const double nd = n, frac = (nd - 1) / nd;
  CommSample s{op, n, bytes, 0, 0, 0};
  if (op == "all_reduce") s.steps = 2 * (nd - 1), s.volume = 2 * frac * bytes;
  if (op == "all_gather" || op == "reduce_scatter") s.steps = nd - 1, s.volume = frac * bytes;
  if (op == "send_recv") s.steps = 1, s.volume = bytes;
  s.seconds = s.steps * lat + s.volume / bw;
  return s;
}

TEST(CommFit, RecoversTheLatencyAndBandwidthOfExactSamples) {
  const double lat = 20e-6, bw = 2e9;
  std::vector<CommSample> s;
  for (const char* op : {"all_reduce", "all_gather", "reduce_scatter"}) {
    s.push_back(on_model(op, 2, 32768, lat, bw));    // small: latency
    s.push_back(on_model(op, 2, 8388608, lat, bw));  // large: bandwidth
  }
  s.push_back(on_model("send_recv", 2, 8388608, 1.0, 1.0));  // not a collective: ignored
  const LinkFit f = fit_link(s, 32768, 8388608);
  // Three alternations leave a relative error of about (latency share of the large samples) x
  // (copy share of the small ones) cubed, far below 1% here.
  EXPECT_NEAR(f.latency_s, lat, 0.01 * lat);
  EXPECT_NEAR(f.bytes_per_s, bw, 0.01 * bw);
}

TEST(CommFit, LocalCollectivesCarryTheModelTerms) {
  Result<std::vector<CommSample>> r = time_local_collectives(2, {1024}, 1);
  ASSERT_TRUE(r.ok()) << r.error().message();
  ASSERT_EQ(r->size(), 4u);
  // 1024 floats per rank on 2 ranks: a whole tensor of 8 KiB; send/recv moves one rank's 4 KiB.
  const CommSample& ar = (*r)[0];
  EXPECT_EQ(ar.op, "all_reduce");
  EXPECT_EQ(ar.bytes, 8192.0);
  EXPECT_EQ(ar.steps, 2.0);      // 2 (n - 1)
  EXPECT_EQ(ar.volume, 8192.0);  // 2 (n - 1) / n x 8 KiB
  EXPECT_EQ((*r)[1].op, "all_gather");
  EXPECT_EQ((*r)[1].steps, 1.0);
  EXPECT_EQ((*r)[1].volume, 4096.0);  // (n - 1) / n
  EXPECT_EQ((*r)[3].op, "send_recv");
  EXPECT_EQ((*r)[3].bytes, 4096.0);
  for (const CommSample& s : *r) EXPECT_GT(s.seconds, 0.0) << s.op;
  EXPECT_FALSE(time_local_collectives(1, {1024}, 1).ok());
}

}  // namespace
}  // namespace herd::measure
