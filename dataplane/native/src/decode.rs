//! Turning the rows of one batch into its buffer: each sample copied (stored bytes, raw tensors) or decoded
//! (JPEG/PNG to pixels, on a thread pool) into place as it arrives, then the batch assembled without its missing
//! and corrupt samples. Nothing here reads from the ring.

use std::panic::AssertUnwindSafe;
use std::sync::mpsc::{RecvError, TryRecvError};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use bytes::Bytes;
use fast_image_resize::images::Image as ResizeTarget;
use fast_image_resize::{FilterType, PixelType, ResizeAlg, ResizeOptions, Resizer};
use image::DynamicImage;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use tokio::sync::mpsc;

use crate::buffer::{Buffer, BufferPool};
use crate::lifecycle;
use crate::metrics::PathMetrics;

/// Samples decoded per decoder task.
const DECODE_GROUP: usize = 8;
/// Bytes per sample reserved for stored bytes until a batch has been read, and at least.
const MIN_RESERVED_SAMPLE_BYTES: usize = 1024;

/// How a sample's bytes become the batch's `data`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Decode {
    /// Bytes as stored, concatenated; `spans` says where each sample lies.
    Bytes,
    /// Fixed-size raw tensors: each sample must be exactly `item_bytes` long.
    Raw { item_bytes: usize },
    /// JPEG/PNG decoded to uint8 height × width × channels, resized (centre-cropped to the aspect first when `crop`).
    Image(ImageShape),
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct ImageShape {
    pub height: u32,
    pub width: u32,
    pub channels: u8,
    pub crop: bool,
}

impl ImageShape {
    pub(crate) fn item_bytes(&self) -> usize {
        self.height as usize * self.width as usize * self.channels as usize
    }
}

/// The target shape of decoded images, checked.
pub(crate) fn image_shape(height: u32, width: u32, channels: u8, crop: bool) -> Result<ImageShape, String> {
    if height == 0 || width == 0 {
        return Err("image height and width must be positive".to_string());
    }
    if channels != 1 && channels != 3 {
        return Err(format!("channels must be 1 or 3, got {channels}"));
    }
    Ok(ImageShape {
        height,
        width,
        channels,
        crop,
    })
}

/// Decodes a JPEG or PNG into `out` (height × width × channels, uint8), resizing with a bilinear filter; with `crop`
/// the source is first centre-cropped to the target's aspect ratio (the usual evaluation transform).
pub(crate) fn decode_image(encoded: &[u8], shape: &ImageShape, out: &mut [u8]) -> Result<(), String> {
    let decoded = image::load_from_memory(encoded).map_err(|err| format!("cannot decode: {err}"))?;
    let (source, pixel_type) = match shape.channels {
        1 => (DynamicImage::ImageLuma8(decoded.into_luma8()), PixelType::U8),
        _ => (DynamicImage::ImageRgb8(decoded.into_rgb8()), PixelType::U8x3),
    };
    if source.width() == shape.width && source.height() == shape.height {
        out.copy_from_slice(source.as_bytes());
        return Ok(());
    }
    let mut target = ResizeTarget::from_slice_u8(shape.width, shape.height, out, pixel_type)
        .map_err(|err| format!("cannot resize: {err}"))?;
    let mut options = ResizeOptions::new().resize_alg(ResizeAlg::Convolution(FilterType::Bilinear));
    if shape.crop {
        options = options.fit_into_destination(Some((0.5, 0.5)));
    }
    // One resizer per thread: it keeps its scratch buffers (~160 kB for 224×224 RGB) between images, which a
    // fresh one would allocate, page-fault and free for every image.
    thread_local! {
        static RESIZER: std::cell::RefCell<Resizer> = std::cell::RefCell::new(Resizer::new());
    }
    RESIZER
        .with_borrow_mut(|resizer| resizer.resize(&source, &mut target, &options))
        .map_err(|err| format!("cannot resize: {err}"))
}

/// `decode_image` for Python: the same decoder the loader uses, for baselines and tests.
#[pyfunction]
#[pyo3(name = "decode_image", signature = (encoded, height, width, channels = 3, crop = true))]
pub fn decode_image_py(
    py: Python<'_>,
    encoded: &Bound<'_, PyBytes>,
    height: u32,
    width: u32,
    channels: u8,
    crop: bool,
) -> PyResult<Buffer> {
    let shape = image_shape(height, width, channels, crop).map_err(PyValueError::new_err)?;
    let encoded = encoded.as_bytes();
    let mut out = vec![0u8; shape.item_bytes()];
    py.detach(|| decode_image(encoded, &shape, &mut out))
        .map_err(PyValueError::new_err)?;
    Ok(Buffer::new(out))
}

type DecodeTask = Box<dyn FnOnce() + Send>;

/// Decoder threads fed by a queue. An idle thread sleeps in the queue's receive: on cores shared with the Cassandra
/// node a work-stealing pool's idle spinning costs the node CPU, and a task (a group of samples, milliseconds of
/// work) gains nothing from stealing.
pub(crate) struct DecoderPool {
    tasks: Mutex<Option<std::sync::mpsc::Sender<DecodeTask>>>,
    threads: Mutex<Vec<std::thread::JoinHandle<()>>>,
    owner: u32,
    metrics: Arc<PathMetrics>,
}

impl DecoderPool {
    pub(crate) fn start(threads: usize, metrics: Arc<PathMetrics>) -> std::io::Result<Arc<Self>> {
        let (sender, receiver) = std::sync::mpsc::channel::<DecodeTask>();
        let receiver = Arc::new(Mutex::new(receiver));
        let threads = (0..threads.max(1))
            .map(|index| {
                let receiver = Arc::clone(&receiver);
                let metrics = Arc::clone(&metrics);
                std::thread::Builder::new()
                    .name(format!("ringfeed-decode-{index}"))
                    .spawn(move || {
                        loop {
                            // The lock is held only while waiting for one task; the task runs unlocked.
                            let task = {
                                let queue = receiver.lock().expect("decoder queue lock");
                                match queue.try_recv() {
                                    Ok(task) => {
                                        metrics.decode_input.record(true);
                                        Ok(task)
                                    }
                                    Err(TryRecvError::Empty) => {
                                        queue.recv().inspect(|_| metrics.decode_input.record(false))
                                    }
                                    Err(TryRecvError::Disconnected) => Err(RecvError),
                                }
                            };
                            match task {
                                Ok(task) => task(),
                                Err(_) => return, // the pool was closed
                            }
                        }
                    })
            })
            .collect::<std::io::Result<Vec<_>>>()?;
        let pool = Arc::new(Self {
            tasks: Mutex::new(Some(sender)),
            threads: Mutex::new(threads),
            owner: lifecycle::this_process(),
            metrics,
        });
        lifecycle::register_decoders(&pool);
        Ok(pool)
    }

    /// Queues a task; a closed pool drops it (its batch then fails).
    fn spawn(&self, task: impl FnOnce() + Send + 'static) {
        if let Some(sender) = self.tasks.lock().expect("decoder queue lock").as_ref() {
            let _ = sender.send(Box::new(task));
        }
    }

    /// Closes the queue and joins the threads (each finishes its task first); in a forked child, leaves the
    /// parent's threads alone.
    pub(crate) fn close(&self) {
        self.tasks.lock().unwrap_or_else(PoisonError::into_inner).take();
        let threads = std::mem::take(&mut *self.threads.lock().unwrap_or_else(PoisonError::into_inner));
        if lifecycle::forked_since(self.owner) {
            std::mem::forget(threads); // joining threads that are not in this process would hang
            return;
        }
        for thread in threads {
            let _ = thread.join();
        }
    }
}

impl Drop for DecoderPool {
    fn drop(&mut self) {
        self.close();
    }
}

/// A batch buffer written concurrently, one slot per sample. Decoder threads hold an `Arc` while they write, so
/// the buffer outlives every writer even if the batch is abandoned.
struct Slots {
    data: std::cell::UnsafeCell<Vec<u8>>,
    item: usize,
}

// Safety: each slot is written by exactly one writer (one sample per position), and the buffer is read only after
// all writers are done (`into_inner` needs the last reference).
unsafe impl Sync for Slots {}

impl Slots {
    fn new(data: Vec<u8>, item: usize) -> Arc<Self> {
        Arc::new(Self {
            data: std::cell::UnsafeCell::new(data),
            item,
        })
    }

    /// Safety: no other reference to slot `position` may exist while the returned one lives.
    #[allow(clippy::mut_from_ref)]
    unsafe fn slot(&self, position: usize) -> &mut [u8] {
        let data = unsafe { &mut *self.data.get() };
        let start = position * self.item;
        unsafe { std::slice::from_raw_parts_mut(data.as_mut_ptr().add(start), self.item) }
    }

    fn into_inner(self: Arc<Self>) -> Vec<u8> {
        match Arc::try_unwrap(self) {
            Ok(slots) => slots.data.into_inner(),
            Err(_) => unreachable!("every writer has finished"),
        }
    }
}

/// Where arriving samples go: fixed-size slots by position (decoded images, raw tensors), or appended in arrival
/// order with a (start, end) span per position (stored bytes). Each sample is copied (or decoded) once, as soon as
/// it arrives, so its response frame is freed at once and the batch buffer is the only large allocation.
enum Target {
    Slots(Arc<Slots>),
    Appended { data: Vec<u8>, spans: Vec<(i64, i64)> },
}

/// One batch as it goes to Python: samples in submission order, minus missing and corrupt ones.
pub(crate) struct Assembled {
    pub data: Vec<u8>,
    /// (start, end) in `data` of each delivered sample, only for stored bytes.
    pub spans: Option<Vec<i64>>,
    pub labels: Vec<i32>,
    /// Position in the submitted batch of each delivered sample.
    pub positions: Vec<i64>,
    /// Positions that never arrived.
    pub missing: Vec<usize>,
    /// (position, reason) of samples that arrived but could not be decoded.
    pub corrupt: Vec<(usize, String)>,
    /// Mean stored bytes of the samples that arrived (None: none did).
    pub mean_sample_bytes: Option<usize>,
}

/// A batch of `count` samples being put together as its samples arrive (in any order); see the module docs.
pub(crate) struct Assembly {
    decode: Decode,
    target: Target,
    labels: Vec<Option<i32>>,
    corrupt: Vec<(usize, String)>,
    arrived_bytes: usize,
    decoders: Option<Arc<DecoderPool>>,
    /// Image samples waiting to be handed to the decoders as one group.
    waiting: Vec<(usize, Bytes)>,
    /// Decoder tasks started, each reporting once on `decoded`.
    decoding: usize,
    decoded_tx: mpsc::UnboundedSender<Vec<(usize, Result<(), String>)>>,
    decoded: mpsc::UnboundedReceiver<Vec<(usize, Result<(), String>)>>,
}

impl Assembly {
    /// A batch buffer taken from `pool`; stored bytes reserve `sample_bytes` per sample (0: unknown). Image decoding
    /// needs `decoders`.
    pub(crate) fn new(
        decode: Decode,
        count: usize,
        sample_bytes: usize,
        pool: &BufferPool,
        decoders: Option<Arc<DecoderPool>>,
    ) -> Self {
        let target = match decode {
            Decode::Bytes => {
                let per_sample = sample_bytes.max(MIN_RESERVED_SAMPLE_BYTES);
                // A sixteenth more: samples vary around the mean.
                let estimate = per_sample * count + per_sample * count / 16;
                Target::Appended {
                    data: pool.take_empty(estimate),
                    spans: vec![(0, 0); count],
                }
            }
            Decode::Raw { item_bytes } => Target::Slots(Slots::new(pool.take_filled(count * item_bytes), item_bytes)),
            Decode::Image(shape) => {
                assert!(decoders.is_some(), "image decoding needs decoder threads");
                let item = shape.item_bytes();
                Target::Slots(Slots::new(pool.take_filled(count * item), item))
            }
        };
        let (decoded_tx, decoded) = mpsc::unbounded_channel();
        Self {
            decode,
            target,
            labels: vec![None; count],
            corrupt: Vec::new(),
            arrived_bytes: 0,
            decoders,
            waiting: Vec::new(),
            decoding: 0,
            decoded_tx,
            decoded,
        }
    }

    /// Places the sample at `position` (each position at most once).
    pub(crate) fn add(&mut self, position: usize, label: i32, data: Bytes) {
        self.labels[position] = Some(label);
        self.arrived_bytes += data.len();
        match (&mut self.target, self.decode) {
            (Target::Appended { data: buffer, spans }, _) => {
                let start = buffer.len() as i64;
                buffer.extend_from_slice(&data);
                spans[position] = (start, buffer.len() as i64);
            }
            (Target::Slots(slots), Decode::Raw { item_bytes }) => {
                if data.len() == item_bytes {
                    // Safety: one sample per position; nothing else writes or reads this slot.
                    unsafe { slots.slot(position) }.copy_from_slice(&data);
                } else {
                    let reason = format!("{} bytes, expected {item_bytes}", data.len());
                    self.corrupt.push((position, reason));
                }
            }
            (Target::Slots(_), Decode::Image(shape)) => {
                self.waiting.push((position, data));
                if self.waiting.len() == DECODE_GROUP {
                    self.dispatch_decodes(shape);
                }
            }
            (Target::Slots(_), Decode::Bytes) => unreachable!("stored bytes are appended"),
        }
    }

    /// Hands the waiting image samples to the decoder threads as one task. Groups keep decoding in step with the
    /// reads at a fraction of the cost of one task per sample.
    fn dispatch_decodes(&mut self, shape: ImageShape) {
        let Target::Slots(slots) = &self.target else {
            unreachable!("images are decoded into slots")
        };
        if self.waiting.is_empty() {
            return;
        }
        let group = std::mem::take(&mut self.waiting);
        let (slots, done) = (Arc::clone(slots), self.decoded_tx.clone());
        self.decoding += 1;
        let decoders = self.decoders.as_ref().expect("image decoding has a pool");
        let metrics = Arc::clone(&decoders.metrics);
        decoders.spawn(move || {
            let results: Vec<_> = group
                .iter()
                .map(|(position, data)| {
                    let started = Instant::now();
                    // A decoder panic on a hostile input is that sample's corruption, not a lost batch.
                    let decoded = std::panic::catch_unwind(AssertUnwindSafe(|| {
                        // Safety: one sample per position; nothing else writes or reads this slot.
                        decode_image(data, &shape, unsafe { slots.slot(*position) })
                    }));
                    metrics.decode_time.observe(started.elapsed());
                    let reported = decoded.unwrap_or_else(|_| Err("the image decoder panicked on it".to_string()));
                    (*position, reported)
                })
                .collect();
            // Let go of the buffer before reporting: the batch takes it back once every decoder is done.
            drop(slots);
            let _ = done.send(results);
        });
    }

    /// Waits for the decoders, then compacts the batch: delivered samples in position order, missing and corrupt
    /// ones listed apart.
    pub(crate) async fn finish(mut self) -> Assembled {
        if let Decode::Image(shape) = self.decode {
            self.dispatch_decodes(shape);
        }
        for _ in 0..self.decoding {
            let results = self.decoded.recv().await.expect("every decoder task reports once");
            let failed = results
                .into_iter()
                .filter_map(|(position, result)| result.err().map(|reason| (position, reason)));
            self.corrupt.extend(failed);
        }
        let count = self.labels.len();
        let mut corrupt = self.corrupt;
        corrupt.sort_unstable_by_key(|(position, _)| *position);
        let mut labels = self.labels;
        let missing: Vec<usize> = (0..count).filter(|&position| labels[position].is_none()).collect();
        for (position, _) in &corrupt {
            labels[*position] = None;
        }
        let delivered: Vec<usize> = (0..count).filter(|&position| labels[position].is_some()).collect();
        let arrived = count - missing.len();
        let (data, spans) = match self.target {
            Target::Appended { data, spans } => {
                let spans = delivered
                    .iter()
                    .flat_map(|&position| [spans[position].0, spans[position].1])
                    .collect();
                (data, Some(spans))
            }
            Target::Slots(slots) => {
                let item = slots.item;
                let mut data = slots.into_inner();
                // Missing and corrupt samples leave holes: move the delivered ones to the front, in order.
                for (index, &position) in delivered.iter().enumerate() {
                    if index != position {
                        data.copy_within(position * item..(position + 1) * item, index * item);
                    }
                }
                data.truncate(delivered.len() * item);
                (data, None)
            }
        };
        Assembled {
            data,
            spans,
            labels: delivered.iter().map(|&position| labels[position].expect("delivered")).collect(),
            positions: delivered.iter().map(|&position| position as i64).collect(),
            missing,
            corrupt,
            mean_sample_bytes: (arrived > 0).then(|| self.arrived_bytes.div_ceil(arrived)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finish(assembly: Assembly) -> Assembled {
        let runtime = tokio::runtime::Builder::new_current_thread().build().expect("a runtime");
        runtime.block_on(assembly.finish())
    }

    /// A width × height RGB PNG whose left half is red and right half blue.
    fn two_colour_png(width: u32, height: u32) -> Vec<u8> {
        let pixels = image::RgbImage::from_fn(width, height, |x, _| {
            if x < width / 2 { image::Rgb([255, 0, 0]) } else { image::Rgb([0, 0, 255]) }
        });
        let mut encoded = std::io::Cursor::new(Vec::new());
        pixels.write_to(&mut encoded, image::ImageFormat::Png).expect("encodes");
        encoded.into_inner()
    }

    #[test]
    fn image_shapes_are_checked() {
        assert_eq!(image_shape(224, 224, 3, true).map(|shape| shape.item_bytes()), Ok(224 * 224 * 3));
        assert!(image_shape(0, 224, 3, true).is_err());
        assert_eq!(image_shape(8, 8, 4, true), Err("channels must be 1 or 3, got 4".to_string()));
    }

    #[test]
    fn an_image_is_resized_to_the_target_and_keeps_its_colours_in_place() {
        let shape = image_shape(4, 8, 3, false).expect("valid");
        let mut out = vec![0; shape.item_bytes()];
        decode_image(&two_colour_png(64, 32), &shape, &mut out).expect("decodes");
        let pixel = |x: usize, y: usize| &out[(y * 8 + x) * 3..(y * 8 + x) * 3 + 3];
        assert_eq!(pixel(0, 0), [255, 0, 0]);
        assert_eq!(pixel(7, 3), [0, 0, 255]);
    }

    #[test]
    fn a_centre_crop_keeps_the_middle_of_a_wide_image() {
        // 64×16 to 8×8 with a crop: only the middle 16×16 remains, half red, half blue.
        let shape = image_shape(8, 8, 1, true).expect("valid");
        let mut out = vec![0; shape.item_bytes()];
        decode_image(&two_colour_png(64, 16), &shape, &mut out).expect("decodes");
        assert!(out[0] > out[7], "red (lighter in grey) on the left, blue on the right: {out:?}");
    }

    #[test]
    fn bytes_that_are_no_image_are_refused_with_a_reason() {
        let shape = image_shape(8, 8, 3, true).expect("valid");
        let refused = decode_image(b"not an image", &shape, &mut [0; 192]).unwrap_err();
        assert!(refused.starts_with("cannot decode"), "{refused}");
    }

    #[test]
    fn stored_bytes_arriving_out_of_order_come_out_in_position_order_without_the_missing() {
        let pool = BufferPool::new(0);
        let mut assembly = Assembly::new(Decode::Bytes, 4, 3, &pool, None);
        assembly.add(2, 20, Bytes::from_static(b"cc"));
        assembly.add(0, 0, Bytes::from_static(b"a"));
        assembly.add(3, 30, Bytes::from_static(b"ddd"));
        let batch = finish(assembly);
        assert_eq!(batch.positions, [0, 2, 3]);
        assert_eq!(batch.labels, [0, 20, 30]);
        assert_eq!(batch.missing, [1]);
        let spans = batch.spans.expect("stored bytes have spans");
        let sample = |i: usize| &batch.data[spans[2 * i] as usize..spans[2 * i + 1] as usize];
        assert_eq!([sample(0), sample(1), sample(2)], [&b"a"[..], b"cc", b"ddd"]);
        assert_eq!(batch.mean_sample_bytes, Some(2));
    }

    #[test]
    fn raw_tensors_of_the_wrong_size_are_corrupt_and_the_rest_move_to_the_front() {
        let pool = BufferPool::new(1);
        let mut assembly = Assembly::new(Decode::Raw { item_bytes: 2 }, 4, 0, &pool, None);
        assembly.add(3, 3, Bytes::from_static(b"33"));
        assembly.add(1, 1, Bytes::from_static(b"111"));
        assembly.add(2, 2, Bytes::from_static(b"22"));
        let batch = finish(assembly);
        assert_eq!(batch.data, b"2233");
        assert_eq!(batch.positions, [2, 3]);
        assert_eq!(batch.missing, [0]);
        assert_eq!(batch.corrupt, [(1, "3 bytes, expected 2".to_string())]);
        assert!(batch.spans.is_none());
    }

    #[test]
    fn images_are_decoded_on_the_pool_and_a_bad_one_is_reported_corrupt() {
        let shape = image_shape(2, 2, 3, false).expect("valid");
        let metrics = Arc::new(PathMetrics::default());
        let decoders = DecoderPool::start(2, Arc::clone(&metrics)).expect("threads start");
        let pool = BufferPool::new(1);
        let mut assembly = Assembly::new(Decode::Image(shape), 10, 0, &pool, Some(Arc::clone(&decoders)));
        for position in 0..10 {
            let data = if position == 4 { Bytes::from_static(b"junk") } else { Bytes::from(two_colour_png(2, 2)) };
            assembly.add(position, position as i32, data);
        }
        let batch = finish(assembly);
        assert_eq!(batch.labels, [0, 1, 2, 3, 5, 6, 7, 8, 9]);
        assert_eq!(batch.corrupt.len(), 1);
        assert_eq!(batch.corrupt[0].0, 4);
        assert_eq!(batch.data.len(), 9 * shape.item_bytes());
        assert_eq!(&batch.data[..3], [255, 0, 0]);
        let (_, counts, _) = metrics.decode_time.snapshot();
        assert_eq!(counts.last(), Some(&10), "every image's decode is timed, the corrupt one's too");
        decoders.close();
    }
}
