//! Turning the rows of one batch into its buffer: each sample copied (stored bytes, raw tensors) or decoded
//! (JPEG/PNG to pixels, on a thread pool) into place as it arrives, then the batch assembled without its missing
//! and corrupt samples. Nothing here reads from the ring.

use std::panic::AssertUnwindSafe;
use std::sync::mpsc::{RecvError, TryRecvError};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use bytes::Bytes;
use fast_image_resize::images::{Image as ResizeTarget, ImageRef as ResizeSource};
use fast_image_resize::{CropBox, FilterType, IntoImageView, PixelType, ResizeAlg, ResizeOptions, Resizer};
use image::{DynamicImage, ImageDecoder};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use tokio::sync::mpsc;
use uuid::Uuid;

use crate::buffer::{Buffer, BufferPool};
use crate::crop::{Crop, RandomCrop, dct_denominator, sample_key};
use crate::jpeg::{Decompressor, Refusal};
use crate::lifecycle;
use crate::metrics::PathMetrics;

/// Pixels an image may have: what `image` decodes within its default allocation limit (512 MiB) at 3 bytes a pixel,
/// and where Pillow's decompression-bomb error starts. A header declaring more is refused before anything is
/// allocated, on every path: a bomb of a few kB would otherwise take gigabytes on each decoder thread.
pub(crate) const MAX_IMAGE_PIXELS: u64 = 512 * 1024 * 1024 / 3;
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
    /// JPEG/PNG decoded to uint8 height × width × channels, fitted to the target by `ImageShape::fit`.
    Image(ImageShape),
    /// Stored bytes, as `Bytes`, each with the box `Image` would crop from it (`image_box`): the trainer decodes them
    /// on its GPU into the same crops. An image whose header cannot be read is corrupt here already.
    Deferred(ImageShape),
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct ImageShape {
    pub height: u32,
    pub width: u32,
    pub channels: u8,
    pub fit: Fit,
}

/// How an image becomes the target size: the evaluation transforms, or the training augmentation.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Fit {
    /// Resized to the target, whatever its aspect ratio.
    Stretch,
    /// Centre-cropped to the target's aspect ratio, then resized.
    CentreCrop,
    /// A RandomResizedCrop resized to the target, mirrored at random (`crop`); a JPEG decodes only the crop's blocks,
    /// scaled down in the DCT domain where the target size allows.
    Random(RandomCrop),
}

impl ImageShape {
    pub(crate) fn item_bytes(&self) -> usize {
        self.height as usize * self.width as usize * self.channels as usize
    }

    fn pixel_type(&self) -> PixelType {
        if self.channels == 1 { PixelType::U8 } else { PixelType::U8x3 }
    }
}

/// The target shape of decoded images, checked.
pub(crate) fn image_shape(height: u32, width: u32, channels: u8, fit: Fit) -> Result<ImageShape, String> {
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
        fit,
    })
}

/// Decodes a JPEG or PNG into `out` (height × width × channels, uint8), resized with a bilinear filter as
/// `shape.fit` says; `key` (`crop::sample_key`) draws the sample's random crop (unused by the other fits). A JPEG
/// takes libjpeg-turbo, which decodes only the blocks the fit keeps, scaled down in the DCT domain where the target
/// allows; the full decoder takes PNGs and the JPEGs libjpeg-turbo does not decode to RGB (CMYK, lossless, 12-bit).
pub(crate) fn decode_image(encoded: &[u8], shape: &ImageShape, key: u64, out: &mut [u8]) -> Result<(), String> {
    if is_jpeg(encoded) {
        match fused_decode(encoded, shape, key, out) {
            Err(Refusal::Unsupported(_)) => {}
            decoded => return decoded.map_err(Refusal::into_message),
        }
    }
    decode_whole(encoded, shape, key, out)
}

/// The whole image decoded, then the fit's area (`fit_area`) resized and mirrored: the path of PNGs and of the JPEGs
/// libjpeg-turbo does not decode, and the reference the fused decode is measured against.
pub(crate) fn decode_whole(encoded: &[u8], shape: &ImageShape, key: u64, out: &mut [u8]) -> Result<(), String> {
    let source = decode_full(encoded, shape.channels)?;
    let (width, height) = (source.width(), source.height());
    let (area, flip) = fit_area(shape, key, width, height);
    let whole = area.left == 0.0 && area.top == 0.0 && area.width == f64::from(width) && area.height == f64::from(height);
    if whole && (width, height) == (shape.width, shape.height) {
        out.copy_from_slice(source.as_bytes());
    } else {
        resize(&source, shape, ResizeOptions::new().crop(area.left, area.top, area.width, area.height), out)?;
    }
    if flip {
        mirror(out, shape.width as usize, shape.channels as usize);
    }
    Ok(())
}

/// Refuses an image whose header declares no pixels, or more than `MAX_IMAGE_PIXELS`.
pub(crate) fn check_image_size(width: u32, height: u32) -> Result<(), String> {
    if width == 0 || height == 0 {
        return Err(format!("bad image size {width}x{height}"));
    }
    if u64::from(width) * u64::from(height) > MAX_IMAGE_PIXELS {
        return Err(format!("its header declares {width}x{height} pixels, more than the {MAX_IMAGE_PIXELS} an image \
                            may have"));
    }
    Ok(())
}

/// An image's size from its header alone, checked.
fn image_dimensions(encoded: &[u8]) -> Result<(u32, u32), String> {
    let (width, height) = image::ImageReader::new(std::io::Cursor::new(encoded))
        .with_guessed_format()
        .map_err(|err| format!("cannot read: {err}"))?
        .into_dimensions()
        .map_err(|err| format!("cannot decode: {err}"))?;
    check_image_size(width, height).map_err(|reason| format!("cannot decode: {reason}"))?;
    Ok((width, height))
}

/// The part of a `width` × `height` image a fit takes (left, top, width, height: fractional for the centre crop, as
/// the resizer takes it) and whether it mirrors it: the random crop of `key`, the centre at the target's aspect
/// ratio, or the whole image.
fn fit_area(shape: &ImageShape, key: u64, width: u32, height: u32) -> (CropBox, bool) {
    match shape.fit {
        Fit::Random(random) => {
            let crop = random.crop(key, width, height);
            let area = CropBox {
                left: f64::from(crop.left),
                top: f64::from(crop.top),
                width: f64::from(crop.width),
                height: f64::from(crop.height),
            };
            (area, crop.flip)
        }
        Fit::CentreCrop => {
            (CropBox::fit_src_into_dst_size(width, height, shape.width, shape.height, Some((0.5, 0.5))), false)
        }
        Fit::Stretch => {
            (CropBox { left: 0.0, top: 0.0, width: f64::from(width), height: f64::from(height) }, false)
        }
    }
}

/// The part of an image the decode to `shape` takes (left, top, width, height, in the image's pixels) and whether it
/// mirrors it (1), read from the image's header alone: `fit_area` rounded to whole pixels.
pub(crate) fn image_box(encoded: &[u8], shape: &ImageShape, key: u64) -> Result<[i32; 5], String> {
    let (width, height) = image_dimensions(encoded)?;
    let (area, flip) = fit_area(shape, key, width, height);
    let round = |at: f64, extent: u32| (at.round() as u32).min(extent);
    let (left, top) = (round(area.left, width - 1), round(area.top, height - 1));
    let crop = Crop {
        left,
        top,
        width: round(area.width, width - left).max(1),
        height: round(area.height, height - top).max(1),
        flip,
    };
    let at = |value: u32| value as i32;
    Ok([at(crop.left), at(crop.top), at(crop.width), at(crop.height), i32::from(crop.flip)])
}

fn is_jpeg(encoded: &[u8]) -> bool {
    encoded.starts_with(&[0xff, 0xd8, 0xff])
}

/// The whole image decoded, as `channels` 1 (grey) or 3 (RGB); its size checked from the header first, since the
/// conversion after the decode is outside the decoder's allocation limit.
fn decode_full(encoded: &[u8], channels: u8) -> Result<DynamicImage, String> {
    let decoder = image::ImageReader::new(std::io::Cursor::new(encoded))
        .with_guessed_format()
        .map_err(|err| format!("cannot read: {err}"))?
        .into_decoder()
        .map_err(|err| format!("cannot decode: {err}"))?;
    let (width, height) = decoder.dimensions();
    check_image_size(width, height).map_err(|reason| format!("cannot decode: {reason}"))?;
    let decoded = DynamicImage::from_decoder(decoder).map_err(|err| format!("cannot decode: {err}"))?;
    Ok(match channels {
        1 => DynamicImage::ImageLuma8(decoded.into_luma8()),
        _ => DynamicImage::ImageRgb8(decoded.into_rgb8()),
    })
}

/// A JPEG decoded to `shape` by libjpeg-turbo: the fit's area (`fit_area`) drawn from the header's size, only its
/// rows and MCU columns decoded, at 1/8, 1/4 or 1/2 scale when the area keeps at least the target's pixels at it; the
/// resize then takes the area's exact (fractional) box out of the decoded region.
fn fused_decode(encoded: &[u8], shape: &ImageShape, key: u64, out: &mut [u8]) -> Result<(), Refusal> {
    // One decompressor and one region buffer per decoder thread, reused image after image.
    thread_local! {
        static JPEG: std::cell::RefCell<Option<(Decompressor, Vec<u8>)>> = const { std::cell::RefCell::new(None) };
    }
    JPEG.with_borrow_mut(|state| {
        let (decompressor, pixels) = match state {
            Some(state) => state,
            // Without a decompressor (no memory for one) the full decoder takes the image.
            None => state.insert((Decompressor::new().map_err(Refusal::Unsupported)?, Vec::new())),
        };
        let decoded = fused_region_decode(decompressor, pixels, encoded, shape, key, out);
        if decoded.is_err() {
            // libjpeg can be left mid-image by a failure, and TurboJPEG then refuses every later image: start afresh.
            *state = None;
        }
        decoded
    })
}

fn fused_region_decode(
    decompressor: &mut Decompressor,
    pixels: &mut Vec<u8>,
    encoded: &[u8],
    shape: &ImageShape,
    key: u64,
    out: &mut [u8],
) -> Result<(), Refusal> {
    let header = decompressor.header(encoded)?;
    let (area, flip) = fit_area(shape, key, header.width, header.height);
    let denominator = dct_denominator(area.width as u32, area.height as u32, shape.width, shape.height);
    let scale = 1.0 / f64::from(denominator);
    let scaled_floor = |at: f64| (at * scale).floor() as u32;
    let scaled_ceil = |at: f64| (at * scale).ceil() as u32;
    let columns = (scaled_floor(area.left), scaled_ceil(area.left + area.width));
    let rows = (scaled_floor(area.top), scaled_ceil(area.top + area.height));
    let region = decompressor.decode_region(encoded, &header, denominator, columns, rows, pixels)?;
    let source = ResizeSource::new(region.width, region.height, pixels, PixelType::U8x3)
        .map_err(|err| Refusal::Corrupt(format!("cannot resize: {err}")))?;
    let options = ResizeOptions::new().crop(
        area.left * scale - f64::from(region.left),
        area.top * scale - f64::from(region.top),
        area.width * scale,
        area.height * scale,
    );
    if shape.channels == 1 {
        // Grey as the full decoder makes it (image's luma of RGB), not libjpeg's Y: one sample looks the same
        // whichever path decoded it.
        let rgb_shape = ImageShape { channels: 3, ..*shape };
        let mut rgb = vec![0; rgb_shape.item_bytes()];
        resize(&source, &rgb_shape, options, &mut rgb).map_err(Refusal::Corrupt)?;
        let grey = DynamicImage::ImageRgb8(
            image::RgbImage::from_raw(shape.width, shape.height, rgb).expect("sized for the target"),
        )
        .into_luma8();
        out.copy_from_slice(grey.as_raw());
    } else {
        resize(&source, shape, options, out).map_err(Refusal::Corrupt)?;
    }
    if flip {
        mirror(out, shape.width as usize, shape.channels as usize);
    }
    Ok(())
}

/// Resizes `source` into `out` (the target `shape`) with a bilinear filter and `options`' cropping.
fn resize(
    source: &impl IntoImageView,
    shape: &ImageShape,
    options: ResizeOptions,
    out: &mut [u8],
) -> Result<(), String> {
    let mut target = ResizeTarget::from_slice_u8(shape.width, shape.height, out, shape.pixel_type())
        .map_err(|err| format!("cannot resize: {err}"))?;
    let options = options.resize_alg(ResizeAlg::Convolution(FilterType::Bilinear));
    // One resizer per thread: it keeps its scratch buffers (~160 kB for 224×224 RGB) between images, which a
    // fresh one would allocate, page-fault and free for every image.
    thread_local! {
        static RESIZER: std::cell::RefCell<Resizer> = std::cell::RefCell::new(Resizer::new());
    }
    RESIZER
        .with_borrow_mut(|resizer| resizer.resize(source, &mut target, &options))
        .map_err(|err| format!("cannot resize: {err}"))
}

/// Mirrors each row of `pixels` (rows of `width` pixels of `channels` bytes) left to right, in place.
fn mirror(pixels: &mut [u8], width: usize, channels: usize) {
    for row in pixels.chunks_exact_mut(width * channels) {
        for x in 0..width / 2 {
            let opposite = width - 1 - x;
            for channel in 0..channels {
                row.swap(x * channels + channel, opposite * channels + channel);
            }
        }
    }
}

/// `decode_image` for Python: the same decoder the loader uses, for baselines and tests. With `random_crop`
/// ((scale min, max), (ratio min, max), flip probability) the crop of `sample` in `epoch` of a run with `seed`;
/// `fused=False` takes the full decode then fit whatever the format (the reference and the benchmark's baseline).
#[pyfunction]
#[pyo3(name = "decode_image", signature = (encoded, height, width, channels = 3, crop = true, random_crop = None,
                                           seed = 0, epoch = 0, sample = None, fused = true))]
#[allow(clippy::too_many_arguments)]
pub fn decode_image_py(
    py: Python<'_>,
    encoded: &Bound<'_, PyBytes>,
    height: u32,
    width: u32,
    channels: u8,
    crop: bool,
    random_crop: Option<RandomCropRanges>,
    seed: u64,
    epoch: u64,
    sample: Option<Uuid>,
    fused: bool,
) -> PyResult<Buffer> {
    let shape = image_shape(height, width, channels, fit_of(crop, random_crop, seed)?).map_err(PyValueError::new_err)?;
    let key = sample_key(seed, epoch, &sample.unwrap_or_default());
    let encoded = encoded.as_bytes();
    let mut out = vec![0u8; shape.item_bytes()];
    lifecycle::detach(py, || {
        if fused { decode_image(encoded, &shape, key, &mut out) } else { decode_whole(encoded, &shape, key, &mut out) }
    })
    .map_err(PyValueError::new_err)?;
    Ok(Buffer::new(out))
}

/// `image_box` for Python, with `decode_image`'s arguments: (left, top, width, height, flipped), the crop the decode
/// takes from the image, as the loader hands it with deferred decoding.
#[pyfunction]
#[pyo3(name = "image_box", signature = (encoded, height, width, crop = true, random_crop = None, seed = 0, epoch = 0,
                                        sample = None))]
#[allow(clippy::too_many_arguments)]
pub fn image_box_py(
    encoded: &Bound<'_, PyBytes>,
    height: u32,
    width: u32,
    crop: bool,
    random_crop: Option<RandomCropRanges>,
    seed: u64,
    epoch: u64,
    sample: Option<Uuid>,
) -> PyResult<(i32, i32, i32, i32, bool)> {
    let shape = image_shape(height, width, 3, fit_of(crop, random_crop, seed)?).map_err(PyValueError::new_err)?;
    let key = sample_key(seed, epoch, &sample.unwrap_or_default());
    let [left, top, width, height, flip] =
        image_box(encoded.as_bytes(), &shape, key).map_err(PyValueError::new_err)?;
    Ok((left, top, width, height, flip != 0))
}

/// How an image becomes the target, from Python's arguments: a random crop, else a centre crop or a stretch.
pub(crate) fn fit_of(crop: bool, random_crop: Option<RandomCropRanges>, seed: u64) -> PyResult<Fit> {
    Ok(match random_crop {
        Some(ranges) => Fit::Random(random_crop_of(ranges, seed)?),
        None if crop => Fit::CentreCrop,
        None => Fit::Stretch,
    })
}

/// ((scale min, max), (ratio min, max), flip probability), as Python passes a random crop.
pub(crate) type RandomCropRanges = ((f64, f64), (f64, f64), f64);

pub(crate) fn random_crop_of((scale, ratio, flip): RandomCropRanges, seed: u64) -> PyResult<RandomCrop> {
    RandomCrop::new(scale, ratio, flip, seed).map_err(PyValueError::new_err)
}

/// The crop `decode_image` draws for `sample` in `epoch` of a run with `seed` from a `width` × `height` image:
/// (left, top, crop width, crop height, flipped).
#[pyfunction]
#[pyo3(signature = (width, height, random_crop, seed, epoch, sample))]
pub fn random_crop_box(
    width: u32,
    height: u32,
    random_crop: RandomCropRanges,
    seed: u64,
    epoch: u64,
    sample: Uuid,
) -> PyResult<(u32, u32, u32, u32, bool)> {
    if width == 0 || height == 0 {
        return Err(PyValueError::new_err("image width and height must be positive"));
    }
    let crop = random_crop_of(random_crop, seed)?.crop(sample_key(seed, epoch, &sample), width, height);
    Ok((crop.left, crop.top, crop.width, crop.height, crop.flip))
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
    /// `image_box` of each delivered sample, only for deferred decoding.
    pub boxes: Option<Vec<i32>>,
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
    /// Each position's `crop::sample_key` when the decode draws random crops, else empty.
    sample_keys: Vec<u64>,
    /// Each position's `image_box` when the decode is deferred, else empty.
    boxes: Vec<[i32; 5]>,
    /// Image samples waiting to be handed to the decoders as one group, with their keys.
    waiting: Vec<(usize, Bytes, u64)>,
    /// Decoder tasks started, each reporting once on `decoded`.
    decoding: usize,
    decoded_tx: mpsc::UnboundedSender<Vec<(usize, Result<(), String>)>>,
    decoded: mpsc::UnboundedReceiver<Vec<(usize, Result<(), String>)>>,
}

impl Assembly {
    /// A batch buffer taken from `pool`; stored bytes reserve `sample_bytes` per sample (0: unknown). Image decoding
    /// needs `decoders`, random crops one `sample_keys` entry per position.
    pub(crate) fn new(
        decode: Decode,
        count: usize,
        sample_bytes: usize,
        pool: &BufferPool,
        decoders: Option<Arc<DecoderPool>>,
        sample_keys: Vec<u64>,
    ) -> Self {
        let target = match decode {
            Decode::Bytes | Decode::Deferred(_) => {
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
        let boxes = match decode {
            Decode::Deferred(_) => vec![[0; 5]; count],
            Decode::Bytes | Decode::Raw { .. } | Decode::Image(_) => Vec::new(),
        };
        let (decoded_tx, decoded) = mpsc::unbounded_channel();
        Self {
            decode,
            target,
            labels: vec![None; count],
            corrupt: Vec::new(),
            arrived_bytes: 0,
            decoders,
            sample_keys,
            boxes,
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
        if let Decode::Deferred(shape) = self.decode {
            let key = self.sample_keys.get(position).copied().unwrap_or_default();
            match image_box(&data, &shape, key) {
                Ok(image_box) => self.boxes[position] = image_box,
                Err(reason) => {
                    self.corrupt.push((position, reason));
                    return;
                }
            }
        }
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
                // Without random crops there is no key, and the decode uses none.
                let key = self.sample_keys.get(position).copied().unwrap_or_default();
                self.waiting.push((position, data, key));
                if self.waiting.len() == DECODE_GROUP {
                    self.dispatch_decodes(shape);
                }
            }
            (Target::Slots(_), Decode::Bytes | Decode::Deferred(_)) => unreachable!("stored bytes are appended"),
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
                .map(|(position, data, key)| {
                    let started = Instant::now();
                    // A decoder panic on a hostile input is that sample's corruption, not a lost batch.
                    let decoded = std::panic::catch_unwind(AssertUnwindSafe(|| {
                        // Safety: one sample per position; nothing else writes or reads this slot.
                        decode_image(data, &shape, *key, unsafe { slots.slot(*position) })
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
        let boxes = (!self.boxes.is_empty())
            .then(|| delivered.iter().flat_map(|&position| self.boxes[position]).collect());
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
            boxes,
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

    /// A width × height "photograph" as a JPEG of `quality`: red grows to the right, green downwards, blue is a
    /// fine texture (so that the decoders' differences show), which says where each output pixel came from.
    fn position_coded_jpeg(width: u32, height: u32, quality: u8) -> Vec<u8> {
        let pixels = image::RgbImage::from_fn(width, height, |x, y| {
            let texture = ((x * 7 + y * 13) % 32) as u8 * 4;
            image::Rgb([(x * 255 / (width - 1)) as u8, (y * 255 / (height - 1)) as u8, 64 + texture])
        });
        let mut encoded = Vec::new();
        image::codecs::jpeg::JpegEncoder::new_with_quality(&mut encoded, quality)
            .encode_image(&pixels)
            .expect("encodes");
        encoded
    }

    fn imagenet_crop(flip: f64) -> RandomCrop {
        RandomCrop::new((0.08, 1.0), (3.0 / 4.0, 4.0 / 3.0), flip, 11).expect("valid")
    }

    fn key(n: u64) -> u64 {
        sample_key(11, 0, &Uuid::from_u64_pair(n, n))
    }

    fn random_shape(height: u32, width: u32, channels: u8, random: RandomCrop) -> ImageShape {
        image_shape(height, width, channels, Fit::Random(random)).expect("valid")
    }

    fn mean_difference(a: &[u8], b: &[u8]) -> f64 {
        a.iter().zip(b).map(|(x, y)| f64::from(x.abs_diff(*y))).sum::<f64>() / a.len() as f64
    }

    #[test]
    fn the_fused_crop_decode_matches_a_full_decode_then_crop_and_resize() {
        let jpeg = position_coded_jpeg(500, 375, 92);
        // 224: full scale mostly; 64 and 32: most crops decode at 1/2, 1/4 or 1/8; 1 channel: grey from the Y plane.
        for (size, channels) in [(224, 3), (64, 3), (32, 3), (64, 1)] {
            let shape = random_shape(size, size, channels, imagenet_crop(0.5));
            let (mut fused, mut reference) = (vec![0; shape.item_bytes()], vec![0; shape.item_bytes()]);
            for n in 0..40 {
                fused_decode(&jpeg, &shape, key(n), &mut fused).expect("fused decode");
                decode_whole(&jpeg, &shape, key(n), &mut reference).expect("full decode");
                let difference = mean_difference(&fused, &reference);
                assert!(difference < 2.5, "{size}x{size}x{channels}, sample {n}: mean difference {difference}");
            }
        }
    }

    #[test]
    fn the_fused_decode_takes_the_crop_from_where_it_was_drawn() {
        // Each output corner's red and green say which column and row of the source it came from, to a level per
        // pixel: an MCU's worth of offset (8 or 16 pixels) would be far outside the tolerance.
        let (width, height) = (256, 192);
        let jpeg = position_coded_jpeg(width, height, 95);
        let random = RandomCrop::new((0.05, 0.3), (0.75, 1.33), 0.0, 11).expect("valid");
        let shape = random_shape(32, 32, 3, random);
        let mut out = vec![0; shape.item_bytes()];
        for n in 0..40 {
            let crop = random.crop(key(n), width, height);
            fused_decode(&jpeg, &shape, key(n), &mut out).expect("fused decode");
            let expected = |at: u32, length: u32, extent: u32, corner: u32| {
                // The centre of the output's first or last pixel, in source pixels, as the coded colour.
                let offset = (f64::from(corner) + 0.5) * f64::from(length) / 32.0;
                (f64::from(at) + offset) * 255.0 / f64::from(extent - 1)
            };
            for (x, y) in [(0, 0), (31, 0), (0, 31), (31, 31)] {
                let pixel = &out[(y * 32 + x) as usize * 3..][..3];
                let red = expected(crop.left, crop.width, width, x);
                let green = expected(crop.top, crop.height, height, y);
                let (found_red, found_green) = (f64::from(pixel[0]), f64::from(pixel[1]));
                assert!((found_red - red).abs() < 4.0, "sample {n} ({x}, {y}): red {found_red} not {red}");
                assert!((found_green - green).abs() < 4.0, "sample {n} ({x}, {y}): green {found_green} not {green}");
            }
        }
    }

    #[test]
    fn a_flip_mirrors_the_same_crop() {
        let jpeg = position_coded_jpeg(500, 375, 90);
        let plain = random_shape(48, 64, 3, imagenet_crop(0.0));
        let flipped = random_shape(48, 64, 3, imagenet_crop(1.0));
        let (mut a, mut b) = (vec![0; plain.item_bytes()], vec![0; plain.item_bytes()]);
        for n in 0..10 {
            decode_image(&jpeg, &plain, key(n), &mut a).expect("decodes");
            decode_image(&jpeg, &flipped, key(n), &mut b).expect("decodes");
            assert_ne!(a, b);
            mirror(&mut b, 64, 3);
            assert_eq!(a, b, "sample {n}: the flipped output mirrored back is the plain one");
        }
    }

    #[test]
    fn a_png_takes_the_full_decode_with_the_same_crop() {
        let png = two_colour_png(64, 32);
        let shape = random_shape(8, 8, 3, imagenet_crop(0.5));
        let Fit::Random(random) = shape.fit else { unreachable!() };
        let source = image::load_from_memory(&png).expect("decodes").into_rgb8();
        let (mut out, mut reference) = (vec![0; 192], vec![0; 192]);
        for n in 0..10 {
            decode_image(&png, &shape, key(n), &mut out).expect("decodes");
            // The reference: the crop drawn for the sample, out of the whole image, resized, mirrored if drawn so.
            let crop = random.crop(key(n), 64, 32);
            let options = ResizeOptions::new().crop(
                f64::from(crop.left),
                f64::from(crop.top),
                f64::from(crop.width),
                f64::from(crop.height),
            );
            resize(&DynamicImage::ImageRgb8(source.clone()), &shape, options, &mut reference).expect("resizes");
            if crop.flip {
                mirror(&mut reference, 8, 3);
            }
            assert_eq!(out, reference);
        }
    }

    #[test]
    fn the_evaluation_fits_of_a_jpeg_match_a_full_decode_then_fit() {
        let jpeg = position_coded_jpeg(500, 375, 92);
        // 224: full scale; 64 and 32: decoded at 1/4 and 1/8 scale; 1 channel: grey as the full decoder makes it.
        for fit in [Fit::Stretch, Fit::CentreCrop] {
            for (size, channels) in [(224, 3), (64, 3), (32, 1)] {
                let shape = image_shape(size, size, channels, fit).expect("valid");
                let (mut fused, mut reference) = (vec![0; shape.item_bytes()], vec![0; shape.item_bytes()]);
                decode_image(&jpeg, &shape, 0, &mut fused).expect("fused decode");
                decode_whole(&jpeg, &shape, 0, &mut reference).expect("full decode");
                let difference = mean_difference(&fused, &reference);
                assert!(difference < 2.5, "{fit:?} {size}x{size}x{channels}: mean difference {difference}");
            }
        }
    }

    #[test]
    fn a_corrupt_or_truncated_jpeg_is_an_error_in_every_fit() {
        let jpeg = position_coded_jpeg(500, 375, 90);
        for fit in [Fit::Stretch, Fit::CentreCrop, Fit::Random(imagenet_crop(0.5))] {
            let shape = image_shape(32, 32, 3, fit).expect("valid");
            let mut out = vec![0; shape.item_bytes()];
            let refused = decode_image(b"\xff\xd8\xff\xe0 not a JPEG after all", &shape, key(1), &mut out).unwrap_err();
            assert!(refused.starts_with("cannot decode"), "{refused}");
            // Cut in its header, in its scan, before its end marker: libjpeg would fill the rest with grey.
            for cut in [20, jpeg.len() / 3, jpeg.len() - 10] {
                let refused = decode_image(&jpeg[..cut], &shape, key(1), &mut out).unwrap_err();
                assert!(refused.starts_with("cannot decode"), "{fit:?}, cut at {cut}: {refused}");
            }
        }
    }

    #[test]
    fn a_jpeg_libjpeg_only_warns_about_decodes_in_every_fit() {
        let jpeg = position_coded_jpeg(300, 200, 90);
        let mut newer_jfif = jpeg.clone();
        let jfif = newer_jfif.windows(5).position(|id| id == b"JFIF\0").expect("a JFIF header");
        newer_jfif[jfif + 5..jfif + 7].copy_from_slice(&[2, 1]); // "unknown JFIF revision number 2.01"
        let extraneous = [&jpeg[..jpeg.len() - 2], &[0x12; 47], &jpeg[jpeg.len() - 2..]].concat();
        for fit in [Fit::Stretch, Fit::CentreCrop, Fit::Random(imagenet_crop(0.5))] {
            let shape = image_shape(32, 32, 3, fit).expect("valid");
            let (mut expected, mut out) = (vec![0; shape.item_bytes()], vec![0; shape.item_bytes()]);
            decode_image(&jpeg, &shape, key(1), &mut expected).expect("decodes");
            for warned in [&newer_jfif, &extraneous] {
                decode_image(warned, &shape, key(1), &mut out).expect("a warning about intact pixels");
                assert_eq!(out, expected, "{fit:?}");
            }
        }
    }

    #[test]
    fn a_header_declaring_too_many_pixels_is_refused_on_every_path() {
        let mut jpeg = position_coded_jpeg(64, 48, 90);
        let sof = jpeg.windows(2).position(|marker| marker == [0xff, 0xc0]).expect("a baseline JPEG");
        jpeg[sof + 5..sof + 9].copy_from_slice(&[0x75, 0x30, 0x75, 0x30]); // 30000 × 30000
        for fit in [Fit::Stretch, Fit::CentreCrop, Fit::Random(imagenet_crop(0.5))] {
            let shape = image_shape(32, 32, 3, fit).expect("valid");
            let mut out = vec![0; shape.item_bytes()];
            for refused in [
                decode_image(&jpeg, &shape, key(1), &mut out).unwrap_err(),
                decode_whole(&jpeg, &shape, key(1), &mut out).unwrap_err(),
                image_box(&jpeg, &shape, key(1)).unwrap_err(),
            ] {
                assert!(refused.contains("declares 30000x30000 pixels"), "{fit:?}: {refused}");
            }
        }
    }

    #[test]
    fn a_corrupt_jpeg_leaves_the_next_ones_to_the_fused_decode() {
        let shape = random_shape(32, 32, 3, imagenet_crop(0.5));
        let jpeg = position_coded_jpeg(300, 200, 90);
        let (mut before, mut after) = (vec![0; shape.item_bytes()], vec![0; shape.item_bytes()]);
        fused_decode(&jpeg, &shape, key(2), &mut before).expect("fused decode");
        assert!(fused_decode(b"\xff\xd8\xffjunk", &shape, key(2), &mut after).is_err());
        fused_decode(&jpeg, &shape, key(2), &mut after).expect("fused decode after a corrupt one");
        assert_eq!(before, after);
    }

    #[test]
    fn image_shapes_are_checked() {
        assert_eq!(image_shape(224, 224, 3, Fit::CentreCrop).map(|shape| shape.item_bytes()), Ok(224 * 224 * 3));
        assert!(image_shape(0, 224, 3, Fit::CentreCrop).is_err());
        assert_eq!(image_shape(8, 8, 4, Fit::CentreCrop), Err("channels must be 1 or 3, got 4".to_string()));
    }

    #[test]
    fn an_image_is_resized_to_the_target_and_keeps_its_colours_in_place() {
        let shape = image_shape(4, 8, 3, Fit::Stretch).expect("valid");
        let mut out = vec![0; shape.item_bytes()];
        decode_image(&two_colour_png(64, 32), &shape, 0, &mut out).expect("decodes");
        let pixel = |x: usize, y: usize| &out[(y * 8 + x) * 3..(y * 8 + x) * 3 + 3];
        assert_eq!(pixel(0, 0), [255, 0, 0]);
        assert_eq!(pixel(7, 3), [0, 0, 255]);
    }

    #[test]
    fn a_centre_crop_keeps_the_middle_of_a_wide_image() {
        // 64×16 to 8×8 with a crop: only the middle 16×16 remains, half red, half blue.
        let shape = image_shape(8, 8, 1, Fit::CentreCrop).expect("valid");
        let mut out = vec![0; shape.item_bytes()];
        decode_image(&two_colour_png(64, 16), &shape, 0, &mut out).expect("decodes");
        assert!(out[0] > out[7], "red (lighter in grey) on the left, blue on the right: {out:?}");
    }

    #[test]
    fn bytes_that_are_no_image_are_refused_with_a_reason() {
        let shape = image_shape(8, 8, 3, Fit::CentreCrop).expect("valid");
        let refused = decode_image(b"not an image", &shape, 0, &mut [0; 192]).unwrap_err();
        assert!(refused.starts_with("cannot decode"), "{refused}");
    }

    #[test]
    fn stored_bytes_arriving_out_of_order_come_out_in_position_order_without_the_missing() {
        let pool = BufferPool::new(0);
        let mut assembly = Assembly::new(Decode::Bytes, 4, 3, &pool, None, Vec::new());
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
        let mut assembly = Assembly::new(Decode::Raw { item_bytes: 2 }, 4, 0, &pool, None, Vec::new());
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
        let shape = image_shape(2, 2, 3, Fit::Stretch).expect("valid");
        let metrics = Arc::new(PathMetrics::default());
        let decoders = DecoderPool::start(2, Arc::clone(&metrics)).expect("threads start");
        let pool = BufferPool::new(1);
        let mut assembly = Assembly::new(Decode::Image(shape), 10, 0, &pool, Some(Arc::clone(&decoders)), Vec::new());
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

    #[test]
    fn random_crops_are_decoded_on_the_pool_with_each_positions_key_and_a_corrupt_one_is_counted() {
        let shape = random_shape(16, 16, 3, imagenet_crop(0.5));
        let decoders = DecoderPool::start(2, Arc::new(PathMetrics::default())).expect("threads start");
        let pool = BufferPool::new(1);
        let jpeg = position_coded_jpeg(200, 150, 90);
        let keys: Vec<u64> = (0..10).map(key).collect();
        let mut assembly =
            Assembly::new(Decode::Image(shape), 10, 0, &pool, Some(Arc::clone(&decoders)), keys.clone());
        for position in 0..10 {
            let data =
                if position == 7 { Bytes::from_static(b"\xff\xd8\xffjunk") } else { Bytes::from(jpeg.clone()) };
            assembly.add(position, position as i32, data);
        }
        let batch = finish(assembly);
        assert_eq!(batch.corrupt.iter().map(|(position, _)| *position).collect::<Vec<_>>(), [7]);
        let mut expected = vec![0; shape.item_bytes()];
        for (index, &position) in batch.positions.iter().enumerate() {
            decode_image(&jpeg, &shape, keys[position as usize], &mut expected).expect("decodes");
            let delivered = &batch.data[index * shape.item_bytes()..][..shape.item_bytes()];
            assert_eq!(delivered, expected, "position {position}");
        }
        decoders.close();
    }

    #[test]
    fn a_deferred_decode_keeps_the_stored_bytes_with_each_images_crop_and_a_headless_one_is_corrupt() {
        let shape = random_shape(16, 16, 3, imagenet_crop(0.5));
        let pool = BufferPool::new(1);
        let (jpeg, png) = (position_coded_jpeg(200, 150, 90), two_colour_png(60, 40));
        let keys: Vec<u64> = (0..6).map(key).collect();
        let mut assembly = Assembly::new(Decode::Deferred(shape), 6, 0, &pool, None, keys.clone());
        let stored = |position: usize| match position {
            2 => b"not an image".to_vec(),
            4 => png.clone(),
            _ => jpeg.clone(),
        };
        for position in (0..6).rev() {
            assembly.add(position, position as i32, Bytes::from(stored(position)));
        }
        let batch = finish(assembly);
        assert_eq!(batch.corrupt.iter().map(|(position, _)| *position).collect::<Vec<_>>(), [2]);
        assert_eq!(batch.positions, [0, 1, 3, 4, 5]);
        let (spans, boxes) = (batch.spans.expect("stored bytes"), batch.boxes.expect("boxes"));
        for (index, &position) in batch.positions.iter().enumerate() {
            let position = position as usize;
            let (start, end) = (spans[2 * index] as usize, spans[2 * index + 1] as usize);
            assert_eq!(batch.data[start..end], stored(position));
            let (width, height) = if position == 4 { (60, 40) } else { (200, 150) };
            let Fit::Random(random) = shape.fit else { unreachable!() };
            let crop = random.crop(keys[position], width, height);
            let expected = [crop.left, crop.top, crop.width, crop.height, u32::from(crop.flip)].map(|v| v as i32);
            assert_eq!(boxes[5 * index..5 * index + 5], expected, "position {position}");
        }
    }

    #[test]
    fn the_evaluation_boxes_are_the_whole_image_or_its_centre_at_the_targets_aspect_ratio() {
        let jpeg = position_coded_jpeg(200, 100, 90);
        let boxed = |fit| image_box(&jpeg, &image_shape(50, 50, 3, fit).expect("a shape"), 0).expect("a header");
        assert_eq!(boxed(Fit::Stretch), [0, 0, 200, 100, 0]);
        assert_eq!(boxed(Fit::CentreCrop), [50, 0, 100, 100, 0]);
        assert!(image_box(b"\xff\xd8\xffjunk", &image_shape(8, 8, 3, Fit::Stretch).expect("a shape"), 0).is_err());
    }
}