// SPDX-License-Identifier: MIT
#pragma once
// Whether a document is well-formed XML, for the tests of launchfit's SVG pictures: one root element, every
// tag closed in order, attributes quoted and not repeated, '<' and '&' only as markup or entities, no
// control characters. Not a validating parser; enough to catch an unescaped label or a tag left open.

#include <cctype>
#include <cstddef>
#include <set>
#include <string>
#include <vector>

namespace launchfit_test {

// Empty when `xml` is well-formed, else what is wrong and where (byte offset).
inline std::string xml_problem(const std::string& xml) {
  std::size_t i = 0;
  std::vector<std::string> open;
  int roots = 0;
  const auto at = [&i](const std::string& what) { return what + " at byte " + std::to_string(i); };
  const auto name_char = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.' || c == ':';
  };
  const auto read_name = [&]() {
    const std::size_t start = i;
    if (i < xml.size() && (std::isalpha(static_cast<unsigned char>(xml[i])) || xml[i] == '_'))
      while (i < xml.size() && name_char(xml[i])) ++i;
    return xml.substr(start, i - start);
  };
  // An entity reference at xml[i] == '&'; advances past it.
  const auto entity = [&]() {
    const std::size_t end = xml.find(';', i);
    if (end == std::string::npos || end - i > 10) return false;
    const std::string e = xml.substr(i + 1, end - i - 1);
    bool ok = e == "amp" || e == "lt" || e == "gt" || e == "quot" || e == "apos";
    if (!ok && e.size() > 1 && e[0] == '#') {
      const bool hex = e[1] == 'x';
      ok = e.size() > (hex ? 2u : 1u);
      for (std::size_t k = hex ? 2 : 1; k < e.size() && ok; ++k)
        ok = hex ? std::isxdigit(static_cast<unsigned char>(e[k]))
                 : std::isdigit(static_cast<unsigned char>(e[k]));
    }
    if (ok) i = end + 1;
    return ok;
  };
  const auto control = [](char c) {
    return static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n' && c != '\r';
  };
  if (xml.compare(0, 5, "<?xml") == 0) {
    i = xml.find("?>");
    if (i == std::string::npos) return "unterminated XML declaration";
    i += 2;
  }
  while (i < xml.size()) {
    const char c = xml[i];
    if (control(c)) return at("a control character");
    if (c == '&') {
      if (open.empty()) return at("text outside the root element");
      if (!entity()) return at("a bare '&'");
      continue;
    }
    if (c != '<') {
      if (open.empty() && !std::isspace(static_cast<unsigned char>(c)))
        return at("text outside the root element");
      ++i;
      continue;
    }
    if (xml.compare(i, 4, "<!--") == 0) {
      const std::size_t end = xml.find("-->", i + 4);
      if (end == std::string::npos) return at("an unterminated comment");
      i = end + 3;
      continue;
    }
    ++i;
    if (i < xml.size() && xml[i] == '/') {
      ++i;
      const std::string name = read_name();
      if (open.empty() || open.back() != name) return at("</" + name + "> closes nothing open");
      while (i < xml.size() && std::isspace(static_cast<unsigned char>(xml[i]))) ++i;
      if (i >= xml.size() || xml[i] != '>') return at("a malformed end tag");
      ++i;
      open.pop_back();
      continue;
    }
    const std::string name = read_name();
    if (name.empty()) return at("a '<' that starts no tag");
    if (open.empty() && ++roots > 1) return at("a second root element");
    std::set<std::string> seen;
    for (;;) {
      const std::size_t before = i;
      while (i < xml.size() && std::isspace(static_cast<unsigned char>(xml[i]))) ++i;
      if (i >= xml.size()) return at("an unterminated <" + name + ">");
      if (xml.compare(i, 2, "/>") == 0) {
        i += 2;
        break;
      }
      if (xml[i] == '>') {
        ++i;
        open.push_back(name);
        break;
      }
      if (i == before) return at("attributes of <" + name + "> not separated by space");
      const std::string attribute = read_name();
      if (attribute.empty()) return at("a malformed attribute in <" + name + ">");
      if (!seen.insert(attribute).second) return at("attribute " + attribute + " twice in <" + name + ">");
      if (i >= xml.size() || xml[i] != '=') return at("attribute " + attribute + " without a value");
      ++i;
      if (i >= xml.size() || (xml[i] != '"' && xml[i] != '\''))
        return at("an unquoted value of " + attribute);
      const char quote = xml[i++];
      while (i < xml.size() && xml[i] != quote) {
        if (xml[i] == '<' || control(xml[i])) return at("a '<' or control character in " + attribute);
        if (xml[i] == '&') {
          if (!entity()) return at("a bare '&' in " + attribute);
        } else {
          ++i;
        }
      }
      if (i >= xml.size()) return at("an unterminated value of " + attribute);
      ++i;
    }
  }
  if (!open.empty()) return "<" + open.back() + "> is never closed";
  if (roots == 0) return "no root element";
  return {};
}

}  // namespace launchfit_test
