package io.ringfeed.alluxio;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import alluxio.conf.Configuration;
import alluxio.underfs.UfsDirectoryStatus;
import alluxio.underfs.UfsFileStatus;
import alluxio.underfs.UfsStatus;
import alluxio.underfs.UnderFileSystem;
import alluxio.underfs.UnderFileSystemConfiguration;
import alluxio.underfs.options.CreateOptions;
import alluxio.underfs.options.OpenOptions;

import java.io.FileNotFoundException;
import java.io.IOException;
import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.HexFormat;
import java.util.Map;
import java.util.TreeMap;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * The UFS against a real Cassandra node holding datasets that dataplane/tests/integration/test_alluxio_ufs.py
 * ingested; that test passes the node and a manifest of the tree it expects (path, length and SHA-256 of each file,
 * from the source files), and fails unless these tests ran.
 */
class RingUnderFileSystemIT {
  private static final String ROOT = "ringfeed://ring/";
  private static UnderFileSystem ufs;
  private static Map<String, String[]> expected;
  private static String dataset;

  @BeforeAll
  static void mount() throws IOException {
    String contactPoint = System.getProperty("ringfeed.test.contact-point", "");
    String manifest = System.getProperty("ringfeed.test.manifest", "");
    if (contactPoint.isBlank() || contactPoint.startsWith("${") || manifest.isBlank() || manifest.startsWith("${")) {
      throw new IllegalStateException("run through dataplane/tests/integration/test_alluxio_ufs.py: it starts the "
          + "node and passes -Dringfeed.test.contact-point and -Dringfeed.test.manifest");
    }
    expected = new TreeMap<>();
    for (String line : Files.readAllLines(Path.of(manifest))) {
      String[] fields = line.split("\t");
      expected.put(fields[0], new String[] {fields[1], fields[2]});
    }
    dataset = expected.keySet().iterator().next().split("/")[1];
    Map<String, String> options = new TreeMap<>(Map.of(RingSettings.CONTACT_POINTS, contactPoint));
    for (String option : new String[] {RingSettings.TLS_CA_FILE, RingSettings.TLS_SERVER_NAME}) {
      String value = System.getProperty("ringfeed.test." + option.substring("ringfeed.".length()), "");
      if (!value.isBlank() && !value.startsWith("${")) {
        options.put(option, value);  // TLS, as the test passes it
      }
    }
    UnderFileSystemConfiguration conf = UnderFileSystemConfiguration.defaults(Configuration.global())
        .createMountSpecificConf(options);
    ufs = UnderFileSystem.Factory.create(ROOT, conf);
    assertEquals("ringfeed", ufs.getUnderFSType(), "Alluxio found the factory through META-INF/services");
  }

  @AfterAll
  static void unmount() throws IOException {
    if (ufs != null) {
      ufs.close();
    }
  }

  private static void walk(String path, Map<String, UfsFileStatus> files) throws IOException {
    UfsStatus[] children = ufs.listStatus(ROOT + path);
    assertTrue(children != null, path + " lists as a directory");
    for (UfsStatus child : children) {
      String childPath = path + "/" + child.getName();
      if (child instanceof UfsDirectoryStatus) {
        walk(childPath, files);
      } else {
        files.put(childPath, (UfsFileStatus) child);
      }
    }
  }

  private static String sha256(byte[] bytes) {
    try {
      return HexFormat.of().formatHex(MessageDigest.getInstance("SHA-256").digest(bytes));
    } catch (NoSuchAlgorithmException impossible) {
      throw new AssertionError(impossible);
    }
  }

  @Test
  void theDatasetsTreeHoldsExactlyTheSplitsFilesWithTheirLengths() throws IOException {
    Map<String, UfsFileStatus> files = new TreeMap<>();
    walk("/" + dataset, files);
    assertEquals(expected.keySet(), files.keySet());
    for (Map.Entry<String, UfsFileStatus> file : files.entrySet()) {
      assertEquals(Long.parseLong(expected.get(file.getKey())[0]), file.getValue().getContentLength(), file.getKey());
    }
    boolean listed = false;
    for (UfsStatus status : ufs.listStatus(ROOT)) {
      listed |= status.getName().equals(dataset) && status.isDirectory();
    }
    assertTrue(listed, "the root lists the dataset");
  }

  @Test
  void everyFileReadsTheSourceBytesWholeAndFromAnOffset() throws IOException {
    for (Map.Entry<String, String[]> file : expected.entrySet()) {
      byte[] whole;
      try (InputStream in = ufs.open(ROOT + file.getKey(), OpenOptions.defaults())) {
        whole = in.readAllBytes();
      }
      assertEquals(file.getValue()[1], sha256(whole), file.getKey());
      UfsFileStatus status = ufs.getFileStatus(ROOT + file.getKey());
      assertEquals(whole.length, status.getContentLength());
      int offset = whole.length / 3;
      try (InputStream in = ufs.open(ROOT + file.getKey(), OpenOptions.defaults().setOffset(offset))) {
        assertArrayEquals(java.util.Arrays.copyOfRange(whole, offset, whole.length), in.readAllBytes());
      }
    }
  }

  @Test
  void pathsOutsideTheTreeAreNotFoundAndFilesAreNotDirectories() throws IOException {
    String someFile = expected.keySet().iterator().next();
    assertTrue(ufs.isFile(ROOT + someFile));
    assertFalse(ufs.isDirectory(ROOT + someFile));
    assertNull(ufs.listStatus(ROOT + someFile), "Alluxio's contract: a file has no listing");
    String parent = someFile.substring(0, someFile.lastIndexOf('/'));
    assertTrue(ufs.isDirectory(ROOT + parent));
    for (String missing : new String[] {"/no_such_dataset", "/" + dataset + "/no_such_split",
        parent + "/00000000-0000-0000-0000-000000000000.jpg", parent + "/not-a-sample.txt", someFile + "/below"}) {
      assertFalse(ufs.exists(ROOT + missing), missing);
      assertThrows(FileNotFoundException.class, () -> ufs.getStatus(ROOT + missing), missing);
      assertNull(ufs.listStatus(ROOT + missing), missing);
    }
  }

  @Test
  void writesAreRefusedWithTheReason() {
    String someFile = expected.keySet().iterator().next();
    IOException refused = assertThrows(IOException.class, () -> ufs.deleteFile(ROOT + someFile));
    assertTrue(refused.getMessage().contains("read-only"), refused.getMessage());
    assertThrows(IOException.class, () -> ufs.create(ROOT + "/" + dataset + "/new", CreateOptions.defaults(
        Configuration.global())));
    assertThrows(IOException.class, () -> ufs.renameFile(ROOT + someFile, ROOT + someFile + ".moved"));
  }
}
