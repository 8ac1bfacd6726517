package io.ringfeed.alluxio;

import com.datastax.oss.driver.api.core.CqlSession;
import com.datastax.oss.driver.api.core.CqlSessionBuilder;
import com.datastax.oss.driver.api.core.config.DefaultDriverOption;
import com.datastax.oss.driver.api.core.config.DriverConfigLoader;
import com.datastax.oss.driver.api.core.cql.BoundStatement;
import com.datastax.oss.driver.api.core.cql.PreparedStatement;
import com.datastax.oss.driver.api.core.cql.ResultSet;
import com.datastax.oss.driver.api.core.cql.Row;
import com.datastax.oss.driver.api.core.cql.SimpleStatement;
import com.datastax.oss.driver.internal.core.loadbalancing.DcInferringLoadBalancingPolicy;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

import java.io.FileNotFoundException;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.UUID;
import java.util.concurrent.ConcurrentHashMap;

/**
 * What the tree is made of, read from the ring: Ringfeed's catalog (datasets, splits and their UUID chunks), each
 * dataset's {@code metadata_by_nat} (labels and sizes) and {@code data_by_uuid} (the bytes). One session per mount.
 */
final class RingCatalog implements AutoCloseable {
  static final String CATALOG = "ringfeed";
  private static final ObjectMapper JSON = new ObjectMapper();

  /** A dataset as the catalog records it. */
  record Dataset(String name, String keyspace, UUID id, SampleFormat format, List<String> labelNames,
                 long createdAtMs) {}

  /** The newest version of a split, with its parts in order and their sizes. */
  record Split(String dataset, String name, int version, UUID id, long createdAtMs,
               Map<String, Long> partSizes, int chunkRows) {}

  private final CqlSession session;
  private final PreparedStatement datasetByName;
  private final PreparedStatement splitsOfDataset;
  private final PreparedStatement splitChunk;
  private final Map<String, PreparedStatement> sampleBytesByKeyspace = new ConcurrentHashMap<>();

  private RingCatalog(CqlSession session) {
    this.session = session;
    datasetByName = session.prepare("SELECT name, keyspace_name, dataset_id, schema_json, created_at FROM "
        + CATALOG + ".datasets WHERE name = ?");
    splitsOfDataset = session.prepare("SELECT name, version, split_id, created_at, parts, part_sizes, chunk_rows "
        + "FROM " + CATALOG + ".splits WHERE dataset = ?");
    splitChunk = session.prepare("SELECT uuids FROM " + CATALOG + ".split_chunks WHERE split_id = ? AND part = ? "
        + "AND chunk = ?");
  }

  static RingCatalog connect(RingSettings settings, Optional<RingTls> tls) {
    // The driver reads its defaults (reference.conf) through this class loader: Alluxio loads the extension in a
    // class loader of its own, which the thread's context class loader does not see.
    ClassLoader extension = RingCatalog.class.getClassLoader();
    var config = DriverConfigLoader.programmaticBuilder(extension)
        .withDuration(DefaultDriverOption.REQUEST_TIMEOUT, Duration.ofSeconds(30))
        .withInt(DefaultDriverOption.REQUEST_PAGE_SIZE, 5000);
    if (settings.localDatacenter().isEmpty()) {
      config = config.withClass(DefaultDriverOption.LOAD_BALANCING_POLICY_CLASS, DcInferringLoadBalancingPolicy.class);
    }
    CqlSessionBuilder builder = CqlSession.builder().withClassLoader(extension).withConfigLoader(config.build())
        // Resolved here, at the first use of the mount, not when its options were read.
        .addContactPoints(settings.contactPoints().stream()
            .map(point -> new InetSocketAddress(point.getHostString(), point.getPort())).toList());
    settings.localDatacenter().ifPresent(builder::withLocalDatacenter);
    if (settings.username().isPresent()) {
      builder = builder.withAuthCredentials(settings.username().get(), settings.password().orElseThrow());
    }
    if (tls.isPresent()) {
      builder = builder.withSslEngineFactory(tls.get());
    }
    return new RingCatalog(builder.build());
  }

  List<String> datasetNames() {
    List<String> names = new ArrayList<>();
    for (Row row : session.execute("SELECT name FROM " + CATALOG + ".datasets")) {
      names.add(row.getString("name"));
    }
    names.sort(null);
    return names;
  }

  Optional<Dataset> dataset(String name) throws IOException {
    Row row = session.execute(datasetByName.bind(name)).one();
    if (row == null) {
      return Optional.empty();
    }
    JsonNode schema = JSON.readTree(row.getString("schema_json"));
    JsonNode encoding = schema.path("encoding");
    List<Integer> shape = new ArrayList<>();
    encoding.path("shape").forEach(dim -> shape.add(dim.asInt()));
    List<String> labelNames = new ArrayList<>();
    schema.path("label_names").forEach(label -> labelNames.add(label.asText()));
    String dtype = encoding.path("dtype").isNull() ? null : encoding.path("dtype").asText(null);
    return Optional.of(new Dataset(name, row.getString("keyspace_name"), row.getUuid("dataset_id"),
        SampleFormat.of(encoding.path("kind").asText(), dtype, shape), List.copyOf(labelNames),
        millis(row.getInstant("created_at"))));
  }

  /** The newest version of each split of a dataset, by name. */
  Map<String, Split> splits(String dataset) {
    Map<String, Split> newest = new LinkedHashMap<>();
    for (Row row : session.execute(splitsOfDataset.bind(dataset))) {
      String name = row.getString("name");
      // Rows come in name order, newest version first (the table's clustering order).
      if (newest.containsKey(name)) {
        continue;
      }
      List<String> parts = row.getList("parts", String.class);
      List<Long> sizes = row.getList("part_sizes", Long.class);
      Map<String, Long> partSizes = new LinkedHashMap<>();
      for (int i = 0; i < parts.size(); i++) {
        partSizes.put(parts.get(i), sizes.get(i));
      }
      newest.put(name, new Split(dataset, name, row.getInt("version"), row.getUuid("split_id"),
          millis(row.getInstant("created_at")), partSizes, row.getInt("chunk_rows")));
    }
    return newest;
  }

  /** The UUIDs of one part, in the split's order (16 bytes each in the chunks, as CQL writes a uuid). */
  UUID[] members(Split split, String part) throws IOException {
    long size = split.partSizes().get(part);
    UUID[] members = new UUID[Math.toIntExact(size)];
    int filled = 0;
    for (int chunk = 0; filled < size; chunk++) {
      Row row = session.execute(splitChunk.bind(split.id(), part, chunk)).one();
      if (row == null) {
        throw new IOException("split " + split.dataset() + "/" + split.name() + " v" + split.version() + ": chunk "
            + chunk + " of part " + part + " is missing");
      }
      ByteBuffer uuids = row.getByteBuffer("uuids");
      while (uuids.remaining() >= 16 && filled < size) {
        members[filled++] = new UUID(uuids.getLong(), uuids.getLong());
      }
    }
    return members;
  }

  /** Scans the dataset's metadata_by_nat: every sample's label and stored size. */
  SampleIndex index(Dataset dataset) {
    SampleIndex.Builder builder = new SampleIndex.Builder();
    SimpleStatement scan = SimpleStatement.newInstance("SELECT uuid, label, sample_bytes FROM "
        + dataset.keyspace() + ".metadata_by_nat");
    for (Row row : session.execute(scan)) {
      builder.add(row.getUuid("uuid"), row.getInt("label"), row.getInt("sample_bytes"));
    }
    return builder.build();
  }

  /** A sample's stored bytes. */
  byte[] sampleBytes(Dataset dataset, UUID uuid) throws IOException {
    PreparedStatement select = sampleBytesByKeyspace.computeIfAbsent(dataset.keyspace(),
        keyspace -> session.prepare("SELECT data FROM " + keyspace + ".data_by_uuid WHERE uuid = ?"));
    BoundStatement bound = select.bind(uuid).setIdempotent(true);
    ResultSet result = session.execute(bound);
    Row row = result.one();
    if (row == null) {
      throw new FileNotFoundException("sample " + uuid + " of dataset " + dataset.name() + " is not in the ring");
    }
    ByteBuffer data = row.getByteBuffer("data");
    byte[] bytes = new byte[data.remaining()];
    data.get(bytes);
    return bytes;
  }

  private static long millis(Instant instant) {
    return instant == null ? 0 : instant.toEpochMilli();
  }

  @Override
  public void close() {
    session.close();
  }
}
