// Fixture access for the tokenizer tests.
#pragma once

#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "tokenizer/tokenizer.h"

namespace kvserve::tokenizer::testing {

inline std::string FixturePath(const std::string& name) {
  return std::string(KVSERVE_SOURCE_DIR) + "/tests/fixtures/tokenizer/" + name;
}

inline std::string ReadFileOrDie(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Loads tests/fixtures/tokenizer/<name>.json; fails the test on error.
inline std::unique_ptr<Tokenizer> LoadFixture(const std::string& name) {
  auto t = Tokenizer::FromFile(FixturePath(name + ".json"));
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *std::move(t) : nullptr;
}

}  // namespace kvserve::tokenizer::testing
