package io.ringfeed.alluxio;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.util.List;
import org.junit.jupiter.api.Test;

class RingPathTest {
  @Test
  void theSchemeAndAuthorityNameTheMountNotAPlaceInTheTree() {
    assertEquals(List.of("demo", "by-patient", "train"), RingPath.parse("ringfeed://ring/demo/by-patient/train/")
        .segments());
    assertEquals(0, RingPath.parse("ringfeed://ring").depth());
    assertEquals(0, RingPath.parse("ringfeed://ring/").depth());
    assertEquals("/", RingPath.parse("/").toString());
  }

  @Test
  void plainPathsAndRepeatedSlashesGiveTheSameSegments() {
    RingPath path = RingPath.parse("//demo/./split//val/3/0a2b.jpg");
    assertEquals(List.of("demo", "split", "val", "3", "0a2b.jpg"), path.segments());
    assertEquals("demo", path.dataset());
    assertEquals("split", path.split());
    assertEquals("val", path.part());
    assertEquals("0a2b.jpg", path.name());
  }

  @Test
  void parentReferencesAreRefused() {
    IllegalArgumentException refused = assertThrows(IllegalArgumentException.class,
        () -> RingPath.parse("ringfeed://ring/demo/../other"));
    assertEquals("'..' in ringfeed://ring/demo/../other: the tree has no parent references", refused.getMessage());
  }
}
