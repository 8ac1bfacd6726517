//! RandomResizedCrop and horizontal flip, the training augmentation, drawn the way torchvision draws them, from a
//! key of (seed, epoch, sample) rather than from a stream: a sample's crop does not depend on which thread decodes
//! it, in which order, or whether the epoch was resumed halfway.
//!
//! The key is SplitMix64's finaliser `mix` chained over the words `mix(mix(mix(mix(seed) ^ epoch) ^ high) ^ low)`,
//! where `high` and `low` are the sample UUID's big-endian halves; the draws are the SplitMix64 stream started from
//! that key, each uniform in [0, 1) from the top 53 bits of one output. The first draw decides the flip, the next
//! ones the crop (torchvision's order within it: scale, log-ratio, then top and left).

use uuid::Uuid;

/// Attempts at a crop inside the image before falling back to a centre crop (torchvision's count).
const ATTEMPTS: usize = 10;

/// Ranges of a RandomResizedCrop and the probability of a horizontal flip: checked, with the run's seed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct RandomCrop {
    /// (min, max) fraction of the image's area the crop covers.
    pub scale: (f64, f64),
    /// (min, max) width ÷ height of the crop, drawn uniformly on a log scale.
    pub ratio: (f64, f64),
    /// Probability that the output is mirrored left to right.
    pub flip: f64,
    pub seed: u64,
}

impl RandomCrop {
    pub(crate) fn new(scale: (f64, f64), ratio: (f64, f64), flip: f64, seed: u64) -> Result<Self, String> {
        let finite = [scale.0, scale.1, ratio.0, ratio.1, flip].iter().all(|value| value.is_finite());
        if !finite {
            return Err("random crop ranges and flip must be finite numbers".to_string());
        }
        if !(0.0 < scale.0 && scale.0 <= scale.1 && scale.1 <= 1.0) {
            return Err(format!("random crop scale must be 0 < min <= max <= 1, got ({}, {})", scale.0, scale.1));
        }
        if !(0.0 < ratio.0 && ratio.0 <= ratio.1) {
            return Err(format!("random crop ratio must be 0 < min <= max, got ({}, {})", ratio.0, ratio.1));
        }
        if !(0.0..=1.0).contains(&flip) {
            return Err(format!("flip probability must be in [0, 1], got {flip}"));
        }
        Ok(Self { scale, ratio, flip, seed })
    }

    /// The crop of a `width` × `height` image for the sample with `key` (`sample_key`).
    pub(crate) fn crop(&self, key: u64, width: u32, height: u32) -> Crop {
        let mut draws = Draws(key);
        let flip = draws.uniform() < self.flip;
        let area = f64::from(width) * f64::from(height);
        let log_ratio = (self.ratio.0.ln(), self.ratio.1.ln());
        for _ in 0..ATTEMPTS {
            let target_area = area * draws.between(self.scale.0, self.scale.1);
            let aspect = draws.between(log_ratio.0, log_ratio.1).exp();
            // Python's round(): halves to even, as torchvision's int(round(...)).
            let crop_width = (target_area * aspect).sqrt().round_ties_even();
            let crop_height = (target_area / aspect).sqrt().round_ties_even();
            let fits = |length: f64, extent: u32| (1.0..=f64::from(extent)).contains(&length);
            if fits(crop_width, width) && fits(crop_height, height) {
                let (crop_width, crop_height) = (crop_width as u32, crop_height as u32);
                let top = draws.below(height - crop_height + 1);
                let left = draws.below(width - crop_width + 1);
                return Crop { left, top, width: crop_width, height: crop_height, flip };
            }
        }
        self.centre_crop(width, height, flip)
    }

    /// torchvision's fallback: the whole image, narrowed to the nearest ratio of the range.
    fn centre_crop(&self, width: u32, height: u32, flip: bool) -> Crop {
        let in_ratio = f64::from(width) / f64::from(height);
        let (crop_width, crop_height) = if in_ratio < self.ratio.0 {
            (width, ((f64::from(width) / self.ratio.0).round_ties_even() as u32).clamp(1, height))
        } else if in_ratio > self.ratio.1 {
            (((f64::from(height) * self.ratio.1).round_ties_even() as u32).clamp(1, width), height)
        } else {
            (width, height)
        };
        Crop {
            left: (width - crop_width) / 2,
            top: (height - crop_height) / 2,
            width: crop_width,
            height: crop_height,
            flip,
        }
    }
}

/// A rectangle of an image, in its pixels, and whether the output is mirrored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Crop {
    pub left: u32,
    pub top: u32,
    pub width: u32,
    pub height: u32,
    pub flip: bool,
}

/// The key of one sample's draws in one epoch of a run (see the module documentation).
pub(crate) fn sample_key(seed: u64, epoch: u64, sample: &Uuid) -> u64 {
    let (high, low) = sample.as_u64_pair();
    [epoch, high, low].into_iter().fold(mix(seed), |key, word| mix(key ^ word))
}

/// The denominator of the DCT scaling (1/8, 1/4, 1/2, else 1) that shrinks a `crop_width` × `crop_height` crop the
/// most while it keeps at least `out_width` × `out_height` pixels: the resize after it then only shrinks, as it
/// would from the full-size crop, and the decoder computes up to 64 times fewer pixels.
pub(crate) fn dct_denominator(crop_width: u32, crop_height: u32, out_width: u32, out_height: u32) -> u32 {
    [8, 4, 2]
        .into_iter()
        .find(|&denominator| crop_width >= out_width * denominator && crop_height >= out_height * denominator)
        .unwrap_or(1)
}

/// SplitMix64's finaliser: every bit of the input moves about half of the output's.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The SplitMix64 stream of one key.
struct Draws(u64);

impl Draws {
    fn uniform(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        (mix(self.0) >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    fn between(&mut self, low: f64, high: f64) -> f64 {
        low + (high - low) * self.uniform()
    }

    /// Uniform in 0..bound (bound ≥ 1).
    fn below(&mut self, bound: u32) -> u32 {
        ((self.uniform() * f64::from(bound)) as u32).min(bound - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn imagenet_crop(seed: u64) -> RandomCrop {
        RandomCrop::new((0.08, 1.0), (3.0 / 4.0, 4.0 / 3.0), 0.5, seed).expect("valid")
    }

    fn sample(n: u128) -> Uuid {
        Uuid::from_u128(0x1234_5678_9abc_def0_0000_0000_0000_0000 + n)
    }

    #[test]
    fn bad_ranges_are_refused_with_the_values() {
        let refused = RandomCrop::new((0.5, 0.2), (0.75, 1.33), 0.5, 0).unwrap_err();
        assert_eq!(refused, "random crop scale must be 0 < min <= max <= 1, got (0.5, 0.2)");
        assert!(RandomCrop::new((0.08, 1.0), (1.5, 1.0), 0.5, 0).is_err());
        assert!(RandomCrop::new((0.0, 1.0), (0.75, 1.33), 0.5, 0).is_err());
        assert!(RandomCrop::new((0.08, 1.0), (0.75, 1.33), 1.5, 0).is_err());
        assert!(RandomCrop::new((0.08, f64::NAN), (0.75, 1.33), 0.5, 0).is_err());
    }

    #[test]
    fn crops_stay_inside_the_image_and_within_the_ranges_or_fall_back_to_the_centre() {
        let spec = imagenet_crop(7);
        for (width, height) in [(500, 375), (375, 500), (1, 1), (3, 1000), (2000, 17), (224, 224)] {
            for n in 0..2000 {
                let crop = spec.crop(sample_key(7, 0, &sample(n)), width, height);
                assert!(crop.width >= 1 && crop.height >= 1, "{crop:?}");
                let inside = crop.left + crop.width <= width && crop.top + crop.height <= height;
                assert!(inside, "{crop:?} of {width}x{height}");
            }
        }
        // Ordinary photographs: every crop is a drawn one, within the scale (up to rounding).
        for n in 0..2000 {
            let crop = spec.crop(sample_key(7, 0, &sample(n)), 500, 375);
            let fraction = f64::from(crop.width * crop.height) / (500.0 * 375.0);
            assert!((0.075..=1.0).contains(&fraction), "{crop:?}: {fraction}");
        }
    }

    #[test]
    fn an_image_far_outside_the_ratio_range_gets_the_centre_crop_of_the_nearest_ratio() {
        // 2000×17: no crop of ratio ≤ 4/3 and at least 8 % of the area fits in 17 rows.
        let crop = imagenet_crop(0).crop(sample_key(0, 0, &sample(1)), 2000, 17);
        assert_eq!((crop.left, crop.top, crop.width, crop.height), (988, 0, 23, 17));
    }

    #[test]
    fn the_same_seed_epoch_and_sample_give_the_same_crop_and_another_epoch_another() {
        let spec = imagenet_crop(42);
        let crops = |epoch: u64| -> Vec<Crop> {
            (0..200).map(|n| spec.crop(sample_key(42, epoch, &sample(n)), 500, 375)).collect()
        };
        assert_eq!(crops(3), crops(3));
        let moved = crops(3).iter().zip(crops(4)).filter(|(a, b)| **a != *b).count();
        assert!(moved > 190, "only {moved} of 200 crops differ between epochs");
        let other_seed: Vec<Crop> = (0..200).map(|n| spec.crop(sample_key(43, 3, &sample(n)), 500, 375)).collect();
        assert_ne!(crops(3), other_seed);
    }

    #[test]
    fn about_half_the_samples_are_flipped_and_none_or_all_at_the_extremes() {
        let flips = |probability: f64| {
            let spec = RandomCrop::new((0.08, 1.0), (0.75, 1.33), probability, 1).expect("valid");
            (0..10_000).filter(|&n| spec.crop(sample_key(1, 0, &sample(n)), 500, 375).flip).count()
        };
        assert!((4_800..=5_200).contains(&flips(0.5)), "{}", flips(0.5));
        assert_eq!(flips(0.0), 0);
        assert_eq!(flips(1.0), 10_000);
    }

    #[test]
    fn the_largest_dct_reduction_that_keeps_the_output_size_is_chosen() {
        assert_eq!(dct_denominator(1792, 1792, 224, 224), 8);
        assert_eq!(dct_denominator(1791, 1792, 224, 224), 4);
        assert_eq!(dct_denominator(500, 375, 224, 224), 1, "375 rows: not even half of them would keep 224");
        assert_eq!(dct_denominator(500, 448, 224, 224), 2);
        assert_eq!(dct_denominator(1000, 1000, 224, 112), 4, "each side by itself");
        assert_eq!(dct_denominator(100, 100, 224, 224), 1, "an upscale decodes at full size");
    }
}
