//! libjpeg-turbo's scaled and cropped decompression (its TurboJPEG 3 API): only the image blocks a region needs are
//! decoded, rows above and below it are skipped, and each 8×8 block may be reduced to 4×4, 2×2 or 1×1 in the DCT
//! domain. TurboJPEG catches libjpeg's errors itself (setjmp), so every call returns a status.

use std::ffi::CStr;

use turbojpeg_sys as tj;

use crate::decode::check_image_size;

/// Progressive scans a JPEG may have: libjpeg-turbo's advice against inputs crafted to take minutes.
const SCAN_LIMIT: i32 = 500;
/// libjpeg's warnings that leave the pixels whole: an unknown JFIF revision or Adobe transform, bytes between the image
/// data and a marker, odd scan parameters. Its other warnings say it repaired the data (grey rows for a cut file,
/// garbage blocks for a bad code): such a sample is corrupt, as torchvision's decoder, the GPU path's, says too.
const HARMLESS_WARNINGS: [&str; 5] = [
    "unknown JFIF revision",
    "Unknown Adobe color transform",
    "extraneous bytes before marker",
    "Invalid SOS parameters for sequential JPEG",
    "Inconsistent progression sequence",
];

/// A JPEG's size and what cropping it needs.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Header {
    pub width: u32,
    pub height: u32,
    /// Width in pixels of the image's MCU (block group): a region's left edge must fall on one, once scaled.
    mcu_width: u32,
}

/// The pixels of a decoded region: `width` × `height` at the DCT scale, from `left`, `top` of the scaled image.
#[derive(Debug)]
pub(crate) struct Region {
    pub left: u32,
    pub top: u32,
    pub width: u32,
    pub height: u32,
}

/// Why libjpeg-turbo did not decode a JPEG.
#[derive(Debug)]
pub(crate) enum Refusal {
    /// A JPEG it does not decode to RGB (CMYK, lossless, 12-bit, unusual subsampling): the full decoder's.
    Unsupported(String),
    /// A bad JPEG (its data corrupt or cut short, its header declaring too many pixels): the sample is corrupt.
    Corrupt(String),
}

impl Refusal {
    pub(crate) fn into_message(self) -> String {
        match self {
            Self::Unsupported(reason) | Self::Corrupt(reason) => format!("cannot decode: {reason}"),
        }
    }
}

/// One decompressor (libjpeg's state and buffers, reused image after image); not shared between threads.
pub(crate) struct Decompressor(tj::tjhandle);

impl Decompressor {
    pub(crate) fn new() -> Result<Self, String> {
        // Safety: tj3Init has no preconditions; a null handle is its failure.
        let handle = unsafe { tj::tj3Init(tj::TJINIT_TJINIT_DECOMPRESS as i32) };
        if handle.is_null() {
            return Err("cannot start a JPEG decompressor".to_string());
        }
        let decompressor = Self(handle);
        decompressor.set(tj::TJPARAM_TJPARAM_SCANLIMIT, SCAN_LIMIT)?;
        Ok(decompressor)
    }

    fn error(&self) -> String {
        // Safety: the handle is live; the message is a NUL-terminated string owned by it.
        let message = unsafe { CStr::from_ptr(tj::tj3GetErrorStr(self.0)) };
        message.to_string_lossy().replace('\n', " ")
    }

    fn check(&self, status: i32) -> Result<(), String> {
        if status == 0 { Ok(()) } else { Err(self.error()) }
    }

    /// A decompression call's status. TurboJPEG answers -1 for a warning too (the call went to its end), with the
    /// image's first warning as its message (libjpeg reports one per image), or its error's.
    fn outcome(&self, status: i32) -> Result<(), Refusal> {
        let message = if status == 0 { return Ok(()) } else { self.error() };
        // Safety: the handle is live.
        let warning = unsafe { tj::tj3GetErrorCode(self.0) } == tj::TJERR_TJERR_WARNING as i32;
        if warning && HARMLESS_WARNINGS.iter().any(|harmless| message.contains(harmless)) {
            Ok(())
        } else {
            Err(Refusal::Corrupt(message))
        }
    }

    fn set(&self, parameter: tj::TJPARAM, value: i32) -> Result<(), String> {
        // Safety: the handle is live.
        self.check(unsafe { tj::tj3Set(self.0, parameter as i32, value) })
    }

    fn get(&self, parameter: tj::TJPARAM) -> i32 {
        // Safety: the handle is live.
        unsafe { tj::tj3Get(self.0, parameter as i32) }
    }

    /// Reads the header of `jpeg`: what it cannot decode to RGB is `Unsupported`, an unreadable header or one that
    /// declares too many pixels `Corrupt`.
    pub(crate) fn header(&mut self, jpeg: &[u8]) -> Result<Header, Refusal> {
        // Safety: the handle is live; the buffer is valid for its length.
        self.outcome(unsafe { tj::tj3DecompressHeader(self.0, jpeg.as_ptr(), jpeg.len() as tj::size_t) })?;
        let mcu_width = match self.get(tj::TJPARAM_TJPARAM_SUBSAMP) {
            tj::TJSAMP_TJSAMP_444 | tj::TJSAMP_TJSAMP_GRAY | tj::TJSAMP_TJSAMP_440 | tj::TJSAMP_TJSAMP_441 => 8,
            tj::TJSAMP_TJSAMP_422 | tj::TJSAMP_TJSAMP_420 => 16,
            tj::TJSAMP_TJSAMP_411 => 32,
            _ => return Err(Refusal::Unsupported("unusual chroma subsampling".to_string())),
        };
        if self.get(tj::TJPARAM_TJPARAM_LOSSLESS) != 0 {
            return Err(Refusal::Unsupported("lossless JPEG".to_string()));
        }
        if self.get(tj::TJPARAM_TJPARAM_PRECISION) != 8 {
            return Err(Refusal::Unsupported("JPEG of more than 8 bits per sample".to_string()));
        }
        let colorspace = self.get(tj::TJPARAM_TJPARAM_COLORSPACE);
        if colorspace == tj::TJCS_TJCS_CMYK as i32 || colorspace == tj::TJCS_TJCS_YCCK as i32 {
            return Err(Refusal::Unsupported("CMYK JPEG".to_string()));
        }
        let (width, height) = (self.get(tj::TJPARAM_TJPARAM_JPEGWIDTH), self.get(tj::TJPARAM_TJPARAM_JPEGHEIGHT));
        let (width, height) = (u32::try_from(width).unwrap_or(0), u32::try_from(height).unwrap_or(0));
        check_image_size(width, height).map_err(Refusal::Corrupt)?;
        Ok(Header { width, height, mcu_width })
    }

    /// Decodes the part of `jpeg` (whose `header` was just read) covering columns `left..right` and rows
    /// `top..bottom` of the image scaled by 1/`denominator` (1, 2, 4 or 8) into `pixels` (RGB), widened on the left
    /// to an MCU edge. A JPEG the decoder had to repair (truncated, bad data) is an error here. The region lies within
    /// the image, whose size `header` checked.
    pub(crate) fn decode_region(
        &mut self,
        jpeg: &[u8],
        header: &Header,
        denominator: u32,
        (left, right): (u32, u32),
        (top, bottom): (u32, u32),
        pixels: &mut Vec<u8>,
    ) -> Result<Region, Refusal> {
        let scaled_mcu = header.mcu_width.div_ceil(denominator);
        let region_left = left / scaled_mcu * scaled_mcu;
        let (width, height) = (right - region_left, bottom - top);
        let bytes = width as usize * height as usize * 3;
        let scaling = tj::tjscalingfactor { num: 1, denom: denominator as i32 };
        let region = tj::tjregion { x: region_left as i32, y: top as i32, w: width as i32, h: height as i32 };
        // Safety: the handle is live and has read this JPEG's header.
        self.check(unsafe { tj::tj3SetScalingFactor(self.0, scaling) }).map_err(Refusal::Corrupt)?;
        self.check(unsafe { tj::tj3SetCroppingRegion(self.0, region) }).map_err(Refusal::Corrupt)?;
        pixels.resize(bytes, 0);
        let pitch = width as i32 * 3;
        // Safety: `pixels` holds height rows of `pitch` bytes, what the cropping region decodes to.
        let status = unsafe {
            let size = jpeg.len() as tj::size_t;
            tj::tj3Decompress8(self.0, jpeg.as_ptr(), size, pixels.as_mut_ptr(), pitch, tj::TJPF_TJPF_RGB)
        };
        self.outcome(status)?;
        Ok(Region { left: region_left, top, width, height })
    }
}

impl Drop for Decompressor {
    fn drop(&mut self) {
        // Safety: the handle is live and dropped once.
        unsafe { tj::tj3Destroy(self.0) };
    }
}
