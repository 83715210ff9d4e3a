// Rendering tests: the ASCII timeline of a hand-timed GPipe schedule, column scaling, and the SVG's
// structure (one box per compute action, rank labels, legend, axis).
#include "herd/schedule/render.h"

#include <gtest/gtest.h>

#include <string>

namespace herd::schedule {
namespace {

struct Drawn {
  Schedule sched;
  SimResult sim;
};

Drawn draw(ScheduleKind k, int pp, int v, int m, int n) {
  ScheduleSpec spec;
  spec.kind = k;
  spec.pp = pp;
  spec.v = v;
  spec.microbatches = m;
  spec.n = n;
  Schedule s = *generate(spec);
  SimResult r = *simulate(s, CostModel::uniform(s.spec));
  return {std::move(s), std::move(r)};
}

std::size_t count(const std::string& hay, const std::string& needle) {
  std::size_t c = 0;
  for (std::size_t p = hay.find(needle); p != std::string::npos; p = hay.find(needle, p + 1)) ++c;
  return c;
}

TEST(Render, AsciiGPipeByHand) {
  // Rank 0: F0 [0,1] F1 [1,2], B0 [5,7] B1 [7,9]; rank 1: F0 [1,2] F1 [2,3] B0 [3,5] B1 [5,7].
  const Drawn d = draw(ScheduleKind::kGPipe, 2, 1, 2, 1);
  const std::string want =
      "rank 0 F |01       |\n"
      "       B |     0011|\n"
      "rank 1 F | 01      |\n"
      "       B |   0011  |\n";
  EXPECT_EQ(render_ascii(d.sched, d.sim).substr(0, want.size()), want);
}

TEST(Render, AsciiScalesToWidth) {
  const Drawn d = draw(ScheduleKind::kFlexible, 4, 2, 40, 8);  // step 3 * (80 + 3) = 249 units
  const std::string a = render_ascii(d.sched, d.sim, 100);
  const std::string first = a.substr(0, a.find('\n'));
  EXPECT_LE(first.size(), 100u + 12);
  EXPECT_NE(a.find("one column = 2.5 time units"), std::string::npos) << a;
}

TEST(Render, SvgHasOneBoxPerComputeAction) {
  const Drawn d = draw(ScheduleKind::kFlexible, 4, 2, 10, 5);
  const std::string svg = render_svg(d.sched, d.sim);
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  // 2 * M * PP * V compute boxes, each with a hover title.
  EXPECT_EQ(count(svg, "<title>forward"), 80u);
  EXPECT_EQ(count(svg, "<title>backward"), 80u);
  for (int r = 0; r < 4; ++r) EXPECT_NE(svg.find(">rank " + std::to_string(r) + "<"), std::string::npos);
  EXPECT_NE(svg.find("idle (bubble)"), std::string::npos);
  EXPECT_NE(svg.find("bubble 13.0% of the step"), std::string::npos);  // 9 idle of 69
  EXPECT_EQ(count(svg, "<svg"), count(svg, "</svg>"));
  SvgOptions o;
  o.title = "custom";
  o.time_unit = "s";
  const std::string t = render_svg(d.sched, d.sim, o);
  EXPECT_NE(t.find(">custom<"), std::string::npos);
  EXPECT_NE(t.find("time (s)"), std::string::npos);
}

}  // namespace
}  // namespace herd::schedule
