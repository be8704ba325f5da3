//! FNV-1a, 64 bits: the one content hash of ralph, stable across runs,
//! builds and platforms (what it names is kept in the state and the log).

/// An FNV-1a hasher.
#[derive(Clone, Copy, Debug)]
pub struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Self {
        Fnv::new()
    }
}

impl Fnv {
    /// The hasher before any byte.
    pub const fn new() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }

    /// Takes `bytes` in.
    pub fn bytes(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }

    /// Takes `word` in, little-endian.
    pub fn word(&mut self, word: u64) {
        self.bytes(&word.to_le_bytes());
    }

    /// The hash so far.
    pub fn finish(&self) -> u64 {
        self.0
    }
}

/// The hash of `bytes` as 16 hex digits.
pub fn hex(bytes: &[u8]) -> String {
    let mut hash = Fnv::new();
    hash.bytes(bytes);
    format!("{:016x}", hash.finish())
}

#[cfg(test)]
mod tests {
    #[test]
    fn known_values() {
        assert_eq!(super::hex(b""), "cbf29ce484222325");
        assert_eq!(super::hex(b"a"), "af63dc4c8601ec8c");
    }
}
