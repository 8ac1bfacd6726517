package io.ringfeed.alluxio;

import java.util.ArrayList;
import java.util.List;

/**
 * A path of the tree, split into its segments: {@code /<dataset>/<split>/<part>/<label>/<uuid>.<ext>} for images,
 * {@code /<dataset>/<split>/<part>/<uuid>.npy} (and {@code labels.csv}) for tensors. The scheme and authority of a
 * UFS URI ({@code ringfeed://ring/...}) name the mount, not a place in the tree, and are dropped.
 */
record RingPath(List<String> segments) {
  static final String SCHEME = "ringfeed://";

  static RingPath parse(String path) {
    String rest = path;
    if (rest.startsWith(SCHEME)) {
      int slash = rest.indexOf('/', SCHEME.length());
      rest = slash < 0 ? "" : rest.substring(slash);
    }
    List<String> segments = new ArrayList<>();
    for (String segment : rest.split("/")) {
      if (segment.isEmpty() || segment.equals(".")) {
        continue;
      }
      if (segment.equals("..")) {
        throw new IllegalArgumentException("'..' in " + path + ": the tree has no parent references");
      }
      segments.add(segment);
    }
    return new RingPath(List.copyOf(segments));
  }

  int depth() {
    return segments.size();
  }

  String segment(int index) {
    return segments.get(index);
  }

  String dataset() {
    return segment(0);
  }

  String split() {
    return segment(1);
  }

  String part() {
    return segment(2);
  }

  /** The last segment, or "" for the root. */
  String name() {
    return segments.isEmpty() ? "" : segments.get(segments.size() - 1);
  }

  @Override
  public String toString() {
    return "/" + String.join("/", segments);
  }
}
