package io.ringfeed.alluxio;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;

/**
 * How to reach the ring, from the mount's options ({@code alluxio fs mount --option ringfeed.contact-points=...}).
 * The password is read from a file (a mounted Secret on Kubernetes), so it never sits in Alluxio's mount table.
 *
 * @param contactPoints host:port of one or more nodes
 * @param localDatacenter the datacenter to read from; empty: inferred from the contact points
 * @param username empty: the ring has no authentication
 * @param password read from {@code ringfeed.password-file}
 * @param tlsCaFile empty: plain CQL; else TLS, the nodes' certificates checked against this PEM CA
 * @param tlsServerName with TLS: the name the nodes' certificates must carry instead of their IP addresses
 */
record RingSettings(List<InetSocketAddress> contactPoints, Optional<String> localDatacenter, Optional<String> username,
                    Optional<String> password, Optional<Path> tlsCaFile, Optional<String> tlsServerName) {
  static final String CONTACT_POINTS = "ringfeed.contact-points";
  static final String LOCAL_DATACENTER = "ringfeed.local-datacenter";
  static final String USERNAME = "ringfeed.username";
  static final String PASSWORD_FILE = "ringfeed.password-file";
  static final String TLS_CA_FILE = "ringfeed.tls-ca-file";
  static final String TLS_SERVER_NAME = "ringfeed.tls-server-name";

  static RingSettings from(Map<String, ?> mountOptions) throws IOException {
    Map<String, String> options = new HashMap<>();
    mountOptions.forEach((key, value) -> options.put(key, String.valueOf(value)));
    String points = options.getOrDefault(CONTACT_POINTS, "").trim();
    if (points.isEmpty()) {
      throw new IOException("the mount needs --option " + CONTACT_POINTS + "=HOST:PORT[,HOST:PORT...]");
    }
    List<InetSocketAddress> contactPoints = new ArrayList<>();
    for (String point : points.split(",")) {
      String trimmed = point.trim();
      int colon = trimmed.lastIndexOf(':');
      int port = 9042;
      String host = trimmed;
      if (colon > 0 && !trimmed.endsWith("]")) {
        host = trimmed.substring(0, colon);
        try {
          port = Integer.parseInt(trimmed.substring(colon + 1));
        } catch (NumberFormatException notANumber) {
          throw new IOException(CONTACT_POINTS + ": " + trimmed + " has no port number after ':'");
        }
      }
      contactPoints.add(InetSocketAddress.createUnresolved(host.replace("[", "").replace("]", ""), port));
    }
    Optional<String> username = Optional.ofNullable(options.get(USERNAME)).filter(name -> !name.isBlank());
    Optional<String> password = Optional.empty();
    String passwordFile = options.get(PASSWORD_FILE);
    if (passwordFile != null && !passwordFile.isBlank()) {
      password = Optional.of(Files.readString(Path.of(passwordFile), StandardCharsets.UTF_8).strip());
    }
    if (username.isPresent() != password.isPresent()) {
      throw new IOException("give both " + USERNAME + " and " + PASSWORD_FILE + ", or neither");
    }
    Optional<Path> tlsCaFile = Optional.ofNullable(options.get(TLS_CA_FILE)).filter(f -> !f.isBlank()).map(Path::of);
    Optional<String> tlsServerName = Optional.ofNullable(options.get(TLS_SERVER_NAME)).filter(n -> !n.isBlank());
    if (tlsServerName.isPresent() && tlsCaFile.isEmpty()) {
      throw new IOException(TLS_SERVER_NAME + " is checked only with TLS: give " + TLS_CA_FILE + " too");
    }
    return new RingSettings(List.copyOf(contactPoints),
        Optional.ofNullable(options.get(LOCAL_DATACENTER)).filter(dc -> !dc.isBlank()), username, password,
        tlsCaFile, tlsServerName);
  }
}
