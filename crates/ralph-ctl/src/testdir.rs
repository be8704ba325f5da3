//! Temp folders for unit tests, removed on drop: `tempfile`'s, named after
//! the test that makes one.

/// A fresh, empty folder under the system's temp folder; `label` says which
/// test it is for.
pub(crate) fn new(label: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("ralph-{label}-"))
        .tempdir()
        .expect("a temp folder")
}
