// Hugging Face interop against transformers itself: the fixtures under golden/hf/ were saved by
// tools/hf_fixture.py with transformers' LlamaForCausalLM, with its logits, loss and greedy tokens on a
// fixed batch. herd must load them (one rank, TP2, TP2 x PP2), reproduce those outputs (logits within
// 1e-5 x (1 + |logit|)), convert them to checkpoints of any layout and back bit for bit, and start training from them.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <numeric>

#include "cli/cli_runner.h"
#include "herd/comm/local/local_world.h"
#include "herd/core/safetensors.h"
#include "herd/data/loader.h"
#include "herd/parallel/context.h"
#include "herd/train/checkpoint/checkpoint.h"
#include "herd/train/checkpoint/hf_checkpoint.h"
#include "herd/train/checkpoint/interop.h"
#include "herd/train/generate.h"
#include "herd/train/job/job.h"
#include "herd/train/step/trainer.h"
#include "train/dist_harness.h"
#include "train/parity_run_dir.h"

namespace herd::train {
namespace {

namespace fs = std::filesystem;

const std::string kGolden = std::string(HERD_SOURCE_DIR) + "/tests/train/golden/hf/";

struct Expected {
  Json j;
  std::vector<float> logits;  // (B, T, V)
  std::int64_t b = 0, t = 0, v = 0;
};

Expected expected(const std::string& name) {
  Expected e;
  std::ifstream in(kGolden + name + "/expected.json");
  e.j = Json::parse(in);
  e.b = e.j["logits_shape"][0], e.t = e.j["logits_shape"][1], e.v = e.j["logits_shape"][2];
  e.logits.resize(static_cast<std::size_t>(e.b * e.t * e.v));
  std::ifstream lb(kGolden + name + "/logits.bin", std::ios::binary);
  lb.read(reinterpret_cast<char*>(e.logits.data()), static_cast<std::streamsize>(e.logits.size() * 4));
  return e;
}

// The batch of expected.json as next-token micro-batches: `parts` micro-batches of B / parts sequences.
struct Batch {
  std::vector<std::int32_t> tokens, targets, pos, doc;
  std::vector<nn::MicroBatch> mbs(std::int64_t b, std::int64_t t, std::int64_t parts) const {
    std::vector<nn::MicroBatch> out;
    const std::int64_t rows = b / parts;
    for (std::int64_t p = 0; p < parts; ++p) {
      const std::size_t o = static_cast<std::size_t>(p * rows * t);
      out.push_back({rows, t, tokens.data() + o, targets.data() + o, pos.data() + o, doc.data() + o});
    }
    return out;
  }
};

Batch batch_of(const Expected& e) {
  Batch b;
  for (std::int64_t s = 0; s < e.b; ++s) {
    for (std::int64_t i = 0; i < e.t; ++i) {
      b.tokens.push_back(e.j["tokens"][s][i].get<std::int32_t>());
      b.targets.push_back(i + 1 < e.t ? e.j["tokens"][s][i + 1].get<std::int32_t>() : -1);
      b.pos.push_back(static_cast<std::int32_t>(i));
      b.doc.push_back(0);
    }
  }
  return b;
}

// The largest |herd - transformers| over every logit of the batch, from a single-rank model.
// The largest difference from transformers' logits, in units of fp32 agreement: |got - want| / (1 + |want|).
// Both sides sum in fp32 in their own order (herd's BLAS picks its kernels by CPU: AVX-512 here, another
// path on another machine), so the difference scales with the logit; the tied bf16 fixture's logits reach
// 27, where 1e-5 absolute is 6 ulps and this machine's AMD Zen 4 kernels landed 1.2e-5 away. A wrong
// weight or mask is off by orders of magnitude more.
double max_logit_diff(nn::LlamaModel<float>& model, const Expected& e) {
  const Batch b = batch_of(e);
  std::vector<float> got(e.logits.size());
  model.logits(b.mbs(e.b, e.t, 1)[0], got.data());
  double worst = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    worst = std::max(worst, std::fabs(double(got[i]) - e.logits[i]) / (1.0 + std::fabs(double(e.logits[i]))));
  }
  return worst;
}

TEST(HfInterop, OneRankReproducesTransformersLogitsAndGreedyTokens) {
  for (const std::string name : {"tiny", "tied_bf16"}) {
    SCOPED_TRACE(name);
    const Expected e = expected(name);
    Result<LoadedModel> lm = load_model(kGolden + name);
    ASSERT_TRUE(lm.ok()) << lm.error().message();
    EXPECT_LE(max_logit_diff(*lm->model, e), 1e-5);
    SampleOptions o;
    o.max_tokens = static_cast<std::int64_t>(e.j["greedy"].size());
    std::vector<std::int32_t> prompt = e.j["prompt"].get<std::vector<std::int32_t>>();
    std::vector<std::int32_t> out = generate(*lm->model, prompt, o);
    std::vector<std::int32_t> gen(out.begin() + static_cast<std::ptrdiff_t>(prompt.size()), out.end());
    EXPECT_EQ(gen, e.j["greedy"].get<std::vector<std::int32_t>>());
  }
}

// Loads the Hugging Face directory straight into the ranks of a layout (each rank its own byte ranges),
// evaluates the batch there, and gathers the weights; returns rank 0's loss sum and the gathered weights.
struct LayoutRun {
  double loss_sum = 0;
  std::int64_t tokens = 0;
  std::vector<std::pair<std::string, std::vector<float>>> weights;
};

LayoutRun run_layout(const std::string& name, std::int64_t tp, std::int64_t pp, std::int64_t cp = 1) {
  const Expected e = expected(name);
  Result<std::unique_ptr<HfModelDir>> hf = HfModelDir::open(kGolden + name);
  HERD_CHECK(hf.ok(), hf.error().message());
  const model::LlamaConfig m = (*hf)->config();
  TrainConfig cfg;
  cfg.parallel.tp = tp;
  cfg.parallel.pp = pp;
  cfg.parallel.cp = cp;
  cfg.train.global_batch = e.b;
  cfg.data.seq_len = e.t;
  const Batch b = batch_of(e);
  LayoutRun out;
  comm::LocalWorld lw(static_cast<int>(tp * pp * cp), comm::CommOptions{});
  const std::vector<Status> st = lw.run([&](comm::Communicator& w) -> Status {
    HERD_ASSIGN_OR_RETURN(topology::ParallelDims dims, topology::ParallelDims::make(tp, cp, pp, 1, w.size()));
    HERD_ASSIGN_OR_RETURN(std::unique_ptr<parallel::ParallelGroups> g, parallel::ParallelGroups::make(w, dims));
    const parallel::ParallelContext ctx = g->context(true, false);
    HERD_ASSIGN_OR_RETURN(std::unique_ptr<parallel::RankModel<float>> model, testing::rank_model<float>(ctx, m, cfg));
    model->init_weights(99);  // overwritten below
    std::vector<parallel::ShardPiece<float>> pieces = model->load_pieces();
    HERD_RETURN_IF_ERROR((*hf)->load_into<float>(pieces));
    model->after_load();
    // This rank's CP slice of the batch (chunks r and 2 cp - 1 - r of every sequence, data::slice_batch).
    data::Batch global;
    global.rows = e.b, global.seq_len = e.t, global.tokens = b.tokens, global.targets = b.targets;
    global.positions = b.pos;
    global.doc_ids.assign(b.doc.size(), 0);
    global.seq_index.assign(b.doc.size(), 0);
    HERD_ASSIGN_OR_RETURN(data::Batch local, data::slice_batch(global, dims, w.rank()));
    Batch mine{local.tokens, local.targets, local.positions,
               std::vector<std::int32_t>(local.doc_ids.begin(), local.doc_ids.end())};
    HERD_ASSIGN_OR_RETURN(kernels::CrossEntropyLoss loss, model->evaluate_step(mine.mbs(e.b, e.t / cp, pp)));
    double sums[2] = {loss.loss_sum, static_cast<double>(loss.count)};
    if (cp > 1) HERD_RETURN_IF_ERROR(ctx.cp->all_reduce<double>(sums, 2, comm::ReduceOp::kSum));
    loss.loss_sum = sums[0];
    loss.count = static_cast<std::int64_t>(sums[1]);
    HERD_ASSIGN_OR_RETURN(auto weights, model->gather_full_weights());
    if (w.rank() == 0) {
      out.loss_sum = loss.loss_sum;
      out.tokens = loss.count;
      out.weights = std::move(weights);
    }
    return Status::Ok();
  });
  const Status s = comm::first_error(st);
  HERD_CHECK(s.ok(), s.error().message());
  return out;
}

TEST(HfInterop, Tp2AndTp2xPp2ReproduceTransformersLossAndLogits) {
  for (const auto& [name, tp, pp, cp] : {std::tuple<std::string, int, int, int>{"tiny", 1, 1, 1},
                                         {"tiny", 2, 1, 1},
                                         {"tiny", 2, 2, 1},
                                         {"tied_bf16", 2, 2, 1},
                                         {"tiny", 2, 1, 2}}) {
    SCOPED_TRACE(::testing::Message() << name << " tp" << tp << " pp" << pp << " cp" << cp);
    const Expected e = expected(name);
    const LayoutRun r = run_layout(name, tp, pp, cp);
    EXPECT_EQ(r.tokens, e.j["loss_tokens"].get<std::int64_t>());
    // The layout's own forward: the mean next-token loss of transformers' logits, within 1e-5.
    EXPECT_NEAR(r.loss_sum / double(r.tokens), e.j["loss_sum"].get<double>() / double(r.tokens), 1e-5);
    // And what the layout holds is the model: its gathered weights give transformers' logits.
    nn::LlamaModel<float> single(HfModelDir::open(kGolden + name).value()->config(), model::Recompute::kNone, e.b, e.t);
    for (const auto& [w, v] : r.weights) std::copy(v.begin(), v.end(), single.params() + single.param(w).offset);
    EXPECT_LE(max_logit_diff(single, e), 1e-5);
  }
}

class HfDirs : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("herd_hf_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

// Every tensor of two safetensors directories, as fp32 values, by name.
std::map<std::string, std::vector<float>> tensors_of(const std::string& hf_dir) {
  std::map<std::string, std::vector<float>> out;
  for (const auto& f : fs::directory_iterator(hf_dir)) {
    if (f.path().extension() != ".safetensors") continue;
    auto sf = SafetensorsFile::open(f.path().string());
    HERD_CHECK(sf.ok(), sf.error().message());
    for (const SafetensorsEntry& e : (*sf)->entries()) {
      std::vector<float> v(static_cast<std::size_t>(e.numel()));
      (*sf)->read<float>(e, 0, e.numel(), v.data());
      out[e.name] = std::move(v);
    }
  }
  return out;
}

TEST_F(HfDirs, ConvertToAnyLayoutAndBackIsBitExact) {
  for (const auto& [name, tp, cp, pp, dp] : {std::tuple<std::string, int, int, int, int>{"tiny", 2, 1, 3, 2},
                                             {"tied_bf16", 2, 1, 2, 2},
                                             {"tiny", 2, 2, 1, 2},
                                             {"tiny", 1, 1, 1, 1}}) {
    SCOPED_TRACE(name + " " + std::to_string(tp) + "x" + std::to_string(cp) + "x" + std::to_string(pp) + "x" +
                 std::to_string(dp));
    const fs::path ck = dir_ / (name + "_ck" + std::to_string(tp) + std::to_string(cp) + std::to_string(pp) +
                                std::to_string(dp)),
                   back = dir_ / (name + "_back");
    fs::remove_all(back);
    const Status conv = convert_from_hf(kGolden + name, ck.string(), {tp, cp, pp, dp});
    ASSERT_TRUE(conv.ok()) << conv.error().message();
    Result<DistCheckpoint> c = open_checkpoint(ck.string());
    ASSERT_TRUE(c.ok()) << c.error().message();
    EXPECT_EQ(c->manifest["files"].size(), static_cast<std::size_t>(tp * cp * pp * dp));
    const DType dt = name == "tied_bf16" ? DType::kBF16 : DType::kF32;
    Status s = export_hf(ck.string(), back.string(), dt);
    ASSERT_TRUE(s.ok()) << s.error().message();
    const auto orig = tensors_of(kGolden + name), got = tensors_of(back.string());
    for (const auto& [t, v] : got) {
      // A tied model's head is written out as lm_head: the embedding's values.
      const std::string src = orig.count(t) ? t : "model.embed_tokens.weight";
      ASSERT_TRUE(orig.count(src)) << t;
      EXPECT_EQ(v, orig.at(src)) << t;
    }
    EXPECT_EQ(got.size(), orig.size() + (orig.count("lm_head.weight") ? 0 : 1));
    // The export is a model herd reads back with transformers' outputs.
    Result<LoadedModel> lm = load_model(back.string());
    ASSERT_TRUE(lm.ok()) << lm.error().message();
    EXPECT_LE(max_logit_diff(*lm->model, expected(name)), 1e-5);
  }
}

// A copy of a fixture to break.
fs::path copy_fixture(const fs::path& dir, const std::string& name, const std::string& as) {
  const fs::path d = dir / as;
  fs::remove_all(d);
  fs::copy(kGolden + name, d);
  for (const auto& f : fs::directory_iterator(d))
    fs::permissions(f.path(), fs::perms::owner_write, fs::perm_options::add);
  return d;
}

void edit_config(const fs::path& d, const std::function<void(Json&)>& edit) {
  Json j = Json::parse(std::ifstream((d / "config.json").string()));
  edit(j);
  std::ofstream((d / "config.json").string()) << j.dump(1);
}

TEST_F(HfDirs, BadDirectoriesAreOneLineErrorsAndWriteNothing) {
  auto refused = [&](const fs::path& src, std::initializer_list<std::string> parts) {
    const fs::path out = dir_ / "out";
    const Status s = convert_from_hf(src.string(), out.string(), {2, 1, 1, 1});
    ASSERT_FALSE(s.ok()) << src;
    const std::string& m = s.error().message();
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    for (const std::string& p : parts) EXPECT_NE(m.find(p), std::string::npos) << m;
    EXPECT_FALSE(fs::exists(out)) << m;
    EXPECT_FALSE(fs::exists(out.string() + ".tmp-convert")) << m;
  };
  {  // a missing tensor
    const fs::path d = copy_fixture(dir_, "tiny", "missing");
    auto orig = SafetensorsFile::open(kGolden + "tiny/model.safetensors").value();
    std::vector<SafetensorsOut> keep;
    std::vector<const SafetensorsEntry*> src;
    for (const SafetensorsEntry& e : orig->entries()) {
      if (e.name == "model.layers.1.mlp.up_proj.weight") continue;
      keep.push_back({e.name, e.dtype, e.shape});
      src.push_back(&e);
    }
    ASSERT_TRUE(write_safetensors((d / "model.safetensors").string(), keep, [&](std::size_t i, std::vector<double>& v) {
                  v.resize(static_cast<std::size_t>(src[i]->numel()));
                  orig->read<double>(*src[i], 0, src[i]->numel(), v.data());
                  return Status::Ok();
                }).ok());
    refused(d, {"model.safetensors", "'model.layers.1.mlp.up_proj.weight'", "missing"});
  }
  {  // a shape that config.json does not give
    const fs::path d = copy_fixture(dir_, "tiny", "shape");
    edit_config(d, [](Json& j) { j["intermediate_size"] = 80; });
    refused(d,
            {"model.safetensors", "'model.layers.0.mlp.gate_proj.weight'", "[96, 48]", "[80, 48]", "different models"});
  }
  {  // an unsupported dtype
    const fs::path d = copy_fixture(dir_, "tiny", "dtype");
    const std::string header =
        R"({"model.embed_tokens.weight":{"dtype":"I8","shape":[2048,48],"data_offsets":[0,98304]}})";
    std::ofstream out((d / "model.safetensors").string(), std::ios::binary | std::ios::trunc);
    for (int i = 0; i < 8; ++i) out.put(static_cast<char>(static_cast<std::uint64_t>(header.size()) >> (8 * i)));
    out << header << std::string(98304, '\0');
    out.close();
    refused(d, {"model.safetensors", "'model.embed_tokens.weight'", "dtype \"I8\" is not supported"});
  }
  {  // a truncated file
    const fs::path d = copy_fixture(dir_, "tiny", "truncated");
    fs::resize_file(d / "model.safetensors", fs::file_size(d / "model.safetensors") - 1000);
    refused(d, {"model.safetensors", "outside the data section", "truncated"});
  }
  {  // an index naming a shard that is not there
    const fs::path d = copy_fixture(dir_, "tied_bf16", "noshard");
    fs::remove(d / "model-00002-of-00002.safetensors");
    refused(d,
            {"model.safetensors.index.json", "'model-00002-of-00002.safetensors'", "missing", "download every shard"});
  }
  {  // configuration features herd's runtime does not run
    const fs::path d = copy_fixture(dir_, "tiny", "bias");
    edit_config(d, [](Json& j) { j["attention_bias"] = true; });
    refused(d, {"config.json", "attention_bias true is not supported"});
    edit_config(d, [](Json& j) {
      j["attention_bias"] = false;
      j["rope_parameters"]["rope_type"] = "yarn";
    });
    refused(d, {"config.json", "only \"llama3\" frequency scaling is supported", "yarn"});
    edit_config(d, [](Json& j) {
      j["rope_parameters"]["rope_type"] = "llama3";
      j["hidden_act"] = "gelu";
    });
    refused(d, {"config.json", "hidden_act \"gelu\""});
  }
}

TEST_F(HfDirs, TheCliRefusesInOneLineAndConvertsBothWays) {
  const fs::path ck = dir_ / "ck", back = dir_ / "back";
  auto r = herd::testing::run_herd("convert --from-hf " + kGolden + "tiny --out " + ck.string() + " --tp 3");
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_NE(r.err.find("num_attention_heads (4) is not divisible by tp (3)"), std::string::npos) << r.err;
  EXPECT_EQ(herd::testing::count_lines(r.err), 1) << r.err;
  EXPECT_FALSE(fs::exists(ck));
  r = herd::testing::run_herd("convert --from-hf " + kGolden + "tiny --out " + ck.string() + " --tp 2 --dp 2");
  ASSERT_EQ(r.status, 0) << r.err;
  r = herd::testing::run_herd("convert --from-hf " + kGolden + "tiny --out " + ck.string());
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("exists and is not empty"), std::string::npos) << r.err;
  r = herd::testing::run_herd("convert --to-hf " + ck.string() + " --out " + back.string() + " --dtype fp8");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("--dtype 'fp8'"), std::string::npos) << r.err;
  r = herd::testing::run_herd("convert --to-hf " + ck.string() + " --out " + back.string());
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(tensors_of(back.string()), tensors_of(kGolden + "tiny"));
  // herd generate on the Hugging Face directory itself: transformers' greedy tokens.
  for (const std::string name : {"tiny", "tied_bf16"}) {
    const Expected e = expected(name);
    std::string prompt;
    for (const Json& id : e.j["prompt"]) {
      if (!prompt.empty()) prompt += ',';
      prompt += std::to_string(id.get<int>());
    }
    r = herd::testing::run_herd("generate --checkpoint " + kGolden + name + " --prompt-ids " + prompt +
                                " --greedy --json --max-tokens " + std::to_string(e.j["greedy"].size()));
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(Json::parse(r.out)["ids"], e.j["greedy"]) << r.out;
  }
  r = herd::testing::run_herd("convert --to-hf " + (dir_ / "nothing").string() + " --out " + back.string() + "2");
  EXPECT_EQ(r.status, 1);
  EXPECT_FALSE(fs::exists(back.string() + "2"));
}

// Exporting into an existing Hugging Face directory replaces only what the export writes (config.json
// and the weights: model.safetensors, which stands in for any model-*-of-*.safetensors shards and their
// index) and leaves every other file (README.md, tokenizer.json, generation_config.json, ...) as it was.
TEST_F(HfDirs, ExportIntoAnExistingDirectoryReplacesOnlyTheFilesItWrites) {
  const fs::path ck = dir_ / "ck";
  ASSERT_TRUE(convert_from_hf(kGolden + "tiny", ck.string(), {1, 1, 1, 1}).ok());
  const fs::path out = copy_fixture(dir_, "tied_bf16", "existing");  // sharded weights and an index
  const std::map<std::string, std::string> kept = {
      {"README.md", "# my model\n"}, {"tokenizer.json", "{\"version\": \"1.0\"}\n"}, {"notes.txt", "keep me\n"}};
  for (const auto& [name, text] : kept) std::ofstream((out / name).string()) << text;
  const std::string generation = herd::testing::slurp((out / "generation_config.json").string());
  auto r = herd::testing::run_herd("convert --to-hf " + ck.string() + " --out " + out.string());
  ASSERT_EQ(r.status, 0) << r.err;
  for (const auto& [name, text] : kept) EXPECT_EQ(herd::testing::slurp((out / name).string()), text) << name;
  EXPECT_EQ(herd::testing::slurp((out / "generation_config.json").string()), generation);
  EXPECT_FALSE(fs::exists(out / "model-00001-of-00002.safetensors"));
  EXPECT_FALSE(fs::exists(out / "model-00002-of-00002.safetensors"));
  EXPECT_FALSE(fs::exists(out / "model.safetensors.index.json"));
  EXPECT_EQ(tensors_of(out.string()), tensors_of(kGolden + "tiny"));
  EXPECT_FALSE(fs::exists(out.string() + ".tmp-hf"));
  Result<LoadedModel> lm = load_model(out.string());
  ASSERT_TRUE(lm.ok()) << lm.error().message();
  EXPECT_LE(max_logit_diff(*lm->model, expected("tiny")), 1e-5);
}

// A Hugging Face directory with its tokenizer.json: `herd generate --prompt TEXT` tokenizes with it (BOS,
// then the text's ids) and continues exactly as --prompt-ids with those ids does.
TEST_F(HfDirs, GenerateTakesTheDirectorysTokenizerJson) {
  const fs::path d = copy_fixture(dir_, "tiny", "with_tokenizer");
  fs::copy_file(std::string(HERD_SOURCE_DIR) + "/tests/data/golden/hf_tokenizer/tokenizer.json", d / "tokenizer.json");
  auto text = herd::testing::run_herd("generate --checkpoint " + d.string() +
                                      " --prompt \"The State of the Union\" --greedy --max-tokens 6 --json");
  ASSERT_EQ(text.status, 0) << text.err;
  // The same prompt as ids: BOS (1997, the first special token after 1,997 ordinary ones) and the ids
  // Hugging Face's tokenizers gives "The State of the Union": the first 7 of the first case of
  // tests/data/golden/hf_tokenizer/tokenizer_expected.json (that text continues " is strong.").
  const Json cases = Json::parse(
      std::ifstream(std::string(HERD_SOURCE_DIR) + "/tests/data/golden/hf_tokenizer/tokenizer_expected.json"))["cases"];
  ASSERT_EQ(cases[0]["text"], "The State of the Union is strong.");
  std::string ids = "1997";
  auto it = cases[0]["ids"].begin();
  for (int k = 0; k < 7; ++k, ++it) {  // "The State of the Union"
    ids += ',';
    ids += std::to_string(it->get<int>());
  }
  auto byid = herd::testing::run_herd("generate --checkpoint " + d.string() + " --prompt-ids " + ids +
                                      " --greedy --max-tokens 6 --json");
  ASSERT_EQ(byid.status, 0) << byid.err;
  EXPECT_EQ(Json::parse(text.out)["ids"], Json::parse(byid.out)["ids"]) << text.out << byid.out;
}

// herd train --init.from (a Hugging Face directory, or a herd checkpoint of another layout) and
// --export.hf: with a learning rate of 1e-30 an update is far below half an ulp of every weight, so the
// weights cannot move and the export must hold exactly the source's tensors: what each rank of the layout loaded was
// the model, and what the export wrote is what the ranks held. With a real learning rate the export equals the final
// checkpoint.
class HfTrain : public herd::testing::ParityRunDir {
 protected:
  HfTrain() : ParityRunDir("herd_hf_train") {}
  herd::testing::CliResult train(const std::string& args) {
    return herd::testing::run_herd("train --data.dir=" + dir_.string() + " --model.name=" + kGolden +
                                   "tiny --data.seq_len=16 --train.global_batch=4 --train.steps=2 --eval.every=0 "
                                   "--generate.samples=0 --schedule.warmup_steps=1 " +
                                   args);
  }
};

TEST_F(HfTrain, InitFromAndExportHfKeepTheWeightsExactlyWhenUpdatesVanish) {
  const std::string ck = (dir_ / "ck").string(), out = (dir_ / "out").string();
  auto r = train("--init.from " + kGolden + "tiny --export.hf " + out + " --checkpoint.dir=" + ck +
                 " --optim.lr=1e-30 --tp 2 --pp 2");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(tensors_of(out), tensors_of(kGolden + "tiny"));
  // From a herd checkpoint of another layout (TP2 x PP2) into TP2 x DP2: the same weights again.
  const std::string ck2 = (dir_ / "ck2").string(), out2 = (dir_ / "out2").string();
  r = train("--init.from=" + ck + " --export.hf=" + out2 + " --checkpoint.dir=" + ck2 +
            " --optim.lr=1e-30 --tp 2 --dp 2");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(tensors_of(out2), tensors_of(kGolden + "tiny"));
  // Training moves them, and the export is the final checkpoint.
  const std::string ck3 = (dir_ / "ck3").string(), out3 = (dir_ / "out3").string();
  r = train("--init.from " + kGolden + "tiny --export.hf " + out3 + " --checkpoint.dir=" + ck3 + " --optim.lr=1e-2");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(tensors_of(out3), tensors_of(kGolden + "tiny"));
  Result<LoadedModel> a = load_model(out3), b = load_model(ck3);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(std::equal(a->model->params(), a->model->params() + a->model->param_count(), b->model->params()));
  // A source of another model is refused in one line naming both.
  r = train("--init.from " + kGolden + "tied_bf16 --optim.lr=1e-30");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("init.from"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("hidden_size 32 vs 48"), std::string::npos) << r.err;
  r = train("--export.hf " + out);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("checkpoint.dir is empty"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace herd::train
