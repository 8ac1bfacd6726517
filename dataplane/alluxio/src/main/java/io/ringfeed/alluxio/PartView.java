package io.ringfeed.alluxio;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collections;
import java.util.Comparator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.TreeMap;
import java.util.UUID;

/**
 * One part of a split as directories and files. Images: a folder per label (the label's name where the dataset
 * names its labels, else its number zero-padded, so that ImageFolder's sorted classes follow the numbers), the
 * samples of that label inside. Raw tensors: the files flat, and {@code labels.csv} ("file,label" lines, in UUID order).
 * Members that the dataset no longer holds (deleted after the split was made) are left out and counted.
 */
final class PartView {
  static final String LABELS_FILE = "labels.csv";

  /** A sample as a file. */
  record Sample(UUID uuid, int label, long storedBytes) {}

  /** UUIDs as unsigned 128-bit numbers (UUID.compareTo compares signed halves): the order of their bytes. */
  private static final Comparator<Sample> BY_UUID = (a, b) -> {
    int order = Long.compareUnsigned(a.uuid().getMostSignificantBits(), b.uuid().getMostSignificantBits());
    return order != 0 ? order
        : Long.compareUnsigned(a.uuid().getLeastSignificantBits(), b.uuid().getLeastSignificantBits());
  };

  private final SampleFormat format;
  private final Map<String, List<Sample>> folders;
  private final List<Sample> flat;
  private final byte[] labelsCsv;
  private final int missing;

  PartView(UUID[] members, SampleIndex index, SampleFormat format, List<String> labelNames) {
    this.format = format;
    Map<Integer, List<Sample>> byLabel = new TreeMap<>();
    List<Sample> all = new ArrayList<>(members.length);
    int absent = 0;
    for (UUID uuid : members) {
      int position = index.find(uuid);
      if (position < 0) {
        absent++;
        continue;
      }
      Sample sample = new Sample(uuid, index.label(position), index.storedBytes(position));
      all.add(sample);
      byLabel.computeIfAbsent(sample.label(), label -> new ArrayList<>()).add(sample);
    }
    this.missing = absent;
    // Each folder (and the flat list) in UUID order: a file is then found by binary search.
    all.sort(BY_UUID);
    byLabel.values().forEach(samples -> samples.sort(BY_UUID));
    if (format.flat()) {
      this.folders = Map.of();
      this.flat = Collections.unmodifiableList(all);
      StringBuilder csv = new StringBuilder("file,label\n");
      for (Sample sample : all) {
        csv.append(format.fileName(sample.uuid())).append(',').append(sample.label()).append('\n');
      }
      this.labelsCsv = csv.toString().getBytes(StandardCharsets.UTF_8);
    } else {
      int widest = byLabel.keySet().stream().mapToInt(label -> Integer.toString(Math.abs(label)).length()).max()
          .orElse(1);
      Map<String, List<Sample>> named = new LinkedHashMap<>();
      for (Map.Entry<Integer, List<Sample>> entry : byLabel.entrySet()) {
        named.put(folderName(entry.getKey(), labelNames, widest), List.copyOf(entry.getValue()));
      }
      this.folders = Collections.unmodifiableMap(named);
      this.flat = List.of();
      this.labelsCsv = new byte[0];
    }
  }

  /** A label's folder: its name (a '/' in it becomes '_'), or its number padded to the widest label's digits. */
  static String folderName(int label, List<String> labelNames, int digits) {
    if (label >= 0 && label < labelNames.size() && !labelNames.get(label).isBlank()) {
      String name = labelNames.get(label).replace('/', '_');
      return name.equals(".") || name.equals("..") ? "_" + name : name;
    }
    String number = Integer.toString(Math.abs(label));
    return (label < 0 ? "-" : "") + "0".repeat(Math.max(0, digits - number.length())) + number;
  }

  SampleFormat format() {
    return format;
  }

  int missing() {
    return missing;
  }

  /** Folders of the part (images); empty for a flat part. */
  Map<String, List<Sample>> folders() {
    return folders;
  }

  /** Files of a flat part (raw tensors); empty otherwise. */
  List<Sample> flat() {
    return flat;
  }

  byte[] labelsCsv() {
    return labelsCsv.clone();
  }

  long labelsCsvLength() {
    return labelsCsv.length;
  }

  /** The sample a file of this part stands for: {@code folder} is null for a flat part. */
  Optional<Sample> sample(String folder, String fileName) {
    Optional<UUID> uuid = format.uuidOf(fileName);
    if (uuid.isEmpty()) {
      return Optional.empty();
    }
    List<Sample> candidates = folder == null ? flat : folders.getOrDefault(folder, List.of());
    int found = Collections.binarySearch(candidates, new Sample(uuid.get(), 0, 0), BY_UUID);
    return found >= 0 ? Optional.of(candidates.get(found)) : Optional.empty();
  }
}
