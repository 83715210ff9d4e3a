// Layer assignment: L transformer layers over PP*V virtual stages.
//
// Llama 3 (section 3.3.2) balances the pipeline by taking one transformer layer from the first and the
// last stage: the first then holds the embedding where a layer would be, the last the output projection
// and loss. We count L + 2 "slots" (the layers, the embedding, the output) and deal them out as evenly
// as possible: every stage gets q = (L+2) / (PP*V) slots, and the r = (L+2) % (PP*V) extra slots go to
// middle stages spread evenly over the pipeline (a Bresenham walk), so that the ends stay the lightest.
// Llama 3 405B: 126 layers, PP = 16, V = 8 -> 128 slots, one per stage: the first and last stages hold
// no transformer layer at all. Only when r = PP*V - 1 is there no room in the middle, and the first
// stage (the cheap embedding) takes the last extra slot.
#include <algorithm>
#include <numeric>

#include "herd/schedule/schedule.h"

namespace herd::schedule {

namespace {

// Sizes of `count` parts of `total` items: total / count each, and the remainder spread evenly.
std::vector<int> spread(int total, int count) {
  std::vector<int> sizes(count, total / count);
  const int extra = total % count;
  for (int j = 0; j < count; ++j) {
    // Part j gets an extra item when the running share floor((j+1)*extra/count) steps up.
    if ((j + 1) * extra / count > j * extra / count) ++sizes[j];
  }
  return sizes;
}

}  // namespace

Result<LayerAssignment> assign_layers(int n_layers, int pp, int v, bool lighter_ends) {
  if (pp < 1) return make_error("pp (", pp, ") must be at least 1");
  if (v < 1) return make_error("v (", v, ") must be at least 1 (virtual stages per pipeline rank)");
  if (n_layers < 1) return make_error("layers (", n_layers, ") must be at least 1");
  const int stages = pp * v;
  std::vector<int> counts;
  if (!lighter_ends || stages == 1) {
    if (n_layers < stages) {
      return make_error("layers (", n_layers, ") cannot fill pp*v = ", pp, "*", v, " = ", stages,
                        " virtual stages with at least one layer each; lower pp or v or use more layers");
    }
    counts = spread(n_layers, stages);
  } else {
    const int slots = n_layers + 2;
    // Middle stages need at least one layer; the ends may hold none (Llama 3 405B does exactly that).
    if (slots < stages) {
      return make_error("layers (", n_layers, ") cannot fill pp*v = ", pp, "*", v, " = ", stages,
                        " virtual stages with lighter ends: need at least ", stages - 2,
                        " layers; lower pp or v or use more layers");
    }
    const int q = slots / stages, extra = slots % stages;
    counts.assign(stages, q);
    counts.front() = q - 1;
    counts.back() = q - 1;
    const int middle_extra = std::min(extra, stages - 2);
    if (stages > 2) {
      const std::vector<int> mid = spread((stages - 2) * q + middle_extra, stages - 2);
      for (int j = 0; j < stages - 2; ++j) counts[j + 1] = mid[j];
    }
    if (extra > stages - 2) ++counts.front();
  }
  HERD_CHECK(std::accumulate(counts.begin(), counts.end(), 0) == n_layers, "layer split lost layers");
  LayerAssignment out;
  out.layers.resize(stages);
  int next = 0;
  for (int s = 0; s < stages; ++s) {
    for (int i = 0; i < counts[s]; ++i) out.layers[s].push_back(next++);
  }
  return out;
}

}  // namespace herd::schedule
