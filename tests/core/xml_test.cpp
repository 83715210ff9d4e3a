// xml_text, against hand-written expectations: markup characters become entities, forbidden control
// characters go, and bytes that are not UTF-8 become U+FFFD while valid multi-byte characters stay.
#include "herd/core/xml.h"

#include <gtest/gtest.h>

namespace herd {
namespace {

TEST(XmlText, EscapesMarkup) {
  EXPECT_EQ(xml_text("R&D <v2> \"q\" 'a'"), "R&amp;D &lt;v2&gt; &quot;q&quot; &apos;a&apos;");
  EXPECT_EQ(xml_text("&amp;"), "&amp;amp;");  // text, not markup: escaped again
  EXPECT_EQ(xml_text("plain text, 1.5 s"), "plain text, 1.5 s");
  EXPECT_EQ(xml_text(""), "");
}

TEST(XmlText, DropsControlCharactersXmlForbids) {
  EXPECT_EQ(xml_text("a\x01"
                     "b\x1f"
                     "c\td\ne\rf"),
            "abc\td\ne\rf");
  EXPECT_EQ(xml_text(std::string("x\0y", 3)), "xy");
}

TEST(XmlText, KeepsUtf8AndReplacesInvalidBytes) {
  EXPECT_EQ(xml_text("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80"), "caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80");
  const std::string fffd = "\xEF\xBF\xBD";
  EXPECT_EQ(xml_text("a\xFF"
                     "b"),
            "a" + fffd + "b");                                         // never a UTF-8 byte
  EXPECT_EQ(xml_text("a\xC3"), "a" + fffd);                            // truncated sequence
  EXPECT_EQ(xml_text("\xC0\xAF"), fffd + fffd);                        // overlong '/'
  EXPECT_EQ(xml_text("\xED\xA0\x80"), fffd + fffd + fffd);             // a UTF-16 surrogate
  EXPECT_EQ(xml_text("\xF4\x90\x80\x80"), fffd + fffd + fffd + fffd);  // above U+10FFFF
  EXPECT_EQ(xml_text("\x80<"), fffd + "&lt;");                         // a lone continuation byte
}

}  // namespace
}  // namespace herd
