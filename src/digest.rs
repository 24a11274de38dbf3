//! Content digests for files tied to what they were made from (a prepared params file names the
//! graph, the library and the weights its derived weights come from): XXH64, a fast
//! non-cryptographic 64-bit hash (about 10 GB/s here), so a check that reads every weight costs
//! a fraction of copying them. It guards against accidents (an edited or replaced file), not
//! against someone forging a file: whoever can write the params file can write its weights.

#![forbid(unsafe_code)]

const P1: u64 = 0x9E37_79B1_85EB_CA87;
const P2: u64 = 0xC2B2_AE3D_27D4_EB4F;
const P3: u64 = 0x1656_67B1_9E37_79F9;
const P4: u64 = 0x85EB_CA77_C2B2_AE63;
const P5: u64 = 0x27D4_EB2F_1656_67C5;

fn read64(b: &[u8]) -> u64 {
    u64::from_le_bytes(b[..8].try_into().expect("8 bytes"))
}

fn read32(b: &[u8]) -> u64 {
    u64::from(u32::from_le_bytes(b[..4].try_into().expect("4 bytes")))
}

fn round(acc: u64, input: u64) -> u64 {
    acc.wrapping_add(input.wrapping_mul(P2)).rotate_left(31).wrapping_mul(P1)
}

fn merge(acc: u64, v: u64) -> u64 {
    (acc ^ round(0, v)).wrapping_mul(P1).wrapping_add(P4)
}

/// XXH64 of `bytes` with seed 0.
pub fn xxh64(bytes: &[u8]) -> u64 {
    let len = bytes.len() as u64;
    let mut rest = bytes;
    let mut h = if rest.len() >= 32 {
        let mut v = [P1.wrapping_add(P2), P2, 0, 0u64.wrapping_sub(P1)];
        let mut stripes = rest.chunks_exact(32);
        for stripe in &mut stripes {
            // Four independent lanes: the multiplies of one stripe overlap.
            for (lane, word) in v.iter_mut().zip(stripe.chunks_exact(8)) {
                *lane = round(*lane, u64::from_le_bytes(word.try_into().expect("8 bytes")));
            }
        }
        rest = stripes.remainder();
        let mut h = v[0]
            .rotate_left(1)
            .wrapping_add(v[1].rotate_left(7))
            .wrapping_add(v[2].rotate_left(12))
            .wrapping_add(v[3].rotate_left(18));
        for lane in v {
            h = merge(h, lane);
        }
        h
    } else {
        P5
    };
    h = h.wrapping_add(len);
    while rest.len() >= 8 {
        h = (h ^ round(0, read64(rest))).rotate_left(27).wrapping_mul(P1).wrapping_add(P4);
        rest = &rest[8..];
    }
    if rest.len() >= 4 {
        h = (h ^ read32(rest).wrapping_mul(P1)).rotate_left(23).wrapping_mul(P2).wrapping_add(P3);
        rest = &rest[4..];
    }
    for &b in rest {
        h = (h ^ u64::from(b).wrapping_mul(P5)).rotate_left(11).wrapping_mul(P1);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(P2);
    h ^= h >> 29;
    h = h.wrapping_mul(P3);
    h ^ (h >> 32)
}

/// A digest of several named byte strings, in order: each name and its bytes' digest.
pub fn of_parts<'a>(parts: impl IntoIterator<Item = (&'a str, &'a [u8])>) -> u64 {
    of_hashed(parts.into_iter().map(|(name, bytes)| (name, xxh64(bytes))))
}

/// [`of_parts`] from each part's name and the [`xxh64`] of its bytes (parts too large to gather).
pub fn of_hashed<'a>(parts: impl IntoIterator<Item = (&'a str, u64)>) -> u64 {
    let mut all = Vec::new();
    for (name, hash) in parts {
        all.extend_from_slice(&(name.len() as u64).to_le_bytes());
        all.extend_from_slice(name.as_bytes());
        all.extend_from_slice(&hash.to_le_bytes());
    }
    xxh64(&all)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reference values of XXH64 (seed 0), covering every tail length path.
    #[test]
    fn matches_the_reference_values() {
        assert_eq!(xxh64(b""), 0xEF46_DB37_51D8_E999);
        assert_eq!(xxh64(b"a"), 0xD24E_C4F1_A98C_6E5B);
        assert_eq!(xxh64(b"abc"), 0x44BC_2CF5_AD77_0999);
        assert_eq!(xxh64(b"message digest"), 0x066E_D728_FCEE_B3BE);
        assert_eq!(xxh64(b"abcdefghijklmnopqrstuvwxyz"), 0xCFE1_F278_FA89_835C);
        assert_eq!(xxh64(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"), 0xAAA4_6907_D304_7814);
        assert_eq!(
            xxh64(b"12345678901234567890123456789012345678901234567890123456789012345678901234567890"),
            0xE04A_477F_19EE_145D
        );
    }

    #[test]
    fn parts_are_told_apart_by_name_order_and_bytes() {
        let d = of_parts([("a", &b"xy"[..]), ("b", &b"z"[..])]);
        assert_ne!(d, of_parts([("b", &b"z"[..]), ("a", &b"xy"[..])]));
        assert_ne!(d, of_parts([("a", &b"x"[..]), ("b", &b"yz"[..])]));
        assert_ne!(d, of_parts([("ab", &b"xy"[..]), ("", &b"z"[..])]));
        assert_eq!(d, of_parts([("a", &b"xy"[..]), ("b", &b"z"[..])]));
    }
}
