//! Texture memory scopes (TVM's Adreno builds): which scopes hold a tensor as a 2-D image, and how
//! a tensor's N-d shape folds into the image's width and height. The rule is TVM's, not a device's:
//! the last axis is the pixel (RGBA for four channels), the axes before the scope's separator
//! multiply into the height, the rest into the width. Kernels compiled for these scopes address
//! pixels by exactly this folding, so every allocation and copy of a texture follows it.

#![forbid(unsafe_code)]

use crate::error::{Error, Result};

/// A texture memory scope. The discriminants are upstream's `cl::BufferDescriptor` layout codes
/// (0 being a plain buffer).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Texture {
    /// `global.texture`: activations, `[N, C, H, W, c]` as `N*C*H` rows of `W` pixels.
    Activation = 1,
    /// `global.texture-weight`: weights, `[O, I, H, W, o]` as `O` rows of `I*H*W` pixels.
    Weight = 2,
    /// `global.texture-nhwc`: `[N, H, W, C, c]` as `N*H` rows of `W*C` pixels.
    Nhwc = 3,
}

impl Texture {
    /// The texture a memory scope names; `None` for plain memory (`""`, `"global"`). Any other
    /// scope is refused.
    pub fn of_scope(scope: &str) -> Result<Option<Texture>> {
        match scope {
            "" | "global" => Ok(None),
            "global.texture" => Ok(Some(Texture::Activation)),
            "global.texture-weight" => Ok(Some(Texture::Weight)),
            "global.texture-nhwc" => Ok(Some(Texture::Nhwc)),
            _ => Err(Error::value(format!(
                "memory scope '{scope}' is not supported: 'global', 'global.texture', 'global.texture-weight' and \
                 'global.texture-nhwc' are"
            ))),
        }
    }

    /// The texture of a descriptor's layout code (`None` for a buffer or an unknown code).
    pub fn of_layout(layout: i32) -> Option<Texture> {
        match layout {
            1 => Some(Texture::Activation),
            2 => Some(Texture::Weight),
            3 => Some(Texture::Nhwc),
            _ => None,
        }
    }

    pub fn layout(self) -> i32 {
        self as i32
    }

    pub fn scope(self) -> &'static str {
        match self {
            Texture::Activation => "global.texture",
            Texture::Weight => "global.texture-weight",
            Texture::Nhwc => "global.texture-nhwc",
        }
    }

    /// How many leading axes of a rank-`rank` shape make the image's height.
    fn separator(self, rank: usize) -> usize {
        match self {
            Texture::Activation => rank.saturating_sub(2),
            Texture::Weight => 1,
            Texture::Nhwc if rank == 3 => 1,
            Texture::Nhwc => 2,
        }
    }

    /// The image a tensor of `shape` occupies in this scope.
    pub fn extent(self, shape: &[i64]) -> Result<Extent> {
        let rank = shape.len();
        if rank < 3 {
            return Err(Error::value(format!(
                "a tensor in memory scope '{}' must have rank 3 or more (its last axis the pixel); shape {shape:?}",
                self.scope()
            )));
        }
        if shape.iter().any(|&d| d < 1) {
            return Err(Error::value(format!("a texture cannot have an empty or negative axis: shape {shape:?}")));
        }
        let sep = self.separator(rank);
        let product = |dims: &[i64]| dims.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d as usize));
        let (height, width) = (product(&shape[..sep]), product(&shape[sep..rank - 1]));
        match (height, width) {
            (Some(height), Some(width)) => Ok(Extent { width, height, channels: shape[rank - 1] as usize }),
            _ => Err(Error::value(format!("texture shape {shape:?} overflows"))),
        }
    }
}

/// The 2-D image a tensor folds into: `height` rows of `width` pixels of `channels` elements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Extent {
    pub width: usize,
    pub height: usize,
    pub channels: usize,
}

impl Extent {
    /// The smallest extent holding both (one image serving entries of both shapes).
    pub fn union(self, other: Extent) -> Extent {
        Extent {
            width: self.width.max(other.width),
            height: self.height.max(other.height),
            channels: self.channels.max(other.channels),
        }
    }

    /// Whether a tensor of extent `inner` fits in an image of this extent (from its corner).
    pub fn holds(self, inner: Extent) -> bool {
        inner.width <= self.width && inner.height <= self.height && inner.channels == self.channels
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folding_follows_each_scope() {
        let e = |t: Texture, s: &[i64]| t.extent(s).unwrap();
        assert_eq!(e(Texture::Activation, &[1, 4, 16, 8, 4]), Extent { width: 8, height: 64, channels: 4 });
        assert_eq!(e(Texture::Weight, &[4, 16, 3, 3, 4]), Extent { width: 144, height: 4, channels: 4 });
        assert_eq!(e(Texture::Nhwc, &[2, 5, 7, 3, 4]), Extent { width: 21, height: 10, channels: 4 });
        assert_eq!(e(Texture::Nhwc, &[5, 7, 4]), Extent { width: 7, height: 5, channels: 4 });
        // A pool entry's own shape: [height, width, channels] in every scope.
        for t in [Texture::Activation, Texture::Weight, Texture::Nhwc] {
            assert_eq!(e(t, &[6, 9, 4]), Extent { width: 9, height: 6, channels: 4 });
        }
        assert!(Texture::Activation.extent(&[4, 4]).is_err());
        assert!(Texture::Weight.extent(&[4, 0, 4]).is_err());
        assert!(Texture::Weight.extent(&[2, i64::MAX, 4, 4]).is_err());
    }

    #[test]
    fn scopes_and_layout_codes() {
        for t in [Texture::Activation, Texture::Weight, Texture::Nhwc] {
            assert_eq!(Texture::of_scope(t.scope()).unwrap(), Some(t));
            assert_eq!(Texture::of_layout(t.layout()), Some(t));
        }
        assert_eq!(Texture::of_scope("global").unwrap(), None);
        assert_eq!(Texture::of_scope("").unwrap(), None);
        assert!(Texture::of_scope("shared").is_err());
        assert_eq!(Texture::of_layout(0), None);
        let a = Extent { width: 3, height: 8, channels: 4 };
        let b = Extent { width: 5, height: 2, channels: 4 };
        assert_eq!(a.union(b), Extent { width: 5, height: 8, channels: 4 });
        assert!(a.union(b).holds(a) && a.union(b).holds(b) && !a.holds(b));
    }
}
