// SPDX-License-Identifier: MIT
#pragma once
// Untrusted text as launchfit shows it, for the inline parameter parser of policy.hpp and for tools built
// on the library. The rest of the rule set lives in lib/text.hpp; this header stays cheap because every
// policy.hpp user pays for it.

#include <cstddef>
#include <string>
#include <string_view>

#include "launchfit/export.hpp"

namespace launchfit::detail {

// `s` as one line of valid UTF-8 that no terminal or reader acts on: valid UTF-8 kept; each invalid byte
// (overlong, surrogate, above U+10FFFF, truncated) and C0/DEL as \xNN, but \n \r \t by name; C1 controls,
// U+2028/2029, bidi marks, overrides and isolates and the BOM as \uNNNN; '\' as \\. At most max_bytes of
// output, never cut inside a character or an escape; a longer `s` ends in "...(N bytes)", N its size.
LAUNCHFIT_API std::string escape_text(std::string_view s, std::size_t max_bytes = 256);

// escape_text() between two `quote` characters ('"' for log fields, '\'' where a message already quotes
// that way), with `quote` escaped too; max_bytes and the "...(N bytes)" marker count inside the quotes.
LAUNCHFIT_API std::string quote_text(std::string_view s, std::size_t max_bytes = 256, char quote = '"');

}  // namespace launchfit::detail
