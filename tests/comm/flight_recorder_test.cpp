// The flight recorder: ring semantics, state stamps, JSON dump; and the pipeline tags.
#include "herd/comm/flight_recorder.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <set>

#include "herd/comm/types.h"

namespace herd::comm {
namespace {

RecordEntry entry(std::uint64_t seq, OpKind op) {
  RecordEntry e;
  e.seq = seq;
  e.op = op;
  e.group = "dp";
  e.group_id = 3;
  e.count = 10 * seq;
  return e;
}

TEST(FlightRecorder, KeepsTheLastEntriesInOrder) {
  FlightRecorder fr(5, 4);
  for (std::uint64_t s = 0; s < 10; ++s) EXPECT_EQ(fr.record(entry(s, OpKind::kAllReduce)), s);
  const auto es = fr.entries();
  ASSERT_EQ(es.size(), 4u);
  for (int k = 0; k < 4; ++k) {
    EXPECT_EQ(es[k].id, 6u + k);
    EXPECT_EQ(es[k].seq, 6u + k);
  }
  EXPECT_EQ(fr.total_recorded(), 10u);
}

TEST(FlightRecorder, StatesAreStampedAndOverwrittenEntriesIgnored) {
  FlightRecorder fr(0, 2);
  const auto a = fr.record(entry(0, OpKind::kSend));
  fr.set_state(a, OpState::kStarted);
  fr.set_state(a, OpState::kCompleted);
  auto es = fr.entries();
  EXPECT_EQ(es[0].state, OpState::kCompleted);
  EXPECT_GE(es[0].t_start, es[0].t_post);
  EXPECT_GE(es[0].t_end, es[0].t_start);
  fr.record(entry(1, OpKind::kRecv));
  fr.record(entry(2, OpKind::kBarrier));  // overwrites id 0
  fr.set_state(a, OpState::kFailed);      // no effect on the entry now in its place
  es = fr.entries();
  EXPECT_EQ(es[0].id, 1u);
  EXPECT_EQ(es[0].state, OpState::kScheduled);
  EXPECT_EQ(es[0].t_end, -1);
}

TEST(FlightRecorder, DumpsJson) {
  FlightRecorder fr(7, 8);
  RecordEntry e = entry(4, OpKind::kReduceScatter);
  e.reduce = ReduceOp::kMax;
  e.elem = DType::kF64;
  fr.set_state(fr.record(e), OpState::kTimedOut);
  const auto dir = std::filesystem::temp_directory_path() / "herd_fr_test";
  auto path = fr.dump(dir.string(), "t", "why not");
  ASSERT_TRUE(path.ok()) << path.error().message();
  auto doc = read_json_file(*path);
  ASSERT_TRUE(doc.ok());
  EXPECT_EQ((*doc)["rank"], 7);
  EXPECT_EQ((*doc)["reason"], "why not");
  const Json& x = (*doc)["entries"][0];
  EXPECT_EQ(x["seq"], 4);
  EXPECT_EQ(x["group"], "dp");
  EXPECT_EQ(x["op"], "reduce_scatter");
  EXPECT_EQ(x["dtype"], "fp64");
  EXPECT_EQ(x["reduce"], "max");
  EXPECT_EQ(x["count"], 40);
  EXPECT_EQ(x["state"], "timed_out");
  auto bad = fr.dump("/proc/no_such_dir", "t", "x");
  EXPECT_FALSE(bad.ok());
}

TEST(CommOptions, PipelineTagsAreUniqueAndBounded) {
  std::set<int> seen;
  for (int m = 0; m < 16; ++m)
    for (int s = 0; s < 4; ++s)
      for (bool b : {false, true}) EXPECT_TRUE(seen.insert(*p2p_tag(m, s, b, 4)).second);
  EXPECT_FALSE(p2p_tag(5000, 0, false, 4).ok());
  EXPECT_FALSE(p2p_tag(0, 4, false, 4).ok());
}

}  // namespace
}  // namespace herd::comm
