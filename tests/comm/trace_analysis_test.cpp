// herd trace's analysis (comm/trace_analysis.h) on hand-made dumps whose answer is known by
// construction (a cascade, a deadlock cycle, a missing dump, desyncs), on the dumps real LocalWorld
// jobs write when a rank stalls or posts a different collective, and on malformed dumps (one error
// naming the file, never a crash).
#include "herd/comm/trace_analysis.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "cli/xml_check.h"
#include "comm/comm_test_util.h"
#include "herd/comm/trace_report.h"

namespace herd::comm {
namespace {

namespace fs = std::filesystem;

// A dump as the recorder writes it, built by hand.
struct DumpBuilder {
  Json j;
  explicit DumpBuilder(int rank, const std::string& activity = "") {
    j["rank"] = rank;
    j["host"] = "h";
    j["reason"] = "test";
    j["activity"] = activity;
    j["wall_clock_at_creation_ms"] = 1000000;
    j["time_now_s"] = 10.0;
    j["groups"] = Json::array();
    j["entries"] = Json::array();
  }
  DumpBuilder& group(std::int64_t id, const std::string& name, std::vector<int> members) {
    j["groups"].push_back(Json{{"group_id", id}, {"name", name}, {"members", members}});
    return *this;
  }
  DumpBuilder& call(std::int64_t gid, const std::string& group, std::uint64_t seq, const std::string& state,
                    std::size_t count = 8, const std::string& op = "all_reduce", double t = 1.0) {
    Json e{{"id", j["entries"].size()},
           {"seq", seq},
           {"group", group},
           {"group_id", gid},
           {"op", op},
           {"dtype", "f32"},
           {"count", count},
           {"t_post", t},
           {"t_start", t},
           {"t_end", -1.0},
           {"state", state}};
    if (op == "all_reduce") e["reduce"] = "sum";
    if (state == "completed") e["t_end"] = t + 0.1;
    j["entries"].push_back(std::move(e));
    return *this;
  }
  RankDump parsed() const {
    Result<RankDump> d = parse_flight_dump(j.dump(), "rank" + j["rank"].dump() + ".json");
    EXPECT_TRUE(d.ok()) << d.error().message();
    return d.ok() ? *d : RankDump{};
  }
};

// World {0,1,2} (group 0), tp {1,2} (group 1), dp {0,1} (group 2).
DumpBuilder with_groups(int rank, const std::string& activity) {
  DumpBuilder b(rank, activity);
  b.group(0, "world", {0, 1, 2});
  if (rank != 0) b.group(1, "tp", {1, 2});
  if (rank != 2) b.group(2, "dp", {0, 1});
  return b;
}

TEST(TraceAnalysis, CascadeNamesTheRootNotTheVictims) {
  // Rank 2 is stuck outside communication; rank 1 waits on it in 'tp'; rank 0 waits on rank 1 in 'dp'.
  // Rank 0's own view blames rank 1: the analysis must follow the chain to rank 2.
  std::vector<RankDump> dumps;
  dumps.push_back(
      with_groups(0, "step 4").call(2, "dp", 4, "completed").call(2, "dp", 5, "started", 8, "all_reduce", 3).parsed());
  dumps.push_back(with_groups(1, "step 4")
                      .call(2, "dp", 4, "completed")
                      .call(1, "tp", 6, "completed")
                      .call(1, "tp", 7, "started", 16, "all_reduce", 2)
                      .parsed());
  dumps.push_back(with_groups(2, "step 4").call(1, "tp", 6, "completed").parsed());
  const TraceReport rep = analyze_dumps(dumps, "job1");
  EXPECT_EQ(rep.culprit_ranks, std::vector<int>({2}));
  EXPECT_EQ(rep.world, 3);
  ASSERT_EQ(rep.ranks.size(), 3u);
  EXPECT_EQ(rep.ranks[0].waits_for, std::vector<int>({1}));
  EXPECT_EQ(rep.ranks[1].waits_for, std::vector<int>({2}));
  EXPECT_TRUE(rep.ranks[2].waits_for.empty());
  EXPECT_EQ(rep.ranks[0].role, "victim");
  EXPECT_EQ(rep.ranks[1].role, "victim");
  EXPECT_EQ(rep.ranks[2].role, "culprit");
  EXPECT_FALSE(rep.ranks[2].call.has_value());
  EXPECT_EQ(rep.ranks[2].in, "outside communication");
  ASSERT_TRUE(rep.ranks[1].call.has_value());
  EXPECT_EQ(rep.ranks[1].call->group, "tp");
  EXPECT_EQ(rep.ranks[1].call->seq, 7u);
  EXPECT_EQ(rep.ranks[0].last_step, 3);
  // The first disagreement is the call the culprit never posted.
  ASSERT_TRUE(rep.first_disagreement.has_value());
  EXPECT_EQ(rep.first_disagreement->group, "tp");
  EXPECT_EQ(rep.first_disagreement->seq, 7u);
  EXPECT_EQ(rep.first_disagreement->entered, std::vector<int>({1}));
  EXPECT_EQ(rep.first_disagreement->missing, std::vector<int>({2}));
  EXPECT_TRUE(rep.desync.empty());

  const Json j = trace_report_json(rep);
  EXPECT_EQ(j["culprit_ranks"], Json::array({2}));
  EXPECT_TRUE(j["desync"].is_array() && j["desync"].empty());
  EXPECT_EQ(j["ranks"][2]["last_step"], 3);
  EXPECT_TRUE(j["ranks"][2]["call"].is_null());
  EXPECT_EQ(j["ranks"][1]["call"]["op"], "all_reduce");
  EXPECT_EQ(j["ranks"][1]["call"]["seq"], 7);
  const std::string text = trace_report_text(rep);
  EXPECT_NE(text.find("culprit: rank 2, outside communication"), std::string::npos) << text;
  EXPECT_NE(text.find("all_reduce #7 of 'tp' (group 1): entered by 1; never posted by 2"), std::string::npos) << text;
  const std::string svg = trace_timeline_svg(rep, dumps);
  EXPECT_EQ(herd::testing::xml_wellformed_error(svg), "");
  EXPECT_NE(svg.find("rank 2 (culprit)"), std::string::npos);
}

TEST(TraceAnalysis, AMissingDumpIsTheCulpritWhenOthersWaitOnIt) {
  std::vector<RankDump> dumps;
  dumps.push_back(with_groups(0, "step 2").call(2, "dp", 0, "timed_out").parsed());
  dumps.push_back(with_groups(1, "step 2").call(1, "tp", 0, "timed_out").call(2, "dp", 0, "started").parsed());
  const TraceReport rep = analyze_dumps(dumps);
  EXPECT_EQ(rep.culprit_ranks, std::vector<int>({2}));
  EXPECT_EQ(rep.missing_dumps, std::vector<int>({2}));
  EXPECT_EQ(rep.ranks[2].in, "no dump");
  // Rank 0's dp call was posted by rank 1 too: rank 0 waits on nobody, and is no culprit.
  EXPECT_TRUE(rep.ranks[0].waits_for.empty());
}

TEST(TraceAnalysis, ADeadlockCycleNamesEveryRankOnIt) {
  // Ranks 0 and 1 share 'tp' (1) and 'dp' (2) but took them in opposite orders.
  auto two = [](int r) {
    DumpBuilder b(r, "step 1");
    b.group(1, "tp", {0, 1}).group(2, "dp", {0, 1});
    return b;
  };
  std::vector<RankDump> dumps;
  dumps.push_back(two(0).call(1, "tp", 0, "started").parsed());
  dumps.push_back(two(1).call(2, "dp", 0, "started").parsed());
  const TraceReport rep = analyze_dumps(dumps);
  EXPECT_EQ(rep.culprit_ranks, std::vector<int>({0, 1}));
}

TEST(TraceAnalysis, NothingStuckNamesNoCulprit) {
  std::vector<RankDump> dumps;
  dumps.push_back(with_groups(0, "step 9").call(0, "world", 0, "completed").parsed());
  dumps.push_back(with_groups(1, "step 9").call(0, "world", 0, "completed").parsed());
  dumps.push_back(with_groups(2, "step 9").call(0, "world", 0, "completed").parsed());
  const TraceReport rep = analyze_dumps(dumps);
  EXPECT_TRUE(rep.culprit_ranks.empty());
  EXPECT_TRUE(rep.stuck.empty());
  EXPECT_FALSE(rep.first_disagreement.has_value());
  EXPECT_NE(trace_report_text(rep).find("culprit: none"), std::string::npos);
}

TEST(TraceAnalysis, DesyncsAreReportedWithTheOddRankApart) {
  std::vector<RankDump> dumps;
  dumps.push_back(with_groups(0, "step 1").call(0, "world", 3, "failed", 10).parsed());
  dumps.push_back(with_groups(1, "step 1").call(0, "world", 3, "failed", 12).parsed());
  dumps.push_back(with_groups(2, "step 1").call(0, "world", 3, "failed", 10).parsed());
  TraceReport rep = analyze_dumps(dumps);
  ASSERT_EQ(rep.desync.size(), 1u);
  EXPECT_EQ(rep.desync[0].group, "world");
  EXPECT_EQ(rep.desync[0].seq, 3u);
  ASSERT_EQ(rep.desync[0].variants.size(), 2u);
  EXPECT_EQ(rep.desync[0].variants[0].ranks, std::vector<int>({0, 2}));
  EXPECT_EQ(rep.desync[0].variants[1].ranks, std::vector<int>({1}));
  EXPECT_EQ(rep.desync[0].variants[1].count, 12u);
  const Json j = trace_report_json(rep);
  EXPECT_EQ(j["desync"].size(), 1u);
  EXPECT_NE(trace_report_text(rep).find("desync: 'world' (group 0) #3"), std::string::npos);

  // A different op at the same sequence number is a desync too.
  dumps[1] = with_groups(1, "step 1").call(0, "world", 3, "failed", 10, "all_gather").parsed();
  rep = analyze_dumps(dumps);
  ASSERT_EQ(rep.desync.size(), 1u);
  EXPECT_EQ(rep.desync[0].variants[1].op, "all_gather");
}

// LocalWorld jobs writing real dumps into a fresh directory under one job id.
class TraceLocal : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("herd_trace_test_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  CommOptions options(const std::string& job) {
    CommOptions o = testing::test_options(1.0);
    o.dump_dir = dir_.string();
    o.job_id = job;
    return o;
  }
  fs::path dir_;
};

TEST_F(TraceLocal, StalledRankInATp2Dp2MeshIsTheCulprit) {
  // tp {0,1} {2,3}, dp {0,2} {1,3}. Rank 1 stalls before its tp all-reduce: rank 0 waits on it in tp;
  // ranks 2 and 3 finish their tp all-reduce and wait in dp on 0 and 1 (victims of the cascade).
  LocalWorld world(4, options("stall"));
  std::atomic<bool> release{false};
  auto st = world.run([&](Communicator& c) -> Status {
    const int r = c.rank();
    HERD_ASSIGN_OR_RETURN(auto tp, c.new_group(std::vector<std::int64_t>{r / 2 * 2, r / 2 * 2 + 1}, "tp"));
    HERD_ASSIGN_OR_RETURN(auto dp, c.new_group(std::vector<std::int64_t>{r % 2, r % 2 + 2}, "dp"));
    float x[4] = {1, 2, 3, 4};
    HERD_RETURN_IF_ERROR(tp->all_reduce(x, 4, ReduceOp::kSum));
    HERD_RETURN_IF_ERROR(dp->all_reduce(x, 4, ReduceOp::kSum));
    c.recorder().beat("step 2");
    if (r == 1) {
      while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      return Status::Ok();
    }
    Status s = tp->all_reduce(x, 4, ReduceOp::kSum);
    if (s.ok()) s = dp->all_reduce(x, 2, ReduceOp::kSum);
    release = true;
    return s;
  });
  Result<JobDumps> dumps = read_job_dumps(dir_.string(), "");
  ASSERT_TRUE(dumps.ok()) << dumps.error().message();
  EXPECT_EQ(dumps->job, "stall");
  ASSERT_EQ(dumps->ranks.size(), 4u);
  const TraceReport rep = analyze_dumps(dumps->ranks, dumps->job);
  EXPECT_EQ(rep.culprit_ranks, std::vector<int>({1})) << trace_report_text(rep);
  EXPECT_EQ(rep.ranks[0].waits_for, std::vector<int>({1}));
  ASSERT_TRUE(rep.ranks[0].call.has_value());
  EXPECT_EQ(rep.ranks[0].call->group, "tp");
  EXPECT_EQ(rep.ranks[0].call->seq, 1u);
  EXPECT_EQ(rep.ranks[2].role, "victim");
  EXPECT_EQ(rep.ranks[3].role, "victim");
  EXPECT_EQ(rep.ranks[3].waits_for, std::vector<int>({1}));
  EXPECT_EQ(rep.ranks[1].last_step, 1);
  // The first disagreement is the earliest-posted call rank 1 never posted: rank 0's tp all-reduce or rank
  // 3's dp all-reduce, whichever thread got there first.
  ASSERT_TRUE(rep.first_disagreement.has_value());
  EXPECT_EQ(rep.first_disagreement->missing, std::vector<int>({1}));
  EXPECT_EQ(rep.first_disagreement->seq, 1u);
  EXPECT_TRUE(rep.desync.empty());
}

TEST_F(TraceLocal, ARankAllReducingADifferentCountIsADesync) {
  LocalWorld world(3, options("desync"));
  auto st = world.run([&](Communicator& c) -> Status {
    double x[4] = {1, 2, 3, 4};
    HERD_RETURN_IF_ERROR(c.all_reduce(x, 4, ReduceOp::kSum));
    return c.all_reduce(x, c.rank() == 1 ? 3 : 4, ReduceOp::kSum);
  });
  EXPECT_FALSE(first_error(st).ok());
  Result<JobDumps> dumps = read_job_dumps(dir_.string(), "desync");
  ASSERT_TRUE(dumps.ok()) << dumps.error().message();
  const TraceReport rep = analyze_dumps(dumps->ranks, dumps->job);
  ASSERT_EQ(rep.desync.size(), 1u) << trace_report_text(rep);
  EXPECT_EQ(rep.desync[0].seq, 1u);
  EXPECT_EQ(rep.desync[0].group, "world");
  // Whichever ranks posted before the abort: rank 1's variant has count 3 and no one else's does.
  bool odd = false;
  for (const auto& v : rep.desync[0].variants) {
    if (v.count == 3) {
      EXPECT_EQ(v.ranks, std::vector<int>({1}));
      odd = true;
    }
  }
  EXPECT_TRUE(odd);
}

TEST(TraceDump, TheRecorderDumpRoundTripsWithItsGroupTable) {
  LocalWorld world(2, testing::test_options());
  auto st = world.run([&](Communicator& c) -> Status {
    HERD_ASSIGN_OR_RETURN(auto g, c.new_group(std::vector<std::int64_t>{1, 0}, "pp"));
    float x = 1;
    HERD_RETURN_IF_ERROR(g->all_reduce(&x, 1, ReduceOp::kMax));
    c.recorder().beat("step 7");
    const Json j = c.recorder().to_json("test");
    Result<RankDump> d = parse_flight_dump(j.dump(), "x.json");
    COMM_EXPECT(d.ok());
    COMM_EXPECT(d->rank == c.rank() && d->activity == "step 7");
    COMM_EXPECT(d->groups.size() == 2u && d->groups[1].name == "pp" &&
                d->groups[1].members == std::vector<int>({1, 0}));
    COMM_EXPECT(d->entries.size() == 1u && d->entries[0].op == "all_reduce" && d->entries[0].reduce == "max");
    COMM_EXPECT(d->entries[0].group_id == d->groups[1].group_id && d->entries[0].completed());
    COMM_EXPECT(d->steps.empty());
    // The trainer's step times: the last FlightRecorder::kStepsKept are kept and dumped.
    for (int step = 1; step <= 40; ++step) {
      c.recorder().note_step(
          {.step = step, .busy_s = 0.01 * step, .wait_s = 0.001, .stall_s = 0.002, .queued_s = 0.003});
    }
    Result<RankDump> e = parse_flight_dump(c.recorder().to_json("test").dump(), "x.json");
    COMM_EXPECT(e.ok());
    COMM_EXPECT(e->steps.size() == FlightRecorder::kStepsKept && e->steps.back().step == 40 &&
                e->steps.front().step == 40 - static_cast<std::int64_t>(FlightRecorder::kStepsKept) + 1);
    COMM_EXPECT(e->steps.back().busy_s == 0.4 && e->steps.back().wait_s == 0.001 && e->steps.back().stall_s == 0.002 &&
                e->steps.back().queued_s == 0.003);
    return Status::Ok();
  });
  EXPECT_TRUE(first_error(st).ok()) << first_error(st).error().message();
}

TEST(TraceDump, MalformedDumpsAreOneLineErrorsNamingTheFile) {
  const Json good = with_groups(0, "step 1").call(0, "world", 0, "completed").j;
  auto err = [](const std::string& text) {
    Result<RankDump> d = parse_flight_dump(text, "/d/herd_flight_j_rank0.json");
    EXPECT_FALSE(d.ok()) << text;
    return d.ok() ? std::string() : d.error().message();
  };
  auto with = [&](const std::function<void(Json&)>& f) {
    Json j = good;
    f(j);
    return j.dump();
  };
  for (const std::string& msg :
       {err("{"), err("[]"), err(""), err(with([](Json& j) { j.erase("entries"); })),
        err(with([](Json& j) { j["rank"] = -3; })), err(with([](Json& j) { j["rank"] = "zero"; })),
        err(with([](Json& j) { j["entries"][0]["state"] = "lost"; })),
        err(with([](Json& j) { j["entries"][0]["op"] = 7; })),
        err(with([](Json& j) { j["entries"][0]["count"] = -1; })),
        err(with([](Json& j) { j["groups"][0]["members"] = "0,1"; })),
        err(with([](Json& j) { j["groups"][0]["members"][1] = 1e30; })), err("{\"rank\": 1e400, \"entries\": []}"),
        err(with([](Json& j) { j["steps"] = "fast"; })), err(with([](Json& j) {
          j["steps"] = Json::array({Json{{"step", 1}, {"busy_s", -1.0}, {"wait_s", 0.0}}});
        })),
        err(with([](Json& j) {
          j["steps"] = Json::array({Json{{"step", 1}, {"wait_s", 0.0}}});
        }))}) {
    EXPECT_NE(msg.find("/d/herd_flight_j_rank0.json"), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
  EXPECT_NE(err(with([](Json& j) { j["entries"][0]["state"] = "lost"; })).find("entries[0].state"), std::string::npos);
}

// Dumps that carry step times: rank 2 of a TP2 x DP2 job (no pp group: one stage) is 1.6x slower than
// the others, who wait in their collectives; the report names it as the trainer would, and nobody else.
TEST(TraceDump, StepTimesInTheDumpsNameTheStraggler) {
  std::vector<RankDump> dumps;
  for (int r = 0; r < 4; ++r) {
    RankDump d;
    d.rank = r;
    d.host = "node";
    d.host += std::to_string(r);
    d.activity = "step 31";
    for (int step = 1; step <= 30; ++step) {
      const double busy = (r == 2 ? 0.032 : 0.020) + 0.0005 * ((step * 7 + r) % 5);
      d.steps.push_back({step, busy, r == 2 ? 0.001 : 0.013});
    }
    dumps.push_back(std::move(d));
  }
  TraceReport rep = analyze_dumps(dumps, "j");
  EXPECT_TRUE(rep.culprit_ranks.empty());
  EXPECT_EQ(rep.straggler_steps, kStragglerWindow);
  ASSERT_EQ(rep.stragglers.size(), 1u);
  EXPECT_EQ(rep.stragglers[0].rank, 2);
  EXPECT_EQ(rep.stragglers[0].host, "node2");
  EXPECT_NEAR(rep.stragglers[0].slowdown, 1.6, 0.1);
  EXPECT_EQ(rep.stragglers[0].waited_on_by, (std::vector<int>{0, 1, 3}));
  EXPECT_EQ(rep.ranks[2].last_step, 30);  // the last step the dump's step times record
  // Without step times nothing can be said either way.
  for (RankDump& d : dumps) d.steps.clear();
  rep = analyze_dumps(dumps, "j");
  EXPECT_EQ(rep.straggler_steps, 0);
  EXPECT_TRUE(rep.stragglers.empty());
}

TEST_F(TraceLocal, JobsInADirectory) {
  // No dumps: an error naming the directory.
  Result<JobDumps> none = read_job_dumps(dir_.string(), "");
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.error().message().find(dir_.string()), std::string::npos);
  EXPECT_FALSE(read_job_dumps((dir_ / "nope").string(), "").ok());
  auto write = [&](const std::string& name, const std::string& text) { std::ofstream(dir_ / name) << text; };
  write("herd_flight_old_job_rank0.json", with_groups(0, "step 1").j.dump());
  write("herd_flight_old_job_rank1.json", with_groups(1, "step 1").j.dump());
  fs::last_write_time(dir_ / "herd_flight_old_job_rank0.json",
                      fs::file_time_type::clock::now() - std::chrono::hours(2));
  fs::last_write_time(dir_ / "herd_flight_old_job_rank1.json",
                      fs::file_time_type::clock::now() - std::chrono::hours(2));
  write("herd_flight_new_rank0.json", with_groups(0, "step 5").j.dump());
  write("herd_flight_new_rank0.json.tmp123", "garbage");
  Result<JobDumps> newest = read_job_dumps(dir_.string(), "");
  ASSERT_TRUE(newest.ok()) << newest.error().message();
  EXPECT_EQ(newest->job, "new");
  EXPECT_EQ(newest->ranks.size(), 1u);
  EXPECT_EQ(newest->other_jobs, std::vector<std::string>({"old_job"}));
  Result<JobDumps> old = read_job_dumps(dir_.string(), "old_job");
  ASSERT_TRUE(old.ok()) << old.error().message();
  EXPECT_EQ(old->ranks.size(), 2u);
  Result<JobDumps> unknown = read_job_dumps(dir_.string(), "other");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.error().message().find("jobs there: new, old_job"), std::string::npos) << unknown.error().message();
  // A dump whose content is another rank's, and a damaged one: left out, with a warning naming the file.
  write("herd_flight_new_rank1.json", with_groups(2, "step 5").j.dump());
  Result<JobDumps> renamed = read_job_dumps(dir_.string(), "new");
  ASSERT_TRUE(renamed.ok()) << renamed.error().message();
  EXPECT_EQ(renamed->ranks.size(), 1u);
  ASSERT_EQ(renamed->warnings.size(), 1u);
  EXPECT_NE(renamed->warnings[0].find("herd_flight_new_rank1.json"), std::string::npos);
  write("herd_flight_new_rank1.json", "");
  Result<JobDumps> empty = read_job_dumps(dir_.string(), "new");
  ASSERT_TRUE(empty.ok()) << empty.error().message();
  ASSERT_EQ(empty->warnings.size(), 1u);
  EXPECT_NE(empty->warnings[0].find("herd_flight_new_rank1.json"), std::string::npos);
  // When no dump of the job can be read, the first one's error.
  write("herd_flight_new_rank0.json", "{");
  Result<JobDumps> none_readable = read_job_dumps(dir_.string(), "new");
  ASSERT_FALSE(none_readable.ok());
  EXPECT_NE(none_readable.error().message().find("herd_flight_new_rank0.json"), std::string::npos);
}

// A FIFO named as a dump is passed over (opening it would wait for a writer forever), and one truncated
// dump of four is left out with a warning naming it while the other three are analyzed.
TEST_F(TraceLocal, AFifoIsPassedOverAndATruncatedDumpIsLeftOutWithAWarning) {
  for (int r = 0; r < 4; ++r) {
    std::string text = with_groups(r, "step 3").call(0, "world", 0, "completed").j.dump();
    if (r == 2) text.resize(text.size() / 2);  // a rank killed while writing
    std::ofstream(dir_ / ("herd_flight_j_rank" + std::to_string(r) + ".json")) << text;
  }
  ASSERT_EQ(::mkfifo((dir_ / "herd_flight_j_rank4.json").c_str(), 0644), 0);
  ASSERT_EQ(::mkfifo((dir_ / "herd_flight_fifo_rank0.json").c_str(), 0644), 0);
  Result<JobDumps> d = read_job_dumps(dir_.string(), "");
  ASSERT_TRUE(d.ok()) << d.error().message();
  EXPECT_EQ(d->job, "j");
  EXPECT_TRUE(d->other_jobs.empty());
  ASSERT_EQ(d->ranks.size(), 3u);
  EXPECT_EQ(d->ranks[2].rank, 3);
  ASSERT_EQ(d->warnings.size(), 1u);
  EXPECT_NE(d->warnings[0].find((dir_ / "herd_flight_j_rank2.json").string()), std::string::npos) << d->warnings[0];
  EXPECT_EQ(d->warnings[0].find('\n'), std::string::npos);
}

// Two jobs' dumps: the default is the job with the latest write time, whichever sorts first by name.
TEST_F(TraceLocal, TheDefaultJobIsTheOneWithTheNewestDump) {
  const fs::file_time_type t0 = fs::file_time_type::clock::now() - std::chrono::hours(24);
  for (const bool older_first : {true, false}) {
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    const std::string older = older_first ? "a_older" : "z_older", newer = older_first ? "b_newer" : "y_newer";
    for (const auto& [job, age] : {std::pair{older, 0}, std::pair{newer, 1}}) {
      for (int r = 0; r < 2; ++r) {
        const fs::path f = dir_ / ("herd_flight_" + job + "_rank" + std::to_string(r) + ".json");
        std::ofstream(f) << with_groups(r, "step " + std::to_string(1 + age)).j.dump();
        fs::last_write_time(f, t0 + std::chrono::minutes(10 * age + r));
      }
    }
    Result<JobDumps> d = read_job_dumps(dir_.string(), "");
    ASSERT_TRUE(d.ok()) << d.error().message();
    EXPECT_EQ(d->job, newer) << "older job sorts first: " << older_first;
    EXPECT_EQ(d->other_jobs, std::vector<std::string>({older}));
    ASSERT_EQ(d->ranks.size(), 2u);
    EXPECT_EQ(d->ranks[0].activity, "step 2");
  }
}

}  // namespace
}  // namespace herd::comm
