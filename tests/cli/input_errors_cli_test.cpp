// Inputs that once crashed herd or gave a wrong answer without a word, run through the binary as a user
// would: each is now one line on stderr naming the option, field or file, with a non-zero exit status,
// and the SVG writers produce well-formed XML whatever the text. Every case failed before its fix
// (the comment on each says how).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "cli/cli_runner.h"
#include "cli/xml_check.h"
#include "herd/core/json.h"

namespace herd {
namespace {

namespace fs = std::filesystem;
using testing::CliResult;
using testing::count_lines;
using testing::run_herd;

fs::path scratch(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("herd_input_errors_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

void expect_error(const CliResult& r, int status, const std::string& want, const std::string& args) {
  EXPECT_EQ(r.status, status) << args << "\n" << r.err;
  EXPECT_NE(r.err.find(want), std::string::npos) << args << "\n" << r.err;
  EXPECT_EQ(count_lines(r.err), 1) << args << "\n" << r.err;
}

// A Hugging Face config.json of a small Llama with `field` replaced by the raw JSON text `value`.
std::string small_config(const std::string& field, const std::string& value) {
  Json j = {{"hidden_size", 256},
            {"intermediate_size", 512},
            {"num_hidden_layers", 2},
            {"num_attention_heads", 4},
            {"num_key_value_heads", 2},
            {"vocab_size", 1000},
            {"max_position_embeddings", 2048}};
  std::string text = j.dump();
  const std::string key = "\"" + field + "\":";
  const std::size_t at = text.find(key);
  const std::size_t end = text.find_first_of(",}", at);
  return text.substr(0, at + key.size()) + value + text.substr(end);
}

// Before: CLI11's Range let nan through (every comparison with nan is false), and options without a
// range took nan and inf as given.
TEST(InputErrors, FloatingPointOptionsRefuseNanInfAndOverflow) {
  const fs::path d = scratch("nan");
  const std::string est =
      "estimate --model llama3-8b --cluster dgx-h100 --gpus 8 --tp 8 --cp 1 --pp 1 --dp 1 "
      "--global-batch 8 --train-tokens 1e12 ";
  const std::pair<std::string, std::string> cases[] = {
      {"schedule --backward-factor nan", "--backward-factor"},
      {"schedule --backward-factor inf", "--backward-factor"},
      {"schedule --p2p-latency 1e400", "--p2p-latency"},
      {"schedule --output-cost NaN", "--output-cost"},
      {"data --input x.txt --output " + d.string() + " --val-fraction nan", "--val-fraction"},
      {"generate --checkpoint " + d.string() + " --temperature nan", "--temperature"},
      {"generate --checkpoint " + d.string() + " --top-p nan", "--top-p"},
      {est + "--assume-mfu nan", "--assume-mfu"},
      {"estimate --model llama3-8b --cluster dgx-h100 --gpus 8 --tp 8 --cp 1 --pp 1 --dp 1 --global-batch 8 "
       "--train-tokens inf",
       "--train-tokens"},
      {"calibrate --background-jobs nan", "--background-jobs"},
  };
  for (const auto& [args, option] : cases) {
    const CliResult r = run_herd(args);
    expect_error(r, 2, option + ": ", args);
    // The range's message where the option has one ("must be a number from 0 to 1, got 'nan'"), else
    // "must be a finite number, got 'inf'".
    EXPECT_NE(r.err.find("must be a "), std::string::npos) << args << "\n" << r.err;
  }
  fs::remove_all(d);
}

// Before: "Value 1.5 not in range 0.000000 to 1.000000", and for PositiveNumber a bound of 309 digits.
TEST(InputErrors, RangeErrorsAreShortAndNameTheOption) {
  const std::pair<std::string, std::string> cases[] = {
      {"generate --checkpoint x --top-p 1.5", "--top-p: must be a number from 0 to 1, got '1.5'"},
      {"generate --checkpoint x --temperature -1", "--temperature: must be a number from 0 to 100, got '-1'"},
      {"generate --checkpoint x --samples 0", "--samples: must be a positive integer, got '0'"},
      {"data --input x.txt --output o --val-fraction 0.7", "--val-fraction: must be a number from 0 to 0.5, got '0.7'"},
      {"plan --model llama3-8b --cluster dgx-h100 --gpus 8 --global-batch 8 --top 0",
       "--top: must be a positive integer, got '0'"},
      {"plan --model llama3-8b --cluster dgx-h100 --gpus 8 --global-batch 8 --zero 4",
       "--zero: must be an integer from 0 to 3, got '4'"},
      {"estimate --model llama3-8b --cluster dgx-h100 --gpus 8 --tp 0 --cp 1 --pp 1 --dp 1 --global-batch 8",
       "--tp: must be a positive integer, got '0'"},
      {"data train-tokenizer --input x --output y --vocab-size 10",
       "--vocab-size: must be an integer from 260 to "
       "1048576, got '10'"},
  };
  for (const auto& [args, want] : cases) {
    const CliResult r = run_herd(args);
    expect_error(r, 2, want, args);
    EXPECT_LT(r.err.size(), 200u) << r.err;
  }
}

// Before: abort (exit 134) on an internal check of the activation shape.
TEST(InputErrors, ModelWithAnOddSequenceLengthIsAnError) {
  expect_error(run_herd("model tiny --seq-len 3"), 1, "seq_len (3) is not divisible by 2", "model tiny --seq-len 3");
  EXPECT_EQ(run_herd("model tiny --seq-len 4").status, 0);
}

// Before: hidden_size 2^31 gave negative parameter counts, and the planner a plan that "fits".
TEST(InputErrors, AbsurdModelSizesAreRefusedNotOverflowed) {
  const fs::path d = scratch("sizes");
  const std::pair<std::string, std::string> cases[] = {
      {small_config("hidden_size", "2147483648"), "hidden_size: 2147483648 is beyond herd's limit"},
      {small_config("vocab_size", "4294967296"), "vocab_size: 4294967296 is beyond herd's limit"},
      {small_config("num_hidden_layers", "100000"), "num_hidden_layers: 100000 is beyond herd's limit"},
      {small_config("intermediate_size", "9223372036854775807"), "intermediate_size: 9223372036854775807 is beyond"},
      {small_config("num_hidden_layers", "18446744073709551615"), "num_hidden_layers: expected an integer below 2^63"},
  };
  const std::string path = (d / "config.json").string();
  for (const auto& [text, want] : cases) {
    std::ofstream(path) << text;
    expect_error(run_herd("model " + path + " --json"), 1, want, text);
    expect_error(run_herd("estimate --model " + path +
                          " --cluster dgx-h100 --gpus 8 --tp 1 --cp 1 --pp 1 --dp 8 --global-batch 8"),
                 1, want, text);
  }
  // Within every ceiling but too many parameters in all (2^24 x 2^24 per matrix, 2^16 layers).
  std::ofstream(path) << R"({"hidden_size": 16777216, "intermediate_size": 16777216, "num_hidden_layers": 65536,
                            "num_attention_heads": 64, "vocab_size": 1000, "max_position_embeddings": 2048})";
  expect_error(run_herd("model " + path), 1, "parameters, beyond herd's limit", "2^24 everywhere");
  // The largest real model still passes.
  EXPECT_EQ(run_herd("model llama3-405b --json").status, 0);
  fs::remove_all(d);
}

// Before: --microbatch-size 2147483647 --seq-len 2147483646 printed negative activation bytes.
TEST(InputErrors, ActivationsBeyond64BitsAreRefused) {
  const std::string model = "model tiny --microbatch-size 2147483647 --seq-len 2147483646";
  expect_error(run_herd(model), 1, "is too large", model);
  const std::string est =
      "estimate --model llama3-8b --cluster dgx-h100 --gpus 8 --tp 1 --cp 1 --pp 1 --dp 8 "
      "--microbatch-size 2147483647 --seq-len 2147483646 --global-batch 17179869176";
  const CliResult r = run_herd(est);
  EXPECT_EQ(r.status, 1) << r.out << r.err;
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
  EXPECT_EQ(r.out.find("-"), std::string::npos) << r.out;  // no negative figure printed
}

// Before: nlohmann's out_of_range escaped parse_json_text and aborted (exit 134).
TEST(InputErrors, AnOverflowingNumberInAnyJsonInputNamesTheFile) {
  const fs::path d = scratch("1e400");
  const std::string model = (d / "config.json").string();
  std::ofstream(model) << small_config("hidden_size", "1e400");
  expect_error(run_herd("model " + model), 1, model + ": number overflow", "model config");

  const std::string cluster = (d / "cluster.json").string();
  std::ofstream(cluster) << R"({"name": "x", "accelerator": {"name": "g", "peak_tflops": {"bf16": 1e400},
      "memory_gib": 80, "memory_bw_gb_per_s": 2000}, "tiers": [{"name": "nv", "size": 8, "bw_gb_per_s": 100,
      "latency_us": 2}]})";
  expect_error(run_herd("estimate --model llama3-8b --cluster " + cluster +
                        " --gpus 8 --tp 8 --cp 1 --pp 1 --dp 1 --global-batch 8"),
               1, cluster + ": number overflow", "cluster");

  const std::string metrics = (d / "metrics.jsonl").string();
  std::ofstream(metrics) << "{\"step\": 1, \"loss\": 3}\n{\"step\": 2, \"loss\": 1e400}\n";
  expect_error(run_herd("plot " + metrics + " --svg " + (d / "p.svg").string()), 1, metrics + ":2: number overflow",
               "metrics");

  const std::string config = (d / "train.json").string();
  std::ofstream(config) << R"({"optim": {"lr": 1e400}})";
  expect_error(run_herd("train " + config + " --print-config"), 1, config + ": number overflow", "train config");
  // An override is read as the field's type and refused as such.
  expect_error(run_herd("train --optim.lr=1e400 --print-config"), 1, "--optim.lr: expected a number", "override");
  fs::remove_all(d);
}

// Before: `--title 'R&D'` was written raw into the SVG, which XML parsers then refused.
// Every JSON input, nested 100,000 arrays deep, and an override of that depth or length: one line naming
// the source, never a stack overflow in the parser or in the error message's echo of the value.
TEST(InputErrors, DeeplyNestedJsonIsOneLineNamingTheSource) {
  const fs::path d = scratch("deep");
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  std::ofstream(d / "deep.json") << deep;
  std::ofstream(d / "field.json") << small_config("hidden_size", deep);
  const std::string f = (d / "deep.json").string();
  for (const std::string& args : {"train " + f, "model " + f, "model " + (d / "field.json").string(),
                                  "estimate --model llama3-8b --cluster " + f +
                                      " --gpus 8 --tp 8 --cp 1 --pp 1 --dp 1 --seq-len 8192 --global-batch 8",
                                  "data verify " + d.string()}) {
    const CliResult r = run_herd(args);
    EXPECT_TRUE(r.status == 1 || r.status == 2) << args << "\nstatus " << r.status << "\n" << r.err;
    EXPECT_NE(r.err.find(": error: "), std::string::npos) << args << "\n" << r.err.substr(0, 300);
    EXPECT_EQ(count_lines(r.err), 1) << args << "\n" << r.err.substr(0, 300);
    EXPECT_LE(r.err.size(), 400u) << args << "\n" << r.err.substr(0, 300);
  }
  std::ofstream(d / "meta.json") << deep;
  const CliResult v = run_herd("data verify " + d.string());
  EXPECT_NE(v.err.find("nested more than 64 arrays or objects deep"), std::string::npos) << v.err.substr(0, 300);
  // An override's value is echoed cut to 40 characters (30,000 levels: a command line holds 128 KiB).
  const std::string arg = "'--optim.lr=" + std::string(30000, '[') + std::string(30000, ']') + "'";
  const CliResult o = run_herd("train " + std::string(HERD_SOURCE_DIR) + "/configs/demo.json --print-config " + arg);
  EXPECT_EQ(o.status, 1) << o.err.substr(0, 300);
  EXPECT_EQ(count_lines(o.err), 1) << o.err.substr(0, 300);
  EXPECT_NE(o.err.find("--optim.lr: expected a number, got \"[[[["), std::string::npos) << o.err.substr(0, 300);
  EXPECT_LE(o.err.size(), 200u) << o.err.substr(0, 300);
  fs::remove_all(d);
}

// Files written to a full device (/dev/full: the open succeeds, every write fails with ENOSPC): one line
// naming the option, the file and the reason, never a silently empty file and exit 0.
TEST(InputErrors, WritesToAFullDeviceAreOneLineNamingTheFile) {
  const fs::path d = scratch("full");
  std::ofstream(d / "m.jsonl") << R"({"step": 1, "loss": 2.5, "lr": 0.001})"
                               << "\n"
                               << R"({"step": 2, "loss": 2.25, "lr": 0.001})"
                               << "\n";
  const std::string est =
      "estimate --model llama3-8b --cluster dgx-h100 --gpus 8 --tp 8 --cp 1 --pp 1 --dp 1 --seq-len 8192 "
      "--global-batch 8 ";
  const std::pair<std::string, std::string> cases[] = {
      // The planner's reports: a write that fails is an error, not exit 0 and an empty file.
      {est + "--svg /dev/full", "herd estimate: error: /dev/full: cannot write (No space left on device)"},
      {est + "--html /dev/full", "herd estimate: error: /dev/full: cannot write (No space left on device)"},
      {"schedule --pp 2 --v 1 --microbatches 4 --n 2 --svg /dev/full",
       "--svg: /dev/full: cannot write (No space left on device)"},
      {"plot " + (d / "m.jsonl").string() + " --svg /dev/full",
       "--svg: /dev/full: cannot write (No space left on device)"},
  };
  for (const auto& [args, want] : cases) expect_error(run_herd(args), 1, want, args);
  fs::remove_all(d);
}

// herd generate keeps the prompt and the tokens it generates within the model's context (128 for the
// tiny Hugging Face fixture): a prompt that fills it is an error, --max-tokens beyond the room left is
// cut with a note on stderr, an empty prompt says so. The ids printed as they are sampled are the
// --json output's.
TEST(InputErrors, GenerateKeepsThePromptAndItsTokensWithinTheContext) {
  const std::string tiny = "generate --checkpoint " + std::string(HERD_SOURCE_DIR) + "/tests/train/golden/hf/tiny ";
  auto ids = [](int n) {
    std::string s;
    for (int i = 0; i < n; ++i) {
      if (i > 0) s += ',';
      s += std::to_string(3 + i % 50);
    }
    return s;
  };
  for (int n : {128, 300}) {
    const CliResult r = run_herd(tiny + "--greedy --prompt-ids " + ids(n));
    expect_error(r, 1,
                 "--prompt-ids: " + std::to_string(n) +
                     " tokens fill the model's context of 128 tokens and leave none to generate; give at most 127",
                 "n=" + std::to_string(n));
  }
  const CliResult cut = run_herd(tiny + "--greedy --json --max-tokens 100 --prompt-ids " + ids(120));
  ASSERT_EQ(cut.status, 0) << cut.err;
  EXPECT_NE(cut.err.find("herd generate: note: --max-tokens 100 cut to 8: the prompt's 120 tokens"), std::string::npos)
      << cut.err;
  EXPECT_EQ(Json::parse(cut.out)["ids"].size(), 8u) << cut.out;
  expect_error(run_herd(tiny + "--prompt ''"), 1, "--prompt: the prompt is empty; give the text to continue", "");
  expect_error(run_herd(tiny + "--prompt-ids ''"), 1, "--prompt-ids: the prompt is empty", "");
  expect_error(run_herd(tiny), 1, "--prompt or --prompt-ids: give exactly one of them", "");
  const CliResult js = run_herd(tiny + "--greedy --json --max-tokens 6 --prompt-ids 1,5,9");
  const CliResult streamed = run_herd(tiny + "--greedy --max-tokens 6 --prompt-ids 1,5,9");
  ASSERT_EQ(js.status, 0) << js.err;
  ASSERT_EQ(streamed.status, 0) << streamed.err;
  std::string want;
  const Json got = Json::parse(js.out);
  for (const Json& id : got["ids"]) {
    if (!want.empty()) want += ',';
    want += std::to_string(id.get<int>());
  }
  EXPECT_EQ(streamed.out, want + "\n");
}

TEST(InputErrors, SvgTextIsEscapedEverywhere) {
  const fs::path d = scratch("svg");
  const std::string metrics = (d / "m.jsonl").string();
  {
    std::ofstream m(metrics);
    for (int s = 1; s <= 10; ++s) m << "{\"step\": " << s << ", \"loss\": " << 5.0 - 0.1 * s << "}\n";
  }
  const std::string svg = (d / "p.svg").string();
  CliResult r = run_herd("plot " + metrics + " --svg " + svg + " --title 'R&D <loss> \"a\" & b'");
  ASSERT_EQ(r.status, 0) << r.err;
  std::string text = testing::slurp(svg);
  EXPECT_EQ(testing::xml_wellformed_error(text), "") << text.substr(0, 400);
  EXPECT_NE(text.find("R&amp;D &lt;loss&gt; &quot;a&quot; &amp; b"), std::string::npos);

  // The planner's report carries the model's name, here a directory name with markup in it.
  const fs::path named = d / "R&D <7b>";
  fs::create_directories(named);
  std::ofstream(named / "config.json") << small_config("hidden_size", "256");
  const std::string report = (d / "report.svg").string();
  r = run_herd("estimate --model '" + named.string() +
               "' --cluster dgx-h100 --gpus 8 --tp 1 --cp 1 --pp 2 --dp 4 "
               "--global-batch 32 --seq-len 2048 --svg " +
               report);
  ASSERT_EQ(r.status, 0) << r.err;
  text = testing::slurp(report);
  EXPECT_EQ(testing::xml_wellformed_error(text), "") << text.substr(0, 400);
  EXPECT_NE(text.find("R&amp;D &lt;7b&gt;"), std::string::npos) << text.substr(0, 400);
  fs::remove_all(d);
}

// The checker itself refuses what the escaping must prevent (so the tests above can fail).
TEST(InputErrors, TheXmlCheckRefusesRawMarkupInText) {
  EXPECT_EQ(testing::xml_wellformed_error("<svg><text>R&amp;D</text></svg>"), "");
  EXPECT_NE(testing::xml_wellformed_error("<svg><text>R&D</text></svg>"), "");
  EXPECT_NE(testing::xml_wellformed_error("<svg><text>a < b</text></svg>"), "");
  EXPECT_NE(testing::xml_wellformed_error("<svg><text x=\"1\">t</svg>"), "");
  EXPECT_NE(testing::xml_wellformed_error("<svg a=\"<\"/>"), "");
}

// Before: a stray metrics value at 1e20 made the tick loop `y += step` stand still (herd plot hung).
TEST(InputErrors, PlotTicksEndForLossesBeyondTheSpacingOfDoubles) {
  const fs::path d = scratch("ticks");
  const std::string metrics = (d / "m.jsonl").string();
  std::ofstream(metrics) << "{\"step\": 1, \"loss\": 1e20}\n{\"step\": 2, \"loss\": 100000000000000016384}\n";
  const CliResult r = run_herd("plot " + metrics + " --svg " + (d / "p.svg").string());
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(testing::xml_wellformed_error(testing::slurp((d / "p.svg").string())), "");
  fs::remove_all(d);
}

}  // namespace
}  // namespace herd
