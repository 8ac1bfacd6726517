package io.ringfeed.alluxio.fuse;

import alluxio.client.file.FileInStream;

import java.io.IOException;
import java.nio.ByteBuffer;

/** One file's Alluxio stream, shared by the kernel's reads of that file (they may come on several threads). */
final class OpenFile implements AutoCloseable {
  /** What {@link #read} answers once the file was closed: the caller opens it again. */
  static final int CLOSED = Integer.MIN_VALUE;

  private final FileInStream stream;
  private final long length;
  private boolean closed;

  OpenFile(FileInStream stream, long length) {
    this.stream = stream;
    this.length = length;
  }

  /** Reads up to {@code size} bytes at {@code offset} into {@code buffer}: as many as the file has there. */
  synchronized int read(ByteBuffer buffer, int size, long offset) throws IOException {
    if (closed) {
      return CLOSED;
    }
    if (size == 0 || offset >= length) {
      return 0;
    }
    stream.seek(offset);
    int total = 0;
    while (total < size) {
      int read = stream.read(buffer, total, size - total);
      if (read <= 0) { // the end (-1), or a stream that makes no progress
        break;
      }
      total += read;
    }
    return total;
  }

  @Override
  public synchronized void close() throws IOException {
    if (!closed) {
      closed = true;
      stream.close();
    }
  }
}
