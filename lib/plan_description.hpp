// SPDX-License-Identifier: MIT
#pragma once
// Internal: one description of a plan, which every printer renders: the plan file's and the remote store's
// JSON (plan_json.cpp), the new-plan log line as text and as JSON (plan_line.cpp), NVTX range names
// (observe.cpp) and plan::to_string() (error messages, trace lines). Each field has one name, the same JSON
// key and text word everywhere, one JSON value and one text form; a field added here reaches every printer.
//
//   text:  block=256 blocks_per_sm=8 sm_count=132 dynamic_smem_bytes=0 occupancy=100% limiters=warps
//          policy=max_occupancy() ...                                   (flags that are set: their name alone)
//   JSON:  {"block": [256, 1, 1], "block_threads": 256, "blocks_per_sm": 8, ..., "occupancy": {...}, ...}

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "launchfit/plan.hpp"

namespace launchfit::detail {

// Where a field's text form is shown: every text printer (to_string(), NVTX names, the log line), the log
// line only, or no text printer (a default value, or one the line says otherwise).
enum class shown { everywhere, line, nowhere };

struct plan_field {
  const char* name;      // the JSON key and the text word
  nlohmann::json value;  // as every JSON printer writes it (null: text only, the JSON holds it nested)
  std::string text;      // as every text printer writes it, escaped; empty for a flag: the name alone
  shown where = shown::everywhere;
  bool stored = true;  // in the plan file's JSON (read back by plan_from_json); else derived from its key
};

// Which forms a description holds: both, or the text alone (a text printer's: the JSON values of its arrays,
// texts and occupancy are left null, which is most of a description's cost; flags and numbers keep theirs).
enum class plan_forms { json_and_text, text };

// The plan's fields, in the order every printer writes them; the long free text (the reason) last.
std::vector<plan_field> describe_plan(const plan& p, plan_forms forms = plan_forms::json_and_text);

// "name=text" for each field shown at `at` (shown::everywhere: to_string() and NVTX; shown::line: the log line
// too), space separated.
std::string fields_text(const std::vector<plan_field>& fields, shown at);
// Each field's value under its name (the ones the JSON holds), the stored ones only where `stored_only`.
nlohmann::json fields_json(const std::vector<plan_field>& fields, bool stored_only);

}  // namespace launchfit::detail
