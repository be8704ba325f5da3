//! New session ids for loops started without one.

/// A random version-4 UUID, lowercase and hyphenated, as Claude Code's
/// own session ids are.
pub(crate) fn new_uuid() -> String {
    uuid::Uuid::new_v4().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuids_are_v4_and_distinct() {
        let a = new_uuid();
        let b = new_uuid();
        assert_ne!(a, b);
        assert_eq!(a.len(), 36);
        assert_eq!(&a[14..15], "4");
        assert!(matches!(&a[19..20], "8" | "9" | "a" | "b"));
        assert!(ralph_core::observe::hook_input::is_valid_session_id(&a));
    }
}
