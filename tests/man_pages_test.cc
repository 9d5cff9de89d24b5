// The manual pages and the bash completion against the programs: every option `depotd --help`
// prints is in depotd(8) or, for a configuration key, in depotd.conf(5) with its default; every
// command and option of `depotctl --help` is in depotctl(1) and in the completion, and the
// completion completes them in a real bash.
#include <fmt/format.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <fstream>
#include <iterator>
#include <regex>
#include <set>
#include <sstream>

#include "daemon/options.h"
#include "tests/daemon_fixture.h"

using namespace depot;
using namespace depot::test;
using Catch::Matchers::Contains;

namespace {

// The page's text with roff's escaped hyphens as plain ones.
std::string Page(const std::string& name) {
  std::ifstream in(std::string(DEPOT_SOURCE_DIR "/packaging/") + name);
  REQUIRE(in);
  std::stringstream s;
  s << in.rdbuf();
  return std::regex_replace(s.str(), std::regex("\\\\-"), "-");
}

std::set<std::string> Matches(const std::string& text, const std::string& pattern) {
  std::set<std::string> out;
  std::regex re(pattern);
  for (std::sregex_iterator it(text.begin(), text.end(), re), end; it != end; ++it) {
    out.insert((*it)[1]);
  }
  return out;
}

std::string Help(const char* program) {
  std::string out;
  REQUIRE(Run({program, "--help"}, &out) == 0);
  return out;
}

// depotctl's commands, as its --help lists them (two spaces, then the name, at a line's start).
std::set<std::string> Commands(const std::string& help) {
  std::string commands = help.substr(help.find("Commands:"));
  commands = commands.substr(0, commands.find("\n\n"));
  return Matches(commands, "\n  ([a-z]+)");
}

}  // namespace

TEST_CASE("depotd(8) and depotd.conf(5) hold every option and key of depotd --help", "[man]") {
  std::string page = Page("man/depotd.8");
  std::string conf = Page("man/depotd.conf.5");
  std::set<std::string> flags = Matches(Help(DEPOTD_PATH), "  (--[a-z-]+)");
  REQUIRE(flags.size() > 20);
  std::set<std::string> keys;
  for (const ConfigKey& k : ConfigKeys()) {
    std::string flag = std::string("--") + k.name;
    std::replace(flag.begin(), flag.end(), '_', '-');
    keys.insert(flag);
    INFO(k.name);
    // ".BR key " (default: value)"" as the page writes it.
    std::string want = fmt::format(".BR {} \" (default: {})\"", k.name,
                                   *k.default_text ? k.default_text : "empty");
    CHECK_THAT(conf, Contains(want));
  }
  for (const std::string& flag : flags) {
    INFO(flag);
    CHECK((keys.count(flag) == 1 || page.find(flag) != std::string::npos));
  }
  // And nothing in the page that depotd no longer has.
  for (const std::string& key : Matches(conf, "\n\\.BR ([a-z_]+) \" \\(default")) {
    std::string flag = "--" + key;
    std::replace(flag.begin(), flag.end(), '_', '-');
    INFO(key);
    CHECK(flags.count(flag) == 1);
  }
}

TEST_CASE("depotctl(1) and the bash completion hold every command and option of --help", "[man]") {
  std::string help = Help(DEPOTCTL_PATH);
  std::string page = Page("man/depotctl.1");
  std::string completion = Page("bash-completion/depotctl");
  std::set<std::string> commands = Commands(help);
  REQUIRE(commands.size() >= 13);
  std::set<std::string> options = Matches(help, "[ \\[](--?[a-z][a-z-]*)");
  options.erase("-");
  REQUIRE(options.count("--holder") == 1);
  for (const std::string& c : commands) {
    INFO(c);
    CHECK_THAT(page, Contains(".B " + c) || Contains(".BR " + c) || Contains(".BI " + c));
  }
  for (const std::string& o : options) {
    INFO(o);
    CHECK_THAT(page, Contains(o));
    CHECK_THAT(completion, Contains(o));
  }
  // In bash: the first word completes to the commands; ls's options include --holder.
  std::string out, err;
  std::string script = "source " DEPOT_SOURCE_DIR
                       "/packaging/bash-completion/depotctl && "
                       "complete_line() { COMP_LINE=$1; COMP_POINT=${#1}; "
                       "read -ra COMP_WORDS <<<\"$1\"; [[ $1 == *' ' ]] && COMP_WORDS+=(''); "
                       "COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); "
                       "COMPREPLY=(); _depotctl; echo \"${COMPREPLY[*]}\"; }; "
                       "complete_line 'depotctl '; complete_line 'depotctl ls --h'";
  std::string completions = "/usr/share/bash-completion/bash_completion";
  if (!std::ifstream(completions)) Skip("bash-completion is not installed");
  REQUIRE(Run({"bash", "-c", "source " + completions + " && " + script}, &out, &err) == 0);
  INFO(out << err);
  std::istringstream lines(out);
  std::string first, second;
  std::getline(lines, first);
  std::getline(lines, second);
  std::istringstream words(first);
  std::set<std::string> completed{std::istream_iterator<std::string>(words), {}};
  CHECK(completed == commands);
  CHECK(second == "--holder --help");
}
