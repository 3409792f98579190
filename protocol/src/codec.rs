//! The control-message codec: bincode 2 through serde. This is the one file that knows the encoding of
//! control messages (Cyclon, overlay negotiation, replies), so swapping bincode for another format touches
//! nothing else. Chunk values do not go through here: they travel as raw little-endian f32 (`chunk.rs`).

use serde::{Serialize, de::DeserializeOwned};

use crate::{DecodeError, EncodeError};

/// Largest encoded control message. A Cyclon shuffle carries at most `control::MAX_SHUFFLE_ENTRIES` peer
/// entries (peer id + address, a few hundred bytes at most, see the node's `VnAddr`) plus ages, a few KiB; 64 KiB leaves room for
/// growth while keeping what one peer can make us buffer per message small.
pub const MAX_CONTROL_BYTES: usize = 64 * 1024;

/// bincode's standard configuration (little-endian, varint integers) with a decode limit, so a length
/// inside a message (a Vec's element count, a string's size) can never make the decoder allocate more
/// than the message could hold.
fn config() -> bincode::config::Configuration<
    bincode::config::LittleEndian,
    bincode::config::Varint,
    bincode::config::Limit<MAX_CONTROL_BYTES>,
> {
    bincode::config::standard().with_limit::<MAX_CONTROL_BYTES>()
}

/// Encodes a control message, refusing one over [`MAX_CONTROL_BYTES`].
pub fn encode_control<T: Serialize>(msg: &T) -> Result<Vec<u8>, EncodeError> {
    let bytes = bincode::serde::encode_to_vec(msg, config())
        .map_err(|e| EncodeError::Codec(e.to_string()))?;
    if bytes.len() > MAX_CONTROL_BYTES {
        return Err(EncodeError::TooLarge {
            what: "control message",
            got: bytes.len() as u64,
            max: MAX_CONTROL_BYTES as u64,
        });
    }
    Ok(bytes)
}

/// Decodes one complete control message: the whole of `bytes`, nothing left over.
pub fn decode_control<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, DecodeError> {
    if bytes.len() > MAX_CONTROL_BYTES {
        return Err(DecodeError::TooLarge {
            what: "control message",
            got: bytes.len() as u64,
            max: MAX_CONTROL_BYTES as u64,
        });
    }
    let (msg, used) = bincode::serde::decode_from_slice(bytes, config()).map_err(|e| match e {
        bincode::error::DecodeError::UnexpectedEnd { additional } => DecodeError::Truncated {
            what: "control message",
            need: bytes.len() + additional,
            have: bytes.len(),
        },
        bincode::error::DecodeError::LimitExceeded => DecodeError::TooLarge {
            what: "control message field",
            got: u64::MAX,
            max: MAX_CONTROL_BYTES as u64,
        },
        other => DecodeError::Malformed(other.to_string()),
    })?;
    if used != bytes.len() {
        return Err(DecodeError::TrailingBytes {
            what: "control message",
            extra: bytes.len() - used,
        });
    }
    Ok(msg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde::Deserialize;

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    enum Sample {
        Ping { round: u64, ttl: u8 },
        Entries(Vec<(u32, u16)>),
        Text(String),
    }

    fn sample() -> impl Strategy<Value = Sample> {
        prop_oneof![
            (any::<u64>(), any::<u8>()).prop_map(|(round, ttl)| Sample::Ping { round, ttl }),
            proptest::collection::vec(any::<(u32, u16)>(), 0..40).prop_map(Sample::Entries),
            ".{0,40}".prop_map(Sample::Text),
        ]
    }

    proptest! {
        #[test]
        fn control_messages_round_trip(msg in sample()) {
            let bytes = encode_control(&msg).unwrap();
            prop_assert_eq!(decode_control::<Sample>(&bytes).unwrap(), msg);
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = decode_control::<Sample>(&bytes);
        }
    }

    #[test]
    fn trailing_bytes_are_refused() {
        let mut bytes = encode_control(&Sample::Ping { round: 3, ttl: 1 }).unwrap();
        bytes.push(0);
        assert!(matches!(
            decode_control::<Sample>(&bytes),
            Err(DecodeError::TrailingBytes { extra: 1, .. })
        ));
    }

    #[test]
    fn a_lying_collection_length_does_not_allocate() {
        // Variant 1 (Entries) announcing u64::MAX-ish elements in 10 bytes: the limit refuses it.
        let bytes = [1u8, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x0F];
        let err = decode_control::<Sample>(&bytes).unwrap_err();
        assert!(
            matches!(
                err,
                DecodeError::TooLarge { .. }
                    | DecodeError::Truncated { .. }
                    | DecodeError::Malformed(_)
            ),
            "{err:?}"
        );
    }

    #[test]
    fn oversized_messages_are_refused_both_ways() {
        let big = Sample::Text("x".repeat(MAX_CONTROL_BYTES + 1));
        assert!(matches!(
            encode_control(&big),
            Err(EncodeError::TooLarge { .. }) | Err(EncodeError::Codec(_))
        ));
        let bytes = vec![0u8; MAX_CONTROL_BYTES + 1];
        assert!(matches!(
            decode_control::<Sample>(&bytes),
            Err(DecodeError::TooLarge { .. })
        ));
    }
}
