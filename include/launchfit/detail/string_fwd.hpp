// SPDX-License-Identifier: MIT
#pragma once
// Internal: std::string declared, not defined, for headers that name it only in declarations (a function
// returning one), so a translation unit that launches does not compile <string>. libstdc++'s and libc++'s
// <iosfwd> declare it; with another standard library, <string> itself.

#include <cstddef>

#if defined(__GLIBCXX__) || defined(_LIBCPP_VERSION)
#include <iosfwd>
#else
#include <string>
#endif
