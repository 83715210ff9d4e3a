// Cluster presets, JSON parsing with errors that name the field, and the link a group crosses.
#include "herd/topology/cluster.h"

#include <gtest/gtest.h>

namespace herd::topology {
namespace {

Json llama3_json() { return cluster_to_json(*cluster_preset("llama3-h100")); }

TEST(Cluster, PresetsValidateAndRoundTrip) {
  for (const std::string& name : cluster_preset_names()) {
    Result<Cluster> c = cluster_preset(name);
    ASSERT_TRUE(c.ok()) << name;
    Result<Cluster> back = cluster_from_json(cluster_to_json(*c));
    ASSERT_TRUE(back.ok()) << back.error().message();
    EXPECT_EQ(back->tiers.size(), c->tiers.size());
    EXPECT_EQ(back->max_accelerators(), c->max_accelerators());
    EXPECT_EQ(back->storage_bw_gb_per_s, c->storage_bw_gb_per_s);
    EXPECT_EQ(back->node_size(), c->node_size());
  }
  EXPECT_EQ(cluster_preset("llama3-h100")->storage_bw_gb_per_s, 2000);  // Tectonic, 2 TB/s sustained
  // A node: an 8-GPU server (the NVLink tier), a 4-chip TPU host.
  EXPECT_EQ(cluster_preset("llama3-h100")->node_size(), 8);
  EXPECT_EQ(cluster_preset("dgx-a100")->node_size(), 8);
  EXPECT_EQ(cluster_preset("tpu-v5p")->node_size(), 4);
  Json given = llama3_json();
  given["gpus_per_node"] = 16;
  EXPECT_EQ(cluster_from_json(given)->node_size(), 16);
  EXPECT_EQ(cluster_preset("llama3-h100")->max_accelerators(), 24576);
  EXPECT_EQ(cluster_preset("tpu-v5p")->max_accelerators(), 8960);
}

TEST(Cluster, MalformedFieldsAreNamed) {
  struct Case {
    const char* pointer;
    Json value;
    const char* expect;
  };
  const Case cases[] = {
      {"/tiers/1/bw_gb_per_s", "fast", "tiers[1].bw_gb_per_s: expected a number"},
      {"/tiers/2/size", -5, "tiers[2].size"},
      {"/tiers/0/latency_us", -1.0, "tiers[0].latency_us"},
      {"/accelerator/memory_gib", "eighty", "accelerator.memory_gib"},
      {"/accelerator/peak_tflops/bf16", -989, "accelerator.peak_tflops.bf16"},
      {"/tiers/3/efficiency", 1.5, "tiers[3].efficiency"},
      {"/storage_bw_gb_per_s", -1.0, "storage_bw_gb_per_s: must be 0"},
      {"/storage_bw_gb_per_s", "fast", "storage_bw_gb_per_s: expected a number"},
      {"/gpus_per_node", -8, "gpus_per_node: must be 0"},
      {"/gpus_per_node", 1 << 20, "gpus_per_node: must be 0"},
      {"/gpus_per_node", "eight", "gpus_per_node: expected"},
      {"/accelerator/bf16", 0.5, "accelerator.bf16: expected an object"},
      {"/accelerator/bf16/matmul_efficiency", 1.5, "accelerator.bf16.matmul_efficiency: must be in [0, 1]"},
      {"/accelerator/bf16/attention_bwd_efficiency", "fast", "accelerator.bf16.attention_bwd_efficiency: expected"},
  };
  for (const Case& c : cases) {
    Json j = llama3_json();
    j[Json::json_pointer(c.pointer)] = c.value;
    Result<Cluster> r = cluster_from_json(j);
    ASSERT_FALSE(r.ok()) << c.pointer;
    EXPECT_NE(r.error().message().find(c.expect), std::string::npos) << r.error().message();
  }
  Json missing = llama3_json();
  missing["tiers"][1].erase("latency_us");
  Result<Cluster> r = cluster_from_json(missing);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("tiers[1].latency_us: missing"), std::string::npos) << r.error().message();
  Json unordered = llama3_json();
  unordered["tiers"][1]["size"] = 4;
  EXPECT_FALSE(cluster_from_json(unordered).ok());
}

// A host calibrated in both precisions: the bf16 efficiencies round-trip and replace the fp32 ones for a
// bf16 run only; absent (every GPU preset) a bf16 run keeps the accelerator's own.
TEST(Cluster, Bf16EfficienciesRoundTripAndApplyToBf16RunsOnly) {
  Cluster c = *cluster_preset("local-cpu");
  c.accelerator.bf16_matmul_efficiency = 0.7;
  c.accelerator.bf16_attention_fwd_efficiency = 0.2;
  c.accelerator.bf16_attention_bwd_efficiency = 0.25;
  c.accelerator.bf16_memory_bw_efficiency = 0.6;
  Result<Cluster> back = cluster_from_json(cluster_to_json(c));
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ(back->accelerator.bf16_attention_bwd_efficiency, 0.25);
  const Accelerator b = at_precision(back->accelerator, true), f = at_precision(back->accelerator, false);
  EXPECT_EQ(b.matmul_efficiency, 0.7);
  EXPECT_EQ(b.attention_fwd_efficiency, 0.2);
  EXPECT_EQ(b.memory_bw_efficiency, 0.6);
  EXPECT_EQ(f.matmul_efficiency, c.accelerator.matmul_efficiency);
  const Accelerator h100 = cluster_preset("llama3-h100")->accelerator;
  EXPECT_EQ(at_precision(h100, true).attention_fwd_efficiency, h100.attention_fwd_efficiency);
  EXPECT_FALSE(cluster_to_json(*cluster_preset("llama3-h100"))["accelerator"].contains("bf16"));
}

TEST(Cluster, GroupsCrossTheTierTheirSpanNeeds) {
  const Cluster c = *cluster_preset("llama3-h100");
  EXPECT_EQ(link_for_group(c, 1, 8)->tier_name, "nvlink");      // TP 8 inside a server
  EXPECT_EQ(link_for_group(c, 8, 2)->tier_name, "rack");        // two servers of one rack
  EXPECT_EQ(link_for_group(c, 8, 16)->tier_name, "pod");        // PP 16 at stride 8: 128 GPUs
  EXPECT_EQ(link_for_group(c, 128, 64)->tier_name, "cluster");  // DP 64 at stride 128: 8,192 GPUs
  EXPECT_EQ(link_for_group(c, 1, 1)->tier, -1);
  EXPECT_DOUBLE_EQ(link_for_group(c, 1, 8)->bw_bytes_per_s, 450e9 * 0.75);
  // Oversubscription: a ring at stride 128 leaves each pod through 128 flows, far below 3,072 / 7;
  // at stride 2,048 the pod's uplinks are shared by 2,048 flows and each gets 3072 / (7 * 2048).
  EXPECT_DOUBLE_EQ(link_for_group(c, 128, 64)->bw_bytes_per_s, 50e9 * 0.85);
  EXPECT_NEAR(link_for_group(c, 2048, 8)->bw_bytes_per_s, 50e9 * 0.85 * 3072.0 / (7 * 2048), 1);
  EXPECT_FALSE(link_for_group(c, 8192, 4).ok());  // spans 32,768 > 24,576
}

TEST(Cluster, TorusBandwidthGrowsWithTheAxesSpanned) {
  const Cluster c = *cluster_preset("tpu-v5p");
  const double link = 90e9 * 0.8;  // the scaling book's one-way v5p link, at the tier's efficiency
  EXPECT_NEAR(link_for_group(c, 1, 16)->bw_bytes_per_s, 2 * link, 1);    // full X ring: both directions
  EXPECT_NEAR(link_for_group(c, 1, 4)->bw_bytes_per_s, link, 1);         // a segment of X: one direction
  EXPECT_NEAR(link_for_group(c, 1, 320)->bw_bytes_per_s, 4 * link, 1);   // full X and Y rings
  EXPECT_NEAR(link_for_group(c, 1, 8960)->bw_bytes_per_s, 6 * link, 1);  // the whole pod: 6 links
  EXPECT_EQ(link_for_group(c, 1, 8960)->ring_steps, 15 + 19 + 27);
}

}  // namespace
}  // namespace herd::topology
