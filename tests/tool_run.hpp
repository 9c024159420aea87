// SPDX-License-Identifier: MIT
#pragma once
// Runs one of launchfit's tools as a user would, through the shell, for the tool tests: its exit code, what it
// wrote on stdout and on stderr.

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

// Skips the rest of a test whose tool (a path) was not built: the sanitizer builds build no demos, so neither
// launchfit-plans nor launchfit-calc.
#define NEEDS_BUILT_TOOL(path) \
  if (!std::ifstream(path).good()) GTEST_SKIP() << (path) << " not built (LAUNCHFIT_BUILD_DEMOS=OFF)"

namespace launchfit_test {

struct tool_outcome {
  int exit_code = -1;  // -1: killed by a signal
  std::string out, err;
};

// `tool` (a path) with `args` (shell words, quoted by the caller), run from `cwd` when one is given.
inline tool_outcome run_tool(const std::string& tool, const std::string& args, const std::string& cwd = {}) {
  static std::atomic<int> calls{0};
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("launchfit-tool-run-" + std::to_string(::getpid()) + "-" +
                                                    std::to_string(calls++));
  fs::create_directories(dir);
  const std::string out = (dir / "out").string(), err = (dir / "err").string();
  const std::string in_dir = cwd.empty() ? std::string() : "cd '" + cwd + "' && ";
  const int status = std::system((in_dir + "'" + tool + "' " + args + " >'" + out + "' 2>'" + err + "'").c_str());
  const auto read = [](const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  };
  tool_outcome o{WIFEXITED(status) ? WEXITSTATUS(status) : -1, read(out), read(err)};
  fs::remove_all(dir);
  return o;
}

}  // namespace launchfit_test
