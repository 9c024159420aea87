// SPDX-License-Identifier: MIT
#pragma once
// The one SVG writer of launchfit's pictures (launchfit-calc, launchfit-calibrate, the reduction story).
// Every text and every attribute value goes through escape(), so a device name or a label taken from the
// command line or the driver cannot break the document; numbers are written with one decimal.
//
//   launchfit_svg::document svg(640, 480);
//   svg.text(320, 24, "occupancy: " + device_name, {{"text-anchor", "middle"}});
//   svg.line(0, 0, 100, 100, {{"stroke", "#333"}});
//   std::string file = svg.str();

#include <cstddef>
#include <cstdio>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "launchfit/detail/text.hpp"

namespace launchfit_svg {

// `text` as SVG character data or a quoted attribute value: valid UTF-8 without control characters
// (launchfit::detail::escape_text, at most max_bytes), then &, <, >, " and ' as entities.
inline std::string escape(std::string_view text, std::size_t max_bytes = 1000) {
  const std::string shown = launchfit::detail::escape_text(text, max_bytes);
  std::string out;
  out.reserve(shown.size());
  for (char c : shown) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// A coordinate or length: one decimal ("12.5").
inline std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

// One attribute; its value is escaped when written. Numbers: integers as they are, others with num().
struct attr {
  attr(std::string_view n, std::string_view v) : name(n), value(v) {}
  attr(std::string_view n, const char* v) : name(n), value(v) {}
  attr(std::string_view n, const std::string& v) : name(n), value(v) {}
  template <class T, std::enable_if_t<std::is_arithmetic_v<T>, int> = 0>
  attr(std::string_view n, T v) : name(n), value(std::is_integral_v<T> ? std::to_string(v) : num(v)) {}
  std::string name;  // written as given: a name from the program, never from input
  std::string value;
};
using attrs = std::vector<attr>;

// An SVG document on a white background, written element by element.
class document {
 public:
  document(double width, double height,
           const attrs& root = {{"font-family", "sans-serif"}, {"font-size", 12}}) {
    out_ = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(width) + "\" height=\"" + num(height) +
           "\" viewBox=\"0 0 " + num(width) + ' ' + num(height) + '"';
    write_attrs(root);
    out_ += ">\n";
    element("rect", {{"width", "100%"}, {"height", "100%"}, {"fill", "white"}});
  }

  // <name attrs/>
  void element(std::string_view name, const attrs& a) {
    start(name, a);
    out_ += "/>\n";
  }
  // <name attrs>text</name>, the text escaped.
  void element(std::string_view name, const attrs& a, std::string_view text) {
    start(name, a);
    out_ += '>' + escape(text) + "</" + std::string(name) + ">\n";
  }
  // <name attrs> ... until close().
  void open(std::string_view name, const attrs& a = {}) {
    start(name, a);
    out_ += ">\n";
    open_.emplace_back(name);
  }
  void close() {
    if (open_.empty()) return;
    out_ += "</" + open_.back() + ">\n";
    open_.pop_back();
  }

  void text(double x, double y, std::string_view s, const attrs& extra = {}) {
    element("text", with({{"x", x}, {"y", y}}, extra), s);
  }
  void line(double x1, double y1, double x2, double y2, const attrs& extra = {}) {
    element("line", with({{"x1", x1}, {"y1", y1}, {"x2", x2}, {"y2", y2}}, extra));
  }
  void rect(double x, double y, double w, double h, const attrs& extra = {}) {
    element("rect", with({{"x", x}, {"y", y}, {"width", w}, {"height", h}}, extra));
  }
  // A circle; `title` (shown on hover) when not empty.
  void circle(double cx, double cy, double r, const attrs& extra = {}, std::string_view title = {}) {
    const attrs a = with({{"cx", cx}, {"cy", cy}, {"r", r}}, extra);
    if (title.empty()) return element("circle", a);
    open("circle", a);
    element("title", {}, title);
    close();
  }
  void polyline(const std::vector<std::pair<double, double>>& points, const attrs& extra = {}) {
    std::string p;
    for (const auto& [x, y] : points) p += num(x) + ',' + num(y) + ' ';
    element("polyline", with({{"points", p}, {"fill", "none"}}, extra));
  }
  void path(const std::string& d, const attrs& extra = {}) { element("path", with({{"d", d}}, extra)); }

  // The whole document: what is still open is closed.
  std::string str() {
    while (!open_.empty()) close();
    return out_ + "</svg>\n";
  }

 private:
  static attrs with(attrs a, const attrs& extra) {
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  }
  void start(std::string_view name, const attrs& a) {
    out_ += '<';
    out_ += name;
    write_attrs(a);
  }
  void write_attrs(const attrs& a) {
    // Values are the program's (numbers, colours, point lists) or short labels: never cut.
    for (const attr& x : a) out_ += ' ' + x.name + "=\"" + escape(x.value, std::string::npos) + '"';
  }

  std::string out_;
  std::vector<std::string> open_;
};

}  // namespace launchfit_svg
