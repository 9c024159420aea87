// SPDX-License-Identifier: MIT
// demos/common/svg.hpp, the SVG writer of launchfit's pictures: whatever text goes in, the document stays
// well-formed XML and shows the text.

#include "svg.hpp"

#include <gtest/gtest.h>

#include <string>

#include "xml_check.hpp"

namespace {

TEST(Svg, EscapeTurnsMarkupIntoEntities) {
  EXPECT_EQ(launchfit_svg::escape("a < b && c > \"d\" 'e'"),
            "a &lt; b &amp;&amp; c &gt; &quot;d&quot; &apos;e&apos;");
  EXPECT_EQ(launchfit_svg::escape("NVIDIA H200"), "NVIDIA H200");
}

// Control characters and invalid UTF-8 are not allowed in XML: they come out as visible escapes.
TEST(Svg, EscapeLeavesNoControlCharacterOrInvalidUtf8) {
  const std::string shown = launchfit_svg::escape(std::string("bell\x07 esc\x1b[2J nul\0 bad\xff end", 28));
  EXPECT_EQ(launchfit_test::xml_problem("<t>" + shown + "</t>"), "") << shown;
  EXPECT_NE(shown.find("\\x07"), std::string::npos) << shown;
  EXPECT_NE(shown.find("\\xff"), std::string::npos) << shown;
  EXPECT_NE(shown.find("end"), std::string::npos) << shown;
}

// A long text is cut, and says how long it was.
TEST(Svg, EscapeBoundsTheText) {
  const std::string shown = launchfit_svg::escape(std::string(5000, 'x'), 100);
  EXPECT_LT(shown.size(), 200u);
  EXPECT_NE(shown.find("(5000 bytes)"), std::string::npos) << shown;
}

TEST(Svg, HostileTextInEveryPlaceKeepsTheDocumentWellFormed) {
  const std::string hostile = "</text><script>alert(1)</script> & \"quoted\" 'single' \x01\xfe";
  launchfit_svg::document svg(200, 100);
  svg.text(10, 20, hostile, {{"fill", hostile}});
  svg.circle(5, 5, 2, {{"class", "dot"}}, hostile);
  svg.open("g", {{"data-label", hostile}});
  svg.rect(0, 0, 10, 10);
  svg.polyline({{0, 0}, {1.25, 2.5}}, {{"stroke", "#333"}});
  const std::string doc = svg.str();  // closes the group
  EXPECT_EQ(launchfit_test::xml_problem(doc), "") << doc;
  EXPECT_EQ(doc.find("<script"), std::string::npos) << doc;
  EXPECT_NE(doc.find("&lt;/text&gt;&lt;script&gt;"), std::string::npos) << doc;
  EXPECT_EQ(doc.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"200.0\" height=\"100.0\"", 0), 0u);
  EXPECT_NE(doc.find("points=\"0.0,0.0 1.2,2.5 \""), std::string::npos) << doc;
}

// The checker the picture tests rely on refuses what a writer bug would produce.
TEST(Svg, TheWellFormednessCheckRefusesBrokenDocuments) {
  using launchfit_test::xml_problem;
  EXPECT_EQ(xml_problem("<svg><g a=\"1\"/><text>x &amp; y</text></svg>"), "");
  for (const char* broken :
       {"<svg><g></svg>", "<svg><text>a & b</text></svg>", "<svg a=1/>", "<svg a=\"1\" a=\"2\"/>",
        "<svg><t>a < b</t></svg>", "<svg/><svg/>", "<svg x=\"<\"/>", "<svg>\x01</svg>", "<svg>"})
    EXPECT_NE(xml_problem(broken), "") << broken;
}

}  // namespace
