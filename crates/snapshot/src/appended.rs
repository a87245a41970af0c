//! What an append to a generation's stream log did.

/// What `Generation::append_log` did with the bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Appended {
    /// Appended; the log is within its bounds.
    Taken,
    /// Appended, and the log reached its bound (bytes or age): the generation should be sealed.
    AtBound,
    /// Not appended: the generation was recorded sealed or failed.
    Refused,
}
