#include "credentials/load.hpp"

#include <catch2/catch.hpp>

using namespace sluice::credentials;
using sluice::filters::credential_config;

TEST_CASE("command sources: output one line, failures named", "[credentials]") {
  credential_config c;
  c.name = "t";
  c.source = "command:printf tok-1\\n";
  load_secret(c);
  CHECK(c.secret == "tok-1");
  c.source = "command:/bin/sh -c exit";
  CHECK_THROWS_WITH(load_secret(c), Catch::Contains("credential 't'") && Catch::Contains("printed nothing"));
  c.source = "command:/bin/false";
  CHECK_THROWS_WITH(load_secret(c), Catch::Contains("exited with status 1"));
  c.source = "command:/nonexistent/program";
  CHECK_THROWS_WITH(load_secret(c), Catch::Contains("could not start"));
  c.source = "command:printf a\\nb";
  CHECK_THROWS_WITH(load_secret(c), Catch::Contains("line break"));
}

TEST_CASE("a key source keeps its line breaks (a PEM key for [log] signing_key)", "[credentials]") {
  CHECK(read_key_source("log.signing_key", "command:printf a\\nb\\n") == "a\nb");
  CHECK_THROWS_WITH(read_key_source("log.signing_key", "file:/nonexistent/key.pem"),
                    Catch::Contains("log.signing_key") && Catch::Contains("/nonexistent/key.pem"));
}
