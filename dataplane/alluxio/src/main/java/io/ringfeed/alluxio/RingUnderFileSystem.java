package io.ringfeed.alluxio;

import alluxio.AlluxioURI;
import alluxio.conf.PropertyKey;
import alluxio.underfs.ConsistentUnderFileSystem;
import alluxio.underfs.UfsDirectoryStatus;
import alluxio.underfs.UfsFileStatus;
import alluxio.underfs.UfsStatus;
import alluxio.underfs.UnderFileSystemConfiguration;
import alluxio.underfs.options.CreateOptions;
import alluxio.underfs.options.DeleteOptions;
import alluxio.underfs.options.FileLocationOptions;
import alluxio.underfs.options.GetFileStatusOptions;
import alluxio.underfs.options.MkdirsOptions;
import alluxio.underfs.options.OpenOptions;

import java.io.ByteArrayInputStream;
import java.io.FileNotFoundException;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.UUID;
import java.util.concurrent.ConcurrentHashMap;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The ring as a read-only Alluxio under storage: {@code /<dataset>/<split>/<part>/<label>/<uuid>.<ext>} (images) and
 * {@code /<dataset>/<split>/<part>/<uuid>.npy} + {@code labels.csv} (raw tensors), for the newest version of each
 * split. Listings and lengths come from the catalog and the dataset's metadata (on the master); a file's bytes from
 * {@code data_by_uuid} when a worker first reads it. Nothing is ever written to the ring.
 */
public class RingUnderFileSystem extends ConsistentUnderFileSystem {
  private static final Logger LOG = LoggerFactory.getLogger(RingUnderFileSystem.class);
  private static final short DIRECTORY_MODE = 0555;
  private static final short FILE_MODE = 0444;
  /** The splits read from the catalog serve lookups this long (the master checks each file it is asked for). */
  private static final long SPLITS_TTL_MS = 1_000;

  private record TimedSplits(long readAtMs, Map<String, RingCatalog.Split> splits) {}

  private record PartKey(UUID splitId, String part) {}

  private final RingSettings settings;
  private final Optional<RingTls> tls;
  private volatile RingCatalog catalog;
  private final Map<String, RingCatalog.Dataset> datasets = new ConcurrentHashMap<>();
  private final Map<String, TimedSplits> splits = new ConcurrentHashMap<>();
  private final Map<UUID, SampleIndex> indexes = new ConcurrentHashMap<>();
  private final Map<PartKey, PartView> parts = new ConcurrentHashMap<>();

  RingUnderFileSystem(AlluxioURI uri, UnderFileSystemConfiguration conf) throws IOException {
    super(uri, conf);
    settings = RingSettings.from(conf.getMountSpecificConf());
    // The CA is read at mount time, so that a missing or unreadable file fails the mount, not a later read.
    tls = settings.tlsCaFile().isPresent()
        ? Optional.of(new RingTls(settings.tlsCaFile().get(), settings.tlsServerName())) : Optional.empty();
  }

  /** Connects on first use: the master creates a UFS for a mount before any path is asked for. */
  private RingCatalog catalog() {
    RingCatalog connected = catalog;
    if (connected == null) {
      synchronized (this) {
        if (catalog == null) {
          catalog = RingCatalog.connect(settings, tls);
        }
        connected = catalog;
      }
    }
    return connected;
  }

  @Override
  public String getUnderFSType() {
    return "ringfeed";
  }

  // -- the tree ------------------------------------------------------------------------------------------------

  private Optional<RingCatalog.Dataset> dataset(String name) throws IOException {
    RingCatalog.Dataset known = datasets.get(name);
    if (known != null) {
      return Optional.of(known);
    }
    Optional<RingCatalog.Dataset> found = catalog().dataset(name);
    found.ifPresent(dataset -> datasets.put(name, dataset));
    return found;
  }

  private Map<String, RingCatalog.Split> splitsOf(String dataset, long maxAgeMs) {
    long now = System.currentTimeMillis();
    TimedSplits timed = splits.get(dataset);
    if (timed == null || now - timed.readAtMs() > maxAgeMs) {
      timed = new TimedSplits(now, catalog().splits(dataset));
      splits.put(dataset, timed);
    }
    return timed.splits();
  }

  /** A split not among those read last is looked for in the catalog again: it may have been made since. */
  private Optional<RingCatalog.Split> split(RingPath path) {
    RingCatalog.Split known = splitsOf(path.dataset(), SPLITS_TTL_MS).get(path.split());
    return Optional.ofNullable(known != null ? known : splitsOf(path.dataset(), 0).get(path.split()));
  }

  private PartView part(RingCatalog.Dataset dataset, RingCatalog.Split split, String part) throws IOException {
    PartKey key = new PartKey(split.id(), part);
    PartView view = parts.get(key);
    if (view == null) {
      SampleIndex index = indexes.computeIfAbsent(dataset.id(), id -> catalog().index(dataset));
      UUID[] members = catalog().members(split, part);
      view = new PartView(members, index, dataset.format(), dataset.labelNames());
      if (view.missing() > 0) {
        // Members the scan did not see were ingested after it (a split made later): scan the dataset again, once.
        index = catalog().index(dataset);
        indexes.put(dataset.id(), index);
        view = new PartView(members, index, dataset.format(), dataset.labelNames());
      }
      if (view.missing() > 0) {
        LOG.warn("{}/{}/{}: {} members are no longer in the dataset and are left out", dataset.name(), split.name(),
            part, view.missing());
      }
      parts.put(key, view);
    }
    return view;
  }

  /** What a path is: a directory's children, or a file's status; empty when the tree has no such path. */
  private sealed interface Node permits Directory, File {}

  private record Directory(long modifiedMs, List<UfsStatus> children) implements Node {}

  private record File(UfsFileStatus status, RingCatalog.Dataset dataset, PartView part,
                      PartView.Sample sample) implements Node {}

  private Optional<Node> resolve(String ufsPath, boolean withChildren) throws IOException {
    RingPath path = RingPath.parse(ufsPath);
    if (path.depth() == 0) {
      List<UfsStatus> children = new ArrayList<>();
      if (withChildren) {
        for (String name : catalog().datasetNames()) {
          Optional<RingCatalog.Dataset> dataset = dataset(name);
          dataset.ifPresent(found -> children.add(directory(name, found.createdAtMs())));
        }
      }
      return Optional.of(new Directory(0, children));
    }
    Optional<RingCatalog.Dataset> found = dataset(path.dataset());
    if (found.isEmpty()) {
      return Optional.empty();
    }
    RingCatalog.Dataset dataset = found.get();
    if (path.depth() == 1) {
      List<UfsStatus> children = new ArrayList<>();
      if (withChildren) {
        // A listing reaches the extension only where FUSE's metadata cache misses it: the catalog as it is now.
        splitsOf(dataset.name(), 0).values()
            .forEach(split -> children.add(directory(split.name(), split.createdAtMs())));
      }
      return Optional.of(new Directory(dataset.createdAtMs(), children));
    }
    // A split's listing, like the dataset's, is the catalog as it is now: a version made since the last read (even
    // within SPLITS_TTL_MS of it) replaces the listed one on `ringfeed cache refresh`.
    Optional<RingCatalog.Split> maybeSplit = withChildren && path.depth() == 2
        ? Optional.ofNullable(splitsOf(path.dataset(), 0).get(path.split()))
        : split(path);
    if (maybeSplit.isEmpty()) {
      return Optional.empty();
    }
    RingCatalog.Split split = maybeSplit.get();
    long modified = split.createdAtMs();
    if (path.depth() == 2) {
      List<UfsStatus> children = new ArrayList<>();
      split.partSizes().keySet().forEach(part -> children.add(directory(part, modified)));
      return Optional.of(new Directory(modified, children));
    }
    if (!split.partSizes().containsKey(path.part())) {
      return Optional.empty();
    }
    PartView part = part(dataset, split, path.part());
    if (path.depth() == 3) {
      List<UfsStatus> children = new ArrayList<>();
      if (withChildren) {
        if (part.format().flat()) {
          children.add(labelsFile(split, path.part(), part));
          part.flat().forEach(sample -> children.add(sampleFile(part, sample, modified)));
        } else {
          part.folders().keySet().forEach(folder -> children.add(directory(folder, modified)));
        }
      }
      return Optional.of(new Directory(modified, children));
    }
    if (part.format().flat()) {
      if (path.depth() != 4) {
        return Optional.empty();
      }
      if (path.name().equals(PartView.LABELS_FILE)) {
        return Optional.of(new File(labelsFile(split, path.part(), part), dataset, part, null));
      }
      return part.sample(null, path.name())
          .map(sample -> new File(sampleFile(part, sample, modified), dataset, part, sample));
    }
    String folder = path.segment(3);
    List<PartView.Sample> samples = part.folders().get(folder);
    if (samples == null) {
      return Optional.empty();
    }
    if (path.depth() == 4) {
      List<UfsStatus> children = new ArrayList<>();
      if (withChildren) {
        samples.forEach(sample -> children.add(sampleFile(part, sample, modified)));
      }
      return Optional.of(new Directory(modified, children));
    }
    if (path.depth() != 5) {
      return Optional.empty();
    }
    return part.sample(folder, path.name())
        .map(sample -> new File(sampleFile(part, sample, modified), dataset, part, sample));
  }

  private UfsDirectoryStatus directory(String name, long modifiedMs) {
    return new UfsDirectoryStatus(name, "", "", DIRECTORY_MODE, modifiedMs);
  }

  private UfsFileStatus file(String name, String contentHash, long length, long modifiedMs) {
    return new UfsFileStatus(name, contentHash, length, modifiedMs, "", "", FILE_MODE,
        mUfsConf.getBytes(PropertyKey.USER_BLOCK_SIZE_BYTES_DEFAULT));
  }

  private UfsFileStatus labelsFile(RingCatalog.Split split, String partName, PartView part) {
    return file(PartView.LABELS_FILE, "labels:" + split.id() + ":" + partName, part.labelsCsvLength(),
        split.createdAtMs());
  }

  private UfsFileStatus sampleFile(PartView part, PartView.Sample sample, long modifiedMs) {
    long length = part.format().fileLength(sample.storedBytes());
    return file(part.format().fileName(sample.uuid()), sample.uuid() + ":" + length, length, modifiedMs);
  }

  // -- reads -----------------------------------------------------------------------------------------------------

  @Override
  public UfsStatus getStatus(String path) throws IOException {
    Node node = resolve(path, false).orElseThrow(() -> new FileNotFoundException(path));
    if (node instanceof File file) {
      return file.status();
    }
    return directory(RingPath.parse(path).name(), ((Directory) node).modifiedMs());
  }

  @Override
  public UfsFileStatus getFileStatus(String path, GetFileStatusOptions options) throws IOException {
    if (resolve(path, false).orElseThrow(() -> new FileNotFoundException(path)) instanceof File file) {
      return file.status();
    }
    throw new FileNotFoundException(path + " is a directory");
  }

  @Override
  public UfsDirectoryStatus getDirectoryStatus(String path) throws IOException {
    if (resolve(path, false).orElseThrow(() -> new FileNotFoundException(path)) instanceof Directory directory) {
      return directory(RingPath.parse(path).name(), directory.modifiedMs());
    }
    throw new FileNotFoundException(path + " is a file");
  }

  @Override
  public UfsStatus[] listStatus(String path) throws IOException {
    // Alluxio's contract: null for a path that is not a directory.
    if (resolve(path, true).orElse(null) instanceof Directory directory) {
      return directory.children().toArray(new UfsStatus[0]);
    }
    return null;
  }

  @Override
  public boolean exists(String path) throws IOException {
    return resolve(path, false).isPresent();
  }

  @Override
  public boolean isDirectory(String path) throws IOException {
    return resolve(path, false).orElse(null) instanceof Directory;
  }

  @Override
  public boolean isFile(String path) throws IOException {
    return resolve(path, false).orElse(null) instanceof File;
  }

  @Override
  public long getBlockSizeByte(String path) throws IOException {
    return getFileStatus(path).getBlockSize();
  }

  /**
   * A worker reads a sample straight by the UUID in its name (no listing needed: the master has checked the path).
   */
  @Override
  public InputStream open(String path, OpenOptions options) throws IOException {
    RingPath parsed = RingPath.parse(path);
    if (parsed.depth() < 4) {
      throw new FileNotFoundException(path + " is not a file");
    }
    RingCatalog.Dataset dataset = dataset(parsed.dataset()).orElseThrow(() -> new FileNotFoundException(path));
    byte[] bytes;
    if (dataset.format().flat() && parsed.depth() == 4 && parsed.name().equals(PartView.LABELS_FILE)) {
      File file = (File) resolve(path, false).orElseThrow(() -> new FileNotFoundException(path));
      bytes = file.part().labelsCsv();
    } else {
      UUID uuid = dataset.format().uuidOf(parsed.name()).orElseThrow(() -> new FileNotFoundException(path));
      bytes = dataset.format().fileBytes(catalog().sampleBytes(dataset, uuid));
    }
    ByteArrayInputStream stream = new ByteArrayInputStream(bytes);
    stream.skip(options.getOffset());
    return stream;
  }

  @Override
  public List<String> getFileLocations(String path) {
    return new ArrayList<>();
  }

  @Override
  public List<String> getFileLocations(String path, FileLocationOptions options) {
    return getFileLocations(path);
  }

  @Override
  public long getSpace(String path, SpaceType type) {
    return -1; // unknown: the ring's size is not the tree's
  }

  @Override
  public void connectFromMaster(String hostname) {}

  @Override
  public void connectFromWorker(String hostname) {}

  @Override
  public void cleanup() {}

  @Override
  public void close() {
    RingCatalog connected = catalog;
    if (connected != null) {
      connected.close();
    }
  }

  // -- the ring is read-only through Alluxio -------------------------------------------------------------------

  private static IOException readOnly(String what, String path) {
    return new IOException(what + " " + path + ": the ring's tree is read-only (write with `ringfeed ingest`)");
  }

  @Override
  public OutputStream create(String path, CreateOptions options) throws IOException {
    throw readOnly("create", path);
  }

  @Override
  public boolean deleteDirectory(String path, DeleteOptions options) throws IOException {
    throw readOnly("delete", path);
  }

  @Override
  public boolean deleteFile(String path) throws IOException {
    throw readOnly("delete", path);
  }

  @Override
  public boolean mkdirs(String path, MkdirsOptions options) throws IOException {
    throw readOnly("mkdir", path);
  }

  @Override
  public boolean renameDirectory(String src, String dst) throws IOException {
    throw readOnly("rename", src);
  }

  @Override
  public boolean renameFile(String src, String dst) throws IOException {
    throw readOnly("rename", src);
  }

  @Override
  public void setOwner(String path, String user, String group) throws IOException {
    throw readOnly("chown", path);
  }

  @Override
  public void setMode(String path, short mode) throws IOException {
    throw readOnly("chmod", path);
  }

  @Override
  public boolean supportsFlush() {
    return false;
  }
}
