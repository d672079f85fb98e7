//! [`Redacted`]: a secret kept in a struct whose `Debug` must not show it.

/// A secret (a signing key) that `Debug` prints as `<redacted>`, so a struct holding one
/// can derive `Debug` without showing it.
#[derive(Clone)]
pub struct Redacted<T>(pub T);

impl<T> std::fmt::Debug for Redacted<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}
