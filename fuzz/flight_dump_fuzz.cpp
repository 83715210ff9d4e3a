// libFuzzer target: a flight-recorder dump as `herd trace` reads it, then the analysis and its three
// renderings (the dump's content drives table sizes and lookups there too).
#include "fuzz_util.h"
#include "herd/comm/trace_analysis.h"
#include "herd/comm/trace_report.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace herd;
  Result<comm::RankDump> dump = comm::parse_flight_dump(fuzz::as_text(data, size), "herd_flight_f_rank0.json");
  if (!dump.ok()) return 0;
  // The dump twice, the second as a neighbour rank, so that the cross-rank paths run as well.
  std::vector<comm::RankDump> dumps{*dump, *dump};
  dumps[1].rank = dump->rank + 1;
  const comm::TraceReport rep = comm::analyze_dumps(dumps, "f");
  (void)comm::trace_report_json(rep).dump();
  (void)comm::trace_report_text(rep);
  (void)comm::trace_timeline_svg(rep, dumps);
  return 0;
}
