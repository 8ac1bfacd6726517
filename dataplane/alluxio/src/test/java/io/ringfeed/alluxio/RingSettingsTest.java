package io.ringfeed.alluxio;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Map;
import java.util.Optional;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class RingSettingsTest {
  @Test
  void contactPointsTakeTheCqlPortUnlessTheyNameOne() throws IOException {
    RingSettings settings = RingSettings.from(Map.of(RingSettings.CONTACT_POINTS, "10.0.0.1, ring.ns.svc:9142 "));
    assertEquals("10.0.0.1", settings.contactPoints().get(0).getHostString());
    assertEquals(9042, settings.contactPoints().get(0).getPort());
    assertEquals("ring.ns.svc", settings.contactPoints().get(1).getHostString());
    assertEquals(9142, settings.contactPoints().get(1).getPort());
    assertEquals(Optional.empty(), settings.localDatacenter());
    assertEquals(Optional.empty(), settings.username());
  }

  @Test
  void thePasswordComesFromItsFileNeverFromTheOptions(@TempDir Path dir) throws IOException {
    Path secret = dir.resolve("password");
    Files.writeString(secret, "s3cret\n");
    RingSettings settings = RingSettings.from(Map.of(RingSettings.CONTACT_POINTS, "10.0.0.1",
        RingSettings.LOCAL_DATACENTER, "dc1", RingSettings.USERNAME, "reader",
        RingSettings.PASSWORD_FILE, secret.toString()));
    assertEquals(Optional.of("dc1"), settings.localDatacenter());
    assertEquals(Optional.of("reader"), settings.username());
    assertEquals(Optional.of("s3cret"), settings.password());
  }

  @Test
  void incompleteOptionsAreRefusedWithWhatIsMissing() {
    IOException noPoints = assertThrows(IOException.class, () -> RingSettings.from(Map.of()));
    assertTrue(noPoints.getMessage().contains(RingSettings.CONTACT_POINTS), noPoints.getMessage());
    IOException badPort = assertThrows(IOException.class,
        () -> RingSettings.from(Map.of(RingSettings.CONTACT_POINTS, "10.0.0.1:cql")));
    assertTrue(badPort.getMessage().contains("no port number"), badPort.getMessage());
    IOException halfLogin = assertThrows(IOException.class, () -> RingSettings.from(Map.of(
        RingSettings.CONTACT_POINTS, "10.0.0.1", RingSettings.USERNAME, "reader")));
    assertTrue(halfLogin.getMessage().contains("or neither"), halfLogin.getMessage());
  }

  @Test
  void tlsTakesACaFileAndOptionallyTheNameTheNodesCarry(@TempDir Path dir) throws IOException {
    RingSettings plain = RingSettings.from(Map.of(RingSettings.CONTACT_POINTS, "10.0.0.1"));
    assertEquals(Optional.empty(), plain.tlsCaFile());
    RingSettings named = RingSettings.from(Map.of(RingSettings.CONTACT_POINTS, "ring.ns.svc",
        RingSettings.TLS_CA_FILE, "/etc/ringfeed/tls/ca.crt", RingSettings.TLS_SERVER_NAME, "ring.ns.svc"));
    assertEquals(Optional.of(Path.of("/etc/ringfeed/tls/ca.crt")), named.tlsCaFile());
    assertEquals(Optional.of("ring.ns.svc"), named.tlsServerName());
    IOException nameWithoutTls = assertThrows(IOException.class, () -> RingSettings.from(Map.of(
        RingSettings.CONTACT_POINTS, "10.0.0.1", RingSettings.TLS_SERVER_NAME, "ring.ns.svc")));
    assertTrue(nameWithoutTls.getMessage().contains(RingSettings.TLS_CA_FILE), nameWithoutTls.getMessage());
    Path notPem = dir.resolve("ca.crt");
    Files.writeString(notPem, "not a certificate\n");
    IOException unreadable = assertThrows(IOException.class, () -> new RingTls(notPem, Optional.empty()));
    assertTrue(unreadable.getMessage().contains("ca.crt"), unreadable.getMessage());
  }
}
