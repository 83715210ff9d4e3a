// `herd model` as a user runs it: JSON fields other tools read, tables, and one-line errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include "cli/cli_runner.h"
#include "herd/core/json.h"

namespace herd {
namespace {

using testing::count_lines;
using testing::run_herd;

const std::string kFixtures = std::string(HERD_SOURCE_DIR) + "/tests/fixtures/hf/";

TEST(ModelCli, JsonHasTheContractFields) {
  auto r = run_herd("model llama3-8b --json");
  ASSERT_EQ(r.status, 0) << r.err;
  Json j = Json::parse(r.out);
  for (const char* k :
       {"name", "params_total", "params_embedding", "params_output", "params_per_layer", "n_layers", "hidden",
        "ffn_hidden", "n_heads", "n_kv_heads", "head_dim", "vocab", "flops_per_token_train"}) {
    EXPECT_TRUE(j.contains(k)) << k;
  }
  EXPECT_EQ(j["params_total"], 8030261248);
  EXPECT_EQ(j["n_kv_heads"], 8);
  // Default sequence 8192: 6N + 6 L h (T + 1).
  EXPECT_DOUBLE_EQ(j["flops_per_token_train"].get<double>(), 6.0 * 8030261248 + 6.0 * 32 * 4096 * 8193);
}

TEST(ModelCli, PresetsAndHfConfigsAgree) {
  const std::pair<const char*, std::int64_t> cases[] = {
      {"llama3-70b", 70553706496}, {"llama3-405b", 405853388800}, {"llama3.1-70b.json", 70553706496}};
  for (auto [arg, total] : cases) {
    std::string a = arg;
    if (a.find(".json") != std::string::npos) a = kFixtures + a;
    auto r = run_herd("model " + a + " --json --seq-len 4096");
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(Json::parse(r.out)["params_total"], total) << arg;
  }
}

TEST(ModelCli, TablesMentionEveryPart) {
  auto r = run_herd("model llama3-70b");
  ASSERT_EQ(r.status, 0);
  for (const char* s : {"70,553,706,496", "mlp gate", "attention k", "output head", "Model FLOPs per training token",
                        "Activations kept per layer"}) {
    EXPECT_NE(r.out.find(s), std::string::npos) << s;
  }
}

TEST(ModelCli, HelpDocumentsOptions) {
  auto r = run_herd("model --help");
  EXPECT_EQ(r.status, 0);
  EXPECT_NE(r.out.find("--seq-len"), std::string::npos);
  EXPECT_NE(r.out.find("--json"), std::string::npos);
  auto top = run_herd("--help");
  EXPECT_EQ(top.status, 0);
  EXPECT_NE(top.out.find("model"), std::string::npos);
}

TEST(ModelCli, BadInputIsOneLineAndNonZero) {
  struct Case {
    std::string args;
    int status;
    std::string needle;
  };
  const Case cases[] = {
      {"model llama3-8b --bogus", 2, "--bogus"},
      {"model llama3-8b --seq-len abc", 2, "--seq-len"},
      {"model llama3-8b --seq-len -5", 2, "--seq-len"},
      {"model", 2, "model"},
      {"model llama9-1t", 1, "unknown model preset 'llama9-1t'"},
      {"frobnicate", 2, "frobnicate"},
  };
  for (const Case& c : cases) {
    auto r = run_herd(c.args);
    EXPECT_EQ(r.status, c.status) << c.args << "\n" << r.err;
    EXPECT_EQ(count_lines(r.err), 1) << c.args << "\n" << r.err;
    EXPECT_NE(r.err.find(c.needle), std::string::npos) << c.args << "\n" << r.err;
    EXPECT_EQ(r.err.find("terminate"), std::string::npos) << c.args;
  }
}

TEST(ModelCli, MalformedConfigFileNamesFileAndField) {
  const std::string path = ::testing::TempDir() + "herd_bad_config_" + std::to_string(::getpid()) + ".json";
  {
    std::ofstream f(path);
    f << R"({"hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
             "num_attention_heads": 32, "num_key_value_heads": 6, "vocab_size": 128256,
             "max_position_embeddings": 8192})";
  }
  auto r = run_herd("model " + path);
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(count_lines(r.err), 1);
  EXPECT_NE(r.err.find(path + ": num_key_value_heads (6) must divide num_attention_heads (32)"), std::string::npos)
      << r.err;
  {
    std::ofstream f(path);
    f << "{ not json";
  }
  r = run_herd("model " + path);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("not valid JSON"), std::string::npos) << r.err;
  std::remove(path.c_str());
}

}  // namespace
}  // namespace herd
