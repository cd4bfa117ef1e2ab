#include "app/cli.h"
#include "tests/unit/run_cli.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sstream>

namespace kvserve::app {
namespace {

using ::testing::HasSubstr;

using testing::RunKvserve;

TEST(Cli, AliasesAndDottedPathsBecomeOverrides) {
  auto p = ParseArgs({"config", "--dump", "--http-port", "0", "--cache.block_size=32", "--set",
                      "scheduler.max_num_seqs=4", "--model=/m"});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->command, "config");
  EXPECT_THAT(p->switches, ::testing::ElementsAre("--dump"));
  EXPECT_THAT(p->overrides, ::testing::ElementsAre(std::pair<std::string, std::string>{"server.http_port", "0"},
                                                   std::pair<std::string, std::string>{"cache.block_size", "32"},
                                                   std::pair<std::string, std::string>{"scheduler.max_num_seqs", "4"},
                                                   std::pair<std::string, std::string>{"model.path", "/m"}));
}

TEST(Cli, UnknownFlagSuggests) {
  auto r = RunKvserve({"config", "--dump", "--http-prot", "1"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_THAT(r.err, HasSubstr("unknown flag --http-prot"));
  EXPECT_THAT(r.err, HasSubstr("did you mean --http-port?"));
}

TEST(Cli, MissingValue) {
  auto r = RunKvserve({"config", "--dump", "--http-port"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_THAT(r.err, HasSubstr("--http-port: needs a value"));
}

TEST(Cli, DumpAppliesAllSources) {
  auto r = RunKvserve({"config", "--dump", "--grpc-port", "0"}, {"KVSERVE_CACHE_BLOCK_SIZE=64"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_THAT(r.out, HasSubstr("\"block_size\": 64"));
  EXPECT_THAT(r.out, HasSubstr("\"grpc_port\": 0"));
}

TEST(Cli, StartsWithKubernetesServiceLinkVariables) {
  // As inside a pod of a namespace with a Service named kvserve.
  auto r = RunKvserve({"config", "--dump"},
                      {"KVSERVE_SERVICE_HOST=10.96.0.12", "KVSERVE_SERVICE_PORT=8000",
                       "KVSERVE_SERVICE_PORT_HTTP=8000", "KVSERVE_PORT=tcp://10.96.0.12:8000",
                       "KVSERVE_PORT_8000_TCP=tcp://10.96.0.12:8000", "KVSERVE_PORT_8000_TCP_PROTO=tcp",
                       "KVSERVE_PORT_8000_TCP_PORT=8000", "KVSERVE_PORT_8000_TCP_ADDR=10.96.0.12",
                       "KVSERVE_CACHE_BLOCK_SIZE=64"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_THAT(r.out, HasSubstr("\"block_size\": 64"));
  EXPECT_THAT(r.out, HasSubstr("\"host\": \"127.0.0.1\""));
}

TEST(Cli, MistypedVariableStillFails) {
  auto r = RunKvserve({"config", "--dump"}, {"KVSERVE_CACHE_BLOKC_SIZE=64"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_THAT(r.err, HasSubstr("did you mean KVSERVE_CACHE_BLOCK_SIZE?"));
}

TEST(Cli, InvalidValueExitsTwoNamingField) {
  auto r = RunKvserve({"config", "--dump", "--block-size", "12"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_THAT(r.err, HasSubstr("cache.block_size=12: must be a power of two in [8,128]"));
}

TEST(Cli, HelpListsCommandsAndVersionPrints) {
  auto h = RunKvserve({"--help"});
  EXPECT_EQ(h.code, kExitOk);
  EXPECT_THAT(h.out, HasSubstr("config --dump"));
  EXPECT_THAT(h.out, HasSubstr("version"));
  auto v = RunKvserve({"version"});
  EXPECT_EQ(v.code, kExitOk);
  EXPECT_THAT(v.out, HasSubstr("kvserve 0.1.0"));
}

TEST(Cli, UnknownCommand) {
  auto r = RunKvserve({"serv"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_THAT(r.err, HasSubstr("unknown command 'serv'"));
}

}  // namespace
}  // namespace kvserve::app

namespace kvserve::app {
namespace {

TEST(Cli, LoraFlagIsRepeatable) {
  auto p = ParseArgs({"config", "--dump", "--lora", "a=/x", "--lora=b=/y"});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_THAT(p->overrides, ::testing::ElementsAre(
                                std::pair<std::string, std::string>{"lora.adapters+", "a=/x"},
                                std::pair<std::string, std::string>{"lora.adapters+", "b=/y"}));
  auto cfg = LoadConfigFromArgs(*p, nullptr);
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  EXPECT_THAT(cfg->lora.adapters, ::testing::ElementsAre("a=/x", "b=/y"));
}

}  // namespace
}  // namespace kvserve::app
