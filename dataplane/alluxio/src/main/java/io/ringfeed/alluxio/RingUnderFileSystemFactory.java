package io.ringfeed.alluxio;

import alluxio.AlluxioURI;
import alluxio.underfs.UnderFileSystem;
import alluxio.underfs.UnderFileSystemConfiguration;
import alluxio.underfs.UnderFileSystemFactory;

import java.io.IOException;
import java.io.UncheckedIOException;

/** Makes a {@link RingUnderFileSystem} for {@code ringfeed://} URIs (found by Alluxio through META-INF/services). */
public class RingUnderFileSystemFactory implements UnderFileSystemFactory {
  @Override
  public UnderFileSystem create(String path, UnderFileSystemConfiguration conf) {
    try {
      return new RingUnderFileSystem(new AlluxioURI(path), conf);
    } catch (IOException badOptions) {
      throw new UncheckedIOException(badOptions);
    }
  }

  @Override
  public boolean supportsPath(String path) {
    return path != null && path.startsWith(RingPath.SCHEME);
  }
}
