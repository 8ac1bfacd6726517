package io.ringfeed.alluxio;

import com.datastax.oss.driver.api.core.metadata.EndPoint;
import com.datastax.oss.driver.api.core.ssl.SslEngineFactory;
import java.io.IOException;
import java.io.InputStream;
import java.net.InetSocketAddress;
import java.net.SocketAddress;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.GeneralSecurityException;
import java.security.KeyStore;
import java.security.cert.Certificate;
import java.security.cert.CertificateFactory;
import java.util.Collection;
import java.util.Optional;
import javax.net.ssl.SSLContext;
import javax.net.ssl.SSLEngine;
import javax.net.ssl.SSLParameters;
import javax.net.ssl.TrustManagerFactory;

/**
 * TLS to the ring, as Ringfeed's other clients speak it: each node's certificate must chain to the CA of a PEM file
 * and name the node's IP address, or {@code serverName} where one is given (every node of a Ring carries its
 * Service's name: Pod addresses are unknown when the certificates are made). Java's HTTPS endpoint identification
 * does the name check, on the host the engine is made for.
 */
final class RingTls implements SslEngineFactory {
  private final SSLContext context;
  private final Optional<String> serverName;

  RingTls(Path caFile, Optional<String> serverName) throws IOException {
    this.context = trusting(caFile);
    this.serverName = serverName;
  }

  static SSLContext trusting(Path caFile) throws IOException {
    try (InputStream pem = Files.newInputStream(caFile)) {
      Collection<? extends Certificate> authorities = CertificateFactory.getInstance("X.509").generateCertificates(pem);
      if (authorities.isEmpty()) {
        throw new IOException(caFile + " holds no PEM certificate");
      }
      KeyStore trusted = KeyStore.getInstance(KeyStore.getDefaultType());
      trusted.load(null, null);
      int index = 0;
      for (Certificate authority : authorities) {
        trusted.setCertificateEntry("ca-" + index++, authority);
      }
      TrustManagerFactory trust = TrustManagerFactory.getInstance(TrustManagerFactory.getDefaultAlgorithm());
      trust.init(trusted);
      SSLContext context = SSLContext.getInstance("TLS");
      context.init(null, trust.getTrustManagers(), null);
      return context;
    } catch (GeneralSecurityException unreadable) {
      throw new IOException("TLS: cannot read the CA certificate " + caFile + ": " + unreadable.getMessage(),
          unreadable);
    }
  }

  @Override
  public SSLEngine newSslEngine(EndPoint remoteEndpoint) {
    SocketAddress address = remoteEndpoint.resolve();
    int port = address instanceof InetSocketAddress inet ? inet.getPort() : 9042;
    String host = serverName.orElseGet(() -> address instanceof InetSocketAddress inet
        ? inet.getAddress().getHostAddress() : address.toString());
    SSLEngine engine = context.createSSLEngine(host, port);
    engine.setUseClientMode(true);
    SSLParameters parameters = engine.getSSLParameters();
    parameters.setEndpointIdentificationAlgorithm("HTTPS");
    engine.setSSLParameters(parameters);
    return engine;
  }

  @Override
  public void close() {}
}
