// What the CLI tests of `herd train` run on: a scratch directory holding the parity model's config.json
// and a training shard of its documents (and, when asked, a held-out shard), removed after the test.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <utility>

#include "herd/data/shard.h"
#include "herd/model/config.h"
#include "train/dist_harness.h"

namespace herd::testing {

class ParityRunDir : public ::testing::Test {
 protected:
  // `tag` names the directory (one per process); `held_out` adds val-00000.bin.
  explicit ParityRunDir(std::string tag, bool held_out = false) : tag_(std::move(tag)), held_out_(held_out) {}

  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / (tag_ + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    ASSERT_TRUE(data::write_shard((dir_ / "train-00000.bin").string(), *train::testing::parity_docs(40, 1)).ok());
    if (held_out_) {
      ASSERT_TRUE(data::write_shard((dir_ / "val-00000.bin").string(), *train::testing::parity_docs(10, 2)).ok());
    }
    std::ofstream((dir_ / "config.json").string()) << model::config_to_hf_json(train::testing::parity_model()).dump();
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // "--data.dir=DIR --model.name=DIR/config.json": the data and the model of every run.
  std::string data_and_model() const {
    return "--data.dir=" + dir_.string() + " --model.name=" + (dir_ / "config.json").string();
  }

  std::filesystem::path dir_;

 private:
  std::string tag_;
  bool held_out_;
};

}  // namespace herd::testing
