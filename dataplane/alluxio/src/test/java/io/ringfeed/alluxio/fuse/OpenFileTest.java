package io.ringfeed.alluxio.fuse;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;

import alluxio.client.file.FileInStream;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.util.Arrays;
import org.junit.jupiter.api.Test;

class OpenFileTest {
  /** A file's bytes as Alluxio's stream gives them (AlluxioFileInStream: into the buffer at an index, -1 at the end),
   * at most {@code chunk} bytes per read call. */
  static final class BytesInStream extends FileInStream {
    private final byte[] bytes;
    private final int chunk;
    private int position;
    boolean closed;

    BytesInStream(byte[] bytes, int chunk) {
      this.bytes = bytes;
      this.chunk = chunk;
    }

    @Override
    public int read(ByteBuffer target, int index, int length) {
      if (position >= bytes.length) {
        return -1;
      }
      int count = Math.min(Math.min(length, chunk), bytes.length - position);
      target.put(index, bytes, position, count);
      position += count;
      return count;
    }

    @Override
    public long remaining() {
      return bytes.length - position;
    }

    @Override
    public int positionedRead(long at, byte[] target, int offset, int length) {
      throw new UnsupportedOperationException("OpenFile seeks, then reads");
    }

    @Override
    public void seek(long at) {
      position = (int) at;
    }

    @Override
    public long getPos() {
      return position;
    }

    @Override
    public void close() {
      closed = true;
    }
  }

  private static byte[] sample(int length) {
    byte[] bytes = new byte[length];
    for (int i = 0; i < length; i++) {
      bytes[i] = (byte) (i * 31 + 7);
    }
    return bytes;
  }

  /** Reads {@code size} bytes at {@code offset} of {@code bytes} through an OpenFile whose stream gives at most
   * {@code chunk} bytes a call; checks the count and the bytes against the file's own. */
  private static void assertReads(byte[] bytes, int chunk, int size, long offset, int expected) throws IOException {
    OpenFile file = new OpenFile(new BytesInStream(bytes, chunk), bytes.length);
    ByteBuffer buffer = ByteBuffer.allocateDirect(size);
    assertEquals(expected, file.read(buffer, size, offset));
    byte[] read = new byte[expected];
    buffer.get(0, read);
    assertArrayEquals(Arrays.copyOfRange(bytes, (int) offset, (int) offset + expected), read);
  }

  @Test
  void aReadAtAnOffsetFillsTheBufferAcrossTheStreamsShortReads() throws IOException {
    assertReads(sample(300_000), 4096, 131_072, 100_000, 131_072);
  }

  @Test
  void theTailGivesWhatIsLeftAndPastTheEndGivesNothing() throws IOException {
    byte[] bytes = sample(10_000);
    assertReads(bytes, 1000, 8192, 8192, 1808);
    OpenFile file = new OpenFile(new BytesInStream(bytes, 1000), bytes.length);
    ByteBuffer buffer = ByteBuffer.allocateDirect(8192);
    assertEquals(0, file.read(buffer, 8192, 10_000));
    assertEquals(0, file.read(buffer, 0, 0));
  }

  @Test
  void aStreamThatGivesNothingEndsTheReadInsteadOfSpinning() throws IOException {
    OpenFile file = new OpenFile(new BytesInStream(sample(100), 0), 100);
    assertEquals(0, file.read(ByteBuffer.allocateDirect(100), 100, 0));
  }

  @Test
  void aClosedFileSaysSoAndClosesItsStreamOnce() throws IOException {
    BytesInStream stream = new BytesInStream(sample(100), 100);
    OpenFile file = new OpenFile(stream, 100);
    file.close();
    file.close();
    assertEquals(true, stream.closed);
    assertEquals(OpenFile.CLOSED, file.read(ByteBuffer.allocateDirect(100), 100, 0));
  }
}
