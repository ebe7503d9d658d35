//! The one stable hash of the crate: 64-bit FNV-1a. Used where a value must be the same in
//! every process and release (reservation taint values) or drawn deterministically from a
//! name (the simulating backends' per-node provisioning times and failures).

/// The 64-bit FNV-1a hash of `bytes`.
pub fn fnv1a64(bytes: impl IntoIterator<Item = u8>) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    bytes
        .into_iter()
        .fold(OFFSET, |h, b| (h ^ u64::from(b)).wrapping_mul(PRIME))
}

/// A number in `[0, 1)` drawn from `name` and `salt` by [`fnv1a64`]: the same name gives the
/// same draw in every process, different salts give independent-looking draws.
pub fn unit_draw(name: &str, salt: &str) -> f64 {
    let h = mix(fnv1a64(
        salt.bytes().chain(std::iter::once(0)).chain(name.bytes()),
    ));
    // The top 53 bits fill an f64 mantissa exactly.
    #[expect(clippy::cast_precision_loss, reason = "53 bits convert exactly")]
    let top = (h >> 11) as f64;
    top / (1u64 << 53) as f64
}

/// The splitmix64 finaliser: FNV-1a changes only a few high bits for names that differ in
/// their last characters (node names do), so the bits are mixed before they are read.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a64_matches_the_published_test_vectors() {
        // From the FNV reference test suite: "" and "a".
        assert_eq!(fnv1a64(*b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(*b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(*b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn unit_draws_are_stable_in_range_and_spread() {
        let draws: Vec<f64> = (0..1000)
            .map(|i| unit_draw(&format!("gpu-{i}"), "provision"))
            .collect();
        assert!(draws.iter().all(|d| (0.0..1.0).contains(d)));
        assert_eq!(unit_draw("gpu-7", "provision"), draws[7]);
        assert_ne!(unit_draw("gpu-7", "failure"), draws[7]);
        // Names that differ only in their last digits spread over the whole range.
        for quarter in 0..4 {
            let lo = f64::from(quarter) / 4.0;
            let n = draws
                .iter()
                .filter(|d| (lo..lo + 0.25).contains(*d))
                .count();
            assert!(
                (180..320).contains(&n),
                "{n} of 1000 in [{lo}, {lo} + 0.25)"
            );
        }
    }
}
