package io.ringfeed.alluxio;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Optional;
import java.util.UUID;
import org.junit.jupiter.api.Test;

class SampleFormatTest {
  private static final UUID SAMPLE = UUID.fromString("0f6b7c1e-2d3a-5b4c-9d8e-7f6a5b4c3d2e");

  @Test
  void imagesKeepTheirBytesAndTakeTheEncodingsExtension() {
    SampleFormat jpeg = SampleFormat.of("jpeg", null, List.of());
    assertEquals(SAMPLE + ".jpg", jpeg.fileName(SAMPLE));
    assertEquals(Optional.of(SAMPLE), jpeg.uuidOf(SAMPLE + ".jpg"));
    assertFalse(jpeg.flat());
    byte[] stored = {1, 2, 3};
    assertArrayEquals(stored, jpeg.fileBytes(stored));
    assertEquals(3, jpeg.fileLength(3));
    assertEquals("png", SampleFormat.of("png", null, List.of()).fileName(SAMPLE).split("\\.")[1]);
  }

  @Test
  void namesThatAreNotThisFormatsFilesStandForNoSample() {
    SampleFormat jpeg = SampleFormat.of("jpeg", null, List.of());
    assertEquals(Optional.empty(), jpeg.uuidOf(SAMPLE + ".png"));
    assertEquals(Optional.empty(), jpeg.uuidOf("labels.csv"));
    assertEquals(Optional.empty(), jpeg.uuidOf("0f6b7c1e-2d3a-5b4c-9d8e-7f6a5b4c3d2X.jpg"));
    // UUID.fromString accepts short fields; a file name must be the canonical form.
    assertEquals(Optional.empty(), jpeg.uuidOf("f6b7c1e-2d3a-5b4c-9d8e-07f6a5b4c3d2e.jpg"));
    assertEquals(Optional.empty(), jpeg.uuidOf(SAMPLE.toString().toUpperCase() + ".jpg"));
  }

  @Test
  void rawTensorsBecomeNpyFilesThatNumpyReads() {
    SampleFormat raw = SampleFormat.of("raw", "float32", List.of(3, 4, 5));
    assertTrue(raw.flat());
    byte[] stored = new byte[3 * 4 * 5 * 4];
    byte[] file = raw.fileBytes(stored);
    assertEquals(raw.fileLength(stored.length), file.length);
    int headerLength = file.length - stored.length;
    assertEquals(0, headerLength % 64, "numpy aligns the data to 64 bytes");
    assertArrayEquals(new byte[] {(byte) 0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0}, java.util.Arrays.copyOf(file, 8));
    int dictLength = (file[8] & 0xff) | (file[9] & 0xff) << 8;
    assertEquals(headerLength - 10, dictLength);
    String dict = new String(file, 10, dictLength, StandardCharsets.US_ASCII);
    assertTrue(dict.startsWith("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4, 5), }"), dict);
    assertTrue(dict.endsWith(" \n"), dict);
  }

  @Test
  void aOneDimensionalShapeIsWrittenAsAOneTuple() {
    byte[] header = SampleFormat.npyHeader("uint8", List.of(10));
    String dict = new String(header, 10, header.length - 10, StandardCharsets.US_ASCII);
    assertTrue(dict.startsWith("{'descr': '|u1', 'fortran_order': False, 'shape': (10,), }"), dict);
  }

  @Test
  void unknownEncodingsAndIncompleteTensorsAreRefusedByName() {
    assertTrue(assertThrows(IllegalArgumentException.class, () -> SampleFormat.of("webp", null, List.of()))
        .getMessage().startsWith("unknown encoding webp (one of "));
    assertTrue(assertThrows(IllegalArgumentException.class, () -> SampleFormat.of("raw", "complex64", List.of(2)))
        .getMessage().contains("complex64"));
    assertTrue(assertThrows(IllegalArgumentException.class, () -> SampleFormat.of("raw", "float32", List.of()))
        .getMessage().contains("a shape"));
  }
}
