//! Input and output names to their indices. A host that names inputs looks one up on every
//! `set_input`, so the map hashes with FNV-1a, a few instructions per byte of a short name, rather
//! than the standard map's SipHash, which costs about as much as the rest of the call. SipHash
//! guards a map that strangers fill against collisions; these maps are filled once from the
//! model's own graph, and a lookup of a stranger's name only reads them.

#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// FNV-1a, 64 bits.
pub struct Fnv1a(u64);

impl Default for Fnv1a {
    fn default() -> Fnv1a {
        Fnv1a(0xcbf2_9ce4_8422_2325)
    }
}

impl Hasher for Fnv1a {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }

    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
}

/// A name to an index.
pub type NameMap = HashMap<String, usize, BuildHasherDefault<Fnv1a>>;

#[cfg(test)]
mod tests {
    use super::*;

    fn fnv(bytes: &[u8]) -> u64 {
        let mut h = Fnv1a::default();
        h.write(bytes);
        h.finish()
    }

    #[test]
    fn fnv1a_gives_the_published_values() {
        // The reference values of FNV-1a 64 (draft-eastlake-fnv, test vectors).
        assert_eq!(fnv(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn names_are_found_and_strangers_are_not() {
        let names: NameMap =
            ["data", "weight", "data_1", ""].iter().enumerate().map(|(i, n)| (n.to_string(), i)).collect();
        assert_eq!(names.get("data"), Some(&0));
        assert_eq!(names.get("data_1"), Some(&2));
        assert_eq!(names.get(""), Some(&3));
        assert_eq!(names.get("dat"), None);
        assert_eq!(names.get("data\u{0}"), None);
    }
}
