//! Byte and substring searches for the transcript readers, without asking
//! the CPU what it can do.
//!
//! `memchr`'s own entry points choose AVX2 or SSE2 at their first call
//! through std's feature detection, a dozen `cpuid` instructions; in a
//! virtual machine each one traps to the hypervisor, and that first call
//! cost about 80 µs of a 3 ms stop (perf, 2-core VM). Every x86-64 CPU has
//! SSE2, so its routines are taken directly there; on other machines
//! `memchr`'s entry points (NEON on aarch64, also chosen without asking).

/// The position of the first `byte` in `haystack`.
pub fn find_byte(byte: u8, haystack: &[u8]) -> Option<usize> {
    #[cfg(target_arch = "x86_64")]
    if let Some(one) = memchr::arch::x86_64::sse2::memchr::One::new(byte) {
        return one.find(haystack);
    }
    memchr::memchr(byte, haystack)
}

/// The position of the last `byte` in `haystack`.
pub fn rfind_byte(byte: u8, haystack: &[u8]) -> Option<usize> {
    #[cfg(target_arch = "x86_64")]
    if let Some(one) = memchr::arch::x86_64::sse2::memchr::One::new(byte) {
        return one.rfind(haystack);
    }
    memchr::memrchr(byte, haystack)
}

/// The position of the first occurrence of `needle` in `haystack`.
pub fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    #[cfg(target_arch = "x86_64")]
    {
        // (It needs a needle of 2 bytes or more and a haystack at least
        // as long as it says; Rabin-Karp takes the rest.)
        if let Some(finder) = memchr::arch::x86_64::sse2::packedpair::Finder::new(needle)
            && haystack.len() >= finder.min_haystack_len()
        {
            return finder.find(haystack, needle);
        }
        memchr::arch::all::rabinkarp::Finder::new(needle).find(haystack, needle)
    }
    #[cfg(not(target_arch = "x86_64"))]
    memchr::memmem::find(haystack, needle)
}

/// Whether `needle` occurs in `haystack`.
pub fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    find(haystack, needle).is_some()
}

/// The position of every occurrence of `needle` in `haystack` that does not
/// overlap an earlier one, in order.
pub fn find_iter<'h>(haystack: &'h [u8], needle: &'h [u8]) -> impl Iterator<Item = usize> + 'h {
    let mut from = 0;
    std::iter::from_fn(move || {
        if from > haystack.len() {
            return None;
        }
        let at = from + find(&haystack[from..], needle)?;
        from = at + needle.len().max(1);
        Some(at)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn finds_what_memchr_finds_at_every_length() {
        let text = b"{\"type\":\"assistant\",\"is_error\": true}\n{\"is_error\":false}\n";
        for end in 0..=text.len() {
            let hay = &text[..end];
            assert_eq!(find_byte(b'\n', hay), memchr::memchr(b'\n', hay));
            assert_eq!(rfind_byte(b'\n', hay), memchr::memrchr(b'\n', hay));
            for needle in [&b"\"is_error\""[..], b"\"assistant\"", b"e", b"", b"zz"] {
                assert_eq!(find(hay, needle), memchr::memmem::find(hay, needle));
                assert_eq!(
                    find_iter(hay, needle).collect::<Vec<_>>(),
                    memchr::memmem::find_iter(hay, needle).collect::<Vec<_>>(),
                    "{needle:?} in {hay:?}"
                );
            }
        }
    }

    proptest! {
        #[test]
        fn agrees_with_memchr(hay in proptest::collection::vec(prop_oneof![Just(b'a'), Just(b'b'), Just(b'\n'), any::<u8>()], 0..300),
                              needle in proptest::collection::vec(prop_oneof![Just(b'a'), Just(b'b'), Just(b'\n')], 0..6)) {
            prop_assert_eq!(find_byte(b'\n', &hay), memchr::memchr(b'\n', &hay));
            prop_assert_eq!(rfind_byte(b'\n', &hay), memchr::memrchr(b'\n', &hay));
            prop_assert_eq!(find(&hay, &needle), memchr::memmem::find(&hay, &needle));
            prop_assert_eq!(
                find_iter(&hay, &needle).collect::<Vec<_>>(),
                memchr::memmem::find_iter(&hay, &needle).collect::<Vec<_>>()
            );
        }
    }
}
