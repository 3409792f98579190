//! Typed errors of encoding and decoding.

/// Why bytes received from a peer were refused. Every decoder returns this; none panics.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// A length (frame, value count, collection) larger than the limit for its kind.
    #[error("{what} of {got} exceeds the limit of {max}")]
    TooLarge {
        what: &'static str,
        got: u64,
        max: u64,
    },
    /// Fewer bytes than the header or the announced length needs.
    #[error("truncated {what}: need {need} bytes, have {have}")]
    Truncated {
        what: &'static str,
        need: usize,
        have: usize,
    },
    /// Bytes left over after a complete message.
    #[error("{extra} trailing bytes after a complete {what}")]
    TrailingBytes { what: &'static str, extra: usize },
    /// A frame of a version this build does not speak.
    #[error("unsupported {what} version {got} (this build speaks {supported})")]
    Version {
        what: &'static str,
        got: u8,
        supported: u8,
    },
    /// A control message the codec could not parse.
    #[error("malformed control message: {0}")]
    Malformed(String),
    /// A well-formed message whose content breaks a protocol rule (e.g. a TTL above its maximum).
    #[error("invalid message: {0}")]
    Invalid(String),
}

/// Why a message could not be encoded: only a message over its size limit, which is a bug at the sender.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    #[error("{what} of {got} exceeds the limit of {max}")]
    TooLarge {
        what: &'static str,
        got: u64,
        max: u64,
    },
    #[error("control message could not be encoded: {0}")]
    Codec(String),
}
