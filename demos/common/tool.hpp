// SPDX-License-Identifier: MIT
#pragma once
// Shared by launchfit's command-line tools (launchfit-plans, launchfit-calc, launchfit-calibrate): one set of
// exit codes, and one way to answer --help, --version and a bad command line, so that scripts and people
// can treat the three alike.

#include <CLI/CLI.hpp>
#include <iostream>
#include <launchfit/version.hpp>
#include <optional>
#include <string>
#include <string_view>

namespace launchfit_tool {

// The exit codes of every tool. A script tells "the answer is no" (1) from "you called it wrong" (2) and
// from "this machine cannot do it" (3).
inline constexpr int exit_ok = 0;           // done
inline constexpr int exit_failed = 1;       // ran, and found something or failed: findings of check, diff,
                                            // a gate, conflicts, bad entries, a refused operation
inline constexpr int exit_usage = 2;        // a bad command line, or an input that is not what it takes
inline constexpr int exit_environment = 3;  // no driver or GPU, a file or store that cannot be reached,
                                            // read or written, a lock held too long

// The same words in every tool's --help.
inline constexpr const char* exit_codes_text =
    "Exit codes: 0 done; 1 findings or a failed operation; 2 a bad command line or input; 3 the environment "
    "(no driver or GPU, a file or store that cannot be read, written or reached).";

// Adds --version (prints "<tool> <launchfit version>") to `app`, whose name is the tool's (never argv[0],
// which would show a build path in the usage).
inline void add_version(CLI::App& app) {
  app.set_version_flag("--version", app.get_name() + " " + launchfit::version());
}

// Parses the command line: nullopt to go on, else the exit code. --help and --version print on stdout and
// exit 0; anything CLI11 refuses is said on stderr with the tool's name and exits exit_usage. CLI11 quotes
// the arguments as given: `shown`, when set, is applied to what it says (launchfit-plans hides the password
// of a store URL there as everywhere).
inline std::optional<int> parse(CLI::App& app, int argc, char** argv,
                                std::string (*shown)(std::string_view) = nullptr) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    return exit_ok;
  } catch (const CLI::CallForAllHelp&) {
    std::cout << app.help("", CLI::AppFormatMode::All);
    return exit_ok;
  } catch (const CLI::CallForVersion& e) {
    std::cout << e.what() << '\n';
    return exit_ok;
  } catch (const CLI::ParseError& e) {
    const std::string what = shown ? shown(e.what()) : std::string(e.what());
    std::cerr << app.get_name() << ": error: " << what << " (see " << app.get_name() << " --help)\n";
    return exit_usage;
  }
  return std::nullopt;
}

}  // namespace launchfit_tool
