#include "herd/topology/cluster.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace herd::topology {

Status validate(const Cluster& c) {
  const Accelerator& a = c.accelerator;
  HERD_RETURN_IF_ERROR(require_positive(a.peak_tflops_bf16, "accelerator.peak_tflops.bf16"));
  HERD_RETURN_IF_ERROR(require_positive(a.memory_gib, "accelerator.memory_gib"));
  HERD_RETURN_IF_ERROR(require_positive(a.memory_bw_gb_per_s, "accelerator.memory_bw_gb_per_s"));
  if (a.peak_tflops_fp8 < 0)
    return make_error("accelerator.peak_tflops.fp8: must be 0 (none) or positive, got ", a.peak_tflops_fp8);
  if (a.peak_tflops_fp32 < 0)
    return make_error("accelerator.peak_tflops.fp32: must be 0 (none) or positive, got ", a.peak_tflops_fp32);
  const std::pair<const char*, double> fractions[] = {{"matmul_efficiency", a.matmul_efficiency},
                                                      {"attention_fwd_efficiency", a.attention_fwd_efficiency},
                                                      {"attention_bwd_efficiency", a.attention_bwd_efficiency},
                                                      {"memory_bw_efficiency", a.memory_bw_efficiency}};
  for (const auto& [name, f] : fractions) {
    if (!(f > 0 && f <= 1)) return make_error("accelerator.", name, ": must be in (0, 1], got ", f);
  }
  for (const auto& [name, f] :
       {std::pair<const char*, double>{"eager_attention_fwd_efficiency", a.eager_attention_fwd_efficiency},
        {"eager_attention_bwd_efficiency", a.eager_attention_bwd_efficiency}}) {
    if (!(f >= 0 && f <= 1)) return make_error("accelerator.", name, ": must be in [0, 1] (0 = as fused), got ", f);
  }
  if (!(a.optimizer_bw_efficiency >= 0 && a.optimizer_bw_efficiency <= 1)) {
    return make_error("accelerator.optimizer_bw_efficiency: must be in [0, 1] (0 = as memory_bw_efficiency), got ",
                      a.optimizer_bw_efficiency);
  }
  if (!(a.matmul_efficiency_fp8 >= 0 && a.matmul_efficiency_fp8 <= 1)) {
    return make_error("accelerator.matmul_efficiency_fp8: must be in [0, 1] (0 = as matmul_efficiency), got ",
                      a.matmul_efficiency_fp8);
  }
  for (const auto& [name, f] : {std::pair<const char*, double>{"matmul_efficiency", a.bf16_matmul_efficiency},
                                {"attention_fwd_efficiency", a.bf16_attention_fwd_efficiency},
                                {"attention_bwd_efficiency", a.bf16_attention_bwd_efficiency},
                                {"memory_bw_efficiency", a.bf16_memory_bw_efficiency}}) {
    if (!(f >= 0 && f <= 1)) {
      return make_error("accelerator.bf16.", name, ": must be in [0, 1] (0 = as the fp32 one), got ", f);
    }
  }
  if (a.sm_count < 0) return make_error("accelerator.sm_count: must be 0 (not modelled) or positive, got ", a.sm_count);
  if (!(a.speed_variation >= 0 && a.speed_variation < 0.5)) {
    return make_error("accelerator.speed_variation: must be in [0, 0.5), got ", a.speed_variation);
  }
  if (a.kernel_overhead_us < 0)
    return make_error("accelerator.kernel_overhead_us: must not be negative, got ", a.kernel_overhead_us);
  if (a.host_cores < 0)
    return make_error("accelerator.host_cores: must be 0 (dedicated) or positive, got ", a.host_cores);
  if (!(a.thread_scaling > 0 && a.thread_scaling <= 1)) {
    return make_error("accelerator.thread_scaling: must be in (0, 1], got ", a.thread_scaling);
  }
  if (!(a.multi_rank_efficiency > 0 && a.multi_rank_efficiency <= 1)) {
    return make_error("accelerator.multi_rank_efficiency: must be in (0, 1], got ", a.multi_rank_efficiency);
  }
  if (!(a.background_jobs >= 0) || !std::isfinite(a.background_jobs)) {
    return make_error("accelerator.background_jobs: must not be negative, got ", a.background_jobs);
  }
  if (!(c.storage_bw_gb_per_s >= 0) || !std::isfinite(c.storage_bw_gb_per_s)) {
    return make_error("storage_bw_gb_per_s: must be 0 (not given) or a positive aggregate bandwidth in GB/s, got ",
                      c.storage_bw_gb_per_s);
  }
  if (c.tiers.empty()) return make_error("tiers: the cluster needs at least one network tier");
  if (c.gpus_per_node < 0 || c.gpus_per_node > c.max_accelerators()) {
    return make_error("gpus_per_node: must be 0 (not given) or accelerators per node, at most the cluster's ",
                      c.max_accelerators(), ", got ", c.gpus_per_node);
  }
  std::int64_t prev = 1;
  for (std::size_t i = 0; i < c.tiers.size(); ++i) {
    const Tier& t = c.tiers[i];
    const std::string f = "tiers[" + std::to_string(i) + "]";
    HERD_RETURN_IF_ERROR(require_positive(t.size, f + ".size"));
    HERD_RETURN_IF_ERROR(require_positive(t.bw_gb_per_s, f + ".bw_gb_per_s"));
    if (!(t.latency_us >= 0) || !std::isfinite(t.latency_us)) {
      return make_error(f, ".latency_us: must not be negative, got ", t.latency_us);
    }
    if (!(t.efficiency > 0 && t.efficiency <= 1))
      return make_error(f, ".efficiency: must be in (0, 1], got ", t.efficiency);
    if (!(t.oversubscription >= 1)) {
      return make_error(f, ".oversubscription: must be at least 1 (1 = full bisection), got ", t.oversubscription);
    }
    if (t.size <= prev && i > 0) {
      return make_error(f, ".size (", t.size, ") must exceed the previous tier's (", prev,
                        "): tiers go from innermost to outermost and sizes are cumulative");
    }
    if (t.size % prev != 0) {
      return make_error(f, ".size (", t.size, ") must be a multiple of the previous tier's (", prev, ")");
    }
    if (!t.torus.empty()) {
      std::int64_t prod = 1;
      for (std::int64_t d : t.torus) {
        if (d < 1) return make_error(f, ".torus: axis lengths must be positive, got ", d);
        prod *= d;
      }
      if (prod * prev != t.size) {
        return make_error(f, ".torus: axes multiply to ", prod, " units of ", prev, " accelerators = ", prod * prev,
                          ", but size is ", t.size);
      }
    }
    prev = t.size;
  }
  return Status::Ok();
}

namespace {

Result<Tier> tier_from_json(const Json& j, const std::string& path) {
  if (!j.is_object()) return make_error(path, ": expected an object, got ", json_preview(j));
  Tier t;
  HERD_ASSIGN_OR_RETURN(t.name, json_string(j, path, "name"));
  HERD_ASSIGN_OR_RETURN(t.size, json_int(j, path, "size"));
  HERD_ASSIGN_OR_RETURN(t.bw_gb_per_s, json_number(j, path, "bw_gb_per_s"));
  HERD_ASSIGN_OR_RETURN(t.latency_us, json_number(j, path, "latency_us"));
  HERD_ASSIGN_OR_RETURN(t.efficiency, json_number_or(j, path, "efficiency", t.efficiency));
  HERD_ASSIGN_OR_RETURN(t.oversubscription, json_number_or(j, path, "oversubscription", 1.0));
  if (j.contains("torus") && !j["torus"].is_null()) {
    const Json& a = j["torus"];
    if (!a.is_array())
      return make_error(field_path(path, "torus"), ": expected a list of axis lengths, got ", json_preview(a));
    for (std::size_t i = 0; i < a.size(); ++i) {
      HERD_ASSIGN_OR_RETURN(std::int64_t d,
                            json_int(Json{{"v", a[i]}}, field_path(path, "torus[" + std::to_string(i) + "]"), "v"));
      t.torus.push_back(d);
    }
  }
  return t;
}

}  // namespace

Accelerator at_precision(const Accelerator& a, bool bf16) {
  if (!bf16) return a;
  Accelerator b = a;
  auto use = [](double& field, double override_value) {
    if (override_value > 0) field = override_value;
  };
  use(b.matmul_efficiency, a.bf16_matmul_efficiency);
  use(b.attention_fwd_efficiency, a.bf16_attention_fwd_efficiency);
  use(b.attention_bwd_efficiency, a.bf16_attention_bwd_efficiency);
  use(b.memory_bw_efficiency, a.bf16_memory_bw_efficiency);
  return b;
}

Result<Cluster> cluster_from_json(const Json& j) {
  if (!j.is_object()) return make_error("cluster: expected a JSON object, got ", json_preview(j));
  Cluster c;
  HERD_ASSIGN_OR_RETURN(c.name, json_string(j, "", "name"));
  if (!j.contains("accelerator") || !j["accelerator"].is_object()) {
    return make_error(
        "accelerator: missing or not an object; expected {\"name\", \"peak_tflops\", \"memory_gib\", ...}");
  }
  const Json& a = j["accelerator"];
  Accelerator& acc = c.accelerator;
  HERD_ASSIGN_OR_RETURN(acc.name, json_string(a, "accelerator", "name"));
  if (!a.contains("peak_tflops") || !a["peak_tflops"].is_object()) {
    return make_error(
        "accelerator.peak_tflops: missing or not an object; expected {\"bf16\": ..., \"fp8\": ..., \"fp32\": ...}");
  }
  const Json& p = a["peak_tflops"];
  HERD_ASSIGN_OR_RETURN(acc.peak_tflops_bf16, json_number(p, "accelerator.peak_tflops", "bf16"));
  HERD_ASSIGN_OR_RETURN(acc.peak_tflops_fp8, json_number_or(p, "accelerator.peak_tflops", "fp8", 0.0));
  HERD_ASSIGN_OR_RETURN(acc.peak_tflops_fp32, json_number_or(p, "accelerator.peak_tflops", "fp32", 0.0));
  HERD_ASSIGN_OR_RETURN(acc.memory_gib, json_number(a, "accelerator", "memory_gib"));
  HERD_ASSIGN_OR_RETURN(acc.memory_bw_gb_per_s, json_number(a, "accelerator", "memory_bw_gb_per_s"));
  HERD_ASSIGN_OR_RETURN(acc.matmul_efficiency,
                        json_number_or(a, "accelerator", "matmul_efficiency", acc.matmul_efficiency));
  HERD_ASSIGN_OR_RETURN(acc.matmul_efficiency_fp8, json_number_or(a, "accelerator", "matmul_efficiency_fp8", 0.0));
  HERD_ASSIGN_OR_RETURN(acc.attention_fwd_efficiency,
                        json_number_or(a, "accelerator", "attention_fwd_efficiency", acc.attention_fwd_efficiency));
  HERD_ASSIGN_OR_RETURN(acc.attention_bwd_efficiency,
                        json_number_or(a, "accelerator", "attention_bwd_efficiency", acc.attention_bwd_efficiency));
  HERD_ASSIGN_OR_RETURN(acc.memory_bw_efficiency,
                        json_number_or(a, "accelerator", "memory_bw_efficiency", acc.memory_bw_efficiency));
  HERD_ASSIGN_OR_RETURN(acc.optimizer_bw_efficiency, json_number_or(a, "accelerator", "optimizer_bw_efficiency", 0.0));
  HERD_ASSIGN_OR_RETURN(acc.eager_attention_fwd_efficiency,
                        json_number_or(a, "accelerator", "eager_attention_fwd_efficiency", 0.0));
  HERD_ASSIGN_OR_RETURN(acc.eager_attention_bwd_efficiency,
                        json_number_or(a, "accelerator", "eager_attention_bwd_efficiency", 0.0));
  HERD_ASSIGN_OR_RETURN(acc.sm_count, json_int_or(a, "accelerator", "sm_count", 0));
  HERD_ASSIGN_OR_RETURN(acc.kernel_overhead_us, json_number_or(a, "accelerator", "kernel_overhead_us", 0.0));
  HERD_ASSIGN_OR_RETURN(acc.speed_variation, json_number_or(a, "accelerator", "speed_variation", acc.speed_variation));
  HERD_ASSIGN_OR_RETURN(acc.host_cores, json_int_or(a, "accelerator", "host_cores", 0));
  HERD_ASSIGN_OR_RETURN(acc.thread_scaling, json_number_or(a, "accelerator", "thread_scaling", acc.thread_scaling));
  HERD_ASSIGN_OR_RETURN(acc.multi_rank_efficiency,
                        json_number_or(a, "accelerator", "multi_rank_efficiency", acc.multi_rank_efficiency));
  HERD_ASSIGN_OR_RETURN(acc.background_jobs, json_number_or(a, "accelerator", "background_jobs", 0.0));
  if (a.contains("bf16")) {
    if (!a["bf16"].is_object()) {
      return make_error("accelerator.bf16: expected an object {\"matmul_efficiency\", ...}, got ",
                        json_preview(a["bf16"]));
    }
    const Json& b = a["bf16"];
    HERD_ASSIGN_OR_RETURN(acc.bf16_matmul_efficiency, json_number_or(b, "accelerator.bf16", "matmul_efficiency", 0.0));
    HERD_ASSIGN_OR_RETURN(acc.bf16_attention_fwd_efficiency,
                          json_number_or(b, "accelerator.bf16", "attention_fwd_efficiency", 0.0));
    HERD_ASSIGN_OR_RETURN(acc.bf16_attention_bwd_efficiency,
                          json_number_or(b, "accelerator.bf16", "attention_bwd_efficiency", 0.0));
    HERD_ASSIGN_OR_RETURN(acc.bf16_memory_bw_efficiency,
                          json_number_or(b, "accelerator.bf16", "memory_bw_efficiency", 0.0));
  }
  if (!j.contains("tiers") || !j["tiers"].is_array()) {
    return make_error(
        "tiers: missing or not a list; expected [{\"name\", \"size\", \"bw_gb_per_s\", \"latency_us\"}, ...]");
  }
  for (std::size_t i = 0; i < j["tiers"].size(); ++i) {
    HERD_ASSIGN_OR_RETURN(Tier t, tier_from_json(j["tiers"][i], "tiers[" + std::to_string(i) + "]"));
    c.tiers.push_back(std::move(t));
  }
  HERD_ASSIGN_OR_RETURN(c.storage_bw_gb_per_s, json_number_or(j, "", "storage_bw_gb_per_s", 0.0));
  HERD_ASSIGN_OR_RETURN(c.gpus_per_node, json_int_or(j, "", "gpus_per_node", 0));
  HERD_RETURN_IF_ERROR(validate(c));
  return c;
}

Result<Cluster> load_cluster(const std::string& path) {
  HERD_ASSIGN_OR_RETURN(Json j, read_json_file(path));
  Result<Cluster> c = cluster_from_json(j);
  if (!c.ok()) return c.error().with_context(path);
  return c;
}

Json cluster_to_json(const Cluster& c) {
  const Accelerator& a = c.accelerator;
  Json j;
  j["name"] = c.name;
  j["accelerator"] = {
      {"name", a.name},
      {"peak_tflops", {{"bf16", a.peak_tflops_bf16}, {"fp8", a.peak_tflops_fp8}, {"fp32", a.peak_tflops_fp32}}},
      {"memory_gib", a.memory_gib},
      {"memory_bw_gb_per_s", a.memory_bw_gb_per_s},
      {"matmul_efficiency", a.matmul_efficiency},
      {"attention_fwd_efficiency", a.attention_fwd_efficiency},
      {"attention_bwd_efficiency", a.attention_bwd_efficiency},
      {"memory_bw_efficiency", a.memory_bw_efficiency},
      {"sm_count", a.sm_count},
      {"kernel_overhead_us", a.kernel_overhead_us},
      {"speed_variation", a.speed_variation}};
  if (a.matmul_efficiency_fp8 > 0) j["accelerator"]["matmul_efficiency_fp8"] = a.matmul_efficiency_fp8;
  if (a.optimizer_bw_efficiency > 0) j["accelerator"]["optimizer_bw_efficiency"] = a.optimizer_bw_efficiency;
  if (a.eager_attention_fwd_efficiency > 0 || a.eager_attention_bwd_efficiency > 0) {
    j["accelerator"]["eager_attention_fwd_efficiency"] = a.eager_attention_fwd_efficiency;
    j["accelerator"]["eager_attention_bwd_efficiency"] = a.eager_attention_bwd_efficiency;
  }
  if (a.host_cores > 0) {
    j["accelerator"]["host_cores"] = a.host_cores;
    j["accelerator"]["thread_scaling"] = a.thread_scaling;
    j["accelerator"]["multi_rank_efficiency"] = a.multi_rank_efficiency;
    j["accelerator"]["background_jobs"] = a.background_jobs;
  }
  if (a.bf16_matmul_efficiency > 0 || a.bf16_attention_fwd_efficiency > 0 || a.bf16_attention_bwd_efficiency > 0 ||
      a.bf16_memory_bw_efficiency > 0) {
    j["accelerator"]["bf16"] = {{"matmul_efficiency", a.bf16_matmul_efficiency},
                                {"attention_fwd_efficiency", a.bf16_attention_fwd_efficiency},
                                {"attention_bwd_efficiency", a.bf16_attention_bwd_efficiency},
                                {"memory_bw_efficiency", a.bf16_memory_bw_efficiency}};
  }
  if (c.storage_bw_gb_per_s > 0) j["storage_bw_gb_per_s"] = c.storage_bw_gb_per_s;
  if (c.gpus_per_node > 0) j["gpus_per_node"] = c.gpus_per_node;
  j["tiers"] = Json::array();
  for (const Tier& t : c.tiers) {
    Json tj = {{"name", t.name},
               {"size", t.size},
               {"bw_gb_per_s", t.bw_gb_per_s},
               {"latency_us", t.latency_us},
               {"efficiency", t.efficiency},
               {"oversubscription", t.oversubscription}};
    if (!t.torus.empty()) tj["torus"] = t.torus;
    j["tiers"].push_back(tj);
  }
  return j;
}

namespace {

struct HostSplit {
  double threads = 1;  // per rank
  double slice = 1;    // share of a core each thread gets
};

HostSplit host_split(const Accelerator& a, std::int64_t ranks) {
  HostSplit h;
  const double cores = static_cast<double>(a.host_cores), n = static_cast<double>(ranks);
  h.threads = a.threads_per_rank > 0 ? static_cast<double>(a.threads_per_rank) : std::max(1.0, std::floor(cores / n));
  const double job = n * h.threads;
  h.slice = std::min(job, cores / (1.0 + a.background_jobs)) / job;
  return h;
}

}  // namespace

double host_core_share(const Accelerator& a, std::int64_t ranks) {
  if (a.host_cores <= 0 || ranks <= 0) return 1.0;
  const HostSplit h = host_split(a, ranks);
  return h.slice * (1.0 + (h.threads - 1.0) * a.thread_scaling);
}

double host_oversubscription(const Accelerator& a, std::int64_t ranks) {
  if (a.host_cores <= 0 || ranks <= 0) return 1.0;
  return 1.0 / host_split(a, ranks).slice;
}

const Cluster& host_share(const Cluster& c, std::int64_t ranks, Cluster* storage) {
  if (c.accelerator.host_cores <= 0) return c;
  // Compute runs on the rank's cores at the runtime's multi-rank efficiency; the communicator's
  // copies get the cores alone. Per-op overheads and rendezvous stretch when ranks time-slice them.
  const double cores = host_core_share(c.accelerator, ranks);
  const double s = cores * (ranks > 1 ? c.accelerator.multi_rank_efficiency : 1.0);
  const double over = host_oversubscription(c.accelerator, ranks);
  *storage = c;
  Accelerator& a = storage->accelerator;
  a.peak_tflops_bf16 *= s;
  a.peak_tflops_fp8 *= s;
  a.peak_tflops_fp32 *= s;
  a.memory_bw_gb_per_s *= s;
  a.kernel_overhead_us *= over;
  a.host_cores = 0;  // applied once
  for (Tier& t : storage->tiers) {
    t.bw_gb_per_s *= std::min(1.0, cores);
    t.latency_us *= over;
  }
  return *storage;
}

Result<Cluster> resolve_cluster(const std::string& name_or_path) {
  for (const std::string& n : cluster_preset_names()) {
    if (n == name_or_path) return cluster_preset(n);
  }
  if (name_or_path.find('/') == std::string::npos && name_or_path.find(".json") == std::string::npos) {
    std::string names;
    for (const auto& n : cluster_preset_names()) names += (names.empty() ? "" : ", ") + n;
    return make_error("unknown cluster '", name_or_path, "'; use one of ", names, " or a path to a cluster JSON file");
  }
  return load_cluster(name_or_path);
}

namespace {

// Bandwidth of a switched tier i for a group whose hops leave domains of the previous tier (size P).
// A group with k members in each node (the innermost domain, `node` accelerators with one NIC each,
// as tier bandwidths are per accelerator) runs k parallel rings (NCCL channels), each leaving the node
// through its own member's NIC, so its ring gets k NICs' rate: NCCL's ring bus bandwidth over 8-GPU
// nodes is 8 x one NIC's (nccl-tests: 365.8 GB/s over 4 HGX H100 nodes of 8 x 400 Gbps,
// NVIDIA/nccl-tests#309; 46-48 GB/s per NDR NIC, NVIDIA/nccl-tests#290). Every group of the dimension
// runs at once: min(s, P) groups leave each domain of size P, k channels each, sharing its uplinks of
// P x bw / oversubscription: each channel gets bw x min(1, P / (oversubscription x min(s, P) x k)).
double switched_bw(const Tier& t, std::int64_t prev_size, std::int64_t stride, std::int64_t node, std::int64_t n) {
  const std::int64_t k = prev_size > 1 ? std::clamp<std::int64_t>(node / std::max<std::int64_t>(1, stride), 1, n) : 1;
  const double channels = static_cast<double>(std::min(stride, prev_size) * k);
  const double share = static_cast<double>(prev_size) / (t.oversubscription * channels);
  return static_cast<double>(k) * t.bw_gb_per_s * 1e9 * t.efficiency * std::min(1.0, share);
}

// A torus tier: sum over the axes the group spans of the per-group bandwidth along that axis.
// An axis the group covers evenly all the way round uses both ring directions (2 links); a segment
// that does not wrap uses one; members spaced g apart share each link with g - 1 other groups.
void torus_link(const Tier& t, std::int64_t prev_size, std::int64_t stride, std::int64_t n, double* bw,
                std::int64_t* steps) {
  const std::size_t axes = t.torus.size();
  std::vector<std::vector<char>> seen(axes);
  for (std::size_t a = 0; a < axes; ++a) seen[a].assign(static_cast<std::size_t>(t.torus[a]), 0);
  for (std::int64_t k = 0; k < n; ++k) {
    std::int64_t unit = (k * stride / prev_size) % (t.size / prev_size);
    for (std::size_t a = 0; a < axes; ++a) {
      seen[a][static_cast<std::size_t>(unit % t.torus[a])] = 1;
      unit /= t.torus[a];
    }
  }
  *bw = 0;
  *steps = 0;
  for (std::size_t a = 0; a < axes; ++a) {
    std::int64_t extent = 0, lo = -1, hi = -1;
    for (std::int64_t i = 0; i < t.torus[a]; ++i) {
      if (!seen[a][static_cast<std::size_t>(i)]) continue;
      ++extent;
      if (lo < 0) lo = i;
      hi = i;
    }
    if (extent <= 1) continue;
    const bool wraps = t.torus[a] % extent == 0 && (hi - lo) == (extent - 1) * (t.torus[a] / extent);
    const double gap = wraps ? static_cast<double>(t.torus[a] / extent)
                             : static_cast<double>(hi - lo) / static_cast<double>(extent - 1);
    *bw += (wraps ? 2.0 : 1.0) * t.bw_gb_per_s * 1e9 * t.efficiency / std::max(1.0, gap);
    *steps += extent - 1;
  }
}

}  // namespace

Result<GroupLink> link_for_group(const Cluster& c, std::int64_t stride, std::int64_t n) {
  HERD_CHECK(stride >= 1 && n >= 1);
  GroupLink g;
  if (n == 1) {
    g.tier_name = "local";
    g.bw_bytes_per_s = std::numeric_limits<double>::infinity();
    return g;
  }
  const std::int64_t span = stride * n;
  if (span > c.max_accelerators()) {
    return make_error("a group of ", n, " ranks at stride ", stride, " spans ", span, " accelerators, but cluster ",
                      c.name, " has ", c.max_accelerators());
  }
  g.bw_bytes_per_s = std::numeric_limits<double>::infinity();
  g.ring_steps = n - 1;
  std::int64_t prev = 1;
  for (std::size_t i = 0; i < c.tiers.size(); ++i) {
    const Tier& t = c.tiers[i];
    if (span <= prev) break;  // the group fits inside one domain of the previous tier
    double bw = 0;
    if (t.torus.empty()) {
      bw = switched_bw(t, prev, stride, c.tiers.front().size, n);
    } else {
      std::int64_t steps = 0;
      torus_link(t, prev, stride, std::min(n, t.size / std::max<std::int64_t>(1, std::min(stride, t.size))), &bw,
                 &steps);
      g.ring_steps = std::max<std::int64_t>(steps, 1);
      if (span > t.size) g.ring_steps = n - 1;
      if (bw <= 0) bw = t.bw_gb_per_s * 1e9 * t.efficiency;
    }
    g.bw_bytes_per_s = std::min(g.bw_bytes_per_s, bw);
    g.latency_s = std::max(g.latency_s, t.latency_us * 1e-6);
    g.tier = static_cast<int>(i);
    g.tier_name = t.name;
    prev = t.size;
  }
  return g;
}

}  // namespace herd::topology
