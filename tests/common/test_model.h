// The small Llama 3 shapes the tests build, in one place: a test names only the sizes it cares about
// (designated initializers) and gets a model::LlamaConfig, so a new config field is set here once.
#pragma once

#include <cstdint>

#include "herd/model/config.h"

namespace herd::test_models {

struct TestShape {
  const char* name = "test";
  std::int64_t hidden = 32;
  std::int64_t ffn = 64;
  std::int64_t layers = 2;
  std::int64_t heads = 4;
  std::int64_t kv_heads = 2;
  std::int64_t head_dim = 8;
  std::int64_t vocab = 64;
  std::int64_t max_seq = 64;
  double rope_theta = 10000;
};

inline model::LlamaConfig test_llama(const TestShape& s) {
  model::LlamaConfig c;
  c.name = s.name;
  c.hidden = s.hidden;
  c.ffn_hidden = s.ffn;
  c.n_layers = s.layers;
  c.n_heads = s.heads;
  c.n_kv_heads = s.kv_heads;
  c.head_dim = s.head_dim;
  c.vocab = s.vocab;
  c.max_seq_len = s.max_seq;
  c.rope_theta = s.rope_theta;
  return c;
}

// A model whose training step is milliseconds of compute on this machine, not microseconds of
// scheduling noise: what the straggler tests time (tests/train/straggler_test.cpp, tests/cli/trace_cli_test.cpp).
inline model::LlamaConfig straggler_llama() {
  return test_llama({.name = "straggler",
                     .hidden = 64,
                     .ffn = 128,
                     .layers = 2,
                     .heads = 8,
                     .kv_heads = 4,
                     .head_dim = 8,
                     .max_seq = 64});
}

}  // namespace herd::test_models
