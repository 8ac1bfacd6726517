package io.ringfeed.alluxio;

import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Optional;
import java.util.UUID;

/**
 * How a dataset's samples look as files: the name's extension from the encoding, and for raw tensors an .npy header
 * before the stored bytes, so that {@code numpy.load} reads a file as it is.
 */
final class SampleFormat {
  /** numpy's names of the dtypes a raw dataset may declare (schema.RAW_DTYPES), little-endian as stored. */
  private static final Map<String, String> NPY_DESCR = Map.of(
      "uint8", "|u1", "int8", "|i1", "uint16", "<u2", "int16", "<i2", "int32", "<i4", "int64", "<i8",
      "float16", "<f2", "float32", "<f4", "float64", "<f8");
  private static final Map<String, String> EXTENSIONS = Map.of("jpeg", "jpg", "png", "png", "tiff", "tiff", "raw", "npy");

  private final String extension;
  private final byte[] header;

  private SampleFormat(String extension, byte[] header) {
    this.extension = extension;
    this.header = header;
  }

  /** The format of an encoding kind ("jpeg", "png", "tiff", "raw"); dtype and shape only for raw. */
  static SampleFormat of(String kind, String dtype, List<Integer> shape) {
    String extension = EXTENSIONS.get(kind);
    if (extension == null) {
      throw new IllegalArgumentException("unknown encoding " + kind + " (one of " + EXTENSIONS.keySet() + ")");
    }
    return new SampleFormat(extension, kind.equals("raw") ? npyHeader(dtype, shape) : new byte[0]);
  }

  /** Raw tensors have no class folders: their part lists the files flat, beside labels.csv. */
  boolean flat() {
    return header.length > 0;
  }

  String fileName(UUID uuid) {
    return uuid + "." + extension;
  }

  /** The UUID a file name stands for, if it is one of this format's names. */
  Optional<UUID> uuidOf(String fileName) {
    String suffix = "." + extension;
    if (!fileName.endsWith(suffix) || fileName.length() != 36 + suffix.length()) {
      return Optional.empty();
    }
    try {
      UUID uuid = UUID.fromString(fileName.substring(0, 36));
      return uuid.toString().equals(fileName.substring(0, 36)) ? Optional.of(uuid) : Optional.empty();
    } catch (IllegalArgumentException notAUuid) {
      return Optional.empty();
    }
  }

  long fileLength(long storedBytes) {
    return header.length + storedBytes;
  }

  /** The file's bytes: the header (raw tensors) and the stored sample. */
  byte[] fileBytes(byte[] stored) {
    if (header.length == 0) {
      return stored;
    }
    byte[] file = new byte[header.length + stored.length];
    System.arraycopy(header, 0, file, 0, header.length);
    System.arraycopy(stored, 0, file, header.length, stored.length);
    return file;
  }

  /** An .npy version 1.0 header; its length is a multiple of 64, as numpy writes it. */
  static byte[] npyHeader(String dtype, List<Integer> shape) {
    String descr = NPY_DESCR.get(dtype);
    if (descr == null || shape == null || shape.isEmpty()) {
      throw new IllegalArgumentException("a raw dataset needs a dtype (one of " + NPY_DESCR.keySet()
          + ") and a shape, not " + dtype + " " + shape);
    }
    StringBuilder dims = new StringBuilder();
    for (int dim : shape) {
      dims.append(dim).append(", ");
    }
    String tuple = shape.size() == 1 ? "(" + shape.get(0) + ",)" : "(" + dims.substring(0, dims.length() - 2) + ")";
    String dict = String.format(Locale.ROOT, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr, tuple);
    int unpadded = 10 + dict.length() + 1; // magic 6, version 2, length 2; the dictionary; '\n'
    int padded = (unpadded + 63) / 64 * 64;
    String text = dict + " ".repeat(padded - unpadded) + "\n";
    byte[] header = new byte[padded];
    byte[] magic = {(byte) 0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0};
    System.arraycopy(magic, 0, header, 0, magic.length);
    int length = text.length();
    header[8] = (byte) (length & 0xff);
    header[9] = (byte) (length >> 8);
    System.arraycopy(text.getBytes(StandardCharsets.US_ASCII), 0, header, 10, length);
    return header;
  }
}
