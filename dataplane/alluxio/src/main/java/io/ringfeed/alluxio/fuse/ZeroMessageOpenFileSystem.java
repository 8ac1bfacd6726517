package io.ringfeed.alluxio.fuse;

import alluxio.AlluxioURI;
import alluxio.client.file.FileSystem;
import alluxio.client.file.MetadataCachingFileSystem;
import alluxio.client.file.URIStatus;
import alluxio.exception.AlluxioException;
import alluxio.exception.FileDoesNotExistException;
import alluxio.exception.runtime.NotFoundRuntimeException;
import alluxio.fuse.AlluxioFuseUtils;
import alluxio.fuse.AlluxioJniFuseFileSystem;
import alluxio.fuse.FuseConstants;
import alluxio.fuse.FuseUmountable;
import alluxio.grpc.OpenFilePOptions;
import alluxio.jnifuse.AbstractFuseFileSystem;
import alluxio.jnifuse.ErrorCodes;
import alluxio.jnifuse.struct.FileStat;
import alluxio.jnifuse.struct.FuseFileInfo;
import alluxio.jnifuse.struct.Statvfs;
import com.google.common.cache.Cache;
import com.google.common.cache.CacheBuilder;
import com.google.common.cache.LoadingCache;
import com.google.common.cache.RemovalListener;
import com.google.common.util.concurrent.UncheckedExecutionException;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.file.Path;
import java.time.Duration;
import java.util.concurrent.ExecutionException;

/**
 * The cache tier's FUSE file system: Alluxio's own ({@link AlluxioJniFuseFileSystem}) for lookups, listings and
 * statfs, with <em>zero-message opens</em> for files.
 *
 * <p>A split version never changes and the mount is read-only, so opening and closing a file needs nothing from the
 * daemon. Alluxio's open answers every open with a stream and every close with a release, and the kernel flushes on
 * each close: three requests per file through /dev/fuse, each a wake-up of a daemon thread on the cores that decode,
 * even when the file's pages are all in the page cache (docs/benchmarks.md, bench-cache). Here open and flush answer
 * ENOSYS once; the kernel then opens every file itself (keeping its page cache: FOPEN_KEEP_CACHE), sends no release,
 * and no flush again. A warm epoch reads from the page cache with no request at all.
 *
 * <p>Reads that miss the page cache arrive without a file handle: each path's Alluxio stream is kept in a small
 * cache, closed when it has been idle a while or when others need the room.
 */
public final class ZeroMessageOpenFileSystem extends AbstractFuseFileSystem implements FuseUmountable {
  private static final Logger LOG = LoggerFactory.getLogger(ZeroMessageOpenFileSystem.class);
  /** Streams kept at once: more than a DataLoader's workers read side by side. */
  static final int OPEN_FILES = 1024;
  /** A stream unused this long is closed (the kernel reads a file's pages in one go, then leaves it). */
  static final Duration IDLE = Duration.ofSeconds(30);

  private final AlluxioJniFuseFileSystem alluxio;
  private final FileSystem fileSystem;
  private final LoadingCache<String, AlluxioURI> uris;
  private final Cache<String, OpenFile> openFiles;

  /**
   * @param alluxio Alluxio's FUSE file system, which answers everything but files' opens, reads and closes
   * @param fileSystem the Alluxio client it uses
   * @param uris its translation of FUSE paths to Alluxio URIs
   */
  public ZeroMessageOpenFileSystem(Path mountPoint, AlluxioJniFuseFileSystem alluxio, FileSystem fileSystem,
      LoadingCache<String, AlluxioURI> uris) {
    super(mountPoint);
    this.alluxio = alluxio;
    this.fileSystem = fileSystem;
    this.uris = uris;
    RemovalListener<String, OpenFile> close = removed -> {
      try {
        removed.getValue().close();
      } catch (IOException | RuntimeException failed) {
        LOG.warn("Closing the stream of {} failed", removed.getKey(), failed);
      }
    };
    openFiles = CacheBuilder.newBuilder().maximumSize(OPEN_FILES).expireAfterAccess(IDLE).removalListener(close)
        .build();
  }

  @Override
  public String getFileSystemName() {
    return alluxio.getFileSystemName();
  }

  /** ENOSYS: the kernel takes it as "opens need no message" for this and every later file (no release either). */
  @Override
  public int open(String path, FuseFileInfo fi) {
    return AlluxioFuseUtils.call(LOG, () -> -ErrorCodes.ENOSYS(), "Fuse.Open", "path=%s", path);
  }

  /** ENOSYS: the kernel sends no flush again (a read-only file has nothing to flush). */
  @Override
  public int flush(String path, FuseFileInfo fi) {
    return AlluxioFuseUtils.call(LOG, () -> -ErrorCodes.ENOSYS(), "Fuse.Flush", "path=%s", path);
  }

  /** Only a file opened before the kernel learned that opens need no message would be released. */
  @Override
  public int release(String path, FuseFileInfo fi) {
    return 0;
  }

  @Override
  public int read(String path, ByteBuffer buf, long size, long offset, FuseFileInfo fi) {
    return AlluxioFuseUtils.call(LOG, () -> readThroughStream(path, buf, (int) size, offset),
        FuseConstants.FUSE_READ, "path=%s,size=%d,offset=%d", path, size, offset);
  }

  private int readThroughStream(String path, ByteBuffer buf, int size, long offset) {
    try {
      while (true) {
        OpenFile file = openFiles.get(path, () -> open(path));
        int read = file.read(buf, size, offset);
        if (read != OpenFile.CLOSED) {
          return read;
        }
        openFiles.asMap().remove(path, file); // closed for room or idleness between the lookup and the read
      }
    } catch (ExecutionException | UncheckedExecutionException failed) {
      Throwable cause = failed.getCause();
      if (cause instanceof FileDoesNotExistException || cause instanceof NotFoundRuntimeException) {
        LOG.error("Failed to read {}: it does not exist", path);
        return -ErrorCodes.ENOENT();
      }
      LOG.error("Failed to open {} for reading", path, cause);
      return -ErrorCodes.EIO();
    } catch (IOException failed) {
      LOG.error("Failed to read {} at {}", path, offset, failed);
      return -ErrorCodes.EIO();
    }
  }

  private OpenFile open(String path) throws IOException, AlluxioException {
    // Answered from the client's metadata cache after the kernel's lookup; the stream opens from it (openFile(uri)
    // would look the status up again).
    URIStatus status = fileSystem.getStatus(uris.getUnchecked(path));
    return new OpenFile(fileSystem.openFile(status, OpenFilePOptions.getDefaultInstance()), status.getLength());
  }

  @Override
  public int getattr(String path, FileStat stat) {
    return alluxio.getattr(path, stat);
  }

  /**
   * The folders that list datasets and splits (the Alluxio root and a dataset's folder) are listed as the catalog is
   * now: their cached listing is dropped first, so a split made since shows in them, as it does under its path. A
   * part's and a class's listings stay cached (a split version never changes).
   */
  @Override
  public int readdir(String path, long buff, long filter, long offset, FuseFileInfo fi) {
    if (fileSystem instanceof MetadataCachingFileSystem caching) {
      AlluxioURI uri = uris.getUnchecked(path);
      if (uri.getDepth() <= 1) {
        caching.dropMetadataCache(uri);
      }
    }
    return alluxio.readdir(path, buff, filter, offset, fi);
  }

  @Override
  public int statfs(String path, Statvfs stbuf) {
    return alluxio.statfs(path, stbuf);
  }

  @Override
  public void umount(boolean force) {
    openFiles.invalidateAll();
    super.umount(force);
  }
}
