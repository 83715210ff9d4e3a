// libFuzzer target: a cluster file (`herd estimate --cluster FILE`, `herd calibrate`'s output).
#include "fuzz_util.h"
#include "herd/topology/cluster.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace herd;
  const std::string path = fuzz::write_input("cluster.json", data, size);
  Result<topology::Cluster> c = topology::load_cluster(path);
  if (!c.ok()) return 0;
  (void)topology::cluster_to_json(*c).dump();
  return 0;
}
