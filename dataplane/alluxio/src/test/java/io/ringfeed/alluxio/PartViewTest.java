package io.ringfeed.alluxio;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Optional;
import java.util.UUID;
import org.junit.jupiter.api.Test;

class PartViewTest {
  private static final SampleFormat JPEG = SampleFormat.of("jpeg", null, List.of());

  private static UUID uuid(long high, long low) {
    return new UUID(high, low);
  }

  @Test
  void imagesFallIntoAFolderPerLabelPaddedSoThatSortedNamesFollowTheNumbers() {
    UUID a = uuid(1, 1);
    UUID b = uuid(-5, 2); // a negative high half: sorted as an unsigned number in the index
    UUID c = uuid(3, 3);
    SampleIndex index = new SampleIndex.Builder().add(a, 2, 100).add(b, 10, 200).add(c, 2, 300).build();
    PartView view = new PartView(new UUID[] {c, a, b}, index, JPEG, List.of());
    assertEquals(List.of("02", "10"), List.copyOf(view.folders().keySet()));
    assertEquals(2, view.folders().get("02").size());
    assertEquals(Optional.of(new PartView.Sample(b, 10, 200)), view.sample("10", b + ".jpg"));
    assertEquals(Optional.empty(), view.sample("02", b + ".jpg"), "a file is found only in its label's folder");
    assertEquals(Optional.empty(), view.sample("99", a + ".jpg"));
    assertEquals(0, view.missing());
  }

  @Test
  void namedLabelsNameTheirFoldersAndUnnamedOnesKeepTheirNumber() {
    UUID cat = uuid(1, 1);
    UUID dog = uuid(2, 2);
    UUID other = uuid(3, 3);
    SampleIndex index = new SampleIndex.Builder().add(cat, 0, 1).add(dog, 1, 1).add(other, 7, 1).build();
    PartView view = new PartView(new UUID[] {cat, dog, other}, index, JPEG, List.of("cat", "dog/wolf"));
    assertEquals(List.of("cat", "dog_wolf", "7"), List.copyOf(view.folders().keySet()));
  }

  @Test
  void membersNoLongerInTheDatasetAreLeftOutAndCounted() {
    UUID kept = uuid(1, 1);
    SampleIndex index = new SampleIndex.Builder().add(kept, 0, 5).build();
    PartView view = new PartView(new UUID[] {kept, uuid(9, 9), uuid(8, 8)}, index, JPEG, List.of());
    assertEquals(2, view.missing());
    assertEquals(1, view.folders().values().stream().mapToInt(List::size).sum());
  }

  @Test
  void tensorsAreFlatWithALabelsFile() {
    SampleFormat raw = SampleFormat.of("raw", "uint8", List.of(4));
    UUID first = uuid(1, 1);
    UUID second = uuid(2, 2);
    SampleIndex index = new SampleIndex.Builder().add(second, 3, 4).add(first, 1, 4).build();
    PartView view = new PartView(new UUID[] {second, first}, index, raw, List.of());
    assertTrue(view.folders().isEmpty());
    assertEquals(2, view.flat().size());
    String csv = new String(view.labelsCsv(), StandardCharsets.UTF_8);
    assertEquals("file,label\n" + first + ".npy,1\n" + second + ".npy,3\n", csv);
    assertEquals(csv.length(), view.labelsCsvLength());
    assertEquals(Optional.of(new PartView.Sample(first, 1, 4)), view.sample(null, first + ".npy"));
  }

  @Test
  void theIndexFindsEverySampleAndNoOther() {
    SampleIndex.Builder builder = new SampleIndex.Builder();
    java.util.Random random = new java.util.Random(7);
    UUID[] added = new UUID[5000];
    for (int i = 0; i < added.length; i++) {
      added[i] = new UUID(random.nextLong(), random.nextLong());
      builder.add(added[i], i % 13, i);
    }
    SampleIndex index = builder.build();
    assertEquals(added.length, index.size());
    for (int i = 0; i < added.length; i++) {
      int position = index.find(added[i]);
      assertEquals(i % 13, index.label(position));
      assertEquals(i, index.storedBytes(position));
    }
    assertEquals(-1, index.find(new UUID(random.nextLong(), random.nextLong())));
  }
}
