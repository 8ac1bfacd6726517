package io.ringfeed.alluxio.fuse;

import alluxio.AlluxioURI;
import alluxio.client.file.FileSystem;
import alluxio.client.file.FileSystemContext;
import alluxio.conf.AlluxioConfiguration;
import alluxio.conf.Configuration;
import alluxio.conf.InstancedConfiguration;
import alluxio.conf.PropertyKey;
import alluxio.conf.Source;
import alluxio.fuse.AlluxioFuseUtils;
import alluxio.fuse.AlluxioJniFuseFileSystem;
import alluxio.fuse.FuseSignalHandler;
import alluxio.fuse.FuseWebServer;
import alluxio.fuse.options.FuseOptions;
import alluxio.jnifuse.LibFuse;
import alluxio.metrics.MetricsSystem;
import alluxio.util.CommonUtils;
import alluxio.util.network.NetworkAddressUtils;
import com.google.common.cache.LoadingCache;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import sun.misc.Signal;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

/**
 * The cache tier's FUSE process: Alluxio's FUSE launcher ({@code alluxio.fuse.AlluxioFuse}) with the same command
 * line, mounting a {@link ZeroMessageOpenFileSystem} instead of Alluxio's own file system.
 *
 * <p>Usage: {@code RingFuse -m MOUNT_POINT -a ALLUXIO_PATH [-o MOUNT_OPTION]...}
 */
public final class RingFuse {
  private static final Logger LOG = LoggerFactory.getLogger(RingFuse.class);

  private RingFuse() {}

  public static void main(String[] args) {
    InstancedConfiguration settings = Configuration.modifiableGlobal();
    try {
      applyArguments(args, settings);
    } catch (IllegalArgumentException usage) {
      System.err.println("RingFuse: " + usage.getMessage()
          + "\nusage: RingFuse -m MOUNT_POINT -a ALLUXIO_PATH [-o MOUNT_OPTION]...");
      System.exit(2);
    }
    AlluxioConfiguration conf = Configuration.global();
    FuseOptions fuseOptions = FuseOptions.create(conf, false);
    FileSystemContext context = FileSystemContext.create(conf);
    conf = AlluxioFuseUtils.tryLoadingConfigFromMaster(context);
    CommonUtils.PROCESS_TYPE.set(CommonUtils.ProcessType.CLIENT);
    MetricsSystem.startSinks(conf.getString(PropertyKey.METRICS_CONF_FILE));
    if (conf.getBoolean(PropertyKey.FUSE_WEB_ENABLED)) {
      // Its /metrics/prometheus/ is what the tier's PodMonitor scrapes.
      new FuseWebServer(NetworkAddressUtils.ServiceType.FUSE_WEB.getServiceName(),
          NetworkAddressUtils.getBindAddress(NetworkAddressUtils.ServiceType.FUSE_WEB, conf)).start();
    }
    try (FileSystem fileSystem = FileSystem.Factory.create(context, fuseOptions.getFileSystemOptions())) {
      LibFuse.loadLibrary(AlluxioFuseUtils.getLibfuseVersion(conf));
      Path mountPoint = Path.of(conf.getString(PropertyKey.FUSE_MOUNT_POINT));
      LoadingCache<String, AlluxioURI> uris = AlluxioFuseUtils.getPathResolverCache(conf, fuseOptions);
      ZeroMessageOpenFileSystem fuse = new ZeroMessageOpenFileSystem(mountPoint,
          new AlluxioJniFuseFileSystem(context, fileSystem, fuseOptions), fileSystem, uris);
      Signal.handle(new Signal("TERM"), new FuseSignalHandler(fuse));
      LOG.info("Mounting {} at {} with zero-message opens, options {}",
          conf.getString(PropertyKey.FUSE_MOUNT_ALLUXIO_PATH), mountPoint, fuseOptions.getFuseMountOptions());
      fuse.mount(true, conf.getBoolean(PropertyKey.FUSE_DEBUG_ENABLED), fuseOptions.getFuseMountOptions());
    } catch (Throwable failed) {
      LOG.error("Failed to launch FUSE", failed);
      System.exit(1);
    }
  }

  /** {@code -m}, {@code -a} and {@code -o} as {@code AlluxioFuse} reads them, into {@code settings}. */
  static void applyArguments(String[] args, InstancedConfiguration settings) {
    List<String> mountOptions = new ArrayList<>();
    for (int i = 0; i < args.length; i += 2) {
      if (i + 1 == args.length) {
        throw new IllegalArgumentException(args[i] + " needs a value");
      }
      String value = args[i + 1];
      switch (args[i]) {
        case "-m" -> settings.set(PropertyKey.FUSE_MOUNT_POINT, value, Source.RUNTIME);
        case "-a" -> settings.set(PropertyKey.FUSE_MOUNT_ALLUXIO_PATH, value, Source.RUNTIME);
        case "-o" -> mountOptions.add(value);
        default -> throw new IllegalArgumentException("unknown option " + args[i]);
      }
    }
    if (settings.getString(PropertyKey.FUSE_MOUNT_POINT).isEmpty()) {
      throw new IllegalArgumentException("-m MOUNT_POINT is required");
    }
    if (!mountOptions.isEmpty()) {
      settings.set(PropertyKey.FUSE_MOUNT_OPTIONS, mountOptions, Source.RUNTIME);
    }
  }
}
